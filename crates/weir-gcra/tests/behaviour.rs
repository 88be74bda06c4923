//! Every documented behaviour of the GCRA limiter, with a hand-driven clock.

use std::time::Duration;
use weir_gcra::Gcra;
use weir_rl_core::{Clock, InsufficientCapacity, ManualClock, Nanos, Quota};

fn limiter(quota: Quota) -> (Gcra<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (Gcra::with_clock(quota, clock.clone()), clock)
}

fn admitted(limiter: &Gcra<ManualClock>, requests: usize) -> usize {
    (0..requests).filter(|_| limiter.check().is_allowed()).count()
}

/// The worked example of the token-bucket write-ups: capacity 20, refill 10/s.
#[test]
fn worked_example_capacity_20_refill_10_per_second() {
    let (limiter, clock) = limiter(Quota::per_second(10).unwrap().with_burst(20).unwrap());
    assert!(limiter.check_n(20).unwrap().is_allowed(), "a new bucket is full");
    assert_eq!(limiter.snapshot().remaining(), 0);

    clock.advance(Duration::from_secs(2)); // 2 s idle refills all 20
    assert_eq!(limiter.snapshot().remaining(), 20);
    assert_eq!(admitted(&limiter, 15), 15, "15 at once are admitted");
    assert_eq!(limiter.snapshot().remaining(), 5, "5 left");

    let results: Vec<bool> = (0..6).map(|_| limiter.check().is_allowed()).collect();
    assert_eq!(results, [true, true, true, true, true, false], "6 more: 5 admitted, 1 denied");

    clock.advance(Duration::from_millis(100));
    assert!(limiter.check().is_allowed(), "0.1 s later one more is admitted");
    assert!(limiter.check().is_denied());
}

#[test]
fn burst_is_exactly_b_back_to_back() {
    for burst in [1, 2, 7, 100] {
        let (limiter, _) = limiter(Quota::per_second(5).unwrap().with_burst(burst).unwrap());
        assert_eq!(admitted(&limiter, 1000), burst as usize, "burst {burst}");
    }
}

#[test]
fn retry_after_is_exact_to_the_nanosecond() {
    // Rates whose interval is not a whole number of nanoseconds too.
    for quota in [
        Quota::per_second(10).unwrap().with_burst(3).unwrap(),
        Quota::per_second(3).unwrap(),
        Quota::per_second(7_000_000).unwrap().with_burst(4).unwrap(),
        Quota::per_minute(1).unwrap(),
        Quota::per_second(1_000_000_000).unwrap().with_burst(2).unwrap(),
    ] {
        for n in [1, quota.burst()] {
            let (limiter, clock) = limiter(quota);
            clock.advance(Duration::from_nanos(12_345));
            while limiter.check().is_allowed() {}
            let denied = limiter.check_n(n).unwrap();
            let retry = denied.retry_after().expect("denied");
            let t = clock.now();

            clock.set(Nanos::new(t.as_u64() + retry.as_nanos() as u64 - 1));
            assert!(limiter.check_n(n).unwrap().is_denied(), "{quota}: n={n} admitted 1 ns early");
            clock.set(t + retry);
            assert!(limiter.check_n(n).unwrap().is_allowed(), "{quota}: n={n} denied at retry_after");
        }
    }
}

#[test]
fn decisions_carry_limit_remaining_and_reset() {
    let (limiter, clock) = limiter(Quota::per_second(10).unwrap()); // T = 100 ms, burst 10
    let d = limiter.check_n(4).unwrap();
    assert!(d.is_allowed());
    assert_eq!((d.limit(), d.remaining()), (10, 6));
    assert_eq!(d.reset_after(), Duration::from_millis(400));
    assert_eq!(d.retry_after(), None);

    clock.advance(Duration::from_millis(150));
    let s = limiter.snapshot();
    assert_eq!((s.remaining(), s.reset_after()), (7, Duration::from_millis(250)));

    let d = limiter.check_n(8).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.remaining(), 7, "a denial reports what is left, untouched");
    assert_eq!(d.retry_after(), Some(Duration::from_millis(50)));
    assert_eq!(limiter.snapshot(), s, "a denial changes nothing");
}

#[test]
fn more_than_the_burst_is_an_error_not_a_denial() {
    let (limiter, _) = limiter(Quota::per_second(10).unwrap().with_burst(5).unwrap());
    assert_eq!(limiter.check_n(6), Err(InsufficientCapacity { requested: 6, capacity: 5 }));
    assert_eq!(limiter.check_n(u64::MAX), Err(InsufficientCapacity { requested: u64::MAX, capacity: 5 }));
    assert_eq!(limiter.snapshot().remaining(), 5, "an error consumes nothing");
    assert!(limiter.check_n(5).unwrap().is_allowed());
}

#[test]
fn zero_cost_is_admitted_and_consumes_nothing() {
    let (limiter, _) = limiter(Quota::per_second(10).unwrap());
    assert!(limiter.check_n(10).unwrap().is_allowed());
    let d = limiter.check_n(0).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 0);
    assert!(limiter.check().is_denied());
}

#[test]
fn refund_gives_back_capacity_but_never_beyond_full() {
    let (limiter, clock) = limiter(Quota::per_second(10).unwrap());
    let admission = limiter.check_n(6).unwrap();
    assert!(admission.is_allowed());
    limiter.refund(2, &admission).unwrap();
    assert_eq!(limiter.snapshot().remaining(), 6);
    limiter.refund(10, &admission).unwrap();
    assert_eq!(limiter.snapshot().remaining(), 10);
    assert_eq!(admitted(&limiter, 100), 10, "a refund past full adds nothing");
    assert_eq!(limiter.refund(11, &admission), Err(InsufficientCapacity { requested: 11, capacity: 10 }));

    clock.advance(Duration::from_secs(5));
    limiter.refund(3, &admission).unwrap(); // already full: no effect
    assert_eq!(admitted(&limiter, 100), 10);
}

#[test]
fn a_denial_consumed_nothing_and_refunds_nothing() {
    let (limiter, _) = limiter(Quota::per_second(10).unwrap());
    assert!(limiter.check_n(10).unwrap().is_allowed());
    let denied = limiter.check();
    assert!(denied.is_denied());
    limiter.refund(5, &denied).unwrap();
    assert_eq!(limiter.snapshot().remaining(), 0);
}

#[test]
fn decisions_are_stamped_with_the_reading_they_were_made_at() {
    let (limiter, clock) = limiter(Quota::per_second(10).unwrap());
    clock.advance(Duration::from_millis(7));
    let now = weir_rl_core::Clock::now(&clock);
    assert_eq!(limiter.check().decided_at(), now);
    assert_eq!(limiter.check_n(0).unwrap().decided_at(), now);
    assert!(limiter.check_n(9).unwrap().is_allowed());
    assert_eq!(limiter.check().decided_at(), now, "denials too");
}

#[test]
fn the_limiter_trait_refunds_as_the_limiter_does() {
    let (limiter, _) = limiter(Quota::per_second(10).unwrap());
    let dyn_limiter: &dyn weir_rl_core::Limiter = &limiter;
    let admission = dyn_limiter.check_n(4).unwrap();
    dyn_limiter.refund(3, &admission).unwrap();
    assert_eq!(dyn_limiter.snapshot().remaining(), 9);
}

#[test]
fn set_quota_keeps_the_time_until_full() {
    let (limiter, clock) = limiter(Quota::per_second(10).unwrap());
    assert!(limiter.check_n(5).unwrap().is_allowed()); // full again in 500 ms
    limiter.set_quota(Quota::per_second(100).unwrap().with_burst(50).unwrap());
    assert_eq!(limiter.quota().count(), 100);
    let s = limiter.snapshot();
    assert_eq!(s.reset_after(), Duration::from_millis(500));
    assert_eq!((s.limit(), s.remaining()), (50, 0));
    clock.advance(Duration::from_millis(100));
    assert_eq!(admitted(&limiter, 100), 10, "the new rate refills 10 per 100 ms");

    // Lowering the quota below the capacity in use just denies until it drains.
    limiter.set_quota(Quota::per_second(1).unwrap());
    assert!(limiter.check().is_denied());
    clock.advance(Duration::from_secs(1));
    assert!(limiter.check().is_allowed());
}

#[test]
fn a_clock_stepping_backwards_never_admits_a_burst() {
    let (limiter, clock) = limiter(Quota::per_second(10).unwrap().with_burst(2).unwrap());
    clock.set(Nanos::new(10_000_000_000));
    assert_eq!(admitted(&limiter, 10), 2);
    clock.set(Nanos::new(5_000_000_000)); // 5 s back
    assert_eq!(admitted(&limiter, 10), 0, "no time has passed");
    assert_eq!(limiter.snapshot().remaining(), 0);
    clock.set(Nanos::new(10_000_000_000));
    assert_eq!(admitted(&limiter, 10), 0);
    clock.set(Nanos::new(10_100_000_000));
    assert_eq!(admitted(&limiter, 10), 1);
}

#[test]
fn the_end_of_time_fails_closed_without_panicking() {
    let (limiter, clock) = limiter(Quota::per_second(1_000_000_000).unwrap().with_burst(3).unwrap());
    clock.set(Nanos::MAX);
    assert_eq!(admitted(&limiter, 100), 3);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(admitted(&limiter, 100), 0, "after the horizon, time no longer refills");
    let s = limiter.snapshot();
    assert_eq!(s.remaining(), 0);
    let (limiter, clock) = self::limiter(Quota::per_day(1).unwrap().with_burst(3_000).unwrap());
    clock.set(Nanos::new(u64::MAX / 2));
    assert!(limiter.check_n(3_000).unwrap().is_allowed());
    assert!(limiter.check().is_denied());
}

#[test]
fn a_billion_per_second_and_more() {
    let (limiter, clock) = limiter(Quota::per_second(1_000_000_000).unwrap().with_burst(1).unwrap());
    assert!(limiter.check().is_allowed());
    assert!(limiter.check().is_denied());
    clock.advance(Duration::from_nanos(1));
    assert!(limiter.check().is_allowed());

    let (limiter, clock) = self::limiter(Quota::per_second(4_000_000_000).unwrap().with_burst(1).unwrap());
    assert!(limiter.check().is_allowed());
    clock.advance(Duration::from_nanos(1));
    assert_eq!(admitted(&limiter, 10), 1, "1 ns at 4/ns refills 4, but the burst holds 1");
    clock.advance(Duration::from_micros(1));
    assert!(limiter.check_n(1).unwrap().is_allowed());
}

#[test]
fn a_clock_far_from_its_origin_works() {
    // A clock counting from the UNIX epoch (about 1.8e18 ns): the limiter counts from
    // its own creation, so nothing saturates.
    let clock = ManualClock::starting_at(Nanos::new(1_796_000_000_000_000_000));
    let limiter = Gcra::with_clock(Quota::per_second(16_000_000).unwrap().with_burst(2).unwrap(), clock.clone());
    assert_eq!(admitted(&limiter, 5), 2);
    clock.advance(Duration::from_nanos(125));
    assert_eq!(admitted(&limiter, 5), 2);
}

#[test]
fn works_through_the_limiter_trait_and_as_a_trait_object() {
    use weir_rl_core::Limiter;
    let (gcra, _) = limiter(Quota::per_second(2).unwrap());
    let shared: std::sync::Arc<dyn Limiter + Send + Sync> = std::sync::Arc::new(gcra);
    assert!(shared.check().is_allowed());
    assert!(shared.check_n(1).unwrap().is_allowed());
    assert!(shared.check().is_denied());
    assert_eq!(shared.snapshot().remaining(), 0);
}

#[test]
fn per_key_states_share_one_algorithm() {
    use weir_gcra::GcraAlgorithm;
    use weir_rl_core::Algorithm;
    let algorithm = GcraAlgorithm::new(Quota::per_second(1).unwrap().with_burst(2).unwrap(), Nanos::ZERO);
    let (a, b) = (algorithm.new_state(), algorithm.new_state());
    let now = Nanos::new(1_000);
    assert!(algorithm.check(&a, &now).is_allowed());
    assert!(algorithm.check(&a, &now).is_allowed());
    assert!(algorithm.check(&a, &now).is_denied());
    assert!(algorithm.check(&b, &now).is_allowed(), "states are independent");
    assert!(!algorithm.is_idle(&a, now));
    assert!(algorithm.is_idle(&a, Nanos::new(2_000_001_000)), "full again after 2 s");
    assert!(!algorithm.is_idle(&a, Nanos::new(2_000_000_999)));
    assert!(algorithm.is_idle(&algorithm.new_state(), now));
}
