//! What the middleware answers, called in process (tower's `oneshot`) on stores of a
//! manual clock: the longest wait among the limits that refuse, a throttle's wait
//! until a turn, a full store, a request without its key, a long key (refused under
//! every missing-key mode), and the methods a layer exempts.

use bytes::Bytes;
use core::convert::Infallible;
use http::{Method, Request, Response, StatusCode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tower::{ServiceExt, service_fn};
use weir_keyed::{AtCapacity, KeyedConfig, KeyedFixedWindow, KeyedGcra};
use weir_rl_core::KeyedLimiter;
use weir_rl_core::{AllOf, ManualClock, Quota};
use weir_tower::{
    Key, KeySource, KeyedThrottle, Limit, LongKeys, MAX_KEY_BYTES, MissingKey, PeerAddr, Policy, RateLimitLayer, Store,
};

/// Sends `request` through `layer` around a service that answers `ok`.
async fn send(layer: &RateLimitLayer, request: Request<()>) -> Response<Bytes> {
    let service = tower::Layer::layer(
        layer,
        service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Bytes::from_static(b"ok"))) }),
    );
    service.oneshot(request).await.unwrap()
}

fn get(path: &str, headers: &[(&str, &[u8])]) -> Request<()> {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(()).unwrap();
    let peer: SocketAddr = "203.0.113.5:4000".parse().unwrap();
    request.extensions_mut().insert(PeerAddr(peer));
    request
}

fn header<'a>(response: &'a Response<Bytes>, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

fn json(response: &Response<Bytes>) -> serde_json::Value {
    serde_json::from_slice(response.body()).unwrap()
}

fn config() -> KeyedConfig {
    KeyedConfig::builder(1_000).build().unwrap()
}

/// A per-second and a per-minute limit: once both refuse, the answer is the
/// per-minute wait (59 s), not the per-second one (1 s) after which the retry
/// would be refused again.
#[tokio::test(flavor = "current_thread")]
async fn retry_after_is_the_longest_wait_among_the_limits_that_refuse() {
    let clock = ManualClock::new();
    let second = KeyedGcra::gcra_with_clock(Quota::per_second(1).unwrap(), config(), clock.clone());
    let minute =
        KeyedFixedWindow::fixed_window_with_clock(Quota::per_minute(2).unwrap(), config(), clock.clone()).unwrap();
    let policy = Policy::builder("api")
        .limit(Limit::new(KeySource::global(), Store::local(second)))
        .limit(Limit::new(KeySource::global(), Store::local(minute)))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy);
    assert_eq!(send(&layer, get("/", &[])).await.status(), StatusCode::OK);
    clock.advance(Duration::from_secs(1));
    assert_eq!(send(&layer, get("/", &[])).await.status(), StatusCode::OK);
    let refused = send(&layer, get("/", &[])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), Some("59"), "the minute's wait, not the second's");
    assert_eq!(header(&refused, "ratelimit"), Some("\"minute\";r=0;t=59"));
    assert_eq!(json(&refused)["quota"], "minute");
    // And it is true: a retry after 58 s is refused, one after 59 s admitted.
    clock.advance(Duration::from_secs(58));
    assert_eq!(send(&layer, get("/", &[])).await.status(), StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_secs(1));
    assert_eq!(send(&layer, get("/", &[])).await.status(), StatusCode::OK);
}

/// The same for a tier's quotas, one store of several (an `AllOf`): the burst
/// refuses first, but the day is what the client must wait for.
#[tokio::test(flavor = "current_thread")]
async fn retry_after_of_quotas_checked_together_is_the_longest() {
    let clock = ManualClock::new();
    let burst = KeyedGcra::gcra_with_clock(Quota::per_second(1).unwrap(), config(), clock.clone());
    let day = KeyedFixedWindow::fixed_window_with_clock(
        Quota::new(2, Duration::from_secs(86_400)).unwrap(),
        config(),
        clock.clone(),
    )
    .unwrap();
    let store = Store::local(AllOf::new::<Key>((burst, day)).unwrap()).named(["burst", "day"]);
    let layer =
        RateLimitLayer::new(Policy::builder("api").limit(Limit::new(KeySource::global(), store)).build().unwrap());
    assert_eq!(send(&layer, get("/", &[])).await.status(), StatusCode::OK);
    clock.advance(Duration::from_secs(1));
    assert_eq!(send(&layer, get("/", &[])).await.status(), StatusCode::OK);
    let refused = send(&layer, get("/", &[])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), Some("86399"));
    assert_eq!(json(&refused)["quota"], "day");
}

/// A store full of other clients refuses a new one for its capacity: the answer says
/// so, and carries no `RateLimit` fields of a bucket the client does not have.
#[tokio::test(flavor = "current_thread")]
async fn a_full_store_says_it_is_full_not_that_the_client_is_limited() {
    let full = KeyedConfig::builder(1).at_capacity(AtCapacity::Deny).build().unwrap();
    let store = KeyedGcra::gcra_with_clock(Quota::per_minute(10).unwrap(), full, ManualClock::new());
    let limit = Limit::new(KeySource::header("x-api-key"), Store::local(store));
    let policy = Policy::builder("api").limit(limit).build().unwrap();
    // The legacy fields on: none of them either.
    let layer = RateLimitLayer::builder().policy(policy).legacy_headers(true).build().unwrap();
    assert_eq!(send(&layer, get("/", &[("x-api-key", b"first")])).await.status(), StatusCode::OK);
    let refused = send(&layer, get("/", &[("x-api-key", b"second")])).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    for name in ["ratelimit", "x-ratelimit-remaining", "x-ratelimit-limit", "x-ratelimit-reset"] {
        assert_eq!(header(&refused, name), None, "{name}");
    }
    assert_eq!(header(&refused, "retry-after"), Some("1"));
    let body = json(&refused);
    assert_eq!(body["status"], 503);
    assert_eq!(body["title"], "Too Many Clients");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("as many clients as it can hold"), "{detail}");
    assert!(!detail.contains("exhausted"), "{detail}");
}

/// A request without the header its limit reads is told which header that is.
#[tokio::test(flavor = "current_thread")]
async fn a_request_without_its_key_is_told_where_the_key_is_read_from() {
    let store = KeyedGcra::gcra_with_clock(Quota::per_minute(10).unwrap(), config(), ManualClock::new());
    let layer = RateLimitLayer::new(
        Policy::builder("api").limit(Limit::new(KeySource::header("x-api-key"), Store::local(store))).build().unwrap(),
    );
    for request in [get("/", &[]), get("/", &[("x-api-key", b"")]), get("/", &[("x-api-key", b"   ")])] {
        let refused = send(&layer, request).await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let detail = json(&refused)["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("`x-api-key` header"), "{detail}");
    }
    let store = KeyedGcra::gcra_with_clock(Quota::per_minute(10).unwrap(), config(), ManualClock::new());
    let layer = RateLimitLayer::new(
        Policy::builder("api").limit(Limit::new(KeySource::user(), Store::local(store))).build().unwrap(),
    );
    let refused = send(&layer, get("/", &[])).await;
    let detail = json(&refused)["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("authenticated user"), "{detail}");
}

/// A header value over `MAX_KEY_BYTES` is kept as its hash by default (so one client
/// with a long key is still one client), or refused with a 400 that says why.
#[tokio::test(flavor = "current_thread")]
async fn a_long_key_is_hashed_or_refused_as_the_source_says() {
    let long = vec![b'k'; 100 * 1024];
    let store = KeyedGcra::gcra_with_clock(Quota::per_minute(2).unwrap(), config(), ManualClock::new());
    let layer = RateLimitLayer::new(
        Policy::builder("api").limit(Limit::new(KeySource::header("x-api-key"), Store::local(store))).build().unwrap(),
    );
    for _ in 0..2 {
        assert_eq!(send(&layer, get("/", &[("x-api-key", &long)])).await.status(), StatusCode::OK);
    }
    assert_eq!(send(&layer, get("/", &[("x-api-key", &long)])).await.status(), StatusCode::TOO_MANY_REQUESTS);
    let mut other = long.clone();
    other[0] = b'j';
    assert_eq!(send(&layer, get("/", &[("x-api-key", &other)])).await.status(), StatusCode::OK, "another client");

    let store = KeyedGcra::gcra_with_clock(Quota::per_minute(2).unwrap(), config(), ManualClock::new());
    let source = KeySource::header("x-api-key").long_keys(weir_tower::LongKeys::Refuse);
    let limit = Limit::new(source, Store::local(store)).on_missing_key(weir_tower::MissingKey::Skip);
    let layer = RateLimitLayer::new(Policy::builder("api").limit(limit).build().unwrap());
    let refused = send(&layer, get("/", &[("x-api-key", &long)])).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "refused, not skipped as a missing key");
    let detail = json(&refused)["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("`x-api-key` header is longer than 128 bytes"), "{detail}");
    let short = vec![b'k'; weir_tower::MAX_KEY_BYTES];
    assert_eq!(send(&layer, get("/", &[("x-api-key", &short)])).await.status(), StatusCode::OK);
}

/// CORS preflights (`OPTIONS`) exempted do not count; a `HEAD`, which axum serves
/// with the `GET` handler, still does.
#[tokio::test(flavor = "current_thread")]
async fn exempted_methods_do_not_count() {
    let store = KeyedGcra::gcra_with_clock(Quota::per_minute(6).unwrap(), config(), ManualClock::new());
    let layer = RateLimitLayer::builder()
        .policy(Policy::builder("api").limit(Limit::new(KeySource::global(), Store::local(store))).build().unwrap())
        .skip_methods([Method::OPTIONS])
        .legacy_headers(true) // `X-RateLimit-Remaining` counts
        .build()
        .unwrap();
    let mut head = get("/", &[]);
    *head.method_mut() = Method::HEAD;
    let response = send(&layer, head).await;
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some("5"), "a HEAD counts");
    for _ in 0..10 {
        let mut preflight = get("/", &[]);
        *preflight.method_mut() = Method::OPTIONS;
        let response = send(&layer, preflight).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), None, "not limited, so no RateLimit fields");
    }
    for remaining in (0..5).rev() {
        let response = send(&layer, get("/", &[])).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "x-ratelimit-remaining"), Some(remaining.to_string().as_str()));
    }
    assert_eq!(send(&layer, get("/", &[])).await.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// A throttled request whose turn would come after its `max_wait` is told the wait
/// until its turn, not a whole emission interval: one per minute, the next turn 10 s
/// away, says `Retry-After: 10` (it said 60).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_throttle_timeout_says_the_wait_until_the_turn() {
    let throttle = KeyedThrottle::builder(Quota::per_minute(1).unwrap(), 4).max_wait(Duration::from_secs(1)).build();
    let policy = Policy::builder("api").limit(Limit::throttle(KeySource::global(), throttle.unwrap())).build();
    let layer = RateLimitLayer::new(policy.unwrap());
    assert_eq!(send(&layer, get("/", &[])).await.status(), StatusCode::OK);
    tokio::time::advance(Duration::from_secs(50)).await;
    let refused = send(&layer, get("/", &[])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), Some("10"));
    // And it is true: 9 s later the turn is 1 s away, within `max_wait`.
    tokio::time::advance(Duration::from_secs(9)).await;
    assert_eq!(send(&layer, get("/", &[])).await.status(), StatusCode::OK);
}

/// A full store (`AtCapacity::Deny`, a `capacity_retry_after` of zero) answers 503
/// Too Many Clients with `Retry-After: 1` (never 0) and no RateLimit / X-RateLimit
/// fields; the full store consumed nothing of a later limit.
#[tokio::test(flavor = "current_thread")]
async fn a_full_store_answers_503_with_retry_after_at_least_1_and_takes_nothing_from_a_later_limit() {
    let clock = ManualClock::new();
    let one =
        KeyedConfig::builder(1).at_capacity(AtCapacity::Deny).capacity_retry_after(Duration::ZERO).build().unwrap();
    let full: KeyedFixedWindow<Key, ManualClock> =
        KeyedFixedWindow::fixed_window_with_clock(Quota::per_minute(5).unwrap(), one, clock.clone()).unwrap();
    let later = Arc::new(
        KeyedFixedWindow::fixed_window_with_clock(Quota::per_minute(5).unwrap(), config(), clock.clone()).unwrap(),
    );
    let policy = Policy::builder("api")
        .limit(Limit::new(KeySource::header("x-c"), Store::local(full)))
        .limit(Limit::new(KeySource::global(), Store::local(Arc::clone(&later))))
        .build()
        .unwrap();
    // The legacy fields on: none of them either.
    let layer = RateLimitLayer::builder().policy(policy).legacy_headers(true).build().unwrap();
    assert_eq!(send(&layer, get("/", &[("x-c", b"a")])).await.status(), StatusCode::OK);
    let r = send(&layer, get("/", &[("x-c", b"b")])).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(json(&r)["title"], "Too Many Clients");
    assert_eq!(header(&r, "retry-after"), Some("1"));
    for name in ["ratelimit", "ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"] {
        assert!(header(&r, name).is_none(), "{name}");
    }
    assert_eq!(KeyedLimiter::snapshot(&*later, &Key::global()).remaining(), 4);
}

/// Under `LongKeys::Refuse`, a header value over 128 bytes is a 400 under every
/// `MissingKey` mode, also inside `first_of` (before a fallback source); the
/// length is that of the trimmed value. No mode lets it through unlimited.
#[tokio::test(flavor = "current_thread")]
async fn refuse_refuses_long_keys_under_every_missing_key_mode() {
    let clock = ManualClock::new();
    let long = vec![b'k'; MAX_KEY_BYTES + 1];
    let mut padded = b"   ".to_vec();
    padded.extend_from_slice(&long[1..]);
    padded.extend_from_slice(b"\t ");
    for missing in [MissingKey::Deny, MissingKey::Skip, MissingKey::Shared(Key::custom(b"anon"))] {
        for first_of in [false, true] {
            let source = if first_of {
                KeySource::first_of([KeySource::header("x-api-key"), KeySource::global()]).long_keys(LongKeys::Refuse)
            } else {
                KeySource::header("x-api-key").long_keys(LongKeys::Refuse)
            };
            let store = Arc::new(
                KeyedFixedWindow::fixed_window_with_clock(Quota::per_minute(1).unwrap(), config(), clock.clone())
                    .unwrap(),
            );
            let limit = Limit::new(source, Store::local(Arc::clone(&store))).on_missing_key(missing.clone());
            let layer = RateLimitLayer::new(Policy::builder("api").limit(limit).build().unwrap());
            let r = send(&layer, get("/", &[("x-api-key", &long)])).await;
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{missing:?} first_of={first_of}");
            assert!(header(&r, "ratelimit").is_none());
            assert!(json(&r)["detail"].as_str().unwrap().contains("x-api-key"), "{}", json(&r));
            // 128 bytes after trimming: a key, counted.
            assert_eq!(send(&layer, get("/", &[("x-api-key", &padded)])).await.status(), StatusCode::OK);
            assert_eq!(send(&layer, get("/", &[("x-api-key", &padded)])).await.status(), StatusCode::TOO_MANY_REQUESTS);
        }
    }
}
