//! [`RateLimitLayer`] and its [`RateLimit`] service: weir-http's request path over
//! tower's `Service`.

use crate::request::View;
use crate::response::{BodyStyle, DenyBody, Fields};
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
use weir_http::{
    BuildError, Cause, Check, Denied, Key, Limits, LimitsBuilder, Policy, Refusal, Rejection, Reloadable, Verdict,
};
use weir_rl_core::__private::sync::{AtomicBool, Ordering};
use weir_rl_core::{Decision, KeyedLimiter};

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

/// The `detail` of a 400 for a per-IP limit on a request with no peer address:
/// how a tower server gives one.
const NO_PEER_ADDRESS: &str = "This rate limit is per client IP, and the request reached it without the address of \
     its peer, so the server cannot tell its clients apart. To the server's operator: serve the axum app with \
     `into_make_service_with_connect_info::<SocketAddr>()`, with the `axum` feature of weir-tower (or of weir) on, \
     so that axum's `ConnectInfo` is read; with tonic, serve over TCP with the `grpc` feature of weir-tower on, so \
     that tonic's `TcpConnectInfo` is read; with hyper or tower, insert the connection's peer address \
     (`weir_tower::PeerAddr` or a `std::net::SocketAddr`) into each request's extensions.";

/// The limits a layer applies: fixed, or swapped on reload.
enum Source {
    Fixed(Arc<Limits>),
    Reloadable(Reloadable),
}

struct Shared {
    limits: Source,
    skip: Option<Arc<SkipFn>>,
    on_limit: Option<Arc<HookFn>>,
    body: BodyStyle,
    /// Whether the warning that a per-IP limit met a request with no peer address
    /// was emitted: once per layer, not once per request.
    warned_no_peer: AtomicBool,
}

impl Shared {
    /// The middleware's own answer to a refused request, after telling the hook.
    fn refuse(&self, limits: &Limits, parts: &Parts, refusal: Refusal) -> Response<Bytes> {
        let refused = limits.refused(&View(parts), refusal);
        if refused.cause() == Cause::NoPeerAddress {
            self.warn_no_peer(refused.policy(), parts);
        }
        if let Some(hook) = &self.on_limit {
            hook(&LimitEvent {
                request: parts,
                policy: refused.policy(),
                rejection: refused.rejection(),
                quota: refused.quota(),
                key: refused.key(),
                decision: refused.decision(),
                retry_after: refused.retry_after(),
            });
        }
        // A gRPC call is refused as gRPC: a client reads `grpc-status`, not the
        // HTTP status.
        #[cfg(feature = "grpc")]
        if let Some(content_type) = crate::grpc::grpc_content_type(parts) {
            return crate::grpc::refusal(limits, content_type.clone(), refused);
        }
        self.body.response(limits, refused)
    }

    fn warn_no_peer(&self, policy: &str, parts: &Parts) {
        // Ordering: Relaxed: the flag guards a log line and publishes nothing else;
        // at worst two threads racing on the first such request both warn.
        if !self.warned_no_peer.load(Ordering::Relaxed) && !self.warned_no_peer.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "weir_tower", policy, path = parts.uri.path(),
                "a per-IP rate limit sees no peer address, so it answers every request with 400 (warned once per \
                 layer): serve an axum app with `into_make_service_with_connect_info::<SocketAddr>()` and the `axum` \
                 feature of weir-tower (or weir) on; with tonic, serve over TCP with the `grpc` feature on; with \
                 hyper or tower, insert a `weir_tower::PeerAddr` or `SocketAddr` into each request's extensions"
            );
        }
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
        let limits = Limits::builder().no_peer_detail(NO_PEER_ADDRESS).policy(policy.clone()).build();
        // Only a route can be refused, and there is none.
        let limits = limits.unwrap_or_else(|_| Limits::new(policy));
        Self::with(Arc::new(limits), None, None, BodyStyle::default())
    }

    /// A layer limiting each client IP (the peer address, IPv6 by `/64`) with the
    /// in-memory `store`, with the default headers (`RateLimit`, `RateLimit-Policy`).
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
        RateLimitLayerBuilder::from_limits(Limits::builder())
    }

    /// The layer over `limits` built elsewhere (from weir-http's [`Config`](weir_http::Config)).
    pub fn from_limits(limits: Limits) -> Self {
        Self::with(Arc::new(limits), None, None, BodyStyle::default())
    }

    /// The layer over the limits `reloadable` holds: a
    /// [`reload`](Reloadable::reload) of a clone of it is in force for the next
    /// request, while requests in flight finish on the limits they started with.
    ///
    /// ```
    /// use weir_tower::{RateLimitLayer, Reloadable};
    ///
    /// let toml = "[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nkey = \"ip\"\n\
    ///             quotas = [{ algorithm = \"gcra\", limit = 100, window = \"1m\" }]\n";
    /// let limits = Reloadable::from_config(weir_http::Config::from_toml(toml)?)?;
    /// let layer = RateLimitLayer::reloadable(limits.clone());
    /// // Later (on SIGHUP, say): `limits.reload_file("limits.toml", |config| config)?`.
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reloadable(reloadable: Reloadable) -> Self {
        let shared = Shared {
            limits: Source::Reloadable(reloadable),
            skip: None,
            on_limit: None,
            body: BodyStyle::default(),
            warned_no_peer: AtomicBool::new(false),
        };
        Self { shared: Arc::new(shared) }
    }

    fn with(limits: Arc<Limits>, skip: Option<Arc<SkipFn>>, on_limit: Option<Arc<HookFn>>, body: BodyStyle) -> Self {
        let limits = Source::Fixed(limits);
        Self { shared: Arc::new(Shared { limits, skip, on_limit, body, warned_no_peer: AtomicBool::new(false) }) }
    }

    /// The limits this layer applies now.
    pub fn limits(&self) -> Arc<Limits> {
        match &self.shared.limits {
            Source::Fixed(limits) => Arc::clone(limits),
            Source::Reloadable(reloadable) => reloadable.load(),
        }
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer").field("limits", &self.limits()).finish_non_exhaustive()
    }
}

/// Builds a [`RateLimitLayer`]: weir-http's [`LimitsBuilder`] and what only tower
/// sees (a skip rule and a hook on `http` requests, a body of your own).
pub struct RateLimitLayerBuilder {
    limits: LimitsBuilder,
    skip: Option<Arc<SkipFn>>,
    on_limit: Option<Arc<HookFn>>,
    body: BodyStyle,
}

impl RateLimitLayerBuilder {
    /// The options of weir-http's `limits`, at tower's defaults for the rest.
    pub fn from_limits(limits: LimitsBuilder) -> Self {
        Self { limits: limits.no_peer_detail(NO_PEER_ADDRESS), skip: None, on_limit: None, body: BodyStyle::default() }
    }

    /// The policy for every request no [`route`](Self::route) matches (none: such
    /// requests are not limited).
    pub fn policy(self, policy: Policy) -> Self {
        Self { limits: self.limits.policy(policy), ..self }
    }

    /// The policy for requests whose path is `prefix` or under it (`/auth` matches
    /// `/auth` and `/auth/login`, not `/authors`). The longest matching prefix wins;
    /// a prefix given twice is refused. A prefix ending in `/` matches every path
    /// under it: a gRPC service is `/package.Service/`, one of its methods
    /// `/package.Service/Method`. Paths are as the layer sees them: inside an axum
    /// `nest`, without the nest's prefix.
    pub fn route(self, prefix: &str, policy: Policy) -> Self {
        Self { limits: self.limits.route(prefix, policy), ..self }
    }

    /// Requests to exactly this path are not limited (a health check, say).
    pub fn skip_path(self, path: &str) -> Self {
        Self { limits: self.limits.skip_path(path), ..self }
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
    pub fn skip_methods(self, methods: impl IntoIterator<Item = http::Method>) -> Self {
        let methods: Vec<http::Method> = methods.into_iter().collect();
        Self { limits: self.limits.skip_methods(methods.iter().map(http::Method::as_str)), ..self }
    }

    /// Requests for which `skip` returns true are not limited.
    pub fn skip(self, skip: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        Self { skip: Some(Arc::new(skip)), ..self }
    }

    /// Called for every request the middleware answers itself (limited, turned away,
    /// unidentified, store unavailable): logs, metrics. It runs on the request's
    /// task; keep it short. (A `tracing` event is emitted in any case, target
    /// `weir_http`: `debug` for refusals, `warn` for failures.)
    pub fn on_limit(self, hook: impl Fn(&LimitEvent<'_>) + Send + Sync + 'static) -> Self {
        Self { on_limit: Some(Arc::new(hook)), ..self }
    }

    /// Whether to add the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` headers besides `RateLimit` and `RateLimit-Policy`
    /// (default off; `legacy_headers = true` in the file). Turn them on for clients
    /// that read only the `X-` ones.
    pub fn legacy_headers(self, on: bool) -> Self {
        Self { limits: self.limits.legacy_headers(on), ..self }
    }

    /// The `type` URI of the problem+json bodies (default `about:blank`).
    pub fn problem_type(self, uri: &str) -> Self {
        Self { limits: self.limits.problem_type(uri), body: BodyStyle::Problem, ..self }
    }

    /// Writes rejection bodies with `body` instead of problem+json. (A refused gRPC
    /// call, with the `grpc` feature, has no body: its status is in its headers.)
    pub fn deny_body(self, body: impl Fn(&Denied<'_>) -> DenyBody + Send + Sync + 'static) -> Self {
        Self { body: BodyStyle::custom(body), ..self }
    }

    /// The layer, or the first route refused (a prefix that does not start with
    /// `/`, or one given twice).
    pub fn build(self) -> Result<RateLimitLayer, BuildError> {
        let limits = self.limits.build()?;
        Ok(RateLimitLayer::with(Arc::new(limits), self.skip, self.on_limit, self.body))
    }
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder").field("limits", &self.limits).finish_non_exhaustive()
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
        match &self.shared.limits {
            Source::Fixed(limits) => call(&mut self.inner, &self.shared, limits, request),
            Source::Reloadable(reloadable) => {
                reloadable.with(|limits| call(&mut self.inner, &self.shared, limits, request))
            }
        }
    }
}

/// [`RateLimit::call`] on `limits`, the limits in force.
#[inline]
fn call<S, ReqBody, ResBody>(
    inner: &mut S,
    shared: &Arc<Shared>,
    limits: &Arc<Limits>,
    request: Request<ReqBody>,
) -> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
    ResBody: From<Bytes>,
{
    {
        let (parts, body) = request.into_parts();
        let check = match &shared.skip {
            Some(skip) => limits.check_unless(&View(&parts), |view| skip(view.0)),
            None => limits.check(&View(&parts)),
        };
        let pending = match check {
            Check::Unlimited | Check::Skipped => {
                return ResponseFuture::calling(inner.call(Request::from_parts(parts, body)), None);
            }
            Check::Decided(Verdict::Allowed(fields)) => {
                let fields = fields.map(|fields| Fields::new(limits, fields));
                return ResponseFuture::calling(inner.call(Request::from_parts(parts, body)), fields);
            }
            Check::Decided(Verdict::Refused(refusal)) => {
                return ResponseFuture::rejected(shared.refuse(limits, &parts, refusal));
            }
            Check::Pending(pending) => pending,
        };
        // A store to wait on, a tier to look up, or a throttle: decided in the future.
        let owned = Arc::clone(limits);
        let verdict: VerdictFuture = Box::pin(async move { pending.decide(&owned).await });
        // The service driven ready by `poll_ready` goes with the request; this one
        // keeps a fresh clone.
        let clone = inner.clone();
        let service = core::mem::replace(inner, clone);
        ResponseFuture {
            state: State::Deciding {
                deciding: Box::new(Deciding {
                    verdict,
                    service: Some(service),
                    request: Some((parts, body)),
                    shared: Arc::clone(shared),
                    limits: Arc::clone(limits),
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
            fields: Option<Fields>,
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
    /// The limits the request started on (kept across a reload).
    limits: Arc<Limits>,
}

impl<S: Service<Request<B>>, B> ResponseFuture<S, B> {
    fn calling(future: S::Future, fields: Option<Fields>) -> Self {
        Self { state: State::Calling { future, fields } }
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
                StateProj::Calling { future, fields } => {
                    let mut response = match future.poll(cx) {
                        Poll::Ready(Ok(response)) => response,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => return Poll::Pending,
                    };
                    if let Some(fields) = fields.take() {
                        fields.write(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Rejected { response } => {
                    let response = response.take().unwrap_or_default();
                    return Poll::Ready(Ok(response.map(ResBody::from)));
                }
                StateProj::Deciding { deciding } => {
                    let Deciding { verdict, service, request, shared, limits } = &mut **deciding;
                    let verdict = match verdict.as_mut().poll(cx) {
                        Poll::Ready(verdict) => verdict,
                        Poll::Pending => return Poll::Pending,
                    };
                    let (Some(mut service), Some((parts, body))) = (service.take(), request.take()) else {
                        return Poll::Ready(Ok(Response::<Bytes>::default().map(ResBody::from)));
                    };
                    let next = match verdict {
                        Verdict::Allowed(fields) => {
                            let fields = fields.map(|fields| Fields::new(limits, fields));
                            State::Calling { future: service.call(Request::from_parts(parts, body)), fields }
                        }
                        Verdict::Refused(refusal) => {
                            State::Rejected { response: Some(shared.refuse(limits, &parts, refusal)) }
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
