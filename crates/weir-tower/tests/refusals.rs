//! What a refused request costs, called in process (tower's `oneshot`): nothing
//! taken from the other limits of its policy (a throttle's slot included, whether
//! a later throttle turns the request away or the request is dropped in its line),
//! no round trip to a later remote store, no tier lookup; a full throttle map is
//! answered as a full store is; and, for every in-memory algorithm, the snapshot
//! gate that lets a later limit be asked for its wait without consuming anything.

use bytes::Bytes;
use core::convert::Infallible;
use core::future::Future;
use http::{Request, Response, StatusCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{ServiceExt, service_fn};
use weir_keyed::{KeyedConfig, KeyedFixedWindow};
use weir_rl_core::{
    AsyncKeyedLimiter, Decision, InsufficientCapacity, KeyedLimiter, ManualClock, Policy as QuotaPolicy, Quota,
    Snapshot,
};
use weir_testkit::poll_times;
use weir_tower::{Key, KeySource, KeyedThrottle, Limit, PeerAddr, Policy, RateLimitLayer, Store, Tiers};

fn service(
    layer: &RateLimitLayer,
) -> impl tower::Service<Request<()>, Response = Response<Bytes>, Error = Infallible> + use<> {
    tower::Layer::layer(
        layer,
        service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Bytes::from_static(b"ok"))) }),
    )
}

fn send(layer: &RateLimitLayer, request: Request<()>) -> impl Future<Output = Response<Bytes>> + use<> {
    let svc = service(layer);
    async move { svc.oneshot(request).await.unwrap() }
}

fn get_req(headers: &[(&str, &[u8])]) -> Request<()> {
    let mut request = Request::get("/");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(()).unwrap();
    request.extensions_mut().insert(PeerAddr("203.0.113.5:4000".parse().unwrap()));
    request
}

fn header<'a>(response: &'a Response<Bytes>, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

fn json(response: &Response<Bytes>) -> serde_json::Value {
    serde_json::from_slice(response.body()).unwrap()
}

fn fixed(limit: u64, clock: &ManualClock) -> Arc<KeyedFixedWindow<Key, ManualClock>> {
    Arc::new(
        KeyedFixedWindow::fixed_window_with_clock(
            Quota::per_minute(limit).unwrap(),
            KeyedConfig::builder(1_000).build().unwrap(),
            clock.clone(),
        )
        .unwrap(),
    )
}

// ---------------------------------------------------------------------------
// Two throttles in one policy: a slot taken for a request that is then refused or
// dropped is given back.
// ---------------------------------------------------------------------------

/// Throttle A (per client, 1/min) admits client `two`'s request at once; throttle B
/// (global, 1/s, no wait) turns it away. Once B has room, client `two` is admitted
/// at once: A's slot was given back. (It stayed spent: A refused `two` for 60 s.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_throttles_slot_is_given_back_when_a_later_throttle_turns_the_request_away() {
    let a =
        Arc::new(KeyedThrottle::builder(Quota::per_minute(1).unwrap(), 4).max_wait(Duration::ZERO).build().unwrap());
    let b = KeyedThrottle::builder(Quota::per_second(1).unwrap(), 1).max_wait(Duration::ZERO).build().unwrap();
    let policy = Policy::builder("api")
        .limit(Limit::throttle_shared(KeySource::header("x-c"), Arc::clone(&a)))
        .limit(Limit::throttle(KeySource::global(), b))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy);
    assert_eq!(send(&layer, get_req(&[("x-c", b"one")])).await.status(), StatusCode::OK);
    let refused = send(&layer, get_req(&[("x-c", b"two")])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "B (global) turns request 2 away");
    assert_eq!(header(&refused, "retry-after"), Some("1"), "B's wait");
    tokio::time::advance(Duration::from_secs(1)).await; // B has room again
    let retry = send(&layer, get_req(&[("x-c", b"two")])).await;
    assert_eq!(retry.status(), StatusCode::OK, "A refused (Retry-After {:?})", header(&retry, "retry-after"));
    // And A paces `two` from the admitted request on.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(send(&layer, get_req(&[("x-c", b"two")])).await.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// Request 2 passes throttle A at once, then waits its turn in B (1 s) and is
/// dropped there (its client went away): it leaves no place in B's line, and A's
/// slot is given back. (It stayed spent: A refused `two` for 60 s.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_throttles_slot_is_given_back_when_the_request_is_dropped_in_a_later_throttles_line() {
    let a = Arc::new(
        KeyedThrottle::builder(Quota::per_minute(1).unwrap(), 4).max_wait(Duration::from_secs(5)).build().unwrap(),
    );
    let b = Arc::new(
        KeyedThrottle::builder(Quota::per_second(1).unwrap(), 4).max_wait(Duration::from_secs(5)).build().unwrap(),
    );
    let policy = Policy::builder("api")
        .limit(Limit::throttle_shared(KeySource::header("x-c"), Arc::clone(&a)))
        .limit(Limit::throttle_shared(KeySource::global(), Arc::clone(&b)))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy);
    assert_eq!(send(&layer, get_req(&[("x-c", b"one")])).await.status(), StatusCode::OK);
    let dropped = poll_times(send(&layer, get_req(&[("x-c", b"two")])), 1).await;
    assert!(dropped.is_none(), "parked in B's line, then dropped");
    assert_eq!(b.waiting(&Key::global()), 0);
    tokio::time::advance(Duration::from_secs(2)).await;
    let next = send(&layer, get_req(&[("x-c", b"two")])).await;
    assert_eq!(next.status(), StatusCode::OK, "A refused (Retry-After {:?})", header(&next, "retry-after"));
}

// ---------------------------------------------------------------------------
// The limits after the first that refuses: only what is in memory is asked.
// ---------------------------------------------------------------------------

/// A remote store while its backend is down, answering from a local fallback as
/// weir-redis's `FailPolicy::LocalFallback` does: the fallback's admissions are
/// marked (weir-redis stamps them `at(Nanos::ZERO)`) and their refund is dropped
/// (fail.rs: "a local one is dropped"; weir-rl-core: a fallback admission "took
/// nothing from the key, so the store gives nothing back"). Counts checks.
struct FallingBack {
    policy: [QuotaPolicy; 1],
    used: Mutex<u64>,
    checks: AtomicU64,
    refunds: AtomicU64,
}

#[derive(Clone)]
struct FallingBackStore(Arc<FallingBack>);

impl FallingBackStore {
    fn new(limit: u64) -> Self {
        Self(Arc::new(FallingBack {
            policy: [QuotaPolicy::new(limit, Duration::from_secs(60))],
            used: Mutex::new(0),
            checks: AtomicU64::new(0),
            refunds: AtomicU64::new(0),
        }))
    }
}

impl AsyncKeyedLimiter<Key> for FallingBackStore {
    type Error = InsufficientCapacity;

    async fn check_n(&self, _: &Key, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.0.checks.fetch_add(1, Ordering::Relaxed);
        tokio::task::yield_now().await; // the round trip that fails
        let limit = self.0.policy[0].limit();
        let mut used = self.0.used.lock().unwrap();
        Ok(if *used + n > limit {
            Decision::denied(Snapshot::new(limit, limit - *used, 60_000_000_000), 60_000_000_000).from_fallback()
        } else {
            *used += n;
            Decision::allowed(Snapshot::new(limit, limit - *used, 60_000_000_000)).from_fallback()
        })
    }

    async fn refund(&self, _: &Key, _: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        self.0.refunds.fetch_add(1, Ordering::Relaxed);
        // A fallback admission is not given back (weir-redis drops it).
        let _ = admission.is_from_fallback();
        Ok(())
    }

    fn snapshot(&self, _: &Key) -> impl Future<Output = Result<Snapshot, InsufficientCapacity>> + Send {
        let limit = self.0.policy[0].limit();
        let used = *self.0.used.lock().unwrap();
        async move { Ok(Snapshot::new(limit, limit - used, 0)) }
    }

    fn policies(&self) -> &[QuotaPolicy] {
        &self.0.policy
    }
}

/// A per-client limit (1/min) refuses client `a`'s retries. The later remote limit
/// (3 for everyone, answering from a fallback whose admissions cannot be given
/// back) is not checked for them: its quota is left for client `b`. (Each refusal
/// was checked there, and three spent it: `b` was refused.)
#[tokio::test(flavor = "current_thread")]
async fn refused_requests_do_not_spend_a_later_remote_stores_quota() {
    let clock = ManualClock::new();
    let per_client = fixed(1, &clock);
    let shared = FallingBackStore::new(3);
    let policy = Policy::builder("api")
        .limit(Limit::new(KeySource::header("x-c"), Store::local(Arc::clone(&per_client))))
        .limit(Limit::new(KeySource::global(), Store::remote(shared.clone())))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy);
    assert_eq!(send(&layer, get_req(&[("x-c", b"a")])).await.status(), StatusCode::OK);
    for _ in 0..3 {
        let refused = send(&layer, get_req(&[("x-c", b"a")])).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&refused, "retry-after"), Some("60"), "the limit asked: the per-client one");
    }
    assert_eq!(send(&layer, get_req(&[("x-c", b"b")])).await.status(), StatusCode::OK);
    assert_eq!(*shared.0.used.lock().unwrap(), 2, "one unit each for `a`'s and `b`'s admissions");
}

/// Ten refusals by an in-memory limit make no round trip to the later remote
/// store, even when it has room: one check in all (the admitted request's), no
/// refund. (Each refusal cost a check and a refund.)
#[tokio::test(flavor = "current_thread")]
async fn a_refusal_by_an_in_memory_limit_makes_no_round_trip_to_a_later_remote_store() {
    let clock = ManualClock::new();
    let per_client = fixed(1, &clock);
    let shared = FallingBackStore::new(1_000_000);
    let policy = Policy::builder("api")
        .limit(Limit::new(KeySource::header("x-c"), Store::local(Arc::clone(&per_client))))
        .limit(Limit::new(KeySource::global(), Store::remote(shared.clone())))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy);
    assert_eq!(send(&layer, get_req(&[("x-c", b"a")])).await.status(), StatusCode::OK);
    for _ in 0..10 {
        assert_eq!(send(&layer, get_req(&[("x-c", b"a")])).await.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    let (checks, refunds) = (shared.0.checks.load(Ordering::Relaxed), shared.0.refunds.load(Ordering::Relaxed));
    assert_eq!((checks, refunds), (1, 0));
}

/// A per-IP limit in front of a tiered API-key limit shields the tier lookup (a
/// database call) from a client over its per-IP rate: a refused request with a
/// fresh API key runs no lookup and adds nothing to the cache. A client whose tier
/// is cached is still told its tier's longer wait. (Each refused request ran a
/// lookup and filled the cache.)
#[tokio::test(flavor = "current_thread")]
async fn a_refused_request_runs_no_tier_lookup_and_a_cached_tier_still_gives_its_wait() {
    let clock = ManualClock::new();
    let per_ip = fixed(1, &clock);
    let lookups = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&lookups);
    let day = Arc::new(
        KeyedFixedWindow::fixed_window_with_clock(
            Quota::new(1, Duration::from_secs(86_400)).unwrap(),
            KeyedConfig::builder(1_000).build().unwrap(),
            clock.clone(),
        )
        .unwrap(),
    );
    let tiers = Tiers::builder(move |_: Key| {
        counted.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok::<_, Infallible>("free"))
    })
    .tier("free", Store::local(Arc::clone(&day)))
    .build_with_clock(clock.clone())
    .unwrap();
    let tiers = Arc::new(tiers);
    let policy = Policy::builder("api")
        .limit(Limit::per_ip(Arc::clone(&per_ip)))
        .limit(Limit::tiered_shared(KeySource::header("x-api-key"), Arc::clone(&tiers)))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy);
    assert_eq!(send(&layer, get_req(&[("x-api-key", b"k-0")])).await.status(), StatusCode::OK);
    let cached = send(&layer, get_req(&[("x-api-key", b"k-0")])).await;
    assert_eq!(cached.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&cached, "retry-after"), Some("86400"), "the cached tier's day, not the IP's minute");
    for i in 1..=50 {
        let key = format!("k-{i}");
        let refused = send(&layer, get_req(&[("x-api-key", key.as_bytes())])).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&refused, "retry-after"), Some("60"), "no tier known: the per-IP wait");
    }
    assert_eq!((lookups.load(Ordering::Relaxed), tiers.cached_len()), (1, 1));
}

/// A store whose snapshot always says "nothing left" (as a conservative custom
/// store might) while its check admits: the ask-without-consuming path checks it
/// and must give the admission back exactly.
struct Pessimist {
    inner: Arc<KeyedFixedWindow<Key, ManualClock>>,
}

impl KeyedLimiter<Key> for Pessimist {
    fn check_n(&self, key: &Key, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.inner.check_n(key, n)
    }
    fn refund(&self, key: &Key, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        self.inner.refund(key, n, admission)
    }
    fn snapshot(&self, key: &Key) -> Snapshot {
        let s = KeyedLimiter::snapshot(&*self.inner, key);
        Snapshot::new(s.limit(), 0, 0)
    }
    fn policies(&self) -> &[QuotaPolicy] {
        KeyedLimiter::policies(&*self.inner)
    }
}

/// The snapshot gate: a later in-memory limit whose snapshot says it is spent (a
/// conservative store) is checked to learn its wait, and an admission is given
/// back exactly.
#[tokio::test(flavor = "current_thread")]
async fn refusals_leave_later_in_memory_limits_as_they_were() {
    let clock = ManualClock::new();
    let first = fixed(1, &clock);
    let later = fixed(5, &clock);
    let policy = Policy::builder("api")
        .cost(1)
        .limit(Limit::new(KeySource::global(), Store::local(Arc::clone(&first))))
        .limit(Limit::new(KeySource::global(), Store::local(Pessimist { inner: Arc::clone(&later) })))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy);
    assert_eq!(send(&layer, get_req(&[])).await.status(), StatusCode::OK);
    for _ in 0..20 {
        assert_eq!(send(&layer, get_req(&[])).await.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(KeyedLimiter::snapshot(&*later, &Key::global()).remaining(), 4);
}

// ---------------------------------------------------------------------------
// A full throttle map.
// ---------------------------------------------------------------------------

/// A keyed throttle whose map is full of keys in use turns a new key away as a
/// full store does: `503 Too Many Clients`, a Retry-After, no RateLimit fields.
/// (It was a 429 "rate limit exhausted" for a client never seen.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_full_throttle_map_answers_503_too_many_clients() {
    let throttle =
        KeyedThrottle::builder(Quota::per_minute(1).unwrap(), 1).max_wait(Duration::ZERO).max_keys(1).build().unwrap();
    let policy = Policy::builder("api").limit(Limit::throttle(KeySource::header("x-c"), throttle)).build().unwrap();
    // The legacy fields on: none of them either.
    let layer = RateLimitLayer::builder().policy(policy).legacy_headers(true).build().unwrap();
    assert_eq!(send(&layer, get_req(&[("x-c", b"a")])).await.status(), StatusCode::OK);
    let b = send(&layer, get_req(&[("x-c", b"b")])).await;
    assert_eq!(b.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(json(&b)["title"], "Too Many Clients", "{}", json(&b));
    assert!(header(&b, "retry-after").is_some());
    for name in ["ratelimit", "ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"] {
        assert!(header(&b, name).is_none(), "{name}");
    }
    // Once `a`'s throttle is idle, `b` gets one.
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(send(&layer, get_req(&[("x-c", b"b")])).await.status(), StatusCode::OK);
}

// ---------------------------------------------------------------------------
// The snapshot gate of "ask without consuming": a snapshot with room for `n` must
// mean the check admits `n` (else a later limit's denial is passed over and the
// Retry-After is too short); a check-and-refund must leave the state as it was.
// ---------------------------------------------------------------------------

#[test]
fn snapshot_room_matches_check_and_check_refund_is_exact_for_every_algorithm() {
    use weir_keyed::{KeyedGcra, KeyedSlidingLog, KeyedSlidingWindow};
    let quotas = [
        Quota::per_second(5).unwrap(),
        Quota::per_minute(7).unwrap().with_burst(3).unwrap(),
        Quota::new(4, Duration::from_millis(1500)).unwrap(),
    ];
    for quota in quotas {
        let clock = ManualClock::new();
        let config = || KeyedConfig::builder(100).build().unwrap();
        let mut stores: Vec<(&str, Box<dyn KeyedLimiter<Key>>)> =
            vec![("gcra", Box::new(KeyedGcra::gcra_with_clock(quota, config(), clock.clone())))];
        if quota.burst() == quota.count() {
            stores.push((
                "fixed",
                Box::new(KeyedFixedWindow::fixed_window_with_clock(quota, config(), clock.clone()).unwrap()),
            ));
            stores.push((
                "sliding",
                Box::new(KeyedSlidingWindow::sliding_window_with_clock(quota, config(), clock.clone()).unwrap()),
            ));
            stores.push((
                "log",
                Box::new(KeyedSlidingLog::sliding_log_with_clock(quota, config(), clock.clone()).unwrap()),
            ));
        }
        let key = Key::global();
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut rnd = move |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..4000 {
            clock.advance(Duration::from_nanos(rnd(400_000_000)));
            for (name, store) in &stores {
                let limit = store.policies()[0].limit();
                let n = 1 + rnd(limit);
                let before = store.snapshot(&key);
                let decision = store.check_n(&key, n).unwrap();
                assert_eq!(
                    before.remaining() >= n,
                    decision.is_allowed(),
                    "{name} {quota:?}: snapshot {} vs check of {n}",
                    before.remaining()
                );
                if decision.is_allowed() {
                    store.refund(&key, n, &decision).unwrap();
                    let after = store.snapshot(&key);
                    assert_eq!(after.remaining(), before.remaining(), "{name}: check+refund changed the state");
                    // Keep it busy: spend a random part for real.
                    let spend = rnd(limit + 1);
                    if spend > 0 {
                        let _ = store.check_n(&key, spend).unwrap();
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// A store's fail policy decides: the answer is the store's outage.
// ---------------------------------------------------------------------------

/// A remote store whose backend is down, deciding as weir-redis's `Resilient`
/// with `FailPolicy::Closed` does (fail.rs, `decide_locally`): a denial of a
/// snapshot with nothing remaining, `retry_after` the time until the backend is
/// tried again, stamped `at(Nanos::ZERO)` and marked `from_fallback`.
struct ClosedWhileDown([QuotaPolicy; 1]);

impl AsyncKeyedLimiter<Key> for ClosedWhileDown {
    type Error = InsufficientCapacity;

    async fn check_n(&self, _: &Key, _: u64) -> Result<Decision, InsufficientCapacity> {
        let until_probe_ns = 2_500_000_000;
        let snapshot = Snapshot::new(self.0[0].limit(), 0, 0);
        Ok(Decision::denied(snapshot, until_probe_ns).at(weir_rl_core::Nanos::ZERO).from_fallback())
    }

    async fn refund(&self, _: &Key, _: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
        Ok(())
    }

    fn snapshot(&self, _: &Key) -> impl Future<Output = Result<Snapshot, InsufficientCapacity>> + Send {
        let limit = self.0[0].limit();
        async move { Ok(Snapshot::new(limit, 0, 0)) }
    }

    fn policies(&self) -> &[QuotaPolicy] {
        &self.0
    }
}

/// A fail-closed decision is the store's outage, not the client's quota: 503 with
/// the store's `Retry-After` (until the backend is tried again, rounded up), no
/// `RateLimit` fields, a problem body that says the limiter is unavailable. (It
/// was a 429 with `RateLimit: "minute";r=0` and "the rate limit for this client is
/// exhausted".)
#[tokio::test(flavor = "current_thread")]
async fn a_fail_closed_decision_is_answered_as_the_stores_outage() {
    let store = ClosedWhileDown([QuotaPolicy::new(100, Duration::from_secs(60))]);
    let policy = Policy::builder("api").limit(Limit::new(KeySource::global(), Store::remote(store))).build().unwrap();
    // The legacy fields on: none of them either.
    let layer = RateLimitLayer::builder().policy(policy).legacy_headers(true).build().unwrap();
    let response = send(&layer, get_req(&[])).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, "retry-after"), Some("3"));
    for name in ["ratelimit", "ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"] {
        assert_eq!(header(&response, name), None, "{name}");
    }
    let body = json(&response);
    assert_eq!((body["status"].as_u64(), body["title"].as_str()), (Some(503), Some("Rate Limiter Unavailable")));
    assert_eq!(body["retry_after"], 3);
    assert!(!body["detail"].as_str().unwrap().contains("exhausted"), "{body}");
}

/// A full store whose overflow limiter (shared by every key that does not fit)
/// refuses refuses for the store's capacity (`DenyReason::KeyCapacity`, decided by
/// a fallback): `503 Too Many Clients` with the overflow's wait, not the store's
/// outage (`Rate Limiter Unavailable`), and no `RateLimit` fields; through the
/// single-limit path and the general one (two limits).
#[tokio::test(flavor = "current_thread")]
async fn a_full_stores_overflow_refusal_is_the_capacity_refusal_not_an_outage() {
    use weir_keyed::AtCapacity;
    for limits in [1, 2] {
        let clock = ManualClock::new();
        let overflow = Arc::new(weir_gcra::Gcra::with_clock(Quota::per_hour(1).unwrap(), clock.clone()));
        let config = KeyedConfig::builder(1).at_capacity(AtCapacity::EvictIdleOrOverflow(overflow)).build().unwrap();
        let full: KeyedFixedWindow<Key, ManualClock> =
            KeyedFixedWindow::fixed_window_with_clock(Quota::per_minute(5).unwrap(), config, clock.clone()).unwrap();
        let mut policy = Policy::builder("api").limit(Limit::new(KeySource::header("x-c"), Store::local(full)));
        if limits == 2 {
            policy = policy.limit(Limit::new(KeySource::global(), Store::local(fixed(100, &clock))));
        }
        // The legacy fields on: none of them either.
        let layer = RateLimitLayer::builder().policy(policy.build().unwrap()).legacy_headers(true).build().unwrap();
        assert_eq!(send(&layer, get_req(&[("x-c", b"a")])).await.status(), StatusCode::OK, "the store's one key");
        assert_eq!(send(&layer, get_req(&[("x-c", b"b")])).await.status(), StatusCode::OK, "the overflow's one");
        let r = send(&layer, get_req(&[("x-c", b"c")])).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "{limits} limits");
        assert_eq!(json(&r)["title"], "Too Many Clients", "{limits} limits: {}", json(&r));
        assert_eq!(header(&r, "retry-after"), Some("3600"));
        for name in ["ratelimit", "ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]
        {
            assert!(header(&r, name).is_none(), "{name}");
        }
    }
}
