//! Parallel sweeps and iteration over a store's shards, on rayon's thread pool (the
//! `rayon` feature): for large stores, where a sweep or a metrics pass over every
//! key is long enough to spread over cores.

use crate::{HotKeyMode, Keyed, KeyedAlgorithm};
use rayon::prelude::*;
use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, PoisonError};
use weir_rl_core::{Clock, Snapshot};

/// Shards handed to one rayon task at least: enough work per task to amortize the
/// task and its epoch guard (one shard holds about 440 keys at full capacity).
const SHARDS_PER_TASK: usize = 8;

impl<K, A, C, S, H> Keyed<K, A, C, S, H>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: KeyedAlgorithm + Sync,
    A::State: Send + Sync + 'static,
    C: Clock + Sync,
    S: BuildHasher + Clone + Sync,
    H: HotKeyMode<A>,
{
    /// [`sweep_all`](Self::sweep_all) with the shards spread over rayon's thread
    /// pool: returns how many keys were evicted. Runs concurrently with checks, as
    /// `sweep_all` does; every shard is swept at the same clock reading.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_keyed::{Keyed, KeyedConfig};
    ///
    /// let clock = ManualClock::new();
    /// let store: Keyed<u64, _, _> = Keyed::gcra_with_clock(Quota::per_second(1)?, KeyedConfig::builder(100_000).build()?, clock.clone());
    /// for key in 0..10_000 {
    ///     assert!(store.check(&key).is_allowed());
    /// }
    /// clock.advance(Duration::from_secs(1)); // every bucket is full again: idle
    /// assert_eq!(store.par_sweep_all(), 10_000);
    /// assert!(store.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Each task holds one epoch guard for its shards; once every task is done,
    /// each thread of the pool flushes its collector batch (what a task handed over
    /// while other tasks held their guards may be left in it), the hot keys' shard
    /// is handed over and compacted, and the shards give back the slab chunks the
    /// sweep emptied, as `sweep_all`'s do.
    pub fn par_sweep_all(&self) -> usize {
        let now = self.clock.now();
        let evicted = (0..self.shards.len())
            .into_par_iter()
            .with_min_len(SHARDS_PER_TASK)
            .map_init(
                || self.collector.enter(),
                |guard, index| {
                    let evicted = self.sweep_shard(index, now, guard, None).0;
                    // Reclaimed once the guards allow, not when the shard has
                    // gathered a batch.
                    self.shards[index].retire_pending(guard);
                    evicted
                },
            )
            .sum();
        // A flush retires a thread's batch only once it holds an entry per thread
        // inside a guard, which the tasks' own guards made likely to fail: each
        // thread of the pool retries its batch now, outside the tasks' guards (see
        // `finish_sweep`), one at a time, so that they do not fail for each
        // other's guards.
        let one_at_a_time = Mutex::new(());
        rayon::broadcast(|_| {
            let _turn = one_at_a_time.lock().unwrap_or_else(PoisonError::into_inner);
            // Left (and what it holds back reclaimed) before the turn passes on.
            crate::table::flush(&self.collector.enter());
        });
        // The hot keys' shard, and this thread's batch (it may be outside the pool).
        self.finish_sweep(true, false);
        // Also where nothing was evicted: keys removed, or evicted by a full
        // store's search, may have emptied a shard's last chunks.
        let hardened: u64 = self
            .shards
            .par_iter()
            .with_min_len(SHARDS_PER_TASK)
            .map(|shard| u64::from(shard.compact(&self.hasher, true, &self.collector.enter()).1))
            .sum();
        let _ = hardened;
        metric!(self, |m| {
            m.hardened_shards.increment(hardened);
            m.shard_sweeps.increment(self.shards.len() as u64);
            m.evicted_by_sweep.increment(evicted as u64);
            self.record_len();
        });
        evicted
    }

    /// [`for_each`](Self::for_each) with the shards spread over rayon's thread
    /// pool: calls `f` with every stored key and its state (one clock reading for
    /// all), from several threads at once. Weakly consistent, as `for_each` is.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_keyed::{Keyed, KeyedConfig};
    ///
    /// let store: Keyed<u64, _, _> =
    ///     Keyed::gcra_with_clock(Quota::per_second(10)?, KeyedConfig::builder(100_000).build()?, ManualClock::new());
    /// for key in 0..1_000 {
    ///     let _ = store.check_n(&key, 4)?;
    /// }
    /// let remaining = AtomicU64::new(0);
    /// store.par_for_each(|_, snapshot| {
    ///     remaining.fetch_add(snapshot.remaining(), Ordering::Relaxed);
    /// });
    /// assert_eq!(remaining.into_inner(), 1_000 * 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn par_for_each(&self, f: impl Fn(&K, Snapshot) + Sync + Send) {
        let now = self.clock.now();
        (0..self.shards.len()).into_par_iter().with_min_len(SHARDS_PER_TASK).for_each_init(
            || self.collector.enter(),
            |guard, index| {
                for (key, state) in self.shards[index].iter(guard) {
                    if !self.algorithm.is_retired(state) {
                        f(key, self.snapshot_of(|| self.hash(key), key, state, now, guard));
                    }
                }
            },
        );
    }
}
