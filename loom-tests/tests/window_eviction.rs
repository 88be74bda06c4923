//! loom model of weir-keyed's eviction protocol over the window algorithms: a sweep
//! retires an idle window state and unlinks it while checks of the same key run; no
//! admission is lost and none granted twice (see `keyed_eviction.rs` for GCRA and
//! for why the map is modelled as one slot).
#![cfg(all(loom, feature = "window"))]

use loom::sync::Arc;
use loom::thread;
use loom_tests::one_key::{OneKeyStore, three_checks_racing_a_sweep};
use weir_core::{Nanos, Quota};
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
        let store = Arc::new(OneKeyStore::new(algorithm));
        let checker = {
            let store = store.clone();
            thread::spawn(move || store.check(0) as u32 + store.check(0) as u32)
        };
        store.sweep(0);
        let mine = store.check(0) as u32;
        let admitted = checker.join().unwrap() + mine;
        assert_eq!(admitted, 2);
    });
}
