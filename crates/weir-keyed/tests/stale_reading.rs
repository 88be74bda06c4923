//! A check decides a key's fresh state only at a clock reading taken after the key
//! was found absent: an eviction between a check's reading and its lookup (the key
//! idle at a later reading) must not let a fresh state be decided at the earlier
//! one, which would admit a burst the key's own limiter never would.

use std::sync::Arc;
use std::time::Duration;
use weir_gcra::GcraAlgorithm;
use weir_keyed::{AtCapacity, Keyed, KeyedConfig};
use weir_rl_core::{Algorithm, Clock, Nanos, Quota};

mod support;
use support::HookClock;

type Store = Keyed<u64, GcraAlgorithm, HookClock>;

fn store(clock: &HookClock) -> Arc<Store> {
    let config = KeyedConfig::builder(100).at_capacity(AtCapacity::EvictIdle).build().unwrap();
    Arc::new(Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config, clock.clone()))
}

/// Quota 10/s, burst 10: 10 at 0; a check of 10 reads the clock at 0 and stalls
/// while the time reaches 1 s and a sweep evicts the idle key; then 10 at 1 s. The
/// key's own limiter, given the readings the store decided at, admits 20.
#[test]
fn an_eviction_between_a_reading_and_the_lookup_admits_no_extra_burst() {
    let clock = HookClock::new();
    let store = store(&clock);
    assert!(store.check_n(&7, 10).unwrap().is_allowed());

    let (sweeper, time) = (store.clone(), clock.inner.clone());
    let evicted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = evicted.clone();
    clock.arm_stale(1, move || {
        time.advance(Duration::from_secs(1));
        seen.store(sweeper.sweep_all(), std::sync::atomic::Ordering::SeqCst);
    });
    let stalled = store.check_n(&7, 10).unwrap();
    assert_eq!(evicted.load(std::sync::atomic::Ordering::SeqCst), 1, "the sweep evicted the idle key");
    let later = store.check_n(&7, 10).unwrap();

    let admitted = 10 + [&stalled, &later].iter().filter(|d| d.is_allowed()).count() * 10;
    assert_eq!(
        admitted,
        20,
        "the stalled check admitted {:?}, the later one {:?}",
        stalled.is_allowed(),
        later.is_allowed()
    );
    // The key's own limiter: the stalled check can only be decided at 1 s (the key
    // was idle at 1 s, so no reading before it may decide a fresh state).
    let reference = GcraAlgorithm::new(Quota::per_second(10).unwrap(), Nanos::new(0));
    let state = reference.new_state();
    assert!(reference.check_n(&state, 10, &Nanos::new(0)).unwrap().is_allowed());
    let one_second = clock.inner.now();
    assert_eq!(reference.check_n(&state, 10, &one_second).unwrap().is_allowed(), stalled.is_allowed());
    assert_eq!(reference.check_n(&state, 10, &one_second).unwrap().is_allowed(), later.is_allowed());
}

/// The same race where another thread inserts the key again (and has not checked
/// it yet) between the eviction and the stalled check's lookup: the stalled check
/// finds that fresh state and must not decide it at its stale reading either.
#[test]
fn a_fresh_state_inserted_by_another_check_is_not_decided_at_a_stale_reading() {
    let clock = HookClock::new();
    let store = store(&clock);
    assert!(store.check_n(&7, 10).unwrap().is_allowed());

    let (other, time) = (store.clone(), clock.inner.clone());
    clock.arm_stale(1, move || {
        time.advance(Duration::from_secs(1));
        assert_eq!(other.sweep_all(), 1);
        // Another check of the key, at 1 s, reinserts it and takes 10.
        assert!(other.check_n(&7, 10).unwrap().is_allowed());
    });
    let stalled = store.check_n(&7, 10).unwrap();
    assert!(stalled.is_denied(), "20 admitted in 1 s by a burst of 10 at 10/s, then 10 more");
    assert!(store.check(&7).is_denied());
}
