//! Shadow mode, per limit and per policy, from the file: a shadow limit is
//! decided and charged, its refusals logged ("shadow: would have refused"), and the
//! client sees what it would see without it: no refusal, no header of its own.

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tower::{ServiceExt, service_fn};
use weir_rl_core::ManualClock;
use weir_tower::{Config, PeerAddr, RateLimitLayer};

async fn send(layer: &RateLimitLayer, headers: &[(&str, &str)]) -> Response<Bytes> {
    let service = tower::Layer::layer(
        layer,
        service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Bytes::from_static(b"ok"))) }),
    );
    let mut request = Request::get("/");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(()).unwrap();
    request.extensions_mut().insert(PeerAddr("192.0.2.7:4000".parse().unwrap()));
    service.oneshot(request).await.unwrap()
}

fn layer(toml: &str) -> RateLimitLayer {
    Config::from_toml(toml).unwrap().clock(ManualClock::new()).layer().unwrap()
}

/// The rate-limit headers of a response, in order.
fn ratelimit_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| name.as_str().contains("ratelimit") || name.as_str() == "retry-after")
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
        .collect()
}

/// Every event's message and fields, as text, with the thread it was emitted on.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(std::thread::ThreadId, String)>>>);

static EVENTS: std::sync::OnceLock<Events> = std::sync::OnceLock::new();

/// The events emitted on this thread (each test runs on a thread of its own, with
/// a current-thread runtime). The subscriber is the process's, installed by the
/// first test to ask, before any of them emits an event: a subscriber of one
/// thread's scope would race with other threads for the interest of each event's
/// callsite.
fn events_here() -> Vec<String> {
    let events = EVENTS.get_or_init(|| {
        let events = Events::default();
        tracing::subscriber::set_global_default(events.clone()).expect("no other subscriber");
        events
    });
    let me = std::thread::current().id();
    events.0.lock().unwrap().iter().filter(|(t, _)| *t == me).map(|(_, e)| e.clone()).collect()
}

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut text = Text(format!("{} {}: ", event.metadata().level(), event.metadata().target()));
        event.record(&mut text);
        self.0.lock().unwrap().push((std::thread::current().id(), text.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

const BOTH: &str = r#"
[[policy]]
name = "api"
default = true
[[policy.limit]]
name = "per_ip"
key = "ip"
quotas = [{ algorithm = "fixed_window", limit = 3, window = "1m" }]
[[policy.limit]]
name = "strict"
key = "ip"
shadow = true
quotas = [{ name = "strict", algorithm = "fixed_window", limit = 1, window = "1m" }]
"#;

/// A shadow limit that refuses refuses nothing, and adds no header: the client
/// sees exactly what it sees without that limit; the refusal is logged.
#[tokio::test(flavor = "current_thread")]
async fn a_shadow_limit_refuses_nothing_and_adds_no_header() {
    events_here();
    let shadow = layer(BOTH);
    let without = layer(&BOTH[..BOTH.find("[[policy.limit]]\nname = \"strict\"").unwrap()]);
    for n in 1..=4 {
        let (with, alone) = (send(&shadow, &[]).await, send(&without, &[]).await);
        assert_eq!(with.status(), alone.status(), "request {n}");
        assert_eq!(ratelimit_headers(with.headers()), ratelimit_headers(alone.headers()), "request {n}");
    }
    let events = events_here();
    let shadowed: Vec<&String> = events.iter().filter(|e| e.contains("shadow: would have refused")).collect();
    // Requests 2 and 3 (request 4 is refused by the enforced limit first).
    assert_eq!(shadowed.len(), 2, "{events:#?}");
    assert!(shadowed[0].starts_with("INFO weir_http"), "{}", shadowed[0]);
    for field in ["policy=api", "limit=\"strict\"", "quota=\"strict\"", "key=192.0.2.7", "cause=\"rate limited\""] {
        assert!(shadowed[0].contains(field), "{field} in {}", shadowed[0]);
    }
}

/// A whole policy in shadow mode: past its limit, requests go on with no
/// `RateLimit` headers, and a request without the limit's key is not refused.
#[tokio::test(flavor = "current_thread")]
async fn a_shadow_policy_refuses_nothing() {
    let toml = r#"
[[policy]]
name = "api"
default = true
shadow = true
[[policy.limit]]
key = "ip"
quotas = [{ algorithm = "gcra", limit = 1, window = "1h" }]
[[policy.limit]]
key = "header:x-api-key"
quotas = [{ algorithm = "gcra", limit = 1, window = "1h" }]
"#;
    events_here();
    let layer = layer(toml);
    for _ in 0..3 {
        let response = send(&layer, &[("x-api-key", "k")]).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(ratelimit_headers(response.headers()), Vec::<(String, String)>::new());
    }
    assert_eq!(send(&layer, &[]).await.status(), StatusCode::OK, "no key: not refused in shadow mode");
}

/// A shadow limit's store still counts: taken out of shadow mode (a reload keeps
/// the store of an unchanged quota), the limit enforces what it counted.
#[tokio::test(flavor = "current_thread")]
async fn a_shadow_limit_counts_what_it_decides() {
    let toml = r#"
[[policy]]
name = "api"
default = true
[[policy.limit]]
name = "per_ip"
key = "ip"
shadow = true
quotas = [{ algorithm = "fixed_window", limit = 2, window = "1m" }]
"#;
    events_here();
    let clock = ManualClock::new();
    let config = |text: &str| weir_http::Config::from_toml(text).unwrap().clock(clock.clone());
    let limits = weir_tower::Reloadable::from_config(config(toml)).unwrap();
    let layer = RateLimitLayer::reloadable(limits.clone());
    for _ in 0..3 {
        assert_eq!(send(&layer, &[]).await.status(), StatusCode::OK);
    }
    limits.reload(config(&toml.replace("shadow = true\n", ""))).unwrap();
    assert_eq!(send(&layer, &[]).await.status(), StatusCode::TOO_MANY_REQUESTS);
}
