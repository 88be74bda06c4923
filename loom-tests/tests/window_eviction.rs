//! loom model of weir-keyed's eviction protocol over the window algorithms: a sweep
//! retires an idle window state and unlinks it while checks of the same key run; no
//! admission is lost and none granted twice (see `keyed_eviction.rs` for GCRA and
//! for why the map is modelled as one slot).
#![cfg(all(loom, feature = "window"))]

use loom::sync::{Arc, Mutex};
use loom::thread;
use weir_core::{Algorithm, Nanos, Quota, Retire};
use weir_window::fixed::FixedWindowAlgorithm;
use weir_window::log::SlidingLogAlgorithm;
use weir_window::sliding::SlidingWindowAlgorithm;

struct OneKeyStore<A: Algorithm> {
    algorithm: A,
    slot: Mutex<Option<Arc<A::State>>>,
}

impl<A: Retire> OneKeyStore<A> {
    fn lookup_or_insert(&self) -> Arc<A::State> {
        let mut slot = self.slot.lock().unwrap();
        slot.get_or_insert_with(|| Arc::new(self.algorithm.new_state())).clone()
    }

    fn unlink(&self, state: &Arc<A::State>) {
        let mut slot = self.slot.lock().unwrap();
        if slot.as_ref().is_some_and(|current| Arc::ptr_eq(current, state)) {
            *slot = None;
        }
    }

    /// weir-keyed's `check_n` loop.
    fn check(&self, now: u64) -> bool {
        loop {
            let state = self.lookup_or_insert();
            let decision = self.algorithm.check(&state, &Nanos::new(now));
            if decision.is_denied() && self.algorithm.is_retired(&state) {
                self.unlink(&state);
                continue;
            }
            return decision.is_allowed();
        }
    }

    /// weir-keyed's `sweep_shard` for this key.
    fn sweep(&self, now: u64) {
        let state = self.slot.lock().unwrap().clone();
        if let Some(state) = state
            && self.algorithm.try_retire(&state, Nanos::new(now))
        {
            self.unlink(&state);
        }
    }
}

/// Three checks at one instant (limit 2) racing with a sweep: exactly 2 admitted.
fn race<A: Retire + Send + Sync + 'static>(make: fn() -> A)
where
    A::State: Send + Sync,
{
    loom::model(move || {
        let store = Arc::new(OneKeyStore { algorithm: make(), slot: Mutex::new(None) });
        let checker = {
            let store = store.clone();
            thread::spawn(move || store.check(0) as u32 + store.check(0) as u32)
        };
        let sweeper = {
            let store = store.clone();
            thread::spawn(move || store.sweep(0))
        };
        let mine = store.check(0) as u32;
        let admitted = checker.join().unwrap() + mine;
        sweeper.join().unwrap();
        assert_eq!(admitted, 2);
    });
}

fn quota() -> Quota {
    Quota::per_second(2).unwrap()
}

#[test]
fn fixed_window_eviction_racing_with_checks() {
    race(|| FixedWindowAlgorithm::new(quota(), Nanos::ZERO).unwrap());
}

#[test]
fn sliding_window_eviction_racing_with_checks() {
    race(|| SlidingWindowAlgorithm::new(quota(), Nanos::ZERO).unwrap());
}

/// The log's sequence lock makes a reader spin while a write is under way, and
/// loom's scheduler cannot bound models with two spinning threads: two threads here,
/// one of which sweeps and then checks (still three checks against a limit of 2).
#[test]
fn sliding_log_eviction_racing_with_checks() {
    loom::model(|| {
        let algorithm = SlidingLogAlgorithm::new(quota(), Nanos::ZERO).unwrap();
        let store = Arc::new(OneKeyStore { algorithm, slot: Mutex::new(None) });
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
