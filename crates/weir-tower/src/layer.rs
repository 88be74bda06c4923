//! [`RateLimitLayer`] and its [`RateLimit`] service.

use crate::key::Key;
use crate::policy::{CompiledPolicy, Keys, MAX_LIMITS, Policy, Refusal, Verdict, compile};
use crate::response::{BodyStyle, Cause, Denied, DenyBody, RateLimitHeaders, Rejection, retry_after_secs};
use bytes::Bytes;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use http::request::Parts;
use http::{Request, Response};
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;
use tower_service::Service;
use weir_rl_core::__private::sync::{AtomicBool, Ordering};
use weir_rl_core::{Decision, DenyReason, KeyedLimiter};

type SkipFn = dyn Fn(&Parts) -> bool + Send + Sync;
type HookFn = dyn Fn(&LimitEvent<'_>) + Send + Sync;
type VerdictFuture = Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// What the on-limit hook is told: a request the middleware answered itself.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct LimitEvent<'a> {
    /// The request (without its body).
    pub request: &'a Parts,
    /// The route policy's name.
    pub policy: &'a str,
    /// Why it was refused.
    pub rejection: Rejection,
    /// The deciding quota's name (empty if none decided).
    pub quota: &'a str,
    /// The key it counted against, if it had one.
    pub key: Option<&'a Key>,
    /// The limiter's decision, if a limiter denied it.
    pub decision: Option<&'a Decision>,
    /// When to try again, if known.
    pub retry_after: Option<Duration>,
}

/// Which [`RateLimitLayerBuilder`] option was refused, and why. (Policies are
/// checked when they are built: see [`PolicyError`](crate::PolicyError).)
///
/// ```
/// use weir_tower::{BuildError, Policy, RateLimitLayer};
///
/// let error = RateLimitLayer::builder().route("auth", Policy::builder("auth").build()?).build().unwrap_err();
/// assert_eq!(error, BuildError::Route { prefix: "auth".into() });
/// assert_eq!(error.to_string(), "route: `auth` does not start with `/`");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A [`route`](RateLimitLayerBuilder::route) prefix that does not start with
    /// `/`: no request path would match it.
    Route {
        /// The prefix given.
        prefix: String,
    },
    /// A [`route`](RateLimitLayerBuilder::route) prefix given twice: the longest
    /// match wins, so the later policy would never apply.
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

struct Shared {
    /// Route prefixes and their policies, longest prefix first.
    routes: Vec<(Box<str>, usize)>,
    /// The policy for requests no route matches.
    default: Option<usize>,
    policies: Vec<CompiledPolicy>,
    skip_paths: Vec<Box<str>>,
    skip_methods: Vec<http::Method>,
    skip: Option<Arc<SkipFn>>,
    on_limit: Option<Arc<HookFn>>,
    legacy_headers: bool,
    body: BodyStyle,
    /// Whether the warning that a per-IP limit met a request with no peer address
    /// was emitted: once per layer, not once per request.
    warned_no_peer: AtomicBool,
}

impl Shared {
    fn policy_for(&self, path: &str) -> Option<usize> {
        self.routes
            .iter()
            .find(|(prefix, _)| {
                path.strip_prefix(&**prefix)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/'))
            })
            .map(|&(_, policy)| policy)
            .or(self.default)
    }

    fn skips(&self, parts: &Parts) -> bool {
        self.skip_methods.contains(&parts.method)
            || self.skip_paths.iter().any(|p| **p == *parts.uri.path())
            || self.skip.as_ref().is_some_and(|skip| skip(parts))
    }

    /// The middleware's own answer to a refused request, after telling the hook.
    fn refuse(&self, policy: usize, parts: &Parts, refusal: Refusal) -> Response<Bytes> {
        let compiled = self.policies.get(policy);
        let policy = compiled.map_or("", |p| &*p.name);
        let path = parts.uri.path();
        match refusal {
            Refusal::Denied { decision, limit, tier, key, headers: _ }
                if decision.deny_reason() == Some(DenyReason::KeyCapacity) =>
            {
                // The store is full of other clients: no bucket of this client's to
                // describe in `RateLimit` fields.
                let (quota, tail) = compiled.map_or(("", None), |p| p.quota_text(limit, tier, &decision));
                let retry_after = decision.retry_after();
                tracing::debug!(
                    target: "weir_tower", policy, quota, key = %key, path,
                    retry_after_s = retry_after.map(retry_after_secs), "refused: the store is full of other keys"
                );
                let why = (Cause::KeyCapacity, quota, Some(&key), Some(&decision), retry_after);
                self.respond(parts, policy, why, None, tail)
            }
            Refusal::Denied { decision, limit, tier, key, headers } => {
                let (quota, tail) = compiled.map_or(("", None), |p| p.quota_text(limit, tier, &decision));
                let retry_after = decision.retry_after();
                tracing::debug!(
                    target: "weir_tower", policy, quota, key = %key, path,
                    retry_after_s = retry_after.map(retry_after_secs), "rate limited"
                );
                let why = (Cause::RateLimited, quota, Some(&key), Some(&decision), retry_after);
                self.respond(parts, policy, why, Some(headers), tail)
            }
            Refusal::TurnedAway { retry_after, key } => {
                tracing::debug!(
                    target: "weir_tower", policy, key = %key, path,
                    retry_after_s = retry_after_secs(retry_after), "turned away by the throttle"
                );
                self.respond(
                    parts,
                    policy,
                    (Cause::RateLimited, "throttle", Some(&key), None, Some(retry_after)),
                    None,
                    None,
                )
            }
            Refusal::ThrottleFull { retry_after, key } => {
                // As a store full of other keys: no line of this client's to describe.
                tracing::debug!(
                    target: "weir_tower", policy, key = %key, path,
                    retry_after_s = retry_after_secs(retry_after), "refused: the throttle is full of other keys"
                );
                self.respond(
                    parts,
                    policy,
                    (Cause::KeyCapacity, "throttle", Some(&key), None, Some(retry_after)),
                    None,
                    None,
                )
            }
            Refusal::Unavailable { error, key, retry_after } => {
                tracing::warn!(target: "weir_tower", policy, key = %key, path, %error, "rate limiter unavailable");
                self.respond(parts, policy, (Cause::Unavailable, "", Some(&key), None, retry_after), None, None)
            }
        }
    }

    /// The answer to a request that has no key for the policy's `limit`-th limit,
    /// which denies keyless requests, or whose header `too_long` is longer than the
    /// limit's source accepts.
    fn unidentified(
        &self,
        policy: usize,
        limit: usize,
        parts: &Parts,
        too_long: Option<http::HeaderName>,
    ) -> Response<Bytes> {
        let compiled = self.policies.get(policy);
        let no_peer = compiled.is_some_and(|p| p.lacks_peer_address(limit, parts));
        let policy = compiled.map_or("", |p| &*p.name);
        let path = parts.uri.path();
        if let Some(name) = too_long {
            tracing::debug!(target: "weir_tower", policy, path, header = %name, "client key too long");
            let detail = format!(
                "The request's `{name}` header is longer than {} bytes, the longest client key this limit accepts.",
                crate::MAX_KEY_BYTES
            );
            return self.respond_with(parts, policy, (Cause::Unidentified, "", None, None, None), None, None, &detail);
        }
        if !no_peer {
            tracing::debug!(target: "weir_tower", policy, path, "client not identified");
            let detail = compiled.map_or("", |p| p.missing_detail(limit));
            return self.respond_with(parts, policy, (Cause::Unidentified, "", None, None, None), None, None, detail);
        }
        // Ordering: Relaxed: the flag guards a log line and publishes nothing else;
        // at worst two threads racing on the first such request both warn.
        if !self.warned_no_peer.load(Ordering::Relaxed) && !self.warned_no_peer.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "weir_tower", policy, path,
                "a per-IP rate limit sees no peer address, so it answers every request with 400 (warned once per \
                 layer): serve an axum app with `into_make_service_with_connect_info::<SocketAddr>()` and the `axum` \
                 feature of weir-tower (or weir) on; with tonic, serve over TCP with the `grpc` feature on; with \
                 hyper or tower, insert a `weir_tower::PeerAddr` or `SocketAddr` into each request's extensions"
            );
        } else {
            tracing::debug!(target: "weir_tower", policy, path, "client not identified: no peer address");
        }
        self.respond(parts, policy, (Cause::NoPeerAddress, "", None, None, None), None, None)
    }

    /// Tells the hook, then builds the response: `why` is the rejection, the
    /// deciding quota, the key, the decision and the retry time; `tail`, the end of
    /// the problem body for the policy and quota, if made beforehand.
    fn respond(
        &self,
        parts: &Parts,
        policy: &str,
        why: (Cause, &str, Option<&Key>, Option<&Decision>, Option<Duration>),
        headers: Option<RateLimitHeaders>,
        tail: Option<&[u8]>,
    ) -> Response<Bytes> {
        self.respond_with(parts, policy, why, headers, tail, why.0.words().1)
    }

    /// [`respond`](Self::respond), with the problem body's `detail`.
    #[allow(clippy::too_many_arguments)]
    fn respond_with(
        &self,
        parts: &Parts,
        policy: &str,
        why: (Cause, &str, Option<&Key>, Option<&Decision>, Option<Duration>),
        headers: Option<RateLimitHeaders>,
        tail: Option<&[u8]>,
        detail: &str,
    ) -> Response<Bytes> {
        let (cause, quota, key, decision, retry_after) = why;
        let rejection = cause.rejection();
        if let Some(hook) = &self.on_limit {
            hook(&LimitEvent { request: parts, policy, rejection, quota, key, decision, retry_after });
        }
        let denied =
            Denied { rejection, policy, quota, retry_after_secs: retry_after.map(retry_after_secs), decision, detail };
        // A gRPC call is refused as gRPC: a client reads `grpc-status`, not the
        // HTTP status.
        #[cfg(feature = "grpc")]
        if let Some(content_type) = crate::grpc::grpc_content_type(parts) {
            return crate::grpc::refusal(content_type.clone(), cause, &denied, retry_after, headers);
        }
        self.body.response(cause, &denied, headers, tail)
    }
}

/// Rate limiting for a tower service (an axum `Router` with [`Router::layer`] or
/// [`route_layer`], a hyper service through tower): keys, route policies, tiers,
/// layered limits, `RateLimit` headers and problem+json 429s.
///
/// Cheap to clone (one `Arc`), `Send` and `Sync`; every clone shares the same
/// limiters, so a server that clones its service per connection (or per request, as
/// axum does) still enforces one limit. (tower's own `RateLimit` is not `Clone`,
/// and wrapped to make it so, it lets every clone have its own budget: axum issue
/// #2634.)
///
/// [`Router::layer`]: https://docs.rs/axum/0.8/axum/struct.Router.html#method.layer
/// [`route_layer`]: https://docs.rs/axum/0.8/axum/struct.Router.html#method.route_layer
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::Quota;
/// use weir_keyed::{KeyedConfig, KeyedGcra, KeyedSlidingLog};
/// use weir_tower::{Key, Limit, Policy, RateLimitLayer};
///
/// // The API: 100 per minute per client IP, 20 at once.
/// let api: KeyedGcra<Key> = KeyedGcra::gcra(Quota::per_minute(100)?.with_burst(20)?, KeyedConfig::builder(100_000).build()?);
/// // Logging in: 5 in any 5 minutes per client IP, exactly.
/// let five_minutes = Quota::new(5, Duration::from_secs(300))?;
/// let auth: KeyedSlidingLog<Key> = KeyedSlidingLog::sliding_log(five_minutes, KeyedConfig::builder(100_000).build()?)?;
///
/// let layer = RateLimitLayer::builder()
///     .policy(Policy::builder("api").limit(Limit::per_ip(api)).build()?)
///     .route("/auth", Policy::builder("auth").limit(Limit::per_ip(auth)).build()?)
///     .skip_path("/health")
///     .on_limit(|event| eprintln!("{} refused by {} ({})", event.request.uri, event.policy, event.quota))
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl RateLimitLayer {
    /// A layer applying `policy` to every request.
    pub fn new(policy: Policy) -> Self {
        Self::builder().policy(policy).finish()
    }

    /// A layer limiting each client IP (the peer address, IPv6 by `/64`) with the
    /// in-memory `store`, all headers on.
    ///
    /// **The server must give the peer address.** An axum app is served with
    /// `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`,
    /// and axum's `ConnectInfo` is read only with this crate's `axum` feature (on by
    /// default; through the facade, weir's `axum` feature, which `tower` alone does
    /// not turn on). A hyper or plain tower server inserts a [`PeerAddr`](crate::PeerAddr)
    /// (or a `SocketAddr`) into each request's extensions. Without a peer address
    /// every request is answered `400 Client Not Identified`, whose problem+json
    /// `detail` says the above, and the layer emits one `tracing` warning (target
    /// `weir_tower`) the first time.
    pub fn per_ip(store: impl KeyedLimiter<Key> + Send + Sync + 'static) -> Self {
        Self::new(Policy::single("per-ip", crate::Limit::per_ip(store)))
    }

    /// A builder: policies per route, a skip rule, a hook, headers and bodies.
    pub fn builder() -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            routes: Vec::new(),
            default: None,
            policies: Vec::new(),
            skip_paths: Vec::new(),
            skip_methods: Vec::new(),
            skip: None,
            on_limit: None,
            legacy_headers: true,
            body: BodyStyle::default(),
            errors: Vec::new(),
        }
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        f.debug_struct("RateLimitLayer")
            .field("routes", &s.routes)
            .field("default", &s.default)
            .field("policies", &s.policies.iter().map(|p| &*p.name).collect::<Vec<_>>())
            .field("skip_paths", &s.skip_paths)
            .field("skip_methods", &s.skip_methods)
            .field("legacy_headers", &s.legacy_headers)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RateLimitLayer`].
pub struct RateLimitLayerBuilder {
    routes: Vec<(Box<str>, usize)>,
    default: Option<usize>,
    policies: Vec<CompiledPolicy>,
    skip_paths: Vec<Box<str>>,
    skip_methods: Vec<http::Method>,
    skip: Option<Arc<SkipFn>>,
    on_limit: Option<Arc<HookFn>>,
    legacy_headers: bool,
    body: BodyStyle,
    errors: Vec<BuildError>,
}

impl RateLimitLayerBuilder {
    fn add(&mut self, policy: Policy) -> usize {
        self.policies.push(compile(policy));
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
    /// `/package.Service/`, one of its methods `/package.Service/Method`. Paths are as the layer sees them: inside an axum `nest`, without the nest's
    /// prefix.
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

    /// Requests of these methods are not limited (nor given `RateLimit` headers):
    /// `.skip_methods([Method::OPTIONS])` lets CORS preflights through, which
    /// otherwise count as any request does. Adds to the methods given before.
    ///
    /// **Do not exempt `HEAD`** (nor any method a handler serves): axum answers a
    /// `HEAD` request with the route's `GET` handler (it runs; its body is dropped),
    /// so an exempt `HEAD` runs the `GET` handler without limit. Methods compare
    /// exactly, as HTTP's are case-sensitive: `OPTIONS`, not `options`.
    ///
    /// ```
    /// use http::Method;
    /// use weir_tower::{Policy, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .policy(Policy::builder("api").build()?)
    ///     .skip_methods([Method::OPTIONS])
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn skip_methods(mut self, methods: impl IntoIterator<Item = http::Method>) -> Self {
        self.skip_methods.extend(methods);
        self
    }

    /// Requests for which `skip` returns true are not limited.
    pub fn skip(self, skip: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        Self { skip: Some(Arc::new(skip)), ..self }
    }

    /// Called for every request the middleware answers itself (limited, turned away,
    /// unidentified, store unavailable): logs, metrics. It runs on the request's
    /// task; keep it short. (A `tracing` event is emitted in any case, target
    /// `weir_tower`: `debug` for refusals, `warn` for failures.)
    pub fn on_limit(self, hook: impl Fn(&LimitEvent<'_>) + Send + Sync + 'static) -> Self {
        Self { on_limit: Some(Arc::new(hook)), ..self }
    }

    /// Whether to add the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` headers besides `RateLimit` and `RateLimit-Policy`
    /// (default on).
    pub fn legacy_headers(self, on: bool) -> Self {
        Self { legacy_headers: on, ..self }
    }

    /// The `type` URI of the problem+json bodies (default `about:blank`).
    pub fn problem_type(self, uri: &str) -> Self {
        Self { body: BodyStyle::problem(uri), ..self }
    }

    /// Writes rejection bodies with `body` instead of problem+json. (A refused gRPC
    /// call, with the `grpc` feature, has no body: its status is in its headers.)
    pub fn deny_body(self, body: impl Fn(&Denied<'_>) -> DenyBody + Send + Sync + 'static) -> Self {
        Self { body: BodyStyle::custom(body), ..self }
    }

    /// The layer, or the first route refused (a prefix that does not start with
    /// `/`).
    pub fn build(self) -> Result<RateLimitLayer, BuildError> {
        if let Some(error) = self.errors.first() {
            return Err(error.clone());
        }
        Ok(self.finish())
    }

    fn finish(mut self) -> RateLimitLayer {
        // Longest prefix first, so the first match is the longest.
        self.routes.sort_by_key(|route| core::cmp::Reverse(route.0.len()));
        RateLimitLayer {
            shared: Arc::new(Shared {
                routes: self.routes,
                default: self.default,
                policies: self.policies,
                skip_paths: self.skip_paths,
                skip_methods: self.skip_methods,
                skip: self.skip,
                on_limit: self.on_limit,
                legacy_headers: self.legacy_headers,
                body: self.body,
                warned_no_peer: AtomicBool::new(false),
            }),
        }
    }
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder").field("routes", &self.routes).finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit { inner, shared: Arc::clone(&self.shared) }
    }
}

/// The rate-limiting service [`RateLimitLayer`] wraps around a service.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit").field("inner", &self.inner).finish_non_exhaustive()
    }
}

/// The response body is the service's own: the middleware's answers (429, 400, 503)
/// are made from [`Bytes`] (`axum::body::Body`, `http_body_util::Full<Bytes>` and
/// `String` bodies all are), so a server sees one body type and boxes nothing.
impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
    ResBody: From<Bytes>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shared = &self.shared;
        let (parts, body) = request.into_parts();
        let policy_index = match shared.policy_for(parts.uri.path()) {
            Some(policy) if !shared.skips(&parts) => policy,
            #[cfg(feature = "metrics")]
            Some(policy) => {
                if let Some(policy) = shared.policies.get(policy) {
                    policy.metrics.skipped.increment(1);
                }
                return ResponseFuture::calling(self.inner.call(Request::from_parts(parts, body)), None);
            }
            _ => return ResponseFuture::calling(self.inner.call(Request::from_parts(parts, body)), None),
        };
        let Some(policy) = shared.policies.get(policy_index) else {
            return ResponseFuture::calling(self.inner.call(Request::from_parts(parts, body)), None);
        };
        let mut keys: Keys = Default::default();
        if let Err((limit, too_long)) = policy.keys(&parts, &mut keys) {
            policy.count_unidentified(limit);
            return ResponseFuture::rejected(shared.unidentified(policy_index, limit, &parts, too_long));
        }
        let (tiers, ready) = policy.cached_tiers(&keys);
        if ready {
            // Every store in memory, every tier cached: decided here, no future kept.
            return match policy.decide_now(&mut keys, &tiers, shared.legacy_headers) {
                Verdict::Allowed(headers) => {
                    ResponseFuture::calling(self.inner.call(Request::from_parts(parts, body)), headers)
                }
                Verdict::Refused(refusal) => ResponseFuture::rejected(shared.refuse(policy_index, &parts, refusal)),
            };
        }
        // A store to wait on, a tier to look up, or a throttle: decided in the future.
        let owned = Arc::clone(shared);
        let legacy = shared.legacy_headers;
        let verdict: VerdictFuture = Box::pin(async move {
            match owned.policies.get(policy_index) {
                Some(policy) => policy.decide(keys, tiers, legacy).await,
                None => Verdict::Allowed(None),
            }
        });
        // The service driven ready by `poll_ready` goes with the request; this one
        // keeps a fresh clone.
        let clone = self.inner.clone();
        let service = core::mem::replace(&mut self.inner, clone);
        ResponseFuture {
            state: State::Deciding {
                deciding: Box::new(Deciding {
                    verdict,
                    service: Some(service),
                    request: Some((parts, body)),
                    shared: Arc::clone(shared),
                    policy: policy_index,
                }),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of a [`RateLimit`] service's response.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<S, B>
    where
        S: Service<Request<B>>,
    {
        Deciding {
            // Boxed: only requests that wait pay for its size.
            deciding: Box<Deciding<S, B>>,
        },
        Calling {
            #[pin]
            future: S::Future,
            headers: Option<RateLimitHeaders>,
        },
        Rejected {
            response: Option<Response<Bytes>>,
        },
    }
}

/// A request waiting for its decision, and what it goes on with.
struct Deciding<S, B> {
    verdict: VerdictFuture,
    service: Option<S>,
    request: Option<(Parts, B)>,
    shared: Arc<Shared>,
    policy: usize,
}

impl<S: Service<Request<B>>, B> ResponseFuture<S, B> {
    fn calling(future: S::Future, headers: Option<RateLimitHeaders>) -> Self {
        Self { state: State::Calling { future, headers } }
    }

    fn rejected(response: Response<Bytes>) -> Self {
        Self { state: State::Rejected { response: Some(response) } }
    }
}

impl<S, B, ResBody> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    ResBody: From<Bytes>,
{
    type Output = Result<Response<ResBody>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project().state.project() {
                StateProj::Calling { future, headers } => {
                    let response = match future.poll(cx) {
                        Poll::Ready(Ok(response)) => response,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => return Poll::Pending,
                    };
                    let mut response = response;
                    if let Some(headers) = headers.take() {
                        headers.write(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Rejected { response } => {
                    let response = response.take().unwrap_or_default();
                    return Poll::Ready(Ok(response.map(ResBody::from)));
                }
                StateProj::Deciding { deciding } => {
                    let Deciding { verdict, service, request, shared, policy } = &mut **deciding;
                    let verdict = match verdict.as_mut().poll(cx) {
                        Poll::Ready(verdict) => verdict,
                        Poll::Pending => return Poll::Pending,
                    };
                    let (Some(mut service), Some((parts, body))) = (service.take(), request.take()) else {
                        return Poll::Ready(Ok(Response::<Bytes>::default().map(ResBody::from)));
                    };
                    let next = match verdict {
                        Verdict::Allowed(headers) => {
                            State::Calling { future: service.call(Request::from_parts(parts, body)), headers }
                        }
                        Verdict::Refused(refusal) => {
                            State::Rejected { response: Some(shared.refuse(*policy, &parts, refusal)) }
                        }
                    };
                    self.as_mut().project().state.set(next);
                }
            }
        }
    }
}

impl<S: Service<Request<B>>, B> fmt::Debug for ResponseFuture<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match &self.state {
            State::Deciding { .. } => "ResponseFuture::Deciding",
            State::Calling { .. } => "ResponseFuture::Calling",
            State::Rejected { .. } => "ResponseFuture::Rejected",
        })
    }
}

const _: () = assert!(MAX_LIMITS <= 16);
