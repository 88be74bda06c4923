//! weir's rate limiters with their state in Redis, for fleets of server instances.
//!
//! In-memory limiters count per instance: ten instances behind a load balancer each
//! admit the full limit. weir-redis keeps each client's state in Redis, so every
//! instance shares one limit per client, with the same algorithms, maths and
//! [`Decision`](weir_rl_core::Decision)s as the local crates. It implements
//! [`AsyncKeyedLimiter`](weir_rl_core::AsyncKeyedLimiter), so a middleware written
//! against that trait (weir-tower's) runs on Redis unchanged.
//!
//! # What to use when
//!
//! | you want | use | cost per decision |
//! |---|---|---|
//! | a per-client token bucket (most APIs) | [`RedisLimiter::builder`]`(&redis, quota)` ([`Backend::Gcra`], the default) | one round trip; `GET` + `SET PX` in Redis, a denial only `GET` |
//! | minute + day + burst limits together | [`and_quota`](RedisLimiterBuilder::and_quota) for each further quota | one round trip for all quotas, all or nothing |
//! | "N per calendar window" | [`backend`](RedisLimiterBuilder::backend)`(`[`Backend::FixedWindow`]`)` | one round trip; allows 2 × N across a window boundary |
//! | a window without the boundary burst | [`Backend::SlidingWindow`] | one round trip (an estimate, as `weir_window::SlidingWindow`) |
//! | an exact sliding window | [`Backend::SlidingLog`] | one round trip, one sorted-set entry per request of the window |
//! | keep serving when Redis is slow or down | [`Resilient`] with a [`FailPolicy`] | a timeout at the start of an outage, then local decisions |
//! | very hot keys, fewer round trips | [`Leased`] | a round trip per lease (up to `max_lease` decisions), bounded overshoot |
//! | several limits (and keys) per request, all or nothing | [`RedisLimiter::check_batch`] with a [`BatchItem`] each ([`Resilient::check_batch`] with fail policies; see [`batch`]) | one round trip for the whole batch (one script per hash slot on a cluster); a refused batch writes nothing |
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use weir_rl_core::Quota;
//! use weir_redis::{FailPolicy, LocalFallback, Redis, RedisLimiter, RedisOptions, Resilient};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // One connection per instance, shared by every limiter and task.
//! let options = RedisOptions::builder().call_timeout(Duration::from_millis(20)).build()?;
//! let redis = Redis::connect_with("redis://:secret@10.0.0.5:6379/0", options).await?;
//! // 100 per minute per API key, shared by every instance using this prefix.
//! let per_key = RedisLimiter::builder(&redis, Quota::per_minute(100)?).prefix("rl:api:").build()?;
//! // While Redis is away: 1/10 of the rate per instance, for a fleet of 10.
//! let fallback = LocalFallback::new(10, 100_000)?;
//! let per_key = Resilient::builder(per_key, FailPolicy::LocalFallback(fallback)).build()?;
//!
//! let decision = per_key.check("key-7f3a").await?;
//! if decision.is_denied() {
//!     // 429 with Retry-After: decision.retry_after()
//! }
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! - **Atomic, one round trip.** Each decision is one Lua script (`EVALSHA`, loaded
//!   once; reloaded transparently after `SCRIPT FLUSH` or a restart), atomic on the
//!   server. Clients on one key share the limit exactly: at a frozen time, all
//!   instances together admit exactly the burst (tested with four clients).
//! - **The local crates' decisions.** GCRA decides as `weir_gcra::Gcra`, windows as
//!   `weir_window`'s limiters, field by field (allowed, limit, remaining, reset,
//!   retry-after) on the same requests at the same times, for quotas whose emission
//!   interval (GCRA) or window is a whole number of microseconds (tested). Times are
//!   integers in **microseconds** (Redis's `TIME` resolution; redis-cell rounds to
//!   seconds). GCRA charges `T = period / count` rounded *up* to a whole µs when `T`
//!   is at least 1 ms (at most 0.1% slower), else `⌈n·period/count⌉` µs per call
//!   (never faster than asked; a single request costs at least 1 µs, so rates above
//!   10⁶ per second are enforced for calls of at least 1 µs worth, e.g. bytes in
//!   batches). A sliding window's `retry_after` is the local one rounded up to a µs.
//! - **Server time.** By default the script reads Redis's `TIME`, so clock skew
//!   between instances cannot widen a limit;
//!   [`build_with_clock`](RedisLimiterBuilder::build_with_clock) injects a clock
//!   (tests). A clock stepping back is treated as no time passing, as locally.
//! - **Denials write nothing.** With
//!   Redis's time, keys expire exactly when their state is back to empty
//!   ([`Expiry::WhenIdle`]; tested by reading the expiry the script set in its
//!   own transaction), so idle clients cost Redis nothing. With a clock of
//!   [`build_with_clock`](RedisLimiterBuilder::build_with_clock), keys are kept
//!   without an expiry unless [`expiry`](RedisLimiterBuilder::expiry) says
//!   otherwise ([`Expiry::Never`]), since Redis expires in real time and a test
//!   clock need not run at real speed: then a
//!   [`ManualClock`](weir_rl_core::ManualClock) makes every decision reproducible,
//!   whatever real time passes (tested on a clock that stands still).
//! - **Refunds** give back what an admission still holds, as the local crates:
//!   GCRA credits the units less the time since the admission was decided
//!   (`weir_gcra::Gcra::refund`'s rule, tested side by side), windows the window
//!   it was counted in; [`Leased::refund`] keeps the overshoot bound.
//! - **Cancellation-safe.** A check, probe, lease renewal or refund whose future
//!   is dropped at any await (a client that disconnects) leaves nothing behind:
//!   a [`Resilient`] probe flag and a [`Leased`] renewal are held by guards that
//!   clear them on drop, and a renewal's waiters are woken to take it over. Each
//!   script is atomic, so a dropped call is applied whole or not at all (it may
//!   have reached Redis: a dropped check may have been admitted there). Tested by
//!   dropping each operation at each of its awaits (`tests/cancellation.rs`).
//! - **Never fits** (`n` above the burst or window limit) is
//!   [`Error::InsufficientCapacity`], decided without a round trip.
//! - **Typed errors, nothing admitted by accident**: a key of another Redis type is
//!   [`Error::WrongType`], an unreadable value [`Error::CorruptState`], a malformed
//!   reply [`Error::Reply`]; a fail policy never turns these into admissions.
//! - **Bounded waits**: every call has a timeout ([`RedisOptions::call_timeout`]); the
//!   connection (redis-rs's `ConnectionManager`, multiplexed: all tasks pipeline on
//!   one connection) reconnects by itself.
//!
//! # Keys and Redis Cluster
//!
//! A client's keys are `<prefix>{<client key>}:<backend>:<quotas>`, and for GCRA
//! one per quota of the tier, `:<i>` after that. `<backend>` is `g` (GCRA),
//! `fw`, `sw` or `sl` (the windows); `<quotas>` spells every quota of the
//! limiter as `<count>/<period>` (the period in `d`, `h`, `m`, `s`, `ms`, `us` or
//! `ns`), with `b<burst>` when the burst is not the count, joined by `,`:
//!
//! | limiter | its keys for client `alice` |
//! |---|---|
//! | `builder(&redis, Quota::per_minute(100)?)` | `weir:{alice}:g:100/1m:0` |
//! | `… .and_quota(Quota::per_day(5_000)?)` | `weir:{alice}:g:100/1m,5000/1d:0`, `…:1` |
//! | `Quota::per_second(10)?.with_burst(20)?` | `weir:{alice}:g:10/1sb20:0` |
//! | `.backend(Backend::SlidingWindow).prefix("rl:")` | `rl:{alice}:sw:100/1m` |
//!
//! So limiters that differ in backend or in any quota never share a key, under
//! the default prefix too (a per-minute and a per-hour limit on one Redis keep
//! separate state), and instances share a limit exactly when they use the same
//! Redis, prefix, backend and quotas. Two limits with the same quotas that must
//! stay apart (a login limit and a password-reset limit, say) take different
//! prefixes. [`RedisLimiter::redis_keys`] names a client's keys.
//!
//! **A client key costs a bounded number of bytes.** A key of at most
//! [`max_key_bytes`](RedisLimiterBuilder::max_key_bytes) bytes
//! ([`DEFAULT_MAX_KEY_BYTES`], 256) is kept as it is, percent-encoded: at most
//! 3 bytes per byte in a key name. A longer one, as [`LongKeys`] says, is named
//! by 128 bits of its SHA-256 (`%H` and 32 hex digits, [`HASHED_KEY_BYTES`]; the
//! same on every instance, so a fleet shares its limit; collision-resistant, so
//! no client can choose a key that lands on another's state), or refused with
//! [`Error::KeyTooLong`] before any round trip. A [`Leased`] table and the local
//! fallback store of [`Resilient`] keep that name too, never the key. Encoding
//! a kept key is linear in at most `max_key_bytes`; hashing a long one reads it
//! once, at SHA-256's hundreds of MB/s.
//!
//! The braces are a Redis Cluster hash tag: all keys of one client hash to one
//! slot, so a tier's script runs on a cluster ([`Redis::connect_cluster`],
//! feature `cluster`, on by default; tested on three masters), while clients
//! spread over the slots. `%`, `{` and `}` in a client key are percent-encoded
//! (and bytes that are not UTF-8), the empty key is named `%` (Redis Cluster
//! takes `{}` for no hash tag at all; earlier versions named it `{}`, so the
//! empty key starts full once after the upgrade), and braces are refused in the
//! prefix.
//!
//! **Migrating from `<prefix>{<client key>}:g0`** (`:g1`, …, `:fw`, `:sw`,
//! `:sl`), the layout of earlier versions, which let two limiters
//! with different quotas under one prefix overwrite each other's state: the new
//! names are not read from the old ones, so after the upgrade every client starts
//! from a full bucket (an empty window) once, and the old keys expire by
//! themselves within a period of their quota (they carry their TTL). During a
//! rolling upgrade, old and new instances keep separate state, so a client can
//! get up to twice its limit until every instance runs the new version; upgrade
//! all instances together where that matters.
//!
//! # Connecting
//!
//! `redis://[user][:password@]host[:port][/db]`, `rediss://` for TLS (feature
//! `tls`: rustls with the ring provider;
//! [`root_certificate`](https://docs.rs/weir-redis/latest/weir_redis/struct.RedisOptionsBuilder.html#method.root_certificate) for a
//! private CA). A refused password is [`Error::Auth`] from [`Redis::connect`], not a
//! silent fail-open later.
//!
//! # Costs
//!
//! A GCRA decision costs one bare `EVALSHA` of its script (the same time, measured
//! side by side): the limiter adds nothing measurable to the round trip. 64 tasks
//! on one connection reach 3–4× the serial rate (redis-server's single core is the
//! bound). Leases serve a hot key with 0.02 round trips per decision. In Redis, GCRA
//! makes one `GET` per quota, and one `SET … PX` per quota when it admits. The
//! measurements are in BENCHMARKS.md ("Redis back end") and the reasons in
//! [DESIGN.md, "weir-redis"](https://github.com/weir-rs/weir/blob/main/DESIGN.md#weir-redis).
//!
//! # Metrics
//!
//! With the `metrics` feature, each limiter reports through the [`metrics`](https://docs.rs/metrics) facade
//! (any recorder: `metrics-exporter-prometheus`, say), labelled `limiter` with its
//! name from [`RedisLimiterBuilder::name`] (default `default`; a [`Resilient`] or
//! [`Leased`] reports under its limiter's), never with a client key. A local
//! fallback's stores report as weir-keyed stores named after the limiter (with the
//! feature, weir-keyed's `metrics` is on too).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `weir_redis_decisions_total` | counter | `limiter`, `path`, `outcome` | decisions (not peeks) by who made them: `path` is `redis`, `fail_open`, `fail_closed`, `local_fallback` (a [`Resilient`]'s policy) or `lease` (a [`Leased`] lease, no round trip); `outcome` is `allowed` or `denied` |
//! | `weir_redis_call_duration_seconds` | histogram | `limiter` | each script call to Redis (checks, peeks, refunds, lease renewals), answered or not |
//! | `weir_redis_timeouts_total` | counter | `limiter` | calls with no answer within the call timeout |
//! | `weir_redis_script_reloads_total` | counter | `limiter` | scripts loaded again (`SCRIPT LOAD`) after Redis answered `NOSCRIPT` (its first call on a server, after `SCRIPT FLUSH` or a restart) |
//! | `weir_redis_lease_round_trips_saved_total` | counter | `limiter` | [`Leased`] decisions made from the lease, without a round trip |
//!
//! The handles are registered once, when the limiter is built: **install the
//! recorder before building the limiter** (one built before records nothing). A
//! decision costs a few relaxed atomic operations in the recorder beside its round
//! trip; a call is timed by two readings of the monotonic clock. Without the
//! feature, no metric code is compiled.
//!
//! # Testing
//!
//! The tests start real `redis-server` processes on free loopback ports (a plain
//! one, one with `--requirepass`, a TLS one, a three-master cluster). Without
//! `redis-server` on PATH they fail with a message saying how to install it
//! (`apt-get install redis-server`, or `.ci/redis-server install`).

pub mod batch;
mod connection;
mod error;
pub mod fail;
pub mod lease;
mod limiter;
mod math;
mod metrics;
mod scripts;

pub use batch::{BatchChecked, BatchItem, BatchMismatch};
pub use connection::{Redis, RedisOptions, RedisOptionsBuilder};
pub use error::{ConfigError, Error};
pub use fail::{Backoff, Checked, FailPolicy, LocalFallback, Path, Resilient, ResilientBuilder};
pub use lease::{LeaseConfig, LeaseConfigBuilder, Leased};
pub use limiter::{
    Backend, DEFAULT_MAX_KEY_BYTES, DEFAULT_PREFIX, Expiry, HASHED_KEY_BYTES, LongKeys, MAX_LOG_LIMIT, MAX_TIER,
    MAX_WINDOW_LIMIT, RedisLimiter, RedisLimiterBuilder,
};

/// Not part of the public API: what weir-redis's benchmark program needs from
/// inside the crate. May change or go away in any release.
#[doc(hidden)]
pub mod __private {
    use crate::{Error, Leased, Redis, RedisLimiter, Resilient};
    use redis::{Cmd, FromRedisValue};
    use weir_rl_core::Clock;

    /// The SHA1 of the script `limiter`'s checks run (`EVALSHA`), to compare a
    /// check with a bare `EVALSHA` of the same script.
    pub fn script_sha(limiter: &RedisLimiter) -> &str {
        limiter.script_sha()
    }

    /// Runs one command on `redis` within its call time limit.
    pub async fn command<T: FromRedisValue>(redis: &Redis, cmd: &Cmd) -> Result<T, Error> {
        redis.command(cmd).await
    }

    /// A check of `key` by a GCRA `limiter`, in one transaction with Redis's
    /// time (Unix ms) before and after it and the absolute expiry
    /// (`PEXPIRETIME`, Unix ms; -1 for none) of each of its Redis keys just after
    /// it: `(decision, expiries, (before, after))`. A key that the script gave
    /// a TTL of `t` ms expires between `before + t` and `after + t`, so a test
    /// can check the TTL the script set however long the test itself takes.
    pub async fn gcra_check_with_expiry(
        limiter: &RedisLimiter,
        key: &(impl AsRef<[u8]> + ?Sized),
        n: u64,
    ) -> Result<(weir_rl_core::Decision, Vec<i64>, (u64, u64)), Error> {
        limiter.gcra_check_with_expiry(key.as_ref(), n).await
    }

    /// Whether `limiter` has a probe of Redis in flight (cancellation tests: a
    /// dropped probe must not leave it set).
    pub fn is_probing<C: Clock>(limiter: &Resilient<C>) -> bool {
        limiter.is_probing()
    }

    /// The bytes of the keys `leased`'s lease table holds (key-size tests).
    pub fn lease_table_key_bytes<C: Clock>(leased: &Leased<C>) -> usize {
        leased.table_key_bytes()
    }

    /// Whether `leased` has a lease renewal for `key` in flight (cancellation
    /// tests: a dropped renewal must not leave it set).
    pub fn renewal_pending<C: Clock>(leased: &Leased<C>, key: &[u8]) -> bool {
        leased.renewal_pending(key)
    }

    /// Waits (at most two call timeouts) until no renewal of `key`'s lease is in
    /// flight: the renewal a dropped check handed to a detached task has been
    /// delivered or given up (cancellation tests).
    pub async fn renewal_settled<C: Clock>(leased: &Leased<C>, key: &[u8]) {
        leased.renewal_settled(key).await;
    }

    /// Waits (at most `limit`) until every batch dropped with a script in flight
    /// has given back what it admitted (cancellation tests).
    pub async fn batch_give_backs_settled(limit: core::time::Duration) {
        crate::batch::give_backs_settled(limit).await;
    }
}
