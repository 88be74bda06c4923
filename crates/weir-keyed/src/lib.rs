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
//! store full, the [`AtCapacity`] policy decides: evict an idle key to make room
//! (wherever it is stored), and only if none is idle, deny the new key with
//! [`DenyReason::KeyCapacity`] (the default), or admit it against a shared overflow
//! limiter; or deny without evicting. A flood of 10 million distinct keys into a
//! store of 100 000 keeps memory bounded (`tests/flood.rs` measures it).
//!
//! Memory per `u64` key (GCRA state, `weir-bench memory --full`, 10⁶ keys, 2-core
//! dev VM, BENCHMARKS.md): 34.6 heap bytes (51.6 resident) in a full store, 44.1
//! (61.8) in a store at 10% of its bound; governor's DashMap-based store, 35.7
//! (36.1). Quick runs, with fewer keys, measure a few bytes less for every store.
//! papaya's boxed entries and per-shard tables are the price of lock-free reads.
//!
//! **Finding an idle key.** Each shard keeps a bound: no key of it can be idle
//! before that clock reading (the least of its keys' idle times,
//! [`KeyedAlgorithm::earliest_idle`], as of the shard's last search; a check only
//! moves a key's idle time later, and each new key lowers the bound to its own).
//! The store keeps the least of them. A new key that finds the store full goes
//! round the shards from the sweep's clock hand, skipping each whose bound is
//! still ahead and sweeping the others, until a sweep evicts an idle key; if none
//! does, it looks at each hot key (whose idle time a returning lease can move
//! earlier, so no bound covers them). A search that finds nothing refreshes the
//! bounds, so the new keys after it are denied from one read of the store's bound
//! until a key can be idle, or a key is inserted. Cost per new key at a full store:
//!
//! - denied while no key can be idle: a clock read and one load, plus one look at
//!   each hot key if there are any (at most [`HotKeys::max_hot_keys`]);
//! - otherwise one load per shard (one shard per 512 keys) plus a sweep of each
//!   shard whose bound has passed, until one yields an idle key: at worst every
//!   shard, O(`max_keys`) (the first search of a full store, whose bounds are not
//!   known yet, or one after the bounds of every shard passed without a key going
//!   idle). The worst steady case is a store kept exactly full of keys that go
//!   idle one at a time, each new key arriving just as the oldest goes idle: each
//!   new key then sweeps the one shard that holds it (about 512 keys). Measured
//!   with that flood (the pattern of `tests/flood.rs`: a store of 100 000, keys
//!   idle 100 ms after their check, a new key every µs), 6–7 µs per new key on the
//!   2-core dev VM, every one admitted; giving up after four shards and refusing
//!   new keys for the next 100 µs costs 4 µs, and denies 0.2% of them while idle
//!   keys are stored.
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
//!
//! A promotion that is delayed (its thread paused) while the key's state is swept
//! or removed and the key comes back, and turns hot again, gives up: the hot
//! stripes it finds then belong to the key's current state. Only a promotion of
//! the key's current, live state drops stripes left by an earlier state.

#![cfg_attr(docsrs, feature(doc_cfg))]

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Weak};
use std::time::Duration;
use weir_core::sync::{AtomicBool, AtomicU64, AtomicUsize, CachePadded, Ordering};
use weir_core::{
    Algorithm, AsyncKeyedLimiter, Clock, Decision, DenyReason, InsufficientCapacity, KeyedLimiter, Limiter,
    MonotonicClock, Nanos, Policy, Quota, Retire, Snapshot,
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
    /// Evict an idle key to make room (exact: no decision changes), wherever it is
    /// stored; only if none is idle, deny the new key with
    /// [`DenyReason::KeyCapacity`]. The default. See the crate docs ("Finding an
    /// idle key") for what the search costs.
    EvictIdle,
    /// Deny the new key with [`DenyReason::KeyCapacity`] without evicting on demand.
    /// Incremental sweeps are paced by insertions, and a full store of this policy
    /// inserts nothing: it stays full of idle keys until [`Keyed::sweep`],
    /// [`Keyed::sweep_all`] or a background sweeper ([`Keyed::spawn_sweeper`]) runs.
    /// Pair it with a sweeper.
    Deny,
    /// Evict an idle key to make room, as [`EvictIdle`](Self::EvictIdle); only if
    /// none is idle, check the request against this shared limiter instead (all keys
    /// that do not fit share it).
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
    /// The earliest clock reading at which `state`, read at `now`, can be idle
    /// ([`Algorithm::is_idle`]) if nothing more is admitted on it: a lower bound,
    /// never later than the true time (a later one would hide an idle key). A full
    /// store searching for an idle key to evict ([`AtCapacity::EvictIdle`]) skips
    /// each shard, and then the whole store, until the least of its keys' bounds,
    /// so that new keys arriving at a store full of busy keys are denied without a
    /// search each (see the crate docs, "Finding an idle key"). GCRA and the window
    /// algorithms return the exact time (when the state is full again).
    ///
    /// The default, `now`, claims nothing beyond what a search just saw: a full
    /// store of such an algorithm searches all its keys again for every new key
    /// that arrives at a later clock reading.
    ///
    /// ```
    /// use weir_core::{Algorithm, Nanos, Quota};
    /// use weir_gcra::GcraAlgorithm;
    /// use weir_keyed::KeyedAlgorithm;
    ///
    /// let gcra = GcraAlgorithm::new(Quota::per_second(10)?, Nanos::ZERO); // one permit per 100 ms
    /// let state = gcra.new_state();
    /// assert!(gcra.check_n(&state, 3, &Nanos::ZERO)?.is_allowed());
    /// assert_eq!(gcra.earliest_idle(&state, Nanos::ZERO), Nanos::new(300_000_000)); // full again
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn earliest_idle(&self, state: &Self::State, now: Nanos) -> Nanos {
        let _ = state;
        now
    }

    /// The quota every key gets, as a client sees it ([`KeyedLimiter::policies`], the
    /// `RateLimit-Policy` header): for GCRA its burst per refill time
    /// ([`Policy::of`]), for a window its limit per window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_core::{Nanos, Policy, Quota};
    /// use weir_gcra::GcraAlgorithm;
    /// use weir_keyed::KeyedAlgorithm;
    ///
    /// let gcra = GcraAlgorithm::new(Quota::per_minute(100)?, Nanos::ZERO);
    /// assert_eq!(gcra.policy(), Policy::new(100, Duration::from_secs(60)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn policy(&self) -> Policy;

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

/// `now` plus the time until `state` is full again by its snapshot, for the
/// algorithms whose states are idle exactly when full: GCRA (a TAT at or before
/// now), the fixed window (an empty or past window), the sliding counter (both
/// counts zero) and the sliding log (no live entry). Each reports as its reset the
/// exact time until then (GCRA rounds up to the next whole ns, when the TAT is
/// reached).
fn idle_after_reset<A: Algorithm>(algorithm: &A, state: &A::State, now: Nanos) -> Nanos {
    let reset = weir_core::nanos::duration_as_nanos_saturating(algorithm.snapshot(state, now).reset_after());
    Nanos::new(now.as_u64().saturating_add(reset))
}

impl KeyedAlgorithm for GcraAlgorithm {
    fn earliest_idle(&self, state: &GcraState, now: Nanos) -> Nanos {
        idle_after_reset(self, state, now)
    }
    fn policy(&self) -> Policy {
        Policy::of(&self.quota())
    }
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
    use super::{KeyedAlgorithm, idle_after_reset};
    use weir_core::{Nanos, Policy};
    use weir_window::fixed::{FixedWindowAlgorithm, FixedWindowState};
    use weir_window::log::{SlidingLogAlgorithm, SlidingLogState};
    use weir_window::sliding::{SlidingWindowAlgorithm, SlidingWindowState};

    /// Per-key fixed windows (no hot mode).
    impl KeyedAlgorithm for FixedWindowAlgorithm {
        fn earliest_idle(&self, state: &FixedWindowState, now: Nanos) -> Nanos {
            idle_after_reset(self, state, now)
        }
        fn policy(&self) -> Policy {
            Policy::new(self.limit(), self.window())
        }
    }
    /// Per-key sliding-window counters (no hot mode).
    impl KeyedAlgorithm for SlidingWindowAlgorithm {
        fn earliest_idle(&self, state: &SlidingWindowState, now: Nanos) -> Nanos {
            idle_after_reset(self, state, now)
        }
        fn policy(&self) -> Policy {
            Policy::new(self.limit(), self.window())
        }
    }
    /// Per-key sliding logs (no hot mode; each key costs `8 × limit` bytes).
    impl KeyedAlgorithm for SlidingLogAlgorithm {
        fn earliest_idle(&self, state: &SlidingLogState, now: Nanos) -> Nanos {
            idle_after_reset(self, state, now)
        }
        fn policy(&self) -> Policy {
            Policy::new(self.limit(), self.window())
        }
    }
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
    /// The algorithm's quota as a client sees it, read once at construction.
    policies: [Policy; 1],
    clock: C,
    config: KeyedConfig,
    /// Keys stored; never above `max_keys`. Written only when a key is inserted or
    /// removed, never on a check of an existing key.
    live: CachePadded<AtomicUsize>,
    /// New keys inserted so far (paces the incremental sweep) and the next shard
    /// to sweep.
    inserted: CachePadded<AtomicUsize>,
    cursor: AtomicUsize,
    /// For each shard, and for the whole store, when their keys can next go idle:
    /// what lets a full store search for an idle key without sweeping shards that
    /// cannot have one, and deny new keys without searching while none can.
    bounds: Box<[IdleBound]>,
    store_bound: CachePadded<IdleBound>,
    /// Taken by the one search that may publish bounds (see `publish_bound`).
    publishing: AtomicBool,
    /// Hot-key mode (GCRA only), the hot keys' lease stripes, and how many there are.
    hot: Option<HotKeys>,
    hot_keys: Map<K, LeaseStripes, S>,
    hot_count: AtomicUsize,
}

/// When the keys of a shard (or of the whole store) can next go idle.
#[derive(Debug)]
struct IdleBound {
    /// No key that is neither hot nor retired can be idle before this clock reading
    /// (ns; 0: unknown). Published by a search for an idle key, as the least of the
    /// keys' [`KeyedAlgorithm::earliest_idle`] (for the store, of the shards'
    /// bounds); lowered by each new key to its own, after its first check. A check
    /// only moves a key's idle time later, so the bound holds until the clock
    /// reaches it.
    no_idle_before_ns: AtomicU64,
    /// New keys taken in: a search that sees it change while it runs may have
    /// missed one, and publishes "unknown" (see `Keyed::publish_bound`).
    insertions: AtomicU64,
}

impl IdleBound {
    fn new() -> Self {
        Self { no_idle_before_ns: AtomicU64::new(UNKNOWN), insertions: AtomicU64::new(0) }
    }

    /// Whether nothing can be idle at `now`.
    fn excludes(&self, now: Nanos) -> bool {
        // Ordering: Relaxed; a bound read late is one a concurrent insertion had not
        // lowered yet: the search then comes before that insertion.
        now.as_u64() < self.no_idle_before_ns.load(Ordering::Relaxed)
    }
}

/// The bound nothing is known about.
const UNKNOWN: u64 = 0;

/// The right to publish bounds, held by one search at a time.
struct Publishing<'a>(&'a AtomicBool);

impl<'a> Publishing<'a> {
    fn take(flag: &'a AtomicBool) -> Option<Self> {
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

/// A per-key GCRA store ([`Keyed::gcra`]): the type of a field holding one.
///
/// ```
/// use weir_core::Quota;
/// use weir_keyed::{KeyedConfig, KeyedGcra};
///
/// struct Server {
///     per_ip: KeyedGcra<std::net::IpAddr>,
/// }
/// let server = Server { per_ip: KeyedGcra::gcra(Quota::per_second(10)?, KeyedConfig::new(100_000)?) };
/// assert!(server.per_ip.check(&"203.0.113.7".parse()?).is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type KeyedGcra<K, C = MonotonicClock> = Keyed<K, GcraAlgorithm, C>;

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
    /// use weir_core::Quota;
    /// use weir_keyed::{KeyedConfig, KeyedGcra};
    ///
    /// let per_user: KeyedGcra<String> = KeyedGcra::gcra(Quota::per_minute(100)?, KeyedConfig::new(10_000)?);
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
        Self::with_hasher(algorithm, config, clock, RandomState::new())
    }
}

/// Per-key windows, on the default clock or one of the caller's. Each takes a
/// limit per window (`Quota::per_minute(100)`: at most 100 in any minute's
/// window); a quota with a burst other than its count is refused
/// ([`WindowError::BurstIsNotCount`](weir_window::WindowError::BurstIsNotCount)).
#[cfg(feature = "window")]
mod window_constructors {
    use super::{Keyed, KeyedConfig, MonotonicClock, RandomState};
    use std::hash::Hash;
    use weir_core::{Clock, Quota};
    use weir_window::WindowError;
    use weir_window::fixed::FixedWindowAlgorithm;
    use weir_window::log::SlidingLogAlgorithm;
    use weir_window::sliding::SlidingWindowAlgorithm;

    impl<K: Hash + Eq + Clone + Send + Sync + 'static> Keyed<K, FixedWindowAlgorithm> {
        /// A per-key fixed window enforcing `quota` for each key, on the default clock.
        ///
        /// ```
        /// use weir_core::Quota;
        /// use weir_keyed::{KeyedConfig, KeyedFixedWindow};
        ///
        /// let per_ip: KeyedFixedWindow<String> = KeyedFixedWindow::fixed_window(Quota::per_minute(2)?, KeyedConfig::new(1_000)?)?;
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
            Ok(Self::with_hasher(algorithm, config, clock, RandomState::new()))
        }
    }

    impl<K: Hash + Eq + Clone + Send + Sync + 'static> Keyed<K, SlidingWindowAlgorithm> {
        /// A per-key sliding-window counter enforcing `quota` for each key, on the
        /// default clock.
        ///
        /// ```
        /// use weir_core::Quota;
        /// use weir_keyed::{KeyedConfig, KeyedSlidingWindow};
        ///
        /// let per_user: KeyedSlidingWindow<String> =
        ///     KeyedSlidingWindow::sliding_window(Quota::per_minute(100)?, KeyedConfig::new(10_000)?)?;
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
            Ok(Self::with_hasher(algorithm, config, clock, RandomState::new()))
        }
    }

    impl<K: Hash + Eq + Clone + Send + Sync + 'static> Keyed<K, SlidingLogAlgorithm> {
        /// A per-key sliding log (exact; each key costs `8 × limit` bytes) enforcing
        /// `quota` for each key, on the default clock.
        ///
        /// ```
        /// use weir_core::Quota;
        /// use weir_keyed::{KeyedConfig, KeyedSlidingLog};
        ///
        /// let per_user: KeyedSlidingLog<u64> = KeyedSlidingLog::sliding_log(Quota::per_minute(3)?, KeyedConfig::new(100)?)?;
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
            Ok(Self::with_hasher(algorithm, config, clock, RandomState::new()))
        }
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
        let index = self.shard_index(key);
        let shard = &self.shards[index];
        let state = match shard.get(key, &guard) {
            Some(state) => state,
            None => match self.insert(shard, key, &guard) {
                Ok((state, inserted)) => {
                    if inserted {
                        self.note_new_key(index, state, self.clock.now());
                    }
                    state
                }
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
        let bounds = (0..shards.len()).map(|_| IdleBound::new()).collect();
        Self {
            shards: shards.into_boxed_slice(),
            shard_hasher: foldhash::fast::RandomState::default(),
            collector,
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
        let index = self.shard_index(key);
        let shard = &self.shards[index];
        let guard = self.collector.enter();
        loop {
            // One clock reading decides the check (read again only on the rare retry
            // after an eviction, so that the fresh state decides at a time after the
            // retirement it replaces).
            let now = self.clock.now();
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
            let checked = match hot {
                Some((_, (gcra, gcra_state))) => gcra.check_n_contended(gcra_state, n, &now),
                None => self.algorithm.check_n(state, n, &now).map(|decision| (decision, 0)),
            };
            if inserted {
                // After the new key's first check: from now on a sweep of its shard
                // sees it busy, not idle (see `note_new_key`).
                self.note_new_key(index, state, now);
            }
            let (decision, lost_races) = checked?;
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
                            match self.check_hot(shard, key, gcra, gcra_state, state, n, now, &guard) {
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

    /// Gives back `n` units that `admission` (a decision this store returned for
    /// `key`) consumed and the caller did not use (see [`KeyedLimiter::refund`]):
    /// never more than the admission took, nor beyond a full state. A denied
    /// admission took nothing; a key no longer stored was idle (full) when it was
    /// evicted, or was reset by [`remove`](Self::remove), so nothing is given back to
    /// either, nor to an admission of the overflow limiter
    /// ([`AtCapacity::EvictIdleOrOverflow`]). `n` above the limit is an error: no
    /// check could have taken it.
    ///
    /// ```
    /// use weir_core::{ManualClock, Quota};
    /// use weir_keyed::{KeyedConfig, KeyedGcra};
    ///
    /// let per_ip: KeyedGcra<String, _> =
    ///     KeyedGcra::gcra_with_clock(Quota::per_minute(3)?, KeyedConfig::new(100)?, ManualClock::new());
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
        if n == 0 || admission.is_denied() {
            return Ok(());
        }
        let guard = self.collector.enter();
        let Some(state) = self.shard(key).get(key, &guard) else {
            return Ok(());
        };
        self.refund_state(key, state, n, admission, &guard)
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
        let guard = self.collector.enter();
        self.sweep_shard(next & (self.shards.len() - 1), self.clock.now(), &guard, None).0
    }

    /// Sweeps every shard for idle keys; returns how many were evicted. Runs
    /// concurrently with checks (nothing is locked); O(keys).
    pub fn sweep_all(&self) -> usize {
        let guard = self.collector.enter();
        (0..self.shards.len()).map(|i| self.sweep_shard(i, self.clock.now(), &guard, None).0).sum()
    }

    /// Evicts the keys of shard `index` idle at `now`; with the right to publish,
    /// also publishes the shard's bound from the others. Returns how many keys it
    /// evicted, and the bound it published.
    fn sweep_shard(
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
        let (mut evicted, mut no_idle_before) = (0, u64::MAX);
        for (key, state) in shard.iter(guard) {
            let retired = self.algorithm.try_retire(state, now)
                || (self.hot.is_some() && self.try_retire_hot(key, state, now, guard));
            if retired {
                if self.unlink(shard, key, state, guard) {
                    evicted += 1;
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
        match publishing {
            Some(_) => (evicted, self.publish_bound(bound, no_idle_before, insertions)),
            None => (evicted, UNKNOWN),
        }
    }

    /// When a key not idle at `now` can next be idle ([`KeyedAlgorithm::earliest_idle`]);
    /// `None` for a state that is retired (its place is being given back) or hot
    /// (hot keys are searched on their own: a lease given back moves a hot key's
    /// idle time earlier).
    fn earliest_idle(&self, state: &A::State, now: Nanos) -> Option<Nanos> {
        let kind = match (self.algorithm.as_gcra(), self.algorithm.gcra_state(state)) {
            (Some(gcra), Some(gcra_state)) => gcra.state_kind(gcra_state),
            _ if self.algorithm.is_retired(state) => StateKind::Retired,
            _ => StateKind::Live,
        };
        (kind == StateKind::Live).then(|| self.algorithm.earliest_idle(state, now))
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
    fn publish_bound(&self, bound: &IdleBound, no_idle_before: u64, insertions: u64) -> u64 {
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
    /// its first check (or right away, for a key inserted unchecked): lowers the
    /// shard's bound, then the store's, to the key's earliest idle time (see
    /// `publish_bound`).
    fn note_new_key(&self, index: usize, state: &A::State, now: Nanos) {
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

    /// For a hot key: retires its hot bucket if idle with every lease expired, drops
    /// it, and retires the key's state. Returns whether the key's state was retired.
    fn try_retire_hot(&self, key: &K, state: &A::State, now: Nanos, guard: &Guard<'_>) -> bool {
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
        now: Nanos,
        guard: &Guard<'_>,
    ) -> Option<Result<Decision, InsufficientCapacity>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.hot_keys.get(key, guard) {
            Some(stripes) if stripes.owner() == owner_of(gcra_state) => {
                let decision = stripes.check_on(gcra, stripe_of_this_thread(), n, &now);
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

    /// Gives `n` units of `admission` back to `state` (the state `key` maps to), or
    /// to its hot bucket if the key is hot.
    fn refund_state<Q>(
        &self,
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
        if let (Some(gcra), Some(gcra_state)) = (self.algorithm.as_gcra(), self.algorithm.gcra_state(state)) {
            match gcra.state_kind(gcra_state) {
                StateKind::Live => {}
                // Idle (full) when it was retired: nothing to give back.
                StateKind::Retired => return Ok(()),
                // A hot key: its bucket is the hot one, and the admission may have
                // come from a lease, so the lease machinery credits it (the debt less
                // the time since it was charged: never more than is still owed).
                StateKind::Promoted => {
                    return match self.hot_keys.get(key, guard) {
                        Some(stripes) if stripes.owner() == owner_of(gcra_state) => {
                            stripes.refund(gcra, n, admission, &self.clock)
                        }
                        // Being retired: idle, so full.
                        _ => Ok(()),
                    };
                }
            }
        }
        // A refund that races with a promotion of the key finds the state promoted
        // and gives nothing back (less, never more, than was taken).
        Algorithm::refund(&self.algorithm, state, n, admission, &self.clock)
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
                if matches!(self.config.at_capacity, AtCapacity::Deny) {
                    return Err(Full);
                }
                let evicted = self.evict_for_room();
                // Ordering: Relaxed; see above.
                live = self.live.load(Ordering::Relaxed);
                if !evicted && live >= self.config.max_keys {
                    return Err(Full);
                }
                continue;
            }
            // Ordering: Relaxed; see above.
            match self.live.compare_exchange_weak(live, live + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(actual) => live = actual,
            }
        }
    }

    /// Evicts an idle key if one is stored. Unless the store's bound says no key
    /// can be idle yet, goes round the shards from the sweep's clock hand, skipping
    /// each whose bound says so, sweeping the others, until a sweep evicts; then, if
    /// none did, looks at each hot key. Returns whether a key was evicted. A search
    /// that holds the right to publish refreshes the bounds of the shards it sweeps
    /// and, when it finds nothing, the store's.
    fn evict_for_room(&self) -> bool {
        let now = self.clock.now();
        let guard = self.collector.enter();
        let publishing = Publishing::take(&self.publishing);
        // Ordering: Acquire; see `publish_bound`.
        let insertions = self.store_bound.insertions.load(Ordering::Acquire);
        if !self.store_bound.excludes(now) {
            let count = self.shards.len();
            // Ordering: Relaxed; where to start is a hint.
            let hand = self.cursor.load(Ordering::Relaxed);
            let mut no_idle_before = u64::MAX;
            for step in 0..count {
                let index = hand.wrapping_add(step) & (count - 1);
                // Ordering: Relaxed; as in `IdleBound::excludes`.
                let shard_bound = self.bounds[index].no_idle_before_ns.load(Ordering::Relaxed);
                if now.as_u64() < shard_bound {
                    no_idle_before = no_idle_before.min(shard_bound);
                    continue;
                }
                let (evicted, shard_bound) = self.sweep_shard(index, now, &guard, publishing.as_ref());
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
        self.evict_idle_hot_key(now, &guard)
    }

    /// Evicts a hot key idle at `now` (its bucket idle, every lease expired), if
    /// one is: one look at each hot key.
    fn evict_idle_hot_key(&self, now: Nanos, guard: &Guard<'_>) -> bool {
        // Ordering: Relaxed; a hint (a key promoted meanwhile is busy, not idle).
        if self.hot.is_none() || self.hot_count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.hot_keys.iter(guard).any(|(key, _)| {
            let shard = self.shard(key);
            shard.get(key, guard).is_some_and(|state| {
                self.try_retire_hot(key, state, now, guard) && self.unlink(shard, key, state, guard)
            })
        })
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
        &self.shards[self.shard_index(key)]
    }

    #[inline]
    fn shard_index<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        let hash = self.shard_hasher.hash_one(key);
        // The high bits: papaya uses the low ones of its own (different) hash.
        (hash >> 32) as usize & (self.shards.len() - 1)
    }
}

/// The per-key contract, for middleware generic over stores: the same as the
/// inherent methods, for every borrowed form `Q` of the key.
impl<K, Q, A, C, S> KeyedLimiter<Q> for Keyed<K, A, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    A: KeyedAlgorithm,
    A::State: Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone,
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
/// use weir_core::{AsyncKeyedLimiter, Quota};
/// use weir_keyed::{KeyedConfig, KeyedGcra};
///
/// async fn admit<S: AsyncKeyedLimiter<str>>(store: &S, client: &str) -> Result<bool, S::Error> {
///     Ok(store.check_n(client, 1).await?.is_allowed())
/// }
///
/// let per_user: KeyedGcra<String> = KeyedGcra::gcra(Quota::per_minute(1)?, KeyedConfig::new(100)?);
/// let mut first = pin!(admit(&per_user, "alice"));
/// let mut cx = Context::from_waker(Waker::noop());
/// assert!(matches!(first.as_mut().poll(&mut cx), Poll::Ready(Ok(true)))); // ready at the first poll
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl<K, Q, A, C, S> AsyncKeyedLimiter<Q> for Keyed<K, A, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    A: KeyedAlgorithm + Send + Sync,
    A::State: Send + Sync + 'static,
    C: Clock + Send + Sync,
    S: BuildHasher + Clone + Send + Sync,
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
/// the store is dropped. Keep it for as long as the sweeps should run.
#[derive(Debug)]
#[must_use = "the sweeper stops when dropped: keep it for as long as the sweeps should run"]
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
