//! The middleware in a real axum server on a loopback port, called by a real HTTP
//! client. The stores are weir-keyed's (GCRA, fixed window, sliding window, sliding
//! log) on a manual clock, so nothing refills during a test; throttle mode is
//! weir-leaky's `Throttle`.

mod common;

use axum::Router;
use axum::routing::get;
use common::{HttpClient, serve, serve_without_connect_info};
use http::StatusCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use weir_keyed::{KeyedConfig, KeyedFixedWindow, KeyedGcra, KeyedSlidingLog, KeyedSlidingWindow};
use weir_rl_core::{AllOf, KeyedLimiter, ManualClock, Quota};
use weir_tower::{
    ClientIp, Key, KeySource, KeyedThrottle, Limit, MissingKey, Policy, RateLimitLayer, Store, Tiers, User,
};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);
const DAY: Duration = Duration::from_secs(86_400);

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/health", get(|| async { "healthy" }))
        .route("/auth/login", get(|| async { "welcome" }))
        .route("/api/data", get(|| async { "data" }))
        .layer(layer)
        // Authentication runs first: `Authorization: Bearer <user>` becomes a `User`.
        .layer(axum::middleware::from_fn(|mut request: axum::extract::Request, next: axum::middleware::Next| async {
            let user = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(User::from);
            if let Some(user) = user {
                request.extensions_mut().insert(user);
            }
            next.run(request).await
        }))
}

fn config() -> KeyedConfig {
    KeyedConfig::builder(10_000).build().unwrap()
}

/// A per-key GCRA store on a clock that does not move.
fn gcra(quota: Quota) -> KeyedGcra<Key, ManualClock> {
    KeyedGcra::gcra_with_clock(quota, config(), ManualClock::new())
}

/// A per-key fixed window of `limit` per `window`, on a clock that does not move.
fn fixed(limit: u64, window: Duration) -> KeyedFixedWindow<Key, ManualClock> {
    let quota = Quota::new(limit, window).unwrap();
    KeyedFixedWindow::fixed_window_with_clock(quota, config(), ManualClock::new()).unwrap()
}

/// A per-key sliding-window counter.
fn sliding(limit: u64, window: Duration) -> KeyedSlidingWindow<Key, ManualClock> {
    let quota = Quota::new(limit, window).unwrap();
    KeyedSlidingWindow::sliding_window_with_clock(quota, config(), ManualClock::new()).unwrap()
}

/// A per-key sliding log.
fn log(limit: u64, window: Duration) -> KeyedSlidingLog<Key, ManualClock> {
    let quota = Quota::new(limit, window).unwrap();
    KeyedSlidingLog::sliding_log_with_clock(quota, config(), ManualClock::new()).unwrap()
}

/// What `store` has counted for `key` (its clock does not move, so nothing has
/// come back).
fn used(store: &impl KeyedLimiter<Key>, key: &Key) -> u64 {
    store.policies()[0].limit() - store.snapshot(key).remaining()
}

/// By default, the IETF fields alone: `RateLimit-Policy` and `RateLimit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_and_denied_responses_carry_the_headers_and_a_problem_body() {
    let layer = RateLimitLayer::per_ip(gcra(Quota::per_minute(3).unwrap()));
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();

    for remaining in [2, 1, 0] {
        let reply = client.get(addr, "/", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "ok");
        assert_eq!(reply.header("ratelimit-policy"), Some("\"minute\";q=3;w=60"));
        let reset = 20 * (3 - remaining);
        assert_eq!(reply.header("ratelimit"), Some(format!("\"minute\";r={remaining};t={reset}").as_str()));
        for name in ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"] {
            assert_eq!(reply.header(name), None, "{name}: the legacy fields are off by default");
        }
    }

    let denied = client.get(addr, "/", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("20"));
    assert_eq!(denied.header("content-type"), Some("application/problem+json"));
    assert_eq!(denied.header("ratelimit"), Some("\"minute\";r=0;t=20"));
    assert_eq!(denied.header("ratelimit-policy"), Some("\"minute\";q=3;w=60"));
    assert_eq!(denied.header("x-ratelimit-remaining"), None);
    let body = denied.json();
    assert_eq!(body["type"], "about:blank");
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(body["retry_after"], 20);
    assert_eq!(body["quota"], "minute");
    assert_eq!(body["detail"], "The rate limit for this client is exhausted. Retry after 20 seconds.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_second_wait_is_a_retry_after_of_one_second() {
    let layer = RateLimitLayer::per_ip(gcra(Quota::per_second(10).unwrap().with_burst(1).unwrap()));
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    assert_eq!(client.get(addr, "/", &[]).await.status, StatusCode::OK);
    let denied = client.get(addr, "/", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("1"), "100 ms rounds up to 1 s, never 0");
    assert_eq!(denied.json()["retry_after"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_and_the_legacy_headers_are_configurable() {
    let layer = RateLimitLayer::builder()
        .policy(Policy::builder("api").limit(Limit::per_ip(gcra(Quota::per_minute(3).unwrap()))).build().unwrap())
        .legacy_headers(true)
        .deny_body(|denied| weir_tower::DenyBody {
            content_type: http::HeaderValue::from_static("text/plain"),
            body: format!("slow down for {}s", denied.retry_after_secs.unwrap_or(0)).into(),
        })
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    for remaining in [2, 1, 0] {
        let reply = client.get(addr, "/", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        let reset = 20 * (3 - remaining);
        assert_eq!(reply.header("ratelimit"), Some(format!("\"minute\";r={remaining};t={reset}").as_str()));
        assert_eq!(reply.header("x-ratelimit-limit"), Some("3"));
        assert_eq!(reply.header("x-ratelimit-remaining"), Some(remaining.to_string().as_str()));
        assert_eq!(reply.header("x-ratelimit-reset"), Some(reset.to_string().as_str()));
    }
    let denied = client.get(addr, "/", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("content-type"), Some("text/plain"));
    assert_eq!(denied.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(denied.body, "slow down for 20s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skip_rule_lets_health_checks_through_unlimited() {
    let layer = RateLimitLayer::builder()
        .policy(Policy::builder("api").limit(Limit::per_ip(gcra(Quota::per_minute(2).unwrap()))).build().unwrap())
        .skip_path("/health")
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    for _ in 0..10 {
        let reply = client.get(addr, "/health", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit"), None, "a skipped request is not limited");
    }
    assert_eq!(client.get(addr, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(client.get(addr, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(client.get(addr, "/", &[]).await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(client.get(addr, "/health", &[]).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_route_is_stricter_than_the_api() {
    let api = Store::local(fixed(100, MINUTE));
    // Exactly 5 in any 5 minutes: a sliding log.
    let auth = Store::local(log(5, Duration::from_secs(300))).named(["auth"]);
    let ip = || KeySource::ip(ClientIp::default());
    let layer = RateLimitLayer::builder()
        .policy(Policy::builder("api").limit(Limit::new(ip(), api)).build().unwrap())
        .route("/auth", Policy::builder("auth").limit(Limit::new(ip(), auth)).build().unwrap())
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    for _ in 0..5 {
        let reply = client.get(addr, "/auth/login", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit-policy"), Some("\"auth\";q=5;w=300"));
    }
    let denied = client.get(addr, "/auth/login", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.json()["policy"], "auth");
    let api = client.get(addr, "/api/data", &[]).await;
    assert_eq!(api.status, StatusCode::OK, "the API's own, looser limit");
    assert_eq!(api.header("ratelimit"), Some("\"minute\";r=99;t=60"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_layer_limits_only_the_routes_it_wraps() {
    let layer = RateLimitLayer::per_ip(gcra(Quota::per_minute(1).unwrap()));
    let router = Router::new()
        .route("/limited", get(|| async { "limited" }))
        .route_layer(layer)
        .route("/open", get(|| async { "open" }));
    let addr = serve(router).await;
    let client = HttpClient::new();
    assert_eq!(client.get(addr, "/limited", &[]).await.status, StatusCode::OK);
    assert_eq!(client.get(addr, "/limited", &[]).await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(client.get(addr, "/open", &[]).await.status, StatusCode::OK);
    assert_eq!(client.get(addr, "/missing", &[]).await.status, StatusCode::NOT_FOUND);
}

/// Tiers: a free client with minute quota left and its day quota exhausted is
/// denied by the day, and the minute quota is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tier_quotas_are_checked_all_or_nothing() {
    let minute = Arc::new(sliding(5, MINUTE));
    let day = Arc::new(fixed(3, DAY));
    let free = Store::local(AllOf::new((Arc::clone(&minute), Arc::clone(&day))).unwrap()).named(["minute", "day"]);
    let pro = Store::local(AllOf::new((sliding(50, MINUTE), fixed(1000, DAY))).unwrap()).named(["minute", "day"]);
    let lookups = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&lookups);
    let tiers = Tiers::builder(move |key: Key| {
        counted.fetch_add(1, Ordering::Relaxed);
        async move { Ok::<_, String>(if key.payload().starts_with(b"pro-") { "pro" } else { "free" }) }
    })
    .tier("free", free)
    .tier("pro", pro)
    .build()
    .unwrap();
    let policy = Policy::builder("api").limit(Limit::tiered(KeySource::header("x-api-key"), tiers)).build().unwrap();
    let layer = RateLimitLayer::new(policy);
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    let key = Key::api_key(b"free-1");

    for day_left in [2, 1, 0] {
        let reply = client.get(addr, "/", &[("x-api-key", "free-1")]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit-policy"), Some("\"minute\";q=5;w=60, \"day\";q=3;w=86400"));
        // The day binds (it has the least left).
        assert_eq!(reply.header("ratelimit"), Some(format!("\"day\";r={day_left};t=86400").as_str()));
    }
    assert_eq!((used(&*minute, &key), used(&*day, &key)), (3, 3));

    let denied = client.get(addr, "/", &[("x-api-key", "free-1")]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.json()["quota"], "day");
    assert_eq!(used(&*minute, &key), 3, "the minute quota is unchanged by the denied request");
    assert_eq!(KeyedLimiter::snapshot(&*minute, &key).remaining(), 2);

    let pro = client.get(addr, "/", &[("x-api-key", "pro-1")]).await;
    assert_eq!(pro.status, StatusCode::OK);
    assert_eq!(pro.header("ratelimit-policy"), Some("\"minute\";q=50;w=60, \"day\";q=1000;w=86400"));
    assert_eq!(lookups.load(Ordering::Relaxed), 2, "one lookup per client; the rest from the cache");

    let no_key = client.get(addr, "/", &[]).await;
    assert_eq!(no_key.status, StatusCode::BAD_REQUEST, "no API key: not identified");
    assert_eq!(no_key.json()["title"], "Client Not Identified");
}

/// Per IP and per user at once: the strictest admission is in the headers, and a
/// request denied by the user limit takes nothing from the IP limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_ip_and_per_user_limits_layer() {
    let per_ip = Arc::new(fixed(10, MINUTE));
    let per_user = Arc::new(log(2, MINUTE));
    let events = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&events);
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::builder("api")
                .limit(Limit::new(KeySource::ip(ClientIp::default()), Store::local(Arc::clone(&per_ip))))
                .limit(
                    Limit::new(KeySource::user(), Store::local(Arc::clone(&per_user))).on_missing_key(MissingKey::Skip),
                )
                .build()
                .unwrap(),
        )
        .on_limit(move |event| {
            assert_eq!(event.key, Some(&Key::user("alice")));
            assert_eq!(event.request.uri.path(), "/");
            seen.fetch_add(1, Ordering::Relaxed);
        })
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    let ip = Key::ip("127.0.0.1".parse().unwrap());
    let alice = [("authorization", "Bearer alice")];

    let first = client.get(addr, "/", &alice).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("ratelimit-policy"), Some("\"minute\";q=10;w=60, \"minute-2\";q=2;w=60"));
    assert_eq!(first.header("ratelimit"), Some("\"minute-2\";r=1;t=60"), "the user limit is the strictest");
    assert_eq!(client.get(addr, "/", &alice).await.status, StatusCode::OK);
    let denied = client.get(addr, "/", &alice).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.json()["quota"], "minute-2");
    assert_eq!(used(&*per_ip, &ip), 2, "the denied request took nothing from the IP limit");
    assert_eq!(events.load(Ordering::Relaxed), 1);

    // Another user on the same IP is limited by the IP alone once the user is unknown.
    let anonymous = client.get(addr, "/", &[]).await;
    assert_eq!(anonymous.status, StatusCode::OK);
    assert_eq!(anonymous.header("ratelimit-policy"), Some("\"minute\";q=10;w=60"), "the user limit was skipped");
    assert_eq!(used(&*per_ip, &ip), 3);
    assert_eq!(used(&*per_user, &Key::user("alice")), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spoofed_forwarded_header_from_an_untrusted_peer_is_ignored() {
    let store = Arc::new(fixed(3, MINUTE));
    let client_ip = ClientIp::builder().trust_proxies(["10.0.0.0/8"]).build().unwrap();
    let layer = RateLimitLayer::new(
        Policy::builder("api")
            .limit(Limit::new(KeySource::ip(client_ip), Store::local(Arc::clone(&store))))
            .build()
            .unwrap(),
    );
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    let mut statuses = Vec::new();
    for i in 0..5 {
        // A fresh fake client address on every request.
        let fake = format!("198.51.100.{i}, 10.0.0.{i}");
        statuses.push(client.get(addr, "/", &[("x-forwarded-for", &fake)]).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!(used(&*store, &Key::ip("127.0.0.1".parse().unwrap())), 3, "all counted against the real peer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_clients_are_grouped_by_their_64_bit_prefix() {
    let store = Arc::new(fixed(2, MINUTE));
    // The loopback peer is the trusted proxy; it forwards IPv6 clients.
    let client_ip = ClientIp::builder().trust_proxies(["127.0.0.1"]).build().unwrap();
    let layer = RateLimitLayer::new(
        Policy::builder("api")
            .limit(Limit::new(KeySource::ip(client_ip), Store::local(Arc::clone(&store))))
            .build()
            .unwrap(),
    );
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    assert_eq!(client.get(addr, "/", &from("2001:db8:1:2::a")).await.status, StatusCode::OK);
    assert_eq!(client.get(addr, "/", &from("2001:db8:1:2:ffff::b")).await.status, StatusCode::OK);
    let same_64 = client.get(addr, "/", &from("2001:db8:1:2::c")).await;
    assert_eq!(same_64.status, StatusCode::TOO_MANY_REQUESTS, "one /64, one client");
    let other_64 = client.get(addr, "/", &from("2001:db8:1:3::a")).await;
    assert_eq!(other_64.status, StatusCode::OK);
    assert_eq!(used(&*store, &Key::ip_grouped("2001:db8:1:2::".parse().unwrap(), 64)), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_hyper_server_runs_the_layer_through_tower() {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt as _;
    use weir_tower::PeerAddr;

    let layer = RateLimitLayer::per_ip(gcra(Quota::per_minute(1).unwrap()));
    let service =
        tower::ServiceBuilder::new().layer(layer).service_fn(|_request: http::Request<hyper::body::Incoming>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from(
                "hyper",
            ))))
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else { return };
            // The peer address goes into each request's extensions.
            let service = service.clone().map_request(move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(PeerAddr(peer));
                request
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)),
            );
        }
    });
    let client = HttpClient::new();
    let ok = client.get(addr, "/", &[]).await;
    assert_eq!((ok.status, &ok.body[..]), (StatusCode::OK, &b"hyper"[..]));
    assert!(ok.header("ratelimit").is_some());
    assert_eq!(client.get(addr, "/", &[]).await.status, StatusCode::TOO_MANY_REQUESTS);
}

/// axum issue #2634: a non-`Clone` tower `RateLimit` made `Clone` gave every clone
/// its own budget, and 1 500 concurrent requests passed a limit of 5. Every clone of
/// this layer's service shares one store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_never_exceed_the_limit() {
    let layer = RateLimitLayer::per_ip(gcra(Quota::per_second(5).unwrap()));
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    let requests: Vec<_> = (0..300)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.get(addr, "/", &[]).await.status })
        })
        .collect();
    let mut ok = 0;
    for request in requests {
        match request.await.unwrap() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(ok, 5, "exactly the burst, however many arrive at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_requests_follow_the_limits_choice() {
    let user = |missing| {
        Policy::builder("users")
            .limit(Limit::new(KeySource::user(), Store::local(fixed(1, MINUTE))).on_missing_key(missing))
            .build()
            .unwrap()
    };
    let client = HttpClient::new();

    let deny = serve(app(RateLimitLayer::new(user(MissingKey::Deny)))).await;
    assert_eq!(client.get(deny, "/", &[]).await.status, StatusCode::BAD_REQUEST);
    assert_eq!(client.get(deny, "/", &[("authorization", "Bearer a")]).await.status, StatusCode::OK);

    let skip = serve(app(RateLimitLayer::new(user(MissingKey::Skip)))).await;
    for _ in 0..3 {
        let reply = client.get(skip, "/", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit"), None);
    }

    let shared = serve(app(RateLimitLayer::new(user(MissingKey::Shared(Key::custom(b"anonymous")))))).await;
    assert_eq!(client.get(shared, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(client.get(shared, "/", &[]).await.status, StatusCode::TOO_MANY_REQUESTS, "anonymous share one key");
    assert_eq!(client.get(shared, "/", &[("authorization", "Bearer b")]).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_connect_info_is_told_how_to_give_the_peer_address() {
    let addr = serve_without_connect_info(app(RateLimitLayer::per_ip(gcra(Quota::per_minute(100).unwrap())))).await;
    let reply = HttpClient::new().get(addr, "/", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let body = reply.json();
    let detail = body["detail"].as_str().expect("a detail");
    assert!(detail.contains("into_make_service_with_connect_info::<SocketAddr>()"), "{detail}");
    assert!(detail.contains("PeerAddr"), "{detail}");
    assert!(detail.contains("`axum` feature"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttle_mode_waits_then_succeeds() {
    let throttle =
        KeyedThrottle::builder(Quota::per_second(20).unwrap(), 10).max_wait(Duration::from_secs(3)).build().unwrap();
    let policy =
        Policy::builder("paced").limit(Limit::throttle(KeySource::ip(ClientIp::default()), throttle)).build().unwrap();
    let layer = RateLimitLayer::new(policy);
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    let requests: Vec<_> = (0..5)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.get(addr, "/", &[]).await.status })
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap(), StatusCode::OK, "over the rate, but waited instead of refused");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnecting_waiter_frees_its_place() {
    use tokio::io::AsyncWriteExt as _;

    // One request per hour per client, one waiting at most, for at most 90
    // minutes: a waiter's turn (in an hour) does not come during the test, and
    // the request after it, whose turn would come in two hours, is turned away at
    // once unless the waiter's slot was given back.
    let throttle =
        Arc::new(KeyedThrottle::builder(Quota::new(1, HOUR).unwrap(), 1).max_wait(HOUR + HOUR / 2).build().unwrap());
    let key = Key::ip("127.0.0.1".parse().unwrap());
    let layer = RateLimitLayer::new(
        Policy::builder("paced")
            .limit(Limit::throttle_shared(KeySource::ip(ClientIp::default()), Arc::clone(&throttle)))
            .build()
            .unwrap(),
    );
    let addr = serve(app(layer)).await;
    let client = HttpClient::new();
    assert_eq!(client.get(addr, "/", &[]).await.status, StatusCode::OK, "an idle throttle lets the first through");

    // A waiter on its own connection, which it then closes.
    let mut waiter = tokio::net::TcpStream::connect(addr).await.unwrap();
    waiter.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").await.unwrap();
    until(|| throttle.waiting(&key) == 1).await;
    let full = client.get(addr, "/", &[]).await;
    assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS, "the one place is taken");
    assert!(full.header("retry-after").is_some());

    drop(waiter); // the client goes away
    until(|| throttle.waiting(&key) == 0).await;
    // The next request takes the freed place, and the freed slot: its turn comes
    // within max_wait, so it waits (a 429 would leave nobody waiting).
    let mut next = tokio::net::TcpStream::connect(addr).await.unwrap();
    next.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").await.unwrap();
    until(|| throttle.waiting(&key) == 1).await;
    let full = client.get(addr, "/", &[]).await;
    assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS, "the place went to the next request");
    // Told to come back when the next request's turn has passed, within the hour
    // (had the waiter's slot been spent, the next request's turn, and this one's,
    // would be two hours away).
    let retry: u64 = full.header("retry-after").expect("a Retry-After").parse().unwrap();
    assert!(retry <= 3_600, "Retry-After: {retry} s");
    assert_eq!(throttle.waiting(&key), 1, "the next request still waits for its turn");
}

/// Waits until `done`, checking every 10 ms: a guard against a hang (30 s, room
/// for any load), not a timing claim.
async fn until(done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "not reached within 30 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A request admitted by a limit and then waiting in a throttle, whose client goes
/// away, gives the admission back: it never reached the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_goes_away_while_waiting_consumes_nothing() {
    use tokio::io::AsyncWriteExt as _;

    let store = Arc::new(fixed(10, MINUTE));
    // One request per hour: the waiter's turn does not come during the test.
    let throttle =
        Arc::new(KeyedThrottle::builder(Quota::new(1, HOUR).unwrap(), 1).max_wait(2 * HOUR).build().unwrap());
    let ip = || KeySource::ip(ClientIp::default());
    let layer = RateLimitLayer::new(
        Policy::builder("paced")
            .limit(Limit::throttle_shared(ip(), Arc::clone(&throttle)))
            .limit(Limit::new(ip(), Store::local(Arc::clone(&store))))
            .build()
            .unwrap(),
    );
    let addr = serve(app(layer)).await;
    let key = Key::ip("127.0.0.1".parse().unwrap());
    assert_eq!(HttpClient::new().get(addr, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(used(&*store, &key), 1);

    let mut waiter = tokio::net::TcpStream::connect(addr).await.unwrap();
    waiter.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").await.unwrap();
    until(|| throttle.waiting(&key) == 1).await;
    assert_eq!(used(&*store, &key), 2, "admitted by the store, waiting in the throttle");
    drop(waiter);
    until(|| throttle.waiting(&key) == 0).await;
    // The server drops the request's future on a thread of its own: its place in
    // the line goes first, then the store's admission.
    until(|| used(&*store, &key) == 1).await;
    assert_eq!(used(&*store, &key), 1, "the admission was given back");
}

#[test]
fn the_layer_and_its_service_are_clone_send_and_sync() {
    fn shareable<T: Clone + Send + Sync + 'static>() {}
    shareable::<RateLimitLayer>();
    shareable::<weir_tower::RateLimit<axum::routing::Route>>();
    shareable::<weir_tower::RateLimit<Router>>();
}
