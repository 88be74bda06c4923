//! Keys that all hash alike (a hasher that returns one value: what a flood of keys
//! chosen to collide makes of a fast hash at worst). Their shard hardens (hashes
//! its keys with SipHash from then on, see `KeyHasher`), and every operation of
//! the store still decides exactly as a store of well-spread keys: each key its
//! own burst, nothing lost or held twice across the hardening, removals, sweeps
//! and hot keys. With the `metrics` feature, the hardening is counted once.

mod support;

use std::time::Duration;
use support::Colliding;
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{HotKeys, Keyed, KeyedConfig};
use weir_rl_core::{Clock, ManualClock, Quota};

const KEYS: u64 = if cfg!(miri) { 100 } else { 5_000 };

fn store(clock: &ManualClock) -> Keyed<u64, GcraAlgorithm, ManualClock, Colliding> {
    let algorithm = GcraAlgorithm::new(Quota::per_second(3).unwrap(), clock.now());
    Keyed::with_hasher(algorithm, KeyedConfig::builder(2 * KEYS as usize).build().unwrap(), clock.clone(), Colliding)
}

#[test]
fn colliding_keys_are_each_limited_exactly_across_their_shards_hardening() {
    let clock = ManualClock::new();
    let store = store(&clock);
    for key in 0..KEYS {
        for _ in 0..3 {
            assert!(store.check(&key).is_allowed(), "key {key}");
        }
        assert!(store.check(&key).is_denied(), "key {key}");
    }
    assert_eq!(store.len(), KEYS as usize);
    for key in 0..KEYS {
        assert!(store.check(&key).is_denied(), "key {key} held twice, or lost");
        assert_eq!(store.snapshot(&key).remaining(), 0);
    }
    let mut seen = 0;
    store.for_each(|_, _| seen += 1);
    assert_eq!(seen, KEYS as usize);
    for key in (0..KEYS).step_by(2) {
        assert!(store.remove(&key));
    }
    assert_eq!(store.len(), KEYS as usize / 2);
    clock.advance(Duration::from_secs(2)); // every bucket full again: idle
    assert_eq!(store.sweep_all(), KEYS as usize / 2);
    assert!(store.is_empty());
    for key in 0..KEYS {
        assert!(store.check(&key).is_allowed(), "key {key} after the sweep");
    }
    assert_eq!(store.len(), KEYS as usize);
}

#[test]
fn colliding_hot_keys_keep_their_burst() {
    let clock = ManualClock::new();
    let lease = LeaseConfig::builder().stripes(1).max_lease(1).build().unwrap();
    let store = store(&clock).with_hot_keys(HotKeys::builder().lease(lease).max_hot_keys(16).build().unwrap());
    for key in 0..KEYS {
        assert!(store.check(&key).is_allowed());
    }
    // Promoted after their shard hardened: their hot stripes live in the hot keys'
    // own shard, found by its own hash.
    for key in 0..16 {
        assert!(store.promote(&key), "key {key}");
        assert!(store.is_hot(&key));
        assert!(store.check(&key).is_allowed());
        assert!(store.check(&key).is_allowed());
        assert!(store.check(&key).is_denied(), "hot key {key} admitted past its burst");
    }
}

#[cfg(feature = "metrics")]
#[test]
fn the_hardening_is_counted_once() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let hardened = |spread: bool| {
        let config = KeyedConfig::builder(2 * KEYS as usize).name(if spread { "spread" } else { "colliding" });
        metrics::with_local_recorder(&recorder, || {
            if spread {
                let store: Keyed<u64, _, _> =
                    Keyed::gcra_with_clock(Quota::per_second(3).unwrap(), config.build().unwrap(), clock.clone());
                (0..KEYS).for_each(|key| assert!(store.check(&key).is_allowed()));
            } else {
                let algorithm = GcraAlgorithm::new(Quota::per_second(3).unwrap(), clock.now());
                let store = Keyed::with_hasher(algorithm, config.build().unwrap(), clock.clone(), Colliding);
                (0..KEYS).for_each(|key| assert!(store.check(&key).is_allowed()));
            }
        });
        let name = if spread { "store=spread" } else { "store=colliding" };
        snapshotter.snapshot().into_vec().into_iter().find_map(|(key, _, _, value)| {
            let labels: Vec<String> = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            match value {
                DebugValue::Counter(n)
                    if key.key().name() == "weir_keyed_hardened_shards_total" && labels == [name.to_owned()] =>
                {
                    Some(n)
                }
                _ => None,
            }
        })
    };
    assert_eq!(hardened(false), Some(1));
    assert_eq!(hardened(true), Some(0), "the default hasher spread the keys");
}
