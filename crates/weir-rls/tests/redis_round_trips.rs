//! weir-rls on Redis decides a request in one round trip, however many
//! descriptors it has and whichever algorithms count them: every counter is
//! read, decided and (when all fit) charged by one script. Round trips are
//! counted by the server itself (`INFO commandstats`).

mod common;
mod support;

use common::{config, descriptor, request};
use std::sync::Arc;
use std::time::Duration;
use weir_rls::backend::{FailPolicy, RedisBackend};
use weir_rls::decider::{RedisStores, StoreDecider};
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::proto::{RateLimitDescriptor, RateLimitRequest, UInt64Value};
use weir_rls::{Generation, RlsService};

/// Four rules, one per algorithm; a year's window, so that no boundary falls
/// within the test.
const CONFIG: &str = "
domain: d
descriptors:
  - key: a
    rate_limit: {unit: year, requests_per_unit: 100}
  - key: b
    rate_limit: {unit: year, requests_per_unit: 100, algorithm: sliding_window}
  - key: c
    rate_limit: {unit: year, requests_per_unit: 100, algorithm: gcra}
  - key: e
    rate_limit: {unit: year, requests_per_unit: 3, algorithm: sliding_log}
";

type Service = RlsService<Arc<Generation<StoreDecider>>>;

async fn service(redis: &support::RedisServer) -> Service {
    let backend = RedisBackend::new(vec![redis.url()], false)
        .unwrap()
        .timeouts(Duration::from_secs(10), Duration::from_secs(10))
        .unwrap();
    let stores = Arc::new(RedisStores::connect(backend, "t:").await.unwrap());
    let config = Arc::new(config(CONFIG));
    let decider = StoreDecider::build(stores, &config, None).unwrap();
    RlsService::new(config, decider)
}

fn with_hits(mut d: RateLimitDescriptor, hits: Option<u64>) -> RateLimitDescriptor {
    d.hits_addend = hits.map(|value| UInt64Value { value });
    d
}

/// A request on the rules named, each descriptor charged `hits` (the request's
/// default of 1 when `None`).
fn on(rules: &[&str], hits: Option<u64>) -> RateLimitRequest {
    request("d", rules.iter().map(|rule| with_hits(descriptor(&[(rule, "x")]), hits)).collect())
}

/// What each rule has left, read without charging.
async fn remaining(service: &Service, rules: &[&str]) -> Vec<u32> {
    let response = service.respond(on(rules, Some(0))).await.unwrap();
    response.statuses.iter().map(|s| s.limit_remaining).collect()
}

#[tokio::test]
async fn a_three_descriptor_request_is_one_round_trip() {
    let redis = support::RedisServer::start();
    let service = service(&redis).await;
    // The first call loads the script (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA).
    assert_eq!(service.respond(on(&["a", "b", "c"], None)).await.unwrap().overall_code, Code::Ok as i32);
    let before = (redis.calls("evalsha"), redis.calls("eval"), redis.calls("script|load"));
    for round in 0..10 {
        let response = service.respond(on(&["a", "b", "c"], None)).await.unwrap();
        assert_eq!(response.overall_code, Code::Ok as i32, "round {round}");
        let left: Vec<u32> = response.statuses.iter().map(|s| s.limit_remaining).collect();
        assert_eq!(left, vec![98 - round; 3], "round {round}");
    }
    let after = (redis.calls("evalsha"), redis.calls("eval"), redis.calls("script|load"));
    assert_eq!((after.0 - before.0, after.1 - before.1, after.2 - before.2), (10, 0, 0), "one EVALSHA per request");
    // A read of every counter (hits_addend 0) is one round trip too.
    assert_eq!(remaining(&service, &["a", "b", "c", "e"]).await, vec![89, 89, 89, 3]);
    assert_eq!(redis.calls("evalsha") - after.0, 1);
}

#[tokio::test]
async fn a_request_over_one_limit_charges_none_of_the_others_in_one_round_trip() {
    let redis = support::RedisServer::start();
    let service = service(&redis).await;
    let all = ["a", "b", "c", "e"];
    for round in 0..3 {
        let response = service.respond(on(&all, None)).await.unwrap();
        assert_eq!(response.overall_code, Code::Ok as i32, "round {round}");
    }
    let before = redis.calls("evalsha");
    // The log's 3 are spent: refused, and the other three keep what they had.
    let response = service.respond(on(&all, None)).await.unwrap();
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    let codes: Vec<i32> = response.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, vec![Code::Ok as i32, Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]);
    // Each descriptor's own decision, as if it alone were charged.
    let left: Vec<u32> = response.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(left, vec![96, 96, 96, 0]);
    assert_eq!(redis.calls("evalsha") - before, 1, "one round trip, and no refunds");
    assert_eq!(remaining(&service, &all).await, vec![97, 97, 97, 0]);
}

async fn service_with(redis: &support::RedisServer, policy: FailPolicy) -> Service {
    let backend = RedisBackend::new(vec![redis.url()], false)
        .unwrap()
        .timeouts(Duration::from_millis(300), Duration::from_secs(10))
        .unwrap()
        .fail_policy(policy)
        .unwrap();
    let stores = Arc::new(RedisStores::connect(backend, "f:").await.unwrap());
    let config = Arc::new(config(CONFIG));
    let decider = StoreDecider::build(stores, &config, None).unwrap();
    RlsService::new(config, decider)
}

#[tokio::test]
async fn a_frozen_redis_decides_every_descriptor_by_the_fail_policy_all_or_nothing() {
    let mut redis = support::RedisServer::start();
    let closed = service_with(&redis, FailPolicy::Closed).await;
    let local = service_with(&redis, FailPolicy::Local { instances: 1, max_keys: 100 }).await;
    redis.pause();
    // Closed: every descriptor that costs something is refused.
    let response = closed.respond(on(&["a", "b", "c"], None)).await.unwrap();
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    assert!(response.statuses.iter().all(|s| s.code == Code::OverLimit as i32), "{response:?}");
    // Local: the local limits decide together. The log's 3 admit three requests;
    // the fourth is refused by it, and takes nothing from the other three.
    let all = ["a", "b", "c", "e"];
    for round in 0..3 {
        assert_eq!(local.respond(on(&all, None)).await.unwrap().overall_code, Code::Ok as i32, "round {round}");
    }
    let refused = local.respond(on(&all, None)).await.unwrap();
    assert_eq!(refused.overall_code, Code::OverLimit as i32);
    let codes: Vec<i32> = refused.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, vec![Code::Ok as i32, Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]);
    // What the refused request was answered for the others, it did not keep:
    // the next request without the log is answered the same.
    let left: Vec<u32> = refused.statuses.iter().take(3).map(|s| s.limit_remaining).collect();
    let next = local.respond(on(&["a", "b", "c"], None)).await.unwrap();
    assert_eq!(next.overall_code, Code::Ok as i32);
    assert_eq!(next.statuses.iter().map(|s| s.limit_remaining).collect::<Vec<_>>(), left);
    redis.resume();
}

#[tokio::test]
async fn a_one_descriptor_request_is_one_round_trip_of_its_own_script() {
    let redis = support::RedisServer::start();
    let service = service(&redis).await;
    for rule in ["a", "b", "c", "e"] {
        // Loads the rule's script on first use.
        assert_eq!(service.respond(on(&[rule], None)).await.unwrap().overall_code, Code::Ok as i32);
        let before = redis.calls("evalsha");
        let response = service.respond(on(&[rule], None)).await.unwrap();
        assert_eq!(response.overall_code, Code::Ok as i32, "{rule}");
        assert_eq!(redis.calls("evalsha") - before, 1, "{rule}");
    }
}
