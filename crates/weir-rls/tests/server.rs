//! The service on loopback, through real clients: gRPC (RateLimitService and
//! grpc.health.v1) and HTTP (/healthcheck, /json), bounded bodies, and a graceful
//! stop that answers the calls in flight.

mod common;

use common::{config, descriptor, real_service, request};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, oneshot};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use weir_rl_core::Decision;
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use weir_rls::{Check, ConfigSource, Decide, DecideError, RlsService, Server};

const CONFIG: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
";

/// A server on loopback, stopped by `stop`.
struct Running {
    grpc: SocketAddr,
    http: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start<S: ConfigSource + 'static>(service: RlsService<S>, max_request_bytes: usize) -> Running {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (grpc_addr, http_addr) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = Server::new(Arc::new(service)).max_request_bytes(max_request_bytes);
    let done = tokio::spawn(server.run(grpc, http, async {
        let _ = stopped.await;
    }));
    Running { grpc: grpc_addr, http: http_addr, stop: Some(stop), done }
}

impl Running {
    async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc)).await.unwrap()
    }

    async fn health(&self, service: &str) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
        let mut client = health_client(self.grpc).await;
        client.check(HealthCheckRequest { service: service.to_owned() }).await
    }

    /// One HTTP/1.1 request: the status and the body.
    async fn http(&self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(self.http).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        // A body past the bound may be refused before it is read.
        let _ = stream.write_all(body).await;
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_owned());
        (status, body)
    }

    async fn stop(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.done.await.unwrap()
    }
}

async fn health_client(addr: SocketAddr) -> HealthClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    HealthClient::new(channel)
}

#[tokio::test]
async fn grpc_answers_and_reports_health() {
    let (service, _) = real_service(CONFIG);
    let server = start(service, 1 << 20).await;
    let mut client = server.client().await;
    for remaining in [1, 0] {
        let r = client.should_rate_limit(request("d", vec![descriptor(&[("user", "a")])])).await.unwrap().into_inner();
        assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, remaining));
    }
    let r = client.should_rate_limit(request("d", vec![descriptor(&[("user", "a")])])).await.unwrap().into_inner();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let status = client.should_rate_limit(request("", vec![])).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    for name in ["ratelimit", ""] {
        let health = server.health(name).await.unwrap().into_inner();
        assert_eq!(health.status, ServingStatus::Serving as i32, "{name:?}");
    }
    assert_eq!(server.health("other").await.unwrap_err().code(), tonic::Code::NotFound);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn json_is_the_same_call_in_proto3_json() {
    let (service, _) = real_service(CONFIG);
    let server = start(service, 4_096).await;
    let body = br#"{"domain": "d", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}], "hitsAddend": 2}"#;
    let (status, text) = server.http("POST", "/json", body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        text,
        r#"{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"durationUntilReset":"60s"}]}"#
    );
    let snake = br#"{"domain": "d", "descriptors": [{"entries": [{"key": "user", "value": "a"}], "hits_addend": 1}]}"#;
    let (status, text) = server.http("POST", "/json", snake).await;
    assert_eq!(status, 429, "{text}");
    assert!(text.starts_with(r#"{"overallCode":"OVER_LIMIT""#), "{text}");

    // Refusals, each with its cause.
    let cases: [(&[u8], u16, &str); 4] = [
        (
            b"{\"domain\": \"d\", \"descriptors\": [{\"entries\": [{\"key\": \"user\", \"value\": \"a\"}]}], \"x\": 1}",
            400,
            "unknown field `x`",
        ),
        (b"not json", 400, "not a RateLimitRequest in proto3 JSON"),
        (b"{\"domain\": \"\"}", 400, "rate limit domain must not be empty"),
        (b"{\"domain\": \"e\", \"descriptors\": [{\"entries\": [{\"key\": \"k\"}]}]}", 404, "unknown domain 'e'"),
    ];
    for (body, want, message) in cases {
        let (status, text) = server.http("POST", "/json", body).await;
        assert_eq!(status, want, "{text}");
        assert!(text.contains(message), "{text}");
    }
    // A body past the bound is refused, not read.
    let (status, _) = server.http("POST", "/json", &vec![b' '; 5_000]).await;
    assert_eq!(status, 413);
    let (status, text) = server.http("GET", "/healthcheck", b"").await;
    assert_eq!((status, text.as_str()), (200, "OK"));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_grpc_message_past_the_bound_is_refused() {
    let (service, _) = real_service(CONFIG);
    let server = start(service, 1_024).await;
    let mut client = server.client().await;
    let big = request("d", vec![descriptor(&[("user", &"v".repeat(2_000))])]);
    let status = client.should_rate_limit(big).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    server.stop().await.unwrap();
}

/// Admits everything, once let through.
#[derive(Default)]
struct Gate {
    entered: Notify,
    open: Notify,
}

impl Decide for Gate {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
        self.entered.notify_one();
        self.open.notified().await;
        Ok(checks.iter().map(|_| Decision::allowed(weir_rl_core::Snapshot::new(2, 1, 0))).collect())
    }
}

#[tokio::test]
async fn stopping_answers_the_calls_in_flight_and_reports_unhealthy() {
    let gate = Arc::new(Gate::default());
    let service = RlsService::new(Arc::new(config(CONFIG)), Arc::clone(&gate));
    let server = start(service, 1 << 20).await;
    let mut client = server.client().await;
    let mut health = health_client(server.grpc).await;
    let call =
        tokio::spawn(async move { client.should_rate_limit(request("d", vec![descriptor(&[("user", "a")])])).await });
    gate.entered.notified().await;

    let Running { stop, done, http, .. } = server;
    let _ = stop.unwrap().send(());
    // Reported unhealthy at once, while the call is still in flight.
    let mut watch = health.watch(HealthCheckRequest { service: "ratelimit".into() }).await.unwrap().into_inner();
    loop {
        let status = tokio::time::timeout(Duration::from_secs(60), watch.message()).await.unwrap().unwrap().unwrap();
        if status.status == ServingStatus::NotServing as i32 {
            break;
        }
    }
    assert!(!done.is_finished(), "stopped before its call was answered");
    gate.open.notify_one();
    let answer = call.await.unwrap().unwrap().into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    tokio::time::timeout(Duration::from_secs(60), done).await.unwrap().unwrap().unwrap();
    // Nothing listens any more.
    assert!(tokio::net::TcpStream::connect(http).await.is_err());
}
