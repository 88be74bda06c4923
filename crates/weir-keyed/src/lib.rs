//! Per-key rate limiting (per IP, per API key, per user) over any weir algorithm,
//! with a hard bound on memory and exact idle eviction.
//!
//! ```
//! use std::time::Duration;
//! use weir_rl_core::{ManualClock, Quota};
//! use weir_keyed::{AtCapacity, Keyed, KeyedConfig};
//!
//! let clock = ManualClock::new();
//! let config = KeyedConfig::builder(100_000).at_capacity(AtCapacity::EvictIdle).build()?;
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
//! # What to use when
//!
//! | you need, per key | build | type of the field |
//! |---|---|---|
//! | a rate with a burst allowance | [`Keyed::gcra`] | [`KeyedGcra<K>`] |
//! | the same, where a few keys get most of the traffic from many threads at once | [`Keyed::gcra`] then [`Keyed::with_hot_keys`] | [`KeyedGcraHot<K>`] |
//! | "N per window" (`window` feature) | `Keyed::sliding_window`, `Keyed::fixed_window`, `Keyed::sliding_log` | `KeyedSlidingWindow<K>`, `KeyedFixedWindow<K>`, `KeyedSlidingLog<K>` |
//! | another algorithm, clock or hasher | [`Keyed::with_hasher`] | `Keyed<K, A, C, S>` |
//!
//! Every store is bounded by its [`KeyedConfig`] (`KeyedConfig::builder(max_keys)`,
//! with the policy of a full store, [`AtCapacity`]); `with_clock` constructors take
//! a clock (a [`ManualClock`](weir_rl_core::ManualClock) in tests). Middleware uses a
//! store through weir-rl-core's [`KeyedLimiter`](weir_rl_core::KeyedLimiter) trait, which
//! every store implements.
//!
//! **Guarantees.** Each key is decided exactly as its own limiter would decide it
//! given the clock readings the store decided it at (each check at one reading,
//! taken once the key's state is found or inserted, so that a state inserted after
//! an eviction is never decided at a reading from before it);
//! a key is dropped only when that changes no decision (idle eviction, below); at
//! most `max_keys` keys are ever stored; hot keys (opt-in) have the leased
//! limiter's stated over-admission bound, other keys none. A check of a stored key
//! takes no lock and allocates nothing.
//!
//! **Costs**, against governor's keyed limiter in the same run (BENCHMARKS.md,
//! "Keyed check: inlined, the index length in its address"): a check of a stored
//! `u64` key among 100 000 takes 247 instructions against governor's 259.5
//! (callgrind, fixed clock). In the benchmark's earlier count, which also held its
//! own draw of the keys, that was 265 against 277.5, and 398 before
//! [`check`](Keyed::check) was inlined into its caller. On the 2-core VM, one / two threads: a key per thread 1.2× / 1.2–1.5×
//! governor's throughput, 100 000 keys 0.9–1.1× / 1.2–1.5×, one key hit by both
//! threads 1.1–1.5× / 2.7–2.8× (3.6–4.0× in hot-key mode), since governor's shard
//! locks write a shared line on every check. A key out of cache costs 3.2
//! first-level cache misses a check against governor's 2.1 (the shard's line,
//! the index word's, the entry's). Memory per `u64` key in a full store: 1.11× of
//! governor's at 10⁵ keys, 0.69× at 10⁶. The measurements behind the design are in
//! DESIGN.md ("weir-keyed").
//!
//! # Algorithms
//!
//! Any algorithm implementing [`KeyedAlgorithm`] (an [`Algorithm`] with the
//! [`Retire`] protocol): GCRA, and with the `window` feature the fixed window, the
//! sliding-window counter and the sliding log of `weir-window`.
//!
//! ```
//! # #[cfg(feature = "window")] {
//! use weir_keyed::KeyHasher;
//! use weir_rl_core::{Clock, ManualClock, Quota};
//! use weir_keyed::{Keyed, KeyedConfig};
//! use weir_window::sliding::SlidingWindowAlgorithm;
//!
//! let clock = ManualClock::new();
//! let algorithm = SlidingWindowAlgorithm::new(Quota::per_minute(100)?, clock.now())?;
//! let per_user: Keyed<String, _, _> =
//!     Keyed::with_hasher(algorithm, KeyedConfig::builder(10_000).build()?, clock, KeyHasher::new());
//! assert!(per_user.check_n("alice", 100)?.is_allowed());
//! assert!(per_user.check("alice").is_denied());
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The table
//!
//! Keys live in the store's own table, sharded (shards of about 440 keys at full
//! capacity, so that idle eviction can proceed a shard at a time, see below). A key
//! is hashed once per operation, by `S` ([`KeyHasher`] by default: foldhash,
//! seeded at random per store): the hash's high bits pick the shard, its low bits
//! the key's place in the shard's index, its top byte a tag. A shard
//! is an open-addressing index of 32-bit words (tag and slot: sixteen to a cache
//! line) over a slab of entries, each a key and its algorithm state side by side,
//! that never move. A check of a stored key takes no lock and allocates nothing:
//! one epoch guard, the index word with the key's tag (a word whose tag differs is
//! skipped without reading its entry), the entry (key compared, state in the same
//! line for small keys and states), then the algorithm's own atomic protocol: two
//! dependent cache lines for a key out of cache beside its shard's (which holds the
//! index's address and length, and the slab's), against four in a general-purpose
//! lock-free map (table, metadata, entry pointer, boxed entry). [`check`](Keyed::check)
//! is inlined into its caller up to the decision, so a caller that reads only
//! whether it was allowed has no more of the decision computed. Inserting and
//! unlinking a key take its shard's lock, briefly, never across a check; an
//! unlinked entry's slot is reused once no reader can still hold it (epoch-based
//! reclamation), and the index is rebuilt, at the size its keys need, when its
//! words in use pass 7/8 of it. Memory follows the keys stored, not the bound.
//!
//! **The hash and floods of colliding keys.** The hash of a check's key is on its
//! critical path (the index word's address depends on it), and a store's keys
//! (client addresses, API keys) come from untrusted clients, who may choose keys
//! that collide. The default, [`KeyHasher`] (foldhash's `quality` hash, seeded per
//! store), costs about 140 instructions per check less than std's SipHash
//! `RandomState` (`benches/examples/keyed_instructions.rs`: 247 against 386), and
//! the store does not rely on its flood resistance, which its authors call minimal:
//! each time a shard's index is rebuilt, the store measures how far its keys lie
//! from their homes, and a shard whose mean passes 8 words (a hash that spreads
//! keys gives about 1) is rebuilt with SipHash-1-3, keyed at random per store, and
//! stays so. A flood costs at most the probes of one index's worth of keys, in the
//! shards it lands in, before they harden; it never changes a decision
//! (`weir_keyed_hardened_shards_total` counts hardenings, with the `metrics`
//! feature). This holds for any `S` given to [`Keyed::with_hasher`], so a weak or
//! unseeded hasher is safe too, only slower once its shards harden.
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
//! in place of the table, whose every operation is one atomic step to the store, as
//! each of the table's is; the table's own protocol has models of its own there).
//!
//! Eviction is incremental and never stops the world: once the store holds half its
//! bound (`sweep_from`), every `sweep_every`-th new key sweeps the next shard (about
//! 440 keys) for idle ones; [`Keyed::sweep`], [`Keyed::sweep_all`] and an opt-in
//! background thread ([`Keyed::spawn_sweeper`]) do the same on demand. Sweeps run
//! concurrently with checks, which they never block (unlinking a key takes its
//! shard's lock, which only insertions and unlinks of that shard wait for).
//!
//! With the `rayon` feature, `Keyed::par_sweep_all` and `Keyed::par_for_each`
//! spread a sweep, or a metrics pass over every key, over rayon's thread pool, a
//! few shards per task (`examples/sweep_10m.rs` measures it on 10 million keys).
//!
//! Incremental sweeps start at half the bound (`sweep_from`), not at the first key:
//! an idle key is often a live client between requests, and a store far below its
//! bound that swept anyway kept evicting and re-inserting its own clients, at
//! several times the cost per check (DESIGN.md, "weir-keyed"). Below the bound idle
//! keys cost only memory the bound already allows.
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
//! **While reclamation is held back.** An unlinked key's entry is dropped, and its
//! slot reused, once no thread that may still hold a reference to it is inside an
//! epoch guard. The store holds guards only per operation and per shard: a check
//! for its lookup and decision (a key's `Clone` runs outside it, for a new key, on
//! the retry after making room and for a promotion; `Hash` and `Eq` run inside), a
//! sweep and [`Keyed::for_each`] one per shard (its callback runs inside), the
//! rayon passes one per task. Each shard gathers the entries unlinked in it and
//! hands them to the collector every 256 (or its slack, if smaller), at each sweep
//! of the shard, and before it refuses a key; the hot keys' shard, whose keys no
//! sweep visits (a hot key is swept through its state in its own shard), at every
//! sweep (explicit, paced by insertions, background or rayon's): what a thread
//! unlinked is not held back by that thread going idle, and a hot key removed or
//! swept is dropped, with its stripes, by the first sweep after it while no other
//! guard is held, as any key is. A shard takes a fresh slot only while its
//! entries awaiting reclamation number at most the most keys it has held plus a
//! slack (not its keys now: a sweep that evicts most of a shard's keys leaves them
//! awaiting the collector with no guard holding them back) (4 096 slots
//! over the store, at least 64 a shard; `max_hot_keys` for the hot keys' stripes);
//! beyond, it hands what it gathered to the collector, and a new key's check
//! tries once more outside its guard; if a guard held for long (a paused callback,
//! a key's `Eq` that blocks) still holds those entries back, the shard refuses new
//! keys as a full store does ([`DenyReason::KeyCapacity`], or the overflow
//! limiter), even under [`AtCapacity::EvictIdle`] with idle keys stored, until the
//! guard is gone (a promotion is refused: the key stays exact). With no guard held
//! for long, no key is refused for that (a thread's own collector batch may keep
//! fewer entries than there are threads inside a guard when it flushes). The
//! collector retires a thread's batch only once it holds an entry per thread
//! inside a guard, so what a sweep hands over while other threads are inside
//! guards can stay in its thread's batch: every explicit, background or rayon
//! sweep flushes that batch again, also when it has nothing new to hand over, and
//! such an entry is dropped by the first such sweep of the same thread that runs
//! with no other thread inside a guard (`tests/hand_over.rs`). A sweep paced by
//! insertions flushes only what it hands over: it runs on a check's path, and a
//! flush is a process-wide memory barrier even with nothing to retire. So
//! whatever arrives and whatever runs, a shard's slab holds at most one slot more
//! than twice the most keys it has held plus its slack (and up to twice that in
//! memory, as a slab grows by doubling), and its entries awaiting reclamation
//! stay within the slab's slots less its keys: for the hot keys, at
//! most `3 × max_hot_keys + 1` stripe sets. `tests/pinned_memory.rs` floods
//! 200 000 new keys into a store of 1 000 while a `for_each` callback is paused:
//! 0.60 MB above the full store's 0.09 MB at the peak, where every evicted key
//! stayed in memory before (17.5 MB). Every [`Keyed::sweep`] of a shard, and [`Keyed::sweep_all`],
//! gives back the shard's last slab chunks once every slot in them is free again
//! (new keys take the lowest free slots, so that the last chunks drain), whatever
//! emptied them (an eviction, a full store's search, [`Keyed::remove`]), and
//! shrinks its index to its keys (every sweep does the same for the hot keys'
//! shard): after that flood and a sweep, the store holds no
//! more than before it, and 4 000 keys inserted, removed and swept leave 1.3 KB
//! above an empty store (`tests/reclamation.rs`).
//!
//! A user `Hash`, `Eq` or `Clone` that panics fails the call it panics in, and
//! nothing else: no place in the bound, slot, hot slot or key is lost or leaked
//! (`tests/panicking_keys.rs` panics at each call in turn).
//!
//! A full store's key costs its entry (the key and the state side by side), its
//! index word and its share of its shard's header; a sparse store pays more of the
//! per-shard fixed part (shards are sized for the bound). BENCHMARKS.md ("Memory
//! per key") measures it against governor's store.
//!
//! **Finding an idle key.** Each shard keeps a bound: no key of it can be idle
//! before that clock reading (the least of its keys' idle times,
//! [`KeyedAlgorithm::earliest_idle`], as of the shard's last search; a check only
//! moves a key's idle time later, and each new key and each refund lowers the
//! bound to its key's).
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
//! - otherwise one load per shard (one shard per 440 keys) plus a sweep of each
//!   shard whose bound has passed, until one yields an idle key: at worst every
//!   shard, O(`max_keys`) (the first search of a full store, whose bounds are not
//!   known yet, or one after the bounds of every shard passed without a key going
//!   idle). The worst steady case is a store kept exactly full of keys that go
//!   idle one at a time, each new key arriving just as the oldest goes idle: each
//!   new key then sweeps the one shard that holds it (about 440 keys), and every
//!   new key is admitted (DESIGN.md, "weir-keyed", has the measurement and the
//!   cheaper alternative that was rejected because it denies new keys while idle
//!   ones are stored).
//!
//! # Hot keys
//!
//! A key that many threads hit at once (a tenant with heavy traffic) contends on
//! its one state word like any shared limiter. A GCRA store can turn such keys hot
//! ([`Keyed::with_hot_keys`], configured by [`HotKeys`]): a check that loses
//! `after_lost_races` CAS races to other checks of the same key (contention the
//! check measures for free) moves the key's bucket to per-thread lease stripes, the
//! engine of
//! [`weir_gcra::LeasedGcra`], with its documented over-admission bound; other keys
//! stay exact. The move is one CAS that carries the key's state over (no admission is
//! lost: `loom-tests/tests/keyed_eviction.rs` and the property tests check it, with
//! promotions racing checks, sweeps, `remove` and later promotions of the key); a hot
//! key whose bucket is idle with every lease expired is swept like any idle key (and
//! while every hot slot is taken, insertions pace sweeps even below `sweep_from`, so
//! a hot key gone idle frees its slot).
//! [`Keyed::promote`] turns a key hot on demand.
//!
//! Hot keys are a mode of the store, chosen by its type ([`HotKeyMode`]): a store
//! without them ([`NoHotKeys`], the default) has no hot-key code in its check.
//!
//! A promotion that is delayed (its thread paused) while the key's state is swept
//! or removed and the key comes back, and turns hot again, gives up: the hot
//! stripes it finds then belong to the key's current state. Only a promotion of
//! the key's current, live state drops stripes left by an earlier state.

//!
//! # Metrics
//!
//! With the `metrics` feature, a store reports through the [`metrics`](https://docs.rs/metrics) facade
//! (any recorder: `metrics-exporter-prometheus`, say). Each series has the label
//! `store`, the store's name from its configuration
//! ([`KeyedConfigBuilder::name`]; default `default`), and never a key:
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `weir_keyed_keys` | gauge | `store` | keys stored (set when a key is inserted, removed or swept) |
//! | `weir_keyed_hot_keys` | gauge | `store` | keys in hot-key mode (set when a check promotes a key, and by sweeps and removals) |
//! | `weir_keyed_evictions_total` | counter | `store`, `cause` | keys dropped: `sweep` (idle, by a sweep: explicit, paced by insertions, or background), `room` (idle, by a full store making room), `removed` ([`Keyed::remove`]) |
//! | `weir_keyed_capacity_denials_total` | counter | `store` | new keys a full store refused ([`DenyReason::KeyCapacity`]) |
//! | `weir_keyed_overflow_checks_total` | counter | `store` | new keys a full store checked against its overflow limiter ([`AtCapacity::EvictIdleOrOverflow`]) |
//! | `weir_keyed_shard_sweeps_total` | counter | `store` | shards swept for idle keys, by any sweep |
//! | `weir_keyed_hot_promotions_total` | counter | `store` | keys a check moved into hot-key mode (two checks racing to promote one key may count it twice; [`Keyed::promote`] is not counted) |
//! | `weir_keyed_hardened_shards_total` | counter | `store` | shards whose keys collided so far beyond what the hash spreads that the shard now hashes them with SipHash ([`KeyHasher`]): a flood of keys chosen to collide, or a poor hasher |
//!
//! The handles are registered once, when the store is built: **install the
//! recorder before building the store** (a store built before records nothing).
//! A check of a stored key records nothing; only insertions, refusals of new keys,
//! promotions, removals and sweeps do (a few relaxed atomic operations in the
//! recorder). Without the feature, no metric code is compiled.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(doc)]
use weir_rl_core::{Algorithm, DenyReason, Retire};

/// Runs `$body` with the store's metric handles bound to `$m` (the `metrics`
/// feature); without the feature, expands to nothing.
macro_rules! metric {
    ($store:expr, |$m:ident| $body:expr) => {
        #[cfg(feature = "metrics")]
        {
            let $m = &$store.config.metrics;
            $body;
        }
    };
}

mod algorithm;
mod config;
mod error;
mod hash;
mod hot;
#[cfg(feature = "rayon")]
mod parallel;
mod store;
mod sweeper;
// Public under loom only, for the models (`loom_table`); not documented as an API.
#[cfg_attr(loom, allow(missing_docs, missing_debug_implementations, clippy::new_without_default))]
mod table;

/// Under loom, the store keeps its keys in a coarse model map (one step per
/// operation), so that models of the store's own protocols stay small; the table's
/// protocol is modelled on its own code, which `loom-tests` reaches through
/// `loom_table`.
#[cfg(loom)]
mod model_map;
#[cfg(loom)]
pub(crate) use model_map::Shard;
#[cfg(not(loom))]
pub(crate) use table::Shard;

/// The table, for the loom models of its protocol (`loom-tests`); not an API.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_table {
    pub use crate::table::{Collector, Guard, HARDENED, Hashers, Inserted, Shard};
}

pub use algorithm::KeyedAlgorithm;
pub use config::{AtCapacity, DEFAULT_STORE_NAME, KeyedConfig, KeyedConfigBuilder};
pub use error::{KeyedConfigError, SweeperError};
pub use hash::{HardenedShards, KeyHash, KeyHasher};
pub use hot::{HotKeyMode, HotKeys, HotKeysBuilder, NoHotKeys};
pub use store::{Keyed, KeyedGcra, KeyedGcraHot};
#[cfg(feature = "window")]
pub use store::{KeyedFixedWindow, KeyedSlidingLog, KeyedSlidingWindow};
pub use sweeper::Sweeper;

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
