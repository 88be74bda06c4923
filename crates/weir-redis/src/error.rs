//! [`Error`] and [`ConfigError`]: what can go wrong besides a denial.

use crate::BatchMismatch;
use core::fmt;
use core::time::Duration;
use weir_rl_core::InsufficientCapacity;

/// Why a check, refund or snapshot has no answer from Redis.
///
/// Only [`Error::Timeout`] and [`Error::Unavailable`] mean "Redis is slow or down";
/// they are what a [`FailPolicy`](crate::FailPolicy) acts on
/// ([`is_unavailable`](Error::is_unavailable)). Every other variant is an answer
/// that a retry would not change, and nothing was admitted by it.
///
/// ```
/// use weir_rl_core::InsufficientCapacity;
/// use weir_redis::Error;
///
/// let e = Error::from(InsufficientCapacity { requested: 12, capacity: 10 });
/// assert!(e.is_insufficient_capacity() && !e.is_unavailable());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Asked for more than the quota can ever admit at once ("never fits"); nothing
    /// was sent to Redis.
    InsufficientCapacity(InsufficientCapacity),
    /// No reply within the call's time limit ([`RedisOptions::call_timeout`]); the
    /// call may or may not have reached Redis.
    ///
    /// [`RedisOptions::call_timeout`]: crate::RedisOptions::call_timeout
    Timeout {
        /// The time limit that ran out.
        after: Duration,
    },
    /// Redis could not be reached or cannot serve now: connection refused or lost,
    /// or a server that answers with a transient refusal: busy with a long script
    /// (`BUSY`), out of memory under `noeviction` (`OOM`), refusing writes after a
    /// failed save (`MISCONF`) or without enough replicas (`NOREPLICAS`), a
    /// replica (`READONLY`), loading its data (`LOADING`), a cluster without a
    /// master for the slot (`MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`).
    Unavailable(redis::RedisError),
    /// The server refused the credentials (wrong password or ACL user), or the
    /// user lacks a permission the limiter needs (`EVALSHA`, `SCRIPT LOAD`).
    Auth(redis::RedisError),
    /// A limiter key holds a value of another Redis type (another program wrote it):
    /// fix the key prefix so the limiter's keys never collide with the application's.
    WrongType {
        /// Redis's message, naming the script line.
        message: String,
    },
    /// A limiter key holds a value this limiter cannot read (a state written by
    /// another algorithm or another program under the same name).
    CorruptState {
        /// Redis's message, naming the key.
        message: String,
    },
    /// Redis answered with an error or a reply of an unexpected shape.
    Reply {
        /// What was expected and what came.
        message: String,
    },
    /// The connection could not be set up as asked (a URL that does not parse).
    Config(ConfigError),
    /// A client key longer than the limiter's
    /// [`max_key_bytes`](crate::RedisLimiterBuilder::max_key_bytes), which refuses
    /// long keys ([`LongKeys::Refuse`](crate::LongKeys::Refuse)); nothing was sent
    /// to Redis. A server answers it as a bad request.
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The longest key the limiter takes.
        max: usize,
    },
    /// Item `item` of a batch cannot be decided in one script with the first
    /// ([`RedisLimiter::check_batch`](crate::RedisLimiter::check_batch)): its
    /// limiter uses another connection or another time source. Nothing was sent
    /// to Redis.
    Batch {
        /// The item's index in the batch.
        item: usize,
        /// What it does not share with the first item.
        mismatch: BatchMismatch,
    },
}

impl Error {
    /// Whether Redis is slow or down ([`Timeout`](Self::Timeout) or
    /// [`Unavailable`](Self::Unavailable)): the errors a fail policy takes over.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::Unavailable(_))
    }

    /// Whether the request asked for more than can ever be admitted at once.
    pub fn is_insufficient_capacity(&self) -> bool {
        matches!(self, Self::InsufficientCapacity(_))
    }

    /// Classifies an error from redis-rs.
    pub(crate) fn from_redis(error: redis::RedisError) -> Self {
        use redis::{ErrorKind, ServerErrorKind};
        let code = error.code().unwrap_or_default();
        if code == "WRONGTYPE" {
            return Self::WrongType { message: error.to_string() };
        }
        if code == "WEIRSTATE" {
            return Self::CorruptState { message: error.to_string() };
        }
        if matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM") {
            return Self::Auth(error);
        }
        // A server that cannot serve the call now, and may in a moment: busy with
        // a long script, out of memory (noeviction), refusing writes after a
        // failed save or without enough replicas, loading its data, a cluster
        // slot mid-failover or without a master. Nothing was written (a script
        // is refused at its first write, and Redis lets one that has written go on).
        if matches!(
            code,
            "BUSY"
                | "OOM"
                | "MISCONF"
                | "NOREPLICAS"
                | "LOADING"
                | "TRYAGAIN"
                | "MASTERDOWN"
                | "CLUSTERDOWN"
                | "READONLY"
        ) {
            return Self::Unavailable(error);
        }
        if error.is_timeout() {
            return Self::Unavailable(error);
        }
        match error.kind() {
            ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => Self::Auth(error),
            ErrorKind::Io
            | ErrorKind::ClusterConnectionNotFound
            | ErrorKind::Server(
                ServerErrorKind::BusyLoading
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ReadOnly,
            ) => Self::Unavailable(error),
            _ if error.is_io_error() || error.is_connection_dropped() || error.is_connection_refusal() => {
                Self::Unavailable(error)
            }
            _ => Self::Reply { message: error.to_string() },
        }
    }

    /// A reply of the wrong shape.
    pub(crate) fn reply(what: impl fmt::Display) -> Self {
        Self::Reply { message: what.to_string() }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl From<InsufficientCapacity> for Error {
    fn from(e: InsufficientCapacity) -> Self {
        Self::InsufficientCapacity(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InsufficientCapacity(e) => e.fmt(f),
            Self::Timeout { after } => write!(f, "Redis did not answer within {after:?}"),
            Self::Unavailable(e) => write!(f, "Redis is unavailable: {e}"),
            Self::Auth(e) => write!(f, "Redis refused the credentials or a permission the limiter needs: {e}"),
            Self::WrongType { message } => write!(
                f,
                "a rate-limit key holds another Redis type (use a key prefix no other program writes under): {message}"
            ),
            Self::CorruptState { message } => write!(
                f,
                "a rate-limit key holds a value this limiter cannot read (another algorithm or program uses the same \
                 key prefix): {message}"
            ),
            Self::Reply { message } => write!(f, "unexpected reply from Redis: {message}"),
            Self::Config(e) => e.fmt(f),
            Self::Batch { item, mismatch: BatchMismatch::Connection } => write!(
                f,
                "batch item {item} uses another Redis connection than item 0: a batch is one script on one \
                 connection (build every limiter of a batch from clones of one Redis)"
            ),
            Self::Batch { item, mismatch: BatchMismatch::TimeSource } => write!(
                f,
                "batch item {item} decides at another time source than item 0 (one at Redis's TIME, the other at a \
                 client clock): a batch is decided at one time (build its limiters all with build, or all with \
                 build_with_clock)"
            ),
            Self::KeyTooLong { len, max } => write!(
                f,
                "a client key of {len} bytes is longer than the limiter's max_key_bytes ({max}), and the limiter \
                 refuses long keys (LongKeys::Refuse; LongKeys::Hash keeps them as a hash)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InsufficientCapacity(e) => Some(e),
            Self::Unavailable(e) | Self::Auth(e) => Some(e),
            Self::Config(e) => Some(e),
            _ => None,
        }
    }
}

/// A limiter, connection or policy that cannot be built as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The key prefix contains `{` or `}`, which would move every key of every client
    /// into one Redis Cluster slot (or split one client's keys over several).
    BraceInPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// A tier needs at least one quota, and at most [`MAX_TIER`](crate::MAX_TIER).
    TierSize {
        /// The number of quotas given.
        quotas: usize,
    },
    /// Several quotas ([`and_quota`](crate::RedisLimiterBuilder::and_quota)) on a
    /// backend other than GCRA: only GCRA checks a tier of quotas.
    TierNeedsGcra {
        /// The backend asked for.
        backend: crate::Backend,
    },
    /// A window limiter's quota has a burst different from its count (a window has
    /// no separate burst).
    BurstIsNotCount {
        /// The quota's count.
        count: u64,
        /// The quota's burst.
        burst: u64,
    },
    /// A sliding log above [`MAX_LOG_LIMIT`](crate::MAX_LOG_LIMIT) entries per
    /// window: use the sliding window counter.
    LogTooLarge {
        /// The limit asked for.
        limit: u64,
    },
    /// A fixed or sliding window limit above
    /// [`MAX_WINDOW_LIMIT`](crate::MAX_WINDOW_LIMIT) (2^53 − 1): Redis's scripts
    /// count in doubles, which are exact only below 2^53.
    WindowTooLarge {
        /// The limit asked for.
        limit: u64,
    },
    /// A window shorter than a millisecond: Redis expires keys in milliseconds.
    WindowTooShort {
        /// The window asked for.
        window: Duration,
    },
    /// An option that must not be zero was zero.
    Zero {
        /// The option: `max_lease` or `instances` of a
        /// [`LeaseConfigBuilder`](crate::LeaseConfigBuilder); `call_timeout` or
        /// `connect_timeout` of a [`RedisOptionsBuilder`](crate::RedisOptionsBuilder);
        /// `LocalFallback::instances` or `LocalFallback::max_keys`
        /// ([`LocalFallback::new`](crate::LocalFallback::new)); `Backoff::initial`
        /// ([`Backoff::new`](crate::Backoff::new)); `max_key_bytes` of a
        /// [`RedisLimiterBuilder`](crate::RedisLimiterBuilder).
        what: &'static str,
    },
    /// A [`Backoff`](crate::Backoff) whose longest pause is shorter than its first.
    BackoffMaxBelowInitial {
        /// The first pause.
        initial: Duration,
        /// The longest pause.
        max: Duration,
    },
    /// A fail policy's fallback quota could not be built (see the message).
    Fallback {
        /// Why.
        message: String,
    },
    /// Leases are taken from a single-quota GCRA limiter only.
    LeaseNeedsGcra,
    /// A Redis URL that does not parse (shown without its password).
    Url {
        /// The URL, without its password.
        url: String,
        /// Why it does not parse.
        message: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BraceInPrefix { prefix } => write!(
                f,
                "prefix: the key prefix {prefix:?} contains a brace; braces are reserved for the per-client hash tag \
                 that keeps a client's keys in one Redis Cluster slot"
            ),
            Self::TierSize { quotas } => {
                write!(f, "and_quota: a tier takes 1 to {} quotas, not {quotas}", crate::MAX_TIER)
            }
            Self::TierNeedsGcra { backend } => {
                write!(f, "and_quota: a tier of several quotas runs on Backend::Gcra only, not Backend::{backend:?}")
            }
            Self::BurstIsNotCount { count, burst } => write!(
                f,
                "a window limiter's quota needs burst = count (count {count}, burst {burst}); \
                 use GCRA for a separate burst"
            ),
            Self::LogTooLarge { limit } => write!(
                f,
                "a sliding log of {limit} entries per window is more than {} (memory in Redis grows with the \
                 limit); use the sliding window counter",
                crate::MAX_LOG_LIMIT
            ),
            Self::WindowTooLarge { limit } => write!(
                f,
                "a window limit of {limit} is more than {} (2^53 - 1): Redis's scripts count in doubles, exact only \
                 below 2^53; use a smaller limit per window",
                crate::MAX_WINDOW_LIMIT
            ),
            Self::WindowTooShort { window } => {
                write!(f, "a window of {window:?} is shorter than Redis's 1 ms expiry resolution")
            }
            Self::Zero { what } => write!(f, "{what} must not be zero"),
            Self::BackoffMaxBelowInitial { initial, max } => write!(
                f,
                "Backoff::max: the longest pause ({max:?}) is shorter than the first ({initial:?}); use a max of at \
                 least the initial pause"
            ),
            Self::Fallback { message } => write!(f, "the local fallback limiter cannot be built: {message}"),
            Self::LeaseNeedsGcra => {
                f.write_str("leases are taken from a single-quota GCRA limiter (Backend::Gcra, no and_quota)")
            }
            Self::Url { url, message } => write!(f, "the Redis URL {url} is not usable: {message}"),
        }
    }
}

impl std::error::Error for ConfigError {}
