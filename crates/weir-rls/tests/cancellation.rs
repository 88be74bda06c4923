//! A client that goes away mid-call leaves no capacity taken that no answer
//! reported: the service's future dropped at each of its awaits (weir-testkit),
//! then every counter read back, in memory and in Redis.

mod common;
mod support;

use common::{config, descriptor, request};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_rls::backend::{MemoryBackend, RedisBackend};
use weir_rls::decider::{MakeStore, MemoryStores, RedisStores, StoreDecider};
use weir_rls::proto::{RateLimitRequest, UInt64Value};
use weir_rls::windows::WindowAlignment;
use weir_rls::{Generation, RlsService};
use weir_testkit::each_cancellation;

/// Two rules a request is counted on at once; a year's window, so that no
/// boundary falls within the test.
const CONFIG: &str = "
domain: d
descriptors:
  - key: a
    rate_limit: {unit: year, requests_per_unit: 100}
  - key: b
    rate_limit: {unit: year, requests_per_unit: 100, algorithm: sliding_window}
";

type Service = RlsService<Arc<Generation<StoreDecider>>>;

fn service(stores: Arc<dyn MakeStore>) -> Service {
    let config = Arc::new(config(CONFIG));
    let decider = StoreDecider::build(stores, &config, None).unwrap();
    RlsService::new(config, decider)
}

fn both(hits: Option<u64>) -> RateLimitRequest {
    let with = |mut d: weir_rls::proto::RateLimitDescriptor| {
        d.hits_addend = hits.map(|value| UInt64Value { value });
        d
    };
    request("d", vec![with(descriptor(&[("a", "x")])), with(descriptor(&[("b", "x")]))])
}

/// What both counters have left, read without charging.
async fn remaining(service: &Service) -> (u32, u32) {
    let r = service.respond(both(Some(0))).await.unwrap();
    (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining)
}

/// Drops the call at each await; after each drop, every counter has what the
/// calls answered took, and no more (waiting, bounded, for what a dropped call
/// hands to a task to give back).
async fn nothing_left_behind(service: &Service) -> usize {
    let answered = std::cell::Cell::new(0u32);
    let runs = each_cancellation(
        || service.respond(both(None)),
        async |k, finished| {
            if finished {
                answered.set(answered.get() + 1);
            }
            let want = (100 - answered.get(), 100 - answered.get());
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let got = remaining(service).await;
                if got == want {
                    break;
                }
                assert!(Instant::now() < deadline, "dropped after {k} polls: {got:?} left, {want:?} wanted");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    assert_eq!(remaining(service).await, (99, 99));
    runs
}

#[tokio::test]
async fn in_memory() {
    let stores = Arc::new(MemoryStores::new(MemoryBackend::default(), WindowAlignment::Epoch));
    // Decided without an await: dropped before its first poll, or answered.
    assert_eq!(nothing_left_behind(&service(stores)).await, 2);
}

// One thread: the connection's task runs only while the call waits, so that each
// round trip is an await the call is parked on (on more threads a reply can be
// there before the call first waits for it).
#[tokio::test]
async fn in_redis() {
    let redis = support::RedisServer::start();
    let config = RedisBackend::new(vec![redis.url()], false)
        .unwrap()
        .timeouts(Duration::from_secs(10), Duration::from_secs(10))
        .unwrap();
    let stores = Arc::new(RedisStores::connect(config, "t:").await.unwrap());
    // Dropped before its first poll, at its one round trip (both counters in one
    // script: a batch dropped in flight hands it to a task that refunds what it
    // admitted), and answered.
    let runs = nothing_left_behind(&service(stores)).await;
    assert!(runs >= 3, "{runs} runs");
}
