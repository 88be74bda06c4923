//! [`RedisLimiter`]: one quota (or a tier of quotas) per client key, state in Redis.

use crate::math::{GcraMicros, NS, WindowMicros};
use crate::metrics::Metrics;
use crate::{ConfigError, Error, Redis, scripts};
use core::fmt;
use redis::ScriptInvocation;
use std::sync::Arc;
use weir_rl_core::__private::sync::{AtomicU64, Ordering};
use weir_rl_core::{AsyncKeyedLimiter, Clock, Decision, InsufficientCapacity, Nanos, Policy, Quota, Snapshot};

/// The most quotas in one tier.
pub const MAX_TIER: usize = 8;

/// The largest sliding-log limit: the log keeps one sorted-set entry (about 60
/// bytes in Redis) per request of the last window.
pub const MAX_LOG_LIMIT: u64 = 100_000;

/// The largest fixed or sliding window limit, 2^53 − 1: the scripts count in
/// Lua's numbers (doubles), exact below 2^53; at 2^53 a count of one more would
/// round back to the same count and fit again.
pub const MAX_WINDOW_LIMIT: u64 = (1 << 53) - 1;

/// The key prefix used unless another is set.
pub const DEFAULT_PREFIX: &str = "weir:";

/// The longest client key, in bytes, that a limiter keeps as it is unless told
/// otherwise ([`RedisLimiterBuilder::max_key_bytes`]); longer keys are hashed or
/// refused ([`LongKeys`]).
pub const DEFAULT_MAX_KEY_BYTES: usize = 256;

/// The bytes a hashed client key takes in a Redis key name, between the braces:
/// `%H` and 32 hexadecimal digits (128 bits of the key's SHA-256).
pub const HASHED_KEY_BYTES: usize = 34;

/// When Redis forgets a key's state ([`RedisLimiterBuilder::expiry`]).
///
/// Redis expires keys in its own real time; a limiter's decisions run on its
/// decision clock (Redis's `TIME`, or the clock of
/// [`build_with_clock`](RedisLimiterBuilder::build_with_clock)). The two agree
/// only for a clock that runs at real speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Expiry {
    /// Each write sets the key's TTL (`PX`) to the time until its state is back
    /// to empty, so idle clients cost Redis nothing. Exact when the decision
    /// clock runs at real speed: Redis's `TIME` (the default of
    /// [`build`](RedisLimiterBuilder::build)), or client clocks in Unix time
    /// that agree. Under a clock that runs slower than real time (a
    /// [`ManualClock`](weir_rl_core::ManualClock) that stands still), Redis would
    /// forget a state that still counts and admit too early.
    WhenIdle,
    /// Keys are written without an expiry and stay until deleted (a state past
    /// its time reads as a missing key's, so decisions are the same). Decisions
    /// then depend on the decision clock and the requests alone, whatever real
    /// time passes: the default of
    /// [`build_with_clock`](RedisLimiterBuilder::build_with_clock), for tests,
    /// where keys are few. Memory grows with the number of distinct keys.
    Never,
}

/// What a limiter does with a client key longer than its
/// [`max_key_bytes`](RedisLimiterBuilder::max_key_bytes)
/// ([`RedisLimiterBuilder::long_keys`]).
///
/// ```
/// # fn demo(redis: &weir_redis::Redis) -> Result<(), Box<dyn std::error::Error>> {
/// use weir_rl_core::Quota;
/// use weir_redis::{LongKeys, RedisLimiter};
///
/// // API keys are at most 64 bytes here: anything longer is a bad request.
/// let limiter = RedisLimiter::builder(redis, Quota::per_minute(100)?)
///     .max_key_bytes(64)
///     .long_keys(LongKeys::Refuse)
///     .build()?;
/// assert!(limiter.redis_keys(&[b'x'; 65][..]).is_empty());
/// # Ok(()) }
/// ```
///
/// [`LongKeys::Hash`] (the default) names such a key by its
/// [`long_key_hash`](weir_rl_core::long_key_hash) (`%H` and 32 hex digits,
/// [`HASHED_KEY_BYTES`]): the same name on every instance, so a fleet shares the
/// key's limit, and no client can choose a key that lands on another client's state
/// (that would take a SHA-256 collision). [`LongKeys::Refuse`]: checks, refunds and
/// snapshots of the key are [`Error::KeyTooLong`], without a round trip. weir-rl-core's
/// type, shared with weir-tower.
pub use weir_rl_core::LongKeys;

/// Which algorithm a [`RedisLimiter`] runs
/// ([`RedisLimiterBuilder::backend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// GCRA (token bucket), one quota or a tier of several.
    Gcra,
    /// Fixed window counter.
    FixedWindow,
    /// Sliding window counter (two windows, weighted).
    SlidingWindow,
    /// Sliding log (a sorted set of admitted requests).
    SlidingLog,
}

#[derive(Debug, Clone)]
enum Algo {
    Gcra(Box<[GcraMicros]>),
    Fixed(WindowMicros),
    Sliding(WindowMicros),
    Log(WindowMicros),
}

/// Where decision times come from.
#[derive(Clone)]
enum TimeSource {
    /// Redis's `TIME`, read inside each script.
    Server,
    /// A clock of this process, in ns since the Unix epoch (or any origin all
    /// instances share).
    Client(Arc<dyn Clock + Send + Sync>),
}

/// Per-key rate limiting with the state in Redis: every instance of a fleet that
/// uses the same Redis, key prefix, backend and quotas shares one limit per key.
///
/// Built from a [`Redis`] connection and a quota with [`RedisLimiter::builder`];
/// the [`Backend`] picks the algorithm (GCRA unless said otherwise):
///
/// | builder | algorithm | Redis calls per decision | memory per active key |
/// |---|---|---|---|
/// | `builder(&redis, quota)` | token bucket (GCRA), as `weir-gcra` | `GET` + `SET PX` (denied: `GET`) | one string |
/// | `builder(&redis, q1).and_quota(q2)` | several GCRA quotas, all or nothing | that, per quota, in one script | one string per quota |
/// | `builder(&redis, quota).backend(Backend::FixedWindow)` | fixed window counter | `GET` + `SET PX` | one string |
/// | `builder(&redis, quota).backend(Backend::SlidingWindow)` | sliding window counter | `GET` + `SET PX` | one string |
/// | `builder(&redis, quota).backend(Backend::SlidingLog)` | exact sliding window | 3 reads + `ZADD` + `PEXPIRE` | one entry per request in the window |
///
/// Each decision is one round trip running one Lua script, atomic on the server.
/// Time is Redis's `TIME` unless the limiter is built with
/// [`build_with_clock`](RedisLimiterBuilder::build_with_clock). Keys are
/// `<prefix>{<client key>}:<backend>:<quotas>[:<i>]`; see the crate docs.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use weir_rl_core::Quota;
/// use weir_redis::{Redis, RedisLimiter};
///
/// let redis = Redis::connect("redis://127.0.0.1:6379").await?;
/// let per_user = RedisLimiter::builder(&redis, Quota::per_minute(100)?).prefix("rl:api:").build()?;
/// let decision = per_user.check("user-42").await?;
/// if decision.is_denied() {
///     println!("retry in {:?}", decision.retry_after());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisLimiter {
    redis: Redis,
    algo: Algo,
    policies: Box<[Policy]>,
    quotas: Box<[Quota]>,
    prefix: Arc<str>,
    /// What follows a client's hash tag in each of its Redis keys, one per
    /// quota (GCRA) or one (windows): `:<backend>:<quotas>[:<i>]`, so limiters
    /// that differ in backend or in any quota never share a key.
    suffixes: Arc<[String]>,
    /// Client keys longer than this are hashed or refused (`long_keys`).
    max_key_bytes: usize,
    long_keys: LongKeys,
    expiry: Expiry,
    time: TimeSource,
    /// A random tag unique to this limiter, for sliding-log entries.
    tag: u64,
    /// The limiter's name: the `limiter` label of its metrics.
    name: Arc<str>,
    pub(crate) metrics: Metrics,
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("backend", &self.backend())
            .field("policies", &self.policies)
            .field("prefix", &self.prefix)
            .field("server_time", &matches!(self.time, TimeSource::Server))
            .finish_non_exhaustive()
    }
}

/// A process-wide counter that makes sliding-log entries unique per call.
static CALLS: AtomicU64 = AtomicU64::new(0);

fn random_tag() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std's RandomState is seeded from the operating system's randomness.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    hasher.finish()
}

/// `quota` as it appears in key names: `<count>/<period>`, then `b<burst>` if
/// the burst is not the count; the period in the largest unit that divides it
/// (`d`, `h`, `m`, `s`, `ms`, `us`, `ns`). One-to-one: two quotas with the same
/// spelling are the same quota.
fn quota_name(quota: &Quota) -> String {
    const UNITS: [(u128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let ns = quota.period().as_nanos();
    let (size, unit) = UNITS.into_iter().find(|(size, _)| ns.is_multiple_of(*size)).unwrap_or((1, "ns"));
    let mut name = format!("{}/{}{unit}", quota.count(), ns / size);
    if quota.burst() != quota.count() {
        name.push_str(&format!("b{}", quota.burst()));
    }
    name
}

/// The key suffixes of a limiter (see `RedisLimiter::suffixes`).
fn suffixes(backend: Backend, quotas: &[Quota]) -> Arc<[String]> {
    let names: Vec<String> = quotas.iter().map(quota_name).collect();
    let names = names.join(",");
    match backend {
        Backend::Gcra => (0..quotas.len()).map(|i| format!(":g:{names}:{i}")).collect(),
        Backend::FixedWindow => Arc::from([format!(":fw:{names}")]),
        Backend::SlidingWindow => Arc::from([format!(":sw:{names}")]),
        Backend::SlidingLog => Arc::from([format!(":sl:{names}")]),
    }
}

fn window_of(quota: &Quota) -> Result<WindowMicros, ConfigError> {
    if quota.burst() != quota.count() {
        return Err(ConfigError::BurstIsNotCount { count: quota.count(), burst: quota.burst() });
    }
    if quota.count() > MAX_WINDOW_LIMIT {
        return Err(ConfigError::WindowTooLarge { limit: quota.count() });
    }
    let period_ns = quota.period().as_nanos();
    if period_ns < 1_000_000 {
        return Err(ConfigError::WindowTooShort { window: quota.period() });
    }
    // Whole µs, rounded up (never a shorter window than asked).
    let period_us = u64::try_from(period_ns.div_ceil(u128::from(NS))).unwrap_or(u64::MAX);
    Ok(WindowMicros { limit: quota.count(), period_us })
}

/// The options of a [`RedisLimiter`]: setters that never fail, checked together by
/// [`build`](Self::build) or [`build_with_clock`](Self::build_with_clock). From
/// [`RedisLimiter::builder`].
///
/// ```
/// # async fn demo(redis: &weir_redis::Redis) -> Result<(), Box<dyn std::error::Error>> {
/// use weir_rl_core::Quota;
/// use weir_redis::{Backend, ConfigError, RedisLimiter};
///
/// // A minute, a day and a burst limit, all or nothing, in one round trip.
/// let tiered = RedisLimiter::builder(redis, Quota::per_minute(100)?)
///     .and_quota(Quota::per_day(5_000)?)
///     .and_quota(Quota::per_second(10)?)
///     .prefix("rl:api:")
///     .build()?;
/// // An exact sliding window.
/// let log = RedisLimiter::builder(redis, Quota::per_minute(100)?).backend(Backend::SlidingLog).build()?;
/// // Build errors name the option.
/// let e = RedisLimiter::builder(redis, Quota::per_minute(100)?).prefix("{rl}").build().unwrap_err();
/// assert!(matches!(e, ConfigError::BraceInPrefix { .. }));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedisLimiterBuilder {
    redis: Redis,
    backend: Backend,
    quotas: Vec<Quota>,
    prefix: String,
    max_key_bytes: usize,
    long_keys: LongKeys,
    /// `None`: the build's default (`WhenIdle` with Redis's time, `Never` with a
    /// client clock).
    expiry: Option<Expiry>,
    name: String,
}

impl RedisLimiterBuilder {
    /// The algorithm (see the table on [`RedisLimiter`]). Default: [`Backend::Gcra`].
    ///
    /// - [`Backend::Gcra`]: a token bucket (GCRA) per key, deciding exactly as
    ///   `weir_gcra::Gcra` does for the same requests at the same times (to 1 µs, see
    ///   the crate docs).
    /// - [`Backend::FixedWindow`]: at most `count` per window of `period`, windows
    ///   aligned to the Unix epoch (or the clock's origin).
    /// - [`Backend::SlidingWindow`]: as `weir_window::SlidingWindow` (the previous
    ///   window's count weighted by its overlap with the last window-length, plus the
    ///   current one's).
    /// - [`Backend::SlidingLog`]: exactly at most `count` in any interval of
    ///   `period`, as `weir_window::SlidingLog`, at the cost of one sorted-set entry
    ///   per admitted request; at most [`MAX_LOG_LIMIT`] per window.
    ///
    /// The windows take one quota whose burst equals its count, with a window of at
    /// least 1 ms.
    pub fn backend(self, backend: Backend) -> Self {
        Self { backend, ..self }
    }

    /// Adds a quota checked together with the others, all or nothing, in one script
    /// (a minute, a day and a burst limit, say): a request is admitted only if every
    /// quota admits it, and a denied one consumes nothing from any of them. GCRA
    /// only; at most [`MAX_TIER`] quotas in all.
    ///
    /// The decision's [`policy_index`](Decision::policy_index) names the quota that
    /// decided (0 for the builder's, then in the order added): on denial the one
    /// whose wait is longest, on admission the one with the least left.
    pub fn and_quota(mut self, quota: Quota) -> Self {
        self.quotas.push(quota);
        self
    }

    /// Keys under `prefix`, so they never collide with the application's. Limiters
    /// with other quotas or another backend never share keys whatever the prefix
    /// (see the crate docs, "Keys"); two limits with the same quotas that must stay
    /// apart take different prefixes. Instances that should share a limit use the
    /// same prefix. Braces are
    /// refused by [`build`](Self::build) (they would break the per-client hash tag).
    /// Default: [`DEFAULT_PREFIX`].
    pub fn prefix(self, prefix: &str) -> Self {
        Self { prefix: prefix.to_owned(), ..self }
    }

    /// The longest client key, in bytes, kept as it is; longer ones are hashed or
    /// refused, as [`long_keys`](Self::long_keys) says. So a client key costs at
    /// most `3 × max_key_bytes` bytes in a Redis key name (percent-encoded: a
    /// byte that is not UTF-8, `%`, `{` or `}` takes three), or
    /// [`HASHED_KEY_BYTES`] hashed, however long it is; the same holds for a
    /// [`Leased`](crate::Leased) table and a local fallback store over this
    /// limiter. Hashing reads the whole key once (SHA-256, hundreds of MB/s), so
    /// its cost does not matter beside a round trip for any key a server accepts.
    /// At least 1 ([`build`](Self::build) refuses 0 with [`ConfigError::Zero`]).
    /// Default: [`DEFAULT_MAX_KEY_BYTES`] (256).
    pub fn max_key_bytes(self, max_key_bytes: usize) -> Self {
        Self { max_key_bytes, ..self }
    }

    /// What to do with a client key longer than
    /// [`max_key_bytes`](Self::max_key_bytes). Default: [`LongKeys::Hash`].
    pub fn long_keys(self, long_keys: LongKeys) -> Self {
        Self { long_keys, ..self }
    }

    /// The limiter's name: the `limiter` label of its metrics (the `metrics`
    /// feature; see the crate docs, "Metrics"), and of those of a [`Resilient`](crate::Resilient)
    /// or [`Leased`](crate::Leased) over it. A name from your configuration
    /// (`per_key`), never a client's key. Default: `default`.
    pub fn name(self, name: &str) -> Self {
        Self { name: name.to_owned(), ..self }
    }

    /// When Redis forgets a key's state (see [`Expiry`]). Default:
    /// [`Expiry::WhenIdle`] with [`build`](Self::build) (Redis's time),
    /// [`Expiry::Never`] with [`build_with_clock`](Self::build_with_clock); a fleet
    /// deciding by client clocks in Unix time sets [`Expiry::WhenIdle`].
    pub fn expiry(self, expiry: Expiry) -> Self {
        Self { expiry: Some(expiry), ..self }
    }

    /// The limiter, deciding at Redis's `TIME`, or the first option that cannot be
    /// used: [`ConfigError::TierSize`] (more than [`MAX_TIER`] quotas),
    /// [`ConfigError::TierNeedsGcra`] (several quotas on a window backend),
    /// [`ConfigError::BurstIsNotCount`], [`ConfigError::WindowTooShort`] or
    /// [`ConfigError::LogTooLarge`] or [`ConfigError::WindowTooLarge`] (a quota
    /// the backend cannot run),
    /// [`ConfigError::BraceInPrefix`] (the prefix), [`ConfigError::Zero`]
    /// (`max_key_bytes`).
    pub fn build(self) -> Result<RedisLimiter, ConfigError> {
        self.build_with(TimeSource::Server)
    }

    /// The limiter, deciding at this process's `clock` (read in nanoseconds, used in
    /// whole microseconds) instead of Redis's `TIME`; errors as
    /// [`build`](Self::build).
    ///
    /// For tests, and for fleets whose clocks are known to agree: with client
    /// time, an instance whose clock runs ahead refills buckets early, so skew
    /// widens the limit; Redis's time cannot be skewed between instances. Readings
    /// are taken as times since the Unix epoch; windows align to multiples of their
    /// length from the clock's origin.
    ///
    /// Keys are kept without an expiry unless [`expiry`](Self::expiry) says
    /// otherwise ([`Expiry::Never`]), so with a
    /// [`ManualClock`](weir_rl_core::ManualClock) every decision is reproducible: it
    /// depends on the clock's readings and the requests alone (and the keys in
    /// Redis before the run), not on how much real time passes. A fleet on client
    /// clocks sets [`Expiry::WhenIdle`], so idle keys expire.
    pub fn build_with_clock(self, clock: impl Clock + Send + Sync + 'static) -> Result<RedisLimiter, ConfigError> {
        self.build_with(TimeSource::Client(Arc::new(clock)))
    }

    fn build_with(self, time: TimeSource) -> Result<RedisLimiter, ConfigError> {
        let quotas = self.quotas;
        if quotas.len() > MAX_TIER {
            return Err(ConfigError::TierSize { quotas: quotas.len() });
        }
        let (algo, policies): (Algo, Box<[Policy]>) = match (self.backend, quotas.as_slice()) {
            (Backend::Gcra, _) => {
                (Algo::Gcra(quotas.iter().map(GcraMicros::new).collect()), quotas.iter().map(Policy::of).collect())
            }
            (backend, &[quota]) => {
                let window = window_of(&quota)?;
                let algo = match backend {
                    Backend::FixedWindow => Algo::Fixed(window),
                    Backend::SlidingWindow => Algo::Sliding(window),
                    _ => {
                        if window.limit > MAX_LOG_LIMIT {
                            return Err(ConfigError::LogTooLarge { limit: window.limit });
                        }
                        Algo::Log(window)
                    }
                };
                (algo, Box::new([Policy::new(quota.count(), quota.period())]))
            }
            (backend, _) => return Err(ConfigError::TierNeedsGcra { backend }),
        };
        if self.prefix.contains(['{', '}']) {
            return Err(ConfigError::BraceInPrefix { prefix: self.prefix });
        }
        if self.max_key_bytes == 0 {
            return Err(ConfigError::Zero { what: "max_key_bytes" });
        }
        Ok(RedisLimiter {
            redis: self.redis,
            algo,
            policies,
            suffixes: suffixes(self.backend, &quotas),
            quotas: quotas.into(),
            prefix: Arc::from(self.prefix),
            max_key_bytes: self.max_key_bytes,
            long_keys: self.long_keys,
            expiry: self.expiry.unwrap_or(match time {
                TimeSource::Server => Expiry::WhenIdle,
                TimeSource::Client(_) => Expiry::Never,
            }),
            time,
            tag: random_tag(),
            metrics: Metrics::register(&self.name),
            name: Arc::from(self.name),
        })
    }
}

impl RedisLimiter {
    /// The options of a limiter of `quota` for each key, over `redis`, at their
    /// defaults: GCRA, keys under [`DEFAULT_PREFIX`], Redis's time.
    pub fn builder(redis: &Redis, quota: Quota) -> RedisLimiterBuilder {
        RedisLimiterBuilder {
            redis: redis.clone(),
            backend: Backend::Gcra,
            quotas: vec![quota],
            prefix: DEFAULT_PREFIX.to_owned(),
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
            long_keys: LongKeys::Hash,
            expiry: None,
            name: "default".to_owned(),
        }
    }

    /// The limiter's name (the `limiter` label of its metrics).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The algorithm this limiter runs.
    pub fn backend(&self) -> Backend {
        match self.algo {
            Algo::Gcra(_) => Backend::Gcra,
            Algo::Fixed(_) => Backend::FixedWindow,
            Algo::Sliding(_) => Backend::SlidingWindow,
            Algo::Log(_) => Backend::SlidingLog,
        }
    }

    /// The quotas this limiter enforces, as given.
    pub fn quotas(&self) -> impl Iterator<Item = Quota> + '_ {
        self.quotas.iter().copied()
    }

    /// The connection this limiter uses.
    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The longest client key kept as it is
    /// ([`RedisLimiterBuilder::max_key_bytes`]).
    pub fn max_key_bytes(&self) -> usize {
        self.max_key_bytes
    }

    /// What happens to longer keys ([`RedisLimiterBuilder::long_keys`]).
    pub fn long_keys(&self) -> LongKeys {
        self.long_keys
    }

    /// The most that one call can ever be admitted (the smallest limit of a tier).
    pub fn capacity(&self) -> u64 {
        match &self.algo {
            Algo::Gcra(quotas) => quotas.iter().map(GcraMicros::burst).min().unwrap_or(0),
            Algo::Fixed(w) | Algo::Sliding(w) | Algo::Log(w) => w.limit,
        }
    }

    /// The Redis keys of `key`'s state, one per quota (what `DEL` would forget);
    /// none for a key this limiter refuses ([`LongKeys::Refuse`]).
    ///
    /// ```
    /// # fn demo(limiter: &weir_redis::RedisLimiter) {
    /// // With the default prefix and a single GCRA quota of 100 per minute:
    /// assert_eq!(limiter.redis_keys("alice"), vec!["weir:{alice}:g:100/1m:0".to_owned()]);
    /// # }
    /// ```
    pub fn redis_keys(&self, key: &(impl AsRef<[u8]> + ?Sized)) -> Vec<String> {
        self.key_name(key.as_ref()).map(|name| self.keys_named(&name)).unwrap_or_default()
    }

    /// The Redis keys of the client key whose name is `name` (from
    /// [`key_name`](Self::key_name)).
    pub(crate) fn keys_named(&self, name: &str) -> Vec<String> {
        self.suffixes.iter().map(|suffix| format!("{}{{{name}}}{suffix}", self.prefix)).collect()
    }

    /// The Redis keys of `key`, or [`Error::KeyTooLong`] for a key this limiter
    /// refuses.
    pub(crate) fn keys_of(&self, key: &[u8]) -> Result<Vec<String>, Error> {
        Ok(self.keys_named(&self.key_name(key)?))
    }

    /// What stands for `key` between the braces of its Redis keys, at most
    /// `3 × max_key_bytes` bytes (or [`HASHED_KEY_BYTES`]), and also what a lease
    /// table or a fallback store over this limiter keeps for it: the key itself
    /// with `%`, `{`, `}` and bytes that are not UTF-8 percent-encoded (so the
    /// hash tag is always exactly the client key, and the encoding is
    /// one-to-one); `%` for the empty key (so the hash tag is never empty); or,
    /// for a key longer than `max_key_bytes`, `%H` and the hex of 128 bits of its
    /// SHA-256 (never the encoding of a short key: `%` is always followed by two
    /// hex digits there), or [`Error::KeyTooLong`].
    pub(crate) fn key_name(&self, key: &[u8]) -> Result<String, Error> {
        use core::fmt::Write as _;
        if key.len() > self.max_key_bytes {
            if self.long_keys == LongKeys::Refuse {
                return Err(Error::KeyTooLong { len: key.len(), max: self.max_key_bytes });
            }
            let mut out = String::with_capacity(HASHED_KEY_BYTES);
            out.push_str("%H");
            for b in &weir_rl_core::long_key_hash(key) {
                let _ = write!(out, "{b:02x}");
            }
            return Ok(out);
        }
        if key.is_empty() {
            // `{}` is no hash tag for Redis Cluster (a tier's keys would spread
            // over slots): the empty key is `%`, which no other key is named (a
            // `%` is followed by two hex digits or `H` everywhere else).
            return Ok("%".to_owned());
        }
        let mut out = String::with_capacity(key.len() + 4);
        for chunk in key.utf8_chunks() {
            for c in chunk.valid().chars() {
                match c {
                    '%' => out.push_str("%25"),
                    '{' => out.push_str("%7B"),
                    '}' => out.push_str("%7D"),
                    c => out.push(c),
                }
            }
            for b in chunk.invalid() {
                let _ = write!(out, "%{b:02X}");
            }
        }
        Ok(out)
    }

    /// The SHA1 of the script a check runs (see `__private::script_sha`).
    pub(crate) fn script_sha(&self) -> &str {
        match self.algo {
            Algo::Gcra(_) => scripts::GCRA.get_hash(),
            Algo::Fixed(_) => scripts::FIXED.get_hash(),
            Algo::Sliding(_) => scripts::SLIDING.get_hash(),
            Algo::Log(_) => scripts::LOG.get_hash(),
        }
    }

    /// The single GCRA quota of this limiter, if it is one (for leases).
    pub(crate) fn single_gcra(&self) -> Option<GcraMicros> {
        match &self.algo {
            Algo::Gcra(quotas) if quotas.len() == 1 => quotas.first().copied(),
            _ => None,
        }
    }

    /// The `now` argument of every script: empty for Redis's `TIME`, prefixed
    /// with `p` for keys without an expiry (see `scripts`).
    pub(crate) fn now_arg(&self) -> String {
        let persist = if self.expiry == Expiry::Never { "p" } else { "" };
        match &self.time {
            TimeSource::Server => persist.to_owned(),
            TimeSource::Client(clock) => format!("{persist}{}", clock.now().as_u64() / NS),
        }
    }

    /// When Redis forgets a key's state ([`RedisLimiterBuilder::expiry`]).
    pub fn expiry(&self) -> Expiry {
        self.expiry
    }

    /// [`Error::InsufficientCapacity`] for `n` above [`capacity`](Self::capacity).
    pub(crate) fn too_many(&self, n: u64) -> Result<(), Error> {
        let capacity = self.capacity();
        if n > capacity {
            return Err(Error::InsufficientCapacity(InsufficientCapacity { requested: n, capacity }));
        }
        Ok(())
    }

    /// Checks one request for `key`. See [`check_n`](Self::check_n).
    pub async fn check(&self, key: &(impl AsRef<[u8]> + ?Sized)) -> Result<Decision, Error> {
        self.check_n(key, 1).await
    }

    /// Checks a request of cost `n` for `key`, all or nothing, in one round trip:
    /// admitted (consuming `n` in Redis) or denied (writing nothing). `n` = 0 peeks.
    /// `n` above [`capacity`](Self::capacity) is [`Error::InsufficientCapacity`]
    /// without a round trip.
    ///
    /// The decision is stamped ([`Decision::decided_at`]) with the time it was made
    /// at, in nanoseconds of Unix time (Redis's clock, or the limiter's clock), so
    /// that [`refund`](Self::refund) finds the window it was counted in.
    pub async fn check_n(&self, key: &(impl AsRef<[u8]> + ?Sized), n: u64) -> Result<Decision, Error> {
        let decision = self.decide(key.as_ref(), n).await;
        if let Ok(decision) = &decision
            && n > 0
        {
            self.metrics.decided_by(crate::Path::Redis, decision.is_allowed());
        }
        decision
    }

    async fn decide(&self, key: &[u8], n: u64) -> Result<Decision, Error> {
        self.too_many(n)?;
        let keys = self.keys_of(key)?;
        let now = self.now_arg();
        let mut invocation;
        match &self.algo {
            Algo::Gcra(quotas) => invocation = Self::gcra_invocation(&keys, quotas, n, &now),
            Algo::Fixed(w) | Algo::Sliding(w) => {
                invocation = if matches!(self.algo, Algo::Fixed(_)) {
                    scripts::FIXED.prepare_invoke()
                } else {
                    scripts::SLIDING.prepare_invoke()
                };
                invocation.key(&keys[0]).arg(&now).arg(n).arg(w.limit).arg(w.period_us);
            }
            Algo::Log(w) => {
                invocation = scripts::LOG.prepare_invoke();
                invocation.key(&keys[0]).arg(&now).arg(n).arg(w.limit).arg(w.period_us).arg(self.log_tag());
            }
        }
        let reply: Vec<u64> = self.redis.invoke(&invocation, &self.metrics).await?;
        match *reply.as_slice() {
            [admitted, now, ref fields @ ..] => self.decision_from(n, admitted == 1, now, fields),
            _ => Err(self.bad_reply(&reply)),
        }
    }

    /// A sliding-log member prefix unique to one call: this limiter's tag and a
    /// process-wide count.
    fn log_tag(&self) -> String {
        // Ordering: Relaxed; the counter only has to hand out distinct values.
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        format!("{:x}.{call:x}", self.tag)
    }

    /// The decision of a call of cost `n` from its script's reply (its own
    /// script's, or its item's in a batch): whether it was admitted (fits),
    /// Redis's time (µs), and the fields that follow: `used` per quota (GCRA);
    /// `window, count` (fixed); `window, prev, curr` (sliding); `at, live,
    /// newest, blocking` (log). A peek (`n` = 0) is an admission. Stamped with
    /// the time it was decided at, for [`refund`](Self::refund).
    pub(crate) fn decision_from(&self, n: u64, admitted: bool, now: u64, fields: &[u64]) -> Result<Decision, Error> {
        let admitted = admitted || n == 0;
        let stamp = |us: u64| Nanos::new(us.saturating_mul(NS));
        match (&self.algo, fields) {
            (Algo::Gcra(quotas), used) if used.len() == quotas.len() => {
                let decisions =
                    quotas.iter().zip(used).map(|(quota, &used)| quota.decision(admitted, used, quota.cost_us(n)));
                Ok(deciding(decisions).at(stamp(now)))
            }
            (Algo::Fixed(w), &[window, count]) => {
                let at = now.max(window.saturating_mul(w.period_us));
                Ok(w.fixed(admitted, now, window, count).at(stamp(at)))
            }
            (Algo::Sliding(w), &[window, prev, curr]) => {
                let at = now.max(window.saturating_mul(w.period_us));
                Ok(w.sliding(admitted, now, window, prev, curr, n).at(stamp(at)))
            }
            (Algo::Log(w), &[at, live, newest, blocking]) => {
                Ok(w.log(admitted, now, live, newest, blocking).at(stamp(at)))
            }
            _ => Err(self.bad_reply(fields)),
        }
    }

    /// How many reply fields follow `now` (or an item's `fits`) in a decision
    /// of this limiter (see [`decision_from`](Self::decision_from)).
    pub(crate) fn reply_fields(&self) -> usize {
        match &self.algo {
            Algo::Gcra(quotas) => quotas.len(),
            Algo::Fixed(_) => 2,
            Algo::Sliding(_) => 3,
            Algo::Log(_) => 4,
        }
    }

    fn bad_reply(&self, reply: &[u64]) -> Error {
        let script = match self.algo {
            Algo::Gcra(_) => "GCRA",
            Algo::Fixed(_) | Algo::Sliding(_) => "window",
            Algo::Log(_) => "sliding-log",
        };
        Error::reply(format_args!("{script} script replied {reply:?}"))
    }

    /// Appends this limiter's record of a batch item of cost `n` for the Redis
    /// keys `keys` (from [`keys_of`](Self::keys_of)) to `invocation` (see
    /// `scripts::BATCH`).
    pub(crate) fn batch_record(&self, invocation: &mut ScriptInvocation<'_>, keys: &[String], n: u64, shadow: bool) {
        let flags = u8::from(self.expiry == Expiry::Never) + 2 * u8::from(shadow);
        match &self.algo {
            Algo::Gcra(quotas) => {
                invocation.arg("g").arg(flags).arg(n).arg(quotas.len());
                for (key, quota) in keys.iter().zip(quotas.iter()) {
                    invocation.key(key).arg(quota.cost_us(n)).arg(quota.tolerance_us());
                }
            }
            Algo::Fixed(w) | Algo::Sliding(w) => {
                let kind = if matches!(self.algo, Algo::Fixed(_)) { "f" } else { "s" };
                invocation.key(&keys[0]).arg(kind).arg(flags).arg(n).arg(w.limit).arg(w.period_us);
            }
            Algo::Log(w) => {
                invocation.key(&keys[0]).arg("l").arg(flags).arg(n).arg(w.limit).arg(w.period_us).arg(self.log_tag());
            }
        }
    }

    /// The decision time a batch of this limiter's passes in `ARGV[1]` (see
    /// `scripts`): `None` for Redis's `TIME`, else this limiter's clock in µs.
    pub(crate) fn client_time_us(&self) -> Option<u64> {
        match &self.time {
            TimeSource::Server => None,
            TimeSource::Client(clock) => Some(clock.now().as_u64() / NS),
        }
    }

    /// Whether this limiter decides at Redis's `TIME` (not a client clock).
    pub(crate) fn uses_server_time(&self) -> bool {
        matches!(self.time, TimeSource::Server)
    }

    fn gcra_invocation(keys: &[String], quotas: &[GcraMicros], n: u64, now: &str) -> redis::ScriptInvocation<'static> {
        let mut invocation = scripts::GCRA.prepare_invoke();
        invocation.arg(now).arg(if n == 0 { "0" } else { "1" });
        for (key, quota) in keys.iter().zip(quotas) {
            invocation.key(key).arg(quota.cost_us(n)).arg(quota.tolerance_us());
        }
        invocation
    }

    /// A GCRA check of `key` in a transaction that also reads Redis's `TIME`
    /// before it, the `PEXPIRETIME` (absolute expiry, Unix ms; -1: none) of each
    /// of its keys after it, and `TIME` again. See
    /// `__private::gcra_check_with_expiry`.
    pub(crate) async fn gcra_check_with_expiry(
        &self,
        key: &[u8],
        n: u64,
    ) -> Result<(Decision, Vec<i64>, (u64, u64)), Error> {
        use redis::FromRedisValue as _;
        let Algo::Gcra(quotas) = &self.algo else {
            return Err(Error::reply("gcra_check_with_expiry: not a GCRA limiter"));
        };
        self.too_many(n)?;
        let keys = self.keys_of(key)?;
        let now = self.now_arg();
        // A peek first (it writes nothing), which loads the script if Redis lacks
        // it: a transaction cannot reload a script it does not find.
        let _: Vec<u64> = self.redis.invoke(&Self::gcra_invocation(&keys, quotas, 0, &now), &self.metrics).await?;
        let invocation = Self::gcra_invocation(&keys, quotas, n, &now);
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("TIME").invoke_script(&invocation);
        for key in &keys {
            pipe.cmd("PEXPIRETIME").arg(key);
        }
        pipe.cmd("TIME");
        let values: Vec<redis::Value> = self.redis.pipeline(&pipe).await?;
        let shape = |e: redis::ParsingError| Error::reply(format_args!("a check's transaction replied {e}"));
        let ms = |v: redis::Value| -> Result<u64, Error> {
            let (s, us) = <(u64, u64)>::from_redis_value(v).map_err(shape)?;
            Ok(s * 1_000 + us / 1_000)
        };
        let mut values = values.into_iter();
        let mut next = || values.next().ok_or_else(|| Error::reply("a check's transaction replied too little"));
        let before = ms(next()?)?;
        let reply = Vec::<u64>::from_redis_value(next()?).map_err(shape)?;
        let expiries =
            (0..keys.len()).map(|_| i64::from_redis_value(next()?).map_err(shape)).collect::<Result<Vec<_>, _>>()?;
        let after = ms(next()?)?;
        let decision = match *reply.as_slice() {
            [admitted, now, ref used @ ..] => self.decision_from(n, admitted == 1, now, used)?,
            _ => return Err(self.bad_reply(&reply)),
        };
        Ok((decision, expiries, (before, after)))
    }

    /// Gives back `n` units that `admission` (a decision of this limiter for `key`)
    /// consumed and the caller did not use, once per admission (`n` is trusted).
    /// GCRA credits what `n` units are worth less the time since the admission
    /// was decided ([`Decision::decided_at`]), never beyond full, as
    /// `weir_gcra::Gcra::refund` does: the refill since the admission has been
    /// repaying its debt, and crediting that time again would give back capacity
    /// a later admission took (so a refund a whole emission interval per unit
    /// late gives nothing back). Windows give `n` back to the window the
    /// admission was counted in, and nothing once it no longer counts.
    pub async fn refund(&self, key: &(impl AsRef<[u8]> + ?Sized), n: u64, admission: &Decision) -> Result<(), Error> {
        self.too_many(n)?;
        if n == 0 || admission.is_denied() {
            return Ok(());
        }
        let keys = self.keys_of(key.as_ref())?;
        let now = self.now_arg();
        let at_us = admission.decided_at().as_u64() / NS;
        let mut invocation;
        match &self.algo {
            Algo::Gcra(quotas) => {
                invocation = scripts::GCRA_REFUND.prepare_invoke();
                invocation.arg(&now).arg(at_us);
                for (key, quota) in keys.iter().zip(quotas.iter()) {
                    invocation.key(key).arg(quota.credit_us(n));
                }
            }
            Algo::Fixed(w) | Algo::Sliding(w) => {
                let kind = if matches!(self.algo, Algo::Fixed(_)) { "f" } else { "s" };
                invocation = scripts::WINDOW_REFUND.prepare_invoke();
                invocation.key(&keys[0]).arg(&now).arg(n).arg(at_us / w.period_us).arg(kind);
            }
            Algo::Log(_) => {
                invocation = scripts::LOG_REFUND.prepare_invoke();
                invocation.key(&keys[0]).arg(&now).arg(n).arg(at_us);
            }
        }
        let _now: u64 = self.redis.invoke(&invocation, &self.metrics).await?;
        Ok(())
    }

    /// `key`'s state now, without consuming anything (a key never seen is full).
    pub async fn snapshot(&self, key: &(impl AsRef<[u8]> + ?Sized)) -> Result<Snapshot, Error> {
        Ok(self.check_n(key, 0).await?.snapshot())
    }

    /// The quotas this limiter enforces, one per [`Decision::policy_index`].
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }
}

/// The decision of an all-of check from each quota's: the denial with the longest
/// wait, or if all admitted, the admission with the least left (the first on ties),
/// attributed to its quota.
pub(crate) fn deciding(decisions: impl IntoIterator<Item = Decision>) -> Decision {
    let mut best: Option<(usize, Decision)> = None;
    for (i, d) in decisions.into_iter().enumerate() {
        let better = match &best {
            None => true,
            Some((_, b)) => match (d.is_denied(), b.is_denied()) {
                (true, false) => true,
                (false, true) => false,
                (true, true) => d.retry_after() > b.retry_after(),
                (false, false) => d.remaining() < b.remaining(),
            },
        };
        if better {
            best = Some((i, d));
        }
    }
    best.map_or(Decision::allowed(Snapshot::new(0, 0, 0)), |(i, d)| d.for_policy(i))
}

impl<K: AsRef<[u8]> + ?Sized + Sync> AsyncKeyedLimiter<K> for RedisLimiter {
    type Error = Error;

    fn check_n(&self, key: &K, n: u64) -> impl Future<Output = Result<Decision, Error>> + Send {
        RedisLimiter::check_n(self, key, n)
    }

    fn refund(&self, key: &K, n: u64, admission: &Decision) -> impl Future<Output = Result<(), Error>> + Send {
        RedisLimiter::refund(self, key, n, admission)
    }

    fn snapshot(&self, key: &K) -> impl Future<Output = Result<Snapshot, Error>> + Send {
        RedisLimiter::snapshot(self, key)
    }

    fn policies(&self) -> &[Policy] {
        &self.policies
    }
}
