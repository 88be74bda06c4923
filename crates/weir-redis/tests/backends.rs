//! Every backend against a real redis-server: shared limits, field-by-field
//! agreement with the local crates, tiers, refunds, typed errors, authentication.

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;
use weir_redis::__private::gcra_check_with_expiry;
use weir_redis::{
    Backend, ConfigError, DEFAULT_MAX_KEY_BYTES, DEFAULT_PREFIX, Error, Expiry, FailPolicy, HASHED_KEY_BYTES,
    LeaseConfig, Leased, LocalFallback, LongKeys, Redis, RedisLimiter, Resilient,
};
use weir_rl_core::{AsyncKeyedLimiter, Decision, ManualClock, Nanos, Policy, Quota};

/// A Unix time in ns (2023-11-14), a whole number of hours.
const T0: u64 = 1_699_999_200_000_000_000;

async fn connect(server: &RedisServer) -> Redis {
    Redis::connect_with(&server.url(), support::patient()).await.expect("connect to the test server")
}

fn limiter(redis: &Redis, backend: Backend, quota: Quota, clock: &ManualClock, prefix: &str) -> RedisLimiter {
    RedisLimiter::builder(redis, quota).backend(backend).prefix(prefix).build_with_clock(clock.clone()).unwrap()
}

/// The fixture never hands out another test's server: a port taken between
/// the moment it was found free and the server's start (here: taken by a
/// running server) is refused, not shared: shared, two tests would read and
/// write each other's keys.
#[test]
fn a_server_started_on_a_taken_port_is_refused_not_shared() {
    let first = RedisServer::start();
    let second = RedisServer::try_start_on(first.port());
    assert!(second.is_err(), "a second server on port {} shares the first one", first.port());
    assert_eq!(first.raw_command("PING").as_deref(), Some("+PONG"), "the first server still answers");
}

const BACKENDS: [Backend; 4] = [Backend::Gcra, Backend::FixedWindow, Backend::SlidingWindow, Backend::SlidingLog];

#[tokio::test]
async fn gcra_worked_example() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let limiter = RedisLimiter::builder(&redis, Quota::per_second(10).unwrap().with_burst(20).unwrap())
        .build_with_clock(clock.clone())
        .unwrap();
    let d = limiter.check_n("alice", 20).await.unwrap();
    assert!(d.is_allowed() && d.remaining() == 0, "{d:?}");
    assert_eq!(d.decided_at(), Nanos::new(T0));
    clock.advance(Duration::from_secs(2));
    let mut admitted = 0;
    for _ in 0..15 {
        admitted += usize::from(limiter.check("alice").await.unwrap().is_allowed());
    }
    assert_eq!((admitted, limiter.snapshot("alice").await.unwrap().remaining()), (15, 5));
    let denied = limiter.check_n("alice", 6).await.unwrap();
    assert_eq!(denied.retry_after(), Some(Duration::from_millis(100)));
    assert_eq!(limiter.snapshot("alice").await.unwrap().remaining(), 5, "a denial consumes nothing");
    assert!(limiter.check_n("bob", 20).await.unwrap().is_allowed(), "another key is not affected");
    assert!(matches!(
        limiter.check_n("alice", 21).await,
        Err(Error::InsufficientCapacity(e)) if e.requested == 21 && e.capacity == 20
    ));
}

#[tokio::test]
async fn server_time_decides_by_default_and_idle_keys_expire() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let limiter = RedisLimiter::builder(&redis, Quota::per_second(1_000).unwrap()).prefix("t:").build().unwrap();
    let d = limiter.check_n("k", 10).await.unwrap();
    assert!(d.is_allowed());
    let now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let skew = now_ns.abs_diff(d.decided_at().as_u64());
    assert!(skew < 60_000_000_000, "decided at the server's Unix time: {:?}", d.decided_at());
    // The key lives exactly as long as the state is not full: 60 s for 10 at
    // 10 per minute, then 2 min once 10 more are taken at once. Its expiry is
    // read in the check's own transaction between two readings of Redis's time,
    // so the TTL the script set is checked exactly, whatever time the test and
    // the processes around it take.
    assert_eq!(limiter.expiry(), Expiry::WhenIdle);
    let slow = RedisLimiter::builder(&redis, Quota::per_minute(10).unwrap().with_burst(20).unwrap())
        .prefix("t:")
        .build()
        .unwrap();
    for round in 0..2 {
        let (d, expiries, (before, after)) = gcra_check_with_expiry(&slow, "j", 10).await.unwrap();
        assert!(d.is_allowed());
        // The TTL the script set: the time until the bucket is full, from the reply.
        let ttl = d.reset_after().as_micros().div_ceil(1_000) as i64;
        assert!(if round == 0 { ttl == 60_000 } else { ttl <= 120_000 }, "{d:?}");
        let (from, to) = (before as i64 + ttl, after as i64 + ttl);
        assert!((from..=to).contains(&expiries[0]), "expires at {expiries:?}, not in {from}..={to}");
    }
    // A denial (and a peek) writes nothing: no key appears.
    let big = RedisLimiter::builder(&redis, Quota::per_hour(1).unwrap()).prefix("t2:").build().unwrap();
    assert!(big.check("x").await.unwrap().is_allowed());
    assert!(big.check("x").await.unwrap().is_denied());
    let _ = big.snapshot("y").await.unwrap();
    assert_eq!(server.cli(&["EXISTS", &big.redis_keys("y")[0]]).trim(), "0");
}

#[tokio::test]
async fn with_a_test_clock_state_never_expires_in_real_time() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    // 10/s burst 1 on a clock that stands still: the second request is denied,
    // and stays denied however much real time passes, because Redis never
    // expires the state (its TTL would run in real time, not on this clock).
    let clock = ManualClock::starting_at(Nanos::new(T0));
    for backend in BACKENDS {
        let quota = if backend == Backend::Gcra {
            Quota::per_second(10).unwrap().with_burst(1).unwrap()
        } else {
            Quota::per_second(1).unwrap()
        };
        let limiter = limiter(&redis, backend, quota, &clock, "frozen:");
        assert!(limiter.check("k").await.unwrap().is_allowed(), "{backend:?}");
        assert!(limiter.check("k").await.unwrap().is_denied(), "{backend:?}");
        for key in limiter.redis_keys("k") {
            assert_eq!(server.cli(&["PTTL", &key]).trim(), "-1", "{backend:?}: {key} expires in real time");
        }
        assert_eq!(limiter.expiry(), Expiry::Never);
    }
    // A fleet on client clocks asks for expiry: the TTL is the time until the
    // state is empty, here 60 s.
    let fleet = RedisLimiter::builder(&redis, Quota::per_minute(1).unwrap())
        .prefix("fleet:")
        .expiry(Expiry::WhenIdle)
        .build_with_clock(clock.clone())
        .unwrap();
    let (d, expiries, (before, after)) = gcra_check_with_expiry(&fleet, "k", 1).await.unwrap();
    assert!(d.is_allowed());
    let (from, to) = (before as i64 + 60_000, after as i64 + 60_000);
    assert!((from..=to).contains(&expiries[0]), "expires at {expiries:?}, not in {from}..={to}");
    // And a server-time limiter can keep its keys.
    let kept = RedisLimiter::builder(&redis, Quota::per_second(10).unwrap())
        .prefix("kept:")
        .expiry(Expiry::Never)
        .build()
        .unwrap();
    assert_eq!(gcra_check_with_expiry(&kept, "k", 1).await.unwrap().1, [-1]);
}

/// A deterministic request sequence: (advance in µs, cost).
fn sequence(seed: u64, len: usize, max_step_us: u64, max_n: u64) -> Vec<(u64, u64)> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        state >> 33
    };
    (0..len).map(|_| (next() % (max_step_us + 1), next() % max_n + 1)).collect()
}

/// `retry_after` rounded up to a whole µs: the resolution of the Redis backends.
fn to_micros(d: &Decision) -> Option<u128> {
    d.retry_after().map(|r| r.as_nanos().div_ceil(1_000))
}

async fn agree(
    name: &str,
    local: impl Fn(u64) -> Decision,
    remote: &RedisLimiter,
    clock: &ManualClock,
    steps: &[(u64, u64)],
) {
    let mut denied = 0;
    for (i, &(advance, n)) in steps.iter().enumerate() {
        clock.advance(Duration::from_micros(advance));
        let expected = local(n);
        denied += usize::from(expected.is_denied());
        let got = remote.check_n("client", n).await.unwrap();
        let same = expected.is_allowed() == got.is_allowed()
            && expected.snapshot() == got.snapshot()
            && to_micros(&expected) == to_micros(&got);
        assert!(same, "{name}, step {i} (n = {n}): local {expected:?}, Redis {got:?}");
    }
    assert!(denied > steps.len() / 10 && denied < steps.len() * 9 / 10, "{name}: {denied} denials is no test");
}

#[tokio::test]
async fn decisions_match_the_local_crates_field_by_field() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    // Quotas whose emission interval is a whole number of microseconds.
    let gcra_quotas = [
        Quota::per_second(10).unwrap().with_burst(20).unwrap(),
        Quota::per_minute(100).unwrap(),
        Quota::new(40, Duration::from_millis(1_000)).unwrap().with_burst(7).unwrap(),
    ];
    for (q, quota) in gcra_quotas.into_iter().enumerate() {
        let clock = ManualClock::starting_at(Nanos::new(T0));
        let local = weir_gcra::Gcra::with_clock(quota, clock.clone());
        let remote = limiter(&redis, Backend::Gcra, quota, &clock, &format!("g{q}:"));
        let period_us = quota.period().as_micros() as u64;
        let steps = sequence(q as u64 + 1, 300, period_us / quota.count() * 2, quota.burst().min(5));
        agree(&format!("GCRA {quota}"), |n| local.check_n(n).unwrap(), &remote, &clock, &steps).await;
    }
    let window_quotas = [Quota::per_second(10).unwrap(), Quota::per_minute(50).unwrap()];
    for (q, quota) in window_quotas.into_iter().enumerate() {
        let period_us = quota.period().as_micros() as u64;
        let steps = sequence(q as u64 + 7, 300, period_us / quota.count() * 2, 4);
        let clock = ManualClock::starting_at(Nanos::new(T0));
        let local = weir_window::FixedWindow::with_clock(quota, clock.clone()).unwrap();
        let remote = limiter(&redis, Backend::FixedWindow, quota, &clock, &format!("f{q}:"));
        agree(&format!("fixed {quota}"), |n| local.check_n(n).unwrap(), &remote, &clock, &steps).await;

        let clock = ManualClock::starting_at(Nanos::new(T0));
        let local = weir_window::SlidingWindow::with_clock(quota, clock.clone()).unwrap();
        let remote = limiter(&redis, Backend::SlidingWindow, quota, &clock, &format!("s{q}:"));
        agree(&format!("sliding {quota}"), |n| local.check_n(n).unwrap(), &remote, &clock, &steps).await;

        let clock = ManualClock::starting_at(Nanos::new(T0));
        let local = weir_window::SlidingLog::with_clock(quota, clock.clone()).unwrap();
        let remote = limiter(&redis, Backend::SlidingLog, quota, &clock, &format!("l{q}:"));
        agree(&format!("log {quota}"), |n| local.check_n(n).unwrap(), &remote, &clock, &steps).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_on_one_key_share_exactly_the_limit() {
    let server = RedisServer::start();
    let quota = Quota::per_minute(50).unwrap();
    for backend in BACKENDS {
        let clock = ManualClock::starting_at(Nanos::new(T0 + 17_000_000_000)); // frozen
        let mut tasks = Vec::new();
        for _client in 0..4 {
            // Each client is its own instance: its own connection.
            let limiter = Arc::new(limiter(&connect(&server).await, backend, quota, &clock, "weir:"));
            for _task in 0..8 {
                let limiter = limiter.clone();
                tasks.push(tokio::spawn(async move {
                    let mut admitted = 0u64;
                    for _ in 0..10 {
                        admitted += u64::from(limiter.check("shared").await.unwrap().is_allowed());
                    }
                    admitted
                }));
            }
        }
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.unwrap();
        }
        assert_eq!(admitted, 50, "{backend:?}: 320 requests at one instant over 4 clients");
    }
}

#[tokio::test]
async fn a_tier_is_all_or_nothing_and_names_the_deciding_quota() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let burst = Quota::per_second(2).unwrap().with_burst(5).unwrap();
    let minute = Quota::per_minute(20).unwrap();
    let day = Quota::per_day(30).unwrap();
    let tier =
        RedisLimiter::builder(&redis, burst).and_quota(minute).and_quota(day).build_with_clock(clock.clone()).unwrap();
    assert_eq!(
        tier.policies(),
        &[Policy::of(&burst), Policy::new(20, Duration::from_secs(60)), Policy::new(30, Duration::from_secs(86_400))]
    );
    let d = tier.check_n("u", 5).await.unwrap();
    assert!(d.is_allowed());
    assert_eq!((d.policy_index(), d.remaining()), (0, 0), "the burst quota has the least left");
    let denied = tier.check("u").await.unwrap();
    assert!(denied.is_denied());
    assert_eq!((denied.policy_index(), denied.retry_after()), (0, Some(Duration::from_millis(500))));
    // Nothing was taken from the minute or the day by the denial.
    let keys = tier.redis_keys("u");
    let tier_name = "2/1sb5,20/1m,30/1d";
    assert_eq!(keys, [0, 1, 2].map(|i| format!("weir:{{u}}:g:{tier_name}:{i}")));
    clock.advance(Duration::from_secs(3)); // the burst refills 6 > 5
    let d = tier.check_n("u", 5).await.unwrap();
    assert!(d.is_allowed(), "{d:?}");
    assert_eq!((d.policy_index(), d.remaining()), (0, 0));
    clock.advance(Duration::from_secs(3));
    let d = tier.check_n("u", 5).await.unwrap();
    assert_eq!((d.is_allowed(), d.policy_index()), (true, 0));
    clock.advance(Duration::from_secs(3));
    // 15 of the minute's 20 are used (plus 3 refilled over 9 s): 5 more fit.
    let d = tier.check_n("u", 5).await.unwrap();
    assert!(d.is_allowed(), "{d:?}");
    clock.advance(Duration::from_secs(3));
    // The minute has 20 − 20 + 4 refilled (12 s at one per 3 s) = 4 left: 5 is denied by it.
    let d = tier.check_n("u", 5).await.unwrap();
    assert!(d.is_denied(), "{d:?}");
    assert_eq!(d.policy_index(), 1, "the minute decides: {d:?}");
    assert_eq!(d.retry_after(), Some(Duration::from_secs(3)));
    let burst_left = tier.check_n("u", 0).await.unwrap();
    assert!(burst_left.is_allowed());
    // Refund gives back to every quota.
    let admitted = tier.check_n("u", 4).await.unwrap();
    assert!(admitted.is_allowed(), "{admitted:?}");
    tier.refund("u", 4, &admitted).await.unwrap();
    assert!(tier.check_n("u", 4).await.unwrap().is_allowed());
    let nine = (0..8).fold(RedisLimiter::builder(&redis, minute), |b, _| b.and_quota(day));
    assert!(matches!(nine.build(), Err(ConfigError::TierSize { quotas: 9 })));
    let e = RedisLimiter::builder(&redis, minute).and_quota(day).backend(Backend::SlidingLog).build().unwrap_err();
    assert_eq!(e, ConfigError::TierNeedsGcra { backend: Backend::SlidingLog });
    assert!(e.to_string().starts_with("and_quota: "), "{e}");
}

#[tokio::test]
async fn refunds_give_back_to_the_window_the_admission_was_counted_in() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let quota = Quota::per_minute(10).unwrap();
    for backend in BACKENDS {
        let clock = ManualClock::starting_at(Nanos::new(T0 + 50_000_000_000)); // 50 s into a minute
        let limiter = limiter(&redis, backend, quota, &clock, &format!("{backend:?}:"));
        let admission = limiter.check_n("k", 6).await.unwrap();
        assert!(admission.is_allowed());
        limiter.refund("k", 2, &admission).await.unwrap();
        assert_eq!(limiter.snapshot("k").await.unwrap().remaining(), 6, "{backend:?}");
        limiter.refund("k", 10, &admission).await.unwrap();
        assert_eq!(limiter.snapshot("k").await.unwrap().remaining(), 10, "{backend:?}: never beyond empty");
        // An admission in one window, a refund after the next window began.
        let admission = limiter.check_n("k", 10).await.unwrap();
        assert!(admission.is_allowed(), "{backend:?}");
        clock.advance(Duration::from_secs(15));
        let before = limiter.snapshot("k").await.unwrap();
        limiter.refund("k", 10, &admission).await.unwrap();
        let after = limiter.snapshot("k").await.unwrap();
        match backend {
            // The fixed window has moved on: the refund no longer counts.
            Backend::FixedWindow => assert_eq!((before.remaining(), after.remaining()), (10, 10)),
            // The previous window still weighs 55/60: the refund comes off it.
            Backend::SlidingWindow => assert_eq!((before.remaining(), after.remaining()), (0, 10)),
            // The entries are still in the log.
            Backend::SlidingLog => assert_eq!((before.remaining(), after.remaining()), (0, 10)),
            // The bucket refilled 2.5 of 10.
            _ => assert_eq!((before.remaining(), after.remaining()), (2, 10)),
        }
    }
}

#[tokio::test]
async fn a_gcra_refund_gives_back_only_what_the_admission_still_holds_as_weir_gcra_does() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let quota = Quota::per_second(10).unwrap();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let limiter = limiter(&redis, Backend::Gcra, quota, &clock, "refund:");
    let local = weir_gcra::Gcra::with_clock(quota, clock.clone());
    // 10 at t = 0, 10 at t = 1 s, then the first 10 refunded: the second
    // second's refill already paid their debt, so nothing comes back, and the
    // next 10 at t = 1 s are denied (20 at one instant on a burst of 10 else).
    let first = limiter.check_n("k", 10).await.unwrap();
    let local_first = local.check_n(10).unwrap();
    assert!(first.is_allowed() && local_first.is_allowed());
    clock.advance(Duration::from_secs(1));
    assert!(limiter.check_n("k", 10).await.unwrap().is_allowed());
    assert!(local.check_n(10).unwrap().is_allowed());
    limiter.refund("k", 10, &first).await.unwrap();
    local.refund(10, &local_first).unwrap();
    assert_eq!(limiter.snapshot("k").await.unwrap().remaining(), local.snapshot().remaining());
    assert_eq!(limiter.snapshot("k").await.unwrap().remaining(), 0);
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += usize::from(limiter.check("k").await.unwrap().is_allowed());
    }
    assert_eq!(admitted, 0, "capacity a later admission took is not given back");
    // Part of it: 4 then 6 at one instant, 200 ms later the 4 refunded: 200 ms
    // of their 400 ms of debt is left to give back (2 units).
    clock.advance(Duration::from_secs(5));
    let four = limiter.check_n("j", 4).await.unwrap();
    assert!(limiter.check_n("j", 6).await.unwrap().is_allowed());
    clock.advance(Duration::from_millis(200));
    assert_eq!(limiter.snapshot("j").await.unwrap().remaining(), 2);
    limiter.refund("j", 4, &four).await.unwrap();
    assert_eq!(limiter.snapshot("j").await.unwrap().remaining(), 4);
    // At the instant of the admission, all of it comes back.
    let five = limiter.check_n("i", 5).await.unwrap();
    limiter.refund("i", 5, &five).await.unwrap();
    assert_eq!(limiter.snapshot("i").await.unwrap().remaining(), 10);
    // The same refunds on weir-gcra's limiter, decision for decision.
    let local = weir_gcra::Gcra::with_clock(quota, clock.clone());
    let four = local.check_n(4).unwrap();
    assert!(local.check_n(6).unwrap().is_allowed());
    clock.advance(Duration::from_millis(200));
    local.refund(4, &four).unwrap();
    assert_eq!(local.snapshot().remaining(), 4);
}

#[tokio::test]
async fn a_wrong_type_or_unreadable_key_is_a_typed_error_and_admits_nothing() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    for backend in BACKENDS {
        let limiter = limiter(&redis, backend, Quota::per_minute(10).unwrap(), &clock, "weir:");
        let key = &limiter.redis_keys("victim")[0];
        server.cli(&["DEL", key]);
        server.cli(&["HSET", key, "field", "1"]);
        let e = limiter.check("victim").await.unwrap_err();
        assert!(matches!(e, Error::WrongType { .. }), "{backend:?}: {e:?}");
        assert!(e.to_string().contains("key prefix"), "{e}");
        assert!(!e.is_unavailable());
        if backend != Backend::SlidingLog {
            server.cli(&["DEL", key]);
            server.cli(&["SET", key, "not a state"]);
            let e = limiter.check("victim").await.unwrap_err();
            assert!(matches!(e, Error::CorruptState { .. }), "{backend:?}: {e:?}");
            assert_eq!(server.cli(&["GET", key]).trim(), "not a state", "nothing written");
        }
        server.cli(&["DEL", key]);
    }
}

#[tokio::test]
async fn keys_carry_the_client_as_a_hash_tag() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let limiter = RedisLimiter::builder(&redis, Quota::per_minute(10).unwrap()).build().unwrap();
    assert_eq!(limiter.redis_keys("a}b{c%"), ["weir:{a%7Db%7Bc%25}:g:10/1m:0"]);
    assert_eq!(limiter.redis_keys(&b"\xff"[..]), ["weir:{%FF}:g:10/1m:0"]);
    // The empty key has a non-empty tag (`{}` is none for Redis Cluster), apart from `%`'s.
    assert_eq!(limiter.redis_keys(""), ["weir:{%}:g:10/1m:0"]);
    assert_eq!(limiter.redis_keys("%"), ["weir:{%25}:g:10/1m:0"]);
    let e = RedisLimiter::builder(&redis, Quota::per_minute(10).unwrap()).prefix("x{").build().unwrap_err();
    assert!(matches!(e, ConfigError::BraceInPrefix { .. }), "{e}");
    assert!(e.to_string().starts_with("prefix: "), "{e}");
    // Keys with braces work and do not collide with their encoded spelling.
    assert!(limiter.check_n("a}b", 10).await.unwrap().is_allowed());
    assert!(limiter.check_n("a%7Db", 10).await.unwrap().is_allowed());
}

#[tokio::test]
async fn limiters_of_different_quotas_or_backends_never_share_a_key() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    // Two limits on one Redis with the default prefix: a per-minute API limit and
    // a per-second one, and windows of different limits.
    let minute =
        RedisLimiter::builder(&redis, Quota::per_minute(100).unwrap()).build_with_clock(clock.clone()).unwrap();
    let second = RedisLimiter::builder(&redis, Quota::per_second(1).unwrap()).build_with_clock(clock.clone()).unwrap();
    assert!(minute.check_n("k", 100).await.unwrap().is_allowed());
    assert!(second.check("k").await.unwrap().is_allowed(), "the per-second limit has its own state");
    assert_eq!(minute.snapshot("k").await.unwrap().remaining(), 0);
    let burst = RedisLimiter::builder(&redis, Quota::per_minute(100).unwrap().with_burst(150).unwrap())
        .build_with_clock(clock.clone())
        .unwrap();
    assert_eq!(burst.snapshot("k").await.unwrap().remaining(), 150, "another burst, another state");
    let tier = RedisLimiter::builder(&redis, Quota::per_minute(100).unwrap())
        .and_quota(Quota::per_day(1_000).unwrap())
        .build_with_clock(clock.clone())
        .unwrap();
    assert_eq!(tier.snapshot("k").await.unwrap().remaining(), 100, "a tier is a limiter of its own");
    for backend in [Backend::FixedWindow, Backend::SlidingWindow, Backend::SlidingLog] {
        let ten = limiter(&redis, backend, Quota::per_minute(10).unwrap(), &clock, DEFAULT_PREFIX);
        let five = limiter(&redis, backend, Quota::per_minute(5).unwrap(), &clock, DEFAULT_PREFIX);
        assert!(ten.check_n("k", 10).await.unwrap().is_allowed(), "{backend:?}");
        assert_eq!(five.snapshot("k").await.unwrap().remaining(), 5, "{backend:?}");
    }
    let mut names = std::collections::HashSet::new();
    for limiter in [&minute, &second, &burst, &tier] {
        for name in limiter.redis_keys("k") {
            assert!(names.insert(name.clone()), "{name} is used twice");
        }
    }
    // The layout: the backend and the quotas after the client's hash tag.
    assert_eq!(minute.redis_keys("k"), ["weir:{k}:g:100/1m:0"]);
    assert_eq!(burst.redis_keys("k"), ["weir:{k}:g:100/1mb150:0"]);
    assert_eq!(tier.redis_keys("k"), ["weir:{k}:g:100/1m,1000/1d:0", "weir:{k}:g:100/1m,1000/1d:1"]);
    let window = limiter(&redis, Backend::SlidingWindow, Quota::per_second(10).unwrap(), &clock, "rl:");
    assert_eq!(window.redis_keys("k"), ["rl:{k}:sw:10/1s"]);
    let odd = RedisLimiter::builder(&redis, Quota::new(7, Duration::from_micros(1_500)).unwrap()).build().unwrap();
    assert_eq!(odd.redis_keys("k"), ["weir:{k}:g:7/1500us:0"]);
}

#[tokio::test]
async fn a_long_key_costs_a_bounded_name_the_same_on_every_instance_or_is_refused() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let quota = Quota::per_minute(10).unwrap();
    // Two instances, each with its own connection and limiter.
    let (one, two) = (connect(&server).await, connect(&server).await);
    let first = RedisLimiter::builder(&one, quota).build_with_clock(clock.clone()).unwrap();
    let second = RedisLimiter::builder(&two, quota).build_with_clock(clock.clone()).unwrap();
    assert_eq!(first.max_key_bytes(), DEFAULT_MAX_KEY_BYTES);
    // A 1 MB key that is not UTF-8 (3 MB percent-encoded).
    let huge = vec![0xffu8; 1 << 20];
    let names = first.redis_keys(&huge[..]);
    let bound = DEFAULT_PREFIX.len() + 2 + HASHED_KEY_BYTES + ":g:10/1m:0".len();
    assert!(names[0].len() <= bound, "a name of {} bytes for a 1 MB key", names[0].len());
    assert_eq!(names, second.redis_keys(&huge[..]), "every instance names it alike");
    assert!(first.check_n(&huge[..], 6).await.unwrap().is_allowed());
    assert_eq!(second.snapshot(&huge[..]).await.unwrap().remaining(), 4, "the instances share its state");
    let mut other = huge.clone();
    other[12_345] = 0;
    assert_ne!(first.redis_keys(&other[..]), names);
    assert_eq!(first.snapshot(&other[..]).await.unwrap().remaining(), 10, "another long key, another state");
    // A key of the bound is kept as it is; one byte more is hashed.
    let at = vec![b'a'; DEFAULT_MAX_KEY_BYTES];
    assert_eq!(first.redis_keys(&at[..])[0], format!("weir:{{{}}}:g:10/1m:0", "a".repeat(DEFAULT_MAX_KEY_BYTES)));
    let over = vec![b'a'; DEFAULT_MAX_KEY_BYTES + 1];
    assert!(first.redis_keys(&over[..])[0].len() <= bound);
    // A short key that spells a hashed one does not collide with it.
    let hashed = &names[0][DEFAULT_PREFIX.len() + 1..DEFAULT_PREFIX.len() + 1 + HASHED_KEY_BYTES];
    assert_ne!(first.redis_keys(hashed), names);
    // Refused as configured: a typed error, before any round trip.
    let strict = RedisLimiter::builder(&one, quota)
        .max_key_bytes(64)
        .long_keys(LongKeys::Refuse)
        .build_with_clock(clock.clone())
        .unwrap();
    let e = strict.check(&huge[..]).await.unwrap_err();
    assert!(matches!(e, Error::KeyTooLong { len, max: 64 } if len == 1 << 20), "{e:?}");
    assert!(!e.is_unavailable());
    assert!(e.to_string().contains("max_key_bytes"), "{e}");
    assert!(strict.redis_keys(&huge[..]).is_empty(), "a refused key has no Redis keys");
    assert!(strict.check(&[b'k'; 64][..]).await.unwrap().is_allowed());
    // A lease table and a local fallback store keep the name, not the key.
    let leased = Leased::with_clock(first.clone(), LeaseConfig::default(), clock.clone()).unwrap();
    assert!(leased.check(&huge[..]).await.unwrap().is_allowed());
    assert_eq!(weir_redis::__private::lease_table_key_bytes(&leased), HASHED_KEY_BYTES);
    let fallback = FailPolicy::LocalFallback(LocalFallback::new(1, 10).unwrap());
    let resilient = Resilient::builder(strict.clone(), fallback).build_with_clock(clock.clone()).unwrap();
    assert!(matches!(resilient.check(&huge[..]).await, Err(Error::KeyTooLong { .. })));
    let e = RedisLimiter::builder(&one, quota).max_key_bytes(0).build().unwrap_err();
    assert_eq!(e, ConfigError::Zero { what: "max_key_bytes" });
}

#[tokio::test]
async fn the_async_keyed_trait_is_the_whole_interface() {
    async fn admit<S: AsyncKeyedLimiter<str>>(store: &S, key: &str) -> Result<bool, S::Error> {
        Ok(store.check_n(key, 1).await?.is_allowed())
    }
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let limiter = RedisLimiter::builder(&redis, Quota::per_minute(1).unwrap()).build().unwrap();
    assert!(admit(&limiter, "k").await.unwrap());
    assert!(!admit(&limiter, "k").await.unwrap());
    assert_eq!(AsyncKeyedLimiter::<str>::policies(&limiter), &[Policy::new(1, Duration::from_secs(60))]);
}

#[tokio::test]
async fn a_password_is_checked_at_connection() {
    let server = RedisServer::start_with_password("s3cret-pw");
    let ok = Redis::connect_with(&server.url(), support::patient()).await.expect("the right password");
    assert!(
        RedisLimiter::builder(&ok, Quota::per_minute(1).unwrap())
            .build()
            .unwrap()
            .check("k")
            .await
            .unwrap()
            .is_allowed()
    );
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port());
    let e = Redis::connect(&url).await.unwrap_err();
    assert!(matches!(e, Error::Auth(_)), "a wrong password is an authentication error: {e:?}");
    let url = format!("redis://127.0.0.1:{}", server.port());
    let e = Redis::connect(&url).await.unwrap_err();
    assert!(matches!(e, Error::Auth(_)), "no password is an authentication error: {e:?}");
    let e = Redis::connect("redis://:pw@[bad").await.unwrap_err();
    assert!(matches!(e, Error::Config(_)) && !e.to_string().contains("pw"), "{e}");
    // An ACL user with a database number.
    server.cli(&["ACL", "SETUSER", "limiter", "on", ">user-pw", "~*", "+@all"]);
    let url = format!("redis://limiter:user-pw@127.0.0.1:{}/3", server.port());
    let user = Redis::connect_with(&url, support::patient()).await.expect("an ACL user");
    assert!(
        RedisLimiter::builder(&user, Quota::per_minute(1).unwrap())
            .build()
            .unwrap()
            .check("k")
            .await
            .unwrap()
            .is_allowed()
    );
    assert_eq!(server.cli(&["-n", "3", "EXISTS", "weir:{k}:g:1/1m:0"]).trim(), "1", "database 3");
}
