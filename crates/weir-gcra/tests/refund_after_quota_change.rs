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

/// The first test again with 65 536 quota changes between the admission and its
/// refund: a refund still credits at most what the admission was charged, however
/// many changes came in between (a revision counter of 16 bits would have come
/// round to the admission's and credited the new price: 10 admitted, not 9).
#[test]
fn gcra_credits_what_was_charged_however_many_changes_later() {
    let clock = ManualClock::new();
    let limiter = Gcra::with_clock(ten_per_second(), clock.clone());
    let admission = limiter.check_n(10).unwrap();
    for _ in 0..65_535 {
        limiter.set_quota(ten_per_second().with_burst(20).unwrap());
    }
    limiter.set_quota(one_per_second_burst_10()); // the 65 536th change
    limiter.refund(5, &admission).unwrap();
    let admitted = (0..100).filter(|_| limiter.check().is_allowed()).count();
    assert_eq!(admitted, 9);
}

/// A zero-cost admission took nothing, so a refund against it credits nothing,
/// whatever `n` it is asked to give back.
#[test]
fn a_refund_against_a_zero_cost_admission_credits_nothing() {
    let clock = ManualClock::new();
    let limiter = Gcra::with_clock(ten_per_second(), clock.clone());
    assert!(limiter.check_n(10).unwrap().is_allowed());
    let free = limiter.check_n(0).unwrap();
    assert!(free.is_allowed());
    limiter.refund(5, &free).unwrap();
    assert_eq!(limiter.snapshot().remaining(), 0);
    assert!(limiter.check().is_denied());
}

/// The same for a leased limiter (an admission of 0 decided by a refill).
#[test]
fn leased_a_refund_against_a_zero_cost_admission_credits_nothing() {
    let clock = ManualClock::new();
    let limiter = leased(&clock);
    assert!(limiter.check_on(0, 10).unwrap().is_allowed());
    let free = limiter.check_on(0, 0).unwrap();
    assert!(free.is_allowed());
    limiter.refund(5, &free).unwrap();
    limiter.release_leases();
    assert_eq!(limiter.snapshot().remaining(), 0);
    assert!(limiter.check_on(0, 1).unwrap().is_denied());
}

mod all_of {
    use super::*;
    use weir_rl_core::{AllOf, Decision, InsufficientCapacity, KeyedLimiter, Limiter, Policy, Snapshot};

    /// One `Gcra` as a keyed limiter of one key.
    struct One<'a>(&'a Gcra<ManualClock>, [Policy; 1]);

    impl<'a> One<'a> {
        fn new(limiter: &'a Gcra<ManualClock>) -> Self {
            let quota = limiter.quota();
            Self(limiter, [Policy::new(quota.burst(), quota.period())])
        }
    }

    impl KeyedLimiter<()> for One<'_> {
        fn check_n(&self, _: &(), n: u64) -> Result<Decision, InsufficientCapacity> {
            Limiter::check_n(self.0, n)
        }
        fn refund(&self, _: &(), n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
            Limiter::refund(self.0, n, admission)
        }
        fn snapshot(&self, _: &()) -> Snapshot {
            self.0.snapshot()
        }
        fn policies(&self) -> &[Policy] {
            &self.1
        }
    }

    /// An all-of refund gives the deciding member its own decision, and the other
    /// members a decision that names no charge: each credits at most what it
    /// charged. A = 1/s burst 10, B = 10/s burst 100 with 50 taken; an all-of check
    /// of 5 is decided by A (5 left; B has 45) and charged 5 s by A, 0.5 s by B. B
    /// then changes to 1/s burst 100 (5.5 s in use: 94 fit) and the 5 are refunded:
    /// B charged 0.5 s for them, so at most 95 may fit afterwards. Crediting B with A's
    /// charge (5 s) made 99 fit. B does not know what it charged this admission and
    /// its quota changed since, so it credits nothing: 94.
    #[test]
    fn each_member_is_credited_at_most_its_own_charge() {
        let clock = ManualClock::new();
        let a = Gcra::with_clock(one_per_second_burst_10(), clock.clone());
        let b = Gcra::with_clock(Quota::per_second(10).unwrap().with_burst(100).unwrap(), clock.clone());
        assert!(b.check_n(50).unwrap().is_allowed());
        let all = AllOf::new((One::new(&a), One::new(&b))).unwrap();
        let d = all.check_n(&(), 5).unwrap();
        assert!(d.is_allowed());
        assert_eq!((d.policy_index(), d.remaining()), (0, 5), "decided by A");
        b.set_quota(Quota::per_second(1).unwrap().with_burst(100).unwrap());
        all.refund(&(), 5, &d).unwrap();
        let admitted_by_b = (0..200).filter(|_| b.check().is_allowed()).count();
        assert!(admitted_by_b <= 95, "B admits {admitted_by_b}");
        assert_eq!(admitted_by_b, 94);
        // A, the decider, gets its whole charge back: 10 fit.
        let admitted_by_a = (0..200).filter(|_| a.check().is_allowed()).count();
        assert_eq!(admitted_by_a, 10);
    }

    /// Without a quota change, every member gets its whole charge back.
    #[test]
    fn without_a_change_every_member_is_credited_in_full() {
        let clock = ManualClock::new();
        let a = Gcra::with_clock(one_per_second_burst_10(), clock.clone());
        let b = Gcra::with_clock(Quota::per_second(10).unwrap().with_burst(100).unwrap(), clock.clone());
        assert!(b.check_n(50).unwrap().is_allowed());
        let all = AllOf::new((One::new(&a), One::new(&b))).unwrap();
        clock.advance(Duration::from_nanos(1));
        let d = all.check_n(&(), 5).unwrap();
        all.refund(&(), 5, &d).unwrap();
        assert_eq!((a.snapshot().remaining(), b.snapshot().remaining()), (10, 50));
    }

    /// An all-of check of 0 took nothing from anyone: its refund credits nothing.
    #[test]
    fn a_zero_cost_all_of_admission_credits_nothing() {
        let clock = ManualClock::new();
        let a = Gcra::with_clock(one_per_second_burst_10(), clock.clone());
        let b = Gcra::with_clock(ten_per_second(), clock.clone());
        assert!(a.check_n(10).unwrap().is_allowed() && b.check_n(10).unwrap().is_allowed());
        let all = AllOf::new((One::new(&a), One::new(&b))).unwrap();
        let free = all.check_n(&(), 0).unwrap();
        assert!(free.is_allowed());
        all.refund(&(), 5, &free).unwrap();
        assert_eq!((a.snapshot().remaining(), b.snapshot().remaining()), (0, 0));
    }
}
