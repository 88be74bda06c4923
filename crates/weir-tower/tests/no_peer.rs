//! A per-IP layer that never sees a peer address says so once, in a `tracing`
//! warning, not once per request.

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::ServiceExt;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use weir_keyed::{KeyedConfig, KeyedGcra};
use weir_rl_core::{ManualClock, Quota};
use weir_tower::{Key, KeySource, Limit, MissingKey, Policy, RateLimitLayer, Store};

/// Counts the warnings of target `weir_tower`.
struct Warnings(Arc<AtomicUsize>);

impl Subscriber for Warnings {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN && event.metadata().target() == "weir_tower" {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn store() -> KeyedGcra<Key, ManualClock> {
    KeyedGcra::gcra_with_clock(
        Quota::per_minute(100).unwrap(),
        KeyedConfig::builder(100).build().unwrap(),
        ManualClock::new(),
    )
}

async fn status(app: &Router) -> StatusCode {
    app.clone().oneshot(Request::get("/").body(Body::empty()).unwrap()).await.unwrap().status()
}

#[tokio::test(flavor = "current_thread")]
async fn a_missing_peer_address_is_warned_about_once_per_layer() {
    let warnings = Arc::new(AtomicUsize::new(0));
    let _guard = tracing::subscriber::set_default(Warnings(Arc::clone(&warnings)));

    let app = Router::new().route("/", get(|| async { "ok" })).layer(RateLimitLayer::per_ip(store()));
    for _ in 0..3 {
        assert_eq!(status(&app).await, StatusCode::BAD_REQUEST);
    }
    assert_eq!(warnings.load(Ordering::Relaxed), 1, "one warning for three requests");

    // Another layer warns for itself.
    let other = Router::new().route("/", get(|| async { "ok" })).layer(RateLimitLayer::per_ip(store()));
    assert_eq!(status(&other).await, StatusCode::BAD_REQUEST);
    assert_eq!(warnings.load(Ordering::Relaxed), 2);

    // A missing user is the client's doing, not the server's: no warning.
    let users = Policy::builder("users")
        .limit(Limit::new(KeySource::user(), Store::local(store())).on_missing_key(MissingKey::Deny))
        .build()
        .unwrap();
    let users = Router::new().route("/", get(|| async { "ok" })).layer(RateLimitLayer::new(users));
    assert_eq!(status(&users).await, StatusCode::BAD_REQUEST);
    assert_eq!(warnings.load(Ordering::Relaxed), 2);
}
