//! [`Limits`]: the routes, skip rules and policies of one configuration, and the
//! request path through them, top to bottom: skip → policy → keys → tier → stores
//! → the answer.

use crate::grpc::GrpcStatus;
use crate::key::Key;
use crate::policy::{CompiledPolicy, Keys, MAX_LIMITS, Policy, Refusal as Reason, Verdict as Decided, compile};
use crate::request::Request;
use crate::response::{
    Cause, Denied, NO_PEER_ADDRESS, ProblemHeads, RateLimitFields, Rejection, problem_body, retry_after_secs,
};
use bytes::Bytes;
use core::any::Any;
use core::fmt;
use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::Duration;
use weir_rl_core::{Decision, DenyReason, KeyedLimiter};

/// Which [`LimitsBuilder`] option was refused, and why. (Policies are checked when
/// they are built: see [`PolicyError`](crate::PolicyError).)
///
/// ```
/// use weir_http::{BuildError, Limits, Policy};
///
/// let error = Limits::builder().route("auth", Policy::builder("auth").build()?).build().unwrap_err();
/// assert_eq!(error, BuildError::Route { prefix: "auth".into() });
/// assert_eq!(error.to_string(), "route: `auth` does not start with `/`");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A [`route`](LimitsBuilder::route) prefix that does not start with `/`: no
    /// request path would match it.
    Route {
        /// The prefix given.
        prefix: String,
    },
    /// A [`route`](LimitsBuilder::route) prefix given twice: the longest match
    /// wins, so the later policy would never apply.
    DuplicateRoute {
        /// The prefix.
        prefix: String,
        /// The policy it was given first.
        first: String,
        /// The policy it was given again.
        second: String,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Route { prefix } => write!(f, "route: `{prefix}` does not start with `/`"),
            Self::DuplicateRoute { prefix, first, second } => write!(
                f,
                "route: `{prefix}` is claimed by policy `{first}` and again by policy `{second}`, which would never \
                 apply; give each prefix to one policy"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// The rate limits of one configuration: route prefixes and their [`Policy`]s, a
/// default policy, skip rules, and how answers are written. What an adapter
/// (weir-tower, weir-actix) runs each request through:
///
/// ```text
/// check(request)
///   ─► skip?          a skip path or method (and the adapter's own rule)   → Check::Skipped
///   ─► policy         the longest route prefix, or the default; none       → Check::Unlimited
///   ─► keys           one per limit; a missing or refused key              → Decided(Refused): 400
///   ─► tiers          the cached tier of each tiered limit; a miss         → Check::Pending
///   ─► stores         in order, all or nothing (refunds; the longest wait) → Decided(Allowed | Refused)
///                     a remote store or a throttle                         → Check::Pending
/// Pending::decide(&limits).await                                           → Verdict
/// Verdict::Allowed(fields): the service's response + the RateLimit fields
/// Verdict::Refused(refusal): limits.refused(request, refusal) → status, fields, body, gRPC status
/// ```
///
/// Immutable once built, `Send` and `Sync`: share it in an `Arc` (an adapter
/// does).
///
/// ```
/// use std::time::Duration;
/// use weir_http::{Check, Key, Limit, Limits, Policy, Verdict};
/// use weir_keyed::{KeyedConfig, KeyedGcra};
/// use weir_rl_core::Quota;
///
/// let per_ip: KeyedGcra<Key> = KeyedGcra::gcra(Quota::per_minute(2)?, KeyedConfig::builder(1_000).build()?);
/// let limits = Limits::builder()
///     .policy(Policy::builder("api").limit(Limit::per_ip(per_ip)).build()?)
///     .skip_path("/health")
///     .build()?;
/// # #[derive(Clone, Copy)] struct R(&'static str);
/// # impl weir_http::Request for R {
/// #     fn method(&self) -> &str { "GET" }
/// #     fn path(&self) -> &str { self.0 }
/// #     fn header(&self, _: &str) -> Option<&[u8]> { None }
/// #     fn header_lines_rev(&self, _: &str, _: &mut dyn FnMut(&[u8]) -> std::ops::ControlFlow<()>) {}
/// #     fn peer_ip(&self) -> Option<std::net::IpAddr> { "192.0.2.7".parse().ok() }
/// #     fn user(&self) -> Option<weir_http::User> { None }
/// # }
/// // `R("/")`: a request to `/` from 192.0.2.7 (any `weir_http::Request`).
/// for _ in 0..2 {
///     let Check::Decided(Verdict::Allowed(Some(fields))) = limits.check(&R("/")) else { panic!() };
///     assert!(fields.ratelimit().starts_with(b"\"minute\";r="));
/// }
/// let Check::Decided(Verdict::Refused(refusal)) = limits.check(&R("/")) else { panic!() };
/// let answer = limits.refused(&R("/"), refusal);
/// assert_eq!((answer.status(), answer.retry_after_secs()), (429, Some(30)));
/// assert!(matches!(limits.check(&R("/health")), Check::Skipped));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Limits {
    /// Route prefixes and their policies, longest prefix first.
    routes: Vec<(Box<str>, usize)>,
    /// The policy for requests no route matches.
    default: Option<usize>,
    policies: Vec<CompiledPolicy>,
    skip_paths: Vec<Box<str>>,
    skip_methods: Vec<Box<str>>,
    legacy_headers: bool,
    problem: ProblemHeads,
    no_peer_detail: Cow<'static, str>,
    /// What an adapter derived from these limits (see [`adapter_data`](Limits::adapter_data)).
    adapter: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl Limits {
    /// Limits applying `policy` to every request.
    pub fn new(policy: Policy) -> Self {
        Self::builder().policy(policy).finish()
    }

    /// Limits on each client IP (the peer address, IPv6 by `/64`) with the
    /// in-memory `store`, with the default headers (`RateLimit`, `RateLimit-Policy`).
    pub fn per_ip(store: impl KeyedLimiter<Key> + Send + Sync + 'static) -> Self {
        Self::new(Policy::single("per-ip", crate::Limit::per_ip(store)))
    }

    /// A builder: policies per route, skip rules, headers and bodies.
    pub fn builder() -> LimitsBuilder {
        LimitsBuilder {
            routes: Vec::new(),
            default: None,
            policies: Vec::new(),
            skip_paths: Vec::new(),
            skip_methods: Vec::new(),
            legacy_headers: false,
            problem_type: "about:blank".into(),
            no_peer_detail: Cow::Borrowed(NO_PEER_ADDRESS),
            errors: Vec::new(),
        }
    }

    /// The policy for `path`: the longest route prefix it is under, or the default.
    pub fn policy_for(&self, path: &str) -> Option<PolicyId> {
        self.routes
            .iter()
            .find(|(prefix, _)| {
                path.strip_prefix(&**prefix)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/'))
            })
            .map(|&(_, policy)| policy)
            .or(self.default)
            .map(PolicyId)
    }

    /// A policy's name.
    pub fn policy_name(&self, policy: PolicyId) -> &str {
        self.policies.get(policy.0).map_or("", |p| &p.name)
    }

    /// Whether a skip path or method exempts `request`.
    pub fn skips<R: Request + ?Sized>(&self, request: &R) -> bool {
        (!self.skip_methods.is_empty() && self.skip_methods.iter().any(|m| **m == *request.method()))
            || (!self.skip_paths.is_empty() && self.skip_paths.iter().any(|p| **p == *request.path()))
    }

    /// The policies, in the order they were added: their [`PolicyId`]s.
    pub fn policies(&self) -> impl Iterator<Item = PolicyId> + '_ {
        (0..self.policies.len()).map(PolicyId)
    }

    /// The `RateLimit-Policy` value of `policy` when every limit of it applies,
    /// made when the configuration was built (`None` for a policy whose value
    /// depends on the request: a tiered limit, a limit a request may skip).
    pub fn policy_field(&self, policy: PolicyId) -> Option<&Bytes> {
        self.policies.get(policy.0)?.full_policy_header()
    }

    /// What an adapter derives from these limits once (the header values of
    /// [`policy_field`](Self::policy_field) in its framework's type, say), made by
    /// `init` on first use and kept as long as these limits: a configuration
    /// reloaded is a new [`Limits`], with its own. `None` if another type was kept
    /// first (one adapter per `Limits`).
    pub fn adapter_data<T: Any + Send + Sync>(&self, init: impl FnOnce(&Limits) -> T) -> Option<&T> {
        self.adapter.get_or_init(|| Box::new(init(self))).downcast_ref()
    }

    /// Whether the legacy `X-RateLimit-*` fields are written.
    pub fn legacy_headers(&self) -> bool {
        self.legacy_headers
    }

    /// Decides `request` as far as it can without waiting (see [`Limits`]).
    pub fn check<R: Request + ?Sized>(&self, request: &R) -> Check {
        self.check_unless(request, |_| false)
    }

    /// [`check`](Self::check), with one more skip rule of the adapter's (asked
    /// only of a request a policy applies to and no skip path or method exempts).
    #[inline]
    pub fn check_unless<R: Request + ?Sized>(&self, request: &R, skip: impl FnOnce(&R) -> bool) -> Check {
        let Some(policy_index) = self.policy_for(request.path()).map(|p| p.0) else { return Check::Unlimited };
        let Some(policy) = self.policies.get(policy_index) else { return Check::Unlimited };
        if self.skips(request) || skip(request) {
            #[cfg(feature = "metrics")]
            policy.metrics.skipped.increment(1);
            return Check::Skipped;
        }
        if let Some(decided) = policy.decide_single(request, self.legacy_headers) {
            return Check::Decided(Verdict::of(policy_index, decided));
        }
        let mut keys: Keys = Default::default();
        if let Err((limit, too_long)) = policy.keys(request, &mut keys) {
            policy.count_unidentified(limit);
            let no_peer = too_long.is_none() && policy.lacks_peer_address(limit, request);
            let reason = Reason::Unidentified { limit, too_long: too_long.map(Box::from), no_peer };
            return Check::Decided(Verdict::Refused(Refusal { policy: policy_index, reason }));
        }
        let (tiers, ready) = policy.cached_tiers(&keys);
        if ready {
            // Every store in memory, every tier cached: decided here, no future.
            return Check::Decided(Verdict::of(
                policy_index,
                policy.decide_now(&mut keys, &tiers, self.legacy_headers),
            ));
        }
        Check::Pending(Pending { policy: policy_index, keys, tiers })
    }

    /// The answer to a refused request: its status, `Retry-After`, `RateLimit`
    /// fields, problem+json body and gRPC status, as data. Emits a `tracing` event
    /// (target `weir_http`): `debug` for a refusal, `warn` for a store that failed.
    pub fn refused<'a, R: Request + ?Sized>(&'a self, request: &R, refusal: Refusal) -> Refused<'a> {
        let compiled = self.policies.get(refusal.policy);
        let policy = compiled.map_or("", |p| &*p.name);
        let path = request.path();
        let answer = |cause, quota, key, decision, retry_after, fields, tail, detail| Refused {
            limits: self,
            policy,
            cause,
            quota,
            key,
            decision,
            retry_after,
            fields,
            tail,
            detail,
        };
        let words = |cause: Cause| Cow::Borrowed(cause.words().1);
        match refusal.reason {
            Reason::Denied { decision, limit, tier, key, headers }
                if decision.deny_reason() == Some(DenyReason::KeyCapacity) =>
            {
                // The store is full of other clients: no bucket of this client's to
                // describe in `RateLimit` fields.
                let (quota, tail) = compiled.map_or(("", None), |p| p.quota_text(limit, tier, &decision));
                let retry_after = decision.retry_after();
                tracing::debug!(
                    target: "weir_http", policy, quota, key = %key, path,
                    retry_after_s = retry_after.map(retry_after_secs), "refused: the store is full of other keys"
                );
                drop(headers);
                let cause = Cause::KeyCapacity;
                answer(cause, quota, Some(key), Some(decision), retry_after, None, tail, words(cause))
            }
            Reason::Denied { decision, limit, tier, key, headers } => {
                let (quota, tail) = compiled.map_or(("", None), |p| p.quota_text(limit, tier, &decision));
                let retry_after = decision.retry_after();
                tracing::debug!(
                    target: "weir_http", policy, quota, key = %key, path,
                    retry_after_s = retry_after.map(retry_after_secs), "rate limited"
                );
                let cause = Cause::RateLimited;
                answer(cause, quota, Some(key), Some(decision), retry_after, Some(headers), tail, words(cause))
            }
            Reason::TurnedAway { retry_after, key } => {
                tracing::debug!(
                    target: "weir_http", policy, key = %key, path,
                    retry_after_s = retry_after_secs(retry_after), "turned away by the throttle"
                );
                let cause = Cause::RateLimited;
                answer(cause, "throttle", Some(key), None, Some(retry_after), None, None, words(cause))
            }
            Reason::ThrottleFull { retry_after, key } => {
                // As a store full of other keys: no line of this client's to describe.
                tracing::debug!(
                    target: "weir_http", policy, key = %key, path,
                    retry_after_s = retry_after_secs(retry_after), "refused: the throttle is full of other keys"
                );
                let cause = Cause::KeyCapacity;
                answer(cause, "throttle", Some(key), None, Some(retry_after), None, None, words(cause))
            }
            Reason::Unavailable { error, key, retry_after } => {
                tracing::warn!(target: "weir_http", policy, key = %key, path, %error, "rate limiter unavailable");
                let cause = Cause::Unavailable;
                answer(cause, "", Some(key), None, retry_after, None, None, words(cause))
            }
            Reason::Unidentified { too_long: Some(name), .. } => {
                tracing::debug!(target: "weir_http", policy, path, header = %name, "client key too long");
                let detail = format!(
                    "The request's `{name}` header is longer than {} bytes, the longest client key this limit \
                     accepts.",
                    crate::MAX_KEY_BYTES
                );
                answer(Cause::Unidentified, "", None, None, None, None, None, Cow::Owned(detail))
            }
            Reason::Unidentified { no_peer: true, .. } => {
                tracing::debug!(target: "weir_http", policy, path, "client not identified: no peer address");
                let detail = Cow::Borrowed(&*self.no_peer_detail);
                answer(Cause::NoPeerAddress, "", None, None, None, None, None, detail)
            }
            Reason::Unidentified { limit, .. } => {
                tracing::debug!(target: "weir_http", policy, path, "client not identified");
                let detail = compiled.map_or("", |p| p.missing_detail(limit));
                answer(Cause::Unidentified, "", None, None, None, None, None, Cow::Borrowed(detail))
            }
        }
    }
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("routes", &self.routes)
            .field("default", &self.default)
            .field("policies", &self.policies.iter().map(|p| &*p.name).collect::<Vec<_>>())
            .field("skip_paths", &self.skip_paths)
            .field("skip_methods", &self.skip_methods)
            .field("legacy_headers", &self.legacy_headers)
            .finish_non_exhaustive()
    }
}

/// Which policy of a [`Limits`] applies to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyId(pub(crate) usize);

impl PolicyId {
    /// Its place among the [`Limits::policies`], from 0.
    pub fn index(self) -> usize {
        self.0
    }
}

/// Builds [`Limits`].
pub struct LimitsBuilder {
    routes: Vec<(Box<str>, usize)>,
    default: Option<usize>,
    policies: Vec<CompiledPolicy>,
    skip_paths: Vec<Box<str>>,
    skip_methods: Vec<Box<str>>,
    legacy_headers: bool,
    problem_type: String,
    no_peer_detail: Cow<'static, str>,
    errors: Vec<BuildError>,
}

impl LimitsBuilder {
    fn add(&mut self, policy: Policy) -> usize {
        self.policies.push(compile(policy, PolicyId(self.policies.len())));
        self.policies.len() - 1
    }

    /// The policy for every request no [`route`](Self::route) matches (none: such
    /// requests are not limited).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.default = Some(self.add(policy));
        self
    }

    /// The policy for requests whose path is `prefix` or under it (`/auth` matches
    /// `/auth` and `/auth/login`, not `/authors`). The longest matching prefix wins.
    /// A prefix ending in `/` matches every path under it: a gRPC service is
    /// `/package.Service/`, one of its methods `/package.Service/Method`. A prefix
    /// given twice is refused ([`BuildError::DuplicateRoute`]).
    pub fn route(mut self, prefix: &str, policy: Policy) -> Self {
        if !prefix.starts_with('/') {
            self.errors.push(BuildError::Route { prefix: prefix.to_owned() });
            return self;
        }
        if let Some(&(_, first)) = self.routes.iter().find(|(p, _)| **p == *prefix) {
            let first = self.policies.get(first).map_or_else(String::new, |p| p.name.to_string());
            self.errors.push(BuildError::DuplicateRoute {
                prefix: prefix.to_owned(),
                first,
                second: policy.name().into(),
            });
            return self;
        }
        let index = self.add(policy);
        self.routes.push((prefix.into(), index));
        self
    }

    /// Requests to exactly this path are not limited (a health check, say).
    pub fn skip_path(mut self, path: &str) -> Self {
        self.skip_paths.push(path.into());
        self
    }

    /// Requests of these methods are not limited (nor given `RateLimit` fields):
    /// `["OPTIONS"]` lets CORS preflights through. Methods compare exactly, as
    /// HTTP's are case-sensitive. Adds to the methods given before. **Do not exempt
    /// `HEAD`** where a framework answers it with the `GET` handler (axum does).
    pub fn skip_methods<I, S>(mut self, methods: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.skip_methods.extend(methods.into_iter().map(|m| Box::from(m.as_ref())));
        self
    }

    /// Whether to add the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` fields besides `RateLimit` and `RateLimit-Policy`
    /// (default off: the IETF fields alone; `legacy_headers = true` in the file).
    /// Three more header values per response: turn them on for clients that read
    /// only the `X-` ones.
    pub fn legacy_headers(self, on: bool) -> Self {
        Self { legacy_headers: on, ..self }
    }

    /// The `type` URI of the problem+json bodies (default `about:blank`).
    pub fn problem_type(self, uri: &str) -> Self {
        Self { problem_type: uri.to_owned(), ..self }
    }

    /// The `detail` of a 400 for a per-IP limit on a request with no peer address:
    /// what the server's operator must do, in the adapter's words (the default
    /// says to give the limiter the peer address).
    pub fn no_peer_detail(self, detail: impl Into<Cow<'static, str>>) -> Self {
        Self { no_peer_detail: detail.into(), ..self }
    }

    /// The limits, or the first route refused.
    pub fn build(self) -> Result<Limits, BuildError> {
        if let Some(error) = self.errors.first() {
            return Err(error.clone());
        }
        Ok(self.finish())
    }

    fn finish(mut self) -> Limits {
        // Longest prefix first, so the first match is the longest.
        self.routes.sort_by_key(|route| core::cmp::Reverse(route.0.len()));
        Limits {
            routes: self.routes,
            default: self.default,
            policies: self.policies,
            skip_paths: self.skip_paths,
            skip_methods: self.skip_methods,
            legacy_headers: self.legacy_headers,
            problem: ProblemHeads::new(&self.problem_type, &self.no_peer_detail),
            no_peer_detail: self.no_peer_detail,
            adapter: OnceLock::new(),
        }
    }
}

impl fmt::Debug for LimitsBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitsBuilder").field("routes", &self.routes).finish_non_exhaustive()
    }
}

/// What [`Limits::check`] found.
// Made once per request and moved once (a pending request into the adapter's
// future, boxed there): a box of its own would cost every request that waits.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[must_use = "a check says whether the request goes on"]
pub enum Check {
    /// No policy applies to the request: it goes on, with no `RateLimit` fields.
    Unlimited,
    /// A skip rule exempted it: it goes on, with no `RateLimit` fields.
    Skipped,
    /// Decided without waiting.
    Decided(Verdict),
    /// A remote store, a tier lookup or a throttle to wait on:
    /// [`decide`](Pending::decide) it.
    Pending(Pending),
}

/// What a policy decided for a request.
#[derive(Debug)]
#[must_use = "a verdict says whether the request goes on"]
pub enum Verdict {
    /// Admitted: the request goes on, and its response gets these `RateLimit`
    /// fields (none if no limit applied to it).
    Allowed(Option<RateLimitFields>),
    /// Refused: answer it with [`Limits::refused`].
    Refused(Refusal),
}

impl Verdict {
    fn of(policy: usize, decided: Decided) -> Self {
        match decided {
            Decided::Allowed(fields) => Self::Allowed(fields),
            Decided::Refused(reason) => Self::Refused(Refusal { policy, reason }),
        }
    }
}

/// Why a request was refused, to be answered by [`Limits::refused`].
#[derive(Debug)]
pub struct Refusal {
    policy: usize,
    reason: Reason,
}

/// A request whose decision waits on a remote store, a tier lookup or a throttle.
/// Dropped before it is decided (the client went away), it gives back what
/// in-memory stores admitted and the turns it took in throttles.
#[derive(Debug)]
#[must_use = "a pending request is decided by `decide`"]
pub struct Pending {
    policy: usize,
    keys: Keys,
    tiers: [Option<usize>; MAX_LIMITS],
}

impl Pending {
    /// Decides the request against `limits`, the [`Limits`] that checked it.
    /// Cancellation-safe: see [`Pending`].
    pub async fn decide(self, limits: &Limits) -> Verdict {
        let Self { policy, keys, tiers } = self;
        match limits.policies.get(policy) {
            Some(compiled) => Verdict::of(policy, compiled.decide(keys, tiers, limits.legacy_headers).await),
            None => Verdict::Allowed(None),
        }
    }
}

/// The answer to a refused request, as data: an adapter writes its status,
/// `Retry-After`, `RateLimit` fields and body (or, for a gRPC call, its
/// [`grpc`](Self::grpc) status) in its framework's types.
#[derive(Debug)]
pub struct Refused<'a> {
    limits: &'a Limits,
    policy: &'a str,
    cause: Cause,
    quota: &'a str,
    key: Option<Key>,
    decision: Option<Decision>,
    retry_after: Option<Duration>,
    fields: Option<RateLimitFields>,
    tail: Option<&'a [u8]>,
    detail: Cow<'a, str>,
}

impl Refused<'_> {
    /// Why, finely (which words the body says).
    pub fn cause(&self) -> Cause {
        self.cause
    }

    /// Why.
    pub fn rejection(&self) -> Rejection {
        self.cause.rejection()
    }

    /// The HTTP status: 429, 400 or 503.
    pub fn status(&self) -> u16 {
        self.rejection().status()
    }

    /// The policy's name.
    pub fn policy(&self) -> &str {
        self.policy
    }

    /// The deciding quota's name (empty if none decided).
    pub fn quota(&self) -> &str {
        self.quota
    }

    /// The key the request counted against, if it had one.
    pub fn key(&self) -> Option<&Key> {
        self.key.as_ref()
    }

    /// The limiter's decision, if a limiter denied it.
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.as_ref()
    }

    /// When to try again, if known.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// `Retry-After`, in whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(retry_after_secs)
    }

    /// The `RateLimit` fields of a refusal by a limit (none for a full store, a
    /// throttle, a missing key or an outage: no bucket of the client's to describe).
    pub fn fields(&self) -> Option<&RateLimitFields> {
        self.fields.as_ref()
    }

    /// The fields, taken out (to write them without a copy).
    pub fn take_fields(&mut self) -> Option<RateLimitFields> {
        self.fields.take()
    }

    /// What went wrong, in a sentence (the body's `detail`, before the retry time).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// What a custom body is made from.
    pub fn denied(&self) -> Denied<'_> {
        Denied {
            rejection: self.rejection(),
            policy: self.policy,
            quota: self.quota,
            retry_after_secs: self.retry_after_secs(),
            decision: self.decision.as_ref(),
            detail: &self.detail,
        }
    }

    /// The RFC 9457 problem+json body (content type
    /// [`PROBLEM_JSON`](crate::PROBLEM_JSON)): `type`, `title`, `status`, `detail`,
    /// and `retry_after`, `policy` and `quota` when known.
    pub fn problem_json(&self) -> Bytes {
        problem_body(&self.limits.problem, self.cause, &self.denied(), self.tail)
    }

    /// The gRPC status a gRPC call is refused with (see [`GrpcStatus`]).
    pub fn grpc(&self) -> GrpcStatus {
        GrpcStatus::new(self.cause, &self.denied(), self.retry_after)
    }
}
