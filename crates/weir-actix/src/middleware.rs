//! [`RateLimit`]: weir-http's request path as an actix-web middleware (a
//! `Transform`, and the `Service` it wraps around an app, a scope or a resource).

use crate::request::View;
use crate::response::{self, Fields};
use actix_web::Error;
use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use core::fmt;
use core::future::{Future, Ready, ready};
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::rc::Rc;
use std::sync::Arc;
use weir_http::{
    BuildError, Cause, Check, Config, ConfigError, Key, Limits, LimitsBuilder, Policy, Refusal, Reloadable, Verdict,
};
use weir_rl_core::__private::sync::{AtomicBool, Ordering};
use weir_rl_core::KeyedLimiter;

type SkipFn = dyn Fn(&ServiceRequest) -> bool + Send + Sync;
type VerdictFuture = Pin<Box<dyn Future<Output = Verdict>>>;

/// The `detail` of a 400 for a per-IP limit on a request with no peer address:
/// how an actix-web server gives one.
const NO_PEER_ADDRESS: &str = "This rate limit is per client IP, and the request reached it without the address of \
     its peer, so the server cannot tell its clients apart. To the server's operator: serve over TCP \
     (`HttpServer::bind`), where actix-web gives each request its connection's peer address \
     (`ServiceRequest::peer_addr`); a Unix socket gives none, nor does a test request built without \
     `TestRequest::peer_addr`.";

/// The limits a middleware applies: fixed, or swapped on reload.
enum Source {
    Fixed(Arc<Limits>),
    Reloadable(Reloadable),
}

struct Shared {
    limits: Source,
    skip: Option<Arc<SkipFn>>,
    /// Whether the warning that a per-IP limit met a request with no peer address
    /// was emitted: once per middleware, not once per request.
    warned_no_peer: AtomicBool,
}

impl Shared {
    fn new(limits: Source, skip: Option<Arc<SkipFn>>) -> Self {
        Self { limits, skip, warned_no_peer: AtomicBool::new(false) }
    }

    /// The middleware's own answer to a refused request.
    fn refuse(&self, limits: &Limits, request: ServiceRequest, refusal: Refusal) -> ServiceResponse<BoxBody> {
        let refused = limits.refused(&View(&request), refusal);
        if refused.cause() == Cause::NoPeerAddress {
            // Ordering: Relaxed: the flag guards a log line and publishes nothing
            // else; at worst two threads racing on the first such request both warn.
            if !self.warned_no_peer.load(Ordering::Relaxed) && !self.warned_no_peer.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    target: "weir_actix", policy = refused.policy(), path = request.path(),
                    "a per-IP rate limit sees no peer address, so it answers every request with 400 (warned once \
                     per middleware): serve over TCP, where actix-web gives each request its peer address"
                );
            }
        }
        let response = response::refusal(limits, refused);
        request.into_response(response)
    }
}

/// Rate limiting for an actix-web app, scope or resource (`.wrap(...)`): keys,
/// route policies, tiers, layered limits, throttles, shadow mode, `RateLimit`
/// headers and problem+json 429s, from the same TOML file as weir-tower.
///
/// **Build it once, outside `HttpServer::new`'s closure, and clone it in.**
/// actix-web runs that closure once per worker thread: a `RateLimit` built inside
/// it would give each worker its own stores (and each client one budget per
/// worker). A clone shares the limiters (it is one `Arc`).
///
/// ```
/// use actix_web::{App, HttpResponse, web};
/// use weir_actix::{Config, RateLimit};
///
/// let toml = r#"
/// skip = ["/health"]
/// [[policy]]
/// name = "api"
/// default = true
/// [[policy.limit]]
/// key = "ip"
/// quotas = [{ algorithm = "gcra", limit = 100, window = "1m", burst = 20 }]
/// "#;
/// let limit = RateLimit::from_config(Config::from_toml(toml)?)?;
/// // HttpServer::new(move || App::new().wrap(limit.clone()).route(...)).bind(("0.0.0.0", 8080))?.run()
/// let app = App::new().wrap(limit.clone()).route("/", web::get().to(|| async { HttpResponse::Ok().body("hello") }));
/// # let _ = app;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RateLimit {
    shared: Arc<Shared>,
}

impl RateLimit {
    /// The middleware over `limits` (from [`Config::limits`], or built with
    /// [`Limits::builder`]).
    pub fn new(limits: Limits) -> Self {
        Self { shared: Arc::new(Shared::new(Source::Fixed(Arc::new(limits)), None)) }
    }

    /// The middleware over the limits a configuration builds (see [`Config`]).
    pub fn from_config(config: Config) -> Result<Self, ConfigError> {
        Ok(Self::new(config.builder()?.no_peer_detail(NO_PEER_ADDRESS).build().map_err(config_error)?))
    }

    /// Limits each client IP (the connection's peer address, IPv6 by `/64`) with the
    /// in-memory `store`, with the default headers (`RateLimit`, `RateLimit-Policy`).
    ///
    /// ```no_run
    /// use actix_web::{App, HttpResponse, HttpServer, web};
    /// use weir_actix::{Key, RateLimit};
    /// use weir_keyed::{KeyedConfig, KeyedGcra};
    /// use weir_rl_core::Quota;
    ///
    /// #[actix_web::main]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     // 100 requests a minute per client IP, 20 at once; at most 100 000 clients kept.
    ///     let per_ip: KeyedGcra<Key> =
    ///         KeyedGcra::gcra(Quota::per_minute(100)?.with_burst(20)?, KeyedConfig::builder(100_000).build()?);
    ///     let limit = RateLimit::per_ip(per_ip);
    ///     HttpServer::new(move || App::new().wrap(limit.clone()).route("/", web::get().to(HttpResponse::Ok)))
    ///         .bind(("0.0.0.0", 8080))?
    ///         .run()
    ///         .await?;
    ///     Ok(())
    /// }
    /// ```
    pub fn per_ip(store: impl KeyedLimiter<Key> + Send + Sync + 'static) -> Self {
        let policy = Policy::single("per-ip", crate::Limit::per_ip(store));
        let limits = Limits::builder().no_peer_detail(NO_PEER_ADDRESS).policy(policy.clone()).build();
        // Only a route can be refused, and there is none.
        Self::new(limits.unwrap_or_else(|_| Limits::new(policy)))
    }

    /// The middleware over the limits `reloadable` holds: a
    /// [`reload`](Reloadable::reload) of a clone of it is in force for the next
    /// request, while requests in flight finish on the limits they started with.
    ///
    /// ```
    /// use weir_actix::{Config, RateLimit, Reloadable};
    ///
    /// let toml = "[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nkey = \"ip\"\n\
    ///             quotas = [{ algorithm = \"gcra\", limit = 100, window = \"1m\" }]\n";
    /// let limits = Reloadable::from_config(Config::from_toml(toml)?)?;
    /// let limit = RateLimit::reloadable(limits.clone());
    /// // Later (on SIGHUP, say): `limits.reload_file("limits.toml", |config| config)?`.
    /// # let _ = limit;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reloadable(reloadable: Reloadable) -> Self {
        Self { shared: Arc::new(Shared::new(Source::Reloadable(reloadable), None)) }
    }

    /// A builder: policies per route, skip rules, headers and bodies.
    pub fn builder() -> RateLimitBuilder {
        RateLimitBuilder::from_limits(Limits::builder())
    }

    /// The limits this middleware applies now.
    pub fn limits(&self) -> Arc<Limits> {
        match &self.shared.limits {
            Source::Fixed(limits) => Arc::clone(limits),
            Source::Reloadable(reloadable) => reloadable.load(),
        }
    }
}

fn config_error(error: BuildError) -> ConfigError {
    ConfigError::new(error.to_string())
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit").field("limits", &self.limits()).finish_non_exhaustive()
    }
}

/// Builds a [`RateLimit`]: weir-http's [`LimitsBuilder`], and a skip rule on
/// actix-web's requests.
pub struct RateLimitBuilder {
    limits: LimitsBuilder,
    skip: Option<Arc<SkipFn>>,
}

impl RateLimitBuilder {
    /// The options of weir-http's `limits`, at actix-web's defaults for the rest.
    pub fn from_limits(limits: LimitsBuilder) -> Self {
        Self { limits: limits.no_peer_detail(NO_PEER_ADDRESS), skip: None }
    }

    /// The policy for every request no [`route`](Self::route) matches (none: such
    /// requests are not limited).
    pub fn policy(self, policy: Policy) -> Self {
        Self { limits: self.limits.policy(policy), ..self }
    }

    /// The policy for requests whose path is `prefix` or under it (`/auth` matches
    /// `/auth` and `/auth/login`, not `/authors`). The longest matching prefix wins;
    /// a prefix given twice is refused. Paths are the request's whole path, inside
    /// a `web::scope` too.
    pub fn route(self, prefix: &str, policy: Policy) -> Self {
        Self { limits: self.limits.route(prefix, policy), ..self }
    }

    /// Requests to exactly this path are not limited (a health check, say).
    pub fn skip_path(self, path: &str) -> Self {
        Self { limits: self.limits.skip_path(path), ..self }
    }

    /// Requests of these methods are not limited (nor given `RateLimit` headers):
    /// `["OPTIONS"]` lets CORS preflights through. Methods compare exactly (`OPTIONS`,
    /// not `options`). Do not exempt a method a handler serves.
    pub fn skip_methods<I, S>(self, methods: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self { limits: self.limits.skip_methods(methods), ..self }
    }

    /// Requests for which `skip` returns true are not limited.
    pub fn skip(self, skip: impl Fn(&ServiceRequest) -> bool + Send + Sync + 'static) -> Self {
        Self { skip: Some(Arc::new(skip)), ..self }
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
        Self { limits: self.limits.problem_type(uri), ..self }
    }

    /// The middleware, or the first route refused (a prefix that does not start
    /// with `/`, or one given twice).
    pub fn build(self) -> Result<RateLimit, BuildError> {
        let limits = self.limits.build()?;
        Ok(RateLimit { shared: Arc::new(Shared::new(Source::Fixed(Arc::new(limits)), self.skip)) })
    }
}

impl fmt::Debug for RateLimitBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitBuilder").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl<S, B> Transform<S, ServiceRequest> for RateLimit
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = RateLimitMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitMiddleware { service: Rc::new(service), shared: Arc::clone(&self.shared) }))
    }
}

/// The rate-limiting service [`RateLimit`] wraps around an app's service.
pub struct RateLimitMiddleware<S> {
    service: Rc<S>,
    shared: Arc<Shared>,
}

impl<S> fmt::Debug for RateLimitMiddleware<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitMiddleware").finish_non_exhaustive()
    }
}

impl<S, B> Service<ServiceRequest> for RateLimitMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = RateLimitFuture<S, B>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        match &self.shared.limits {
            Source::Fixed(limits) => call(&self.service, &self.shared, limits, request),
            Source::Reloadable(reloadable) => {
                reloadable.with(|limits| call(&self.service, &self.shared, limits, request))
            }
        }
    }
}

/// [`RateLimitMiddleware::call`] on `limits`, the limits in force.
#[inline]
fn call<S, B>(
    service: &Rc<S>,
    shared: &Arc<Shared>,
    limits: &Arc<Limits>,
    request: ServiceRequest,
) -> RateLimitFuture<S, B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
{
    let check = {
        let view = View(&request);
        match &shared.skip {
            Some(skip) => limits.check_unless(&view, |view| skip(view.0)),
            None => limits.check(&view),
        }
    };
    let state = match check {
        Check::Unlimited | Check::Skipped => State::Calling { future: service.call(request), fields: None },
        Check::Decided(Verdict::Allowed(fields)) => {
            let fields = fields.map(|fields| Fields::new(limits, fields));
            State::Calling { future: service.call(request), fields }
        }
        Check::Decided(Verdict::Refused(refusal)) => {
            State::Rejected { response: Some(shared.refuse(limits, request, refusal)) }
        }
        Check::Pending(pending) => {
            // A store to wait on, a tier to look up, or a throttle: decided in the
            // future (dropped with it when the client goes away).
            let owned = Arc::clone(limits);
            let verdict: VerdictFuture = Box::pin(async move { pending.decide(&owned).await });
            State::Deciding {
                deciding: Box::new(Deciding {
                    verdict,
                    service: Rc::clone(service),
                    request: Some(request),
                    shared: Arc::clone(shared),
                    limits: Arc::clone(limits),
                }),
            }
        }
    };
    RateLimitFuture { state, _body: PhantomData }
}

pin_project_lite::pin_project! {
    /// The future of a [`RateLimitMiddleware`]'s response.
    pub struct RateLimitFuture<S, B>
    where
        S: Service<ServiceRequest>,
    {
        #[pin]
        state: State<S>,
        _body: PhantomData<fn() -> B>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<S>
    where
        S: Service<ServiceRequest>,
    {
        Deciding {
            // Boxed: only requests that wait pay for its size.
            deciding: Box<Deciding<S>>,
        },
        Calling {
            #[pin]
            future: S::Future,
            fields: Option<Fields>,
        },
        Rejected {
            response: Option<ServiceResponse<BoxBody>>,
        },
    }
}

/// A request waiting for its decision, and what it goes on with.
struct Deciding<S> {
    verdict: VerdictFuture,
    service: Rc<S>,
    request: Option<ServiceRequest>,
    shared: Arc<Shared>,
    /// The limits the request started on (kept across a reload).
    limits: Arc<Limits>,
}

impl<S, B> Future for RateLimitFuture<S, B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody,
{
    type Output = Result<ServiceResponse<EitherBody<B>>, Error>;

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
                    return Poll::Ready(Ok(response.map_into_left_body()));
                }
                StateProj::Rejected { response } => {
                    let Some(response) = response.take() else {
                        return Poll::Ready(Err(actix_web::error::ErrorInternalServerError(
                            "a rate-limit response was polled after it completed",
                        )));
                    };
                    return Poll::Ready(Ok(response.map_into_right_body()));
                }
                StateProj::Deciding { deciding } => {
                    let Deciding { verdict, service, request, shared, limits } = &mut **deciding;
                    let verdict = match verdict.as_mut().poll(cx) {
                        Poll::Ready(verdict) => verdict,
                        Poll::Pending => return Poll::Pending,
                    };
                    let Some(request) = request.take() else {
                        return Poll::Ready(Err(actix_web::error::ErrorInternalServerError(
                            "a rate-limit decision was polled after it completed",
                        )));
                    };
                    let next = match verdict {
                        Verdict::Allowed(fields) => {
                            let fields = fields.map(|fields| Fields::new(limits, fields));
                            State::Calling { future: service.call(request), fields }
                        }
                        Verdict::Refused(refusal) => {
                            State::Rejected { response: Some(shared.refuse(limits, request, refusal)) }
                        }
                    };
                    self.as_mut().project().state.set(next);
                }
            }
        }
    }
}

impl<S: Service<ServiceRequest>, B> fmt::Debug for RateLimitFuture<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match &self.state {
            State::Deciding { .. } => "RateLimitFuture::Deciding",
            State::Calling { .. } => "RateLimitFuture::Calling",
            State::Rejected { .. } => "RateLimitFuture::Rejected",
        })
    }
}
