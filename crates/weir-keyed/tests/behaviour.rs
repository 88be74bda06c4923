//! Every documented behaviour of the per-key store, with a hand-driven clock.

use std::sync::Arc;
use std::time::Duration;
use weir_gcra::Gcra;
use weir_keyed::{AtCapacity, Keyed, KeyedConfig, KeyedConfigError};
use weir_rl_core::{DenyReason, Limiter, ManualClock, Quota};

fn store(max_keys: usize, policy: AtCapacity) -> (Keyed<String, weir_gcra::GcraAlgorithm, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(max_keys).at_capacity(policy).build().unwrap();
    (Keyed::gcra_with_clock(Quota::per_second(2).unwrap(), config, clock.clone()), clock)
}

#[test]
fn keys_are_limited_independently() {
    let (s, clock) = store(100, AtCapacity::EvictIdle);
    assert!(s.check("a").is_allowed());
    assert!(s.check("a").is_allowed());
    let d = s.check("a");
    assert!(d.is_denied());
    assert_eq!(d.deny_reason(), Some(DenyReason::RateLimited));
    assert_eq!(d.retry_after(), Some(Duration::from_millis(500)));
    assert!(s.check("b").is_allowed(), "b has its own bucket");
    clock.advance(Duration::from_millis(500));
    assert!(s.check("a").is_allowed());
    assert_eq!(s.len(), 2);
}

#[test]
fn borrowed_keys_need_no_allocation_to_look_up() {
    let (s, _) = store(100, AtCapacity::EvictIdle);
    let owned = String::from("user-42");
    assert!(s.check(owned.as_str()).is_allowed()); // &str for a String key
    assert!(s.check(&owned).is_allowed());
    assert!(s.check("user-42").is_denied());
    assert_eq!(s.snapshot("user-42").remaining(), 0);
}

#[test]
fn an_absent_key_reads_as_fresh() {
    let (s, _) = store(100, AtCapacity::EvictIdle);
    let snap = s.snapshot("nobody");
    assert_eq!((snap.limit(), snap.remaining()), (2, 2));
    assert!(s.is_empty(), "a snapshot stores nothing");
}

#[test]
fn more_than_the_burst_is_an_error_and_stores_nothing() {
    let (s, _) = store(100, AtCapacity::EvictIdle);
    assert!(s.check_n("a", 3).is_err());
    assert!(s.is_empty());
    assert!(s.check_n("a", 2).unwrap().is_allowed());
}

#[test]
fn idle_keys_are_swept_without_changing_any_decision() {
    let (s, clock) = store(100, AtCapacity::EvictIdle);
    for key in ["a", "b", "c"] {
        assert!(s.check(key).is_allowed());
    }
    assert!(s.check_n("c", 1).unwrap().is_allowed()); // c is now empty
    clock.advance(Duration::from_millis(500)); // a and b full again; c has 1 of 2
    assert_eq!(s.sweep_all(), 2);
    assert_eq!(s.len(), 1);
    assert_eq!(s.snapshot("c").remaining(), 1, "c was kept: it was not idle");
    assert!(s.check_n("a", 2).unwrap().is_allowed(), "a evicted: a fresh bucket, as before eviction");
}

#[test]
fn the_store_never_holds_more_than_max_keys() {
    let (s, _) = store(8, AtCapacity::Deny);
    for i in 0..8 {
        assert!(s.check(&format!("k{i}")).is_allowed());
    }
    let d = s.check("one-too-many");
    assert!(d.is_denied());
    assert_eq!(d.deny_reason(), Some(DenyReason::KeyCapacity));
    assert_eq!(d.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(s.len(), 8);
    assert!(s.check("k3").is_allowed(), "stored keys still work");
}

#[test]
fn a_full_store_evicts_idle_keys_to_make_room() {
    let (s, clock) = store(8, AtCapacity::EvictIdle);
    for i in 0..8 {
        assert!(s.check_n(&format!("k{i}"), 2).unwrap().is_allowed());
    }
    assert_eq!(s.check("new").deny_reason(), Some(DenyReason::KeyCapacity), "nothing idle yet");
    clock.advance(Duration::from_secs(1)); // everything idle
    assert!(s.check("new").is_allowed(), "idle keys made room");
    assert!(s.len() <= 8);
}

#[test]
fn a_full_store_can_send_new_keys_to_a_shared_overflow_limiter() {
    let clock = ManualClock::new();
    let overflow: Arc<dyn Limiter + Send + Sync> =
        Arc::new(Gcra::with_clock(Quota::per_second(3).unwrap(), clock.clone()));
    let config = KeyedConfig::builder(2).at_capacity(AtCapacity::EvictIdleOrOverflow(overflow)).build().unwrap();
    let s: Keyed<u64, _, _> = Keyed::gcra_with_clock(Quota::per_second(2).unwrap(), config, clock.clone());
    assert!(s.check(&1).is_allowed());
    assert!(s.check(&2).is_allowed());
    // Keys 3.. do not fit: together they get the overflow limiter's 3.
    let admitted = (3..100u64).filter(|k| s.check(k).is_allowed()).count();
    assert_eq!(admitted, 3);
    assert_eq!(s.len(), 2);
}

#[test]
fn remove_forgets_a_key() {
    let (s, _) = store(100, AtCapacity::EvictIdle);
    assert!(s.check_n("a", 2).unwrap().is_allowed());
    assert!(s.remove("a"));
    assert!(!s.remove("a"));
    assert!(s.check_n("a", 2).unwrap().is_allowed());
    assert_eq!(s.len(), 1);
}

#[test]
fn for_each_reports_every_key() {
    let (s, _) = store(1_000, AtCapacity::EvictIdle);
    for i in 0..300 {
        let _ = s.check(&format!("k{i}"));
    }
    let mut seen = 0;
    s.for_each(|key, snap| {
        assert!(key.starts_with('k'));
        assert_eq!(snap.remaining(), 1);
        seen += 1;
    });
    assert_eq!(seen, 300);
}

#[test]
fn insertions_sweep_incrementally() {
    // 64 keys per sweep step: after enough churn, idle keys are gone without any
    // explicit sweep.
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(10_000).sweep_every(1).sweep_from(0).build().unwrap();
    let s: Keyed<u64, _, _> = Keyed::gcra_with_clock(Quota::per_second(1).unwrap(), config, clock.clone());
    for k in 0..1_000u64 {
        let _ = s.check(&k);
    }
    clock.advance(Duration::from_secs(2)); // all idle
    for k in 1_000..2_000u64 {
        let _ = s.check(&k); // each insertion sweeps one of the store's shards
    }
    assert!(s.len() < 2_000, "idle keys were swept: {}", s.len());
}

#[test]
fn a_background_sweeper_evicts_idle_keys() {
    let clock = ManualClock::new();
    let s: Arc<Keyed<u64, _, _>> = Arc::new(Keyed::gcra_with_clock(
        Quota::per_second(1).unwrap(),
        KeyedConfig::builder(1_000).build().unwrap(),
        clock.clone(),
    ));
    for k in 0..100u64 {
        let _ = s.check(&k);
    }
    clock.advance(Duration::from_secs(2));
    let sweeper = s.spawn_sweeper(Duration::from_millis(1)).unwrap();
    // Wait for the sweeper, at most a minute (a guard against a hang): this asserts
    // what it does, not how fast.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !s.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(sweeper);
    assert!(s.is_empty());
}

#[test]
fn configuration_errors_are_typed() {
    assert_eq!(KeyedConfig::builder(0).build().unwrap_err(), KeyedConfigError::ZeroMaxKeys);
    assert!(KeyedConfig::builder(usize::MAX).build().is_err());
    assert_eq!(KeyedConfig::builder(1).sweep_every(0).build().unwrap_err(), KeyedConfigError::ZeroSweepEvery);
    assert!(KeyedConfigError::ZeroMaxKeys.to_string().contains("at least one key"));
}
