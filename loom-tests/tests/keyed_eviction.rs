//! loom model of weir-keyed's eviction protocol: a sweep retires an idle state and
//! unlinks it while checks on the same key run. No admission may be lost (a check
//! decided on a state that was then dropped) and none granted twice: the total
//! admitted never exceeds what one state allows.
//!
//! papaya cannot run under loom, so the model keeps weir-keyed's logic over a
//! one-key map (a loom mutex around the current state): checks look the key up,
//! insert a fresh state if absent, check it, and, when denied on a retired state,
//! unlink it if it is still the current one and retry; the sweep retires, then
//! unlinks. The atomic protocol under test is the algorithm's (`Retire`), which is
//! exactly the code weir-keyed runs.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::one_key::{OneKeyStore, three_checks_racing_a_sweep};
use weir_core::{Algorithm, Nanos, Quota};
use weir_gcra::{GcraAlgorithm, GcraState};

fn gcra(burst: u64) -> GcraAlgorithm {
    let quota = Quota::per_second(100_000_000).unwrap().with_burst(burst).unwrap();
    GcraAlgorithm::new(quota, Nanos::ZERO)
}

fn gcra_store(burst: u64) -> OneKeyStore<GcraAlgorithm> {
    OneKeyStore::new(gcra(burst))
}

#[test]
fn a_sweep_racing_with_checks_never_loses_or_duplicates_an_admission() {
    three_checks_racing_a_sweep(|| gcra(2));
}

#[test]
fn a_state_in_use_is_never_retired() {
    loom::model(|| {
        let store = Arc::new(gcra_store(1));
        let checker = {
            let store = store.clone();
            thread::spawn(move || store.check(0))
        };
        store.sweep(0);
        let first = checker.join().unwrap();
        assert!(first);
        // The admission happened: whether the sweep ran before it (and dropped an idle
        // state) or after (and found it in use), the key now has no capacity left.
        assert!(!store.check(0));
    });
}

/// Promotion to a hot bucket racing with checks: every admission lands in exactly
/// one of the two buckets, so at a frozen clock the total admitted never exceeds the
/// burst and no permit is lost.
#[test]
fn promotion_racing_with_checks_loses_nothing() {
    use weir_gcra::{LeaseConfig, LeaseStripes};
    loom::model(|| {
        let quota = Quota::per_second(100_000_000).unwrap().with_burst(3).unwrap();
        let algorithm = Arc::new(GcraAlgorithm::new(quota, Nanos::ZERO));
        let state = Arc::new(algorithm.new_state());
        let lease = LeaseConfig::new(1).unwrap().with_max_lease(2).unwrap();
        let hot = Arc::new(LeaseStripes::new(lease, Nanos::ZERO));
        // weir-keyed's check: on a denial of a promoted state, route to the hot bucket.
        let check = |algorithm: &GcraAlgorithm, state: &GcraState, hot: &LeaseStripes| {
            let d = algorithm.check(state, &Nanos::new(0));
            if d.is_denied() && algorithm.is_promoted(state) {
                return hot.check_on(algorithm, 0, 1, &Nanos::new(0)).unwrap().is_allowed();
            }
            d.is_allowed()
        };
        let promoter = {
            let (algorithm, state, hot) = (algorithm.clone(), state.clone(), hot.clone());
            thread::spawn(move || algorithm.promote(&state, &hot))
        };
        let checker = {
            let (algorithm, state, hot) = (algorithm.clone(), state.clone(), hot.clone());
            thread::spawn(move || check(&algorithm, &state, &hot) as u64 + check(&algorithm, &state, &hot) as u64)
        };
        let mine = check(&algorithm, &state, &hot) as u64;
        let promoted = promoter.join().unwrap();
        let admitted = mine + checker.join().unwrap();
        assert!(promoted);
        assert!(admitted <= 3);
        hot.release(&algorithm, &Nanos::new(0));
        let left = algorithm.snapshot(hot.bucket(), Nanos::new(0)).remaining();
        assert_eq!(left + admitted, 3, "a permit was lost in the hand-over");
    });
}
