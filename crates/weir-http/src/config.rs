//! Policies and tiers from a TOML file.
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
//! routes = ["/auth"]                # path prefixes; the longest match wins (gRPC: "/pkg.Service/", "/pkg.Service/Method")
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
//! shadow = true                     # decided, counted and logged; never refuses, adds no header
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
//! A limit's quotas are checked all or nothing ([`AllOf`]): a request denied by one
//! consumes nothing from the others. Algorithms: `gcra` (a token bucket: `limit` per
//! `window`, at most `burst` at once; the `RateLimit-Policy` item is the burst per its
//! refill time), `sliding_window` (the sliding-window counter), `sliding_log`
//! (exact; memory grows with the limit), `fixed_window`. A limit may instead be
//! `throttle = { rate = 2, per = "1s", capacity = 10, max_wait = "5s" }`: requests
//! wait their turn. `max_keys` (default 100 000) bounds each store's keys.
//! `shadow = true`, on a limit or on a whole `[[policy]]`, puts it in shadow mode
//! (see [`Limit::shadow`]; a throttle cannot be).
//! Durations are `500ms`, `30s`, `5m`, `1h`, `1d`, or a number of seconds.
//!
//! Every mistake is a [`ConfigError`] naming the field and its line:
//! `line 17, column 47, `window`: `5 minutes` is not a duration; ...`.

use crate::ip::{ClientIp, ClientIpError, ForwardedHeader};
use crate::key::{Key, KeySource, LongKeys, MissingKey};
use crate::limits::{Limits, LimitsBuilder};
use crate::policy::{Limit, Policy, PolicyError};
use crate::request::is_header_name;
use crate::store::Store;
use crate::throttle::{KeyedThrottle, KeyedThrottleError};
use crate::tier::{OnLookupError, Tiers, TiersBuilder, TiersError};
use core::fmt;
use core::future::Future;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;
use weir_rl_core::{AllOf, KeyedLimiter, Quota};

/// A mistake in a configuration file: what, which field, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, when the configuration was read from one
    /// ([`Config::from_file`]).
    pub file: Option<std::path::PathBuf>,
    /// The 1-based line, when known.
    pub line: Option<usize>,
    /// The 1-based column, when known.
    pub column: Option<usize>,
    /// The field (`window`, `policy[1].limit[0].key`), when known.
    pub field: Option<String>,
    /// What is wrong, and how to fix it.
    pub message: String,
}

impl ConfigError {
    /// An error of no place: `message` alone.
    pub fn new(message: impl Into<String>) -> Self {
        Self { file: None, line: None, column: None, field: None, message: message.into() }
    }

    /// The same error, in `file`.
    pub fn in_file(self, file: impl Into<std::path::PathBuf>) -> Self {
        Self { file: Some(file.into()), ..self }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, "line {line}, column {column}: ")?,
            (Some(line), None) => write!(f, "line {line}: ")?,
            _ => {}
        }
        if let Some(field) = &self.field {
            write!(f, "`{field}`: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The algorithm of a quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Algorithm {
    /// A token bucket (`weir_gcra`).
    Gcra,
    /// The sliding-window counter (`weir_window::SlidingWindow`).
    SlidingWindow,
    /// The exact sliding log (`weir_window::SlidingLog`).
    SlidingLog,
    /// The fixed window (`weir_window::FixedWindow`).
    FixedWindow,
}

/// One quota of a configuration, as a store factory receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuotaConfig {
    /// The quota's name in the headers.
    pub name: String,
    /// Its algorithm.
    pub algorithm: Algorithm,
    /// `limit` per `window`, with the burst (GCRA; the limit otherwise).
    pub quota: Quota,
    /// The most keys its store keeps.
    pub max_keys: usize,
    /// The name of its store (the `store` label of weir-keyed's metrics):
    /// `<policy>.<limit>.<quota>` (the limit's `name`, or its place from 1), or
    /// `tiers.<tier>.<quota>`.
    pub store: String,
}

/// Builds the in-memory store of one quota.
pub type StoreFactory = dyn Fn(&QuotaConfig) -> Result<Box<dyn KeyedLimiter<Key> + Send + Sync>, String> + Send + Sync;

/// A parsed, validated configuration: build [`Limits`] from it with
/// [`limits`](Self::limits) (after giving the tier lookup, if it has tiers), or
/// an adapter's layer or middleware (weir-tower's `Config::layer`).
pub struct Config {
    text: Arc<str>,
    file: File,
    lookup: Option<TiersBuilder>,
    /// The tier cache's clock ([`Config::clock`]; the monotonic clock if none).
    tier_clock: Option<Arc<dyn weir_rl_core::Clock + Send + Sync>>,
    factory: Arc<StoreFactory>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config").field("file", &self.file).finish_non_exhaustive()
    }
}

// ---- the file's shape ----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    skip: Vec<Spanned<String>>,
    #[serde(default)]
    skip_methods: Vec<Spanned<String>>,
    legacy_headers: Option<bool>,
    problem_type: Option<String>,
    #[serde(default)]
    client: ClientSpec,
    #[serde(default, rename = "policy")]
    policies: Vec<PolicySpec>,
    tier_cache: Option<TierCacheSpec>,
    #[serde(default)]
    tiers: BTreeMap<String, TierSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientSpec {
    #[serde(default)]
    trusted_proxies: Vec<Spanned<String>>,
    forwarded_header: Option<Spanned<String>>,
    ipv4_prefix: Option<Spanned<u8>>,
    ipv6_prefix: Option<Spanned<u8>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicySpec {
    name: Spanned<String>,
    #[serde(default)]
    routes: Vec<Spanned<String>>,
    #[serde(default)]
    default: bool,
    cost: Option<Spanned<u64>>,
    shadow: Option<Spanned<bool>>,
    #[serde(default, rename = "limit")]
    limits: Vec<LimitSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum KeyList {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitSpec {
    name: Option<Spanned<String>>,
    key: Spanned<KeyList>,
    on_missing_key: Option<Spanned<String>>,
    long_keys: Option<Spanned<String>>,
    #[serde(default)]
    quotas: Vec<QuotaSpec>,
    tiered: Option<Spanned<bool>>,
    throttle: Option<Spanned<ThrottleSpec>>,
    max_keys: Option<Spanned<u64>>,
    shadow: Option<Spanned<bool>>,
}

/// `shadow = true`: whether it is set.
fn is_on(flag: Option<&Spanned<bool>>) -> bool {
    flag.is_some_and(|f| *f.get_ref())
}

impl LimitSpec {
    fn is_tiered(&self) -> bool {
        self.tiered.as_ref().is_some_and(|t| *t.get_ref())
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum DurationSpec {
    Seconds(u64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaSpec {
    name: Option<String>,
    algorithm: Spanned<Algorithm>,
    limit: Spanned<u64>,
    window: Spanned<DurationSpec>,
    burst: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThrottleSpec {
    rate: Spanned<u64>,
    per: Spanned<DurationSpec>,
    capacity: Spanned<u64>,
    max_wait: Spanned<DurationSpec>,
    max_keys: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TierCacheSpec {
    ttl: Option<Spanned<DurationSpec>>,
    failure_ttl: Option<Spanned<DurationSpec>>,
    max_entries: Option<Spanned<u64>>,
    on_lookup_error: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TierSpec {
    quotas: Spanned<Vec<QuotaSpec>>,
    max_keys: Option<Spanned<u64>>,
}

// ---- errors with places ----

/// Line and column (1-based) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The key whose value starts at `offset`: the `name =` just before it.
fn key_before(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset.min(text.len()))?;
    let before = before.trim_end().strip_suffix('=')?.trim_end();
    let start = before.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))?;
    let key = &before[start + 1..];
    (!key.is_empty()).then(|| key.to_owned())
}

struct Ctx<'a> {
    text: &'a str,
}

impl Ctx<'_> {
    fn at<T>(&self, spanned: &Spanned<T>, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let (line, column) = line_col(self.text, spanned.span().start);
        ConfigError {
            file: None,
            line: Some(line),
            column: Some(column),
            field: Some(field.into()),
            message: message.into(),
        }
    }

    fn duration(&self, spanned: &Spanned<DurationSpec>, field: &str) -> Result<Duration, ConfigError> {
        let parsed = match spanned.get_ref() {
            DurationSpec::Seconds(s) => Some(Duration::from_secs(*s)),
            DurationSpec::Text(t) => parse_duration(t),
        };
        match parsed {
            Some(d) if !d.is_zero() => Ok(d),
            Some(_) => Err(self.at(spanned, field, "a duration of zero; use at least `1ms`")),
            None => {
                let shown = match spanned.get_ref() {
                    DurationSpec::Text(t) => t.as_str(),
                    DurationSpec::Seconds(_) => "",
                };
                Err(self.at(
                    spanned,
                    field,
                    format!("`{shown}` is not a duration; write a number and a unit: `500ms`, `30s`, `5m`, `1h`, `1d`"),
                ))
            }
        }
    }

    fn positive(&self, spanned: &Spanned<u64>, field: &str) -> Result<u64, ConfigError> {
        match *spanned.get_ref() {
            0 => Err(self.at(spanned, field, "must be at least 1")),
            n => Ok(n),
        }
    }
}

/// `500ms`, `30s`, `5m`, `1h`, `1d` (a number and a unit, spaces allowed between).
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let n: u64 = text[..digits].parse().ok()?;
    let secs = |k: u64| n.checked_mul(k).map(Duration::from_secs);
    match text[digits..].trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" | "" => secs(1),
        "m" | "min" => secs(60),
        "h" => secs(3_600),
        "d" => secs(86_400),
        _ => None,
    }
}

impl Config {
    /// Parses and validates a configuration. Tiers' lookup, hooks and the store
    /// factory come after ([`tier_lookup`](Self::tier_lookup),
    /// [`store_factory`](Self::store_factory)).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| {
            let span = e.span();
            let (line, column) = span.as_ref().map_or((None, None), |s| {
                let (l, c) = line_col(text, s.start);
                (Some(l), Some(c))
            });
            let field = span.and_then(|s| key_before(text, s.start));
            ConfigError { file: None, line, column, field, message: e.message().trim().to_owned() }
        })?;
        let config =
            Self { text: Arc::from(text), file, lookup: None, tier_clock: None, factory: Arc::new(memory_store) };
        config.validate()?;
        Ok(config)
    }

    /// Reads and validates the configuration in `path`; an error names the file,
    /// with the line and field.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(format!("cannot read the file: {e}")).in_file(path))?;
        Self::from_toml(&text).map_err(|e| e.in_file(path))
    }

    /// Builds stores with `wrap(factory)` in place of the factory given so far.
    pub(crate) fn wrap_factory(mut self, wrap: impl FnOnce(Arc<StoreFactory>) -> Arc<StoreFactory>) -> Self {
        self.factory = wrap(self.factory);
        self
    }

    /// The async lookup of a client's tier (see [`Tiers::builder`]); needed when a
    /// limit is `tiered`.
    pub fn tier_lookup<F, Fut, T, E>(mut self, lookup: F) -> Self
    where
        F: Fn(Key) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: AsRef<str>,
        E: fmt::Display,
    {
        self.lookup = Some(Tiers::builder(lookup));
        self
    }

    /// Builds stores with `factory` instead of the default in-memory `weir_keyed`
    /// stores (for another clock in tests, or stores of your own).
    pub fn store_factory(
        mut self,
        factory: impl Fn(&QuotaConfig) -> Result<Box<dyn KeyedLimiter<Key> + Send + Sync>, String> + Send + Sync + 'static,
    ) -> Self {
        self.factory = Arc::new(factory);
        self
    }

    /// Reads `clock` instead of the monotonic clock: the stores' and the tier cache's
    /// (a [`ManualClock`](weir_rl_core::ManualClock) in tests). It replaces any store
    /// factory given before.
    pub fn clock<C: weir_rl_core::Clock + Clone + Send + Sync + 'static>(mut self, clock: C) -> Self {
        self.tier_clock = Some(Arc::new(clock.clone()));
        self.factory = Arc::new(move |config: &QuotaConfig| crate::memory::store(config, clock.clone()));
        self
    }

    /// A [`Limits`] builder with every policy, skip rule and header setting of the
    /// file.
    pub fn builder(mut self) -> Result<LimitsBuilder, ConfigError> {
        let lookup = self.lookup.take();
        let ctx = Ctx { text: &self.text };
        let file = &self.file;
        let mut builder = Limits::builder();
        for path in &file.skip {
            builder = builder.skip_path(path.get_ref());
        }
        for (i, method) in file.skip_methods.iter().enumerate() {
            builder = builder.skip_methods([skip_method(&ctx, method, i)?]);
        }
        if let Some(legacy) = file.legacy_headers {
            builder = builder.legacy_headers(legacy);
        }
        if let Some(uri) = &file.problem_type {
            builder = builder.problem_type(uri);
        }
        let client = self.client(&ctx)?;
        let mut tiers = self.tiers(&ctx, lookup)?.map(Arc::new);
        for (p, spec) in file.policies.iter().enumerate() {
            let mut policy = Policy::builder(spec.name.get_ref());
            if let Some(cost) = &spec.cost {
                policy = policy.cost(ctx.positive(cost, &format!("policy[{p}].cost"))?);
            }
            policy = policy.shadow(is_on(spec.shadow.as_ref()));
            for (l, limit) in spec.limits.iter().enumerate() {
                let field = format!("policy[{p}].limit[{l}]");
                let name = limit.name.as_ref().map_or_else(|| (l + 1).to_string(), |n| n.get_ref().clone());
                let store = format!("{}.{name}", spec.name.get_ref());
                let built = self.limit(&ctx, limit, (&field, &store), &client, &mut tiers)?;
                policy = policy.limit(built.named(name).shadow(is_on(limit.shadow.as_ref())));
            }
            // The builder names the option it refused; the file's field and line come
            // from the value that set it.
            let policy = policy.build().map_err(|e| match (&e, &spec.cost) {
                (PolicyError::ZeroCost { .. } | PolicyError::CostAboveQuota { .. }, Some(cost)) => {
                    ctx.at(cost, format!("policy[{p}].cost"), e.to_string())
                }
                _ => ctx.at(&spec.name, format!("policy[{p}].{}", e.option()), e.to_string()),
            })?;
            if spec.default {
                builder = builder.policy(policy.clone());
            }
            for route in &spec.routes {
                builder = builder.route(route.get_ref(), policy.clone());
            }
        }
        Ok(builder)
    }

    /// The limits.
    pub fn limits(self) -> Result<Limits, ConfigError> {
        self.builder()?.build().map_err(|e| ConfigError {
            file: None,
            line: None,
            column: None,
            field: None,
            message: e.to_string(),
        })
    }

    /// Everything that can be checked without building stores.
    fn validate(&self) -> Result<(), ConfigError> {
        let ctx = Ctx { text: &self.text };
        let file = &self.file;
        for (i, path) in file.skip.iter().enumerate() {
            if !path.get_ref().starts_with('/') {
                return Err(ctx.at(path, format!("skip[{i}]"), "a path starts with `/`"));
            }
        }
        for (i, method) in file.skip_methods.iter().enumerate() {
            skip_method(&ctx, method, i)?;
        }
        self.client(&ctx)?;
        if file.policies.is_empty() {
            return Err(ConfigError {
                file: None,
                line: None,
                column: None,
                field: Some("policy".into()),
                message: "no [[policy]]: nothing would be limited".into(),
            });
        }
        let mut defaults = 0;
        // Every route prefix and the policy that claimed it first.
        let mut claimed: Vec<(&str, &str)> = Vec::new();
        for (p, spec) in file.policies.iter().enumerate() {
            if spec.routes.is_empty() && !spec.default {
                return Err(ctx.at(
                    &spec.name,
                    format!("policy[{p}]"),
                    "a policy needs `routes` (path prefixes) or `default = true`",
                ));
            }
            defaults += usize::from(spec.default);
            if defaults > 1 {
                return Err(ctx.at(&spec.name, format!("policy[{p}].default"), "only one policy can be the default"));
            }
            for (r, route) in spec.routes.iter().enumerate() {
                if !route.get_ref().starts_with('/') {
                    return Err(ctx.at(route, format!("policy[{p}].routes[{r}]"), "a route starts with `/`"));
                }
                let name = spec.name.get_ref().as_str();
                if let Some((_, first)) = claimed.iter().find(|(prefix, _)| *prefix == route.get_ref().as_str()) {
                    return Err(ctx.at(
                        route,
                        format!("policy[{p}].routes[{r}]"),
                        format!(
                            "the route `{}` of policy `{name}` is already policy `{first}`'s: the longest prefix \
                             wins, so one of them would never apply; give each route to one policy",
                            route.get_ref()
                        ),
                    ));
                }
                claimed.push((route.get_ref(), name));
            }
            if spec.limits.is_empty() {
                return Err(ctx.at(
                    &spec.name,
                    format!("policy[{p}].limit"),
                    "a policy needs at least one [[policy.limit]]",
                ));
            }
            if spec.limits.len() > crate::MAX_LIMITS {
                return Err(ctx.at(
                    &spec.name,
                    format!("policy[{p}].limit"),
                    format!("at most {} limits per policy", crate::MAX_LIMITS),
                ));
            }
            for (l, limit) in spec.limits.iter().enumerate() {
                let field = format!("policy[{p}].limit[{l}]");
                key_source(&ctx, &limit.key, &format!("{field}.key"), &ClientIp::default())?;
                missing_key(&ctx, limit.on_missing_key.as_ref(), &format!("{field}.on_missing_key"))?;
                long_keys(&ctx, limit.long_keys.as_ref(), &limit.key, &format!("{field}.long_keys"))?;
                let kinds = usize::from(!limit.quotas.is_empty())
                    + usize::from(limit.is_tiered())
                    + usize::from(limit.throttle.is_some());
                if kinds != 1 {
                    return Err(ctx.at(
                        &limit.key,
                        field,
                        "a limit has exactly one of `quotas`, `tiered = true` or `throttle`",
                    ));
                }
                if let Some(tiered) = limit.tiered.as_ref().filter(|_| limit.is_tiered() && file.tiers.is_empty()) {
                    return Err(ctx.at(tiered, format!("{field}.tiered"), "no [tiers.<name>] are defined"));
                }
                for (q, quota) in limit.quotas.iter().enumerate() {
                    quota_config(&ctx, quota, &format!("{field}.quotas[{q}]"), 1)?;
                }
                if let Some(throttle) = &limit.throttle {
                    throttle_of(&ctx, throttle, &format!("{field}.throttle"))?;
                    // A throttle delays requests, which a client would see.
                    let shadow = match (&limit.shadow, &spec.shadow) {
                        (Some(on), _) if *on.get_ref() => Some((on, format!("{field}.shadow"))),
                        (_, Some(on)) if *on.get_ref() => Some((on, format!("policy[{p}].shadow"))),
                        _ => None,
                    };
                    if let Some((on, at)) = shadow {
                        return Err(ctx.at(
                            on,
                            at,
                            format!(
                                "`{field}` of policy `{}` is a throttle, which delays requests (a client would see \
                                 it) and so cannot be in shadow mode; keep it out of shadow mode, or give it \
                                 `quotas` instead",
                                spec.name.get_ref()
                            ),
                        ));
                    }
                }
            }
        }
        for (name, tier) in &file.tiers {
            if tier.quotas.get_ref().is_empty() {
                return Err(ctx.at(&tier.quotas, format!("tiers.{name}.quotas"), "a tier needs at least one quota"));
            }
            for (q, quota) in tier.quotas.get_ref().iter().enumerate() {
                quota_config(&ctx, quota, &format!("tiers.{name}.quotas[{q}]"), 1)?;
            }
        }
        if let Some(cache) = &file.tier_cache {
            for (d, field) in [(&cache.ttl, "tier_cache.ttl"), (&cache.failure_ttl, "tier_cache.failure_ttl")] {
                if let Some(d) = d {
                    ctx.duration(d, field)?;
                }
            }
            if let Some(n) = &cache.max_entries {
                ctx.positive(n, "tier_cache.max_entries")?;
            }
            if let Some(on_error) = &cache.on_lookup_error {
                let name = on_error.get_ref();
                if name != "deny" && !file.tiers.contains_key(name) {
                    return Err(ctx.at(
                        on_error,
                        "tier_cache.on_lookup_error",
                        format!("`{name}` is neither `deny` nor one of the tiers"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn client(&self, ctx: &Ctx<'_>) -> Result<ClientIp, ConfigError> {
        let spec = &self.file.client;
        let mut client = ClientIp::builder();
        let mut nets = Vec::new();
        for (i, proxy) in spec.trusted_proxies.iter().enumerate() {
            let net = proxy
                .get_ref()
                .parse::<crate::Cidr>()
                .map_err(|e| ctx.at(proxy, format!("client.trusted_proxies[{i}]"), e.to_string()))?;
            nets.push(net);
        }
        client = client.trust_networks(nets);
        if let Some(header) = &spec.forwarded_header {
            let header = match header.get_ref().to_ascii_lowercase().as_str() {
                "x-forwarded-for" => ForwardedHeader::XForwardedFor,
                "forwarded" => ForwardedHeader::Forwarded,
                other => {
                    return Err(ctx.at(
                        header,
                        "client.forwarded_header",
                        format!("`{other}` is neither `x-forwarded-for` nor `forwarded`"),
                    ));
                }
            };
            client = client.forwarded_header(header);
        }
        if let Some(p) = &spec.ipv4_prefix {
            client = client.ipv4_prefix(*p.get_ref());
        }
        if let Some(p) = &spec.ipv6_prefix {
            client = client.ipv6_prefix(*p.get_ref());
        }
        // The builder names the option it refused; the file's field and line come
        // from the value that set it.
        client.build().map_err(|e| {
            let (spanned, field) = match e {
                ClientIpError::Prefix { version: 4, .. } => (spec.ipv4_prefix.as_ref(), "client.ipv4_prefix"),
                ClientIpError::Prefix { .. } => (spec.ipv6_prefix.as_ref(), "client.ipv6_prefix"),
                _ => (None, "client"),
            };
            match spanned {
                Some(spanned) => ctx.at(spanned, field, e.to_string()),
                None => ConfigError {
                    file: None,
                    line: None,
                    column: None,
                    field: Some(field.into()),
                    message: e.to_string(),
                },
            }
        })
    }

    /// The tiers, if the file has any, with the lookup given.
    fn tiers(&self, ctx: &Ctx<'_>, lookup: Option<TiersBuilder>) -> Result<Option<Tiers>, ConfigError> {
        let file = &self.file;
        if file.tiers.is_empty() {
            return Ok(None);
        }
        let needed = file.policies.iter().flat_map(|p| &p.limits).any(LimitSpec::is_tiered);
        let Some(mut tiers) = lookup else {
            if needed {
                return Err(ConfigError {
                    file: None,
                    line: None,
                    column: None,
                    field: Some("tiers".into()),
                    message: "a limit is tiered but no tier lookup was given (Config::tier_lookup)".into(),
                });
            }
            return Ok(None);
        };
        if let Some(cache) = &file.tier_cache {
            if let Some(ttl) = &cache.ttl {
                tiers = tiers.ttl(ctx.duration(ttl, "tier_cache.ttl")?);
            }
            if let Some(ttl) = &cache.failure_ttl {
                tiers = tiers.failure_ttl(ctx.duration(ttl, "tier_cache.failure_ttl")?);
            }
            if let Some(n) = &cache.max_entries {
                let n = ctx.positive(n, "tier_cache.max_entries")?;
                tiers = tiers.max_entries(usize::try_from(n).unwrap_or(usize::MAX));
            }
            if let Some(on_error) = &cache.on_lookup_error {
                tiers = tiers.on_lookup_error(match on_error.get_ref().as_str() {
                    "deny" => OnLookupError::Deny,
                    name => OnLookupError::Tier(name.to_owned()),
                });
            }
        }
        for (name, tier) in &file.tiers {
            let max_keys = max_keys(ctx, tier.max_keys.as_ref(), &format!("tiers.{name}.max_keys"))?;
            let field = format!("tiers.{name}.quotas");
            let store = self.all_of(ctx, tier.quotas.get_ref(), (&field, &format!("tiers.{name}")), max_keys)?;
            tiers = tiers.tier(name, store);
        }
        let clock = self.tier_clock.clone().unwrap_or_else(|| Arc::new(weir_rl_core::MonotonicClock::new()));
        // `validate` has checked each option the builder checks; a refusal here names
        // the option all the same.
        let tiers = tiers.build_with_shared_clock(clock).map_err(|e| {
            let field = match e {
                TiersError::NoTiers => "tiers".to_owned(),
                _ => format!("tier_cache.{}", e.option()),
            };
            ConfigError { file: None, line: None, column: None, field: Some(field), message: e.to_string() }
        })?;
        Ok(Some(tiers))
    }

    /// The store enforcing `quotas` all or nothing.
    /// `at`: the field of `quotas`, and the start of their stores' names.
    fn all_of(
        &self,
        ctx: &Ctx<'_>,
        quotas: &[QuotaSpec],
        at: (&str, &str),
        max_keys: usize,
    ) -> Result<Store, ConfigError> {
        let (field, store) = at;
        let mut names = Vec::new();
        let mut members: Vec<Box<dyn KeyedLimiter<Key> + Send + Sync>> = Vec::new();
        for (q, spec) in quotas.iter().enumerate() {
            let field = format!("{field}[{q}]");
            let mut config = quota_config(ctx, spec, &field, max_keys)?;
            config.store = format!("{store}.{}", config.name);
            members.push((self.factory)(&config).map_err(|e| ctx.at(&spec.algorithm, field, e))?);
            names.push(config.name);
        }
        let store = if members.len() == 1 {
            Store::local(members.pop().ok_or_else(|| ctx_error(field))?)
        } else {
            Store::local(AllOf::new(members).map_err(|e| ConfigError {
                file: None,
                line: None,
                column: None,
                field: Some(field.into()),
                message: e.to_string(),
            })?)
        };
        Ok(store.named(names))
    }

    fn limit(
        &self,
        ctx: &Ctx<'_>,
        spec: &LimitSpec,
        at: (&str, &str),
        client: &ClientIp,
        tiers: &mut Option<Arc<Tiers>>,
    ) -> Result<Limit, ConfigError> {
        let (field, store) = at;
        let key = key_source(ctx, &spec.key, &format!("{field}.key"), client)?.long_keys(long_keys(
            ctx,
            spec.long_keys.as_ref(),
            &spec.key,
            &format!("{field}.long_keys"),
        )?);
        let missing = missing_key(ctx, spec.on_missing_key.as_ref(), &format!("{field}.on_missing_key"))?;
        let limit = if spec.is_tiered() {
            let tiers = tiers.as_ref().ok_or_else(|| ctx.at(&spec.key, format!("{field}.tiered"), "no tiers"))?;
            Limit::tiered_shared(key, Arc::clone(tiers))
        } else if let Some(throttle) = &spec.throttle {
            Limit::throttle(key, throttle_of(ctx, throttle, &format!("{field}.throttle"))?)
        } else {
            let max_keys = max_keys(ctx, spec.max_keys.as_ref(), &format!("{field}.max_keys"))?;
            Limit::new(key, self.all_of(ctx, &spec.quotas, (&format!("{field}.quotas"), store), max_keys)?)
        };
        Ok(limit.on_missing_key(missing))
    }
}

fn ctx_error(field: &str) -> ConfigError {
    ConfigError { file: None, line: None, column: None, field: Some(field.into()), message: "no quotas".into() }
}

fn max_keys(ctx: &Ctx<'_>, spec: Option<&Spanned<u64>>, field: &str) -> Result<usize, ConfigError> {
    match spec {
        Some(n) => Ok(usize::try_from(ctx.positive(n, field)?).unwrap_or(usize::MAX)),
        None => Ok(100_000),
    }
}

/// The methods of RFC 9110 (and `PATCH`, RFC 5789), as they are spelled.
const STANDARD_METHODS: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];

/// `skip_methods[i]`: an HTTP method, as written (`OPTIONS`). Methods are
/// case-sensitive (RFC 9110), so `options` would be an extension method no client
/// sends, exempting nothing: a standard method's name in another case is refused.
fn skip_method<'a>(ctx: &Ctx<'_>, spec: &'a Spanned<String>, i: usize) -> Result<&'a str, ConfigError> {
    let name = spec.get_ref();
    let field = format!("skip_methods[{i}]");
    if let Some(standard) = STANDARD_METHODS.iter().find(|m| m.eq_ignore_ascii_case(name) && **m != name.as_str()) {
        return Err(ctx.at(
            spec,
            field,
            format!("`{name}` is not `{standard}`: HTTP methods are case-sensitive; did you mean `{standard}`?"),
        ));
    }
    // A method is a token (RFC 9110 §9.1).
    match is_header_name(name) {
        true => Ok(name),
        false => Err(ctx.at(spec, field, format!("`{name}` is not an HTTP method"))),
    }
}

fn key_source(
    ctx: &Ctx<'_>,
    spec: &Spanned<KeyList>,
    field: &str,
    client: &ClientIp,
) -> Result<KeySource, ConfigError> {
    let one = |name: &str| -> Result<KeySource, ConfigError> {
        Ok(match name {
            "ip" => KeySource::ip(client.clone()),
            "user" => KeySource::user(),
            "global" => KeySource::global(),
            other => match other.strip_prefix("header:") {
                Some(header) if is_header_name(header.trim()) => KeySource::header(header.trim()),
                _ => {
                    return Err(ctx.at(
                        spec,
                        field,
                        format!("`{other}` is not a key; use `ip`, `user`, `global` or `header:<name>`"),
                    ));
                }
            },
        })
    };
    match spec.get_ref() {
        KeyList::One(name) => one(name),
        KeyList::Many(names) if names.is_empty() => Err(ctx.at(spec, field, "an empty list of keys")),
        KeyList::Many(names) => Ok(KeySource::first_of(names.iter().map(|n| one(n)).collect::<Result<Vec<_>, _>>()?)),
    }
}

/// `long_keys`: `hash` or `refuse`; `refuse` only on a key read from a header (or a
/// list with one), the only source it applies to: an `ip` key is bounded anyway,
/// and a `user` id longer than 128 bytes is always kept as its hash.
fn long_keys(
    ctx: &Ctx<'_>,
    spec: Option<&Spanned<String>>,
    key: &Spanned<KeyList>,
    field: &str,
) -> Result<LongKeys, ConfigError> {
    let Some(spec) = spec else { return Ok(LongKeys::Hash) };
    match spec.get_ref().as_str() {
        "hash" => Ok(LongKeys::Hash),
        "refuse" => {
            let is_header = |name: &String| name.starts_with("header:");
            let has_header = match key.get_ref() {
                KeyList::One(name) => is_header(name),
                KeyList::Many(names) => names.iter().any(is_header),
            };
            if has_header {
                Ok(LongKeys::Refuse)
            } else {
                Err(ctx.at(
                    spec,
                    field,
                    "`refuse` applies to a key read from a header (`header:<name>`) only; this limit's key has none \
                     (an `ip` key is bounded anyway; a `user` id over 128 bytes is kept as its hash)",
                ))
            }
        }
        other => Err(ctx.at(spec, field, format!("`{other}` is not `hash` or `refuse`"))),
    }
}

fn missing_key(ctx: &Ctx<'_>, spec: Option<&Spanned<String>>, field: &str) -> Result<MissingKey, ConfigError> {
    let Some(spec) = spec else { return Ok(MissingKey::Deny) };
    match spec.get_ref().as_str() {
        "deny" => Ok(MissingKey::Deny),
        "skip" => Ok(MissingKey::Skip),
        other => match other.strip_prefix("shared:") {
            Some(name) if !name.is_empty() => Ok(MissingKey::Shared(Key::custom(name.as_bytes()))),
            _ => Err(ctx.at(spec, field, format!("`{other}` is not `deny`, `skip` or `shared:<name>`"))),
        },
    }
}

fn quota_config(ctx: &Ctx<'_>, spec: &QuotaSpec, field: &str, max_keys: usize) -> Result<QuotaConfig, ConfigError> {
    let limit = ctx.positive(&spec.limit, &format!("{field}.limit"))?;
    let window = ctx.duration(&spec.window, &format!("{field}.window"))?;
    let algorithm = *spec.algorithm.get_ref();
    let mut quota =
        Quota::new(limit, window).map_err(|e| ctx.at(&spec.limit, format!("{field}.limit"), e.to_string()))?;
    if let Some(burst) = &spec.burst {
        if algorithm != Algorithm::Gcra {
            return Err(ctx.at(burst, format!("{field}.burst"), "only a `gcra` quota has a burst"));
        }
        let b = ctx.positive(burst, &format!("{field}.burst"))?;
        quota = quota.with_burst(b).map_err(|e| ctx.at(burst, format!("{field}.burst"), e.to_string()))?;
    }
    let name = match &spec.name {
        Some(name) => name.clone(),
        None if algorithm == Algorithm::Gcra && quota.burst() != quota.count() => "burst".into(),
        None => crate::store::window_name(window),
    };
    Ok(QuotaConfig { store: name.clone(), name, algorithm, quota, max_keys })
}

fn throttle_of(ctx: &Ctx<'_>, spec: &Spanned<ThrottleSpec>, field: &str) -> Result<KeyedThrottle, ConfigError> {
    let t = spec.get_ref();
    let rate = ctx.positive(&t.rate, &format!("{field}.rate"))?;
    let per = ctx.duration(&t.per, &format!("{field}.per"))?;
    let capacity = ctx.positive(&t.capacity, &format!("{field}.capacity"))?;
    let max_wait = ctx.duration(&t.max_wait, &format!("{field}.max_wait"))?;
    let quota = Quota::new(rate, per).map_err(|e| ctx.at(&t.rate, format!("{field}.rate"), e.to_string()))?;
    let capacity = usize::try_from(capacity).unwrap_or(usize::MAX);
    let mut builder = KeyedThrottle::builder(quota, capacity).max_wait(max_wait);
    if let Some(n) = &t.max_keys {
        builder =
            builder.max_keys(usize::try_from(ctx.positive(n, &format!("{field}.max_keys"))?).unwrap_or(usize::MAX));
    }
    // The builder names the option it refused; the file's field and line come from
    // the value that set it.
    builder.build().map_err(|e| match e {
        KeyedThrottleError::Capacity(_) => ctx.at(&t.capacity, format!("{field}.capacity"), e.to_string()),
        KeyedThrottleError::ZeroMaxKeys => match &t.max_keys {
            Some(n) => ctx.at(n, format!("{field}.max_keys"), e.to_string()),
            None => ctx.at(spec, format!("{field}.max_keys"), e.to_string()),
        },
        _ => ctx.at(&t.rate, format!("{field}.rate"), e.to_string()),
    })
}

/// The default store factory: a `weir_keyed::Keyed` store of the quota's algorithm,
/// on the monotonic clock.
pub fn memory_store(config: &QuotaConfig) -> Result<Box<dyn KeyedLimiter<Key> + Send + Sync>, String> {
    crate::memory::store(config, weir_rl_core::MonotonicClock::new())
}

/// [`memory_store`] on another clock.
pub fn memory_store_with_clock<C: weir_rl_core::Clock + Send + Sync + 'static>(
    config: &QuotaConfig,
    clock: C,
) -> Result<Box<dyn KeyedLimiter<Key> + Send + Sync>, String> {
    crate::memory::store(config, clock)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> ConfigError {
        Config::from_toml(text).expect_err("an error")
    }

    const OK: &str = r#"
skip = ["/health"]
[[policy]]
name = "api"
default = true
[[policy.limit]]
key = "ip"
quotas = [{ algorithm = "gcra", limit = 100, window = "1m" }]
"#;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("5 m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("5 minutes"), None);
        assert_eq!(parse_duration("m"), None);
    }

    #[test]
    fn a_valid_file_parses() {
        Config::from_toml(OK).unwrap();
    }

    /// The legacy `X-RateLimit-*` fields are off unless the file turns them on.
    #[test]
    fn the_legacy_headers_are_opt_in() {
        for (line, on) in [("", false), ("legacy_headers = false\n", false), ("legacy_headers = true\n", true)] {
            let limits = Config::from_toml(&format!("{line}{OK}")).unwrap().limits().unwrap();
            assert_eq!(limits.legacy_headers(), on, "{line:?}");
        }
        assert!(!Limits::builder().build().unwrap().legacy_headers());
    }

    /// `options` would be an extension method no client sends: accepted, it exempted
    /// nothing (CORS preflights stayed limited). A standard method in another case
    /// is refused; an extension method is taken as written.
    #[test]
    fn a_standard_method_in_another_case_is_refused() {
        for (name, standard) in [("options", "OPTIONS"), ("Options", "OPTIONS"), ("get", "GET"), ("patch", "PATCH")] {
            let e = error(&format!("skip_methods = [\"OPTIONS\", \"{name}\"]\n{OK}"));
            assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("skip_methods[1]")), "{e}");
            assert!(e.message.contains(&format!("did you mean `{standard}`?")), "{e}");
        }
        let limits = Config::from_toml(&format!("skip_methods = [\"OPTIONS\", \"PROPFIND\", \"x-purge\"]\n{OK}"))
            .unwrap()
            .limits()
            .unwrap();
        assert!(format!("{limits:?}").contains("PROPFIND"));
    }

    /// `long_keys = "refuse"` on a key that reads no header was accepted and did
    /// nothing (a 200-byte user id was hashed and admitted): refused, naming it.
    #[test]
    fn long_keys_refuse_on_a_key_without_a_header_is_refused() {
        for key in ["\"user\"", "\"ip\"", "\"global\"", "[\"user\", \"ip\"]"] {
            let text = OK.replace("key = \"ip\"", &format!("key = {key}\nlong_keys = \"refuse\""));
            let e = error(&text);
            assert_eq!((e.line, e.field.as_deref()), (Some(8), Some("policy[0].limit[0].long_keys")), "{key}: {e}");
            assert!(e.message.contains("`header:<name>`"), "{e}");
        }
        for key in ["\"header:x-api-key\"", "[\"header:x-api-key\", \"ip\"]"] {
            let text = OK.replace("key = \"ip\"", &format!("key = {key}\nlong_keys = \"refuse\""));
            Config::from_toml(&text).unwrap().limits().unwrap();
        }
    }

    #[test]
    fn errors_name_the_field_and_line() {
        let e = error(&OK.replace("\"1m\"", "\"5 minutes\""));
        assert_eq!((e.line, e.field.as_deref()), (Some(8), Some("policy[0].limit[0].quotas[0].window")), "{e}");
        assert!(
            e.to_string().starts_with("line 8, column 55: `policy[0].limit[0].quotas[0].window`: `5 minutes`"),
            "{e}"
        );

        let e = error(&OK.replace("limit = 100", "limit = 0"));
        assert_eq!((e.line, e.field.as_deref()), (Some(8), Some("policy[0].limit[0].quotas[0].limit")), "{e}");

        let e = error(&OK.replace("\"gcra\"", "\"leaky\""));
        assert_eq!((e.line, e.field.as_deref()), (Some(8), Some("algorithm")), "{e}");
        assert!(e.message.contains("unknown variant `leaky`"), "{e}");

        let e = error(&OK.replace("limit = 100", "limit = \"x\""));
        assert_eq!((e.line, e.field.as_deref()), (Some(8), Some("limit")), "{e}");

        let e = error(&OK.replace("key = \"ip\"", "key = \"ip\"\nkye = 1"));
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.message.contains("unknown field `kye`"), "{e}");

        let e = error(&OK.replace("key = \"ip\"", "key = \"cookie\""));
        assert_eq!((e.line, e.field.as_deref()), (Some(7), Some("policy[0].limit[0].key")), "{e}");

        let e = error(&OK.replace("[\"/health\"]", "[\"health\"]"));
        assert_eq!((e.line, e.field.as_deref()), (Some(2), Some("skip[0]")), "{e}");

        let e = error(&OK.replace("window = \"1m\" }", "window = \"1m\", burst = 5 }").replace("gcra", "fixed_window"));
        assert_eq!(e.field.as_deref(), Some("policy[0].limit[0].quotas[0].burst"), "{e}");

        let e = error(&format!("{OK}\n[client]\ntrusted_proxies = [\"10.0.0.0/99\"]\n"));
        assert_eq!((e.line, e.field.as_deref()), (Some(11), Some("client.trusted_proxies[0]")), "{e}");

        let e = error(&format!("{OK}\n[client]\nipv4_prefix = 24\nipv6_prefix = 129\n"));
        assert_eq!((e.line, e.field.as_deref()), (Some(12), Some("client.ipv6_prefix")), "{e}");
        assert!(e.message.contains("longer than an IPv6 address"), "{e}");
        let e = error(&format!("{OK}\n[client]\nipv4_prefix = 33\n"));
        assert_eq!((e.line, e.field.as_deref()), (Some(11), Some("client.ipv4_prefix")), "{e}");

        let e = error(&format!("{OK}\n[tier_cache]\non_lookup_error = \"gold\"\n"));
        assert_eq!(e.field.as_deref(), Some("tier_cache.on_lookup_error"), "{e}");

        // Refused by the throttle: named by its field (it was the whole throttle's).
        let fast = "\n[[policy.limit]]\nkey = \"user\"\nthrottle = { rate = 30000000, per = \"1s\", capacity = 10, max_wait = \"5s\" }\n";
        let e = error(&format!("{OK}{fast}"));
        assert_eq!((e.line, e.field.as_deref()), (Some(12), Some("policy[0].limit[1].throttle.rate")), "{e}");
        assert!(e.message.starts_with("quota: "), "{e}");

        // Found when the layer is built: named with its field and line, where it was
        // a bare message before.
        let e = Config::from_toml(&OK.replace("default = true", "default = true\ncost = 101"))
            .unwrap()
            .limits()
            .unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(6), Some("policy[0].cost")), "{e}");
        assert!(e.message.contains("admits at most 100 at once"), "{e}");

        // A throttle in shadow mode, its own or its policy's: named at the flag.
        let throttle = "\n[[policy.limit]]\nkey = \"user\"\nthrottle = { rate = 2, per = \"1s\", capacity = 10, max_wait = \"5s\" }\n";
        let e = error(&format!("{OK}{throttle}shadow = true\n"));
        assert_eq!((e.line, e.field.as_deref()), (Some(13), Some("policy[0].limit[1].shadow")), "{e}");
        assert!(e.message.contains("cannot be in shadow mode"), "{e}");
        let e = error(&format!("{}{throttle}", OK.replace("default = true", "default = true\nshadow = true")));
        assert_eq!((e.line, e.field.as_deref()), (Some(6), Some("policy[0].shadow")), "{e}");
        Config::from_toml(&OK.replace("key = \"ip\"", "key = \"ip\"\nshadow = true")).unwrap().limits().unwrap();

        let e = error(&OK.replace("default = true", "default = false"));
        assert_eq!((e.line, e.field.as_deref()), (Some(4), Some("policy[0]")), "{e}");
    }
}
