//! The layer's metrics (the `metrics` feature), read from a debugging recorder
//! after known traffic on manual clocks. Each test builds its layer under a
//! recorder of its own (`with_local_recorder`), so tests running in parallel do not
//! see one another's metrics.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;
use tower::{ServiceExt, service_fn};
use weir_keyed::{AtCapacity, KeyedConfig, KeyedGcra};
use weir_rl_core::{ManualClock, Quota};
use weir_tower::{Key, KeySource, KeyedThrottle, Limit, PeerAddr, Policy, RateLimitLayer, Store, Tiers};

/// Every series of one snapshot, by name and sorted labels (`k=v,k=v`; empty
/// values left out); a histogram as its number of samples and their sum. A
/// snapshot reads counters and resets them.
fn read(snapshotter: &Snapshotter) -> HashMap<(String, String), (f64, f64)> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let mut labels: Vec<String> = key
                .key()
                .labels()
                .filter(|l| !l.value().is_empty())
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let value = match value {
                DebugValue::Counter(n) => (n as f64, 0.0),
                DebugValue::Gauge(g) => (g.into_inner(), 0.0),
                DebugValue::Histogram(h) => (h.len() as f64, h.iter().map(|v| v.into_inner()).sum()),
            };
            ((key.key().name().to_owned(), labels.join(",")), value)
        })
        .collect()
}

fn get(values: &HashMap<(String, String), (f64, f64)>, name: &str, labels: &str) -> f64 {
    values
        .get(&(name.to_owned(), labels.to_owned()))
        .unwrap_or_else(|| panic!("no {name}{{{labels}}} in {values:#?}"))
        .0
}

fn per_ip(limit: u64, max_keys: usize, clock: &ManualClock) -> KeyedGcra<Key, ManualClock> {
    let config = KeyedConfig::builder(max_keys).name("per_ip").at_capacity(AtCapacity::Deny).build().unwrap();
    KeyedGcra::gcra_with_clock(Quota::per_minute(limit).unwrap(), config, clock.clone())
}

async fn send(layer: &RateLimitLayer, path: &str, peer: &str, headers: &[(&str, &str)]) -> StatusCode {
    let service = tower::Layer::layer(
        layer,
        service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Bytes::from_static(b"ok"))) }),
    );
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(()).unwrap();
    request.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    service.oneshot(request).await.unwrap().status()
}

const DECISIONS: &str = "weir_tower_decisions_total";

#[tokio::test(flavor = "current_thread")]
async fn decisions_are_counted_by_policy_limit_quota_and_outcome() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let layer = metrics::with_local_recorder(&recorder, || {
        let api = Policy::builder("api").limit(Limit::per_ip(per_ip(2, 1, &clock)).named("per_ip")).build().unwrap();
        let keyed = Policy::builder("keyed")
            .limit(Limit::new(KeySource::header("x-api-key"), Store::local(per_ip(5, 10, &clock))))
            .build()
            .unwrap();
        RateLimitLayer::builder().policy(api).route("/k", keyed).skip_path("/health").build().unwrap()
    });
    let a = "203.0.113.5:4000";
    assert_eq!(send(&layer, "/", a, &[]).await, StatusCode::OK);
    assert_eq!(send(&layer, "/", a, &[]).await, StatusCode::OK);
    assert_eq!(send(&layer, "/", a, &[]).await, StatusCode::TOO_MANY_REQUESTS);
    // The store holds one client: another is refused for capacity.
    assert_eq!(send(&layer, "/", "198.51.100.1:4000", &[]).await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(send(&layer, "/health", a, &[]).await, StatusCode::OK);
    assert_eq!(send(&layer, "/k", a, &[]).await, StatusCode::BAD_REQUEST);
    assert_eq!(send(&layer, "/k", a, &[("x-api-key", "k1")]).await, StatusCode::OK);

    let values = read(&snapshotter);
    let api =
        |outcome: &str| get(&values, DECISIONS, &format!("limit=per_ip,outcome={outcome},policy=api,quota=minute"));
    assert_eq!((api("allowed"), api("denied"), api("key_capacity")), (2.0, 1.0, 1.0));
    assert_eq!(get(&values, DECISIONS, "outcome=skipped,policy=api"), 1.0);
    assert_eq!(get(&values, DECISIONS, "limit=1,outcome=unidentified,policy=keyed"), 1.0);
    assert_eq!(get(&values, DECISIONS, "limit=1,outcome=allowed,policy=keyed,quota=minute"), 1.0);
    assert_eq!(get(&values, DECISIONS, "limit=1,outcome=unavailable,policy=keyed"), 0.0);
    // The stores' own metrics, under the same recorder.
    assert_eq!(get(&values, "weir_keyed_keys", "store=per_ip"), 1.0);
    assert_eq!(get(&values, "weir_keyed_capacity_denials_total", "store=per_ip"), 1.0);
    // Never a client's key or address in a label.
    assert!(values.keys().all(|(_, labels)| !labels.contains("203.0.113") && !labels.contains("k1")), "{values:#?}");
}

#[tokio::test(flavor = "current_thread")]
async fn tier_lookups_cache_hits_and_failures_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let layer = metrics::with_local_recorder(&recorder, || {
        let tiers = Tiers::builder(|key: Key| async move {
            if key.payload() == b"down" { Err("backend down") } else { Ok("free") }
        })
        .name("plans")
        .tier("free", Store::local(per_ip(10, 10, &clock)))
        .build_with_clock(clock.clone())
        .unwrap();
        let policy =
            Policy::builder("api").limit(Limit::tiered(KeySource::header("x-api-key"), tiers).named("plan")).build();
        RateLimitLayer::builder().policy(policy.unwrap()).build().unwrap()
    });
    let a = "203.0.113.5:4000";
    for _ in 0..3 {
        assert_eq!(send(&layer, "/", a, &[("x-api-key", "k1")]).await, StatusCode::OK);
    }
    assert_eq!(send(&layer, "/", a, &[("x-api-key", "down")]).await, StatusCode::SERVICE_UNAVAILABLE);

    let values = read(&snapshotter);
    assert_eq!(get(&values, "weir_tower_tier_lookups_total", "tiers=plans"), 2.0);
    assert_eq!(get(&values, "weir_tower_tier_lookup_failures_total", "tiers=plans"), 1.0);
    assert_eq!(get(&values, "weir_tower_tier_cache_hits_total", "tiers=plans"), 2.0);
    assert_eq!(get(&values, DECISIONS, "limit=plan,outcome=allowed,policy=api,quota=minute,tier=free"), 3.0);
    assert_eq!(get(&values, DECISIONS, "limit=plan,outcome=unavailable,policy=api"), 1.0);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn throttle_waits_and_give_ups_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, || {
        let throttle =
            KeyedThrottle::builder(Quota::per_second(1).unwrap(), 1).max_wait(Duration::ZERO).build().unwrap();
        let policy = Policy::builder("paced").limit(Limit::throttle(KeySource::global(), throttle).named("line"));
        RateLimitLayer::builder().policy(policy.build().unwrap()).build().unwrap()
    });
    let a = "203.0.113.5:4000";
    assert_eq!(send(&layer, "/", a, &[]).await, StatusCode::OK);
    // Its turn would come a second from now, past `max_wait`: turned away.
    assert_eq!(send(&layer, "/", a, &[]).await, StatusCode::TOO_MANY_REQUESTS);

    let values = read(&snapshotter);
    let throttle =
        |outcome: &str| get(&values, DECISIONS, &format!("limit=line,outcome={outcome},policy=paced,quota=throttle"));
    assert_eq!((throttle("allowed"), throttle("denied"), throttle("key_capacity")), (1.0, 1.0, 0.0));
    assert_eq!(get(&values, "weir_tower_throttle_give_ups_total", "limit=line,policy=paced"), 1.0);
    let wait = values[&("weir_tower_throttle_wait_seconds".to_owned(), "limit=line,policy=paced".to_owned())];
    assert_eq!(wait, (1.0, 0.0), "one admitted request, which did not wait (paused time)");
}

/// The requests a policy admitted, counted once each: the sum over every
/// `outcome="allowed"` series. (A throttle's admission was counted, then the
/// request's admission again: two series of 1 for a throttle-only policy, 2 for a
/// store and a throttle.)
fn admitted(values: &HashMap<(String, String), (f64, f64)>) -> f64 {
    values
        .iter()
        .filter(|((name, labels), _)| name == DECISIONS && labels.contains("outcome=allowed"))
        .map(|(_, (n, _))| n)
        .sum()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_request_admitted_through_a_throttle_is_counted_once() {
    let clock = ManualClock::new();
    for with_store in [false, true] {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let layer = metrics::with_local_recorder(&recorder, || {
            let throttle = KeyedThrottle::builder(Quota::per_second(1).unwrap(), 1).build().unwrap();
            let mut policy = Policy::builder("paced");
            if with_store {
                policy = policy.limit(Limit::per_ip(per_ip(10, 10, &clock)).named("per_ip"));
            }
            let policy = policy.limit(Limit::throttle(KeySource::global(), throttle).named("line"));
            RateLimitLayer::builder().policy(policy.build().unwrap()).build().unwrap()
        });
        assert_eq!(send(&layer, "/", "203.0.113.5:4000", &[]).await, StatusCode::OK);
        let values = read(&snapshotter);
        assert_eq!(admitted(&values), 1.0, "with a store: {with_store}; {values:#?}");
        let deciding = if with_store {
            "limit=per_ip,outcome=allowed,policy=paced,quota=minute"
        } else {
            "limit=line,outcome=allowed,policy=paced,quota=throttle"
        };
        assert_eq!(get(&values, DECISIONS, deciding), 1.0);
    }
}

/// A limit in shadow mode counts its refusals as `shadow_denied` (the request's own
/// outcome is the enforced limit's), and a request without its key as
/// `shadow_unidentified`.
#[tokio::test(flavor = "current_thread")]
async fn shadow_refusals_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let layer = metrics::with_local_recorder(&recorder, || {
        let enforced = Limit::per_ip(per_ip(10, 10, &clock)).named("per_ip");
        let shadow = Limit::new(KeySource::header("x-api-key"), Store::local(per_ip(1, 10, &clock)))
            .named("per_key")
            .shadow(true);
        RateLimitLayer::new(Policy::builder("api").limit(enforced).limit(shadow).build().unwrap())
    });
    let a = "203.0.113.5:4000";
    for _ in 0..3 {
        assert_eq!(send(&layer, "/", a, &[("x-api-key", "k1")]).await, StatusCode::OK);
    }
    assert_eq!(send(&layer, "/", a, &[]).await, StatusCode::OK);
    let values = read(&snapshotter);
    assert_eq!(get(&values, DECISIONS, "limit=per_key,outcome=shadow_denied,policy=api,quota=minute-2"), 2.0);
    assert_eq!(get(&values, DECISIONS, "limit=per_key,outcome=shadow_unidentified,policy=api"), 1.0);
    assert_eq!(get(&values, DECISIONS, "limit=per_ip,outcome=allowed,policy=api,quota=minute"), 4.0);
}
