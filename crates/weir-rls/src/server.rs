//! The service on the network: gRPC (`RateLimitService` and `grpc.health.v1`) on
//! one listener, HTTP (`/healthcheck`, `/json`, `/metrics`) on another, both
//! stopped gracefully.
//!
//! | listener | path | answers |
//! |---|---|---|
//! | gRPC | `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` | the service |
//! | gRPC | `grpc.health.v1.Health/Check`, `Watch` | `SERVING` for `ratelimit` and `""`; `NOT_SERVING` once stopping or while the backend is down |
//! | HTTP | `GET /healthcheck` | 200 `OK`; 500 once stopping or while the backend is down |
//! | HTTP | `POST /json` | the gRPC call with a proto3 JSON body ([`json`](crate::json)): 200 (OK), 429 (OVER_LIMIT) with the response as JSON; a refused request with its status's HTTP code and message |
//! | HTTP | `GET /metrics` | Prometheus text ([`stats`](crate::stats)), when given a recorder's handle |
//!
//! A request body (gRPC message or JSON) is at most
//! [`Server::max_request_bytes`]; a larger one is refused (gRPC `OUT_OF_RANGE`,
//! HTTP 413) without being read whole.

use crate::proto::rate_limit_response as pb;
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::service::{ConfigSource, RlsService};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use core::fmt;
use core::future::Future;
use core::time::Duration;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::TcpListener;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// The name the gRPC health service reports the rate-limit service under (as
/// envoyproxy/ratelimit does); the empty name, the server's overall health, is
/// reported alike.
pub const HEALTH_SERVICE_NAME: &str = "ratelimit";

/// The service's health, as `/healthcheck` and `grpc.health.v1` report it: healthy
/// until stopping, and while the backend is up. Cheap to clone.
#[derive(Clone)]
pub struct Health {
    inner: Arc<HealthInner>,
}

struct HealthInner {
    stopping: AtomicBool,
    backend_down: AtomicBool,
    reporter: HealthReporter,
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Health").field("healthy", &self.is_healthy()).finish()
    }
}

impl Health {
    fn new(reporter: HealthReporter) -> Self {
        let inner = HealthInner { stopping: AtomicBool::new(false), backend_down: AtomicBool::new(false), reporter };
        Self { inner: Arc::new(inner) }
    }

    /// Whether the service is healthy.
    pub fn is_healthy(&self) -> bool {
        // Ordering: two independent flags read for a report; nothing else is
        // published through them.
        !self.inner.stopping.load(Ordering::Relaxed) && !self.inner.backend_down.load(Ordering::Relaxed)
    }

    /// Marks the backend up or down.
    pub async fn set_backend_up(&self, up: bool) {
        // Ordering: see `is_healthy`.
        self.inner.backend_down.store(!up, Ordering::Relaxed);
        self.publish().await;
    }

    /// Marks the service as stopping: unhealthy from now on.
    pub async fn set_stopping(&self) {
        // Ordering: see `is_healthy`.
        self.inner.stopping.store(true, Ordering::Relaxed);
        self.publish().await;
    }

    async fn publish(&self) {
        let status = if self.is_healthy() { ServingStatus::Serving } else { ServingStatus::NotServing };
        for name in [HEALTH_SERVICE_NAME, ""] {
            self.inner.reporter.set_service_status(name, status).await;
        }
    }
}

/// The gRPC and HTTP servers of one [`RlsService`].
///
/// ```no_run
/// use std::sync::Arc;
/// use weir_rls::{Check, Config, Decide, DecideError, LoadOptions, RlsService, Server};
/// # use weir_rl_core::{Decision, Snapshot};
/// # struct AdmitAll;
/// # impl Decide for AdmitAll {
/// #     async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
/// #         Ok(checks.iter().map(|_| Decision::allowed(Snapshot::new(1, 1, 0))).collect())
/// #     }
/// # }
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = Arc::new(Config::load("config/", &LoadOptions::default())?);
/// let service = Arc::new(RlsService::new(config, AdmitAll));
/// let grpc = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
/// let http = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// Server::new(service).run(grpc, http, async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(()) }
/// ```
pub struct Server<S> {
    service: Arc<RlsService<S>>,
    max_request_bytes: usize,
    prometheus: Option<metrics_exporter_prometheus::PrometheusHandle>,
    drain: Duration,
    on_health: Option<Box<dyn FnOnce(Health) + Send>>,
}

impl<S> fmt::Debug for Server<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("max_request_bytes", &self.max_request_bytes)
            .field("drain", &self.drain)
            .finish_non_exhaustive()
    }
}

/// The default bound on a request body: 1 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1 << 20;

impl<S: ConfigSource + 'static> Server<S> {
    /// The servers of `service`.
    pub fn new(service: Arc<RlsService<S>>) -> Self {
        Self {
            service,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            prometheus: None,
            drain: Duration::ZERO,
            on_health: None,
        }
    }

    /// Refusing request bodies above `bytes` (default [`DEFAULT_MAX_REQUEST_BYTES`]).
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// Serving `/metrics` from this Prometheus recorder (and running its upkeep).
    pub fn prometheus(mut self, handle: metrics_exporter_prometheus::PrometheusHandle) -> Self {
        self.prometheus = Some(handle);
        self
    }

    /// Once told to stop, reporting unhealthy for `drain` while still answering
    /// (so that load balancers stop sending first), then stopping. Default: 0.
    pub fn drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    /// Handing the servers' [`Health`] to `f` when they start (a backend's
    /// monitor marks itself up or down on it).
    pub fn on_health(mut self, f: impl FnOnce(Health) + Send + 'static) -> Self {
        self.on_health = Some(Box::new(f));
        self
    }

    /// Serves gRPC on `grpc` and HTTP on `http` until `shutdown` completes; then
    /// reports unhealthy, waits out the drain, stops accepting connections, and
    /// returns once every call in flight has been answered (connections left open
    /// with nothing in flight, a health watch say, are then closed).
    pub async fn run(
        self,
        grpc: TcpListener,
        http: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (reporter, health_service) = tonic_health::server::health_reporter();
        let health = Health::new(reporter);
        health.publish().await;
        if let Some(f) = self.on_health {
            f(health.clone());
        }

        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopping = health.clone();
        let drain = self.drain;
        let signal = tokio::spawn(async move {
            shutdown.await;
            stopping.set_stopping().await;
            tokio::time::sleep(drain).await;
            let _ = stop_tx.send(true);
        });
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };

        let upkeep = self.prometheus.clone().map(|handle| {
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(5));
                loop {
                    tick.tick().await;
                    handle.run_upkeep();
                }
            })
        });

        let in_flight = Arc::new(InFlight::default());
        let counted = Counted { service: Arc::clone(&self.service), in_flight: Arc::clone(&in_flight) };
        let rls = RateLimitServiceServer::new(counted).max_decoding_message_size(self.max_request_bytes);
        let grpc_server = tonic::transport::Server::builder().add_service(health_service).add_service(rls);
        // No Nagle delay: an answer is one small write, sent at once (with Nagle
        // on, one waited for the client's delayed ACK, 40 ms on Linux, now and then).
        let incoming = tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true));
        let grpc_task = grpc_server.serve_with_incoming_shutdown(incoming, stopped(stop_rx.clone()));
        let state = AppState {
            service: Arc::clone(&self.service),
            health: health.clone(),
            prometheus: self.prometheus,
            in_flight: Arc::clone(&in_flight),
        };
        let http = axum::serve::ListenerExt::tap_io(http, |stream: &mut tokio::net::TcpStream| {
            let _ = stream.set_nodelay(true);
        });
        let http_task =
            axum::serve(http, router(state, self.max_request_bytes)).with_graceful_shutdown(stopped(stop_rx.clone()));

        // Both servers stop accepting when told to, and end once their connections
        // close. A connection kept open with nothing in flight (a client's idle
        // channel, a health watch) would keep them up for good: once no call is
        // in flight, they get a moment to write the last answers, then stop.
        let servers = async { tokio::join!(grpc_task, async { http_task.await }) };
        let calls_done = async {
            stopped(stop_rx).await;
            in_flight.none().await;
            tokio::time::sleep(LAST_WRITES).await;
        };
        let (grpc_result, http_result) = tokio::select! {
            results = servers => results,
            () = calls_done => (Ok(()), Ok(())),
        };
        signal.abort();
        if let Some(upkeep) = upkeep {
            upkeep.abort();
        }
        grpc_result.map_err(std::io::Error::other)?;
        http_result
    }
}

/// How long the servers get to write their last answers, once no call is in
/// flight, before connections still open are closed.
const LAST_WRITES: Duration = Duration::from_millis(500);

/// The calls being answered (gRPC and `/json`).
#[derive(Debug, Default)]
struct InFlight {
    calls: std::sync::atomic::AtomicUsize,
    changed: tokio::sync::Notify,
}

impl InFlight {
    fn enter(self: &Arc<Self>) -> CallGuard {
        // Ordering: a count read by `none` alone; the Notify orders its wake-ups.
        self.calls.fetch_add(1, Ordering::Relaxed);
        CallGuard(Arc::clone(self))
    }

    async fn none(&self) {
        loop {
            let changed = self.changed.notified();
            // Ordering: see `enter`.
            if self.calls.load(Ordering::Relaxed) == 0 {
                return;
            }
            changed.await;
        }
    }
}

/// One call in flight, counted until dropped (answered or cancelled).
struct CallGuard(Arc<InFlight>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        // Ordering: see `InFlight::enter`. Only the last call out wakes `none`
        // (which waits for 0): `notify_waiters` takes the Notify's lock, which
        // every call would otherwise take.
        if self.0.calls.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.0.changed.notify_waiters();
        }
    }
}

/// The service, its calls counted.
struct Counted<S> {
    service: Arc<RlsService<S>>,
    in_flight: Arc<InFlight>,
}

/// One future per call (the service's own trait method would box a second).
impl<S: ConfigSource + 'static> crate::proto::rate_limit_service_server::RateLimitService for Counted<S> {
    fn should_rate_limit<'life0, 'async_trait>(
        &'life0 self,
        request: tonic::Request<crate::proto::RateLimitRequest>,
    ) -> crate::service::CallFuture<'async_trait>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let call = self.in_flight.enter();
        let request = request.into_inner();
        let service = &self.service;
        Box::pin(async move {
            let result = service.respond(request).await.map(tonic::Response::new).map_err(tonic::Status::from);
            drop(call);
            result
        })
    }
}

struct AppState<S> {
    service: Arc<RlsService<S>>,
    health: Health,
    prometheus: Option<metrics_exporter_prometheus::PrometheusHandle>,
    in_flight: Arc<InFlight>,
}

impl<S> Clone for AppState<S> {
    fn clone(&self) -> Self {
        Self {
            service: Arc::clone(&self.service),
            health: self.health.clone(),
            prometheus: self.prometheus.clone(),
            in_flight: Arc::clone(&self.in_flight),
        }
    }
}

fn router<S: ConfigSource + 'static>(state: AppState<S>, max_request_bytes: usize) -> axum::Router {
    axum::Router::new()
        .route("/healthcheck", get(healthcheck::<S>))
        .route("/json", any(json::<S>))
        .route("/metrics", get(render_metrics::<S>))
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .with_state(state)
}

async fn healthcheck<S>(State(state): State<AppState<S>>) -> Response {
    if state.health.is_healthy() {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

async fn render_metrics<S>(State(state): State<AppState<S>>) -> Response {
    match &state.prometheus {
        Some(handle) => {
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], handle.render()).into_response()
        }
        None => (StatusCode::NOT_FOUND, "no metrics recorder").into_response(),
    }
}

async fn json<S: ConfigSource + 'static>(State(state): State<AppState<S>>, body: axum::body::Bytes) -> Response {
    let _call = state.in_flight.enter();
    let request = match crate::json::request_from_json(&body) {
        Ok(request) => request,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    match state.service.respond(request).await {
        Ok(response) => {
            let status = match pb::Code::try_from(response.overall_code) {
                Ok(pb::Code::Ok) => StatusCode::OK,
                Ok(pb::Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let body = crate::json::response_to_json(&response);
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Err(e) => (http_status(e.code()), e.to_string()).into_response(),
    }
}

/// The HTTP status of a refused request, by its gRPC code.
fn http_status(code: tonic::Code) -> StatusCode {
    match code {
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        tonic::Code::ResourceExhausted => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
