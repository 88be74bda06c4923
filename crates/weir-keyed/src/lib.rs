//! Per-key rate limiting (per IP, per API key, per user) over any weir algorithm,
//! with a hard bound on memory and exact idle eviction.
//!
//! ```
//! use std::time::Duration;
//! use weir_core::{ManualClock, Quota};
//! use weir_keyed::{AtCapacity, Keyed, KeyedConfig};
//!
//! let clock = ManualClock::new();
//! let config = KeyedConfig::new(100_000)?.at_capacity(AtCapacity::EvictIdle);
//! let per_ip = Keyed::gcra_with_clock(Quota::per_second(2)?, config, clock.clone());
//!
//! assert!(per_ip.check(&"203.0.113.7").is_allowed());
//! assert!(per_ip.check(&"203.0.113.7").is_allowed());
//! assert!(per_ip.check(&"203.0.113.7").is_denied()); // this client's burst is spent
//! assert!(per_ip.check(&"198.51.100.1").is_allowed()); // another client is not affected
//! assert_eq!(per_ip.len(), 2);
//!
//! clock.advance(Duration::from_secs(1)); // both buckets are full again: idle
//! assert_eq!(per_ip.sweep_all(), 2); // dropping them changes no decision
//! assert!(per_ip.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Algorithms
//!
//! Any algorithm implementing [`KeyedAlgorithm`] (an [`Algorithm`] with the
//! [`Retire`] protocol): GCRA, and with the `window` feature the fixed window, the
//! sliding-window counter and the sliding log of `weir-window`.
//!
//! ```
//! # #[cfg(feature = "window")] {
//! use std::hash::RandomState;
//! use weir_core::{Clock, ManualClock, Quota};
//! use weir_keyed::{Keyed, KeyedConfig};
//! use weir_window::sliding::SlidingWindowAlgorithm;
//!
//! let clock = ManualClock::new();
//! let algorithm = SlidingWindowAlgorithm::new(Quota::per_minute(100)?, clock.now())?;
//! let per_user: Keyed<String, _, _> =
//!     Keyed::with_hasher(algorithm, KeyedConfig::new(10_000)?, clock, RandomState::new());
//! assert!(per_user.check_n("alice", 100)?.is_allowed());
//! assert!(per_user.check("alice").is_denied());
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The map
//!
//! Keys live in [papaya](https://docs.rs/papaya) hash maps: a check of an existing
//! key takes no lock and allocates nothing (one epoch guard, one lookup, then the
//! algorithm's own atomic protocol on the key's state). Measured on the 2-core dev VM
//! for this access pattern (check of an existing `u64` key, GCRA state, 1 000 keys in
//! cache, best of 30 interleaved rounds; BENCHMARKS.md "Choosing the map"):
//!
//! | map | ns per check | bytes per key (RSS, 1M keys) | reads |
//! |---|---:|---:|---|
//! | papaya | 12.4 | 51–56 | lock-free |
//! | scc `HashIndex` | 27.9 | 62 (needs `Clone` values: an extra `Arc`) | lock-free |
//! | scc `HashMap` | 25.3 | 38 | bucket read-write lock per read |
//! | dashmap (governor's) | 13.2 | 36 | shard read-write lock per read |
//!
//! papaya is the only candidate that is both lock-free on reads and fast; the lock
//! words of the others are shared writes on every read, which is what stops a
//! read-mostly map from scaling across cores.
//!
//! **What a whole check costs** (2-core dev VM, BENCHMARKS.md): 60–75 ns for an
//! existing key on one thread, against 42–48 ns for governor's DashMap-based keyed
//! limiter; with keys spread over 100 000, 136 ns against 70 ns. A profile puts a
//! third of a cached check in the TSC clock read and a quarter in SipHash (a
//! [`CoarseClock`](weir_core::CoarseClock) and a faster hasher for trusted keys cut
//! both), and, for keys not in cache, most of it in papaya's four dependent loads
//! (table, metadata byte, entry pointer, boxed entry) where DashMap's inline entries
//! take two. What the boxed entries buy, reads that write no shared line, can only
//! pay off on many cores, where it is not yet measured.
//!
//! Keys are spread over many small papaya maps (shards of about 512 keys at full
//! capacity) so that idle eviction can proceed a shard at a time (see below). The
//! shard is chosen by a fast seeded hash; inside a shard, keys are hashed by `S`,
//! std's SipHash `RandomState` by default, which resists collision floods from
//! adversarial keys (spoofed IPs, random API keys). A faster hasher can be plugged in
//! as `S` where keys are trusted.
//!
//! # Exact idle eviction
//!
//! A key whose state is indistinguishable from a fresh one ([`Algorithm::is_idle`]:
//! for GCRA, a full bucket) can be dropped without changing any decision: its next
//! check sees a fresh, full state, which decides exactly as the old one would have.
//! Dropping uses the [`Retire`] protocol, so a check racing with the eviction never
//! loses an admission: the sweep *retires* the state (one CAS that succeeds only if
//! the state is idle; a retired state admits nothing), then unlinks it. A check that
//! raced and landed on the retired state is denied, sees [`Retire::is_retired`], and
//! retries on a fresh state; a check that landed first made the state non-idle, and
//! the retirement failed. loom checks this race on the store's own code
//! (`loom-tests/tests/keyed_eviction.rs`; under loom the maps are a small model map
//! in place of papaya, whose every operation is one atomic step as papaya's are).
//!
//! Eviction is incremental and never stops the world: once the store holds half its
//! bound (`sweep_from`), every `sweep_every`-th new key sweeps the next shard (about
//! 512 keys) for idle ones; [`Keyed::sweep`], [`Keyed::sweep_all`] and an opt-in
//! background thread ([`Keyed::spawn_sweeper`]) do the same on demand. Sweeps run
//! concurrently with checks; nothing is locked.
//!
//! Why not sweep below half the bound: an idle key is often a live client between
//! requests (one request a second under a quota of 100 a second is idle 99% of the
//! time). Evicting it changes no decision, but its next request inserts it again,
//! and every insertion paces further sweeps: a store far below its bound that swept
//! anyway kept evicting and re-inserting its own clients. Measured (criterion,
//! `keyed/allowed`, 1 000 keys each checked in turn under a quota that refills
//! between checks, store bounded at 4 096 keys, 2-core dev VM): 332 ns per check
//! sweeping from the first key, against 63 ns with sweeps from half the bound.
//! Below the bound idle keys cost only memory the bound already allows.
//!
//! # The memory bound
//!
//! At most `max_keys` keys are stored, whatever arrives. When a new key finds the
//! store full, the [`AtCapacity`] policy decides: evict idle keys to make room, and if
//! there are none, deny the new key with [`DenyReason::KeyCapacity`] (the default),
//! or admit it against a shared overflow limiter; or deny without evicting. A flood
//! of 10 million distinct keys into a store of 100 000 keeps memory bounded
//! (`tests/flood.rs` measures it).
//!
//! Memory per `u64` key (GCRA state, `weir-bench memory --full`, 10⁶ keys, 2-core
//! dev VM, BENCHMARKS.md): 34.6 heap bytes (51.6 resident) in a full store, 44.1
//! (61.8) in a store at 10% of its bound; governor's DashMap-based store, 35.7
//! (36.1). Quick runs, with fewer keys, measure a few bytes less for every store.
//! papaya's boxed entries and per-shard tables are the price of lock-free reads.
//!
//! **Cost under a flood.** The worst case for eviction is a store kept exactly full
//! of keys that go idle one at a time (each new key arriving just as the oldest goes
//! idle): every new key then sweeps one shard (about 512 keys, a few µs) to find the
//! one idle key. When a sweep finds nothing idle, new keys are refused without
//! sweeping for the next 100 µs, so a flood cannot make the store scan continuously.
//!
//! # Hot keys
//!
//! A key that every core hits at once (a tenant with heavy traffic) contends on its
//! one state word like any shared limiter. A GCRA store can turn such keys hot
//! ([`Keyed::with_hot_keys`]): a check that loses `after_lost_races` CAS races to
//! other checks of the same key (contention the check measures for free) moves the
//! key's bucket to per-core lease stripes, the engine of
//! [`weir_gcra::LeasedGcra`], with its documented over-admission bound; other keys
//! stay exact. The move is one CAS that carries the key's state over (no admission is
//! lost: `loom-tests/tests/keyed_eviction.rs` and the property tests check it, with
//! promotions racing checks, sweeps, `remove` and later promotions of the key); a hot
//! key whose bucket is idle with every lease expired is swept like any idle key (and
//! while every hot slot is taken, insertions pace sweeps even below `sweep_from`, so
//! a hot key gone idle frees its slot).
//! [`Keyed::promote`] turns a key hot on demand.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Weak};
use std::time::Duration;
use weir_core::sync::{AtomicU64, AtomicUsize, CachePadded, Ordering};
use weir_core::{
    Algorithm, Clock, Decision, DenyReason, InsufficientCapacity, Limiter, MonotonicClock, Quota, Retire, Snapshot,
};
use weir_gcra::leased::stripe_of_this_thread;
use weir_gcra::{GcraAlgorithm, GcraState, LeaseConfig, LeaseStripes, StateKind};

mod map;
use map::{Collector, Guard, Map};

/// Keys per shard the shard count aims for at full capacity: a sweep step scans one
/// shard, so this is the work of one step. Smaller shards sweep faster but each
/// carries a minimum table, which costs memory when a store is far below its bound
/// (measured, `weir-bench memory`: 256 keys per shard cost 65 heap bytes per key in a
/// store at 10% of its bound, 512 cost 44, 1024 cost 37; a full store costs 30–35
/// with any of them).
const KEYS_PER_SHARD: usize = 512;
/// The most shards a store uses.
const MAX_SHARDS: usize = 1 << 16;

/// What a full store does with a request for a key it does not hold.
#[derive(Clone)]
#[non_exhaustive]
pub enum AtCapacity {
    /// Evict idle keys to make room (exact: no decision changes); if none is idle,
    /// deny the new key with [`DenyReason::KeyCapacity`]. The default.
    EvictIdle,
    /// Deny the new key with [`DenyReason::KeyCapacity`] without evicting on demand.
    /// Incremental sweeps are paced by insertions, and a full store of this policy
    /// inserts nothing: it stays full of idle keys until [`Keyed::sweep`],
    /// [`Keyed::sweep_all`] or a background sweeper ([`Keyed::spawn_sweeper`]) runs.
    /// Pair it with a sweeper.
    Deny,
    /// Evict idle keys to make room; if none is idle, check the request against this
    /// shared limiter instead (all keys that do not fit share it).
    EvictIdleOrOverflow(Arc<dyn Limiter + Send + Sync>),
}

impl fmt::Debug for AtCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::EvictIdle => "EvictIdle",
            Self::Deny => "Deny",
            Self::EvictIdleOrOverflow(_) => "EvictIdleOrOverflow(..)",
        })
    }
}

/// An algorithm a [`Keyed`] store can run: any [`Retire`] algorithm. GCRA also
/// supports hot keys ([`Keyed::with_hot_keys`]), through the view below; other
/// algorithms keep the defaults (no hot mode).
pub trait KeyedAlgorithm: Retire {
    /// This algorithm as GCRA, if it is.
    fn as_gcra(&self) -> Option<&GcraAlgorithm> {
        None
    }

    /// `state` as a GCRA state, if it is one.
    fn gcra_state<'s>(&self, state: &'s Self::State) -> Option<&'s GcraState> {
        let _ = state;
        None
    }
}

impl KeyedAlgorithm for GcraAlgorithm {
    #[inline]
    fn as_gcra(&self) -> Option<&GcraAlgorithm> {
        Some(self)
    }
    #[inline]
    fn gcra_state<'s>(&self, state: &'s GcraState) -> Option<&'s GcraState> {
        Some(state)
    }
}

#[cfg(feature = "window")]
mod window {
    use super::KeyedAlgorithm;
    use weir_window::fixed::FixedWindowAlgorithm;
    use weir_window::log::SlidingLogAlgorithm;
    use weir_window::sliding::SlidingWindowAlgorithm;

    /// Per-key fixed windows (no hot mode).
    impl KeyedAlgorithm for FixedWindowAlgorithm {}
    /// Per-key sliding-window counters (no hot mode).
    impl KeyedAlgorithm for SlidingWindowAlgorithm {}
    /// Per-key sliding logs (no hot mode; each key costs `8 × limit` bytes).
    impl KeyedAlgorithm for SlidingLogAlgorithm {}
}

/// Hot-key mode for a GCRA store: when checks of one key collide (a check loses
/// `after_lost_races` CAS races to other checks of the same key), the key's bucket
/// moves to per-core lease stripes ([`LeaseStripes`], the engine of
/// [`weir_gcra::LeasedGcra`]), so its checks stop contending on one cache line. The
/// key then has the leased limiter's bounded over-admission
/// ([`LeaseConfig::over_admission_bound`]); every other key stays exact. At most
/// `max_hot_keys` keys are hot at once (each costs a few KiB of stripes); a hot key
/// whose bucket is idle with every lease expired is swept like any idle key
/// (insertions pace sweeps while every hot slot is taken, whatever
/// [`KeyedConfig::sweep_from`] says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotKeys {
    lease: LeaseConfig,
    after_lost_races: u32,
    max_hot_keys: usize,
}

impl HotKeys {
    /// Leases as `lease` says; promote a key after 2 lost races; at most 64 hot keys.
    pub fn new(lease: LeaseConfig) -> Self {
        Self { lease, after_lost_races: 2, max_hot_keys: 64 }
    }

    /// Promote a key when one of its checks loses `n` CAS races (at least 1).
    pub fn after_lost_races(self, n: u32) -> Result<Self, KeyedConfigError> {
        if n == 0 {
            return Err(KeyedConfigError::ZeroLostRaces);
        }
        Ok(Self { after_lost_races: n, ..self })
    }

    /// At most `n` hot keys at once (at least 1).
    pub fn max_hot_keys(self, n: usize) -> Result<Self, KeyedConfigError> {
        if n == 0 {
            return Err(KeyedConfigError::ZeroHotKeys);
        }
        Ok(Self { max_hot_keys: n, ..self })
    }

    /// The lease configuration of a hot key.
    pub fn lease(&self) -> &LeaseConfig {
        &self.lease
    }
}

/// How a [`Keyed`] store bounds and maintains itself.
#[derive(Debug, Clone)]
pub struct KeyedConfig {
    max_keys: usize,
    at_capacity: AtCapacity,
    sweep_every: usize,
    sweep_from: usize,
    capacity_retry_after: Duration,
}

impl KeyedConfig {
    /// At most `max_keys` keys; evict idle keys when full; once half full, sweep one
    /// shard every 64 new keys; a key denied for capacity is told to retry after 1 s.
    pub fn new(max_keys: usize) -> Result<Self, KeyedConfigError> {
        if max_keys == 0 {
            return Err(KeyedConfigError::ZeroMaxKeys);
        }
        if max_keys > usize::MAX / 2 {
            return Err(KeyedConfigError::MaxKeysTooLarge(max_keys));
        }
        Ok(Self {
            max_keys,
            at_capacity: AtCapacity::EvictIdle,
            sweep_every: 64,
            sweep_from: max_keys / 2,
            capacity_retry_after: Duration::from_secs(1),
        })
    }

    /// What to do with a new key when the store is full.
    pub fn at_capacity(self, policy: AtCapacity) -> Self {
        Self { at_capacity: policy, ..self }
    }

    /// Sweep one shard for idle keys every `n` new keys (at least 1).
    pub fn sweep_every(self, n: usize) -> Result<Self, KeyedConfigError> {
        if n == 0 {
            return Err(KeyedConfigError::ZeroSweepEvery);
        }
        Ok(Self { sweep_every: n, ..self })
    }

    /// Run the incremental sweep only while the store holds at least `keys` keys, or
    /// every hot-key slot is taken (default: half of `max_keys`; 0 sweeps from the
    /// first key; more than `max_keys` never paces a sweep for the key count, leaving
    /// eviction to a full store's policy, explicit sweeps and the background
    /// sweeper). See the crate docs for why sweeping a store far below its bound
    /// costs more than it saves.
    pub fn sweep_from(self, keys: usize) -> Self {
        Self { sweep_from: keys, ..self }
    }

    /// The `Retry-After` given to a key denied for capacity.
    pub fn capacity_retry_after(self, after: Duration) -> Self {
        Self { capacity_retry_after: after, ..self }
    }

    /// The bound on stored keys.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }
}

/// Why a [`KeyedConfig`] is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedConfigError {
    /// `max_keys` of zero: the store could hold nothing.
    ZeroMaxKeys,
    /// `max_keys` larger than any machine's memory could hold.
    MaxKeysTooLarge(usize),
    /// `sweep_every` of zero.
    ZeroSweepEvery,
    /// Hot-key promotion after zero lost races.
    ZeroLostRaces,
    /// At most zero hot keys.
    ZeroHotKeys,
}

impl fmt::Display for KeyedConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroMaxKeys => f.write_str("max_keys is zero; a per-key store must hold at least one key"),
            Self::MaxKeysTooLarge(n) => {
                write!(f, "max_keys {n} is too large to be a memory bound; use at most usize::MAX / 2")
            }
            Self::ZeroSweepEvery => f.write_str("sweep_every is zero; sweep at least every 1 new key"),
            Self::ZeroLostRaces => f.write_str("a key cannot turn hot after 0 lost races; use at least 1"),
            Self::ZeroHotKeys => f.write_str("max_hot_keys is zero; to disable hot keys, do not call with_hot_keys"),
        }
    }
}

impl std::error::Error for KeyedConfigError {}

/// A per-key limiter: one state of algorithm `A` per key, at most `max_keys` keys.
///
/// See the [crate docs](crate) for the map, eviction and the memory bound.
pub struct Keyed<K, A: KeyedAlgorithm, C = MonotonicClock, S = RandomState> {
    shards: Box<[Map<K, A::State, S>]>,
    shard_hasher: foldhash::fast::RandomState,
    collector: Arc<Collector>,
    algorithm: A,
    clock: C,
    config: KeyedConfig,
    /// Keys stored; never above `max_keys`. Written only when a key is inserted or
    /// removed, never on a check of an existing key.
    live: CachePadded<AtomicUsize>,
    /// New keys inserted so far (paces the incremental sweep) and the next shard
    /// to sweep.
    inserted: CachePadded<AtomicUsize>,
    cursor: AtomicUsize,
    /// Clock reading (ns) of the last on-demand sweep that found nothing idle; a full
    /// store under a flood does not re-sweep for every new key.
    fruitless_sweep_at: AtomicU64,
    /// Hot-key mode (GCRA only), the hot keys' lease stripes, and how many there are.
    hot: Option<HotKeys>,
    hot_keys: Map<K, LeaseStripes, S>,
    hot_count: AtomicUsize,
}

/// The time after a fruitless on-demand sweep during which new keys are refused
/// without sweeping again (bounds the sweeping work a key flood can cause).
const FRUITLESS_SWEEP_BACKOFF_NS: u64 = 100_000;

impl<K, A: KeyedAlgorithm, C, S> fmt::Debug for Keyed<K, A, C, S> {
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

impl<K> Keyed<K, GcraAlgorithm>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A per-key GCRA limiter enforcing `quota` for each key, on the default clock.
    pub fn gcra(quota: Quota, config: KeyedConfig) -> Self {
        Self::gcra_with_clock(quota, config, MonotonicClock::new())
    }
}

impl<K, C> Keyed<K, GcraAlgorithm, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// A per-key GCRA limiter enforcing `quota` for each key, reading `clock`.
    pub fn gcra_with_clock(quota: Quota, config: KeyedConfig, clock: C) -> Self {
        let algorithm = GcraAlgorithm::new(quota, clock.now());
        Self::with_hasher(algorithm, config, clock, RandomState::new())
    }
}

impl<K, C, S> Keyed<K, GcraAlgorithm, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Turns on hot-key mode (see [`HotKeys`]).
    ///
    /// ```
    /// use weir_core::{ManualClock, Quota};
    /// use weir_gcra::LeaseConfig;
    /// use weir_keyed::{HotKeys, Keyed, KeyedConfig};
    ///
    /// let hot = HotKeys::new(LeaseConfig::new(8)?.with_max_lease(32)?);
    /// let per_tenant: Keyed<u64, _, _> =
    ///     Keyed::gcra_with_clock(Quota::per_second(1_000_000)?, KeyedConfig::new(10_000)?, ManualClock::new())
    ///         .with_hot_keys(hot);
    /// assert!(per_tenant.check(&7).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_hot_keys(self, hot: HotKeys) -> Self {
        Self { hot: Some(hot), ..self }
    }

    /// Moves `key` into hot mode now, whatever its contention (for a key known to be
    /// hot, e.g. a tenant's global limit). Returns whether it is hot afterwards.
    /// Without [`with_hot_keys`](Self::with_hot_keys) this does nothing.
    pub fn promote<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if self.hot.is_none() {
            return false;
        }
        let guard = self.collector.enter();
        let shard = self.shard(key);
        let state = match shard.get(key, &guard) {
            Some(state) => state,
            None => match self.insert(shard, key, &guard) {
                Ok((state, _)) => state,
                Err(Full) => return false,
            },
        };
        self.try_promote(shard, key, &self.algorithm, state, &guard);
        self.algorithm.is_promoted(state)
            && self.hot_keys.get(key, &guard).is_some_and(|stripes| stripes.owner() == owner_of(state))
    }

    /// Whether `key` is in hot mode.
    pub fn is_hot<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let guard = self.collector.enter();
        self.shard(key).get(key, &guard).is_some_and(|state| self.algorithm.is_promoted(state))
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
    pub fn with_hasher(algorithm: A, config: KeyedConfig, clock: C, hasher: S) -> Self {
        let shards = config.max_keys.div_ceil(KEYS_PER_SHARD).next_power_of_two().min(MAX_SHARDS);
        let collector = Arc::new(Collector::new());
        let shards: Vec<_> = (0..shards).map(|_| Map::new(hasher.clone(), &collector)).collect();
        let hot_keys = Map::new(hasher, &collector);
        Self {
            shards: shards.into_boxed_slice(),
            shard_hasher: foldhash::fast::RandomState::default(),
            collector,
            algorithm,
            clock,
            config,
            live: CachePadded::new(AtomicUsize::new(0)),
            inserted: CachePadded::new(AtomicUsize::new(0)),
            cursor: AtomicUsize::new(0),
            fruitless_sweep_at: AtomicU64::new(0),
            hot: None,
            hot_keys,
            hot_count: AtomicUsize::new(0),
        }
    }

    /// Checks one request for `key`.
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match self.check_n(key, 1) {
            Ok(decision) => decision,
            // A cost of 1 exceeds the limit only for an overflow limiter with a burst
            // of 0, which `Quota` rules out.
            Err(_) => self.capacity_denial(),
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
        if n == 0 {
            // Admitted, consumes nothing, and stores nothing.
            return Ok(Decision::allowed(self.snapshot(key)));
        }
        let shard = self.shard(key);
        let guard = self.collector.enter();
        loop {
            let (state, inserted) = match shard.get(key, &guard) {
                Some(state) => (state, false),
                None => {
                    let limit = self.algorithm.limit();
                    if n > limit {
                        return Err(InsufficientCapacity { requested: n, capacity: limit });
                    }
                    match self.insert(shard, key, &guard) {
                        Ok(found) => found,
                        Err(Full) => return self.at_capacity(n),
                    }
                }
            };
            let gcra = self.algorithm.as_gcra().zip(self.algorithm.gcra_state(state));
            let hot = self.hot.and_then(|hot| Some((hot, gcra?)));
            let (decision, lost_races) = match hot {
                Some((_, (gcra, gcra_state))) => gcra.check_n_contended(gcra_state, n, &self.clock)?,
                None => (self.algorithm.check_n(state, n, &self.clock)?, 0),
            };
            if decision.is_denied() {
                // Classify the state from one load: retired (raced with an eviction;
                // it was idle, so a fresh state decides exactly as it would have),
                // promoted (decide on its hot stripes), or live (a real denial).
                let kind = match gcra {
                    Some((gcra, gcra_state)) => gcra.state_kind(gcra_state),
                    None if self.algorithm.is_retired(state) => StateKind::Retired,
                    None => StateKind::Live,
                };
                match kind {
                    StateKind::Retired => {
                        self.unlink(shard, key, state, &guard);
                        continue;
                    }
                    StateKind::Promoted => {
                        if let Some((gcra, gcra_state)) = gcra {
                            match self.check_hot(shard, key, gcra, gcra_state, state, n, &guard) {
                                Some(decision) => return decision,
                                None => continue,
                            }
                        }
                    }
                    StateKind::Live => {}
                }
            } else if let Some((config, (gcra, gcra_state))) = hot
                && lost_races >= config.after_lost_races
            {
                self.try_promote(shard, key, gcra, gcra_state, &guard);
            }
            if inserted {
                // Pace the incremental sweep by insertions, after this key's first
                // decision: a sweep before it would find the fresh state idle and
                // could evict it before it was ever checked.
                self.paced_sweep();
            }
            return Ok(decision);
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
        let guard = self.collector.enter();
        match self.shard(key).get(key, &guard) {
            Some(state) if !self.algorithm.is_retired(state) => self.snapshot_of(key, state, now, &guard),
            _ => self.algorithm.snapshot(&self.algorithm.new_state(), now),
        }
    }

    /// Forgets `key` (its next check starts from a fresh state); returns whether it
    /// was stored. Unlike eviction this may change decisions: it is how an operator
    /// resets a client. A check racing with it may be decided on the removed state.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let guard = self.collector.enter();
        let Some(state) = self.shard(key).remove(key, &guard) else {
            return false;
        };
        // Ordering: Relaxed; the count publishes nothing, and its bound is kept by the
        // CAS in `reserve`.
        self.live.fetch_sub(1, Ordering::Relaxed);
        if let Some(gcra_state) = self.algorithm.gcra_state(state) {
            // Only this state's hot stripes: a newer state of the key may have its own.
            let owner = owner_of(gcra_state);
            if self.hot_keys.remove_if(key, |_, stripes| stripes.owner() == owner, &guard) {
                // Ordering: Relaxed; as above, for the hot-key bound.
                self.hot_count.fetch_sub(1, Ordering::Relaxed);
            }
        }
        true
    }

    /// Resets `key` to a fresh state (the same as [`remove`](Self::remove)).
    pub fn reset<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove(key)
    }

    /// Keys stored.
    pub fn len(&self) -> usize {
        // Ordering: Relaxed; a statistic.
        self.live.load(Ordering::Relaxed)
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
    pub fn for_each(&self, mut f: impl FnMut(&K, Snapshot)) {
        let now = self.clock.now();
        let guard = self.collector.enter();
        for shard in self.shards.iter() {
            for (key, state) in shard.iter(&guard) {
                if !self.algorithm.is_retired(state) {
                    f(key, self.snapshot_of(key, state, now, &guard));
                }
            }
        }
    }

    /// Sweeps the next shard for idle keys; returns how many were evicted.
    pub fn sweep(&self) -> usize {
        // Ordering: Relaxed; a round-robin ticket, publishing nothing.
        let next = self.cursor.fetch_add(1, Ordering::Relaxed);
        self.sweep_shard(next & (self.shards.len() - 1))
    }

    /// Sweeps every shard for idle keys; returns how many were evicted. Runs
    /// concurrently with checks (nothing is locked); O(keys).
    pub fn sweep_all(&self) -> usize {
        (0..self.shards.len()).map(|i| self.sweep_shard(i)).sum()
    }

    fn sweep_shard(&self, index: usize) -> usize {
        let now = self.clock.now();
        let shard = &self.shards[index];
        let guard = self.collector.enter();
        let mut evicted = 0;
        for (key, state) in shard.iter(&guard) {
            let retired = self.algorithm.try_retire(state, now) || self.try_retire_hot(key, state, now, &guard);
            if retired && self.unlink(shard, key, state, &guard) {
                evicted += 1;
            }
        }
        evicted
    }

    /// For a hot key: retires its hot bucket if idle with every lease expired, drops
    /// it, and retires the key's state. Returns whether the key's state was retired.
    fn try_retire_hot(&self, key: &K, state: &A::State, now: weir_core::Nanos, guard: &Guard<'_>) -> bool {
        let (Some(gcra), Some(gcra_state)) = (self.algorithm.as_gcra(), self.algorithm.gcra_state(state)) else {
            return false;
        };
        if !gcra.is_promoted(gcra_state) {
            return false;
        }
        match self.hot_keys.get(key, guard) {
            Some(stripes) if stripes.owner() == owner_of(gcra_state) => {
                if !gcra.retire_promoted(gcra_state, stripes, now) {
                    return false;
                }
                self.drop_hot(key, stripes, guard);
                true
            }
            // Promoted, but its stripes are gone (dropped by a sweep or `remove`).
            _ => gcra.retire_orphan(gcra_state),
        }
    }

    /// Removes `key`'s hot stripes if they are still `stripes`.
    fn drop_hot<Q>(&self, key: &Q, stripes: &LeaseStripes, guard: &Guard<'_>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.hot_keys.remove_if(key, |_, current| std::ptr::eq(current, stripes), guard) {
            // Ordering: Relaxed; see `remove`.
            self.hot_count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Checks a promoted key on its hot stripes. `None`: the hot bucket is gone or
    /// retired (the key is being evicted); the caller retries from the lookup.
    #[allow(clippy::too_many_arguments)]
    fn check_hot<Q>(
        &self,
        shard: &Map<K, A::State, S>,
        key: &Q,
        gcra: &GcraAlgorithm,
        gcra_state: &GcraState,
        state: &A::State,
        n: u64,
        guard: &Guard<'_>,
    ) -> Option<Result<Decision, InsufficientCapacity>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.hot_keys.get(key, guard) {
            Some(stripes) if stripes.owner() == owner_of(gcra_state) => {
                let decision = stripes.check_on(gcra, stripe_of_this_thread(), n, &self.clock);
                match decision {
                    Ok(d) if d.is_denied() && gcra.is_retired(stripes.bucket()) => {
                        // A sweep retired the hot bucket (it was idle, every lease
                        // expired) and may not have finished: finish for it, rather than
                        // wait, and retry on a fresh state.
                        gcra.retire_orphan(gcra_state);
                        self.drop_hot(key, stripes, guard);
                        self.unlink(shard, key, state, guard);
                        None
                    }
                    other => Some(other),
                }
            }
            _ => {
                // Promoted, but its own stripes are gone (dropped by a sweep or
                // `remove`; any stripes here belong to a newer state): finish retiring
                // this state and retry on whatever the key maps to now.
                gcra.retire_orphan(gcra_state);
                self.unlink(shard, key, state, guard);
                None
            }
        }
    }

    /// Moves `key` to hot mode, within `max_hot_keys`. Only the thread whose stripes
    /// entered the hot map promotes into them; the stripes record the state they
    /// belong to, so no holder of another state ever uses them.
    fn try_promote<Q>(
        &self,
        shard: &Map<K, A::State, S>,
        key: &Q,
        gcra: &GcraAlgorithm,
        gcra_state: &GcraState,
        guard: &Guard<'_>,
    ) where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let Some(config) = self.hot else { return };
        // Ordering: Relaxed; the bound needs only the CAS's atomicity (see `reserve`).
        let mut count = self.hot_count.load(Ordering::Relaxed);
        loop {
            if count >= config.max_hot_keys || gcra.is_promoted(gcra_state) {
                return;
            }
            // Ordering: Relaxed; see above.
            match self.hot_count.compare_exchange_weak(count, count + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => count = actual,
            }
        }
        let owner = owner_of(gcra_state);
        let mut dropped_stale = false;
        let ours = loop {
            let stripes = LeaseStripes::new(config.lease, self.clock.now()).with_owner(owner);
            match self.hot_keys.try_insert(key.to_owned(), stripes, guard) {
                Ok(ours) => break Some(ours),
                // Stripes of another state of this key. Whose are stale? If ours is
                // still the key's linked, live state, theirs: their state was linked
                // when they were made, before ours (a state once unlinked is never
                // linked again), so it is gone for good; drop them and try once more.
                // Otherwise ours is the stale state (swept or removed while this
                // thread was promoting it) and they may be the key's current state's:
                // leave them alone and give up.
                Err(current)
                    if current.owner() != owner
                        && !dropped_stale
                        && gcra.state_kind(gcra_state) == StateKind::Live
                        && self.is_linked(shard, key, gcra_state, guard) =>
                {
                    dropped_stale = true;
                    self.drop_hot(key, current, guard);
                }
                // Another thread is promoting this very state, or ours is stale.
                Err(_) => break None,
            }
        };
        let release = |stripes: &LeaseStripes| {
            if self.hot_keys.remove_if(key, |_, current| std::ptr::eq(current, stripes), guard) {
                // Ordering: Relaxed; see `remove`.
                self.hot_count.fetch_sub(1, Ordering::Relaxed);
            }
        };
        let Some(ours) = ours else {
            // Ordering: Relaxed; give back the reservation (see `remove`).
            self.hot_count.fetch_sub(1, Ordering::Relaxed);
            return;
        };
        if !gcra.promote(gcra_state, ours) {
            // Retired or promoted meanwhile: ours was never used.
            release(ours);
            return;
        }
        // If `remove` unlinked the state while it was being promoted, no sweep will
        // ever see it: retire it (its holders retry on the key's current state) and
        // drop its stripes.
        if !self.is_linked(shard, key, gcra_state, guard) {
            gcra.retire_orphan(gcra_state);
            release(ours);
        }
    }

    /// Whether `key` maps to `gcra_state` now.
    fn is_linked<Q>(&self, shard: &Map<K, A::State, S>, key: &Q, gcra_state: &GcraState, guard: &Guard<'_>) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        shard
            .get(key, guard)
            .is_some_and(|current| self.algorithm.gcra_state(current).is_some_and(|s| std::ptr::eq(s, gcra_state)))
    }

    /// `state`'s snapshot, read from its hot bucket if the key is hot.
    fn snapshot_of<Q>(&self, key: &Q, state: &A::State, now: weir_core::Nanos, guard: &Guard<'_>) -> Snapshot
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let (Some(gcra), Some(gcra_state)) = (self.algorithm.as_gcra(), self.algorithm.gcra_state(state)) {
            match gcra.state_kind(gcra_state) {
                StateKind::Live => {}
                StateKind::Promoted => {
                    if let Some(stripes) = self.hot_keys.get(key, guard)
                        && stripes.owner() == owner_of(gcra_state)
                    {
                        return gcra.snapshot(stripes.bucket(), now);
                    }
                    // Being retired: its next check will see a fresh state.
                    return self.algorithm.snapshot(&self.algorithm.new_state(), now);
                }
                StateKind::Retired => return self.algorithm.snapshot(&self.algorithm.new_state(), now),
            }
        }
        self.algorithm.snapshot(state, now)
    }

    /// Removes `key` if it still maps to `state`; returns whether this call removed it.
    fn unlink<Q>(&self, shard: &Map<K, A::State, S>, key: &Q, state: &A::State, guard: &Guard<'_>) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = shard.remove_if(key, |_, current| std::ptr::eq(current, state), guard);
        if removed {
            // Ordering: Relaxed; see `remove`.
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// Inserts a fresh state for `key` within the bound; returns the state now
    /// stored for `key` and whether this call inserted it (or another thread did
    /// first).
    fn insert<'g, Q>(
        &self,
        shard: &'g Map<K, A::State, S>,
        key: &Q,
        guard: &'g Guard<'_>,
    ) -> Result<(&'g A::State, bool), Full>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.reserve()?;
        match shard.try_insert(key.to_owned(), self.algorithm.new_state(), guard) {
            Ok(state) => Ok((state, true)),
            Err(current) => {
                // Ordering: Relaxed; give back the reservation (see `remove`).
                self.live.fetch_sub(1, Ordering::Relaxed);
                Ok((current, false))
            }
        }
    }

    /// Sweeps the next shard every `sweep_every` insertions, once the store holds
    /// `sweep_from` keys.
    fn paced_sweep(&self) {
        // Ordering: Relaxed (both); hints (a sweep a key early or late changes nothing).
        // Below `sweep_from`, sweep anyway while every hot slot is taken: only a sweep
        // frees the slot of a hot key gone idle, and another key may need it.
        if self.live.load(Ordering::Relaxed) < self.config.sweep_from
            && self.hot.is_none_or(|hot| self.hot_count.load(Ordering::Relaxed) < hot.max_hot_keys)
        {
            return;
        }
        // Ordering: Relaxed; a pacing counter.
        let inserted = self.inserted.fetch_add(1, Ordering::Relaxed);
        if inserted % self.config.sweep_every == self.config.sweep_every - 1 {
            self.sweep();
        }
    }

    /// Takes one of the `max_keys` places, evicting idle keys if the policy allows.
    fn reserve(&self) -> Result<(), Full> {
        // Ordering: Relaxed; the bound needs only the atomicity of the CAS on this
        // counter, not ordering with other memory.
        let mut live = self.live.load(Ordering::Relaxed);
        loop {
            if live >= self.config.max_keys {
                if matches!(self.config.at_capacity, AtCapacity::Deny) || !self.evict_for_room() {
                    return Err(Full);
                }
                // Ordering: Relaxed; see above.
                live = self.live.load(Ordering::Relaxed);
                continue;
            }
            // Ordering: Relaxed; see above.
            match self.live.compare_exchange_weak(live, live + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(actual) => live = actual,
            }
        }
    }

    /// Sweeps shards for idle keys until one is evicted (at most a few shards), unless
    /// a sweep very recently found nothing. Returns whether room was made.
    fn evict_for_room(&self) -> bool {
        let now = self.clock.now().as_u64();
        // Ordering: Relaxed; a hint that only saves work.
        let fruitless_at = self.fruitless_sweep_at.load(Ordering::Relaxed);
        if fruitless_at != 0 && now.saturating_sub(fruitless_at) < FRUITLESS_SWEEP_BACKOFF_NS {
            return false;
        }
        for _ in 0..4.min(self.shards.len()) {
            if self.sweep() > 0 {
                return true;
            }
        }
        // Ordering: Relaxed; see above.
        self.fruitless_sweep_at.store(now.max(1), Ordering::Relaxed);
        false
    }

    fn at_capacity(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        match &self.config.at_capacity {
            AtCapacity::EvictIdleOrOverflow(overflow) => overflow.check_n(n),
            AtCapacity::EvictIdle | AtCapacity::Deny => Ok(self.capacity_denial()),
        }
    }

    fn capacity_denial(&self) -> Decision {
        let retry = weir_core::nanos::duration_as_nanos_saturating(self.config.capacity_retry_after);
        Decision::denied_because(DenyReason::KeyCapacity, Snapshot::new(self.algorithm.limit(), 0, 0), retry)
    }

    #[inline]
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> &Map<K, A::State, S> {
        let hash = self.shard_hasher.hash_one(key);
        // The high bits: papaya uses the low ones of its own (different) hash.
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)]
    }
}

/// The identity a hot key's stripes record: the address of the key's state (stable
/// while any guard that can reach the state is held).
fn owner_of(state: &GcraState) -> usize {
    state as *const GcraState as usize
}

/// The store is full and the policy did not make room.
#[derive(Debug)]
struct Full;

/// Why a background sweeper could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum SweeperError {
    /// A zero interval would make the sweeper spin on a core.
    ZeroInterval,
    /// The operating system refused to start the thread.
    Spawn(std::io::Error),
}

impl fmt::Display for SweeperError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroInterval => {
                f.write_str("the sweeper's interval is zero; it would spin on a core (1 s is typical)")
            }
            Self::Spawn(e) => write!(f, "could not start the sweeper thread: {e}"),
        }
    }
}

impl std::error::Error for SweeperError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Spawn(e) => Some(e),
            Self::ZeroInterval => None,
        }
    }
}

/// A background thread sweeping a store for idle keys; stops when dropped, or when
/// the store is dropped.
#[derive(Debug)]
pub struct Sweeper {
    stop: Arc<weir_core::sync::AtomicBool>,
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

impl<K, A, C, S> Keyed<K, A, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: KeyedAlgorithm + Send + Sync + 'static,
    A::State: Send + Sync + 'static,
    C: Clock + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Starts a background thread that sweeps the whole store for idle keys every
    /// `interval`, a shard at a time (an opt-in complement to the sweep amortized on
    /// insertions). It holds only a weak reference to the store.
    pub fn spawn_sweeper(self: &Arc<Self>, interval: Duration) -> Result<Sweeper, SweeperError> {
        if interval.is_zero() {
            return Err(SweeperError::ZeroInterval);
        }
        let store: Weak<Self> = Arc::downgrade(self);
        let stop = Arc::new(weir_core::sync::AtomicBool::new(false));
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
