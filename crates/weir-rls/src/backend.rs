//! Where the counters live: in this process ([`BackendConfig::Memory`]) or in Redis
//! ([`BackendConfig::Redis`]), shared by a fleet of weir-rls instances; chosen in
//! one place (the binary's `--backend`, or a library user's code).
//!
//! # In memory
//!
//! One store per rule, each holding at most [`MemoryBackend::max_keys`] counters
//! (one per distinct value the rule counts apart: a phone number, an address); idle
//! counters are evicted, and a rule whose store is full of live counters refuses
//! new values with `UNAVAILABLE` ("store full") rather than admitting them
//! unlimited. The memory a client can cost is bounded: at most `max_keys` counters
//! per rule, each key at most [`MAX_COUNTER_KEY_BYTES`](crate::MAX_COUNTER_KEY_BYTES) bytes.
//!
//! # In Redis
//!
//! The counters of every instance pointed at the same Redis (one server, or a
//! cluster: [`RedisBackend::cluster`]) are shared, so a fleet admits the limit
//! between them. `redis://` or `rediss://` (TLS) URLs.
//!
//! One round trip per request, all or nothing: one script reads the counter of
//! every descriptor of a request, decides them all, and charges them only if all
//! admit, so a request refused by one limit writes nothing and needs no refund (on
//! a cluster, one script per hash slot, sent together; the slots that admitted are
//! given back when another refuses). A request that counts a leased `gcra` rule
//! ([`RedisBackend::lease`]) is checked limit by limit instead.
//!
//! While Redis does not answer within the call timeout, the [`FailPolicy`] decides:
//!
//! - `open`: admit everything (an outage lifts the limits);
//! - `closed`: refuse everything (OVER_LIMIT, whatever Envoy's
//!   `failure_mode_deny` says);
//! - `local`: each instance enforces the limit divided by
//!   [`FailPolicy::Local::instances`] in memory, so the fleet stays near the limit.
//!
//! Redis is then left alone for a back-off, and probed by one request at a time,
//! so an outage costs one timeout, not one per request.
//!
//! ## Leases
//!
//! With [`RedisBackend::lease`], a `gcra` rule's counter hands an instance
//! *leases* of up to `max_lease` permits per round trip, spent from memory until
//! they run out or expire. Fewer round trips, at a stated cost: in any interval
//! of length τ, the fleet admits at most `burst + rate·τ + min(N·max_lease,
//! rate·lifetime)` on one counter (N instances), against `burst + rate·τ` without
//! leases. Rules of the other algorithms are always decided in Redis, exactly.

use core::fmt;
use core::time::Duration;

/// Where the counters live.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendConfig {
    /// In this process.
    Memory(MemoryBackend),
    /// In Redis, shared by every instance that uses it.
    Redis(RedisBackend),
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self::Memory(MemoryBackend::default())
    }
}

impl BackendConfig {
    /// The `err_type` its failures are counted under in
    /// `ratelimit_service_should_rate_limit_error` (`redis_error`, as upstream, or
    /// `memory_error`).
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory_error",
            Self::Redis(_) => "redis_error",
        }
    }
}

/// Counters in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryBackend {
    /// The most counters a rule keeps at once (default 100 000).
    pub max_keys: usize,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self { max_keys: 100_000 }
    }
}

impl MemoryBackend {
    /// At most `max_keys` counters per rule; at least 1.
    pub fn new(max_keys: usize) -> Result<Self, BackendError> {
        if max_keys == 0 {
            return Err(BackendError::Zero("max_keys"));
        }
        Ok(Self { max_keys })
    }
}

/// What decides while Redis does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailPolicy {
    /// Admit every request.
    Open,
    /// Refuse every request (OVER_LIMIT).
    Closed,
    /// Enforce the limit divided by `instances`, in memory, per instance.
    Local {
        /// How many instances share the limit (the divisor).
        instances: u32,
        /// The most counters each rule's local store keeps.
        max_keys: usize,
    },
}

/// Leases of a `gcra` rule's permits (see the [module docs](self#leases)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseOptions {
    /// The most permits one lease holds (`L`).
    pub max_lease: u32,
    /// How long a lease's permits may be spent.
    pub lifetime: Duration,
    /// How many instances share a counter (`N`; leases shrink as the counter nears
    /// its limit, by this many).
    pub instances: u32,
}

impl LeaseOptions {
    /// Leases of at most `max_lease` permits, spendable for `lifetime`, for
    /// `instances` instances; each above 0.
    pub fn new(max_lease: u32, lifetime: Duration, instances: u32) -> Result<Self, BackendError> {
        if max_lease == 0 {
            return Err(BackendError::Zero("lease size"));
        }
        if lifetime.is_zero() {
            return Err(BackendError::Zero("lease lifetime"));
        }
        if instances == 0 {
            return Err(BackendError::Zero("instances"));
        }
        Ok(Self { max_lease, lifetime, instances })
    }
}

/// Counters in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisBackend {
    /// `redis://` or `rediss://` URLs: one server, or a cluster's nodes.
    pub urls: Vec<String>,
    /// Whether `urls` are the nodes of a Redis Cluster.
    pub cluster: bool,
    /// What decides while Redis does not answer.
    pub fail_policy: FailPolicy,
    /// Leases for `gcra` rules; `None`: every decision in Redis.
    pub lease: Option<LeaseOptions>,
    /// How long a call may take before the fail policy decides.
    pub call_timeout: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// A PEM root certificate for `rediss://` (beside the system's roots).
    pub root_certificate: Option<Vec<u8>>,
}

impl RedisBackend {
    /// Redis at `urls` (one URL, or with `cluster` a cluster's nodes), failing
    /// closed, without leases, with 250 ms calls and 5 s connects.
    pub fn new(urls: Vec<String>, cluster: bool) -> Result<Self, BackendError> {
        if urls.is_empty() {
            return Err(BackendError::NoRedisUrl);
        }
        for url in &urls {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(BackendError::RedisUrl(url.clone()));
            }
        }
        if urls.len() > 1 && !cluster {
            return Err(BackendError::SeveralUrls);
        }
        Ok(Self {
            urls,
            cluster,
            fail_policy: FailPolicy::Closed,
            lease: None,
            call_timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(5),
            root_certificate: None,
        })
    }

    /// With this fail policy (a `Local` one of at least 1 instance and 1 key).
    pub fn fail_policy(mut self, policy: FailPolicy) -> Result<Self, BackendError> {
        if let FailPolicy::Local { instances, max_keys } = policy {
            if instances == 0 {
                return Err(BackendError::Zero("instances"));
            }
            if max_keys == 0 {
                return Err(BackendError::Zero("max_keys"));
            }
        }
        self.fail_policy = policy;
        Ok(self)
    }

    /// With leases for `gcra` rules.
    pub fn lease(mut self, lease: LeaseOptions) -> Self {
        self.lease = Some(lease);
        self
    }

    /// With these timeouts (each above 0).
    pub fn timeouts(mut self, call: Duration, connect: Duration) -> Result<Self, BackendError> {
        if call.is_zero() {
            return Err(BackendError::Zero("call timeout"));
        }
        if connect.is_zero() {
            return Err(BackendError::Zero("connect timeout"));
        }
        self.call_timeout = call;
        self.connect_timeout = connect;
        Ok(self)
    }

    /// Trusting this PEM root certificate for `rediss://`.
    pub fn root_certificate(mut self, pem: Vec<u8>) -> Self {
        self.root_certificate = Some(pem);
        self
    }
}

/// A backend setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendError {
    /// A count or duration that must be above 0 is 0.
    Zero(&'static str),
    /// The Redis backend without a URL.
    NoRedisUrl,
    /// A URL that is neither `redis://` nor `rediss://`.
    RedisUrl(String),
    /// Several URLs for one server (they are a cluster's nodes only with cluster on).
    SeveralUrls,
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Zero(what) => write!(f, "{what} must be above 0"),
            Self::NoRedisUrl => f.write_str("the redis backend needs a URL (--redis-url redis://host:6379)"),
            Self::RedisUrl(url) => write!(f, "{url:?} is not a redis:// or rediss:// URL"),
            Self::SeveralUrls => f.write_str("several Redis URLs are a cluster's nodes: add --redis-cluster"),
        }
    }
}

impl std::error::Error for BackendError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_cannot_work_are_refused() {
        assert_eq!(MemoryBackend::new(0), Err(BackendError::Zero("max_keys")));
        assert_eq!(RedisBackend::new(vec![], false), Err(BackendError::NoRedisUrl));
        assert_eq!(RedisBackend::new(vec!["http://x".into()], false), Err(BackendError::RedisUrl("http://x".into())));
        let two = vec!["redis://a:6379".to_owned(), "redis://b:6379".to_owned()];
        assert_eq!(RedisBackend::new(two.clone(), false), Err(BackendError::SeveralUrls));
        let redis = RedisBackend::new(two, true).unwrap();
        assert_eq!(
            redis.clone().fail_policy(FailPolicy::Local { instances: 0, max_keys: 1 }),
            Err(BackendError::Zero("instances"))
        );
        assert_eq!(LeaseOptions::new(0, Duration::from_secs(1), 1), Err(BackendError::Zero("lease size")));
        assert_eq!(LeaseOptions::new(8, Duration::ZERO, 1), Err(BackendError::Zero("lease lifetime")));
        assert!(RedisBackend::new(vec!["rediss://h:6380".into()], false).is_ok());
    }
}
