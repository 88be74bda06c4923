//! Token leases against a real redis-server: exact at a frozen time, the documented
//! overshoot bound over time with several clients, fewer round trips.

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;
use weir_redis::{Backend, ConfigError, LeaseConfig, Leased, Redis, RedisLimiter};
use weir_rl_core::{ManualClock, Nanos, Quota};

const T0: u64 = 1_700_000_000_000_000_000;

async fn client(server: &RedisServer, quota: Quota, config: LeaseConfig, clock: &ManualClock) -> Leased<ManualClock> {
    // Each client is an instance of its own: its own connection and leases.
    let redis = Redis::connect_with(&server.url(), support::patient()).await.unwrap();
    let limiter = RedisLimiter::builder(&redis, quota).build_with_clock(clock.clone()).unwrap();
    Leased::with_clock(limiter, config, clock.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_frozen_time_leased_clients_admit_exactly_the_burst() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let quota = Quota::per_minute(100).unwrap();
    let config = LeaseConfig::builder().max_lease(16).instances(4).build().unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = Arc::new(client(&server, quota, config, &clock).await);
        for _ in 0..4 {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..100 {
                    admitted += u64::from(client.check("hot").await.unwrap().is_allowed());
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert_eq!(admitted, 100, "1 600 requests at one instant over 4 leased clients");
}

#[tokio::test]
async fn over_time_the_overshoot_stays_within_the_documented_bound() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    // r = 100/s, B = 50; N = 4 clients, L = 10, lifetime = 200 ms: bound = min(40, 20) = 20.
    let quota = Quota::per_second(100).unwrap().with_burst(50).unwrap();
    let (n, max_lease, lifetime) = (4u64, 10u64, Duration::from_millis(200));
    let config = LeaseConfig::builder().max_lease(max_lease).instances(n as u32).lifetime(lifetime).build().unwrap();
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(client(&server, quota, config, &clock).await);
    }
    // Cycles of 1 s: 600 ms quiet (the bucket refills), a request from each client at
    // 600 ms and at 620 ms (the second takes a lease sized to the full bucket's
    // headroom, and holds it), quiet again while the bucket refills behind the held
    // permits, then 200 ms of overload (every client asks every millisecond), when
    // the held permits are spent on top of what the bucket gives.
    let mut admitted_at = Vec::new();
    for ms in 0..3_000u64 {
        let phase = ms % 1_000;
        let ask = phase >= 800 || phase == 600 || phase == 620;
        for c in &clients {
            if ask && c.check("k").await.unwrap().is_allowed() {
                admitted_at.push(ms);
            }
        }
        clock.advance(Duration::from_millis(1));
    }
    let (burst, rate_per_ms) = (50.0, 0.1);
    let bound = (n * max_lease).min(100 * lifetime.as_millis() as u64 / 1_000) as f64;
    let mut worst: f64 = f64::MIN;
    for (i, &start) in admitted_at.iter().enumerate() {
        for (j, &end) in admitted_at.iter().enumerate().skip(i) {
            let count = (j - i + 1) as f64;
            let overshoot = count - (burst + rate_per_ms * (end - start) as f64);
            worst = worst.max(overshoot);
        }
    }
    assert!(worst <= bound, "overshoot {worst} above the bound {bound}");
    assert!(worst > 0.0, "this load shows the overshoot leases allow (else the test proves nothing)");
    // Over the whole run, no more than the exact limiter could admit.
    let span = (admitted_at.last().unwrap() - admitted_at[0]) as f64;
    assert!(admitted_at.len() as f64 <= burst + rate_per_ms * span + 1.0, "{} admitted", admitted_at.len());
    println!("admitted {}, worst overshoot {worst:.1} (bound {bound})", admitted_at.len());
}

#[tokio::test]
async fn leases_cut_round_trips_for_keys_below_their_limit() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let quota = Quota::per_second(10_000).unwrap();
    let config = LeaseConfig::builder().max_lease(50).instances(2).build().unwrap();
    let clients = [client(&server, quota, config, &clock).await, client(&server, quota, config, &clock).await];
    for _ in 0..500 {
        for c in &clients {
            assert!(c.check("tenant").await.unwrap().is_allowed());
        }
        clock.advance(Duration::from_millis(1)); // 2 000/s: a fifth of the quota
    }
    for c in &clients {
        let (decisions, trips) = (c.decisions(), c.round_trips());
        assert_eq!(decisions, 500);
        assert!(trips * 10 <= decisions, "{trips} round trips for {decisions} decisions");
    }
    // A refund goes back into the lease, and peeks ask Redis.
    let d = clients[0].check_n("tenant", 5).await.unwrap();
    clients[0].refund("tenant", 5, &d).await.unwrap();
    assert!(clients[0].snapshot("tenant").await.unwrap().remaining() > 0);
}

#[tokio::test]
async fn leases_need_a_single_gcra_quota() {
    let server = RedisServer::start();
    let redis = Redis::connect_with(&server.url(), support::patient()).await.unwrap();
    let tier = RedisLimiter::builder(&redis, Quota::per_second(1).unwrap())
        .and_quota(Quota::per_day(9).unwrap())
        .build()
        .unwrap();
    assert!(matches!(Leased::new(tier, LeaseConfig::default()), Err(ConfigError::LeaseNeedsGcra)));
    let window =
        RedisLimiter::builder(&redis, Quota::per_second(5).unwrap()).backend(Backend::FixedWindow).build().unwrap();
    assert!(matches!(Leased::new(window, LeaseConfig::default()), Err(ConfigError::LeaseNeedsGcra)));
}

#[test]
fn lease_options_are_checked_by_build_which_names_the_option() {
    let config = LeaseConfig::builder().build().unwrap();
    assert_eq!(config, LeaseConfig::default());
    assert_eq!((config.max_lease(), config.instances(), config.max_keys()), (64, 1, 10_000));
    assert_eq!(config.lifetime(), Duration::from_secs(1));
    assert_eq!(LeaseConfig::builder().max_lease(0).build(), Err(ConfigError::Zero { what: "max_lease" }));
    assert_eq!(LeaseConfig::builder().instances(0).build(), Err(ConfigError::Zero { what: "instances" }));
    // Setters never fail: the last value given counts.
    assert!(LeaseConfig::builder().instances(0).instances(3).build().is_ok());
}

#[tokio::test]
async fn concurrent_tasks_share_one_renewal_instead_of_each_asking_redis() {
    let server = RedisServer::start();
    let redis = Redis::connect_with(&server.url(), support::patient()).await.unwrap();
    let limiter = RedisLimiter::builder(&redis, Quota::per_second(1_000_000).unwrap()).build().unwrap();
    let leased = Arc::new(Leased::new(limiter, LeaseConfig::builder().max_lease(64).build().unwrap()).unwrap());
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let leased = leased.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    assert!(leased.check("hot").await.unwrap().is_allowed());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let (decisions, trips) = (leased.decisions(), leased.round_trips());
    assert_eq!(decisions, 6_400);
    assert!(trips * 10 <= decisions, "{trips} round trips for {decisions} decisions from 64 tasks");
}

#[tokio::test]
async fn a_refund_never_lifts_admissions_at_one_instant_above_the_bound() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    // r = 10/s, B = 10, N = 1, L = 10, lifetime 100 ms: at one instant (τ = 0) at
    // most B + min(N·L, r·lifetime) = 10 + min(10, 1) = 11.
    let quota = Quota::per_second(10).unwrap();
    let config = LeaseConfig::builder().max_lease(10).lifetime(Duration::from_millis(100)).build().unwrap();
    let leased = client(&server, quota, config, &clock).await;
    let (burst, n, max_lease, rate_per_s, lifetime_ms) = (10u64, 1u64, 10u64, 10u64, 100u64);
    let bound = burst + (n * max_lease).min(rate_per_s * lifetime_ms / 1_000);
    let mut early = Vec::new();
    for _ in 0..10 {
        let d = leased.check("k").await.unwrap();
        assert!(d.is_allowed());
        early.push(d);
    }
    // A second later, the bucket is full again: a lease is taken, then the early
    // admissions are refunded (their debt is paid by the refill), then the
    // instant's requests go on until denied.
    clock.advance(Duration::from_secs(1));
    let mut admitted = 0u64;
    for _ in 0..2 {
        admitted += u64::from(leased.check("k").await.unwrap().is_allowed());
    }
    for d in &early {
        leased.refund("k", 1, d).await.unwrap();
    }
    for _ in 0..40 {
        admitted += u64::from(leased.check("k").await.unwrap().is_allowed());
    }
    assert!(admitted <= bound, "{admitted} admitted at one instant, against the bound {bound}");
    assert_eq!(admitted, 10, "the refunds of the early admissions give nothing back");
    // A refund of an admission served by the live lease goes back to it: the
    // next request is served from the lease, without a round trip.
    clock.advance(Duration::from_secs(1));
    assert!(leased.check("j").await.unwrap().is_allowed());
    let d = leased.check("j").await.unwrap();
    assert!(d.is_allowed());
    let trips = leased.round_trips();
    leased.refund("j", 1, &d).await.unwrap();
    assert!(leased.check("j").await.unwrap().is_allowed());
    assert_eq!(leased.round_trips(), trips, "served from the lease the refund went back to");
}

/// Polls `f` once with the task's own waker.
async fn poll_once<F: std::future::Future + Unpin>(f: &mut F) -> std::task::Poll<F::Output> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *f).poll(cx))).await
}

#[tokio::test]
async fn a_lease_lives_from_when_its_grant_was_asked_for_not_from_when_the_reply_was_read() {
    // r = 10/s, B = 10; N = 1, L = 10, lifetime 100 ms: at one instant at most
    // B + min(N·L, r·lifetime) = 11 admitted.
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let config = LeaseConfig::builder().max_lease(10).lifetime(Duration::from_millis(100)).build().unwrap();
    let leased = client(&server, Quota::per_second(10).unwrap(), config, &clock).await;
    // The grant is charged at T0 (the time it is sent with); its reply is read 10 s later.
    let mut first = Box::pin(leased.check("k"));
    assert!(poll_once(&mut first).await.is_pending(), "parked on Redis");
    clock.advance(Duration::from_secs(10));
    assert!(first.await.unwrap().is_allowed());
    let mut admitted = 1;
    for _ in 0..100 {
        admitted += u64::from(leased.check("k").await.unwrap().is_allowed());
    }
    assert_eq!(admitted, 11, "a lease charged at T0 and read at T0 + 10 s");
}

#[tokio::test]
async fn the_lease_table_holds_at_most_max_keys_keys() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(T0));
    for max_keys in [1, 5, 17] {
        let config = LeaseConfig::builder().max_keys(max_keys).build().unwrap();
        let leased = client(&server, Quota::per_minute(1_000).unwrap(), config, &clock).await;
        // A frozen clock: every lease taken stays live.
        for i in 0..64 {
            assert!(leased.check(&format!("{max_keys:02}-key-{i:02}")).await.unwrap().is_allowed());
        }
        let held = weir_redis::__private::lease_table_key_bytes(&leased) / 9;
        assert_eq!(held, max_keys, "max_keys({max_keys})");
    }
    // Once the leases held have expired, a new key takes a place of theirs.
    let config = LeaseConfig::builder().max_keys(1).build().unwrap();
    let leased = client(&server, Quota::per_minute(1_000).unwrap(), config, &clock).await;
    assert!(leased.check("first").await.unwrap().is_allowed());
    clock.advance(config.lifetime() + Duration::from_nanos(1));
    // Each new key that finds the table full drops the idle entries of its own
    // shard and of one other in turn: within 16 checks, of the 16 shards.
    for _ in 0..17 {
        assert!(leased.check("second").await.unwrap().is_allowed());
    }
    let trips = leased.round_trips();
    assert!(leased.check("second").await.unwrap().is_allowed());
    assert_eq!(leased.round_trips(), trips, "served from the lease of the key that took the place");
    assert_eq!(weir_redis::__private::lease_table_key_bytes(&leased), "second".len());
}
