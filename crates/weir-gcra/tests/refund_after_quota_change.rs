//! A refund gives back what the admission was charged, even after the quota
//! changed between the admission and the refund: never the refunded units' price
//! under the new quota when that is more.

use std::time::Duration;
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_rl_core::{ManualClock, Quota};

fn ten_per_second() -> Quota {
    Quota::per_second(10).unwrap()
}

fn one_per_second_burst_10() -> Quota {
    Quota::per_second(1).unwrap().with_burst(10).unwrap()
}

/// Take 10 at 10/s (1 s of capacity), change to 1/s with burst 10, refund 5 of the
/// 10: they were charged 0.5 s, so 0.5 s comes back, the bucket is 0.5 s in use and
/// 9 of the new burst fit (not 10: a credit of 5 s would be 5 units at the new price).
#[test]
fn gcra_credits_the_interval_the_admission_was_charged() {
    let clock = ManualClock::new();
    let limiter = Gcra::with_clock(ten_per_second(), clock.clone());
    let admission = limiter.check_n(10).unwrap();
    assert!(admission.is_allowed());
    limiter.set_quota(one_per_second_burst_10());
    limiter.refund(5, &admission).unwrap();
    let admitted = (0..100).filter(|_| limiter.check().is_allowed()).count();
    assert_eq!(admitted, 9);
}

/// The other way round: charged 5 s at 1/s, refunded under 10/s. The refund credits
/// the smaller of the two prices (see `Algorithm::refund`): 0.5 s, never more than
/// was charged.
#[test]
fn gcra_after_a_change_to_a_faster_quota_credits_the_new_price() {
    let clock = ManualClock::new();
    let limiter = Gcra::with_clock(one_per_second_burst_10(), clock.clone());
    let admission = limiter.check_n(5).unwrap(); // 5 s in use
    limiter.set_quota(Quota::per_second(10).unwrap().with_burst(60).unwrap()); // 6 s bucket
    limiter.refund(5, &admission).unwrap(); // 0.5 s back: 4.5 s in use
    let admitted = (0..100).filter(|_| limiter.check().is_allowed()).count();
    assert_eq!(admitted, 15);
    clock.advance(Duration::from_millis(100));
    assert!(limiter.check().is_allowed());
}

/// Without a quota change the refund is exact, as before: all 5 come back.
#[test]
fn gcra_without_a_change_credits_the_whole_price() {
    let clock = ManualClock::new();
    let limiter = Gcra::with_clock(ten_per_second(), clock.clone());
    let admission = limiter.check_n(10).unwrap();
    limiter.set_quota(ten_per_second()); // the same quota again: same price
    limiter.refund(5, &admission).unwrap();
    let admitted = (0..100).filter(|_| limiter.check().is_allowed()).count();
    assert_eq!(admitted, 5);
}

fn leased(clock: &ManualClock) -> LeasedGcra<ManualClock> {
    let config = LeaseConfig::builder().stripes(1).max_lease(4).build().unwrap();
    LeasedGcra::with_clock(ten_per_second(), config, clock.clone())
}

/// The same for a leased limiter, for an admission the bucket decided (a refill
/// that took exactly what was asked).
#[test]
fn leased_credits_the_interval_a_bucket_admission_was_charged() {
    let clock = ManualClock::new();
    let limiter = leased(&clock);
    let admission = limiter.check_on(0, 10).unwrap();
    assert!(admission.is_allowed() && admission.remaining() == 0);
    limiter.set_quota(one_per_second_burst_10());
    limiter.refund(5, &admission).unwrap();
    let admitted = (0..100).filter(|_| limiter.check_on(0, 1).unwrap().is_allowed()).count();
    assert_eq!(admitted, 9);
}

/// And for an admission spent from a lease: its unit was charged at the lease's
/// grant, 0.1 s.
#[test]
fn leased_credits_the_interval_a_leased_permit_was_charged() {
    let clock = ManualClock::new();
    let limiter = leased(&clock);
    assert!(limiter.check_on(0, 6).unwrap().is_allowed()); // a lease of exactly 6
    assert!(limiter.check_on(0, 1).unwrap().is_allowed()); // a lease of 2, 1 left
    let from_lease = limiter.check_on(0, 1).unwrap(); // the lease's last permit
    assert!(from_lease.is_allowed() && from_lease.remaining() == 0);
    assert!(limiter.check_on(0, 2).unwrap().is_allowed()); // 10 taken: 1 s in use
    assert!(limiter.check_on(0, 1).unwrap().is_denied());
    limiter.set_quota(one_per_second_burst_10());
    limiter.refund(1, &from_lease).unwrap(); // 0.1 s back
    let admitted = (0..100).filter(|_| limiter.check_on(0, 1).unwrap().is_allowed()).count();
    assert_eq!(admitted, 9);
}
