//! The adapter-agnostic harness: a server from limits on 127.0.0.1:0 (its address
//! back), the same app behind each adapter, and a real HTTP client.

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::time::Duration;
use weir_http::{Limits, Reloadable};

/// What a server applies: fixed limits, or limits a test reloads.
#[allow(clippy::large_enum_variant)] // made once per test
pub enum Served {
    Fixed(Limits),
    Reloadable(Reloadable),
}

/// One adapter, serving the test app behind its middleware: `GET /`, `/health`,
/// `/auth/login`, `/api/{x}`, each answering `ok`; an authentication middleware
/// outside the rate limit puts a `User` of the `x-user` header's value in the
/// request.
pub trait Harness {
    /// The adapter's name, in messages.
    const NAME: &'static str;

    /// Serves `limits` on 127.0.0.1 (an ephemeral port): its address.
    fn serve(limits: Served) -> SocketAddr;
}

/// weir-tower's layer in an axum app, served with `ConnectInfo` on the test's
/// tokio runtime.
pub struct Tower;

impl Harness for Tower {
    const NAME: &'static str = "weir-tower";

    fn serve(limits: Served) -> SocketAddr {
        use axum::Router;
        use axum::routing::get;
        let layer = match limits {
            Served::Fixed(limits) => weir_tower::RateLimitLayer::from_limits(limits),
            Served::Reloadable(reloadable) => weir_tower::RateLimitLayer::reloadable(reloadable),
        };
        let auth = axum::middleware::from_fn(|mut request: axum::extract::Request, next: axum::middleware::Next| {
            if let Some(user) = request.headers().get("x-user").and_then(|v| v.to_str().ok()) {
                let user = weir_http::User::from(user);
                request.extensions_mut().insert(user);
            }
            next.run(request)
        });
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .route("/health", get(|| async { "ok" }))
            .route("/auth/login", get(|| async { "ok" }))
            .route("/api/{x}", get(|| async { "ok" }))
            .layer(layer)
            .layer(auth);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the bound address");
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await;
        });
        addr
    }
}

/// weir-actix's middleware in an actix-web app, served by `HttpServer` (one
/// worker) on an actix system of its own thread.
pub struct Actix;

impl Harness for Actix {
    const NAME: &'static str = "weir-actix";

    fn serve(limits: Served) -> SocketAddr {
        use actix_web::dev::Service as _;
        use actix_web::{App, HttpMessage as _, HttpServer, web};
        let limit = match limits {
            Served::Fixed(limits) => weir_actix::RateLimit::new(limits),
            Served::Reloadable(reloadable) => weir_actix::RateLimit::reloadable(reloadable),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("the bound address");
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new()
                        .wrap(limit.clone())
                        .wrap_fn(|request, service| {
                            if let Some(user) = request.headers().get("x-user").and_then(|v| v.to_str().ok()) {
                                let user = weir_http::User::from(user);
                                request.extensions_mut().insert(user);
                            }
                            service.call(request)
                        })
                        .route("/", web::get().to(|| async { "ok" }))
                        .route("/health", web::get().to(|| async { "ok" }))
                        .route("/auth/login", web::get().to(|| async { "ok" }))
                        .route("/api/{x}", web::get().to(|| async { "ok" }))
                })
                .workers(1)
                .disable_signals()
                .listen(listener)
                .expect("listen on the bound port");
                let _ = server.run().await;
            });
        });
        addr
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("a JSON body ({e}): {:?}", self.body))
    }

    /// The rate-limit fields and `Retry-After`, by name, in order.
    pub fn limit_headers(&self) -> Vec<(String, String)> {
        let mut fields: Vec<(String, String)> = self
            .headers
            .iter()
            .filter(|(name, _)| name.as_str().contains("ratelimit") || name.as_str() == "retry-after")
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or("").to_owned()))
            .collect();
        fields.sort();
        fields
    }
}

/// An HTTP/1 client over a connection pool (hyper-util's).
#[derive(Clone)]
pub struct HttpClient(Client<HttpConnector, Empty<Bytes>>);

impl HttpClient {
    pub fn new() -> Self {
        Self(Client::builder(TokioExecutor::new()).build_http())
    }

    /// `GET http://addr/path` with `headers`.
    pub async fn get(&self, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send("GET", addr, path, headers).await
    }

    /// `method http://addr/path` with `headers`. The 60 s bound is a guard against a
    /// hang, not a timing claim: no test depends on how fast a response comes.
    pub async fn send(&self, method: &str, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = Request::builder().method(method).uri(format!("http://{addr}{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Empty::new()).expect("a request");
        let response = tokio::time::timeout(Duration::from_secs(60), self.0.request(request))
            .await
            .expect("a response within 60 s")
            .expect("a response");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("the body").to_bytes();
        Reply { status: parts.status, headers: parts.headers, body }
    }
}

/// Waits until `done`, checking every 10 ms: a guard against a hang (30 s, room for
/// any load), not a timing claim.
pub async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "not reached within 30 s: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
