//! The store: [`Keyed`], its constructors, checks, refunds and snapshots, and the
//! per-key contract of weir-rl-core.

use crate::Shard;
use crate::sweeper::IdleBound;
use crate::table::{Collector, Guard, HARDENED, Hashers, Inserted, SHARD_BITS};
use crate::{AtCapacity, HotKeyMode, HotKeys, KeyHasher, KeyedAlgorithm, KeyedConfig, NoHotKeys};
use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use weir_gcra::__private::StateKind;
use weir_gcra::GcraAlgorithm;
use weir_rl_core::__private::sync::{AtomicBool, AtomicUsize, CachePadded, Ordering};
#[cfg(doc)]
use weir_rl_core::Limiter;
use weir_rl_core::{
    Algorithm, AsyncKeyedLimiter, Clock, Decision, DenyReason, InsufficientCapacity, KeyedLimiter, MonotonicClock,
    Nanos, Policy, Quota, Snapshot,
};

/// Keys per shard the shard count aims for at full capacity: a sweep step scans one
/// shard, so this is the work of one step. Smaller shards sweep faster but each
/// carries a fixed part (its header, smallest index and first chunk), which costs
/// memory when a store is far below its bound. 440 puts a full shard just under a
/// chunk boundary of its slab (8 + 16 + … + 256 = 504 entries): the keys a full
/// shard gets spread by about √440 ≈ 21 around it, so a shard passes 504 (and
/// allocates a chunk of 512 more) about once in 700. Shard counts are not rounded
/// to a power of two (`shard_index` scales the hash's shard bits), which would put
/// a full shard anywhere from 256 to 512 keys: a store of 100 000 had 390 keys a
/// shard in 504 slots (`weir-bench memory`: 30.7 heap bytes per key, 27.4 once
/// replaced indexes were also flushed, 24.8 with this). The price is in stores far
/// below their bound: up to 512/440 as many shards as before, each about 409 bytes
/// when empty (an empty store bounded at 2²⁰ keys: 989 176 bytes against 852 088).
const KEYS_PER_SHARD: usize = 440;
/// The most shards a store uses.
const MAX_SHARDS: usize = 1 << 16;

/// Slots awaiting reclamation a store's slabs may hold beyond as many as its keys,
/// spread over its shards (at least `MIN_SHARD_SLACK` each): room for what a shard
/// has gathered and the collector has not reclaimed yet (a shard hands its
/// retirements over in batches of up to 256), without which a store would refuse
/// new keys in a churn; and the most a guard held for long (which holds all
/// reclamation back) can make the slabs grow by, beyond twice the keys stored
/// (see `Shard::with_slack`).
const SLAB_SLACK: usize = 4096;
const MIN_SHARD_SLACK: usize = 64;

/// Retirements a thread's collector batch holds (the shards flush theirs when
/// they hand them over; replaced indexes wait for the batch) before the collector
/// looks for ones to reclaim (each look costs a process-wide memory barrier, a system call): the
/// collector's default, 32, made a sweep that evicts millions of keys spend most
/// of its time in those barriers.
#[cfg(not(loom))]
const RETIRE_BATCH: usize = 256;

/// The store's epoch collector.
fn new_collector() -> Collector {
    #[cfg(not(loom))]
    return Collector::new().batch_size(RETIRE_BATCH);
    #[cfg(loom)]
    return Collector::new();
}

/// A per-key limiter: one state of algorithm `A` per key, at most `max_keys` keys,
/// reading clock `C`, hashing keys with `S`, treating keys every thread hits at
/// once as `H` says ([`NoHotKeys`]: every key exact; [`HotKeys`](crate::HotKeys),
/// GCRA only: such keys move to per-thread leases).
///
/// See the [crate docs](https://docs.rs/weir-keyed) for the map, eviction and the memory bound.
pub struct Keyed<K, A: KeyedAlgorithm, C = MonotonicClock, S = KeyHasher, H: HotKeyMode<A> = NoHotKeys> {
    /// The epoch collector of every shard. Declared first, so dropped first: its
    /// drop reclaims what the shards retired, into the shards.
    pub(crate) collector: Collector,
    pub(crate) shards: Box<[Shard<K, A::State>]>,
    /// Hash every key once per operation (twice in a hardened shard): the hash
    /// picks the shard, the key's place in the shard's index and its tag.
    pub(crate) hasher: Hashers<S>,
    pub(crate) algorithm: A,
    /// The algorithm's quota as a client sees it, read once at construction.
    pub(crate) policies: [Policy; 1],
    pub(crate) clock: C,
    pub(crate) config: KeyedConfig,
    /// Keys stored; never above `max_keys`. Written only when a key is inserted or
    /// removed, never on a check of an existing key.
    pub(crate) live: CachePadded<AtomicUsize>,
    /// New keys inserted so far (paces the incremental sweep) and the next shard
    /// to sweep.
    pub(crate) inserted: CachePadded<AtomicUsize>,
    pub(crate) cursor: AtomicUsize,
    /// For each shard, and for the whole store, when their keys can next go idle:
    /// what lets a full store search for an idle key without sweeping shards that
    /// cannot have one, and deny new keys without searching while none can.
    pub(crate) bounds: Box<[IdleBound]>,
    pub(crate) store_bound: CachePadded<IdleBound>,
    /// Taken by the one search that may publish bounds (see `publish_bound`).
    pub(crate) publishing: AtomicBool,
    /// The hot-key mode, the hot keys' stripes, and how many there are.
    pub(crate) hot: H,
    pub(crate) hot_keys: Shard<K, H::Stripes>,
    pub(crate) hot_count: AtomicUsize,
}

impl<K, A: KeyedAlgorithm, C, S, H: HotKeyMode<A>> fmt::Debug for Keyed<K, A, C, S, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            // Ordering: Relaxed; a statistic.
            .field("len", &self.live.load(Ordering::Relaxed))
            .field("shards", &self.shards.len())
            .field("config", &self.config)
            .field("hot", &self.hot)
            // Ordering: Relaxed; a statistic.
            .field("hot_keys", &self.hot_count.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A per-key GCRA store ([`Keyed::gcra`]): the type of a field holding one.
///
/// ```
/// use weir_rl_core::Quota;
/// use weir_keyed::{KeyedConfig, KeyedGcra};
///
/// struct Server {
///     per_ip: KeyedGcra<std::net::IpAddr>,
/// }
/// let server = Server { per_ip: KeyedGcra::gcra(Quota::per_second(10)?, KeyedConfig::builder(100_000).build()?) };
/// assert!(server.per_ip.check(&"203.0.113.7".parse()?).is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type KeyedGcra<K, C = MonotonicClock> = Keyed<K, GcraAlgorithm, C>;

/// A per-key GCRA store with hot keys: what [`Keyed::with_hot_keys`] makes of a
/// [`KeyedGcra`] (keys that many threads hit at once move to per-thread leases).
///
/// ```
/// use weir_rl_core::Quota;
/// use weir_keyed::{HotKeys, KeyedConfig, KeyedGcra, KeyedGcraHot};
///
/// let per_tenant: KeyedGcraHot<u64> =
///     KeyedGcra::gcra(Quota::per_second(1_000_000)?, KeyedConfig::builder(10_000).build()?)
///         .with_hot_keys(HotKeys::default());
/// assert!(per_tenant.check(&7).is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type KeyedGcraHot<K, C = MonotonicClock> = Keyed<K, GcraAlgorithm, C, KeyHasher, HotKeys>;

/// A per-key fixed-window store ([`Keyed::fixed_window`]).
#[cfg(feature = "window")]
pub type KeyedFixedWindow<K, C = MonotonicClock> = Keyed<K, weir_window::fixed::FixedWindowAlgorithm, C>;

/// A per-key sliding-window-counter store ([`Keyed::sliding_window`]).
#[cfg(feature = "window")]
pub type KeyedSlidingWindow<K, C = MonotonicClock> = Keyed<K, weir_window::sliding::SlidingWindowAlgorithm, C>;

/// A per-key sliding-log store ([`Keyed::sliding_log`]).
#[cfg(feature = "window")]
pub type KeyedSlidingLog<K, C = MonotonicClock> = Keyed<K, weir_window::log::SlidingLogAlgorithm, C>;

impl<K> Keyed<K, GcraAlgorithm>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A per-key GCRA limiter enforcing `quota` for each key, on the default clock.
    ///
    /// ```
    /// use weir_rl_core::Quota;
    /// use weir_keyed::{KeyedConfig, KeyedGcra};
    ///
    /// let per_user: KeyedGcra<String> = KeyedGcra::gcra(Quota::per_minute(100)?, KeyedConfig::builder(10_000).build()?);
    /// assert!(per_user.check("alice").is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn gcra(quota: Quota, config: KeyedConfig) -> Self {
        Self::gcra_with_clock(quota, config, MonotonicClock::new())
    }
}

impl<K, C> Keyed<K, GcraAlgorithm, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// A per-key GCRA limiter enforcing `quota` for each key, reading `clock` (the
    /// algorithm's time origin is the clock's reading now).
    pub fn gcra_with_clock(quota: Quota, config: KeyedConfig, clock: C) -> Self {
        let algorithm = GcraAlgorithm::new(quota, clock.now());
        Self::with_hasher(algorithm, config, clock, KeyHasher::new())
    }
}

/// Per-key windows, on the default clock or one of the caller's. Each takes a
/// limit per window (`Quota::per_minute(100)`: at most 100 in any minute's
/// window); a quota with a burst other than its count is refused
/// ([`WindowError::BurstIsNotCount`](weir_window::WindowError::BurstIsNotCount)).
#[cfg(feature = "window")]
mod window_constructors {
    use super::{KeyHasher, Keyed, KeyedConfig, MonotonicClock};
    use std::hash::Hash;
    use weir_rl_core::{Clock, Quota};
    use weir_window::WindowError;
    use weir_window::fixed::FixedWindowAlgorithm;
    use weir_window::log::SlidingLogAlgorithm;
    use weir_window::sliding::SlidingWindowAlgorithm;

    impl<K: Hash + Eq + Clone + Send + Sync + 'static> Keyed<K, FixedWindowAlgorithm> {
        /// A per-key fixed window enforcing `quota` for each key, on the default clock.
        ///
        /// ```
        /// use weir_rl_core::Quota;
        /// use weir_keyed::{KeyedConfig, KeyedFixedWindow};
        ///
        /// let per_ip: KeyedFixedWindow<String> = KeyedFixedWindow::fixed_window(Quota::per_hour(2)?, KeyedConfig::builder(1_000).build()?)?;
        /// assert!(per_ip.check_n("203.0.113.7", 2)?.is_allowed());
        /// assert!(per_ip.check("203.0.113.7").is_denied());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn fixed_window(quota: Quota, config: KeyedConfig) -> Result<Self, WindowError> {
            Self::fixed_window_with_clock(quota, config, MonotonicClock::new())
        }
    }

    impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> Keyed<K, FixedWindowAlgorithm, C> {
        /// A per-key fixed window enforcing `quota` for each key, reading `clock`.
        pub fn fixed_window_with_clock(quota: Quota, config: KeyedConfig, clock: C) -> Result<Self, WindowError> {
            let algorithm = FixedWindowAlgorithm::new(quota, clock.now())?;
            Ok(Self::with_hasher(algorithm, config, clock, KeyHasher::new()))
        }
    }

    impl<K: Hash + Eq + Clone + Send + Sync + 'static> Keyed<K, SlidingWindowAlgorithm> {
        /// A per-key sliding-window counter enforcing `quota` for each key, on the
        /// default clock.
        ///
        /// ```
        /// use weir_rl_core::Quota;
        /// use weir_keyed::{KeyedConfig, KeyedSlidingWindow};
        ///
        /// let per_user: KeyedSlidingWindow<String> =
        ///     KeyedSlidingWindow::sliding_window(Quota::per_hour(100)?, KeyedConfig::builder(10_000).build()?)?;
        /// assert!(per_user.check_n("alice", 100)?.is_allowed());
        /// assert!(per_user.check("alice").is_denied());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn sliding_window(quota: Quota, config: KeyedConfig) -> Result<Self, WindowError> {
            Self::sliding_window_with_clock(quota, config, MonotonicClock::new())
        }
    }

    impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> Keyed<K, SlidingWindowAlgorithm, C> {
        /// A per-key sliding-window counter enforcing `quota` for each key, reading
        /// `clock`.
        pub fn sliding_window_with_clock(quota: Quota, config: KeyedConfig, clock: C) -> Result<Self, WindowError> {
            let algorithm = SlidingWindowAlgorithm::new(quota, clock.now())?;
            Ok(Self::with_hasher(algorithm, config, clock, KeyHasher::new()))
        }
    }

    impl<K: Hash + Eq + Clone + Send + Sync + 'static> Keyed<K, SlidingLogAlgorithm> {
        /// A per-key sliding log (exact; each key costs `8 × limit` bytes) enforcing
        /// `quota` for each key, on the default clock.
        ///
        /// ```
        /// use weir_rl_core::Quota;
        /// use weir_keyed::{KeyedConfig, KeyedSlidingLog};
        ///
        /// let per_user: KeyedSlidingLog<u64> = KeyedSlidingLog::sliding_log(Quota::per_hour(3)?, KeyedConfig::builder(100).build()?)?;
        /// assert!(per_user.check_n(&7, 3)?.is_allowed());
        /// assert!(per_user.check(&7).is_denied());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn sliding_log(quota: Quota, config: KeyedConfig) -> Result<Self, WindowError> {
            Self::sliding_log_with_clock(quota, config, MonotonicClock::new())
        }
    }

    impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> Keyed<K, SlidingLogAlgorithm, C> {
        /// A per-key sliding log enforcing `quota` for each key, reading `clock`.
        pub fn sliding_log_with_clock(quota: Quota, config: KeyedConfig, clock: C) -> Result<Self, WindowError> {
            let algorithm = SlidingLogAlgorithm::new(quota, clock.now())?;
            Ok(Self::with_hasher(algorithm, config, clock, KeyHasher::new()))
        }
    }
}

impl<K, A, C, S> Keyed<K, A, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: KeyedAlgorithm,
    A::State: Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// A store applying `algorithm` to each key, reading `clock` (the algorithm's
    /// time origin must be this clock's), hashing keys with `hasher`.
    ///
    /// With the `metrics` feature, the store's metric handles are registered here,
    /// with the recorder installed now (see the crate docs, "Metrics").
    pub fn with_hasher(algorithm: A, config: KeyedConfig, clock: C, hasher: S) -> Self {
        #[cfg(feature = "metrics")]
        let config = KeyedConfig { metrics: crate::config::StoreMetrics::register(&config.name), ..config };
        let shards = config.max_keys.div_ceil(KEYS_PER_SHARD).clamp(1, MAX_SHARDS);
        let slack = (SLAB_SLACK / shards).max(MIN_SHARD_SLACK);
        let shards: Vec<_> = (0..shards).map(|_| Shard::with_slack(slack)).collect();
        let bounds = (0..shards.len()).map(|_| IdleBound::new()).collect();
        Self {
            collector: new_collector(),
            shards: shards.into_boxed_slice(),
            hasher: Hashers::new(hasher),
            policies: [algorithm.policy()],
            algorithm,
            clock,
            config,
            live: CachePadded::new(AtomicUsize::new(0)),
            inserted: CachePadded::new(AtomicUsize::new(0)),
            cursor: AtomicUsize::new(0),
            bounds,
            store_bound: CachePadded::new(IdleBound::new()),
            publishing: AtomicBool::new(false),
            hot: NoHotKeys,
            // Never used without hot keys.
            hot_keys: Shard::with_slack(MIN_SHARD_SLACK),
            hot_count: AtomicUsize::new(0),
        }
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
    /// Checks one request for `key`.
    ///
    /// Inlined into the caller: the hash, the lookup of a key the store holds, its
    /// check and, when that decided everything (admitted without a lost race, or
    /// denied on a live state), the return, so that a caller reading only part of
    /// the decision gets no more of it computed. Anything else (a key to insert, a
    /// retired or promoted state, a promotion) goes on out of line, as in
    /// [`check_n`](Self::check_n).
    #[inline(always)]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (hash, index) = self.hash_and_shard(key);
        let guard = self.collector.enter();
        let Some(state) = self.shards[index].get(hash, key, &guard) else {
            // Missing: the insertion needs the key's clone, user code that is run
            // outside the guard (see `check_n_at`).
            drop(guard);
            return self.check_cold(key, hash, index, true);
        };
        // Read once the state is found: see `check_n`.
        let now = self.clock.now();
        let (decision, lost_races) = self.hot.check(&self.algorithm, state, &now);
        let decided =
            if decision.is_allowed() { lost_races == 0 } else { H::kind(&self.algorithm, state) == StateKind::Live };
        if decided {
            return decision;
        }
        let settled = self.settle_cold(index, hash, key, state, now, decision, lost_races, &guard);
        drop(guard);
        self.finish_cold(index, hash, key, settled)
    }

    /// The rest of [`check`](Self::check) when it was not decided on the state it
    /// found: [`check_n_at`](Self::check_n_at) for one unit, with the key's clone
    /// made first (outside the guard) if it was `missing`.
    #[cold]
    #[inline(never)]
    fn check_cold<Q>(&self, key: &Q, hash: u64, index: usize, missing: bool) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_n_at(key, 1, hash, index, missing.then(|| key.to_owned())).unwrap_or_else(|_| {
            // A cost of 1 exceeds the limit only for an overflow limiter with a burst
            // of 0, which `Quota` rules out.
            self.capacity_denial()
        })
    }

    /// [`settle`](Self::settle) for [`check`](Self::check), out of line: what its
    /// state's decision left to do.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn settle_cold<Q>(
        &self,
        index: usize,
        hash: u64,
        key: &Q,
        state: &A::State,
        now: Nanos,
        decision: Decision,
        lost_races: u32,
        guard: &Guard<'_>,
    ) -> Settled
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.settle(index, hash, key, state, 1, now, decision, lost_races, guard)
    }

    /// The end of [`check`](Self::check) once it has left its guard: what
    /// [`settle`](Self::settle) said to do.
    #[cold]
    #[inline(never)]
    fn finish_cold<Q>(&self, index: usize, hash: u64, key: &Q, settled: Settled) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match settled {
            Settled::Done(result) => result.unwrap_or_else(|_| self.capacity_denial()),
            Settled::Promote(decision) => {
                self.promote_contended(index, hash, key);
                decision
            }
            // Looked up again from the start: the denial wrote nothing.
            Settled::Retry => self.check_cold(key, hash, index, false),
        }
    }

    /// Checks a request of cost `n` for `key` (see [`Limiter::check_n`]). A key the
    /// store does not hold is inserted with a fresh state, subject to the memory
    /// bound ([`AtCapacity`]).
    pub fn check_n<Q>(&self, key: &Q, n: u64) -> Result<Decision, InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if n == 1 {
            // The common cost, on `check`'s fast path (which no limit is below).
            return Ok(self.check(key));
        }
        if n == 0 {
            // Admitted, consumes nothing, and stores nothing; marked as taking
            // nothing, so that a refund against it gives nothing back.
            return Ok(Decision::allowed(self.snapshot(key)).at(self.clock.now()).zero_cost());
        }
        let (hash, index) = self.hash_and_shard(key);
        self.check_n_at(key, n, hash, index, None)
    }

    /// [`check_n`](Self::check_n) (`n` > 0) of a key with hash `hash` in shard
    /// `index`, and `owned`, its clone, if the caller found it missing (and made
    /// one outside the guard).
    fn check_n_at<Q>(
        &self,
        key: &Q,
        n: u64,
        mut hash: u64,
        index: usize,
        mut owned: Option<K>,
    ) -> Result<Decision, InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shard = &self.shards[index];
        let mut guard = self.collector.enter();
        let mut retry_slab = true;
        loop {
            let (state, inserted) = match shard.get(hash, key, &guard) {
                Some(state) => (state, false),
                None => {
                    let limit = self.algorithm.limit();
                    if n > limit {
                        return Err(InsufficientCapacity { requested: n, capacity: limit });
                    }
                    let Some(cloned) = owned.take() else {
                        // The key's `Clone` is user code, which may take long: run it
                        // outside the guard, which would hold back the reclamation of
                        // everything unlinked meanwhile; then look again. (Also on
                        // each retry: the insertion consumed the clone.)
                        drop(guard);
                        owned = Some(key.to_owned());
                        guard = self.collector.enter();
                        continue;
                    };
                    match self.insert(shard, hash, key, cloned, retry_slab, &guard) {
                        Ok(found) => found,
                        Err(NotInserted::Retry { slab }) => {
                            retry_slab &= !slab;
                            continue;
                        }
                        Err(NotInserted::Rehash) => {
                            // Same shard: its bits are the fast hash's in both modes.
                            hash = self.hash(key);
                            continue;
                        }
                        Err(NotInserted::Full) => return self.at_capacity(n),
                    }
                }
            };
            // One clock reading decides the check, taken once the state is found (or
            // inserted). A state found was linked, so any eviction of the key's
            // earlier state (which judged it idle at a reading of its own) happened
            // before this reading: a fresh state is never decided at a reading from
            // before the eviction that let it in, where it would admit a burst the
            // key's own limiter never would. (A reading taken before the lookup
            // could be older than the eviction.) Read again on the rare retry after
            // an eviction, for the same reason.
            let now = self.clock.now();
            let checked = self.hot.check_n(&self.algorithm, state, n, &now);
            if inserted {
                // After the new key's first check: from now on a sweep of its shard
                // sees it busy, not idle (see `note_new_key`).
                self.note_new_key(index, state, now);
                metric!(self, |m| m.keys.set(self.len() as f64));
            }
            let (decision, lost_races) = checked?;
            let result = match self.settle(index, hash, key, state, n, now, decision, lost_races, &guard) {
                Settled::Done(result) => result,
                Settled::Promote(decision) => {
                    drop(guard);
                    self.promote_contended(index, hash, key);
                    Ok(decision)
                }
                Settled::Retry => continue,
            };
            if inserted {
                // Pace the incremental sweep by insertions, after this key's first
                // decision: a sweep before it would find the fresh state idle and
                // could evict it before it was ever checked.
                self.paced_sweep();
            }
            return result;
        }
    }

    /// What a check does once `state` (of `key`, in shard `index`) decided
    /// `decision` at `now`, having lost `lost_races` CAS races: a denial from a
    /// retired state (raced with an eviction) is unlinked and looked up again, one
    /// from a promoted state is decided on its hot stripes, and a contended
    /// admission may promote the key (which the caller does, outside the guard:
    /// [`promote_contended`](Self::promote_contended)).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn settle<Q>(
        &self,
        index: usize,
        hash: u64,
        key: &Q,
        state: &A::State,
        n: u64,
        now: Nanos,
        decision: Decision,
        lost_races: u32,
        guard: &Guard<'_>,
    ) -> Settled
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if decision.is_denied() {
            // Classify the state from one load: retired (raced with an eviction;
            // it was idle, so a fresh state decides exactly as it would have),
            // promoted (decide on its hot stripes), or live (a real denial).
            match H::kind(&self.algorithm, state) {
                StateKind::Retired => {
                    self.unlink(&self.shards[index], hash, key, state, guard);
                    Settled::Retry
                }
                StateKind::Promoted => match H::check_hot(self, index, hash, key, state, n, now, decision, guard) {
                    Some(decision) => Settled::Done(decision),
                    None => Settled::Retry,
                },
                StateKind::Live => Settled::Done(Ok(decision)),
            }
        } else if lost_races > 0 && H::wants_promotion(self, state, lost_races) {
            // Only a mode that counts lost races (hot keys) gets here.
            Settled::Promote(decision)
        } else {
            Settled::Done(Ok(decision))
        }
    }

    /// Promotes `key` (in shard `index`), whose admission was contended: the
    /// promotion clones the key (user code, which may take long), so the caller
    /// has left its guard; then on the key's state found again (another state of
    /// the key, if it was replaced meanwhile, is as contended).
    #[cold]
    #[inline(never)]
    fn promote_contended<Q>(&self, index: usize, hash: u64, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let owned = key.to_owned();
        let guard = self.collector.enter();
        if let Some(state) = self.shards[index].get(hash, key, &guard) {
            H::contended(self, index, hash, key, state, owned, &guard);
            // `wants_promotion` found the state not promoted: promoted now, by this
            // check (or by a racing one, which then counts it too).
            metric!(self, |m| if H::kind(&self.algorithm, state) == StateKind::Promoted {
                m.hot_promotions.increment(1);
                m.hot_keys.set(self.hot_len() as f64);
            });
        }
    }

    /// `key`'s state, without consuming anything. A key the store does not hold is
    /// reported as fresh (which is exactly what its next check would see).
    pub fn snapshot<Q>(&self, key: &Q) -> Snapshot
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now();
        let hash = self.hash(key);
        let guard = self.collector.enter();
        match self.shard(hash).get(hash, key, &guard) {
            Some(state) if !self.algorithm.is_retired(state) => self.snapshot_of(|| hash, key, state, now, &guard),
            _ => self.algorithm.snapshot(&self.algorithm.new_state(), now),
        }
    }

    /// Gives back `n` units that `admission` (a decision this store returned for
    /// `key`) consumed and the caller did not use (see [`KeyedLimiter::refund`]):
    /// `n` is trusted: pass at most what the admission took, and refund it once (the
    /// store does not remember admissions). Never beyond a full state. A denied
    /// admission took nothing; a key no longer stored was idle (full) when it was
    /// evicted, or was reset by [`remove`](Self::remove), so nothing is given back to
    /// either, nor to an admission of the overflow limiter
    /// ([`AtCapacity::EvictIdleOrOverflow`]). `n` above the limit is an error: no
    /// check could have taken it.
    ///
    /// ```
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_keyed::{KeyedConfig, KeyedGcra};
    ///
    /// let per_ip: KeyedGcra<String, _> =
    ///     KeyedGcra::gcra_with_clock(Quota::per_minute(3)?, KeyedConfig::builder(100).build()?, ManualClock::new());
    /// let admission = per_ip.check_n("203.0.113.7", 3)?;
    /// assert!(per_ip.check("203.0.113.7").is_denied());
    /// per_ip.refund("203.0.113.7", 3, &admission)?; // the request was not served after all
    /// assert_eq!(per_ip.snapshot("203.0.113.7").remaining(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund<Q>(&self, key: &Q, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let limit = self.algorithm.limit();
        if n > limit {
            return Err(InsufficientCapacity { requested: n, capacity: limit });
        }
        if n == 0 || admission.is_denied() || admission.is_from_fallback() {
            return Ok(());
        }
        let hash = self.hash(key);
        let guard = self.collector.enter();
        let index = self.shard_index(hash);
        let Some(state) = self.shards[index].get(hash, key, &guard) else {
            return Ok(());
        };
        self.refund_state(hash, key, state, n, admission, &guard)?;
        // The refund may have made the key idle sooner than the idle bounds say: a
        // full store looking for room must not skip it.
        self.note_new_key(index, state, self.clock.now());
        Ok(())
    }

    /// Forgets `key` (its next check starts from a fresh state); returns whether it
    /// was stored. Unlike eviction this may change decisions: it is how an operator
    /// resets a client. A check racing with it may be decided on the removed state.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let guard = self.collector.enter();
        let Some(state) = self.shard(hash).remove_if(hash, key, |_, _| true, &guard) else {
            return false;
        };
        // Ordering: Relaxed; the count publishes nothing, and its bound is kept by the
        // CAS in `reserve`.
        self.live.fetch_sub(1, Ordering::Relaxed);
        H::forget(self, hash, key, state, &guard);
        metric!(self, |m| {
            m.removed.increment(1);
            m.keys.set(self.len() as f64);
            m.hot_keys.set(self.hot_len() as f64);
        });
        true
    }

    /// Which shards hash their keys with SipHash after a flood of colliding keys
    /// (see [`KeyHasher`]): none under ordinary traffic.
    ///
    /// ```
    /// use weir_rl_core::Quota;
    /// use weir_keyed::{HardenedShards, KeyedConfig, KeyedGcra};
    ///
    /// let per_ip = KeyedGcra::gcra(Quota::per_second(10)?, KeyedConfig::builder(100_000).build()?);
    /// (0..100_000u64).for_each(|key| assert!(per_ip.check(&key).is_allowed()));
    /// assert_eq!(per_ip.hardened_shards(), HardenedShards::default());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn hardened_shards(&self) -> crate::HardenedShards {
        crate::HardenedShards {
            keys: self.shards.iter().filter(|shard| shard.is_hardened()).count(),
            hot_keys: self.hot_keys.is_hardened(),
        }
    }

    /// Keys stored.
    pub fn len(&self) -> usize {
        // Ordering: Relaxed; a statistic.
        self.live.load(Ordering::Relaxed)
    }

    /// Keys in hot-key mode (for the `weir_keyed_hot_keys` gauge).
    #[cfg(feature = "metrics")]
    pub(crate) fn hot_len(&self) -> usize {
        // Ordering: Relaxed; a statistic.
        self.hot_count.load(Ordering::Relaxed)
    }

    /// Sets the key-count gauges (`metrics` feature).
    #[cfg(feature = "metrics")]
    pub(crate) fn record_len(&self) {
        self.config.metrics.keys.set(self.len() as f64);
        self.config.metrics.hot_keys.set(self.hot_len() as f64);
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The configuration.
    pub fn config(&self) -> &KeyedConfig {
        &self.config
    }

    /// The algorithm applied to every key.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Calls `f` with every stored key and its state now (for metrics). Weakly
    /// consistent: keys inserted or removed meanwhile may or may not be seen.
    ///
    /// Each shard (about 440 keys) is visited under an epoch guard of its own, which
    /// `f` runs inside: while `f` is paused, slots unlinked anywhere in the store
    /// are not reclaimed, and each shard's slab takes fresh slots only while its
    /// entries awaiting reclamation are at most its keys plus a slack; beyond, new
    /// keys are refused as at a full store ([`DenyReason::KeyCapacity`]) until `f`
    /// returns. Memory stays bounded by the store's settings (`max_keys`, and
    /// `max_hot_keys` for hot keys) either way: see the crate docs, "The memory
    /// bound".
    pub fn for_each(&self, mut f: impl FnMut(&K, Snapshot)) {
        let now = self.clock.now();
        for shard in self.shards.iter() {
            let guard = self.collector.enter();
            for (key, state) in shard.iter(&guard) {
                if !self.algorithm.is_retired(state) {
                    f(key, self.snapshot_of(|| self.hash(key), key, state, now, &guard));
                }
            }
        }
    }

    /// `state`'s snapshot, read from its hot bucket if the key is hot (`hash` gives
    /// the key's hash, asked for only then).
    pub(crate) fn snapshot_of<Q>(
        &self,
        hash: impl FnOnce() -> u64,
        key: &Q,
        state: &A::State,
        now: weir_rl_core::Nanos,
        guard: &Guard<'_>,
    ) -> Snapshot
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match H::kind(&self.algorithm, state) {
            StateKind::Live => self.algorithm.snapshot(state, now),
            StateKind::Promoted => H::hot_snapshot(self, hash(), key, state, now, guard)
                // Being retired: its next check will see a fresh state.
                .unwrap_or_else(|| self.algorithm.snapshot(&self.algorithm.new_state(), now)),
            StateKind::Retired => self.algorithm.snapshot(&self.algorithm.new_state(), now),
        }
    }

    /// Gives `n` units of `admission` back to `state` (the state `key` maps to), or
    /// to its hot bucket if the key is hot.
    pub(crate) fn refund_state<Q>(
        &self,
        hash: u64,
        key: &Q,
        state: &A::State,
        n: u64,
        admission: &Decision,
        guard: &Guard<'_>,
    ) -> Result<(), InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match H::kind(&self.algorithm, state) {
            // A refund that races with a promotion of the key finds the state
            // promoted and gives nothing back (less, never more, than was taken).
            StateKind::Live => Algorithm::refund(&self.algorithm, state, n, admission, &self.clock),
            // Idle (full) when it was retired: nothing to give back.
            StateKind::Retired => Ok(()),
            // A hot key: its bucket is the hot one.
            StateKind::Promoted => H::hot_refund(self, hash, key, state, n, admission, guard),
        }
    }

    /// Removes `key` if it still maps to `state`; returns whether this call removed it.
    pub(crate) fn unlink<Q>(
        &self,
        shard: &Shard<K, A::State>,
        hash: u64,
        key: &Q,
        state: &A::State,
        guard: &Guard<'_>,
    ) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // By the state's identity: no key is compared (no user code runs, so nothing
        // unwinds between a state's retirement and its unlinking).
        let _ = key;
        let removed = shard.remove_value(hash, |current| std::ptr::eq(current, state), guard);
        if removed {
            // Ordering: Relaxed; see `remove`.
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// Inserts a fresh state for `key` (`owned`, cloned outside the guard) within
    /// the bound; returns the state now stored for `key` and whether this call
    /// inserted it (or another thread did first). `NotInserted::Retry` when another
    /// try, under a guard entered after this one is gone, can succeed: room was
    /// made, or (`retry_slab`) the shard's slab refused to grow and handed what it
    /// held to the collector, which may reclaim it once this guard is gone.
    pub(crate) fn insert<'g, Q>(
        &self,
        shard: &'g Shard<K, A::State>,
        hash: u64,
        key: &Q,
        owned: K,
        retry_slab: bool,
        guard: &'g Guard<'_>,
    ) -> Result<(&'g A::State, bool), NotInserted>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The place in the bound is taken under the shard's lock, once the key is
        // known to be absent: a racing first check of the same key then either finds
        // it or inserts it itself, and never sees the store full for a place taken
        // for this very key.
        let inserted =
            shard.try_insert(hash, owned, self.algorithm.new_state(), || self.take_place(), &self.hasher, guard);
        metric!(self, |m| if matches!(inserted, Err(Inserted::Rehash { hardened: true })) {
            m.hardened_shards.increment(1);
        });
        match inserted {
            Ok(state) => Ok((state, true)),
            Err(Inserted::Held(current)) => Ok((current, false)),
            Err(Inserted::Rehash { .. }) => Err(NotInserted::Rehash),
            Err(Inserted::Refused) => match self.make_room() {
                // The retry runs the key's `Clone` again, outside the guard.
                Ok(()) => Err(NotInserted::Retry { slab: false }),
                // Another first check of `key` may have made room and inserted it
                // after this one was refused: then it is held.
                Err(Full) => shard.get(hash, key, guard).map(|current| (current, false)).ok_or(NotInserted::Full),
            },
            Err(Inserted::Full) => {
                // Ordering: Relaxed; give back the place (see `remove`). The shard's
                // slab is at its limit (its slots awaiting reclamation are at their
                // bound, or it has 2²⁴ slots): as full as the store. It handed its
                // retirements to the collector: once this guard is gone, those no
                // other guard holds back are reclaimed, and one more try may find a
                // slot.
                self.live.fetch_sub(1, Ordering::Relaxed);
                // This thread's own collector batch may hold retirements of that
                // shard too (unlinks made under this thread's guards elsewhere, an
                // index replaced): hand it over as well, or the retry finds the same
                // slots held back by nothing but this thread's batch.
                crate::table::flush(guard);
                if retry_slab { Err(NotInserted::Retry { slab: true }) } else { Err(NotInserted::Full) }
            }
        }
    }

    /// Takes one of the `max_keys` places if one is free; never evicts (it runs
    /// under a shard's lock, and eviction takes shard locks).
    fn take_place(&self) -> bool {
        // Ordering: Relaxed; the bound needs only the atomicity of the CAS on this
        // counter, not ordering with other memory.
        let mut live = self.live.load(Ordering::Relaxed);
        while live < self.config.max_keys {
            // Ordering: Relaxed; see above.
            match self.live.compare_exchange_weak(live, live + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => live = actual,
            }
        }
        false
    }

    /// After a full store refused a place: evicts idle keys if the policy allows,
    /// and says whether another try can succeed.
    fn make_room(&self) -> Result<(), Full> {
        if matches!(self.config.at_capacity, AtCapacity::Deny) {
            return Err(Full);
        }
        let evicted = self.evict_for_room();
        // Ordering: Relaxed; see `take_place`.
        if !evicted && self.live.load(Ordering::Relaxed) >= self.config.max_keys {
            return Err(Full);
        }
        Ok(())
    }

    pub(crate) fn at_capacity(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        match &self.config.at_capacity {
            AtCapacity::EvictIdleOrOverflow(overflow) => {
                metric!(self, |m| m.overflow_checks.increment(1));
                // A denial here is the store's capacity (the budget every key that
                // did not fit shares is spent), not this key's rate.
                overflow.check_n(n).map(|decision| decision.because(DenyReason::KeyCapacity).from_fallback())
            }
            AtCapacity::EvictIdle | AtCapacity::Deny => {
                metric!(self, |m| m.capacity_denials.increment(1));
                Ok(self.capacity_denial())
            }
        }
    }

    /// The denial of a key the full store cannot take: nothing remaining for it
    /// until `capacity_retry_after`, which is also when it reports the key's
    /// capacity back (a reset of zero beside nothing remaining would tell a client
    /// to retry at once).
    pub(crate) fn capacity_denial(&self) -> Decision {
        let retry = weir_rl_core::__private::duration_as_nanos_saturating(self.config.capacity_retry_after);
        Decision::denied_because(DenyReason::KeyCapacity, Snapshot::new(self.algorithm.limit(), 0, retry), retry)
    }

    #[inline]
    pub(crate) fn shard(&self, hash: u64) -> &Shard<K, A::State> {
        &self.shards[self.shard_index(hash)]
    }

    /// The shard of a key with hash `hash`: its shard bits (32 to 47; the shard's
    /// index uses the low 32 bits, and the tag the top 8) scaled to the shard count,
    /// which need not be a power of two (at most `MAX_SHARDS`, 2¹⁶).
    #[inline]
    pub(crate) fn shard_index(&self, hash: u64) -> usize {
        ((((hash & SHARD_BITS) >> 32) * self.shards.len() as u64) >> 16) as usize
    }

    /// `key`'s hash: computed once per operation, by the store's hasher, and by
    /// the strong one too if the key's shard has hardened (see `Hashers`).
    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hash_and_shard(key).0
    }

    /// `key`'s hash (see `hash`) and its shard's index, computed once: both
    /// hashes keep the shard bits (`SHARD_BITS`), so the shard is the fast
    /// hash's.
    #[inline]
    fn hash_and_shard<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, usize) {
        let fast = self.hasher.fast(key);
        let index = self.shard_index(fast);
        (if self.shards[index].is_hardened() { self.hasher.strong(key, fast) } else { fast }, index)
    }

    /// `key`'s hash for the hot keys' shard, from `hash`, its hash for its own
    /// shard: the same unless one of the two shards has hardened and the other
    /// not.
    #[inline]
    pub(crate) fn hot_hash<Q: Hash + ?Sized>(&self, hash: u64, key: &Q) -> u64 {
        let hardened = self.hot_keys.is_hardened();
        if hardened == (hash & HARDENED != 0) { hash } else { self.hasher.for_shard(key, hardened) }
    }
}

/// The per-key contract, for middleware generic over stores: the same as the
/// inherent methods, for every borrowed form `Q` of the key.
impl<K, Q, A, C, S, H> KeyedLimiter<Q> for Keyed<K, A, C, S, H>
where
    K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    A: KeyedAlgorithm,
    A::State: Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone,
    H: HotKeyMode<A>,
{
    #[inline]
    fn check_n(&self, key: &Q, n: u64) -> Result<Decision, InsufficientCapacity> {
        Keyed::check_n(self, key, n)
    }

    fn refund(&self, key: &Q, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        Keyed::refund(self, key, n, admission)
    }

    fn snapshot(&self, key: &Q) -> Snapshot {
        Keyed::snapshot(self, key)
    }

    fn policies(&self) -> &[Policy] {
        &self.policies
    }
}

/// The async form of the per-key contract, at no cost: every future is ready at
/// once ([`core::future::Ready`]; nothing boxed, nothing allocated).
///
/// ```
/// use std::future::Future;
/// use std::pin::pin;
/// use std::task::{Context, Poll, Waker};
/// use weir_rl_core::{AsyncKeyedLimiter, Quota};
/// use weir_keyed::{KeyedConfig, KeyedGcra};
///
/// async fn admit<S: AsyncKeyedLimiter<str>>(store: &S, client: &str) -> Result<bool, S::Error> {
///     Ok(store.check_n(client, 1).await?.is_allowed())
/// }
///
/// let per_user: KeyedGcra<String> = KeyedGcra::gcra(Quota::per_minute(1)?, KeyedConfig::builder(100).build()?);
/// let mut first = pin!(admit(&per_user, "alice"));
/// let mut cx = Context::from_waker(Waker::noop());
/// assert!(matches!(first.as_mut().poll(&mut cx), Poll::Ready(Ok(true)))); // ready at the first poll
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl<K, Q, A, C, S, H> AsyncKeyedLimiter<Q> for Keyed<K, A, C, S, H>
where
    K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    A: KeyedAlgorithm + Send + Sync,
    A::State: Send + Sync + 'static,
    C: Clock + Send + Sync,
    S: BuildHasher + Clone + Send + Sync,
    H: HotKeyMode<A>,
{
    type Error = InsufficientCapacity;

    #[inline]
    fn check_n(&self, key: &Q, n: u64) -> impl Future<Output = Result<Decision, InsufficientCapacity>> + Send {
        std::future::ready(Keyed::check_n(self, key, n))
    }

    #[inline]
    fn refund(
        &self,
        key: &Q,
        n: u64,
        admission: &Decision,
    ) -> impl Future<Output = Result<(), InsufficientCapacity>> + Send {
        std::future::ready(Keyed::refund(self, key, n, admission))
    }

    #[inline]
    fn snapshot(&self, key: &Q) -> impl Future<Output = Result<Snapshot, InsufficientCapacity>> + Send {
        std::future::ready(Ok(Keyed::snapshot(self, key)))
    }

    fn policies(&self) -> &[Policy] {
        &self.policies
    }
}

/// The store is full and the policy did not make room.
#[derive(Debug)]
pub(crate) struct Full;

/// What [`Keyed::settle`] left a check to do.
enum Settled {
    /// Return this.
    Done(Result<Decision, InsufficientCapacity>),
    /// Return this admission once the key is promoted (`Keyed::promote_contended`).
    Promote(Decision),
    /// Look the key up again.
    Retry,
}

/// Why `Keyed::insert` did not insert.
#[derive(Debug)]
pub(crate) enum NotInserted {
    /// Full: the key is refused.
    Full,
    /// Another try, once the caller has left its guard, can succeed (`slab`: the
    /// shard's slab refused to grow; worth one more try only).
    Retry { slab: bool },
    /// The key's shard hardened (see `Hashers`) since its hash was computed:
    /// hash it again and retry.
    Rehash,
}
