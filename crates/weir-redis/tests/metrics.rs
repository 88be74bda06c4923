//! The limiters' metrics (the `metrics` feature), read from a debugging recorder
//! after known traffic: against a real `redis-server` for Redis's decisions, script
//! reloads and leases, against a fake server that never answers for timeouts and
//! the fail policies. Each test builds its limiters under a recorder of its own
//! (`with_local_recorder`), so tests running in parallel do not see one another's
//! metrics. No test asserts how long a call takes.

mod support;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::collections::HashMap;
use std::time::Duration;
use support::{FakeMode, FakeRedis, RedisServer};
use weir_redis::{
    Backoff, FailPolicy, LeaseConfig, Leased, LocalFallback, Path, Redis, RedisLimiter, RedisOptions, Resilient,
};
use weir_rl_core::{ManualClock, Nanos, Quota};

const T0: u64 = 1_700_000_000_000_000_000;

/// Every series of one snapshot, by name and sorted labels (`k=v,k=v`); a
/// histogram as its number of samples. A snapshot reads counters and resets them.
fn read(snapshotter: &Snapshotter) -> HashMap<(String, String), f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let mut labels: Vec<String> = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            labels.sort();
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            };
            ((key.key().name().to_owned(), labels.join(",")), value)
        })
        .collect()
}

fn get(values: &HashMap<(String, String), f64>, name: &str, labels: &str) -> f64 {
    *values.get(&(name.to_owned(), labels.to_owned())).unwrap_or_else(|| panic!("no {name}{{{labels}}} in {values:#?}"))
}

fn decisions(values: &HashMap<(String, String), f64>, limiter: &str, path: &str, outcome: &str) -> f64 {
    get(values, "weir_redis_decisions_total", &format!("limiter={limiter},outcome={outcome},path={path}"))
}

#[tokio::test]
async fn redis_decisions_calls_and_script_reloads_are_counted() {
    let server = RedisServer::start();
    let redis = Redis::connect_with(&server.url(), support::patient()).await.unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let limiter = metrics::with_local_recorder(&recorder, || {
        RedisLimiter::builder(&redis, Quota::per_minute(2).unwrap())
            .name("per_key")
            .build_with_clock(clock.clone())
            .unwrap()
    });
    assert_eq!(limiter.name(), "per_key");
    // A fresh server has no script: the first call loads it.
    assert!(limiter.check("k").await.unwrap().is_allowed());
    assert!(limiter.check("k").await.unwrap().is_allowed());
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    assert!(limiter.check("k").await.unwrap().is_denied());
    limiter.snapshot("k").await.unwrap(); // a peek: a call, not a decision

    let values = read(&snapshotter);
    assert_eq!(decisions(&values, "per_key", "redis", "allowed"), 2.0);
    assert_eq!(decisions(&values, "per_key", "redis", "denied"), 1.0);
    assert_eq!(decisions(&values, "per_key", "fail_open", "allowed"), 0.0);
    assert_eq!(get(&values, "weir_redis_script_reloads_total", "limiter=per_key"), 2.0);
    assert_eq!(get(&values, "weir_redis_call_duration_seconds", "limiter=per_key"), 4.0);
    assert_eq!(get(&values, "weir_redis_timeouts_total", "limiter=per_key"), 0.0);
    assert!(values.keys().all(|(_, labels)| !labels.contains("=k,") && !labels.ends_with("=k")), "{values:#?}");
}

#[tokio::test]
async fn timeouts_and_each_fail_policy_are_counted() {
    let fake = FakeRedis::start();
    let options = RedisOptions::builder().call_timeout(Duration::from_millis(50)).build().unwrap();
    let redis = support::connect_retrying(&fake.url(), options).await;
    fake.set_mode(FakeMode::Silent);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(10)).unwrap();
    let policies = [
        ("open", FailPolicy::Open),
        ("closed", FailPolicy::Closed),
        ("local", FailPolicy::LocalFallback(LocalFallback::new(1, 100).unwrap())),
    ];
    let limiters: Vec<Resilient<ManualClock>> = metrics::with_local_recorder(&recorder, || {
        policies
            .into_iter()
            .map(|(name, policy)| {
                let limiter =
                    RedisLimiter::builder(&redis, Quota::per_minute(100).unwrap()).name(name).build().unwrap();
                Resilient::builder(limiter, policy).backoff(backoff).build_with_clock(clock.clone()).unwrap()
            })
            .collect()
    });
    for (limiter, path) in limiters.iter().zip([Path::FailOpen, Path::FailClosed, Path::LocalFallback]) {
        // The first times out; the second comes within the back-off: not sent.
        assert_eq!(limiter.check_traced("k", 1).await.unwrap().path, path);
        assert_eq!(limiter.check_traced("k", 1).await.unwrap().path, path);
    }

    let values = read(&snapshotter);
    for name in ["open", "closed", "local"] {
        let labels = format!("limiter={name}");
        assert_eq!(get(&values, "weir_redis_timeouts_total", &labels), 1.0, "{name}");
        assert_eq!(get(&values, "weir_redis_call_duration_seconds", &labels), 1.0, "{name}");
        assert_eq!(decisions(&values, name, "redis", "allowed"), 0.0, "{name}");
    }
    assert_eq!(decisions(&values, "open", "fail_open", "allowed"), 2.0);
    assert_eq!(decisions(&values, "closed", "fail_closed", "denied"), 2.0);
    assert_eq!(decisions(&values, "local", "local_fallback", "allowed"), 2.0);
    // The local fallback's store reports as a weir-keyed store, named after the limiter.
    assert_eq!(get(&values, "weir_keyed_keys", "store=local"), 1.0);
}

#[tokio::test]
async fn decisions_served_from_a_lease_count_the_round_trips_they_saved() {
    let server = RedisServer::start();
    let redis = Redis::connect_with(&server.url(), support::patient()).await.unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let leased = metrics::with_local_recorder(&recorder, || {
        let limiter = RedisLimiter::builder(&redis, Quota::per_minute(100).unwrap())
            .name("hot")
            .build_with_clock(clock.clone())
            .unwrap();
        Leased::with_clock(limiter, LeaseConfig::builder().max_lease(10).build().unwrap(), clock.clone()).unwrap()
    });
    for _ in 0..20 {
        assert!(leased.check("k").await.unwrap().is_allowed());
    }
    let (decided, trips) = (leased.decisions() as f64, leased.round_trips() as f64);
    assert!(trips < decided, "{trips} round trips for {decided} decisions");

    let values = read(&snapshotter);
    assert_eq!(get(&values, "weir_redis_lease_round_trips_saved_total", "limiter=hot"), decided - trips);
    assert_eq!(decisions(&values, "hot", "lease", "allowed"), decided - trips);
    assert_eq!(decisions(&values, "hot", "redis", "allowed"), trips);
    assert_eq!(get(&values, "weir_redis_call_duration_seconds", "limiter=hot"), trips);
}
