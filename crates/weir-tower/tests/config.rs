//! Layers built from TOML, in process (the router called as a tower service).

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, StatusCode};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tower::ServiceExt as _;
use weir_rl_core::{KeyedLimiter, ManualClock};
use weir_tower::config::{QuotaConfig, memory_store_with_clock};
use weir_tower::{Config, Key};

async fn get_from(router: &Router, path: &str, headers: &[(&str, &str)]) -> http::Response<Body> {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Body::empty()).unwrap();
    request.extensions_mut().insert(ConnectInfo("192.0.2.7:4000".parse::<SocketAddr>().unwrap()));
    router.clone().oneshot(request).await.unwrap()
}

fn header<'a>(response: &'a http::Response<Body>, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

fn plan(key: Key) -> std::future::Ready<Result<&'static str, String>> {
    std::future::ready(Ok(if key.payload().starts_with(b"pro-") { "pro" } else { "free" }))
}

#[tokio::test]
async fn the_example_configuration_builds_and_limits() {
    let layer = Config::from_toml(include_str!("../examples/tiers.toml"))
        .unwrap()
        .tier_lookup(plan)
        .clock(ManualClock::new())
        .layer()
        .unwrap();
    let router = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/api/hello", get(|| async { "hello" }))
        .route("/auth/login", get(|| async { "in" }))
        .layer(layer);

    let health = get_from(&router, "/health", &[]).await;
    assert_eq!((health.status(), header(&health, "ratelimit")), (StatusCode::OK, None));

    let anonymous = get_from(&router, "/api/hello", &[]).await;
    assert_eq!(header(&anonymous, "ratelimit-policy"), Some("\"ip\";q=100;w=60"));

    let free = get_from(&router, "/api/hello", &[("x-api-key", "free-1")]).await;
    assert_eq!(
        header(&free, "ratelimit-policy"),
        Some("\"ip\";q=100;w=60, \"burst\";q=10;w=20, \"minute\";q=30;w=60, \"day\";q=1000;w=86400")
    );
    assert_eq!(header(&free, "ratelimit"), Some("\"burst\";r=9;t=2"));

    for _ in 0..5 {
        assert_eq!(get_from(&router, "/auth/login", &[]).await.status(), StatusCode::OK);
    }
    let auth = get_from(&router, "/auth/login", &[]).await;
    assert_eq!(auth.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&auth, "retry-after"), Some("300"));
}

/// The stores a configuration built, kept to look at.
type Built = Arc<Mutex<Vec<(String, Arc<dyn KeyedLimiter<Key> + Send + Sync>)>>>;

fn recording(
    clock: ManualClock,
    built: Built,
) -> impl Fn(&QuotaConfig) -> Result<Box<dyn KeyedLimiter<Key> + Send + Sync>, String> {
    move |config: &QuotaConfig| {
        let store: Arc<dyn KeyedLimiter<Key> + Send + Sync> =
            Arc::from(memory_store_with_clock(config, clock.clone())?);
        built.lock().unwrap().push((config.name.clone(), Arc::clone(&store)));
        Ok(Box::new(store))
    }
}

#[tokio::test]
async fn a_tier_denied_by_its_day_quota_leaves_its_minute_quota_untouched() {
    const TOML: &str = r#"
[[policy]]
name = "api"
default = true
[[policy.limit]]
key = "header:x-api-key"
tiered = true

[tiers.free]
quotas = [
  { name = "minute", algorithm = "sliding_window", limit = 5, window = "1m" },
  { name = "day", algorithm = "fixed_window", limit = 3, window = "1d" },
]
"#;
    let clock = ManualClock::new();
    let built: Built = Arc::default();
    let layer = Config::from_toml(TOML)
        .unwrap()
        .tier_lookup(plan)
        .store_factory(recording(clock.clone(), Arc::clone(&built)))
        .layer()
        .unwrap();
    let router = Router::new().route("/", get(|| async { "ok" })).layer(layer);
    let key = Key::api_key(b"free-1");
    let minute = Arc::clone(&built.lock().unwrap()[0].1);
    assert_eq!(built.lock().unwrap()[0].0, "minute");

    for day_left in [2, 1, 0] {
        let ok = get_from(&router, "/", &[("x-api-key", "free-1")]).await;
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(header(&ok, "ratelimit"), Some(format!("\"day\";r={day_left};t=86400").as_str()));
    }
    assert_eq!(minute.snapshot(&key).remaining(), 2);
    let denied = get_from(&router, "/", &[("x-api-key", "free-1")]).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "ratelimit"), Some("\"day\";r=0;t=86400"));
    assert_eq!(minute.snapshot(&key).remaining(), 2, "minute left, day exhausted: the minute is unchanged");
}

#[test]
fn a_cost_above_a_quota_is_refused_at_build_time() {
    const TOML: &str = r#"
[[policy]]
name = "bulk"
default = true
cost = 10
[[policy.limit]]
key = "ip"
quotas = [{ algorithm = "gcra", limit = 100, window = "1m", burst = 5 }]
"#;
    let error = Config::from_toml(TOML).unwrap().layer().unwrap_err();
    assert!(error.message.contains("costs 10 per request, but its quota `burst` admits at most 5"), "{error}");
}

/// `skip_methods` exempts CORS preflights in one line; a name that is no method is
/// an error naming the field.
#[tokio::test]
async fn skip_methods_exempts_preflights() {
    let toml = r#"
skip_methods = ["OPTIONS", "HEAD"]
[[policy]]
name = "api"
default = true
[[policy.limit]]
key = "ip"
quotas = [{ algorithm = "fixed_window", limit = 1, window = "1m" }]
"#;
    let layer = Config::from_toml(toml).unwrap().clock(ManualClock::new()).layer().unwrap();
    let router = Router::new().route("/", get(|| async { "ok" }).options(|| async { "preflight" })).layer(layer);
    for _ in 0..5 {
        let mut request = Request::options("/").body(Body::empty()).unwrap();
        request.extensions_mut().insert(ConnectInfo("192.0.2.7:4000".parse::<SocketAddr>().unwrap()));
        let preflight = router.clone().oneshot(request).await.unwrap();
        assert_eq!((preflight.status(), header(&preflight, "ratelimit")), (StatusCode::OK, None));
    }
    assert_eq!(get_from(&router, "/", &[]).await.status(), StatusCode::OK);
    assert_eq!(get_from(&router, "/", &[]).await.status(), StatusCode::TOO_MANY_REQUESTS);

    let e = Config::from_toml(&toml.replace("\"HEAD\"", "\"\"")).unwrap_err();
    assert_eq!((e.line, e.field.as_deref()), (Some(2), Some("skip_methods[1]")), "{e}");
}

/// `long_keys = "refuse"` refuses a header value over `MAX_KEY_BYTES` with a 400;
/// by default it is kept as its hash. A value other than `hash` or `refuse` is an
/// error naming the field.
#[tokio::test]
async fn long_keys_are_hashed_or_refused_as_the_file_says() {
    let toml = r#"
[[policy]]
name = "api"
default = true
[[policy.limit]]
key = "header:x-api-key"
long_keys = "refuse"
quotas = [{ algorithm = "fixed_window", limit = 5, window = "1m" }]
"#;
    let long = "k".repeat(weir_tower::MAX_KEY_BYTES + 1);
    let router = |toml: &str| {
        let layer = Config::from_toml(toml).unwrap().clock(ManualClock::new()).layer().unwrap();
        Router::new().route("/", get(|| async { "ok" })).layer(layer)
    };
    let refusing = router(toml);
    assert_eq!(get_from(&refusing, "/", &[("x-api-key", &long)]).await.status(), StatusCode::BAD_REQUEST);
    assert_eq!(get_from(&refusing, "/", &[("x-api-key", &long[1..])]).await.status(), StatusCode::OK);
    let hashing = router(&toml.replace("long_keys = \"refuse\"\n", ""));
    assert_eq!(get_from(&hashing, "/", &[("x-api-key", &long)]).await.status(), StatusCode::OK);
    let e = Config::from_toml(&toml.replace("\"refuse\"", "\"truncate\"")).unwrap_err();
    assert_eq!((e.line, e.field.as_deref()), (Some(7), Some("policy[0].limit[0].long_keys")), "{e}");
}

/// gRPC paths (`/package.Service/Method`) as route prefixes: a method's policy
/// applies to that method alone (not to `/SayMore`), a service's (ending in `/`) to
/// the rest of the service, and the longest prefix wins.
#[tokio::test]
async fn grpc_services_and_methods_are_route_prefixes() {
    let toml = r#"
        [[policy]]
        name = "echo"
        routes = ["/weir.echo.v1.Echo/"]
        [[policy.limit]]
        key = "ip"
        quotas = [{ name = "echo", algorithm = "fixed_window", limit = 2, window = "1h" }]

        [[policy]]
        name = "say"
        routes = ["/weir.echo.v1.Echo/Say"]
        [[policy.limit]]
        key = "ip"
        quotas = [{ name = "say", algorithm = "fixed_window", limit = 1, window = "1h" }]
    "#;
    let layer = Config::from_toml(toml).unwrap().clock(ManualClock::new()).layer().unwrap();
    let router = Router::new()
        .route("/weir.echo.v1.Echo/Say", get(|| async { "say" }))
        .route("/weir.echo.v1.Echo/SayMore", get(|| async { "more" }))
        .route("/weir.echo.v1.EchoTwo/Say", get(|| async { "other service" }))
        .layer(layer);
    let say = get_from(&router, "/weir.echo.v1.Echo/Say", &[]).await;
    assert_eq!((say.status(), header(&say, "ratelimit-policy")), (StatusCode::OK, Some("\"say\";q=1;w=3600")));
    let say = get_from(&router, "/weir.echo.v1.Echo/Say", &[]).await;
    assert_eq!(say.status(), StatusCode::TOO_MANY_REQUESTS);
    for _ in 0..2 {
        let more = get_from(&router, "/weir.echo.v1.Echo/SayMore", &[]).await;
        assert_eq!((more.status(), header(&more, "ratelimit-policy")), (StatusCode::OK, Some("\"echo\";q=2;w=3600")));
    }
    let more = get_from(&router, "/weir.echo.v1.Echo/SayMore", &[]).await;
    assert_eq!(more.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another service whose name starts the same is not under either prefix.
    let other = get_from(&router, "/weir.echo.v1.EchoTwo/Say", &[]).await;
    assert_eq!((other.status(), header(&other, "ratelimit")), (StatusCode::OK, None));
}

/// Two policies claiming one route prefix: the second never applied (a
/// 1-per-minute `/auth` policy answered 200, 200, 200, the `api` policy's limit
/// deciding). Refused, naming the policy, the route, its field and line.
#[test]
fn two_policies_claiming_one_route_are_refused() {
    let text = r#"
[[policy]]
name = "api"
routes = ["/auth", "/api"]
[[policy.limit]]
key = "ip"
quotas = [{ algorithm = "gcra", limit = 100, window = "1m" }]

[[policy]]
name = "login"
routes = ["/auth"]
[[policy.limit]]
key = "ip"
quotas = [{ algorithm = "fixed_window", limit = 1, window = "1m" }]
"#;
    let e = Config::from_toml(text).map(|_| ()).unwrap_err();
    assert_eq!((e.line, e.field.as_deref()), (Some(11), Some("policy[1].routes[0]")), "{e}");
    assert!(e.message.contains("`/auth`") && e.message.contains("`api`") && e.message.contains("`login`"), "{e}");
    // The same prefix given to the builder twice is refused as well.
    let policy = |name: &str| weir_tower::Policy::builder(name).build().unwrap();
    let e = weir_tower::RateLimitLayer::builder()
        .route("/auth", policy("api"))
        .route("/auth", policy("login"))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("`/auth`"), "{e}");
}

/// A reload through the layer: the next request is decided by the new limits; an
/// invalid configuration is refused and the old limits go on answering.
#[tokio::test]
async fn a_reloaded_configuration_is_in_force_for_the_next_request() {
    let clock = ManualClock::new();
    let text = |limit: u64| {
        format!(
            "[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nkey = \"ip\"\n\
             quotas = [{{ algorithm = \"fixed_window\", limit = {limit}, window = \"1m\" }}]\n"
        )
    };
    let parsed = |limit| weir_http::Config::from_toml(&text(limit)).unwrap().clock(clock.clone());
    let limits = weir_tower::Reloadable::from_config(parsed(1)).unwrap();
    let router =
        Router::new().route("/", get(|| async { "ok" })).layer(weir_tower::RateLimitLayer::reloadable(limits.clone()));
    assert_eq!(get_from(&router, "/", &[]).await.status(), StatusCode::OK);
    assert_eq!(get_from(&router, "/", &[]).await.status(), StatusCode::TOO_MANY_REQUESTS);
    limits.reload(parsed(5)).unwrap();
    let response = get_from(&router, "/", &[]).await;
    assert_eq!((response.status(), header(&response, "ratelimit")), (StatusCode::OK, Some("\"minute\";r=4;t=60")));
    let error = weir_http::Config::from_toml(&text(0)).map(|_| ()).unwrap_err();
    assert_eq!(error.field.as_deref(), Some("policy[0].limit[0].quotas[0].limit"));
}
