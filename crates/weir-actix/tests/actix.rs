//! What is actix-web's own: the middleware on a `web::scope` (limiting only the
//! scope), a request without a peer address (a test request; a Unix socket), a
//! custom key over actix-web's request, a skip rule over it, and the metrics under
//! weir-tower's names. Called in process with `actix_web::test`.

use actix_web::dev::ServiceRequest;
use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use actix_web::{App, HttpResponse, web};
use weir_actix::{Config, Key, KeySource, Limit, Policy, RateLimit, Store};
use weir_keyed::{KeyedConfig, KeyedFixedWindow};
use weir_rl_core::{ManualClock, Quota};

const ONE_PER_MINUTE: &str = "[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nkey = \"ip\"\n\
                              quotas = [{ algorithm = \"fixed_window\", limit = 1, window = \"1m\" }]\n";

fn limit(toml: &str) -> RateLimit {
    RateLimit::from_config(Config::from_toml(toml).unwrap().clock(ManualClock::new())).unwrap()
}

fn get(path: &str) -> TestRequest {
    TestRequest::get().uri(path).peer_addr("192.0.2.7:4000".parse().unwrap())
}

#[actix_web::test]
async fn on_a_scope_only_the_scope_is_limited() {
    let app = init_service(
        App::new()
            .service(web::scope("/api").wrap(limit(ONE_PER_MINUTE)).route("/orders", web::get().to(HttpResponse::Ok)))
            .route("/", web::get().to(HttpResponse::Ok)),
    )
    .await;
    assert_eq!(call_service(&app, get("/api/orders").to_request()).await.status(), StatusCode::OK);
    let refused = call_service(&app, get("/api/orders").to_request()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    for _ in 0..3 {
        let outside = call_service(&app, get("/").to_request()).await;
        assert_eq!(outside.status(), StatusCode::OK);
        assert!(outside.headers().get("ratelimit").is_none());
    }
}

#[actix_web::test]
async fn a_request_without_a_peer_address_is_told_how_to_give_one() {
    let app = init_service(App::new().wrap(limit(ONE_PER_MINUTE)).route("/", web::get().to(HttpResponse::Ok))).await;
    let response = call_service(&app, TestRequest::get().uri("/").to_request()).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = serde_json::from_slice(&read_body(response).await).unwrap();
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("ServiceRequest::peer_addr") && detail.contains("HttpServer::bind"), "{detail}");
}

/// A custom key reads actix-web's own request (`native::<ServiceRequest>`), and a
/// skip rule is a closure over it.
#[actix_web::test]
async fn custom_keys_and_skip_rules_read_actix_webs_request() {
    let store = KeyedFixedWindow::<Key, _>::fixed_window_with_clock(
        Quota::per_minute(1).unwrap(),
        KeyedConfig::builder(10).build().unwrap(),
        ManualClock::new(),
    )
    .unwrap();
    let by_query = KeySource::custom(|request| {
        let native = request.native::<ServiceRequest>()?;
        Some(Key::custom(native.query_string().as_bytes()))
    });
    let limit = RateLimit::builder()
        .policy(Policy::builder("api").limit(Limit::new(by_query, Store::local(store))).build().unwrap())
        .skip(|request| request.headers().contains_key("x-internal"))
        .build()
        .unwrap();
    let app = init_service(App::new().wrap(limit).route("/", web::get().to(HttpResponse::Ok))).await;
    assert_eq!(call_service(&app, get("/?tenant=a").to_request()).await.status(), StatusCode::OK);
    assert_eq!(call_service(&app, get("/?tenant=a").to_request()).await.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(call_service(&app, get("/?tenant=b").to_request()).await.status(), StatusCode::OK);
    let internal = get("/?tenant=a").insert_header(("x-internal", "1")).to_request();
    assert_eq!(call_service(&app, internal).await.status(), StatusCode::OK);
}

/// The decisions are counted under weir-tower's names and labels.
#[cfg(feature = "metrics")]
#[actix_web::test]
async fn decisions_are_counted_under_weir_towers_names() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let limit = metrics::with_local_recorder(&recorder, || limit(ONE_PER_MINUTE));
    let app = init_service(App::new().wrap(limit).route("/", web::get().to(HttpResponse::Ok))).await;
    for _ in 0..2 {
        let _ = call_service(&app, get("/").to_request()).await;
    }
    let counted = |outcome: &str| {
        snapshotter.snapshot().into_vec().into_iter().find_map(|(key, _, _, value)| {
            let key = key.key();
            let matches = key.name() == "weir_tower_decisions_total"
                && key.labels().any(|l| l.key() == "outcome" && l.value() == outcome)
                && key.labels().any(|l| l.key() == "policy" && l.value() == "api");
            match (matches, value) {
                (true, DebugValue::Counter(n)) => Some(n),
                _ => None,
            }
        })
    };
    assert_eq!(counted("denied"), Some(1));
}
