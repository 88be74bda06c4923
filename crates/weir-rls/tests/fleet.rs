//! weir-rls processes sharing one `redis-server`: between them they admit exactly
//! the limit; with Redis frozen (SIGSTOP) each answers as its fail policy says,
//! without hanging, and goes back to Redis once it is thawed (SIGCONT).

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::{RedisServer, WeirRls, temp_dir};
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use weir_rls::proto::{RateLimitDescriptor, RateLimitRequest, rate_limit_descriptor};

/// A window of a year: no boundary falls within a test.
const CONFIG: &str = "
domain: fleet
descriptors:
  - key: tenant
    rate_limit: {unit: year, requests_per_unit: 20}
";

fn request(tenant: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "fleet".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![rate_limit_descriptor::Entry { key: "tenant".into(), value: tenant.into() }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

async fn client(addr: SocketAddr) -> RateLimitServiceClient<tonic::transport::Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}")).await.expect("connect")
}

/// The overall code of one call, or the gRPC status code it failed with.
async fn ask(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    tenant: &str,
) -> Result<Code, tonic::Code> {
    // A hang guard, not a timing claim.
    let call = tokio::time::timeout(Duration::from_secs(60), client.should_rate_limit(request(tenant)));
    match call.await.expect("the call hung") {
        Ok(response) => Ok(Code::try_from(response.into_inner().overall_code).unwrap_or(Code::Unknown)),
        Err(status) => Err(status.code()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let dir = temp_dir("fleet");
    std::fs::write(dir.join("fleet.yaml"), CONFIG).unwrap();
    let args = ["--backend", "redis", "--redis-url", &redis.url(), "--redis-timeout", "10s"];
    let (a, b) = (WeirRls::start(&dir, &args), WeirRls::start(&dir, &args));
    let mut tasks = Vec::new();
    for addr in [a.grpc, b.grpc] {
        for _ in 0..4 {
            tasks.push(tokio::spawn(async move {
                let mut client = client(addr).await;
                let mut admitted = 0;
                for _ in 0..10 {
                    if ask(&mut client, "acme").await == Ok(Code::Ok) {
                        admitted += 1;
                    }
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert_eq!(admitted, 20, "80 requests over two processes");
    // Another tenant has its own counter.
    assert_eq!(ask(&mut client(b.grpc).await, "other").await, Ok(Code::Ok));
    drop((a, b));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_is_answered_by_the_fail_policy_and_recovered_from() {
    let mut redis = RedisServer::start();
    let dir = temp_dir("frozen");
    std::fs::write(dir.join("fleet.yaml"), CONFIG).unwrap();
    let url = redis.url();
    let args = |policy: &'static str| {
        [
            "--backend",
            "redis",
            "--redis-url",
            &url,
            "--redis-timeout",
            "300ms",
            "--fail-policy",
            policy,
            "--instances",
            "4",
        ]
        .map(str::to_owned)
    };
    let start = |policy| WeirRls::start(&dir, &args(policy).each_ref().map(String::as_str));
    let (closed, open, local) = (start("closed"), start("open"), start("local"));
    let (mut closed_client, mut open_client, mut local_client) =
        (client(closed.grpc).await, client(open.grpc).await, client(local.grpc).await);
    for c in [&mut closed_client, &mut open_client, &mut local_client] {
        assert_eq!(ask(c, "t").await, Ok(Code::Ok));
    }

    redis.pause();
    // Closed: over the limit; open: admitted; local: 20 / 4 = 5 per instance.
    for _ in 0..3 {
        assert_eq!(ask(&mut closed_client, "t").await, Ok(Code::OverLimit));
        assert_eq!(ask(&mut open_client, "t").await, Ok(Code::Ok));
    }
    let mut local_admitted = 0;
    for _ in 0..8 {
        if ask(&mut local_client, "t").await == Ok(Code::Ok) {
            local_admitted += 1;
        }
    }
    assert_eq!(local_admitted, 5, "the local fallback at a quarter of the limit");
    // Health and the HTTP port answer while Redis is frozen.
    assert_eq!(support::http_get(closed.http, "/healthcheck").map(|(s, _)| s), Some(200));

    redis.resume();
    // Back to Redis, and its limit holds: 3 were admitted there before the
    // freeze (calls sent to it while frozen may have run once it was thawed).
    let deadline = Instant::now() + Duration::from_secs(60);
    while ask(&mut closed_client, "t").await != Ok(Code::Ok) {
        assert!(Instant::now() < deadline, "never back on Redis: {}", closed.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stored = redis.command("KEYS *fleet.tenant*").unwrap_or_default();
    assert!(stored.starts_with('*'), "{stored}");
    let mut admitted_after = 1;
    while ask(&mut closed_client, "t").await == Ok(Code::Ok) {
        admitted_after += 1;
        assert!(admitted_after <= 20 - 3, "admitted past the limit");
    }
    // The open instance too, once its back-off is over.
    while ask(&mut open_client, "t").await != Ok(Code::OverLimit) {
        assert!(Instant::now() < deadline, "the open instance never back on Redis: {}", open.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop((closed, open, local));
    std::fs::remove_dir_all(&dir).unwrap();
}
