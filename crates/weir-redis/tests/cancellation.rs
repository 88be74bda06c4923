//! Cancellation at every await: each async operation that touches shared state
//! (`Resilient` checks and probes, `Leased` checks and renewals, refunds) is
//! polled k times and dropped, for every k until it completes
//! (`weir_testkit::each_cancellation`), against a real redis-server, healthy or
//! stopped (SIGSTOP). After each drop: no probe flag left set, no renewal left
//! pending, no waiter left asleep, and the next call decides as it should.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Wake, Waker};
use std::time::Duration;
use support::{FakeMode, FakeRedis, RedisServer};
use weir_redis::__private::{is_probing, renewal_pending, renewal_settled};
use weir_redis::{Backoff, Error, FailPolicy, LeaseConfig, Leased, Path, Redis, RedisLimiter, RedisOptions, Resilient};
use weir_rl_core::{ManualClock, Nanos, Quota};
use weir_testkit::each_cancellation;

const T0: u64 = 1_700_000_000_000_000_000;

/// Short enough that a stopped server costs little test time, long enough that a
/// loaded machine answers well within it; every wait in these tests is bounded
/// by it. A check that must reach Redis is retried (`redis_decides`), so no
/// test depends on how fast the machine is.
const TIMEOUT: Duration = Duration::from_millis(500);

/// A connection with the short [`TIMEOUT`], for the tests of outages (its first
/// ping is retried: on a loaded machine one may be late).
async fn connect(url: &str) -> Redis {
    support::connect_retrying(url, RedisOptions::builder().call_timeout(TIMEOUT).build().unwrap()).await
}

/// A connection for the tests that need answers, not timeouts.
async fn patient(server: &RedisServer) -> Redis {
    Redis::connect_with(&server.url(), support::patient()).await.expect("connect")
}

fn resilient(redis: &Redis, policy: FailPolicy, clock: &ManualClock) -> Resilient<ManualClock> {
    let limiter = RedisLimiter::builder(redis, Quota::per_minute(1_000).unwrap()).build().unwrap();
    let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1)).unwrap();
    Resilient::builder(limiter, policy).backoff(backoff).build_with_clock(clock.clone()).unwrap()
}

/// Longer than the longest back-off: the next check after it probes Redis.
const PAST_BACKOFF: Duration = Duration::from_secs(2);

/// Whether Redis decides a check again: checks `key` after each back-off until
/// Redis decides, at most 20 times (one late answer on a loaded machine starts
/// a new back-off; a probe flag left set would keep every check on the policy).
async fn redis_decides(limiter: &Resilient<ManualClock>, clock: &ManualClock, key: &str) -> bool {
    for _ in 0..20 {
        clock.advance(PAST_BACKOFF);
        if limiter.check_traced(key, 1).await.unwrap().path == Path::Redis {
            return limiter.is_healthy();
        }
    }
    false
}

/// Starts an outage: the server stopped, one check that times out, the server
/// running again. Redis answers from here on, but the limiter leaves it alone
/// until its back-off is over.
async fn outage(server: &mut RedisServer, limiter: &Resilient<ManualClock>) {
    server.pause();
    let checked = limiter.check_traced("outage", 1).await.unwrap();
    assert_ne!(checked.path, Path::Redis, "a stopped server does not decide");
    assert!(!limiter.is_healthy());
    server.resume();
}

#[tokio::test]
async fn a_healthy_resilient_check_dropped_at_any_await_leaves_nothing_behind() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = resilient(&connect(&server.url()).await, FailPolicy::Closed, &clock);
    let cuts = each_cancellation(
        || limiter.check_traced("k", 1),
        async |k, finished| {
            assert!(!is_probing(&limiter), "a probe flag left set after {k} polls (finished: {finished})");
            assert!(redis_decides(&limiter, &clock, "next").await, "after {k} polls");
        },
    )
    .await;
    assert!(cuts >= 3, "the check was parked on Redis at least once ({cuts} runs)");
}

#[tokio::test]
async fn a_probe_dropped_at_any_await_is_released_and_the_next_check_probes_again() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = resilient(&connect(&server.url()).await, FailPolicy::Open, &clock);
    outage(&mut server, &limiter).await;
    clock.advance(PAST_BACKOFF);
    let cuts = each_cancellation(
        || limiter.check_traced("k", 1),
        async |k, finished| {
            assert!(!is_probing(&limiter), "the probe flag left set after {k} polls (finished: {finished})");
            // Redis answers: the next check after the back-off is the probe, and
            // it brings the limiter back to Redis.
            assert!(redis_decides(&limiter, &clock, "next").await, "after a probe dropped after {k} polls");
            if !finished {
                // The same state for the next run: an outage whose back-off is over.
                outage(&mut server, &limiter).await;
                clock.advance(PAST_BACKOFF);
            }
        },
    )
    .await;
    assert!(cuts >= 3, "the probe was parked on Redis at least once ({cuts} runs)");
}

#[tokio::test]
async fn a_probe_of_a_stopped_server_dropped_at_any_await_is_released() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = resilient(&connect(&server.url()).await, FailPolicy::Closed, &clock);
    outage(&mut server, &limiter).await;
    server.pause();
    // Within the back-off nothing waits on Redis: decided at the first poll.
    let cuts = each_cancellation(
        || limiter.check_traced("k", 1),
        async |k, finished| {
            assert!(!is_probing(&limiter), "after {k} polls");
            if finished {
                let checked = limiter.check_traced("k", 1).await.unwrap();
                assert_eq!((checked.path, checked.decision.is_denied()), (Path::FailClosed, true));
            }
        },
    )
    .await;
    assert_eq!(cuts, 2, "no await within a back-off");
    // After the back-off, the probe waits for the stopped server until its timeout.
    clock.advance(PAST_BACKOFF);
    let cuts = each_cancellation(
        || limiter.check_traced("k", 1),
        async |k, finished| {
            assert!(!is_probing(&limiter), "the probe flag left set after {k} polls (finished: {finished})");
            assert!(!limiter.is_healthy());
            // The state every run starts from: a back-off that is over.
            clock.advance(PAST_BACKOFF);
        },
    )
    .await;
    assert!(cuts >= 3, "the probe was parked on the stopped server ({cuts} runs)");
    server.resume();
    assert!(redis_decides(&limiter, &clock, "k").await, "the next probe brings the limiter back");
}

fn leased(redis: &Redis, clock: &ManualClock) -> Leased<ManualClock> {
    let limiter =
        RedisLimiter::builder(redis, Quota::per_second(1_000).unwrap()).build_with_clock(clock.clone()).unwrap();
    let config = LeaseConfig::builder().max_lease(8).lifetime(Duration::from_secs(60)).build().unwrap();
    Leased::with_clock(limiter, config, clock.clone()).unwrap()
}

#[tokio::test]
async fn a_lease_renewal_dropped_at_any_await_leaves_no_renewal_or_waiter_behind() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let leased = leased(&patient(&server).await, &clock);
    let run = AtomicUsize::new(0);
    // Two checks of a fresh key at once: the first renews the lease, the second
    // waits for that renewal; dropped at each await of either.
    let cuts = each_cancellation(
        || {
            let key = format!("k{}", run.fetch_add(1, Ordering::SeqCst));
            let leased = &leased;
            async move {
                let (a, b) = tokio::join!(leased.check(&key), leased.check(&key));
                assert!(a.unwrap().is_allowed() && b.unwrap().is_allowed());
            }
        },
        async |k, finished| {
            let key = format!("k{}", run.load(Ordering::SeqCst) - 1);
            // A renewal dropped after it was sent is delivered by a detached task.
            renewal_settled(&leased, key.as_bytes()).await;
            assert!(!renewal_pending(&leased, key.as_bytes()), "a renewal left pending after {k} polls");
            // The key gets a lease again: of the next two checks, at most one
            // goes to Redis, and the other is served from the lease it took.
            let trips = leased.round_trips();
            for _ in 0..2 {
                assert!(leased.check(&key).await.unwrap().is_allowed(), "after {k} polls (finished: {finished})");
            }
            assert!(leased.round_trips() - trips <= 1, "the key got no lease after a drop after {k} polls");
            assert!(!renewal_pending(&leased, key.as_bytes()));
        },
    )
    .await;
    assert!(cuts >= 3, "the renewal was parked on Redis at least once ({cuts} runs)");
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A renewal dropped where no tokio runtime can finish it (a plain thread)
/// releases its mark at once.
#[tokio::test]
async fn a_waiter_is_woken_when_the_renewal_it_waits_for_is_dropped() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let leased = leased(&patient(&server).await, &clock);
    let (renewer_wakes, waiter_wakes) = (Arc::new(Count::default()), Arc::new(Count::default()));
    let renewer_waker = Waker::from(renewer_wakes.clone());
    let waiter_waker = Waker::from(waiter_wakes.clone());
    let mut renewer = Box::pin(leased.check("hot"));
    assert!(renewer.as_mut().poll(&mut Context::from_waker(&renewer_waker)).is_pending(), "parked on Redis");
    assert!(renewal_pending(&leased, b"hot"));
    let mut waiter = Box::pin(leased.check("hot"));
    assert!(waiter.as_mut().poll(&mut Context::from_waker(&waiter_waker)).is_pending(), "waits for the renewal");
    assert_eq!(waiter_wakes.0.load(Ordering::SeqCst), 0);
    std::thread::scope(|s| s.spawn(move || drop(renewer)).join().unwrap());
    assert!(!renewal_pending(&leased, b"hot"), "the dropped renewal is released");
    assert_eq!(waiter_wakes.0.load(Ordering::SeqCst), 1, "the waiter is woken when the renewal is dropped");
    // The waiter takes the renewal over: one round trip, and a lease for the key.
    let trips = leased.round_trips();
    assert!(waiter.await.unwrap().is_allowed());
    assert_eq!(leased.round_trips() - trips, 1);
    assert!(leased.check("hot").await.unwrap().is_allowed());
    assert_eq!(leased.round_trips() - trips, 1, "served from the lease the waiter took");
}

#[tokio::test]
async fn a_refund_dropped_at_any_await_is_applied_whole_or_not_at_all() {
    let server = RedisServer::start();
    let redis = patient(&server).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let quota = Quota::per_minute(10).unwrap();
    let limiter = RedisLimiter::builder(&redis, quota).prefix("r:").build_with_clock(clock.clone()).unwrap();
    let resilient = Resilient::builder(limiter.clone(), FailPolicy::Closed).build_with_clock(clock.clone()).unwrap();
    let leased = leased(&redis, &clock);
    let run = AtomicUsize::new(0);
    let key = |run: &AtomicUsize| format!("k{}", run.load(Ordering::SeqCst));
    // An admission of 4 and its refund, at a frozen time: dropped at any await,
    // the key holds 6 (admitted, not refunded) or 10 (nothing, or both).
    for through in ["RedisLimiter", "Resilient"] {
        let cuts = each_cancellation(
            || {
                run.fetch_add(1, Ordering::SeqCst);
                let (key, limiter, resilient) = (key(&run), &limiter, &resilient);
                async move {
                    if through == "RedisLimiter" {
                        let d = limiter.check_n(&key, 4).await.unwrap();
                        limiter.refund(&key, 4, &d).await.unwrap();
                    } else {
                        // (Decided by the policy if Redis were late: then nothing is
                        // taken in Redis, and the refund is dropped.)
                        let d = resilient.check_traced(&key, 4).await.unwrap();
                        resilient.refund(&key, 4, &d.decision).await.unwrap();
                    }
                }
            },
            async |k, finished| {
                let left = limiter.snapshot(&key(&run)).await.unwrap().remaining();
                assert!(left == 10 || (left == 6 && !finished), "{through}: {left} left after {k} polls");
                assert!(!is_probing(&resilient), "{through}: a probe flag left set after {k} polls");
            },
        )
        .await;
        assert!(cuts >= 4, "{through}: parked on Redis at the check and at the refund ({cuts} runs)");
    }
    let cuts = each_cancellation(
        || {
            run.fetch_add(1, Ordering::SeqCst);
            let (key, leased) = (key(&run), &leased);
            async move {
                let d = leased.check_n(&key, 4).await.unwrap();
                leased.refund(&key, 4, &d).await.unwrap();
            }
        },
        async |k, _| {
            let key = key(&run);
            renewal_settled(&leased, key.as_bytes()).await;
            assert!(!renewal_pending(&leased, key.as_bytes()), "Leased: a renewal left pending after {k} polls");
            assert!(leased.check_n(&key, 4).await.unwrap().is_allowed(), "Leased: after {k} polls");
        },
    )
    .await;
    assert!(cuts >= 3, "Leased: parked on Redis at least once ({cuts} runs)");
}

#[tokio::test]
async fn a_lease_renewal_dropped_after_redis_ran_it_delivers_its_grant_to_the_lease() {
    // 64 per minute, leases of 64, a frozen clock: the first renewal of a key
    // takes its whole burst. A check dropped at any await of that renewal loses
    // nothing: the grant lands in the lease and the next 64 checks are served.
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let redis = patient(&server).await;
    let limiter =
        RedisLimiter::builder(&redis, Quota::per_minute(64).unwrap()).build_with_clock(clock.clone()).unwrap();
    let leased =
        Leased::with_clock(limiter, LeaseConfig::builder().max_lease(64).build().unwrap(), clock.clone()).unwrap();
    // Scripts loaded first, so a drop after one poll is a drop after the script was sent.
    assert!(leased.check("warm").await.unwrap().is_allowed());
    let run = AtomicUsize::new(0);
    let cuts = each_cancellation(
        || {
            let key = format!("k{}", run.fetch_add(1, Ordering::SeqCst));
            let leased = &leased;
            async move { assert!(leased.check(&key).await.unwrap().is_allowed()) }
        },
        async |k, finished| {
            let key = format!("k{}", run.load(Ordering::SeqCst) - 1);
            let trips = leased.round_trips();
            let mut admitted = u64::from(finished);
            for _ in 0..100 {
                admitted += u64::from(leased.check(&key).await.unwrap().is_allowed());
            }
            assert_eq!(admitted, 64, "of a burst of 64 at one instant, after a drop after {k} polls");
            // A dropped renewal that reached Redis was delivered, not asked for again.
            let redis_charged = leased.limiter().snapshot(&key).await.unwrap().remaining() < 64;
            assert!(leased.round_trips() - trips <= 1 + 100 - 64, "after {k} polls");
            assert!(redis_charged);
            renewal_settled(&leased, key.as_bytes()).await;
            assert!(!renewal_pending(&leased, key.as_bytes()), "after {k} polls");
        },
    )
    .await;
    assert!(cuts >= 3, "the renewal was parked on Redis at least once ({cuts} runs)");
}

#[tokio::test]
async fn a_lease_renewal_past_its_call_timeout_is_given_up_within_one_more_timeout() {
    // A server that reads and never answers: the check times out, and the
    // detached task that waits for the late reply holds the renewal mark until
    // it gives up, one call timeout later; then nothing is left behind.
    let fake = FakeRedis::start();
    let redis = connect(&fake.url()).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let leased = leased(&redis, &clock);
    // Connected: tokio's clock is paused from here, and moves only when every
    // task waits on it, to the next timer. The check's timeout, the detached
    // task's (one call timeout later) and the bound on the wait for it (two call
    // timeouts after the check) then fire in that order, however long the test's
    // process is held up (on a real clock, a stall past both let the bound fire
    // first).
    tokio::time::pause();
    fake.set_mode(FakeMode::Silent);
    let checked = leased.check("k").await;
    assert!(matches!(checked, Err(Error::Timeout { .. })), "{checked:?}");
    assert!(renewal_pending(&leased, b"k"), "the late reply is still awaited");
    renewal_settled(&leased, b"k").await;
    assert!(!renewal_pending(&leased, b"k"), "given up after one more call timeout");
}
