//! Rate-limiting middleware for actix-web 4: who the client is (the connection's
//! peer, behind the proxies you trust; IPv6 grouped), which limits apply (per route,
//! per tier, per IP and per user at once), and what the client is told (the IETF
//! `RateLimit` headers, a `Retry-After` in whole seconds, an RFC 9457 problem+json
//! 429). The request path is weir-http's, the same as weir-tower's: one TOML file
//! configures either, and one behavioural suite runs against both.
//!
//! ```no_run
//! use actix_web::{App, HttpResponse, HttpServer, web};
//! use weir_actix::{Config, RateLimit};
//!
//! #[actix_web::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // 100 requests a minute per client IP, 20 at once.
//!     let toml = r#"
//!         [[policy]]
//!         name = "api"
//!         default = true
//!         [[policy.limit]]
//!         key = "ip"
//!         quotas = [{ algorithm = "gcra", limit = 100, window = "1m", burst = 20 }]
//!     "#;
//!     // Built once, cloned into each worker: every worker shares the same limits.
//!     let limit = RateLimit::from_config(Config::from_toml(toml)?)?;
//!     HttpServer::new(move || {
//!         App::new().wrap(limit.clone()).route("/", web::get().to(|| async { HttpResponse::Ok().body("hello") }))
//!     })
//!     .bind(("127.0.0.1", 8080))?
//!     .run()
//!     .await?;
//!     Ok(())
//! }
//! ```
//!
//! # What it reads
//!
//! - **The client IP** is the connection's peer address (`ServiceRequest::peer_addr`:
//!   actix-web gives it for every TCP connection), or, behind proxies the
//!   configuration trusts (`[client] trusted_proxies`), the rightmost hop of
//!   `X-Forwarded-For` or `Forwarded` that no trusted proxy added: never actix-web's
//!   `ConnectionInfo::realip_remote_addr`, which believes whatever `Forwarded`
//!   header a client sends. IPv6 clients are grouped by `/64` by default.
//! - **An API key** from a header (`key = "header:x-api-key"`), a **user** an
//!   authentication middleware put in the request's extensions as a [`User`]
//!   (`req.extensions_mut().insert(weir_actix::User::from("alice"))`; wrap the
//!   authentication middleware *outside* the rate limit, so that it runs first), one
//!   global key, or a closure over the request ([`KeySource::custom`], which reads
//!   actix-web's request with `request.native::<ServiceRequest>()`).
//! - **The path** is the request's whole path, in a `web::scope` too: route
//!   prefixes in the file are matched against it.
//!
//! # What it does
//!
//! Everything weir-tower's guide describes (<https://docs.rs/weir-tower>), over
//! actix-web: per-route policies (the longest prefix wins), skip rules (paths,
//! methods, a closure with [`RateLimitBuilder::skip`]), tiers, limits layered all
//! or nothing, throttling (a request over the rate waits its turn; a client that
//! disconnects while it waits frees its place), shadow mode, and reload
//! ([`RateLimit::reloadable`]). Admitted responses carry `RateLimit-Policy` and
//! `RateLimit` (and the legacy `X-RateLimit-*` when switched on:
//! [`legacy_headers(true)`](RateLimitBuilder::legacy_headers), `legacy_headers =
//! true` in the file); refusals are
//! `429 Too Many Requests` with `Retry-After` (`400` for a client not identified,
//! `503` for a store that is full of other clients or unavailable) and an
//! `application/problem+json` body.
//!
//! **Disconnects.** A request's future may be dropped at any await; what it held
//! is then given back (its place in a throttle's line, what stores admitted: see
//! weir-tower's guide, "Cancellation"). actix-web drops it when it sees the client
//! is gone: at once for a connection reset; for a clean close (a FIN), which
//! actix-web 4's `HttpServer` takes as a half-closed connection whose request it
//! goes on serving (and offers no setting to refuse), only once the response cannot
//! be written, so such a waiter keeps its place in a throttle's line until its turn
//! comes or `max_wait` passes.
//!
//! The middleware applies where it is wrapped: `App::new().wrap(limit)` limits every
//! request, `web::scope("/api").wrap(limit)` the scope's.
//!
//! # Metrics
//!
//! With the `metrics` feature, the same series as weir-tower, under the same names
//! (`weir_tower_decisions_total`, `weir_tower_throttle_wait_seconds`, ...: the names
//! dashboards use, the same for every adapter). Install the recorder before
//! building the middleware. `examples/server.rs` serves them at `/metrics`.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod middleware;
mod request;
mod response;

pub use middleware::{RateLimit, RateLimitBuilder, RateLimitFuture, RateLimitMiddleware};
pub use request::Actix;
pub use response::{RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET};
/// Waiting in handlers (weir-http's `wait`).
pub use weir_http::wait;
pub use weir_http::{
    BuildError, Charge, Checked, Cidr, CidrError, ClientIp, ClientIpBuilder, ClientIpError, Config, ConfigError,
    ForwardedHeader, Key, KeyKind, KeySource, KeyedThrottle, KeyedThrottleBuilder, KeyedThrottleError, Limit, Limits,
    LimitsBuilder, LongKeys, LookupFailed, MAX_KEY_BYTES, MAX_LIMITS, MissingKey, OnLookupError, Outcome, Policy,
    PolicyBuilder, PolicyError, Rejection, Reloadable, Store, StoreError, Tiers, TiersBuilder, TiersError, User,
    check_all,
};
