//! Sweeping idle keys: on demand, paced by insertions, by a full store looking for
//! room, and by a background [`Sweeper`]; and the bounds that let a search skip
//! shards that cannot hold an idle key.

use crate::table::Guard;
use crate::{HotKeyMode, Keyed, KeyedAlgorithm, SweeperError};
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Weak};
use std::time::Duration;
use weir_gcra::__private::StateKind;
use weir_rl_core::__private::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use weir_rl_core::{Clock, Nanos};

/// When the keys of a shard (or of the whole store) can next go idle.
#[derive(Debug)]
pub(crate) struct IdleBound {
    /// No key that is neither hot nor retired can be idle before this clock reading
    /// (ns; 0: unknown). Published by a search for an idle key, as the least of the
    /// keys' [`KeyedAlgorithm::earliest_idle`] (for the store, of the shards'
    /// bounds); lowered by each new key to its own, after its first check, and by
    /// each refund to the refunded key's. A check only moves a key's idle time
    /// later (a refund moves it earlier, and lowers the bound), so the bound holds
    /// until the clock reaches it.
    pub(crate) no_idle_before_ns: AtomicU64,
    /// New keys taken in and refunds made: a search that sees it change while it
    /// runs may have missed one, and publishes "unknown" (see `Keyed::publish_bound`).
    pub(crate) insertions: AtomicU64,
}

impl IdleBound {
    pub(crate) fn new() -> Self {
        Self { no_idle_before_ns: AtomicU64::new(UNKNOWN), insertions: AtomicU64::new(0) }
    }

    /// Whether nothing can be idle at `now`.
    pub(crate) fn excludes(&self, now: Nanos) -> bool {
        // Ordering: Relaxed; a bound read late is one a concurrent insertion had not
        // lowered yet: the search then comes before that insertion.
        now.as_u64() < self.no_idle_before_ns.load(Ordering::Relaxed)
    }
}

/// Keys a sweep unlinked, given back to the store's count when it drops.
struct Evicted<'a> {
    live: &'a AtomicUsize,
    count: usize,
}

impl Evicted<'_> {
    /// Gives the places back now; returns how many.
    fn settle(mut self) -> usize {
        let count = std::mem::take(&mut self.count);
        self.give_back(count);
        count
    }

    fn give_back(&self, count: usize) {
        if count > 0 {
            // Ordering: Relaxed; see `Keyed::remove` (the count lags the unlinking by
            // the shard's sweep: the store only looks fuller for that long).
            self.live.fetch_sub(count, Ordering::Relaxed);
        }
    }
}

impl Drop for Evicted<'_> {
    fn drop(&mut self) {
        self.give_back(self.count);
    }
}

/// The bound nothing is known about.
pub(crate) const UNKNOWN: u64 = 0;

/// The right to publish bounds, held by one search at a time.
pub(crate) struct Publishing<'a>(&'a AtomicBool);

impl<'a> Publishing<'a> {
    pub(crate) fn take(flag: &'a AtomicBool) -> Option<Self> {
        // Ordering: Acquire; the previous holder's bounds happen before this one's
        // (pairs with the Release store in `drop`).
        (!flag.swap(true, Ordering::Acquire)).then_some(Self(flag))
    }
}

impl Drop for Publishing<'_> {
    fn drop(&mut self) {
        // Ordering: Release; see `take`.
        self.0.store(false, Ordering::Release);
    }
}

impl<K, A, C, S, H> Keyed<K, A, C, S, H>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: KeyedAlgorithm,
    A::State: Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone,
    H: HotKeyMode<A>,
{
    /// Sweeps the next shard for idle keys; returns how many were evicted. Also
    /// hands over and compacts the hot keys' shard (see `sweep_all`).
    pub fn sweep(&self) -> usize {
        // Ordering: Relaxed; a round-robin ticket, publishing nothing.
        let next = self.cursor.fetch_add(1, Ordering::Relaxed);
        let (evicted, flushed) = self.sweep_one(next % self.shards.len(), true);
        self.finish_sweep(true, flushed);
        evicted
    }

    /// Sweeps every shard for idle keys; returns how many were evicted. Runs
    /// concurrently with checks (nothing is locked); O(keys). Each shard is swept
    /// under an epoch guard of its own (a sweep never holds reclamation back for
    /// longer than one shard's sweep), and gives back the shard's empty slab chunks
    /// whatever emptied them (see `sweep_one`); then the hot keys' shard, whose
    /// stripes a sweep or `remove` unlinked, is handed over and compacted the same
    /// way, and this thread's collector batch is flushed (see `finish_sweep`).
    pub fn sweep_all(&self) -> usize {
        let (mut evicted, mut flushed) = (0, false);
        for index in 0..self.shards.len() {
            let (count, flush) = self.sweep_one(index, true);
            evicted += count;
            flushed |= flush;
        }
        self.finish_sweep(true, flushed);
        evicted
    }

    /// Sweeps shard `index` under a guard of its own and hands what the shard
    /// gathered to the collector; once the guard is gone, frees the shard's slab
    /// chunks the collector has emptied and (`shrink_index`) shrinks its index to
    /// its keys, which rehashes them. Returns how many keys it evicted, and whether
    /// it flushed this thread's collector batch.
    fn sweep_one(&self, index: usize, shrink_index: bool) -> (usize, bool) {
        let (evicted, flushed) = {
            let guard = self.collector.enter();
            let evicted = self.sweep_shard(index, self.clock.now(), &guard, None).0;
            // What it unlinked, and what `remove` and checks unlinked before, is
            // reclaimed once the guards allow (this one first), not when the shard
            // has gathered a batch.
            (evicted, self.shards[index].retire_pending(&guard))
        };
        // Also when it evicted nothing: keys removed, or evicted by a full store's
        // search, may have emptied the shard's last chunks. Under a new guard: the
        // one above is gone, and what it held back reclaimed if no other guard
        // holds it.
        let (_, hardened) = self.shards[index].compact(&self.hasher, shrink_index, &self.collector.enter());
        let _ = hardened;
        metric!(self, |m| {
            m.hardened_shards.increment(u64::from(hardened));
            m.shard_sweeps.increment(1);
            m.evicted_by_sweep.increment(evicted as u64);
            self.record_len();
        });
        (evicted, flushed)
    }

    /// The end of every sweep (`sweep`, `sweep_all`, a paced sweep, the background
    /// sweeper's, `par_sweep_all`'s): hands the hot keys' shard's gathered
    /// retirements to the collector (the stripes and key of each hot key a sweep or
    /// `remove` dropped: no sweep visits that shard's keys, so it gathers until a
    /// sweep hands them over), then frees its emptied chunks and (`shrink_index`)
    /// shrinks its index, as `sweep_one` does an ordinary shard's.
    ///
    /// And it flushes this thread's collector batch unless the sweep already did
    /// or does not want to (`flushed`; a paced sweep never does, see `paced_sweep`): a flush retires a batch only once it holds an entry per thread
    /// inside a guard, so what a sweep handed over while other threads were inside
    /// guards stays in the batch; without a flush at each sweep, one that finds
    /// nothing new to hand over would leave it there until the batch fills (256
    /// retirements), however long the guards are gone. So a sweep flushes at
    /// least once (a process-wide memory barrier, as each hand-over costs); the
    /// check of a stored key never does.
    pub(crate) fn finish_sweep(&self, shrink_index: bool, flushed: bool) {
        {
            let guard = self.collector.enter();
            if !self.hot_keys.retire_pending(&guard) && !flushed {
                crate::table::flush(&guard);
            }
        }
        // Under a new guard, as in `sweep_one`: what the one above held back is
        // reclaimed if no other guard holds it.
        let (_, hardened) = self.hot_keys.compact(&self.hasher, shrink_index, &self.collector.enter());
        let _ = hardened;
        metric!(self, |m| m.hardened_shards.increment(u64::from(hardened)));
    }

    /// Evicts the keys of shard `index` idle at `now`; with the right to publish,
    /// also publishes the shard's bound from the others. Returns how many keys it
    /// evicted, and the bound it published.
    pub(crate) fn sweep_shard(
        &self,
        index: usize,
        now: Nanos,
        guard: &Guard<'_>,
        publishing: Option<&Publishing<'_>>,
    ) -> (usize, u64) {
        let shard = &self.shards[index];
        let bound = &self.bounds[index];
        // Ordering: Acquire; see `publish_bound`.
        let insertions = bound.insertions.load(Ordering::Acquire);
        // Unlinked keys are counted once for the shard (a sweep that evicts many keys
        // writes the shared count once, not per key), when `evicted` drops: also if
        // a user `Hash` or `Eq` panics on a later key (looking at a hot key runs
        // them, before anything is retired).
        let mut evicted = Evicted { live: &self.live, count: 0 };
        let mut no_idle_before = u64::MAX;
        for (at, key, state) in shard.iter_at(guard) {
            let retired = self.algorithm.try_retire(state, now)
                || H::try_retire_hot(self, || self.hash(key), key, state, now, guard);
            if retired {
                // Unlinked by position and identity: no user code runs between the
                // retirement and the unlinking, so neither can be left half done.
                if shard.remove_at(at, state, guard) {
                    evicted.count += 1;
                }
            } else if publishing.is_some()
                && self.algorithm.is_idle(state, Nanos::new(no_idle_before.saturating_sub(1)))
                && let Some(at) = self.earliest_idle(state, now)
            {
                // Only a key idle before the least bound so far can lower it (one
                // load): the exact time, dearer, is computed for those alone.
                no_idle_before = no_idle_before.min(at.as_u64());
            }
        }
        let evicted = evicted.settle();
        match publishing {
            Some(_) => (evicted, self.publish_bound(bound, no_idle_before, insertions)),
            None => (evicted, UNKNOWN),
        }
    }

    /// When a key not idle at `now` can next be idle ([`KeyedAlgorithm::earliest_idle`]);
    /// `None` for a state that is retired (its place is being given back) or hot
    /// (hot keys are searched on their own: a lease given back moves a hot key's
    /// idle time earlier).
    pub(crate) fn earliest_idle(&self, state: &A::State, now: Nanos) -> Option<Nanos> {
        (H::kind(&self.algorithm, state) == StateKind::Live).then(|| self.algorithm.earliest_idle(state, now))
    }

    /// Publishes `no_idle_before` as `bound`, computed by a search that began when
    /// the shard (or store) had taken in `insertions` keys; if it has taken in more
    /// since, the search may have missed them and publishes "unknown" instead.
    /// Returns what it published. Only the holder of [`Publishing`] publishes, so
    /// bounds are raised by one search at a time (and no search reads a bound that
    /// another is about to take back); new keys only lower them.
    ///
    /// Ordering. A new key is inserted and checked, then bumps the count (AcqRel),
    /// then lowers the bound (`note_new_key`: the shard's, then the store's); a
    /// search reads the count (Acquire), reads the map (or the shards' bounds),
    /// stores its bound, then reads the count again by an AcqRel read-modify-write
    /// (adding 0). Take the count's modification order. If the search's first read
    /// sees the bump, it synchronizes with it: the key's insertion, check and
    /// lowering of the shard's bound happen before the search reads the map or that
    /// bound, and it sees the key, busy. If not, and its second read comes after the
    /// bump, it sees the count changed (counts only grow) and publishes "unknown".
    /// If its second read comes before the bump, the bump, a read-modify-write,
    /// reads from it or a later one of its release sequence and synchronizes with
    /// it: the search's store happens before the key's lowering, which then lowers
    /// what the search published. (A SeqCst store and load, the store-buffer
    /// pattern, would also do; the read-modify-write needs no single total order,
    /// and loom, which checks this, models it exactly.)
    pub(crate) fn publish_bound(&self, bound: &IdleBound, no_idle_before: u64, insertions: u64) -> u64 {
        // Ordering: Relaxed; ordered by the AcqRel read-modify-write below (see above).
        bound.no_idle_before_ns.store(no_idle_before, Ordering::Relaxed);
        // Ordering: AcqRel; see above.
        if bound.insertions.fetch_add(0, Ordering::AcqRel) == insertions {
            return no_idle_before;
        }
        // Ordering: Relaxed; as the store above.
        bound.no_idle_before_ns.store(UNKNOWN, Ordering::Relaxed);
        UNKNOWN
    }

    /// Accounts for a key just inserted into shard `index` with state `state`, after
    /// its first check (or right away, for a key inserted unchecked), or for a key
    /// whose idle time a refund moved earlier: lowers the shard's bound, then the
    /// store's, to the key's earliest idle time (see `publish_bound`).
    pub(crate) fn note_new_key(&self, index: usize, state: &A::State, now: Nanos) {
        let at = self.earliest_idle(state, now);
        for bound in [&self.bounds[index], &*self.store_bound] {
            // Ordering: AcqRel: Release publishes the key's insertion and first check
            // (and the shard's lowering, to the store's searches) to a search that
            // reads the count; Acquire orders a search's store of the bound before
            // the lowering below (see `publish_bound`).
            bound.insertions.fetch_add(1, Ordering::AcqRel);
            if let Some(at) = at {
                // Ordering: Relaxed; ordered after any store of a search that the
                // count orders before the bump (see `publish_bound`). Written only
                // when it lowers the bound (a read-modify-write then acts on the
                // latest one).
                if bound.no_idle_before_ns.load(Ordering::Relaxed) > at.as_u64() {
                    // Ordering: Relaxed; as above.
                    bound.no_idle_before_ns.fetch_min(at.as_u64(), Ordering::Relaxed);
                }
            }
        }
    }

    /// Sweeps the next shard every `sweep_every` insertions, once the store holds
    /// `sweep_from` keys.
    pub(crate) fn paced_sweep(&self) {
        // Ordering: Relaxed (both); hints (a sweep a key early or late changes nothing).
        // Below `sweep_from`, sweep anyway while every hot slot is taken: only a sweep
        // frees the slot of a hot key gone idle, and another key may need it.
        if self.live.load(Ordering::Relaxed) < self.config.sweep_from && !self.hot.slots_full(&self.hot_count) {
            return;
        }
        // Ordering: Relaxed; a pacing counter.
        let inserted = self.inserted.fetch_add(1, Ordering::Relaxed);
        if inserted % self.config.sweep_every == self.config.sweep_every - 1 {
            // Not `sweep`: a check's sweep runs no other key's `Hash` (the index is
            // shrunk by explicit sweeps only), so a panicking `Hash` of another key
            // cannot fail a check that already took its admission.
            // Ordering: Relaxed; a round-robin ticket, publishing nothing.
            let next = self.cursor.fetch_add(1, Ordering::Relaxed);
            // No flush of its own: a paced sweep runs on an inserting check's
            // path, and a flush is a process-wide memory barrier (a system call)
            // even with nothing to retire. What a hand-over left in this thread's
            // batch is retried by the next explicit or background sweep.
            self.sweep_one(next % self.shards.len(), false);
            self.finish_sweep(false, true);
        }
    }

    /// Evicts an idle key if one is stored. Unless the store's bound says no key
    /// can be idle yet, goes round the shards from the sweep's clock hand, skipping
    /// each whose bound says so, sweeping the others, until a sweep evicts; then, if
    /// none did, looks at each hot key. Returns whether a key was evicted. A search
    /// that holds the right to publish refreshes the bounds of the shards it sweeps
    /// and, when it finds nothing, the store's.
    pub(crate) fn evict_for_room(&self) -> bool {
        let now = self.clock.now();
        let guard = self.collector.enter();
        let publishing = Publishing::take(&self.publishing);
        // Ordering: Acquire; see `publish_bound`.
        let insertions = self.store_bound.insertions.load(Ordering::Acquire);
        if !self.store_bound.excludes(now) {
            let count = self.shards.len();
            // Ordering: Relaxed; where to start is a hint.
            let hand = self.cursor.load(Ordering::Relaxed) % count;
            let mut no_idle_before = u64::MAX;
            for step in 0..count {
                // (hand + step) % count, without a division per step.
                let index = if hand + step < count { hand + step } else { hand + step - count };
                // Ordering: Relaxed; as in `IdleBound::excludes`.
                let shard_bound = self.bounds[index].no_idle_before_ns.load(Ordering::Relaxed);
                if now.as_u64() < shard_bound {
                    no_idle_before = no_idle_before.min(shard_bound);
                    continue;
                }
                let (evicted, shard_bound) = self.sweep_shard(index, now, &guard, publishing.as_ref());
                metric!(self, |m| {
                    m.shard_sweeps.increment(1);
                    m.evicted_for_room.increment(evicted as u64);
                });
                if evicted > 0 {
                    // Ordering: Relaxed; see above. The next search starts after it.
                    self.cursor.store(index.wrapping_add(1), Ordering::Relaxed);
                    return true;
                }
                no_idle_before = no_idle_before.min(shard_bound);
            }
            if publishing.is_some() {
                self.publish_bound(&self.store_bound, no_idle_before, insertions);
            }
        }
        let evicted = H::evict_idle_hot_key(self, now, &guard);
        metric!(self, |m| {
            m.evicted_for_room.increment(u64::from(evicted));
            self.record_len();
        });
        evicted
    }
}

/// A background thread sweeping a store for idle keys; stops when dropped, or when
/// the store is dropped. Keep it for as long as the sweeps should run.
#[derive(Debug)]
#[must_use = "the sweeper stops when dropped: keep it for as long as the sweeps should run"]
pub struct Sweeper {
    stop: Arc<weir_rl_core::__private::sync::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        // Ordering: Relaxed; the flag carries no data, only "stop".
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl<K, A, C, S, H> Keyed<K, A, C, S, H>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: KeyedAlgorithm + Send + Sync + 'static,
    A::State: Send + Sync + 'static,
    C: Clock + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
    H: HotKeyMode<A>,
{
    /// Starts a background thread that sweeps the whole store for idle keys every
    /// `interval`, a shard at a time (an opt-in complement to the sweep amortized on
    /// insertions). It holds only a weak reference to the store.
    pub fn spawn_sweeper(self: &Arc<Self>, interval: Duration) -> Result<Sweeper, SweeperError> {
        if interval.is_zero() {
            return Err(SweeperError::ZeroInterval);
        }
        let store: Weak<Self> = Arc::downgrade(self);
        let stop = Arc::new(weir_rl_core::__private::sync::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("weir-keyed-sweeper".into()).spawn(move || {
            // Ordering: Relaxed; see `Sweeper::drop`.
            while !flag.load(Ordering::Relaxed) {
                match store.upgrade() {
                    Some(store) => {
                        store.sweep_all();
                    }
                    None => return,
                }
                std::thread::park_timeout(interval);
            }
        });
        Ok(Sweeper { stop, thread: Some(thread.map_err(SweeperError::Spawn)?) })
    }
}
