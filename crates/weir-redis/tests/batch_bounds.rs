//! Batches at the edges of what Redis's scripts can count, and the errors of a
//! `Resilient` batch named by their place in the caller's batch.

mod support;

use std::time::Duration;
use support::RedisServer;
use weir_redis::{
    Backend, Backoff, BatchItem, BatchMismatch, ConfigError, Error, FailPolicy, MAX_WINDOW_LIMIT, Path, Redis,
    RedisLimiter, RedisOptions, Resilient,
};
use weir_rl_core::{ManualClock, Nanos, Quota};

const T0: u64 = 1_700_000_000_000_000_000;

async fn patient(server: &RedisServer) -> Redis {
    Redis::connect_with(&server.url(), support::patient()).await.expect("connect")
}

/// A window limit the scripts cannot count exactly is refused when the limiter is
/// built. Without the bound, a fixed window of 2^53 + 2 took 2^53 and then
/// admitted ten more requests of 1 (each `count + 1` rounded back to 2^53 in Lua's
/// doubles and fitted again), and one of `u64::MAX` never ran out.
#[tokio::test]
async fn a_window_limit_above_2_pow_53_is_refused_when_built() {
    let server = RedisServer::start();
    let redis = patient(&server).await;
    let day = Duration::from_secs(86_400);
    for backend in [Backend::FixedWindow, Backend::SlidingWindow] {
        for limit in [MAX_WINDOW_LIMIT + 1, (1 << 53) + 2, u64::MAX] {
            let quota = Quota::new(limit, day).expect("quota");
            let e = RedisLimiter::builder(&redis, quota).backend(backend).build().expect_err("refused");
            assert!(matches!(e, ConfigError::WindowTooLarge { limit: l } if l == limit), "{backend:?} {limit}: {e:?}");
            assert!(e.to_string().contains("2^53"), "{e}");
        }
    }
}

/// At the largest limit the count is exact to the last unit: a batch that takes
/// all but two leaves two, then two requests of 1 are admitted and the third is
/// refused.
#[tokio::test]
async fn the_largest_window_limit_counts_to_its_last_unit() {
    let server = RedisServer::start();
    let redis = patient(&server).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let quota = Quota::new(MAX_WINDOW_LIMIT, Duration::from_secs(100 * 86_400)).expect("quota");
    let fixed = RedisLimiter::builder(&redis, quota)
        .backend(Backend::FixedWindow)
        .prefix("big:")
        .build_with_clock(clock)
        .expect("a window of 2^53 - 1 is built");
    let first = RedisLimiter::check_batch(&[BatchItem::new(&fixed, "k", MAX_WINDOW_LIMIT - 2)]).await.expect("batch");
    assert!(first.is_admitted());
    assert_eq!(first.decision(0).expect("decision").remaining(), 2);
    let mut admitted = 0;
    for _ in 0..10 {
        if RedisLimiter::check_batch(&[BatchItem::new(&fixed, "k", 1)]).await.expect("batch").is_admitted() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 2, "two were left");
}

fn resilient(limiter: &RedisLimiter, clock: &ManualClock) -> Resilient<ManualClock> {
    let backoff = Backoff::new(Duration::from_secs(60), Duration::from_secs(60)).expect("backoff");
    Resilient::builder(limiter.clone(), FailPolicy::Open)
        .backoff(backoff)
        .build_with_clock(clock.clone())
        .expect("resilient")
}

/// A `Resilient` batch's error names the item by its place in the caller's
/// batch, whichever items go on to Redis: here item 0's limiter is in an outage's
/// back-off (decided by its policy, not sent), and item 2 is on another
/// connection. It was named item 1, its place among the items sent.
#[tokio::test]
async fn a_resilient_batch_error_names_the_callers_item() {
    let mut server = RedisServer::start();
    let options = RedisOptions::builder().call_timeout(Duration::from_millis(500)).build().expect("options");
    let redis = support::connect_retrying(&server.url(), options.clone()).await;
    let other = support::connect_retrying(&server.url(), options).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let minute = Quota::per_minute(4).expect("quota");
    let a = RedisLimiter::builder(&redis, minute).prefix("a:").build().expect("a");
    let b = RedisLimiter::builder(&redis, minute).prefix("b:").build().expect("b");
    let c = RedisLimiter::builder(&other, minute).prefix("c:").build().expect("c");
    let (ra, rb, rc) = (resilient(&a, &clock), resilient(&b, &clock), resilient(&c, &clock));
    // `ra` alone sees an outage (a peek: nothing queued that writes).
    server.pause();
    assert_eq!(ra.check_traced("o", 0).await.expect("decided by its policy").path, Path::FailOpen);
    server.resume();
    assert!(!ra.is_healthy());
    let batch = [BatchItem::new(&ra, "k", 1), BatchItem::new(&rb, "k", 1), BatchItem::new(&rc, "k", 1)];
    let e = Resilient::check_batch(&batch).await.expect_err("another connection");
    assert!(matches!(e, Error::Batch { item: 2, mismatch: BatchMismatch::Connection }), "{e:?}: {e}");
    // The same batch without the outage: the same error, the same item.
    let e = RedisLimiter::check_batch(&[
        BatchItem::new(&a, "k", 1),
        BatchItem::new(&b, "k", 1),
        BatchItem::new(&c, "k", 1),
    ])
    .await
    .expect_err("another connection");
    assert!(matches!(e, Error::Batch { item: 2, mismatch: BatchMismatch::Connection }), "{e:?}");
}
