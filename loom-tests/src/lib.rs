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
#[cfg(loom)]
pub use history::RealTime;
pub use history::{Span, interleavings, linearizations};

/// Stores of weir-keyed for the eviction models (`keyed_eviction.rs`,
/// `window_eviction.rs`): the production `Keyed` (its `check_n`, sweeps, `remove`
/// and promotion) over the small model map weir-keyed uses under loom in place of
/// its table (the table's own protocol is modelled in `keyed_eviction.rs`'s
/// `mod table`), on a clock frozen at 0, and one model on a clock that moves
/// (`keyed_moving_clock.rs`).
#[cfg(all(loom, feature = "keyed"))]
pub mod keyed {
    use loom::sync::Arc;
    use std::hash::{BuildHasherDefault, DefaultHasher};
    use weir_keyed::{Keyed, KeyedAlgorithm, KeyedConfig};
    use weir_rl_core::Nanos;

    /// The hasher of the models' stores: fixed keys, so that every execution of a
    /// model hashes (and so probes the table) alike, as loom's replay requires.
    pub type Hasher = BuildHasherDefault<DefaultHasher>;

    /// A store of at most 4 keys (one shard, so one `sweep` sweeps every key)
    /// applying `algorithm` on a clock frozen at 0.
    pub fn store<A>(algorithm: A) -> Keyed<u8, A, Nanos, Hasher>
    where
        A: KeyedAlgorithm,
        A::State: Send + Sync + 'static,
    {
        Keyed::with_hasher(algorithm, KeyedConfig::builder(4).build().unwrap(), Nanos::new(0), Hasher::default())
    }

    /// Three checks of one key at one instant, against a state admitting exactly 2,
    /// racing with a sweep of the store: exactly 2 are admitted, whether or not the
    /// (then idle) state was evicted in between.
    pub fn three_checks_racing_a_sweep<A>(make: fn() -> A)
    where
        A: KeyedAlgorithm + Send + Sync + 'static,
        A::State: Send + Sync + 'static,
    {
        loom::model(move || {
            let store = Arc::new(store(make()));
            let checker = {
                let store = store.clone();
                loom::thread::spawn(move || store.check(&1).is_allowed() as u32 + store.check(&1).is_allowed() as u32)
            };
            let sweeper = {
                let store = store.clone();
                loom::thread::spawn(move || store.sweep())
            };
            let mine = store.check(&1).is_allowed() as u32;
            let admitted = checker.join().unwrap() + mine;
            sweeper.join().unwrap();
            assert_eq!(admitted, 2);
        });
    }

    /// A check of a key racing with a sweep of the same key while the clock moves:
    /// the key's limit is spent at 0; one thread moves the clock to `idle_at` (the key
    /// is then idle) and sweeps; another checks the limit again, meanwhile; then the
    /// limit is checked once more at `idle_at`. The key's own limiter, given the
    /// readings the store decided at, admits the limit twice in every interleaving:
    /// the racing check was decided at 0 (denied) or at `idle_at` (admitted, and the
    /// last check denied). A store that decided a fresh state (after the eviction)
    /// at a reading from before it would admit three times.
    pub fn a_check_racing_an_eviction_as_the_clock_moves<A>(make: fn() -> A, idle_at: std::time::Duration)
    where
        A: KeyedAlgorithm + Send + Sync + 'static,
        A::State: Send + Sync + 'static,
    {
        use weir_rl_core::ManualClock;
        loom::model(move || {
            let clock = ManualClock::new();
            let algorithm = make();
            let limit = algorithm.limit();
            let store = Arc::new(Keyed::with_hasher(
                algorithm,
                KeyedConfig::builder(4).build().unwrap(),
                clock.clone(),
                Hasher::default(),
            ));
            assert!(store.check_n(&1, limit).unwrap().is_allowed());
            let sweeper = {
                let (store, clock) = (store.clone(), clock.clone());
                loom::thread::spawn(move || {
                    clock.advance(idle_at);
                    store.sweep()
                })
            };
            let racing = store.check_n(&1, limit).unwrap().is_allowed();
            sweeper.join().unwrap();
            let last = store.check_n(&1, limit).unwrap().is_allowed();
            let admitted = 1 + racing as u32 + last as u32;
            assert_eq!(
                admitted, 2,
                "the limit admitted {admitted} times in one period (racing: {racing}, last: {last})"
            );
        });
    }
}
