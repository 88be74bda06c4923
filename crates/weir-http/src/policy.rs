//! [`Limit`] (one key, one store) and [`Policy`] (the limits a route group applies),
//! and how a request is decided against them.

use crate::all_or_nothing::{Charges, Ledger, OUTAGE, Step, is_own};
use crate::ip::ClientIp;
use crate::key::{Key, KeySource, MissingKey};
use crate::request::Request;
use crate::response::{PolicyValue, RateLimitFields, policy_item, problem_tail, retry_after_secs, sf_string};
use crate::store::{Store, StoreError};
use crate::throttle::{Away, KeyedThrottle, Line, Turn};
use crate::tier::Tiers;
use bytes::Bytes;
use core::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use weir_rl_core::{Decision, KeyedLimiter};

/// The most limits one policy applies.
pub const MAX_LIMITS: usize = 8;

/// One limit: a key read from the request and the store it is counted in (or tiers,
/// each with its own store, or a throttle).
///
/// ```
/// use weir_rl_core::Quota;
/// use weir_keyed::{KeyedConfig, KeyedGcra, KeyedSlidingWindow};
/// use weir_http::{Key, KeySource, Limit, MissingKey, Store};
///
/// let per_ip: KeyedGcra<Key> = KeyedGcra::gcra(Quota::per_second(10)?, KeyedConfig::builder(100_000).build()?);
/// let per_user: KeyedSlidingWindow<Key> = KeyedSlidingWindow::sliding_window(Quota::per_minute(300)?, KeyedConfig::builder(10_000).build()?)?;
///
/// let ip = Limit::per_ip(per_ip);
/// // Requests with no authenticated user are limited by their IP alone.
/// let user = Limit::new(KeySource::user(), Store::local(per_user)).on_missing_key(MissingKey::Skip);
/// # let _ = (ip, user);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Limit {
    key: KeySource,
    missing: MissingKey,
    kind: LimitKind,
    name: Option<Arc<str>>,
    shadow: bool,
}

#[derive(Clone)]
enum LimitKind {
    Store(Store),
    Tiered(Arc<Tiers>),
    Throttle(Arc<KeyedThrottle>),
}

impl Limit {
    /// Requests counted by `key` in `store`.
    pub fn new(key: KeySource, store: Store) -> Self {
        Self { key, name: None, missing: MissingKey::Deny, kind: LimitKind::Store(store), shadow: false }
    }

    /// Each client IP (the peer address; IPv6 by `/64`) counted in the in-memory
    /// `store`. Behind a proxy, use [`Limit::new`] with a [`ClientIp`] that trusts it.
    /// The server must give the peer address (see
    /// its adapter's docs).
    pub fn per_ip(store: impl KeyedLimiter<Key> + Send + Sync + 'static) -> Self {
        Self::new(KeySource::ip(ClientIp::default()), Store::local(store))
    }

    /// Requests counted by `key` in the store of the key's tier.
    pub fn tiered(key: KeySource, tiers: Tiers) -> Self {
        Self { key, name: None, missing: MissingKey::Deny, kind: LimitKind::Tiered(Arc::new(tiers)), shadow: false }
    }

    /// [`tiered`](Self::tiered), with tiers shared by several limits.
    pub fn tiered_shared(key: KeySource, tiers: Arc<Tiers>) -> Self {
        Self { key, name: None, missing: MissingKey::Deny, kind: LimitKind::Tiered(tiers), shadow: false }
    }

    /// Requests of each `key` paced by `throttle`: they wait their turn instead of
    /// being rejected. A policy checks its throttles after its other limits, so a
    /// request waits only once the other limits have admitted it.
    pub fn throttle(key: KeySource, throttle: KeyedThrottle) -> Self {
        Self {
            key,
            name: None,
            missing: MissingKey::Deny,
            kind: LimitKind::Throttle(Arc::new(throttle)),
            shadow: false,
        }
    }

    /// [`throttle`](Self::throttle), with the throttle kept by the caller too (to
    /// read [`KeyedThrottle::waiting`]).
    pub fn throttle_shared(key: KeySource, throttle: Arc<KeyedThrottle>) -> Self {
        Self { key, name: None, missing: MissingKey::Deny, kind: LimitKind::Throttle(throttle), shadow: false }
    }

    /// What to do with a request that has no key from this limit's source (default
    /// [`MissingKey::Deny`]).
    pub fn on_missing_key(self, missing: MissingKey) -> Self {
        Self { missing, ..self }
    }

    /// Names the limit: the `limit` label of its metrics (the `metrics` feature;
    /// see the crate docs, "Metrics"). Default: its place among its policy's
    /// limits, as added (`1`, `2`, ...). A name from your configuration (`per_ip`),
    /// never anything a client sends.
    pub fn named(self, name: impl AsRef<str>) -> Self {
        Self { name: Some(Arc::from(name.as_ref())), ..self }
    }

    /// The limit's name, if [`named`](Self::named).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Shadow mode: the limit is decided, counted (its store charged, its metrics
    /// counted: a refusal as `outcome="shadow_denied"`) and its refusals logged (a
    /// `tracing` event at `info`, target `weir_http`, "shadow: would have
    /// refused"), but it never refuses a request and adds no header: the client sees
    /// what it would see without this limit. A request without its key, or whose
    /// store fails, goes on as if the limit were not there (counted
    /// `shadow_unidentified`, `shadow_unavailable`). What a new limit would do, seen
    /// before it is enforced. A throttle cannot be in shadow mode (it delays
    /// requests, which a client would see): [`PolicyError::ShadowThrottle`].
    pub fn shadow(self, shadow: bool) -> Self {
        Self { shadow, ..self }
    }

    /// Whether the limit is in shadow mode (see [`shadow`](Self::shadow)).
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The tiers of a tiered limit.
    pub fn tiers(&self) -> Option<&Tiers> {
        match &self.kind {
            LimitKind::Tiered(tiers) => Some(tiers),
            _ => None,
        }
    }

    /// The store of a plain limit.
    pub fn store(&self) -> Option<&Store> {
        match &self.kind {
            LimitKind::Store(store) => Some(store),
            _ => None,
        }
    }

    /// The throttle of a throttle limit.
    pub fn throttle_of(&self) -> Option<&KeyedThrottle> {
        match &self.kind {
            LimitKind::Throttle(throttle) => Some(throttle),
            _ => None,
        }
    }
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Limit");
        d.field("key", &self.key)
            .field("missing", &self.missing)
            .field("name", &self.name)
            .field("shadow", &self.shadow);
        match &self.kind {
            LimitKind::Store(store) => d.field("store", store),
            LimitKind::Tiered(tiers) => d.field("tiers", tiers),
            LimitKind::Throttle(throttle) => d.field("throttle", throttle),
        };
        d.finish()
    }
}

/// The limits a route group applies, all of them to every request: per IP and per
/// user at once, say. A request passes only if every limit admits it; one denied by
/// a limit consumes nothing from the others (their admissions are refunded, with the
/// same transient as [`AllOf`](weir_rl_core::AllOf): a concurrent request may be denied
/// spuriously, never over-admitted). Of the admissions, the one with the least
/// remaining goes in the headers.
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::Quota;
/// use weir_keyed::{KeyedConfig, KeyedSlidingLog};
/// use weir_http::{Key, Limit, Policy};
///
/// let five_per_5_min: KeyedSlidingLog<Key> =
///     KeyedSlidingLog::sliding_log(Quota::new(5, Duration::from_secs(300))?, KeyedConfig::builder(100_000).build()?)?;
/// let auth = Policy::builder("auth").limit(Limit::per_ip(five_per_5_min)).build()?;
/// # let _ = auth;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Policy {
    name: Arc<str>,
    limits: Vec<Limit>,
    cost: u64,
    shadow: bool,
}

/// Which [`PolicyBuilder`] option was refused, and why. Each names the policy.
///
/// ```
/// use weir_http::{Policy, PolicyError};
///
/// let error = Policy::builder("api").cost(0).build().unwrap_err();
/// assert_eq!(error, PolicyError::ZeroCost { policy: "api".into() });
/// assert_eq!(error.to_string(), "cost: policy `api` has a cost of 0; a request costs at least 1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// More than [`MAX_LIMITS`] [`limit`](PolicyBuilder::limit)s.
    TooManyLimits {
        /// The policy's name.
        policy: String,
        /// How many limits were added.
        limits: usize,
    },
    /// A [`cost`](PolicyBuilder::cost) of zero: every request would be admitted
    /// without counting.
    ZeroCost {
        /// The policy's name.
        policy: String,
    },
    /// A [`cost`](PolicyBuilder::cost) above what one of the limits' quotas admits
    /// at once: every request would be refused.
    CostAboveQuota {
        /// The policy's name.
        policy: String,
        /// The cost of a request.
        cost: u64,
        /// The quota's name (as its store names it).
        quota: String,
        /// The most the quota admits at once.
        limit: u64,
    },
    /// A throttle in shadow mode (the limit's, or its policy's): a throttle delays
    /// requests, which a client would see, so it cannot be in shadow mode.
    ShadowThrottle {
        /// The policy's name.
        policy: String,
        /// The throttle limit's name (its place from 1, if unnamed).
        limit: String,
    },
}

impl PolicyError {
    /// The option refused: `"limit"` or `"cost"`.
    pub fn option(&self) -> &'static str {
        match self {
            Self::TooManyLimits { .. } => "limit",
            Self::ZeroCost { .. } | Self::CostAboveQuota { .. } => "cost",
            Self::ShadowThrottle { .. } => "shadow",
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyLimits { policy, limits } => {
                write!(f, "limit: policy `{policy}` has {limits} limits; at most {MAX_LIMITS}")
            }
            Self::ZeroCost { policy } => {
                write!(f, "cost: policy `{policy}` has a cost of 0; a request costs at least 1")
            }
            Self::CostAboveQuota { policy, cost, quota, limit } => write!(
                f,
                "cost: policy `{policy}` costs {cost} per request, but its quota `{quota}` admits at most {limit} at once"
            ),
            Self::ShadowThrottle { policy, limit } => write!(
                f,
                "shadow: limit `{limit}` of policy `{policy}` is a throttle, which delays requests and so cannot be in \
                 shadow mode; keep the throttle out of shadow mode (its policy's too), or make it a limit with quotas"
            ),
        }
    }
}

impl std::error::Error for PolicyError {}

/// The options of a [`Policy`]: setters that never fail, checked together by
/// [`build`](Self::build). From [`Policy::builder`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PolicyBuilder {
    name: Arc<str>,
    limits: Vec<Limit>,
    cost: u64,
    shadow: bool,
}

impl PolicyBuilder {
    /// Adds a limit (at most [`MAX_LIMITS`]).
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limits.push(limit);
        self
    }

    /// What one request costs (at least 1, and at most what each quota admits at
    /// once). Default: 1.
    pub fn cost(self, n: u64) -> Self {
        Self { cost: n, ..self }
    }

    /// Shadow mode for every limit of the policy (see [`Limit::shadow`]): the
    /// policy is decided and counted, and refuses nothing.
    pub fn shadow(self, shadow: bool) -> Self {
        Self { shadow, ..self }
    }

    /// The policy, or the first option refused: [`PolicyError::TooManyLimits`],
    /// [`PolicyError::ZeroCost`], [`PolicyError::CostAboveQuota`],
    /// [`PolicyError::ShadowThrottle`].
    pub fn build(self) -> Result<Policy, PolicyError> {
        let Self { name, limits, cost, shadow } = self;
        let policy = || name.to_string();
        if limits.len() > MAX_LIMITS {
            return Err(PolicyError::TooManyLimits { policy: policy(), limits: limits.len() });
        }
        if cost == 0 {
            return Err(PolicyError::ZeroCost { policy: policy() });
        }
        for (i, limit) in limits.iter().enumerate() {
            if (shadow || limit.shadow) && matches!(limit.kind, LimitKind::Throttle(_)) {
                let limit = limit.name.as_deref().map_or_else(|| (i + 1).to_string(), str::to_owned);
                return Err(PolicyError::ShadowThrottle { policy: policy(), limit });
            }
            let stores: Vec<&Store> = match &limit.kind {
                LimitKind::Store(store) => vec![store],
                LimitKind::Tiered(tiers) => tiers.tiers().map(|(_, store)| store).collect(),
                LimitKind::Throttle(_) => Vec::new(),
            };
            for store in stores {
                for (quota, quota_name) in store.policies().iter().zip(store.names()) {
                    if quota.limit() < cost {
                        return Err(PolicyError::CostAboveQuota {
                            policy: policy(),
                            cost,
                            quota: quota_name.to_string(),
                            limit: quota.limit(),
                        });
                    }
                }
            }
        }
        Ok(Policy { name, limits, cost, shadow })
    }
}

impl Policy {
    /// The options of a policy named `name` (shown in events and problem bodies),
    /// with no limits yet and a cost of 1.
    pub fn builder(name: impl AsRef<str>) -> PolicyBuilder {
        PolicyBuilder { name: Arc::from(name.as_ref()), limits: Vec::new(), cost: 1, shadow: false }
    }

    /// A policy of one limit at a cost of 1, which every quota admits (so there is
    /// nothing to refuse, and no `build`).
    ///
    /// ```
    /// use weir_http::{Key, Limit, Policy};
    /// use weir_keyed::{KeyedConfig, KeyedGcra};
    /// use weir_rl_core::Quota;
    ///
    /// let store: KeyedGcra<Key> = KeyedGcra::gcra(Quota::per_second(10)?, KeyedConfig::builder(1_000).build()?);
    /// let policy = Policy::single("api", Limit::per_ip(store));
    /// assert_eq!((policy.name(), policy.limits().len(), policy.cost()), ("api", 1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn single(name: &str, limit: Limit) -> Self {
        Self { name: Arc::from(name), limits: vec![limit], cost: 1, shadow: false }
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The limits, in the order added.
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// What one request costs.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Whether the whole policy is in shadow mode ([`PolicyBuilder::shadow`]; a
    /// limit may be on its own: [`Limit::is_shadow`]).
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }
}

/// One variant of a limit's quotas (a plain store has one; a tiered limit one per
/// tier): per quota, what its headers and refusals say of it, made once when the
/// policy is compiled; and the `RateLimit-Policy` items.
#[derive(Debug)]
struct Variant {
    quotas: Box<[QuotaText]>,
    items: Box<str>,
}

/// What is said of one quota, made once: its name as the `RateLimit` header starts
/// with it, and as events and problem bodies show it.
#[derive(Debug)]
struct QuotaText {
    /// `"name";r=`: the name as a structured-field string, then the `r` parameter.
    ratelimit_prefix: Box<[u8]>,
    /// The name as events and problem bodies show it (the sf-string's content).
    name: Box<str>,
    /// The end of a problem body refusing a request for this quota: the policy's
    /// name and this one's (see [`problem_tail`]).
    problem_tail: Box<[u8]>,
    /// Its decisions' counters.
    #[cfg(feature = "metrics")]
    metrics: crate::metrics::QuotaMetrics,
}

impl Variant {
    /// `labels`: the limit's and the tier's names, for the metrics.
    fn new(policy: &str, store: &Store, names: impl Iterator<Item = String>, labels: (&str, &str)) -> Self {
        let _ = labels;
        let quoted_names: Vec<String> = names.map(|n| sf_string(&n)).collect();
        let items: Vec<String> = quoted_names
            .iter()
            .zip(store.policies())
            .map(|(name, policy)| policy_item(name, policy.limit(), policy.window()))
            .collect();
        let quotas = quoted_names
            .iter()
            .map(|quoted| {
                let name = quoted.trim_matches('"');
                QuotaText {
                    ratelimit_prefix: format!("{quoted};r=").into_bytes().into_boxed_slice(),
                    name: name.into(),
                    problem_tail: problem_tail(policy, name).into_bytes().into_boxed_slice(),
                    #[cfg(feature = "metrics")]
                    metrics: crate::metrics::QuotaMetrics::register(policy, labels.0, labels.1, name),
                }
            })
            .collect();
        Self { quotas, items: items.join(", ").into_boxed_str() }
    }

    fn quota(&self, policy_index: usize) -> Option<&QuotaText> {
        self.quotas.get(policy_index).or(self.quotas.first())
    }
}

/// `RateLimit`'s prefix for a quota with no name known.
const UNNAMED_PREFIX: &[u8] = b"\"\";r=";

/// A limit ready to check: its variants' header parts precomputed.
#[derive(Debug)]
pub(crate) struct CompiledLimit {
    limit: Limit,
    variants: Box<[Variant]>,
    /// The `detail` of a 400 for a request without this limit's key: it names
    /// where the key is read from.
    missing_detail: Box<str>,
    /// In shadow mode (its own, or its policy's): decided and counted, never
    /// refusing, adding no header.
    shadow: bool,
    /// Its metrics beside its quotas' decisions.
    #[cfg(feature = "metrics")]
    metrics: crate::metrics::LimitMetrics,
}

/// A policy ready to check.
#[derive(Debug)]
pub(crate) struct CompiledPolicy {
    pub(crate) name: Arc<str>,
    /// Its place among the limits' policies.
    id: crate::PolicyId,
    limits: Box<[CompiledLimit]>,
    cost: u64,
    /// Every store is in memory and there is no throttle: a request whose tiers are
    /// cached is decided in `call`, with no future.
    local: bool,
    /// `RateLimit-Policy` when every limit (not in shadow mode) applies with its one
    /// variant: made once, and never copied per request (the fields name it:
    /// [`PolicyValue::Precomputed`]).
    full_policy_header: Option<Bytes>,
    /// The policy is one limit with one in-memory store (no tiers, no throttle, not
    /// in shadow mode): decided by [`decide_single`](CompiledPolicy::decide_single),
    /// with no array of keys.
    single: bool,
    #[cfg(feature = "metrics")]
    pub(crate) metrics: crate::metrics::PolicyMetrics,
}

/// A policy made ready to check (a built policy is valid: see [`PolicyBuilder::build`]),
/// the limits' policy `id`.
pub(crate) fn compile(policy: Policy, id: crate::PolicyId) -> CompiledPolicy {
    let name = policy.name.clone();
    let mut limits = policy.limits;
    // Unnamed limits are named by their place, as added (before throttles move).
    for (i, limit) in limits.iter_mut().enumerate() {
        if limit.name.is_none() {
            limit.name = Some(Arc::from((i + 1).to_string()));
        }
    }
    // Throttles wait: only once every other limit has admitted.
    limits.sort_by_key(|l| matches!(l.kind, LimitKind::Throttle(_)));
    let mut seen: Vec<String> = Vec::new();
    let mut compiled = Vec::with_capacity(limits.len());
    for (i, limit) in limits.into_iter().enumerate() {
        let stores: Vec<(&str, &Store)> = match &limit.kind {
            LimitKind::Store(store) => vec![("", store)],
            LimitKind::Tiered(tiers) => tiers.tiers().collect(),
            LimitKind::Throttle(_) => Vec::new(),
        };
        let limit_name = limit.name.clone().unwrap_or_else(|| Arc::from(""));
        // Names must tell quotas apart across limits: a name another limit uses gets
        // this limit's number (`minute` and `minute-2`).
        let mine: Vec<String> = stores.iter().flat_map(|(_, s)| s.names().iter().map(|n| n.to_string())).collect();
        let clash = mine.iter().any(|n| seen.contains(n));
        seen.extend(mine);
        let rename = |n: &Arc<str>| if clash { format!("{n}-{}", i + 1) } else { n.to_string() };
        let variants = stores
            .iter()
            .map(|(tier, store)| Variant::new(&name, store, store.names().iter().map(rename), (&limit_name, tier)))
            .collect();
        let missing_detail = format!(
            "The request does not say which client it is from: this limit counts requests by {}, which the request \
             lacks or leaves empty.",
            limit.key.describe()
        )
        .into_boxed_str();
        // A throttle is never in shadow mode (a built policy refuses one that is).
        let shadow = (policy.shadow || limit.shadow) && !matches!(limit.kind, LimitKind::Throttle(_));
        #[cfg(feature = "metrics")]
        let metrics =
            crate::metrics::LimitMetrics::register(&name, &limit_name, matches!(limit.kind, LimitKind::Throttle(_)));
        compiled.push(CompiledLimit {
            limit,
            variants,
            missing_detail,
            shadow,
            #[cfg(feature = "metrics")]
            metrics,
        });
    }
    let local = compiled.iter().all(|l| match &l.limit.kind {
        LimitKind::Store(store) => store.is_local(),
        LimitKind::Tiered(tiers) => tiers.tiers().all(|(_, store)| store.is_local()),
        LimitKind::Throttle(_) => false,
    });
    let enforced = || compiled.iter().filter(|l| !l.shadow);
    let full_policy_header = if enforced().all(|l| l.variants.len() <= 1) {
        let items: Vec<&str> = enforced().filter_map(|l| l.variants.first()).map(|v| &*v.items).collect();
        Some(Bytes::from(items.join(", ")))
    } else {
        None
    };
    let single = compiled.len() == 1
        && compiled.iter().all(|l| !l.shadow && matches!(&l.limit.kind, LimitKind::Store(store) if store.is_local()));
    CompiledPolicy {
        #[cfg(feature = "metrics")]
        metrics: crate::metrics::PolicyMetrics::register(&name),
        single,
        name,
        id,
        limits: compiled.into_boxed_slice(),
        cost: policy.cost,
        local,
        full_policy_header,
    }
}

/// A request's limits as a [`Ledger`] reads them: the policy, and the request's keys
/// and tiers, owned (a request that waits) or borrowed (one decided at once). A
/// ledger's drop gives back what in-memory stores admitted, and hands what remote
/// ones did to a task that gives it back: a request dropped before its decision (its
/// client went away) leaves nothing taken (see [`check_all`](crate::check_all),
/// "Cancellation-safe").
struct Held<'a> {
    policy: &'a CompiledPolicy,
    keys: Keys,
    tiers: [Option<usize>; MAX_LIMITS],
}

/// A request's keys and tiers, as a [`Held`] or [`Viewed`] has them.
trait Parts {
    fn parts(&self) -> (&Keys, &[Option<usize>; MAX_LIMITS]);
}

impl Parts for Held<'_> {
    fn parts(&self) -> (&Keys, &[Option<usize>; MAX_LIMITS]) {
        (&self.keys, &self.tiers)
    }
}

impl Parts for Viewed<'_> {
    fn parts(&self) -> (&Keys, &[Option<usize>; MAX_LIMITS]) {
        (self.keys, self.tiers)
    }
}

/// [`Held`], borrowed.
struct Viewed<'a> {
    policy: &'a CompiledPolicy,
    keys: &'a Keys,
    tiers: &'a [Option<usize>; MAX_LIMITS],
}

impl Charges for Held<'_> {
    #[inline]
    fn charge(&self, i: usize) -> Option<(&Store, &Key, u64)> {
        Some((self.policy.store_of(i, &self.tiers)?, self.keys.get(i)?.as_ref()?, self.policy.cost))
    }

    fn name(&self) -> &str {
        &self.policy.name
    }
}

impl Charges for Viewed<'_> {
    #[inline]
    fn charge(&self, i: usize) -> Option<(&Store, &Key, u64)> {
        Some((self.policy.store_of(i, self.tiers)?, self.keys.get(i)?.as_ref()?, self.policy.cost))
    }

    fn name(&self) -> &str {
        &self.policy.name
    }
}

/// The turns a request took in its throttles' lines, one per limit. Dropped before
/// the request is admitted (refused by a later throttle, or dropped while it waits
/// in a later line), it gives each back, the latest first (see [`Turn`]).
struct Turns<'a>([Option<Turn<'a>>; MAX_LIMITS]);

impl Turns<'_> {
    /// Spends every turn: the request is admitted.
    fn keep(&mut self) {
        for turn in self.0.iter_mut().filter_map(Option::take) {
            turn.keep();
        }
    }
}

impl Turns<'_> {
    /// Gives every turn back, the latest first (a turn given back after a later
    /// claim of its line would be lost).
    fn give_back(&mut self) {
        for turn in self.0.iter_mut().rev() {
            drop(turn.take());
        }
    }
}

impl Drop for Turns<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Why a limit that is not in shadow mode refuses a request (see
/// [`CompiledPolicy::settle`]).
enum Refuse {
    /// Its store denied it: the key's rate, or a store full of other keys.
    Denied(Decision),
    /// Its store decided by its fail policy: the store's outage.
    Outage(Decision),
    /// Its store (or its tier lookup) failed.
    Failed(StoreError),
}

/// The keys of a request to a policy of one limit.
fn single_key(key: Key) -> Keys {
    let mut keys: Keys = Default::default();
    keys[0] = Some(key);
    keys
}

/// A request's keys, one per limit (`None`: skipped).
pub(crate) type Keys = [Option<Key>; MAX_LIMITS];

/// Why the middleware answers a request itself.
// Made once per refused request and moved once, into the response: not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A limit denied the request: the `limit`-th, checked in its tier `tier` (for a
    /// tiered limit); its quota's name is looked up when the refusal is answered.
    Denied { decision: Decision, limit: usize, tier: Option<usize>, key: Key, headers: RateLimitFields },
    /// A throttle turned the request away.
    TurnedAway { retry_after: Duration, key: Key },
    /// A throttle's map was full of other keys' throttles in use.
    ThrottleFull { retry_after: Duration, key: Key },
    /// A store or a tier lookup failed, or a store decided by its fail policy
    /// (then `retry_after` is the store's: until its backend is tried again).
    Unavailable { error: StoreError, key: Key, retry_after: Option<Duration> },
    /// No key for the `limit`-th limit, which denies keyless requests; or a header
    /// value longer than the limit's source accepts (`too_long`: its name); or a
    /// per-IP limit and no peer address (`no_peer`).
    Unidentified { limit: usize, too_long: Option<Box<str>>, no_peer: bool },
}

/// What a policy decided for a request.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Admitted; the headers to add (none if no limit applied).
    Allowed(Option<RateLimitFields>),
    /// Answered by the middleware.
    Refused(Refusal),
}

impl CompiledPolicy {
    /// Reads the request's keys into `keys` (where they stay: the array is a few
    /// hundred bytes, not worth moving), or says which limit denies keyless requests
    /// (and, if it refused a header value over [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES),
    /// the header's name). A limit in shadow mode refuses nothing: without its key,
    /// the request goes on without it (counted and logged).
    pub(crate) fn keys<R: Request + ?Sized>(&self, request: &R, keys: &mut Keys) -> Result<(), (usize, Option<&str>)> {
        for (i, limit) in self.limits.iter().enumerate() {
            let read = match limit.limit.key.read(request) {
                Ok(read) => read,
                Err(_) if limit.shadow => {
                    self.shadow_unidentified(i, request.path());
                    keys[i] = None;
                    continue;
                }
                Err(name) => return Err((i, Some(name))),
            };
            keys[i] = match read {
                Some(key) => Some(key),
                None => match &limit.limit.missing {
                    MissingKey::Deny if limit.shadow => {
                        self.shadow_unidentified(i, request.path());
                        None
                    }
                    MissingKey::Deny => return Err((i, None)),
                    MissingKey::Shared(key) => Some(key.clone()),
                    MissingKey::Skip => None,
                },
            };
        }
        Ok(())
    }

    /// The `detail` of a 400 for a request without the `limit`-th limit's key.
    pub(crate) fn missing_detail(&self, limit: usize) -> &str {
        self.limits.get(limit).map_or("The request does not say which client it is from.", |l| &l.missing_detail)
    }

    /// Whether the `limit`-th limit reads the client IP and the request carries no
    /// peer address (so no request can have a key: the server gives none).
    pub(crate) fn lacks_peer_address<R: Request + ?Sized>(&self, limit: usize, request: &R) -> bool {
        self.limits.get(limit).is_some_and(|l| l.limit.key.reads_peer_address()) && request.peer_ip().is_none()
    }

    /// Tiers the cache already knows, and whether the request can then be decided
    /// without waiting.
    pub(crate) fn cached_tiers(&self, keys: &Keys) -> ([Option<usize>; MAX_LIMITS], bool) {
        let mut tiers = [None; MAX_LIMITS];
        let mut ready = self.local;
        for (i, limit) in self.limits.iter().enumerate() {
            if let (LimitKind::Tiered(t), Some(key)) = (&limit.limit.kind, &keys[i]) {
                tiers[i] = t.cached(key);
                ready &= tiers[i].is_some();
            }
        }
        (tiers, ready)
    }

    /// Decides a request: checks every limit in order, refunds the admissions made
    /// before a denial, and picks the admission with the least remaining for the
    /// headers. Waits on remote stores, tier lookups and throttles; refused, or
    /// dropped while it waits (the client went away), it gives back what stores
    /// admitted (see [`Held`]) and the turns it took in throttles.
    pub(crate) async fn decide(&self, keys: Keys, tiers: [Option<usize>; MAX_LIMITS], legacy: bool) -> Verdict {
        // The lines of the throttles waited in, then the turns taken in them: a turn
        // borrows its line, and is given back unless the request is admitted (see
        // `Turns`). Declared in this order so that the turns are dropped first.
        let lines: [OnceLock<Arc<Line>>; MAX_LIMITS] = Default::default();
        let mut turns = Turns(Default::default());
        let mut ledger = Ledger::new(Held { policy: self, keys, tiers }, [None; MAX_LIMITS]);
        let mut best: Option<(usize, Decision)> = None;
        // The first throttle that gave the request its turn: what its admission is
        // counted as when no store decided (counted once, by `allowed`).
        let mut throttled: Option<usize> = None;
        for (i, limit) in self.limits.iter().enumerate() {
            let Some(key) = &ledger.charges.keys[i] else { continue };
            match &limit.limit.kind {
                LimitKind::Store(_) => {}
                LimitKind::Tiered(t) => {
                    if ledger.charges.tiers[i].is_none() {
                        match t.resolve(key).await {
                            Ok(tier) => ledger.charges.tiers[i] = Some(tier),
                            Err(e) => {
                                let refuse =
                                    self.settle(i, Step::Failed(StoreError::new(e)), &mut best, &ledger.charges);
                                let Some(refuse) = refuse else { continue };
                                ledger.give_back().await;
                                let Held { keys, tiers, .. } = &mut ledger.charges;
                                return self.refusal(i, refuse, keys, tiers, legacy);
                            }
                        }
                    }
                }
                LimitKind::Throttle(throttle) => {
                    #[cfg(feature = "metrics")]
                    let asked = tokio::time::Instant::now();
                    let turn = match throttle.line_of(key) {
                        Ok(line) => lines[i].get_or_init(|| line).turn(throttle.max_wait()).await,
                        Err(away) => Err(away),
                    };
                    match turn {
                        Ok(turn) => {
                            #[cfg(feature = "metrics")]
                            if let Some(m) = self.limits.get(i).map(|l| &l.metrics) {
                                m.wait.record(asked.elapsed().as_secs_f64());
                            }
                            throttled = throttled.or(Some(i));
                            turns.0[i] = Some(turn);
                            continue;
                        }
                        Err(away) => {
                            // The turns first: they are given back exactly only while
                            // nobody has claimed after them.
                            turns.give_back();
                            ledger.give_back().await;
                            let key = ledger.charges.keys[i].take().unwrap_or_else(Key::global);
                            #[cfg(feature = "metrics")]
                            if let Some(m) = self.limits.get(i).map(|l| &l.metrics) {
                                match away {
                                    Away::Turned { .. } => {
                                        m.turned_away.increment(1);
                                        m.give_ups.increment(1);
                                    }
                                    Away::Keys { .. } => m.throttle_full.increment(1),
                                }
                            }
                            return Verdict::Refused(match away {
                                Away::Turned { retry_after } => Refusal::TurnedAway { retry_after, key },
                                Away::Keys { retry_after } => Refusal::ThrottleFull { retry_after, key },
                            });
                        }
                    }
                }
            }
            if ledger.charges.charge(i).is_none() {
                continue; // a tier with no store
            }
            let step = Step::of(ledger.check(i).await);
            if let Some(refuse) = self.settle(i, step, &mut best, &ledger.charges) {
                ledger.give_back().await;
                let Held { keys, tiers, .. } = &mut ledger.charges;
                return self.refusal(i, refuse, keys, tiers, legacy);
            }
        }
        ledger.keep(); // admitted for good
        turns.keep();
        #[cfg(feature = "metrics")]
        if best.is_none()
            && let Some(m) = throttled.and_then(|i| self.limits.get(i)).map(|l| &l.metrics)
        {
            // A throttle's admission, with no store's to count it by.
            m.throttled.increment(1);
            return self.allowed_uncounted(best, &ledger.charges.keys, &ledger.charges.tiers, legacy);
        }
        let _ = throttled;
        self.allowed(best, &ledger.charges.keys, &ledger.charges.tiers, legacy)
    }

    /// The verdict of a policy of one in-memory limit (see `single`) for `request`,
    /// made with no array of keys: `None` when the request has no key of its own
    /// (or another policy shape): the general path then answers it.
    #[inline]
    pub(crate) fn decide_single<R: Request + ?Sized>(&self, request: &R, legacy: bool) -> Option<Verdict> {
        if !self.single {
            return None;
        }
        let limit = self.limits.first()?;
        let LimitKind::Store(store) = &limit.limit.kind else { return None };
        let local = store.as_local()?;
        let key = limit.limit.key.read(request).ok()??;
        match Step::of(local.check_n(&key, self.cost).map_err(StoreError::new)) {
            Step::Admitted(decision) if is_own(&decision) => {
                let quota = limit.variants.first().and_then(|v| v.quota(decision.policy_index()));
                #[cfg(feature = "metrics")]
                match quota {
                    Some(quota) => quota.metrics.allowed.increment(1),
                    None => self.metrics.unlimited.increment(1),
                }
                let prefix = quota.map_or(UNNAMED_PREFIX, |q| &q.ratelimit_prefix);
                // The one limit applies: the policy's value made once, if it has one.
                let policy = match &self.full_policy_header {
                    Some(_) => PolicyValue::Precomputed(self.id),
                    None => self.policy_header(&single_key(key), &[None; MAX_LIMITS]),
                };
                Some(Verdict::Allowed(Some(RateLimitFields::new(policy, prefix, &decision, legacy))))
            }
            Step::Admitted(_) => self.allowed(None, &single_key(key), &[None; MAX_LIMITS], legacy).into(),
            Step::Denied(decision) => {
                Some(self.refusal(0, Refuse::Denied(decision), &mut single_key(key), &mut [None; MAX_LIMITS], legacy))
            }
            Step::Outage(decision) => {
                Some(self.refusal(0, Refuse::Outage(decision), &mut single_key(key), &mut [None; MAX_LIMITS], legacy))
            }
            Step::Failed(error) => {
                Some(self.refusal(0, Refuse::Failed(error), &mut single_key(key), &mut [None; MAX_LIMITS], legacy))
            }
        }
    }

    /// [`decide`](Self::decide) for a request whose stores are all in memory and
    /// whose tiers are known (see [`cached_tiers`](Self::cached_tiers)): checked here
    /// and now, with no future.
    pub(crate) fn decide_now(&self, keys: &mut Keys, tiers: &[Option<usize>; MAX_LIMITS], legacy: bool) -> Verdict {
        let mut best: Option<(usize, Decision)> = None;
        let mut ledger = Ledger::new(Viewed { policy: self, keys, tiers }, [None; MAX_LIMITS]);
        for i in 0..self.limits.len() {
            let Some(result) = ledger.check_now(i) else { continue };
            if let Some(refuse) = self.settle(i, Step::of(result), &mut best, &ledger.charges) {
                ledger.refund_now();
                drop(ledger);
                return self.refusal(i, refuse, keys, &mut tiers.clone(), legacy);
            }
        }
        ledger.keep();
        drop(ledger);
        self.allowed(best, keys, tiers, legacy)
    }

    /// What limit `i`'s `step` means for the request: `None` to go on (an admission
    /// not in shadow mode, made from the key's own state, becomes the headers' if it
    /// has the least left); or why it is refused. A limit in shadow mode refuses
    /// nothing: its refusal or failure is counted and logged.
    fn settle(&self, i: usize, step: Step, best: &mut Option<(usize, Decision)>, held: &impl Parts) -> Option<Refuse> {
        let shadow = self.limits.get(i).is_some_and(|l| l.shadow);
        match step {
            Step::Admitted(decision) => {
                if !shadow && is_own(&decision) && best.is_none_or(|(_, b)| decision.remaining() < b.remaining()) {
                    *best = Some((i, decision));
                }
                None
            }
            Step::Denied(decision) | Step::Outage(decision) if shadow => {
                self.shadow_refused(i, &decision, held);
                None
            }
            Step::Failed(error) if shadow => {
                #[cfg(feature = "metrics")]
                if let Some(limit) = self.limits.get(i) {
                    limit.metrics.shadow_unavailable.increment(1);
                }
                tracing::warn!(
                    target: "weir_http", policy = %self.name, limit = self.limit_name(i), %error,
                    "shadow: a limit's store failed; the request goes on"
                );
                None
            }
            Step::Denied(decision) => Some(Refuse::Denied(decision)),
            Step::Outage(decision) => Some(Refuse::Outage(decision)),
            Step::Failed(error) => Some(Refuse::Failed(error)),
        }
    }

    /// The refusal of limit `i` for `refuse`; every admission given back already.
    fn refusal(
        &self,
        i: usize,
        refuse: Refuse,
        keys: &mut Keys,
        tiers: &mut [Option<usize>; MAX_LIMITS],
        legacy: bool,
    ) -> Verdict {
        match refuse {
            Refuse::Denied(decision) => {
                let (i, decision) = self.longest_wait(i, decision, keys, tiers);
                self.denied(i, decision, keys, tiers, legacy)
            }
            Refuse::Outage(decision) => {
                self.count_unavailable(i);
                let key = keys[i].take().unwrap_or_else(Key::global);
                let error = StoreError::new(OUTAGE);
                Verdict::Refused(Refusal::Unavailable { error, key, retry_after: decision.retry_after() })
            }
            Refuse::Failed(error) => {
                self.count_unavailable(i);
                let key = keys[i].take().unwrap_or_else(Key::global);
                Verdict::Refused(Refusal::Unavailable { error, key, retry_after: None })
            }
        }
    }

    /// Counts and logs a refusal by limit `i`, in shadow mode: what would have been
    /// refused.
    fn shadow_refused(&self, i: usize, decision: &Decision, held: &impl Parts) {
        let (keys, tiers) = held.parts();
        let tier = tiers.get(i).copied().flatten();
        #[cfg(feature = "metrics")]
        if let Some(quota) = self.variant(i, tier).and_then(|v| v.quota(decision.policy_index())) {
            quota.metrics.shadow_denied.increment(1);
        }
        let (quota, _) = self.quota_text(i, tier, decision);
        let cause = match decision.deny_reason() {
            _ if crate::all_or_nothing::is_outage(decision) => "the store is unavailable",
            Some(weir_rl_core::DenyReason::KeyCapacity) => "the store is full of other keys",
            _ => "rate limited",
        };
        let key = keys.get(i).and_then(Option::as_ref);
        tracing::info!(
            target: "weir_http", policy = %self.name, limit = self.limit_name(i), quota, key = key.map(tracing::field::display),
            cause, retry_after_s = decision.retry_after().map(retry_after_secs), "shadow: would have refused"
        );
    }

    /// Counts and logs a request without the key of limit `i`, in shadow mode (which
    /// would have refused it with a 400).
    fn shadow_unidentified(&self, i: usize, path: &str) {
        #[cfg(feature = "metrics")]
        if let Some(limit) = self.limits.get(i) {
            limit.metrics.shadow_unidentified.increment(1);
        }
        tracing::info!(
            target: "weir_http", policy = %self.name, limit = self.limit_name(i), path,
            "shadow: would have refused: the client is not identified"
        );
    }

    /// Limit `i`'s name.
    fn limit_name(&self, i: usize) -> &str {
        self.limits.get(i).and_then(|l| l.limit.name.as_deref()).unwrap_or("")
    }

    /// Of limit `denier`'s denial and the denials of the limits after it (not in
    /// shadow mode), the one with the longest wait, and its limit: a request retried
    /// after the first denial's wait would be refused again by a later limit with a
    /// longer one.
    ///
    /// Only what costs nothing but a read of memory is asked, so that a refused
    /// request cannot make more work than it did before it was refused: each later
    /// in-memory store as [`local_wait_of`](Self::local_wait_of) says (consuming
    /// nothing). A remote store is not asked (each refusal would cost it a round
    /// trip, and a check admitted there may not be given back), nor is a tier
    /// looked up: a tiered limit is asked only if the client's tier is cached (then
    /// written to `tiers`). A throttle says nothing.
    fn longest_wait(
        &self,
        denier: usize,
        denial: Decision,
        keys: &Keys,
        tiers: &mut [Option<usize>; MAX_LIMITS],
    ) -> (usize, Decision) {
        let mut longest = (denier, denial);
        for i in denier + 1..self.limits.len() {
            let Some(key) = &keys[i] else { continue };
            if self.limits[i].shadow {
                continue;
            }
            if let LimitKind::Tiered(t) = &self.limits[i].limit.kind
                && tiers[i].is_none()
            {
                tiers[i] = t.cached(key);
            }
            let Some(store) = self.store_of(i, tiers).and_then(Store::as_local) else { continue };
            if let Some(decision) = self.local_wait_of(store, key)
                && decision.retry_after() > longest.1.retry_after()
            {
                longest = (i, decision);
            }
        }
        longest
    }

    /// The denial `store` would give this policy's request for `key`, consuming
    /// nothing: `None` if it would admit it (its snapshot has room, or a check
    /// admitted it and was given back at once) or fails. A refund that fails is
    /// logged (the admission then stays spent).
    fn local_wait_of(&self, store: &(dyn KeyedLimiter<Key> + Send + Sync), key: &Key) -> Option<Decision> {
        let n = self.cost;
        if store.snapshot(key).remaining() >= n {
            return None;
        }
        let decision = store.check_n(key, n).ok()?;
        if decision.is_allowed() {
            if let Err(error) = store.refund(key, n, &decision) {
                tracing::warn!(
                    target: "weir_http", policy = %self.name, key = %key, %error,
                    "refund failed: a check made only to learn a wait stays spent"
                );
            }
            return None;
        }
        Some(decision)
    }

    /// The refusal for limit `i`'s denial.
    fn denied(
        &self,
        i: usize,
        decision: Decision,
        keys: &mut Keys,
        tiers: &[Option<usize>; MAX_LIMITS],
        legacy: bool,
    ) -> Verdict {
        #[cfg(feature = "metrics")]
        if let Some(quota) = self.variant(i, tiers[i]).and_then(|v| v.quota(decision.policy_index())) {
            match decision.deny_reason() {
                Some(weir_rl_core::DenyReason::KeyCapacity) => quota.metrics.key_capacity.increment(1),
                _ => quota.metrics.denied.increment(1),
            }
        }
        let prefix = self.ratelimit_prefix(i, tiers[i], &decision);
        let headers = RateLimitFields::new(self.policy_header(keys, tiers), prefix, &decision, legacy);
        let key = keys[i].take().unwrap_or_else(Key::global);
        Verdict::Refused(Refusal::Denied { decision, limit: i, tier: tiers[i], key, headers })
    }

    /// The admission, with the headers of `best` (limit, decision).
    fn allowed(
        &self,
        best: Option<(usize, Decision)>,
        keys: &Keys,
        tiers: &[Option<usize>; MAX_LIMITS],
        legacy: bool,
    ) -> Verdict {
        #[cfg(feature = "metrics")]
        match best.and_then(|(i, d)| self.variant(i, tiers[i]).and_then(|v| v.quota(d.policy_index()))) {
            Some(quota) => quota.metrics.allowed.increment(1),
            None => self.metrics.unlimited.increment(1),
        }
        self.allowed_uncounted(best, keys, tiers, legacy)
    }

    /// [`allowed`](Self::allowed), counted by the caller.
    fn allowed_uncounted(
        &self,
        best: Option<(usize, Decision)>,
        keys: &Keys,
        tiers: &[Option<usize>; MAX_LIMITS],
        legacy: bool,
    ) -> Verdict {
        Verdict::Allowed(best.map(|(i, decision)| {
            let prefix = self.ratelimit_prefix(i, tiers[i], &decision);
            RateLimitFields::new(self.policy_header(keys, tiers), prefix, &decision, legacy)
        }))
    }

    /// Counts an `unavailable` answer of limit `i` (`metrics` feature).
    #[inline]
    fn count_unavailable(&self, i: usize) {
        #[cfg(feature = "metrics")]
        if let Some(limit) = self.limits.get(i) {
            limit.metrics.unavailable.increment(1);
        }
        let _ = i;
    }

    /// Counts an `unidentified` answer of limit `i` (`metrics` feature).
    #[inline]
    pub(crate) fn count_unidentified(&self, i: usize) {
        #[cfg(feature = "metrics")]
        if let Some(limit) = self.limits.get(i) {
            limit.metrics.unidentified.increment(1);
        }
        let _ = i;
    }

    /// The store limit `i` checked (its tier's, for a tiered limit).
    fn store_of<'a>(&'a self, i: usize, tiers: &[Option<usize>; MAX_LIMITS]) -> Option<&'a Store> {
        match &self.limits.get(i)?.limit.kind {
            LimitKind::Store(store) => Some(store),
            LimitKind::Tiered(t) => t.store(tiers[i]?),
            LimitKind::Throttle(_) => None,
        }
    }

    /// The quotas limit `i` applied: its tier's (`tier`), for a tiered limit.
    fn variant(&self, i: usize, tier: Option<usize>) -> Option<&Variant> {
        let limit = self.limits.get(i)?;
        match &limit.limit.kind {
            LimitKind::Tiered(_) => limit.variants.get(tier?),
            _ => limit.variants.first(),
        }
    }

    /// `"name";r=` for the quota of limit `i` (in its tier `tier`) that made `decision`.
    fn ratelimit_prefix(&self, i: usize, tier: Option<usize>, decision: &Decision) -> &[u8] {
        let quota = self.variant(i, tier).and_then(|v| v.quota(decision.policy_index()));
        quota.map_or(UNNAMED_PREFIX, |q| &q.ratelimit_prefix)
    }

    /// The name of the quota of limit `i` (in its tier `tier`) that made `decision`,
    /// as events and problem bodies show it, and the end of a problem body naming it
    /// (none if the quota is unknown).
    pub(crate) fn quota_text(&self, i: usize, tier: Option<usize>, decision: &Decision) -> (&str, Option<&[u8]>) {
        let quota = self.variant(i, tier).and_then(|v| v.quota(decision.policy_index()));
        quota.map_or(("", None), |q| (&q.name, Some(&q.problem_tail)))
    }

    /// `RateLimit-Policy` when every limit applies with its one variant.
    pub(crate) fn full_policy_header(&self) -> Option<&Bytes> {
        self.full_policy_header.as_ref()
    }

    /// `RateLimit-Policy`: the quotas of every limit that applied to the request.
    fn policy_header(&self, keys: &Keys, tiers: &[Option<usize>; MAX_LIMITS]) -> PolicyValue {
        let all_apply = self.limits.iter().zip(keys).all(|(l, k)| l.shadow || k.is_some());
        if all_apply && self.full_policy_header.is_some() {
            return PolicyValue::Precomputed(self.id);
        }
        let items: Vec<&str> = (0..self.limits.len())
            .filter(|&i| keys[i].is_some() && !self.limits[i].shadow)
            .filter_map(|i| self.variant(i, tiers[i]))
            .map(|v| &*v.items)
            .collect();
        PolicyValue::Made(Bytes::from(items.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_rl_core::Policy as Quota;

    use crate::test_support::Open;

    fn limit(quota_limit: u64) -> Limit {
        Limit::new(KeySource::global(), Store::local(Open([Quota::new(quota_limit, Duration::from_secs(60))])))
    }

    #[test]
    fn build_names_the_option_it_refuses() {
        let e = Policy::builder("api").cost(0).build().unwrap_err();
        assert_eq!((e.clone(), e.option()), (PolicyError::ZeroCost { policy: "api".into() }, "cost"));

        let e = Policy::builder("api").limit(limit(10)).limit(limit(4)).cost(5).build().unwrap_err();
        let above = PolicyError::CostAboveQuota { policy: "api".into(), cost: 5, quota: "minute".into(), limit: 4 };
        assert_eq!(e, above);
        assert!(e.to_string().starts_with("cost: "), "{e}");

        let nine = (0..=MAX_LIMITS).fold(Policy::builder("api"), |p, _| p.limit(limit(10)));
        let e = nine.build().unwrap_err();
        assert_eq!((e.clone(), e.option()), (PolicyError::TooManyLimits { policy: "api".into(), limits: 9 }, "limit"));

        let policy = Policy::builder("api").limit(limit(10)).cost(10).build().unwrap();
        assert_eq!((policy.name(), policy.limits().len(), policy.cost()), ("api", 1, 10));
    }
}
