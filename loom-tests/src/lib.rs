//! loom models of every atomic protocol in weir, and the helpers they share.
//!
//! Run them with `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --profile loom`
//! (`.ci/run` bounds `LOOM_MAX_PREEMPTIONS`). Each model is small (at most 3
//! threads, a few operations) and passes time in explicitly.
//!
//! The central check is linearizability against a sequential reference: the results
//! the threads observed must be exactly the results of running the same operations
//! one at a time in *some* order that respects each thread's program order and
//! real-time precedence ([`history`]).

pub mod history;
pub use history::{Span, interleavings, linearizations};
#[cfg(loom)]
pub use history::RealTime;

/// weir-keyed's eviction protocol over a one-key map, for the eviction models
/// (`keyed_eviction.rs`, `window_eviction.rs`): papaya cannot run under loom, so the
/// map is a loom mutex around the key's current state, and the protocol under test
/// is the algorithm's [`Retire`](weir_core::Retire), exactly the code weir-keyed runs.
#[cfg(loom)]
pub mod one_key {
    use loom::sync::{Arc, Mutex};
    use weir_core::{Algorithm, Nanos, Retire};

    /// One key's slot in a per-key store.
    #[derive(Debug)]
    pub struct OneKeyStore<A: Algorithm> {
        /// The algorithm every state of the key runs.
        pub algorithm: A,
        slot: Mutex<Option<Arc<A::State>>>,
    }

    impl<A: Retire> OneKeyStore<A> {
        /// An empty store.
        pub fn new(algorithm: A) -> Self {
            Self { algorithm, slot: Mutex::new(None) }
        }

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

        /// weir-keyed's `check_n` loop, for a cost of 1 at `now`.
        pub fn check(&self, now: u64) -> bool {
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

        /// weir-keyed's `sweep_shard` for this key, at `now`.
        pub fn sweep(&self, now: u64) {
            let state = self.slot.lock().unwrap().clone();
            if let Some(state) = state
                && self.algorithm.try_retire(&state, Nanos::new(now))
            {
                self.unlink(&state);
            }
        }
    }

    /// Three checks of one key at one instant, against a state admitting exactly 2,
    /// racing with a sweep of that key: exactly 2 are admitted, whether or not the
    /// (then idle) state was evicted in between.
    pub fn three_checks_racing_a_sweep<A>(make: fn() -> A)
    where
        A: Retire + Send + Sync + 'static,
        A::State: Send + Sync,
    {
        loom::model(move || {
            let store = Arc::new(OneKeyStore::new(make()));
            let checker = {
                let store = store.clone();
                loom::thread::spawn(move || store.check(0) as u32 + store.check(0) as u32)
            };
            let sweeper = {
                let store = store.clone();
                loom::thread::spawn(move || store.sweep(0))
            };
            let mine = store.check(0) as u32;
            let admitted = checker.join().unwrap() + mine;
            sweeper.join().unwrap();
            assert_eq!(admitted, 2);
        });
    }
}
