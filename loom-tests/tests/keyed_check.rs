//! loom models of weir-keyed's `Keyed::check`, the inlined fast path (lookup, the
//! state's check, the return when that decided everything), racing with what can
//! retire or replace the state it found: an eviction as the clock moves, a
//! removal, and a sweep between two first checks of a new key. Each check is
//! decided once, on the state it found or (after a retired or removed one) on the
//! key's fresh state.
#![cfg(all(loom, feature = "keyed"))]

use loom::sync::Arc;
use loom::thread;
use loom_tests::keyed::{Hasher, store};
use std::time::Duration;
use weir_gcra::GcraAlgorithm;
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{ManualClock, Nanos, Quota};

/// A burst of `burst`, one permit every 10 ns.
fn gcra(burst: u64) -> GcraAlgorithm {
    GcraAlgorithm::new(Quota::per_second(100_000_000).unwrap().with_burst(burst).unwrap(), Nanos::ZERO)
}

/// A burst of 1, spent at 0; a thread moves the clock to 10 ns (the key idle)
/// and sweeps while a check races; then one more check: exactly 2 admissions in
/// all, whichever state the racing check decided on.
#[test]
fn a_check_racing_an_eviction_as_the_clock_moves() {
    loom::model(|| {
        let clock = ManualClock::new();
        let config = KeyedConfig::builder(4).build().unwrap();
        let store = Arc::new(Keyed::with_hasher(gcra(1), config, clock.clone(), Hasher::default()));
        assert!(store.check(&1u8).is_allowed());
        let sweeper = {
            let (store, clock) = (store.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(Duration::from_nanos(10));
                store.sweep()
            })
        };
        let racing = store.check(&1).is_allowed();
        sweeper.join().unwrap();
        let last = store.check(&1).is_allowed();
        assert_eq!(1 + racing as u32 + last as u32, 2, "racing {racing}, last {last}");
    });
}

/// A removal (a reset) racing with a check of the same spent key at a frozen
/// clock: the reset's burst of 1 is admitted once, by the racing check or the
/// next one.
#[test]
fn a_check_racing_a_removal_is_decided_once() {
    loom::model(|| {
        let store = Arc::new(store(gcra(1)));
        assert!(store.check(&1).is_allowed()); // spent
        let remover = {
            let store = store.clone();
            thread::spawn(move || store.remove(&1))
        };
        let racing = store.check(&1).is_allowed();
        assert!(remover.join().unwrap());
        let last = store.check(&1).is_allowed();
        assert_eq!(racing as u32 + last as u32, 1, "racing {racing}, last {last}");
        assert!(store.check(&1).is_denied());
    });
}

/// Two first checks of a missing key racing with each other and a sweep (a burst
/// of 1, frozen clock): one admitted, one state stored.
#[test]
fn two_first_checks_racing_a_sweep_admit_once() {
    loom::model(|| {
        let store = Arc::new(store(gcra(1)));
        let other = {
            let store = store.clone();
            thread::spawn(move || store.check(&1).is_allowed())
        };
        let sweeper = {
            let store = store.clone();
            thread::spawn(move || store.sweep())
        };
        let mine = store.check(&1).is_allowed();
        let theirs = other.join().unwrap();
        sweeper.join().unwrap();
        assert_eq!(mine as u32 + theirs as u32, 1);
        assert_eq!(store.len(), 1);
    });
}
