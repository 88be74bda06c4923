//! loom models of weir-keyed's store over the window algorithms: a sweep retires an
//! idle window state and unlinks it while checks of the same key run; no admission
//! is lost and none granted twice. The store is the production `Keyed` (see
//! `keyed_eviction.rs` for GCRA and for the model map it runs on under loom).
#![cfg(all(loom, feature = "window", feature = "keyed"))]

use loom::sync::Arc;
use loom::thread;
use loom_tests::keyed::{store, three_checks_racing_a_sweep};
use weir_rl_core::{Nanos, Quota};
use weir_window::fixed::FixedWindowAlgorithm;
use weir_window::log::SlidingLogAlgorithm;
use weir_window::sliding::SlidingWindowAlgorithm;

fn quota() -> Quota {
    Quota::per_second(2).unwrap()
}

#[test]
fn fixed_window_eviction_racing_with_checks() {
    three_checks_racing_a_sweep(|| FixedWindowAlgorithm::new(quota(), Nanos::ZERO).unwrap());
}

#[test]
fn sliding_window_eviction_racing_with_checks() {
    three_checks_racing_a_sweep(|| SlidingWindowAlgorithm::new(quota(), Nanos::ZERO).unwrap());
}

/// The log's sequence lock makes a reader spin while a write is under way, and
/// loom's scheduler cannot bound models with two spinning threads: two threads here,
/// one of which sweeps and then checks (still three checks against a limit of 2).
#[test]
fn sliding_log_eviction_racing_with_checks() {
    loom::model(|| {
        let algorithm = SlidingLogAlgorithm::new(quota(), Nanos::ZERO).unwrap();
        let store = Arc::new(store(algorithm));
        let checker = {
            let store = store.clone();
            thread::spawn(move || store.check(&1).is_allowed() as u32 + store.check(&1).is_allowed() as u32)
        };
        store.sweep();
        let mine = store.check(&1).is_allowed() as u32;
        let admitted = checker.join().unwrap() + mine;
        assert_eq!(admitted, 2);
    });
}
