//! [`StoreDecider`]: the [`Decide`] of the service, over weir's stores: one per rule
//! (a weir-keyed store in memory, or a weir-redis limiter), checked all or nothing:
//! in memory with weir-http's [`check_all`]; in Redis in one round trip per
//! request, every limit of the request decided and (when all admit) charged by one
//! script ([`weir_redis::Resilient::check_batch`]), so a request refused by one
//! limit writes nothing to the others and needs no refunds. (A request that counts
//! a leased `gcra` rule is checked limit by limit with [`check_all`]: a lease is
//! this instance's, not Redis's.)
//!
//! # What each outcome is answered
//!
//! | what happened | answer |
//! |---|---|
//! | every limit admitted (or is in shadow mode) | each descriptor's decision, OK |
//! | a limit refused: its counter has no room for the cost now | OVER_LIMIT; nothing charged |
//! | a cost above what a limit ever admits at once (more than its burst) | OVER_LIMIT for it; the others read, not charged |
//! | a store is full of other clients' live counters | `RESOURCE_EXHAUSTED`; nothing charged |
//! | Redis unreachable, fail policy `closed` | OVER_LIMIT for every limit with a cost (those of cost 0 read as empty), nothing charged, until Redis answers |
//! | Redis unreachable, fail policy `open` or `local` | decided by the policy (admitted; or by the local limits, all or nothing) |
//! | a store failed (Redis answered an error, no fail policy applies) | `UNAVAILABLE`, with the error; nothing charged |
//!
//! A call dropped while it is decided (a client gone) gives back what it charged
//! ([`check_all`]'s cancellation safety; a Redis batch dropped with its script in
//! flight hands it to a task that refunds what it admitted).

use crate::backend::{BackendConfig, FailPolicy, MemoryBackend, RedisBackend};
use crate::decide::{Check, Decide, DecideError};
use crate::matching::LimitSource;
use crate::reload::RuleStores;
use crate::rule::{Algorithm, RateLimit};
use crate::windows::{EpochOffset, WindowAlignment};
use crate::{Config, Rule};
use core::fmt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use weir_http::{Charge, Key, Outcome, Store, check_all};
use weir_keyed::{Keyed, KeyedConfig};
use weir_redis::{BatchItem, Resilient};
use weir_rl_core::{AsyncKeyedLimiter, Clock, Decision, DenyReason, MonotonicClock, Policy, Snapshot};

/// Makes the store of one limit: a rule's (named after it), or a domain's `limit`
/// overrides'.
pub trait MakeStore: Send + Sync + fmt::Debug {
    /// The store counting `limit`, under the unique `name` (`<domain>.<key path>`,
    /// or `<domain>.<override>`; a Redis backend's key prefix is made of it).
    fn make(&self, name: &str, limit: &RateLimit) -> Result<Store, String>;

    /// The counter of `limit`, as [`make`](Self::make) names it: by default
    /// `make`'s store alone; a maker of weir-redis limiters gives the limiter too
    /// ([`Counter::redis`]), so that a request's limits are decided in one script.
    fn make_counter(&self, name: &str, limit: &RateLimit) -> Result<Counter, String> {
        self.make(name, limit).map(Counter::from)
    }
}

/// What counts one limit: its [`Store`], and for a limit in Redis its weir-redis
/// limiter (with its fail policy), which [`StoreDecider`] decides together with the
/// request's other Redis limits in one script.
#[derive(Debug, Clone)]
pub struct Counter {
    store: Store,
    redis: Option<Arc<Resilient>>,
}

impl Counter {
    /// The counter of a weir-redis limiter: decided in a batch with the request's
    /// other Redis limits (on the same connection), and through its [`Store`]
    /// where a batch does not apply.
    pub fn redis(limiter: Resilient) -> Self {
        let limiter = Arc::new(limiter);
        Self { store: Store::remote(SharedResilient(Arc::clone(&limiter))), redis: Some(limiter) }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The weir-redis limiter, for a limit in Redis.
    pub fn redis_limiter(&self) -> Option<&Resilient> {
        self.redis.as_deref()
    }
}

impl From<Store> for Counter {
    /// A counter checked through its store alone.
    fn from(store: Store) -> Self {
        Self { store, redis: None }
    }
}

/// A [`Resilient`] shared by a [`Counter`]'s store and its batches.
#[derive(Debug)]
struct SharedResilient(Arc<Resilient>);

impl AsyncKeyedLimiter<Key> for SharedResilient {
    type Error = weir_redis::Error;

    fn check_n(&self, key: &Key, n: u64) -> impl Future<Output = Result<Decision, Self::Error>> + Send {
        AsyncKeyedLimiter::<Key>::check_n(&*self.0, key, n)
    }

    fn refund(&self, key: &Key, n: u64, admission: &Decision) -> impl Future<Output = Result<(), Self::Error>> + Send {
        AsyncKeyedLimiter::<Key>::refund(&*self.0, key, n, admission)
    }

    fn snapshot(&self, key: &Key) -> impl Future<Output = Result<Snapshot, Self::Error>> + Send {
        AsyncKeyedLimiter::<Key>::snapshot(&*self.0, key)
    }

    fn policies(&self) -> &[Policy] {
        AsyncKeyedLimiter::<Key>::policies(&*self.0)
    }
}

/// Stores in this process: a weir-keyed store per limit, of at most `max_keys`
/// counters (idle ones evicted), its windows aligned as [`WindowAlignment`] says.
#[derive(Debug, Clone)]
pub struct MemoryStores<C = MonotonicClock> {
    config: MemoryBackend,
    clock: C,
    /// `None`: windows start when each store is made.
    epoch: Option<EpochOffset>,
}

impl MemoryStores<MonotonicClock> {
    /// Stores of `config` on the monotonic clock, aligned as `alignment` says.
    pub fn new(config: MemoryBackend, alignment: WindowAlignment) -> Self {
        Self::with_clock(config, alignment, MonotonicClock::new())
    }
}

impl<C: Clock + Clone + Send + Sync + fmt::Debug + 'static> MemoryStores<C> {
    /// Stores of `config` reading `clock`; with [`WindowAlignment::Epoch`], the
    /// system clock is read now, beside `clock`, to place windows on the epoch's
    /// boundaries ([`crate::windows`]).
    pub fn with_clock(config: MemoryBackend, alignment: WindowAlignment, clock: C) -> Self {
        let epoch = match alignment {
            WindowAlignment::Epoch => Some(EpochOffset::now(&clock)),
            WindowAlignment::Start => None,
        };
        Self { config, clock, epoch }
    }

    /// Stores aligned on `epoch` (a test's chosen Unix time for a reading of `clock`).
    pub fn with_epoch(config: MemoryBackend, clock: C, epoch: EpochOffset) -> Self {
        Self { config, clock, epoch: Some(epoch) }
    }

    fn keyed_config(&self, name: &str) -> Result<KeyedConfig, String> {
        KeyedConfig::builder(self.config.max_keys).name(name).build().map_err(|e| e.to_string())
    }
}

impl<C: Clock + Clone + Send + Sync + fmt::Debug + 'static> MakeStore for MemoryStores<C> {
    fn make(&self, name: &str, limit: &RateLimit) -> Result<Store, String> {
        let quota = limit.quota().ok_or_else(|| format!("{name}: a limit of 0 has no counter"))?;
        let config = self.keyed_config(name)?;
        let now = self.clock.now();
        let start = match self.epoch {
            Some(epoch) => epoch.window_start(limit.window()),
            None => now,
        };
        let clock = self.clock.clone();
        let error = |e: weir_window::WindowError| format!("{name}: {e}");
        Ok(match limit.algorithm() {
            Algorithm::FixedWindow => {
                let algorithm = weir_window::fixed::FixedWindowAlgorithm::aligned(quota, now, start).map_err(error)?;
                Store::local(Keyed::<Key, _, C>::with_hasher(algorithm, config, clock, weir_keyed::KeyHasher::new()))
            }
            Algorithm::SlidingWindow => {
                let algorithm =
                    weir_window::sliding::SlidingWindowAlgorithm::aligned(quota, now, start).map_err(error)?;
                Store::local(Keyed::<Key, _, C>::with_hasher(algorithm, config, clock, weir_keyed::KeyHasher::new()))
            }
            Algorithm::SlidingLog => {
                let algorithm = weir_window::log::SlidingLogAlgorithm::new(quota, now).map_err(error)?;
                Store::local(Keyed::<Key, _, C>::with_hasher(algorithm, config, clock, weir_keyed::KeyHasher::new()))
            }
            Algorithm::Gcra => Store::local(weir_keyed::KeyedGcra::<Key, C>::gcra_with_clock(quota, config, clock)),
        })
    }
}

/// Stores in Redis: a weir-redis limiter per limit, keyed under
/// `<prefix><name>:`, wrapped in the fail policy (or leased, for `gcra` rules with
/// leases).
pub struct RedisStores {
    redis: weir_redis::Redis,
    config: RedisBackend,
    prefix: String,
}

impl fmt::Debug for RedisStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStores").field("config", &self.config).field("prefix", &self.prefix).finish()
    }
}

impl RedisStores {
    /// Connects to Redis as `config` says; every limiter's keys start with `prefix`
    /// (braces are escaped: a prefix cannot set a cluster hash tag).
    pub async fn connect(config: RedisBackend, prefix: &str) -> Result<Self, String> {
        let mut options = weir_redis::RedisOptions::builder()
            .call_timeout(config.call_timeout)
            .connect_timeout(config.connect_timeout);
        if let Some(pem) = &config.root_certificate {
            options = options.root_certificate(pem.clone());
        }
        let options = options.build().map_err(|e| e.to_string())?;
        let redis = if config.cluster {
            let urls: Vec<&str> = config.urls.iter().map(String::as_str).collect();
            weir_redis::Redis::connect_cluster(&urls, options).await
        } else {
            let url = config.urls.first().ok_or("no Redis URL")?;
            weir_redis::Redis::connect_with(url, options).await
        }
        .map_err(|e| e.to_string())?;
        Ok(Self { redis, config, prefix: escape_braces(prefix) })
    }
}

/// `name` with `%`, `{` and `}` percent-encoded (a Redis key prefix may hold no
/// braces).
fn escape_braces(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    out
}

impl MakeStore for RedisStores {
    fn make(&self, name: &str, limit: &RateLimit) -> Result<Store, String> {
        Ok(self.make_counter(name, limit)?.store)
    }

    fn make_counter(&self, name: &str, limit: &RateLimit) -> Result<Counter, String> {
        let quota = limit.quota().ok_or_else(|| format!("{name}: a limit of 0 has no counter"))?;
        let backend = match limit.algorithm() {
            Algorithm::FixedWindow => weir_redis::Backend::FixedWindow,
            Algorithm::SlidingWindow => weir_redis::Backend::SlidingWindow,
            Algorithm::SlidingLog => weir_redis::Backend::SlidingLog,
            Algorithm::Gcra => weir_redis::Backend::Gcra,
        };
        let prefix = format!("{}{}:", self.prefix, escape_braces(name));
        let limiter = weir_redis::RedisLimiter::builder(&self.redis, quota)
            .backend(backend)
            .prefix(&prefix)
            .name(name)
            .build()
            .map_err(|e| format!("{name}: {e}"))?;
        if let (Some(lease), Algorithm::Gcra) = (self.config.lease, limit.algorithm()) {
            let config = weir_redis::LeaseConfig::builder()
                .max_lease(u64::from(lease.max_lease))
                .instances(lease.instances)
                .lifetime(lease.lifetime)
                .build()
                .map_err(|e| format!("{name}: {e}"))?;
            let leased = weir_redis::Leased::new(limiter, config).map_err(|e| format!("{name}: {e}"))?;
            return Ok(Counter::from(Store::remote(leased)));
        }
        let policy = match self.config.fail_policy {
            FailPolicy::Open => weir_redis::FailPolicy::Open,
            FailPolicy::Closed => weir_redis::FailPolicy::Closed,
            FailPolicy::Local { instances, max_keys } => weir_redis::FailPolicy::LocalFallback(
                weir_redis::LocalFallback::new(instances, max_keys).map_err(|e| format!("{name}: {e}"))?,
            ),
        };
        let resilient = weir_redis::Resilient::builder(limiter, policy).build().map_err(|e| format!("{name}: {e}"))?;
        Ok(Counter::redis(resilient))
    }
}

/// The stores of a backend, as [`BackendConfig`] says: in memory (windows aligned
/// as `alignment` says), or in Redis (connected now; keys under `prefix`).
pub async fn make_stores(
    backend: &BackendConfig,
    alignment: WindowAlignment,
    prefix: &str,
) -> Result<Arc<dyn MakeStore>, String> {
    Ok(match backend {
        BackendConfig::Memory(memory) => Arc::new(MemoryStores::new(*memory, alignment)),
        BackendConfig::Redis(redis) => Arc::new(RedisStores::connect(redis.clone(), prefix).await?),
    })
}

/// The stores of `limit` overrides, by domain and limit.
type OverrideStores = HashMap<(Box<str>, RateLimit), Arc<Counter>>;

/// The most distinct `limit` overrides (domain, requests and unit) counted at once;
/// a request with another is refused `RESOURCE_EXHAUSTED`.
pub const MAX_OVERRIDE_LIMITS: usize = 1_024;

/// The [`Decide`] of a config: a store per rule, and one per distinct `limit`
/// override, checked all or nothing (see the [module docs](self)).
///
/// Built for each config ([`StoreDecider::build`]) from the decider of the config
/// it replaces: rules that count alike keep their stores ([`RuleStores`]), so
/// their clients keep what they spent; the override stores are kept whole.
///
/// ```
/// use std::sync::Arc;
/// use weir_rls::backend::MemoryBackend;
/// use weir_rls::decider::{MemoryStores, StoreDecider};
/// use weir_rls::windows::WindowAlignment;
/// use weir_rls::{Config, LoadOptions, RlsService};
///
/// let yaml = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n";
/// let config = Arc::new(Config::from_yaml("d.yaml", yaml, &LoadOptions::default())?);
/// let stores = Arc::new(MemoryStores::new(MemoryBackend::default(), WindowAlignment::Epoch));
/// let decider = StoreDecider::build(stores, &config, None)?;
/// let service = RlsService::new(config, decider);
/// # let _ = service;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct StoreDecider {
    rules: RuleStores<Counter>,
    overrides: Arc<Mutex<OverrideStores>>,
    make: Arc<dyn MakeStore>,
}

impl fmt::Debug for StoreDecider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreDecider").field("rules", &self.rules.len()).field("make", &self.make).finish()
    }
}

impl StoreDecider {
    /// The decider of `config`, taking over `previous`'s stores of rules that count
    /// alike, and its override stores.
    pub fn build(
        make: Arc<dyn MakeStore>,
        config: &Config,
        previous: Option<&StoreDecider>,
    ) -> Result<StoreDecider, String> {
        let rules = RuleStores::build(config, previous.map(|p| &p.rules), |rule: &Rule, limit| {
            make.make_counter(&rule_name(rule), limit)
        })?;
        let overrides = previous.map_or_else(Default::default, |p| Arc::clone(&p.overrides));
        Ok(Self { rules, overrides, make })
    }

    /// The rules' counters.
    pub fn rule_stores(&self) -> &RuleStores<Counter> {
        &self.rules
    }

    fn counter(&self, check: &Check<'_>) -> Result<Arc<Counter>, DecideError> {
        match check.source {
            LimitSource::Rule(rule) => self
                .rules
                .get(rule)
                .cloned()
                .ok_or_else(|| DecideError::internal(format!("no store for rule {}", rule.full_key()))),
            LimitSource::Override => {
                let mut overrides = self.overrides.lock().unwrap_or_else(PoisonError::into_inner);
                let id = (Box::<str>::from(check.domain), check.limit);
                if let Some(store) = overrides.get(&id) {
                    return Ok(Arc::clone(store));
                }
                if overrides.len() >= MAX_OVERRIDE_LIMITS {
                    return Err(DecideError::exhausted(format!(
                        "more than {MAX_OVERRIDE_LIMITS} distinct limit overrides are counted already"
                    )));
                }
                let name = format!("{}.<override>", check.domain);
                let store = Arc::new(self.make.make_counter(&name, &check.limit).map_err(DecideError::internal)?);
                overrides.insert(id, Arc::clone(&store));
                Ok(store)
            }
        }
    }
}

/// A rule's store name: `<domain>.<key path>`.
fn rule_name(rule: &Rule) -> String {
    rule.full_key().to_owned()
}

/// What a limit whose store did not decide reports: nothing left, no wait.
fn undecided(check: &Check<'_>) -> Decision {
    Decision::allowed(Snapshot::new(check.quota.burst(), 0, 0))
}

impl StoreDecider {
    /// The decisions of `checks` by the counters' stores, with [`check_all`] (a
    /// remote store's call per limit, and refunds when one refuses); `None` for a
    /// limit not decided.
    async fn decide_by_stores(
        checks: &[Check<'_>],
        counters: &[Arc<Counter>],
        costs: &[u64],
    ) -> Result<Vec<Option<Decision>>, DecideError> {
        let keys: Vec<Key> = checks.iter().map(|c| Key::custom(c.key.as_bytes())).collect();
        let charges: Vec<Charge<'_>> = checks
            .iter()
            .zip(counters)
            .zip(&keys)
            .zip(costs)
            .map(|(((c, counter), key), &cost)| Charge::new(&counter.store, key, cost).shadow(c.shadow))
            .collect();
        let (mut decisions, outcome) = check_all(&charges).await.into_parts();
        match outcome {
            Outcome::Admitted | Outcome::Refused { .. } => {}
            Outcome::AboveQuota { limit, cost, most } => {
                return Err(DecideError::internal(format!(
                    "limit {limit}: a cost of {cost} above the {most} its store admits at once"
                )));
            }
            Outcome::Unavailable { limit, error, .. } => match decisions.get(limit).copied().flatten() {
                // Decided by the fail policy (closed, or the local fallback's refusal):
                // a refusal of this limit; what is not decided is read.
                Some(decision) if decision.is_from_fallback() => {
                    let unread: Vec<usize> = (0..checks.len()).filter(|&i| decisions[i].is_none()).collect();
                    let reads: Vec<Charge<'_>> =
                        unread.iter().map(|&i| Charge::new(&counters[i].store, &keys[i], 0)).collect();
                    let read = check_all(&reads).await;
                    for (j, &i) in unread.iter().enumerate() {
                        decisions[i] = read.decision(j).copied();
                    }
                }
                _ => return Err(DecideError::unavailable(error.to_string())),
            },
            // A verdict weir-http adds later: nothing known was charged.
            _ => return Err(DecideError::internal("an outcome this version does not know")),
        }
        Ok(decisions)
    }

    /// The decisions of `checks` in Redis, in one script (`limiters`: each
    /// check's), all or nothing; each limiter's fail policy decides while Redis
    /// does not answer. `None` when the limiters cannot share a batch (built on
    /// different connections): then the stores decide.
    async fn decide_in_redis(
        checks: &[Check<'_>],
        limiters: &[&Resilient],
        costs: &[u64],
    ) -> Option<Result<Vec<Option<Decision>>, DecideError>> {
        let in_redis_error = |e: weir_redis::Error| match e {
            weir_redis::Error::InsufficientCapacity(e) => DecideError::internal(format!(
                "a cost of {} above the {} a limit admits at once",
                e.requested, e.capacity
            )),
            e => DecideError::unavailable(e.to_string()),
        };
        // One limit: its own script, the same one round trip, with no batch to
        // build (a batch of one decides alike).
        if let ([check], [limiter], [cost]) = (checks, limiters, costs) {
            let key = Key::custom(check.key.as_bytes());
            return Some(match limiter.check_traced(&key, *cost).await {
                Ok(checked) => Ok(vec![Some(checked.decision)]),
                Err(e) => Err(in_redis_error(e)),
            });
        }
        // The keys as the stores name them (weir-http's encoding), so a limit
        // counts the same Redis key whichever way it is decided.
        let keys: Vec<Key> = checks.iter().map(|c| Key::custom(c.key.as_bytes())).collect();
        let items: Vec<BatchItem<'_, Resilient>> = checks
            .iter()
            .zip(limiters)
            .zip(&keys)
            .zip(costs)
            .map(|(((c, limiter), key), &cost)| BatchItem::new(*limiter, key, cost).shadow(c.shadow))
            .collect();
        Some(match Resilient::check_batch(&items).await {
            Ok(checked) => Ok(checked.into_items().into_iter().map(|c| Some(c.decision)).collect()),
            Err(weir_redis::Error::Batch { .. }) => return None,
            Err(e) => Err(in_redis_error(e)),
        })
    }
}

impl Decide for StoreDecider {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
        let counters = checks.iter().map(|c| self.counter(c)).collect::<Result<Vec<_>, _>>()?;
        // A cost above what a limit ever admits at once is over now (every such
        // limit): the others are read, not charged.
        let never = checks.iter().any(|c| !c.shadow && c.cost > c.quota.burst());
        let costs: Vec<u64> =
            checks.iter().map(|c| if never || c.cost > c.quota.burst() { 0 } else { c.cost }).collect();
        // Every limit in Redis: one script decides them all.
        let limiters: Option<Vec<&Resilient>> = counters.iter().map(|c| c.redis_limiter()).collect();
        let in_redis = match limiters {
            Some(limiters) if !limiters.is_empty() => Self::decide_in_redis(checks, &limiters, &costs).await,
            _ => None,
        };
        let decisions = match in_redis {
            Some(decisions) => decisions?,
            None => Self::decide_by_stores(checks, &counters, &costs).await?,
        };
        // A full store refuses for its capacity, not the client's rate.
        for (check, decision) in checks.iter().zip(&decisions) {
            if let Some(d) = decision
                && d.is_denied()
                && !check.shadow
                && d.deny_reason() == Some(DenyReason::KeyCapacity)
            {
                return Err(DecideError::exhausted(format!(
                    "the counters of {} are full of other clients' live counters",
                    match check.source {
                        LimitSource::Rule(rule) => rule.full_key().to_owned(),
                        LimitSource::Override => format!("{}.<override>", check.domain),
                    }
                )));
            }
        }
        Ok(checks
            .iter()
            .zip(decisions)
            .map(|(check, decision)| {
                let decision = decision.unwrap_or_else(|| undecided(check));
                if check.cost > check.quota.burst() {
                    let wait = u64::try_from(decision.reset_after().as_nanos()).unwrap_or(u64::MAX);
                    Decision::denied(decision.snapshot(), wait)
                } else {
                    decision
                }
            })
            .collect())
    }
}
