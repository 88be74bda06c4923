//! Faults against real (and fake) servers: a server stopped mid-load, paused,
//! restarted, its scripts flushed; bad replies; the fail policies and their
//! back-off. Every wait is bounded.

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::{FakeMode, FakeRedis, RedisServer};
use weir_redis::{
    Backend, Backoff, Error, FailPolicy, LocalFallback, Path, Redis, RedisLimiter, RedisOptions, Resilient,
};
use weir_rl_core::{ManualClock, Nanos, Quota};

const TIMEOUT: Duration = Duration::from_millis(100);

/// A guard against hangs, not a timing claim: a call that has not ended after
/// this long (a hundred times its timeout, room for any load) has hung, and the
/// test fails instead of waiting for ever. No test asserts how fast a call is.
const HANG: Duration = Duration::from_secs(30);

/// A connection with the short [`TIMEOUT`], for the tests of timeouts (its first
/// ping is retried: on a loaded machine one may be late).
async fn connect(url: &str) -> Redis {
    support::connect_retrying(url, RedisOptions::builder().call_timeout(TIMEOUT).build().unwrap()).await
}

/// A connection for the tests that need answers, not timeouts.
async fn patient(url: &str) -> Redis {
    Redis::connect_with(url, support::patient()).await.expect("connect")
}

fn backoff() -> Backoff {
    Backoff::new(Duration::from_millis(100), Duration::from_secs(1)).unwrap()
}

/// A check that must finish within [`HANG`].
async fn bounded<T>(what: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, call).await.unwrap_or_else(|_| panic!("{what} hung past the timeout"))
}

fn resilient(redis: &Redis, policy: FailPolicy, clock: &ManualClock) -> Resilient<ManualClock> {
    let limiter = RedisLimiter::builder(redis, Quota::per_minute(100).unwrap()).build().unwrap();
    Resilient::builder(limiter, policy).backoff(backoff()).build_with_clock(clock.clone()).unwrap()
}

/// Waits (bounded by [`HANG`]) until `fake` has received `expected` script
/// calls, then checks that it has received exactly that many: the fake server's
/// thread counts a call when it reads it, which under load may come after the
/// client's timeout fired.
async fn scripts_seen(fake: &FakeRedis, expected: usize, what: &str) {
    let deadline = tokio::time::Instant::now() + HANG;
    while fake.scripts() < expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(fake.scripts(), expected, "{what}");
}

fn policies() -> [FailPolicy; 3] {
    [FailPolicy::Open, FailPolicy::Closed, FailPolicy::LocalFallback(LocalFallback::new(4, 1_000).unwrap())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stopped_mid_load_hands_over_to_each_policy() {
    for policy in policies() {
        let mut server = RedisServer::start();
        let clock = ManualClock::new();
        let limiter = Arc::new(resilient(&connect(&server.url()).await, policy, &clock));
        let mut load = Vec::new();
        for task in 0..4 {
            let limiter = limiter.clone();
            load.push(tokio::spawn(async move {
                let mut paths = Vec::new();
                for i in 0..400 {
                    let key = format!("client-{task}-{}", i % 7);
                    let checked = bounded("a check under load", limiter.check_traced(&key, 1)).await.unwrap();
                    paths.push(checked.path);
                    tokio::task::yield_now().await;
                }
                paths
            }));
        }
        // Stop the server while the load runs, whatever the load has seen by then:
        // a check that timed out on a loaded machine has already made the
        // limiter unhealthy, and the checks after the stop must find it stopped.
        tokio::time::sleep(Duration::from_millis(2)).await;
        server.stop();
        for task in load {
            let paths = task.await.unwrap();
            assert!(
                paths
                    .iter()
                    .all(|p| matches!(p, Path::Redis | Path::FailOpen | Path::FailClosed | Path::LocalFallback))
            );
        }
        // Every check after the stop is the policy's, as documented.
        for round in 0..3 {
            let checked = bounded("a check after the stop", limiter.check_traced("after", 1)).await.unwrap();
            let d = checked.decision;
            assert_eq!(d.decided_at(), Nanos::ZERO, "decided locally");
            match policy {
                FailPolicy::Open => assert_eq!((checked.path, d.is_allowed()), (Path::FailOpen, true)),
                FailPolicy::Closed => {
                    assert_eq!((checked.path, d.is_denied()), (Path::FailClosed, true));
                    assert!(d.retry_after().unwrap() > Duration::ZERO);
                }
                _ => assert_eq!((checked.path, d.is_allowed()), (Path::LocalFallback, true)),
            }
            clock.advance(Duration::from_secs(2)); // past the back-off: the next check probes
            let _ = round;
        }
        if let FailPolicy::LocalFallback(_) = policy {
            // 100 per minute over 4 instances: 25 at once, then one per 2.4 s.
            let d = limiter.check_traced("fresh", 25).await.unwrap();
            assert_eq!((d.path, d.decision.is_allowed()), (Path::LocalFallback, true));
            let d = limiter.check_traced("fresh", 1).await.unwrap().decision;
            assert_eq!(d.retry_after(), Some(Duration::from_millis(2_400)));
        }
        assert!(!limiter.is_healthy());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_times_out_then_the_policy_decides_and_checks_recover() {
    let mut server = RedisServer::start();
    let redis = connect(&server.url()).await;
    let raw = RedisLimiter::builder(&redis, Quota::per_minute(100).unwrap()).build().unwrap();
    let clock = ManualClock::new();
    let limiter = resilient(&redis, FailPolicy::Closed, &clock);
    assert!(recover(&limiter, &clock).await, "Redis decides before the pause");
    server.pause();
    // Every call of a paused server times out, however many are made (a count of
    // calls, not a duration: no assumption on how fast the machine is).
    for _ in 0..5 {
        match bounded("a check of a paused server", raw.check("k")).await {
            Err(Error::Timeout { after }) => assert_eq!(after, TIMEOUT),
            other => panic!("a paused server answers a timeout, not {other:?}"),
        }
        let checked = bounded("a policy check", limiter.check_traced("k", 1)).await.unwrap();
        assert_eq!((checked.path, checked.decision.is_denied()), (Path::FailClosed, true));
        clock.advance(Duration::from_millis(500)); // probes now and then
    }
    server.resume();
    clock.advance(Duration::from_secs(2));
    let recovered = recover(&limiter, &clock).await;
    assert!(recovered, "checks went back to Redis after the pause");
    let mut answered = false;
    for _ in 0..20 {
        answered = bounded("a check", raw.check("k")).await.is_ok();
        if answered {
            break;
        }
    }
    assert!(answered, "the limiter answers again after the pause");
}

/// Checks `key` until Redis decides (bounded: the connection may need a moment to
/// be re-established), advancing past each back-off.
async fn recover(limiter: &Resilient<ManualClock>, clock: &ManualClock) -> bool {
    for _ in 0..100 {
        if bounded("a recovering check", limiter.check_traced("k", 1)).await.unwrap().path == Path::Redis {
            return true;
        }
        clock.advance(Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_used_again_without_restarting_the_client() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = resilient(&connect(&server.url()).await, FailPolicy::Open, &clock);
    assert!(recover(&limiter, &clock).await, "Redis decides before the stop");
    server.stop();
    assert_eq!(bounded("a check", limiter.check_traced("k", 1)).await.unwrap().path, Path::FailOpen);
    server.restart(); // same port, empty, no scripts loaded
    clock.advance(Duration::from_secs(2));
    assert!(recover(&limiter, &clock).await, "checks went back to Redis after the restart");
    assert!(limiter.is_healthy());
}

#[tokio::test]
async fn script_flush_mid_run_reloads_transparently() {
    let server = RedisServer::start();
    let redis = patient(&server.url()).await;
    let clock = ManualClock::starting_at(Nanos::new(1_700_000_000_000_000_000));
    let backends = [Backend::Gcra, Backend::FixedWindow, Backend::SlidingWindow, Backend::SlidingLog];
    for (i, backend) in backends.into_iter().enumerate() {
        let limiter = RedisLimiter::builder(&redis, Quota::per_minute(10).unwrap())
            .backend(backend)
            .prefix(&format!("p{i}:"))
            .build_with_clock(clock.clone())
            .unwrap();
        for expected in (5..10).rev() {
            assert_eq!(limiter.check("k").await.unwrap().remaining(), expected);
            assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
        }
        assert_eq!(limiter.check_n("k", 5).await.unwrap().remaining(), 0);
        let admission = limiter.check_n("j", 5).await.unwrap();
        server.cli(&["SCRIPT", "FLUSH"]);
        limiter.refund("j", 5, &admission).await.unwrap();
    }
}

#[tokio::test]
async fn bad_replies_are_typed_errors_and_admit_nothing() {
    let fake = FakeRedis::start();
    let redis = patient(&fake.url()).await;
    let limiter = RedisLimiter::builder(&redis, Quota::per_minute(10).unwrap()).build().unwrap();
    for (reply, what) in [
        (&b"+PONG\r\n"[..], "a status"),
        (b"*2\r\n:1\r\n:5\r\n", "too short an array"),
        (b"*3\r\n:1\r\n$3\r\nabc\r\n:0\r\n", "a non-number"),
        (b"-ERR something broke\r\n", "an error"),
    ] {
        fake.set_mode(FakeMode::Reply(reply.to_vec()));
        let e = bounded("a check", limiter.check("k")).await.unwrap_err();
        assert!(matches!(e, Error::Reply { .. }), "{what}: {e:?}");
        // The fail policy does not turn a bad reply into an admission.
        let clock = ManualClock::new();
        let open =
            Resilient::builder(limiter.clone(), FailPolicy::Open).backoff(backoff()).build_with_clock(clock).unwrap();
        let e = bounded("a check", open.check("k")).await.unwrap_err();
        assert!(matches!(e, Error::Reply { .. }), "{what}: {e:?}");
    }
}

#[tokio::test]
async fn a_wrong_type_key_is_an_error_under_every_policy() {
    let server = RedisServer::start();
    let redis = patient(&server.url()).await;
    let key = RedisLimiter::builder(&redis, Quota::per_minute(100).unwrap()).build().unwrap().redis_keys("k");
    server.cli(&["LPUSH", &key[0], "x"]);
    for policy in policies() {
        let limiter = resilient(&redis, policy, &ManualClock::new());
        let e = limiter.check("k").await.unwrap_err();
        assert!(matches!(e, Error::WrongType { .. }), "{policy:?}: {e:?}");
        assert!(limiter.is_healthy(), "a wrong type is not an outage");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_is_probed_once_per_backoff_not_per_request() {
    let fake = FakeRedis::start();
    let redis = connect(&fake.url()).await;
    let clock = ManualClock::new();
    let limiter = Arc::new(resilient(&redis, FailPolicy::Open, &clock));
    fake.set_mode(FakeMode::Silent);
    // The first check waits for the timeout, then the policy decides.
    assert_eq!(bounded("a check", limiter.check_traced("k", 1)).await.unwrap().path, Path::FailOpen);
    scripts_seen(&fake, 1, "the first check reached Redis").await;
    // Within the back-off nothing reaches Redis.
    for _ in 0..50 {
        assert_eq!(limiter.check_traced("k", 1).await.unwrap().path, Path::FailOpen);
    }
    assert_eq!(fake.scripts(), 1);
    // After it, one probe among many concurrent checks.
    let expected = [(100, 2), (200, 3), (400, 4), (800, 5), (1_000, 6), (1_000, 7)];
    for (pause_ms, probes) in expected {
        clock.advance(Duration::from_millis(pause_ms - 1));
        assert_eq!(limiter.check_traced("k", 1).await.unwrap().path, Path::FailOpen);
        scripts_seen(&fake, probes - 1, &format!("no probe before the back-off ({pause_ms} ms) is over")).await;
        clock.advance(Duration::from_millis(1));
        let checks: Vec<_> = (0..16)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move { limiter.check_traced("k", 1).await.unwrap().path })
            })
            .collect();
        for check in checks {
            assert_eq!(bounded("a check", check).await.unwrap(), Path::FailOpen);
        }
        scripts_seen(&fake, probes, &format!("one probe after a back-off of {pause_ms} ms")).await;
    }
    // Redis answers again: the next probe brings every check back.
    fake.set_mode(FakeMode::Reply(b"*3\r\n:1\r\n:1700000000000000\r\n:600000\r\n".to_vec()));
    clock.advance(Duration::from_secs(1));
    assert!(recover(&limiter, &clock).await, "the next probe that gets an answer brings the checks back");
    assert!(recover(&limiter, &clock).await);
}

/// A clock that moves on at every reading, as a real one does between two reads.
#[derive(Clone)]
struct Ticking {
    now: Arc<std::sync::atomic::AtomicU64>,
    step: u64,
}

impl weir_rl_core::Clock for Ticking {
    fn now(&self) -> Nanos {
        Nanos::new(self.now.fetch_add(self.step, std::sync::atomic::Ordering::SeqCst))
    }
}

#[tokio::test]
async fn a_tier_fallback_never_admits_past_an_exhausted_quota() {
    // 1 per second and 1 per hour, all or nothing, decided by the fallback with a
    // clock that moves 300 ms at each reading: the per-second quota refills
    // between readings, the per-hour one never does within the test.
    let mut server = RedisServer::start();
    let redis = connect(&server.url()).await;
    let limiter = RedisLimiter::builder(&redis, Quota::per_second(1).unwrap())
        .and_quota(Quota::per_hour(1).unwrap())
        .build()
        .unwrap();
    const T0: u64 = 1_700_000_000_000_000_000;
    let now = Arc::new(std::sync::atomic::AtomicU64::new(T0));
    let clock = Ticking { now: now.clone(), step: 300_000_000 };
    let hours = Duration::from_secs(36_000);
    let fallback = LocalFallback::new(1, 100).unwrap();
    let resilient = Resilient::builder(limiter, FailPolicy::LocalFallback(fallback))
        .backoff(Backoff::new(hours, hours).unwrap())
        .build_with_clock(clock)
        .unwrap();
    server.stop();
    let mut admitted = 0;
    for _ in 0..200 {
        let checked = bounded("a fallback check", resilient.check_traced("k", 1)).await.unwrap();
        assert_ne!(checked.path, Path::Redis);
        admitted += u32::from(checked.decision.is_allowed());
    }
    let elapsed = Duration::from_nanos(now.load(std::sync::atomic::Ordering::SeqCst) - T0);
    assert!(elapsed < Duration::from_secs(3_600), "{elapsed:?}");
    assert_eq!(admitted, 1, "admitted by the fallback in {elapsed:?} under a 1-per-hour quota");
}

fn resilient_open(redis: &Redis, clock: &ManualClock) -> Resilient<ManualClock> {
    let limiter = RedisLimiter::builder(redis, Quota::per_minute(1_000).unwrap()).build().unwrap();
    Resilient::builder(limiter, FailPolicy::Open).backoff(backoff()).build_with_clock(clock.clone()).unwrap()
}

#[tokio::test]
async fn a_redis_busy_with_a_script_is_unavailable_and_the_policy_decides() {
    let server = RedisServer::start();
    server.cli(&["CONFIG", "SET", "busy-reply-threshold", "50"]);
    let redis = patient(&server.url()).await;
    let clock = ManualClock::starting_at(Nanos::new(1_700_000_000_000_000_000));
    let limiter = resilient_open(&redis, &clock);
    assert_eq!(limiter.check_traced("k", 1).await.unwrap().path, Path::Redis);
    let mut busy = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    std::io::Write::write_all(&mut busy, b"EVAL \"while true do end\" 0\r\n").unwrap();
    // Until the script has run past the threshold, a PING answers PONG; after, -BUSY.
    let mut answer = None;
    for _ in 0..100 {
        answer = server.raw_command("PING");
        if answer.as_deref().is_some_and(|a| a.starts_with("-BUSY")) {
            break;
        }
    }
    assert!(answer.as_deref().is_some_and(|a| a.starts_with("-BUSY")), "the server never got busy: {answer:?}");
    let checked = limiter.check_traced("k", 1).await;
    let killed = server.cli(&["SCRIPT", "KILL"]);
    assert!(
        matches!(&checked, Ok(c) if c.path == Path::FailOpen),
        "a BUSY Redis under FailPolicy::Open: {checked:?} (SCRIPT KILL: {killed})"
    );
}

#[tokio::test]
async fn a_redis_out_of_memory_is_unavailable_and_the_policy_decides() {
    let server = RedisServer::start();
    let redis = patient(&server.url()).await;
    let clock = ManualClock::starting_at(Nanos::new(1_700_000_000_000_000_000));
    let limiter = resilient_open(&redis, &clock);
    assert_eq!(limiter.check_traced("k", 1).await.unwrap().path, Path::Redis);
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let checked = limiter.check_traced("k2", 1).await;
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(matches!(&checked, Ok(c) if c.path == Path::FailOpen), "an OOM Redis under FailPolicy::Open: {checked:?}");
}

#[tokio::test]
async fn a_request_that_fits_the_quota_but_not_the_fallback_is_denied_not_an_error() {
    // 10 per minute over 4 instances: the fallback's burst is 2. A request of 5
    // fits the quota, so while Redis is down it is denied until the next probe.
    // A patient connection: the first check must be Redis's (one that timed out
    // would be the fallback's, and denied); after the stop, calls fail at once.
    let mut server = RedisServer::start();
    let redis = patient(&server.url()).await;
    let clock = ManualClock::starting_at(Nanos::new(1_700_000_000_000_000_000));
    let limiter = RedisLimiter::builder(&redis, Quota::per_minute(10).unwrap()).build().unwrap();
    let fallback = LocalFallback::new(4, 100).unwrap();
    let resilient = Resilient::builder(limiter, FailPolicy::LocalFallback(fallback))
        .backoff(backoff())
        .build_with_clock(clock)
        .unwrap();
    let first = bounded("a check", resilient.check_traced("k", 5)).await.unwrap();
    assert_eq!((first.path, first.decision.is_allowed()), (Path::Redis, true), "5 of 10 while Redis is up");
    server.stop();
    let checked = bounded("a fallback check", resilient.check_traced("k2", 5)).await;
    let checked = checked.unwrap_or_else(|e| panic!("5 of a burst of 10 while Redis is down: {e:?}"));
    assert_eq!(checked.path, Path::LocalFallback);
    assert!(checked.decision.is_denied() && checked.decision.is_from_fallback());
    assert_eq!(checked.decision.retry_after(), Some(backoff().initial()), "denied until Redis is probed again");
    // 11 never fits: still the error, as with Redis.
    let never = bounded("a fallback check", resilient.check_traced("k2", 11)).await;
    assert!(matches!(never, Err(Error::InsufficientCapacity(_))), "{never:?}");
}

#[tokio::test]
async fn a_redis_admission_at_clock_reading_zero_is_refunded_through_resilient() {
    // A test clock at 0: a Redis decision stamped 0 is still Redis's, and only
    // decisions marked as the policy's (`is_from_fallback`) skip the refund.
    let server = RedisServer::start();
    let redis = patient(&server.url()).await;
    let clock = ManualClock::new();
    let limiter =
        RedisLimiter::builder(&redis, Quota::per_minute(10).unwrap()).build_with_clock(clock.clone()).unwrap();
    let resilient = Resilient::builder(limiter.clone(), FailPolicy::Closed).build_with_clock(clock.clone()).unwrap();
    let checked = resilient.check_traced("k", 10).await.unwrap();
    assert_eq!((checked.path, checked.decision.is_allowed()), (Path::Redis, true));
    assert!(!checked.decision.is_from_fallback());
    resilient.refund("k", 10, &checked.decision).await.unwrap();
    assert_eq!(limiter.snapshot("k").await.unwrap().remaining(), 10, "the admission of 10 refunded");
}

#[tokio::test]
async fn fail_closed_during_a_probe_says_retry_after_the_backoff() {
    let mut server = RedisServer::start();
    let redis = connect(&server.url()).await;
    let clock = ManualClock::starting_at(Nanos::new(1_700_000_000_000_000_000));
    let limiter = RedisLimiter::builder(&redis, Quota::per_minute(100).unwrap()).build().unwrap();
    let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(8)).unwrap();
    let resilient =
        Resilient::builder(limiter, FailPolicy::Closed).backoff(backoff).build_with_clock(clock.clone()).unwrap();
    server.pause();
    assert_eq!(bounded("a check", resilient.check_traced("k", 1)).await.unwrap().path, Path::FailClosed);
    clock.advance(Duration::from_secs(2));
    // The back-off is over: this check probes the paused server and waits.
    let mut probe = Box::pin(resilient.check_traced("k", 1));
    let polled = std::future::poll_fn(|cx| std::task::Poll::Ready(probe.as_mut().poll(cx))).await;
    assert!(polled.is_pending(), "the probe waits on the paused server");
    let other = resilient.check_traced("k", 1).await.unwrap();
    drop(probe);
    server.resume();
    assert_eq!(other.path, Path::FailClosed);
    assert_eq!(other.decision.retry_after(), Some(Duration::from_secs(1)), "denied during a probe");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_keeps_its_state_across_outages() {
    // 2 per hour, one instance: the fallback's burst is 2, and the few seconds
    // of back-off the test advances refill nothing.
    let mut server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(1_700_000_000_000_000_000));
    let limiter = RedisLimiter::builder(&connect(&server.url()).await, Quota::per_hour(2).unwrap()).build().unwrap();
    let fallback = FailPolicy::LocalFallback(LocalFallback::new(1, 100).unwrap());
    let limiter = Resilient::builder(limiter, fallback).backoff(backoff()).build_with_clock(clock.clone()).unwrap();
    server.stop();
    for _ in 0..2 {
        let checked = bounded("a check", limiter.check_traced("f", 1)).await.unwrap();
        assert_eq!((checked.path, checked.decision.is_allowed()), (Path::LocalFallback, true));
    }
    server.restart();
    clock.advance(Duration::from_secs(2));
    assert!(recover(&limiter, &clock).await, "checks went back to Redis after the restart");
    server.stop();
    clock.advance(Duration::from_secs(2));
    let checked = bounded("a check", limiter.check_traced("f", 1)).await.unwrap();
    assert_eq!(checked.path, Path::LocalFallback);
    assert!(checked.decision.is_denied(), "the share spent in the first outage is still spent");
}
