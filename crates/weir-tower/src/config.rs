//! Policies and tiers from a TOML file: weir-http's [`Config`](weir_http::Config),
//! read into a [`RateLimitLayer`]. The file's format is weir-http's (the same file
//! configures weir-actix):
//!
//! ```toml
//! skip = ["/health"]                # paths never limited
//! skip_methods = ["OPTIONS"]        # methods never limited (CORS preflights): exact case; not HEAD
//! legacy_headers = true             # X-RateLimit-* besides RateLimit / RateLimit-Policy (default false)
//! problem_type = "about:blank"      # the `type` of the problem+json bodies
//!
//! [client]                          # how client IPs are found (see `ClientIp`)
//! trusted_proxies = ["10.0.0.0/8"]
//! forwarded_header = "x-forwarded-for"   # or "forwarded"
//! ipv6_prefix = 64
//!
//! [[policy]]
//! name = "auth"
//! routes = ["/auth"]                # path prefixes, each of one policy; the longest match wins (gRPC: "/pkg.Service/", "/pkg.Service/Method")
//! [[policy.limit]]
//! name = "per_ip"                   # the `limit` label of its metrics (default: its place, from 1)
//! key = "ip"                        # ip | user | global | header:<name>, or a list: the first that the request has
//! quotas = [{ name = "5min", algorithm = "sliding_window", limit = 5, window = "5m" }]
//!
//! [[policy]]
//! name = "api"
//! default = true                    # for every request no route matches
//! [[policy.limit]]
//! key = ["header:x-api-key", "ip"]
//! tiered = true                     # the quotas of the client's tier, below
//! [[policy.limit]]
//! key = "ip"
//! on_missing_key = "skip"           # deny (400) | skip | shared:<name>
//! long_keys = "hash"                # a header value over 128 bytes: hash (the default) | refuse (400)
//! quotas = [{ algorithm = "gcra", limit = 100, window = "1m", burst = 20 }]
//!
//! [tier_cache]
//! ttl = "300s"
//! max_entries = 10000
//! on_lookup_error = "free"          # a tier to fall back to, or "deny" (503)
//!
//! [tiers.free]
//! quotas = [
//!   { name = "burst", algorithm = "gcra", limit = 30, window = "1m", burst = 10 },
//!   { name = "minute", algorithm = "sliding_window", limit = 30, window = "1m" },
//!   { name = "day", algorithm = "fixed_window", limit = 1000, window = "1d" },
//! ]
//! ```
//!
//! A limit's quotas are checked all or nothing ([`AllOf`](weir_rl_core::AllOf)): a
//! request denied by one consumes nothing from the others. Algorithms: `gcra` (a
//! token bucket: `limit` per `window`, at most `burst` at once; the
//! `RateLimit-Policy` item is the burst per its refill time), `sliding_window` (the
//! sliding-window counter), `sliding_log` (exact; memory grows with the limit),
//! `fixed_window`. A limit may instead be `throttle = { rate = 2, per = "1s",
//! capacity = 10, max_wait = "5s" }`: requests wait their turn. `max_keys` (default
//! 100 000) bounds each store's keys. Durations are `500ms`, `30s`, `5m`, `1h`,
//! `1d`, or a number of seconds.
//!
//! Every mistake is a [`ConfigError`] naming the field and its line:
//! `line 17, column 47, `window`: `5 minutes` is not a duration; ...`.

use crate::layer::{RateLimitLayer, RateLimitLayerBuilder};
use core::fmt;
use core::future::Future;
pub use weir_http::ConfigError;
use weir_http::Key;
pub use weir_http::config::{Algorithm, QuotaConfig, StoreFactory, memory_store, memory_store_with_clock};
use weir_rl_core::KeyedLimiter;

/// A parsed, validated configuration: build a [`RateLimitLayer`] from it with
/// [`layer`](Self::layer) (after giving the tier lookup, if it has tiers). The same
/// as weir-http's [`Config`](weir_http::Config), which it holds.
pub struct Config(weir_http::Config);

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Config {
    /// Parses and validates a configuration. Tiers' lookup and the store factory
    /// come after ([`tier_lookup`](Self::tier_lookup),
    /// [`store_factory`](Self::store_factory)).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        weir_http::Config::from_toml(text).map(Self)
    }

    /// The async lookup of a client's tier (see [`Tiers::builder`](crate::Tiers::builder));
    /// needed when a limit is `tiered`.
    pub fn tier_lookup<F, Fut, T, E>(self, lookup: F) -> Self
    where
        F: Fn(Key) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: AsRef<str>,
        E: fmt::Display,
    {
        Self(self.0.tier_lookup(lookup))
    }

    /// Builds stores with `factory` instead of the default in-memory `weir_keyed`
    /// stores (for another clock in tests, or stores of your own).
    pub fn store_factory(
        self,
        factory: impl Fn(&QuotaConfig) -> Result<Box<dyn KeyedLimiter<Key> + Send + Sync>, String> + Send + Sync + 'static,
    ) -> Self {
        Self(self.0.store_factory(factory))
    }

    /// Reads `clock` instead of the monotonic clock: the stores' and the tier cache's
    /// (a [`ManualClock`](weir_rl_core::ManualClock) in tests). It replaces any store
    /// factory given before.
    pub fn clock<C: weir_rl_core::Clock + Clone + Send + Sync + 'static>(self, clock: C) -> Self {
        Self(self.0.clock(clock))
    }

    /// A layer builder with every policy, skip rule and header setting of the file;
    /// add hooks before building it.
    pub fn builder(self) -> Result<RateLimitLayerBuilder, ConfigError> {
        Ok(RateLimitLayerBuilder::from_limits(self.0.builder()?))
    }

    /// The layer.
    pub fn layer(self) -> Result<RateLimitLayer, ConfigError> {
        self.builder()?.build().map_err(|e| ConfigError::new(e.to_string()))
    }

    /// weir-http's configuration.
    pub fn into_inner(self) -> weir_http::Config {
        self.0
    }
}

impl From<weir_http::Config> for Config {
    fn from(config: weir_http::Config) -> Self {
        Self(config)
    }
}
