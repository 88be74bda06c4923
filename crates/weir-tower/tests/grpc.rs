//! A real tonic server under the layer and a real tonic client, over loopback: what
//! a gRPC client sees when it is limited.
//!
//! tonic's client has no retry policy (gRFC A6 is not implemented in tonic 0.14), so
//! what is tested of A6 is what the server sends: `grpc-retry-pushback-ms`, equal
//! to the `google.rpc.RetryInfo` delay rounded up to whole milliseconds.

#[path = "proto/echo.rs"]
mod echo;

use echo::echo_client::EchoClient;
use echo::echo_server::{Echo, EchoServer};
use echo::{CountRequest, SayReply, SayRequest};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tonic::codegen::tokio_stream;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Response, Status};
use tonic_types::StatusExt as _;
use weir_keyed::{KeyedConfig, KeyedGcra};
use weir_rl_core::{ManualClock, Quota};
use weir_tower::{Config, Key, KeySource, Limit, Policy, RateLimitLayer, Store};

/// The echo service, counting the calls that reach it.
#[derive(Default)]
struct Service {
    calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl Echo for Service {
    async fn say(&self, request: Request<SayRequest>) -> Result<Response<SayReply>, Status> {
        // Ordering: Relaxed: a count read after the calls it counts have returned.
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(SayReply { text: request.into_inner().text }))
    }

    type CountStream = tokio_stream::Iter<std::vec::IntoIter<Result<SayReply, Status>>>;

    async fn count(&self, request: Request<CountRequest>) -> Result<Response<Self::CountStream>, Status> {
        // Ordering: Relaxed, as above.
        self.calls.fetch_add(1, Ordering::Relaxed);
        let n = request.into_inner().n.min(100);
        let replies: Vec<_> = (0..n).map(|i| Ok(SayReply { text: i.to_string() })).collect();
        Ok(Response::new(tokio_stream::iter(replies)))
    }
}

/// The echo service under `limits` on a loopback port, and the count of calls that
/// reached the service.
async fn serve(limits: RateLimitLayer) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = Service::default();
    let calls = Arc::clone(&service.calls);
    let server = Server::builder()
        .layer(weir_tower::grpc::layer(limits))
        .add_service(EchoServer::new(service))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(server);
    (addr, calls)
}

async fn client(addr: SocketAddr) -> EchoClient<Channel> {
    EchoClient::connect(format!("http://{addr}")).await.unwrap()
}

fn per_hour(n: u64) -> KeyedGcra<Key> {
    KeyedGcra::gcra(Quota::per_hour(n).unwrap(), KeyedConfig::builder(1000).build().unwrap())
}

fn say(text: &str) -> SayRequest {
    SayRequest { text: text.into() }
}

fn metadata<'a>(map: &'a tonic::metadata::MetadataMap, name: &str) -> Option<&'a str> {
    map.get(name).and_then(|v| v.to_str().ok())
}

/// Whole milliseconds, rounded up.
fn ceil_ms(d: Duration) -> u64 {
    (d.as_nanos().div_ceil(1_000_000)) as u64
}

/// The retry delay a refusal gives, read from both places, which agree.
fn retry_delay(status: &Status) -> Duration {
    let pushback: u64 = metadata(status.metadata(), "grpc-retry-pushback-ms")
        .expect("grpc-retry-pushback-ms")
        .parse()
        .expect("a whole number of milliseconds");
    let info = status.get_details_retry_info().expect("a google.rpc.RetryInfo in grpc-status-details-bin");
    let delay = info.retry_delay.expect("a retry delay");
    assert_eq!(pushback, ceil_ms(delay).max(1), "pushback {pushback} ms, RetryInfo {delay:?}");
    delay
}

#[tokio::test]
async fn unary_calls_past_the_limit_are_resource_exhausted_with_the_retry_delay() {
    // Per client IP: tonic's `TcpConnectInfo` is the peer address.
    let (addr, calls) = serve(RateLimitLayer::per_ip(per_hour(2))).await;
    let mut client = client(addr).await;
    for i in 0..2 {
        let reply = client.say(say("hi")).await.expect("admitted");
        assert_eq!(reply.get_ref().text, "hi");
        // The RateLimit fields are initial metadata on an admitted call.
        let policy = metadata(reply.metadata(), "ratelimit-policy").expect("ratelimit-policy");
        assert!(policy.contains("q=2"), "{policy}");
        let ratelimit = metadata(reply.metadata(), "ratelimit").expect("ratelimit");
        assert!(ratelimit.contains(&format!(";r={};", 1 - i)), "{ratelimit}");
    }
    let status = client.say(say("hi")).await.expect_err("refused");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let delay = retry_delay(&status);
    assert!(delay > Duration::ZERO && delay <= Duration::from_secs(3600), "{delay:?}");
    assert!(status.message().starts_with("Too Many Requests: "), "{}", status.message());
    assert!(status.message().contains(&format!("Retry after {} ms.", ceil_ms(delay).max(1))), "{}", status.message());
    // A trailers-only refusal carries the RateLimit fields too.
    assert!(metadata(status.metadata(), "ratelimit").is_some_and(|v| v.contains(";r=0;")), "{:?}", status.metadata());
    assert!(metadata(status.metadata(), "ratelimit-policy").is_some());
    // Ordering: Relaxed: the calls have returned.
    assert_eq!(calls.load(Ordering::Relaxed), 2, "a refused call never reaches the service");
}

#[tokio::test]
async fn a_streaming_call_counts_once_when_it_starts() {
    let (addr, calls) = serve(RateLimitLayer::per_ip(per_hour(2))).await;
    let mut client = client(addr).await;
    for n in [5, 3] {
        let mut stream = client.count(CountRequest { n }).await.expect("admitted").into_inner();
        let mut got = 0;
        while let Some(reply) = stream.message().await.expect("a message") {
            assert_eq!(reply.text, got.to_string());
            got += 1;
        }
        // Every message of an admitted stream arrives: the limit counted the call.
        assert_eq!(got, n);
    }
    let status = client.count(CountRequest { n: 1 }).await.expect_err("refused when it starts");
    assert_eq!(status.code(), Code::ResourceExhausted);
    retry_delay(&status);
    // The same limit: unary calls are refused as well.
    let status = client.say(say("hi")).await.expect_err("refused");
    assert_eq!(status.code(), Code::ResourceExhausted);
    // Ordering: Relaxed: the calls have returned.
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

const PER_METHOD: &str = r#"
[[policy]]
name = "say"
routes = ["/weir.echo.v1.Echo/Say"]
[[policy.limit]]
key = "ip"
quotas = [{ name = "say", algorithm = "fixed_window", limit = 1, window = "1h" }]

[[policy]]
name = "echo"
routes = ["/weir.echo.v1.Echo/"]
[[policy.limit]]
key = "ip"
quotas = [{ name = "echo", algorithm = "sliding_window", limit = 3, window = "1h" }]
"#;

/// A policy for one method, and one for the rest of its service: `/Say` has its own
/// quota, `/Count` the service's.
async fn policies_per_method_and_per_service(limits: RateLimitLayer) {
    let (addr, _) = serve(limits).await;
    let mut client = client(addr).await;
    client.say(say("one")).await.expect("admitted");
    let status = client.say(say("two")).await.expect_err("the method's quota");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("(policy \"say\", quota \"say\")"), "{}", status.message());
    for _ in 0..3 {
        client.count(CountRequest { n: 1 }).await.expect("the service's quota is apart");
    }
    let status = client.count(CountRequest { n: 1 }).await.expect_err("the service's quota");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("(policy \"echo\", quota \"echo\")"), "{}", status.message());
    retry_delay(&status);
}

#[tokio::test]
async fn policies_per_method_and_per_service_from_toml() {
    let limits = Config::from_toml(PER_METHOD).unwrap().layer().unwrap();
    policies_per_method_and_per_service(limits).await;
}

#[tokio::test]
async fn policies_per_method_and_per_service_in_code() {
    let policy = |name: &str, n| Policy::builder(name).limit(Limit::per_ip(per_hour(n))).build().unwrap();
    let limits = RateLimitLayer::builder()
        // The longest prefix wins, whichever is given first.
        .route("/weir.echo.v1.Echo/", policy("echo", 3))
        .route("/weir.echo.v1.Echo/Say", policy("say", 1))
        .build()
        .unwrap();
    let (addr, _) = serve(limits).await;
    let mut client = client(addr).await;
    client.say(say("one")).await.expect("admitted");
    let status = client.say(say("two")).await.expect_err("the method's policy");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("(policy \"say\""), "{}", status.message());
    for _ in 0..3 {
        client.count(CountRequest { n: 1 }).await.expect("the service's policy is apart");
    }
    let status = client.count(CountRequest { n: 1 }).await.expect_err("the service's policy");
    assert!(status.message().contains("(policy \"echo\""), "{}", status.message());
}

#[tokio::test]
async fn keys_from_metadata() {
    let limit = Limit::new(KeySource::header("x-api-key"), Store::local(per_hour(1)));
    let limits =
        RateLimitLayer::builder().policy(Policy::builder("api").limit(limit).build().unwrap()).build().unwrap();
    let (addr, calls) = serve(limits).await;
    let mut client = client(addr).await;
    let keyed = |key: &'static str| {
        let mut request = Request::new(say("hi"));
        request.metadata_mut().insert("x-api-key", key.parse().unwrap());
        request
    };
    // No key: the call does not say who it is from.
    let status = client.say(say("hi")).await.expect_err("no key");
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(status.message().contains("x-api-key"), "{}", status.message());
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_none());
    client.say(keyed("alice")).await.expect("alice's first call");
    let status = client.say(keyed("alice")).await.expect_err("alice's quota is spent");
    assert_eq!(status.code(), Code::ResourceExhausted);
    retry_delay(&status);
    client.say(keyed("bob")).await.expect("bob has his own quota");
    // Ordering: Relaxed: the calls have returned.
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

/// What a gRPC client with a retry policy does with a refusal (gRFC A6): waits the
/// pushback, then retries. The wait is the manual clock moved forward, as far.
async fn say_honouring_pushback(
    client: &mut EchoClient<Channel>,
    clock: &ManualClock,
    attempts: usize,
) -> (Result<Response<SayReply>, Status>, Vec<u64>) {
    let mut waited = Vec::new();
    loop {
        let result = client.say(say("again")).await;
        let pushback = match &result {
            Err(status) if status.code() == Code::ResourceExhausted && waited.len() + 1 < attempts => {
                metadata(status.metadata(), "grpc-retry-pushback-ms").and_then(|v| v.parse().ok())
            }
            _ => None,
        };
        let Some(ms) = pushback else { return (result, waited) };
        clock.advance(Duration::from_millis(ms));
        waited.push(ms);
    }
}

#[tokio::test]
async fn a_client_that_waits_the_pushback_is_admitted_and_one_that_waits_less_is_not() {
    let clock = ManualClock::new();
    let toml = r#"
        [[policy]]
        name = "api"
        default = true
        [[policy.limit]]
        key = "ip"
        quotas = [{ name = "minute", algorithm = "gcra", limit = 2, window = "1m" }]
    "#;
    let limits = Config::from_toml(toml).unwrap().clock(clock.clone()).layer().unwrap();
    let (addr, calls) = serve(limits).await;
    let mut client = client(addr).await;
    client.say(say("one")).await.expect("admitted");
    client.say(say("two")).await.expect("admitted");
    let status = client.say(say("three")).await.expect_err("refused");
    let delay = retry_delay(&status);
    assert_eq!(delay, Duration::from_secs(30), "one call comes back every 30 s");
    // A client that retries a millisecond early is refused again, told to wait that
    // millisecond.
    clock.advance(delay - Duration::from_millis(1));
    let status = client.say(say("early")).await.expect_err("a millisecond early");
    assert_eq!(retry_delay(&status), Duration::from_millis(1));
    // A client that waits the pushback is admitted on its retry.
    let (result, waited) = say_honouring_pushback(&mut client, &clock, 3).await;
    assert_eq!(waited, [1], "one wait of the pushback, then admitted");
    result.expect("admitted after the pushback");
    // Ordering: Relaxed: the calls have returned.
    assert_eq!(calls.load(Ordering::Relaxed), 3);
}

/// The same layer answers HTTP and gRPC, each in its own words, chosen by the
/// request's `content-type`.
#[tokio::test]
async fn one_layer_refuses_http_as_http_and_grpc_as_grpc() {
    use tower::{Service as _, ServiceExt as _};
    let layer = RateLimitLayer::per_ip(per_hour(1));
    let mut service = tower::ServiceBuilder::new().layer(layer).service(tower::service_fn(|_| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::from_static(b"ok")))
    }));
    let request = |content_type: &'static str| {
        let mut request = http::Request::post("/weir.echo.v1.Echo/Say").header("content-type", content_type);
        request.extensions_mut().unwrap().insert(weir_tower::PeerAddr("192.0.2.1:5000".parse().unwrap()));
        request.body(()).unwrap()
    };
    let admitted = service.ready().await.unwrap().call(request("application/grpc")).await.unwrap();
    assert_eq!(admitted.status(), http::StatusCode::OK);
    assert!(admitted.headers().get("grpc-status").is_none());
    let http = service.ready().await.unwrap().call(request("application/json")).await.unwrap();
    assert_eq!(http.status(), http::StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(http.headers()["content-type"], "application/problem+json");
    let grpc = service.ready().await.unwrap().call(request("application/grpc+proto")).await.unwrap();
    assert_eq!(grpc.status(), http::StatusCode::OK);
    assert_eq!(grpc.headers()["grpc-status"], "8");
    assert_eq!(grpc.headers()["content-type"], "application/grpc+proto", "the call's own framing");
    assert!(grpc.headers().contains_key("grpc-retry-pushback-ms"));
    assert!(grpc.body().is_empty(), "trailers-only: no body");
}

#[tokio::test]
async fn a_throttled_call_waits_its_turn_and_one_turned_away_is_resource_exhausted() {
    // One call every 20 ms, waiting up to an hour (so that no pause of the test's
    // process runs a waiter out of time): calls at once wait, none is refused.
    let waits = r#"
        [[policy]]
        name = "slow"
        default = true
        [[policy.limit]]
        key = "ip"
        throttle = { rate = 1, per = "20ms", capacity = 10, max_wait = "1h" }
    "#;
    let (addr, calls) = serve(Config::from_toml(waits).unwrap().layer().unwrap()).await;
    let shared = client(addr).await;
    let calls_at_once = (0..3).map(|i| {
        let mut client = shared.clone();
        tokio::spawn(async move { client.say(say(&i.to_string())).await })
    });
    for call in calls_at_once.collect::<Vec<_>>() {
        call.await.unwrap().expect("waited its turn");
    }
    // Ordering: Relaxed: the calls have returned.
    assert_eq!(calls.load(Ordering::Relaxed), 3);

    // One call an hour, waiting at most 1 s: the second call is turned away at once.
    let turned_away = r#"
        [[policy]]
        name = "hourly"
        default = true
        [[policy.limit]]
        key = "ip"
        throttle = { rate = 1, per = "1h", capacity = 10, max_wait = "1s" }
    "#;
    let (addr, _) = serve(Config::from_toml(turned_away).unwrap().layer().unwrap()).await;
    let mut client = client(addr).await;
    client.say(say("first")).await.expect("admitted");
    let status = client.say(say("second")).await.expect_err("turned away");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("quota \"throttle\""), "{}", status.message());
    let delay = retry_delay(&status);
    assert!(delay > Duration::from_secs(1), "{delay:?}");
}

/// A per-IP limit on a server that gives no peer address (tonic over a Unix socket
/// or an in-memory stream): the server's setup, not the client, is at fault.
#[tokio::test]
async fn a_per_ip_limit_without_a_peer_address_is_internal_and_says_how_to_fix_it() {
    use tower::{Service as _, ServiceExt as _};
    let mut service =
        tower::ServiceBuilder::new().layer(RateLimitLayer::per_ip(per_hour(1))).service(tower::service_fn(|_| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::new()))
        }));
    let request = http::Request::post("/weir.echo.v1.Echo/Say").header("content-type", "application/grpc").body(());
    let response = service.ready().await.unwrap().call(request.unwrap()).await.unwrap();
    let status = Status::from_header_map(response.headers()).expect("a gRPC status");
    assert_eq!(status.code(), Code::Internal);
    assert!(status.message().contains("`TcpConnectInfo`"), "{}", status.message());
    assert!(response.headers().get("grpc-retry-pushback-ms").is_none());
}
