//! The store's metrics (the `metrics` feature), read from a debugging recorder
//! after known traffic on a manual clock. Each test builds its store under a
//! recorder of its own (`with_local_recorder`), so tests running in parallel do not
//! see one another's metrics.

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::collections::HashMap;
use std::time::Duration;
use weir_gcra::LeaseConfig;
use weir_keyed::{AtCapacity, HotKeys, Keyed, KeyedConfig};
use weir_rl_core::{DenyReason, ManualClock, Quota};

/// Every series of one snapshot, by name and sorted labels (`k=v,k=v`). A
/// snapshot reads counters and resets them.
fn read(snapshotter: &Snapshotter) -> HashMap<(String, String), f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let mut labels: Vec<String> = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            labels.sort();
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            };
            ((key.key().name().to_owned(), labels.join(",")), value)
        })
        .collect()
}

fn get(values: &HashMap<(String, String), f64>, name: &str, labels: &str) -> f64 {
    *values.get(&(name.to_owned(), labels.to_owned())).unwrap_or_else(|| panic!("no {name}{{{labels}}} in {values:?}"))
}

#[test]
fn keys_evictions_and_capacity_denials_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(2).name("per_ip").at_capacity(AtCapacity::Deny).build().unwrap();
    let store: Keyed<u64, _, _> = metrics::with_local_recorder(&recorder, || {
        Keyed::gcra_with_clock(Quota::per_second(1).unwrap(), config, clock.clone())
    });
    assert_eq!(store.config().name(), "per_ip");
    assert!(store.check(&1).is_allowed());
    assert!(store.check(&2).is_allowed());
    assert!(store.check(&1).is_denied(), "a rate denial is not a capacity denial");
    let full = store.check(&3);
    assert_eq!(full.deny_reason(), Some(DenyReason::KeyCapacity));
    let values = read(&snapshotter);
    assert_eq!(get(&values, "weir_keyed_keys", "store=per_ip"), 2.0);
    assert_eq!(get(&values, "weir_keyed_capacity_denials_total", "store=per_ip"), 1.0);
    assert_eq!(get(&values, "weir_keyed_evictions_total", "cause=sweep,store=per_ip"), 0.0);

    clock.advance(Duration::from_secs(1)); // both keys idle
    assert!(store.remove(&1));
    assert_eq!(store.sweep_all(), 1);
    let shards = store.config().max_keys().div_ceil(440);
    let values = read(&snapshotter);
    assert_eq!(get(&values, "weir_keyed_evictions_total", "cause=removed,store=per_ip"), 1.0);
    assert_eq!(get(&values, "weir_keyed_evictions_total", "cause=sweep,store=per_ip"), 1.0);
    assert_eq!(get(&values, "weir_keyed_shard_sweeps_total", "store=per_ip"), shards as f64);
    assert_eq!(get(&values, "weir_keyed_keys", "store=per_ip"), 0.0);
}

#[test]
fn a_full_store_making_room_counts_its_eviction() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(1).build().unwrap();
    let store: Keyed<u64, _, _> = metrics::with_local_recorder(&recorder, || {
        Keyed::gcra_with_clock(Quota::per_second(1).unwrap(), config, clock.clone())
    });
    assert!(store.check(&1).is_allowed());
    assert_eq!(store.check(&2).deny_reason(), Some(DenyReason::KeyCapacity), "1 is not idle yet");
    clock.advance(Duration::from_secs(1));
    assert!(store.check(&2).is_allowed(), "1 is idle: evicted to make room");
    let values = read(&snapshotter);
    assert_eq!(get(&values, "weir_keyed_evictions_total", "cause=room,store=default"), 1.0);
    assert_eq!(get(&values, "weir_keyed_capacity_denials_total", "store=default"), 1.0);
    assert_eq!(get(&values, "weir_keyed_keys", "store=default"), 1.0);
    assert!(get(&values, "weir_keyed_shard_sweeps_total", "store=default") >= 1.0);
}

#[test]
fn a_check_that_promotes_a_key_counts_it() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let hot = HotKeys::builder()
        .lease(LeaseConfig::builder().stripes(2).max_lease(4).build().unwrap())
        .after_lost_races(1)
        .build()
        .unwrap();
    let store = metrics::with_local_recorder(&recorder, || {
        let config = KeyedConfig::builder(100).name("tenants").build().unwrap();
        Keyed::<u64, _, _>::gcra_with_clock(Quota::per_second(1_000_000).unwrap(), config, clock.clone())
            .with_hot_keys(hot)
    });
    // Lost races happen only between threads: hammer one key from two until it
    // is hot (each check that loses a race asks for a promotion).
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..100_000 {
                    if store.is_hot(&7) {
                        break;
                    }
                    let _ = store.check(&7);
                }
            });
        }
    });
    if !store.is_hot(&7) {
        // No race was lost (a single core): nothing was promoted, nothing counted.
        let values = read(&snapshotter);
        assert_eq!(get(&values, "weir_keyed_hot_promotions_total", "store=tenants"), 0.0);
        return;
    }
    let values = read(&snapshotter);
    let promotions = get(&values, "weir_keyed_hot_promotions_total", "store=tenants");
    assert!((1.0..=2.0).contains(&promotions), "{promotions}");
    assert_eq!(get(&values, "weir_keyed_hot_keys", "store=tenants"), 1.0);
}

#[test]
fn a_store_built_without_a_recorder_records_nothing_and_decides_alike() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let store: Keyed<u64, _, _> = Keyed::gcra_with_clock(
        Quota::per_second(1).unwrap(),
        KeyedConfig::builder(10).build().unwrap(),
        ManualClock::new(),
    );
    metrics::with_local_recorder(&recorder, || {
        assert!(store.check(&1).is_allowed());
        assert!(store.check(&1).is_denied());
    });
    assert!(read(&snapshotter).is_empty());
}
