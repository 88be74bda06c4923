//! The lean check (`admit`) decides as the full one (`check`): two limiters of the
//! same configuration, on clocks that read the same, one asked with `admit` and
//! the other with `check`, admit the same requests, and a denial's wait is the
//! decision's `retry_after`.

use proptest::prelude::*;
use std::time::Duration;
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_rl_core::{Limiter, ManualClock, Nanos, Quota};

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    StepBack(u64),
    Check,
    Release,
    SetQuota(bool),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u64..3_000).prop_map(Op::Advance),
            1 => (0u64..200_000).prop_map(Op::Advance),
            1 => (0u64..5_000).prop_map(Op::StepBack),
            12 => Just(Op::Check),
            1 => Just(Op::Release),
            1 => any::<bool>().prop_map(Op::SetQuota),
        ],
        1..400,
    )
}

/// T = 1 µs with a burst of 5, or T = 3 µs with a burst of 2; a byte rate too.
fn quotas() -> [Quota; 3] {
    [
        Quota::per_second(1_000_000).unwrap().with_burst(5).unwrap(),
        Quota::new(1, Duration::from_micros(3)).unwrap().with_burst(2).unwrap(),
        Quota::per_second(300_000_000).unwrap().with_burst(700).unwrap(),
    ]
}

fn step(clocks: &[&ManualClock], op: &Op) {
    for clock in clocks {
        match *op {
            Op::Advance(ns) => {
                clock.advance(Duration::from_nanos(ns));
            }
            Op::StepBack(ns) => clock.set(Nanos::new(clock.now_ns().saturating_sub(ns))),
            _ => {}
        }
    }
}

trait NowNs {
    fn now_ns(&self) -> u64;
}

impl NowNs for ManualClock {
    fn now_ns(&self) -> u64 {
        weir_rl_core::Clock::now(self).as_u64()
    }
}

proptest! {
    #[test]
    fn gcra_admits_as_it_checks(start in 0usize..3, ops in ops()) {
        let quotas = quotas();
        let (a, b) = (ManualClock::new(), ManualClock::new());
        let lean = Gcra::with_clock(quotas[start], a.clone());
        let full = Gcra::with_clock(quotas[start], b.clone());
        for op in &ops {
            step(&[&a, &b], op);
            match *op {
                Op::Check => {
                    let (verdict, decision) = (lean.admit(), full.check());
                    prop_assert_eq!(verdict.is_ok(), decision.is_allowed());
                    prop_assert_eq!(verdict.err().map(|w| w.duration()), decision.retry_after());
                    prop_assert_eq!(Limiter::admit(&lean).is_ok(), Limiter::check(&full).is_allowed());
                }
                Op::SetQuota(first) => {
                    let quota = quotas[if first { 0 } else { 1 }];
                    lean.set_quota(quota);
                    full.set_quota(quota);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn leased_admits_as_it_checks(start in 0usize..3, max_lease in 1u64..8, ops in ops()) {
        let quotas = quotas();
        let config = LeaseConfig::builder().stripes(1).max_lease(max_lease).lifetime(Duration::from_micros(20)).build().unwrap();
        let (a, b) = (ManualClock::new(), ManualClock::new());
        let lean = LeasedGcra::with_clock(quotas[start], config, a.clone());
        let full = LeasedGcra::with_clock(quotas[start], config, b.clone());
        for op in &ops {
            step(&[&a, &b], op);
            match *op {
                Op::Check => {
                    let (verdict, decision) = (lean.admit(), full.check());
                    prop_assert_eq!(verdict.is_ok(), decision.is_allowed());
                    prop_assert_eq!(verdict.err().map(|w| w.duration()), decision.retry_after());
                }
                Op::Release => {
                    lean.release_leases();
                    full.release_leases();
                }
                Op::SetQuota(first) => {
                    let quota = quotas[if first { 0 } else { 1 }];
                    lean.set_quota(quota);
                    full.set_quota(quota);
                }
                _ => {}
            }
        }
    }
}

/// A reading before the limiter's origin (a clock stepping back), with the origin
/// in the upper half of the clock's range and a lease granted at its very end:
/// `admit` took the reading less the origin, wrapping, for a lease's own units and
/// spent the lease where `check` decided on the bucket.
#[test]
fn a_reading_before_the_origin_is_decided_as_check_decides_it() {
    let origin = Nanos::new(17_293_822_569_102_716_929);
    let quota = Quota::per_second(1_000_000_000).unwrap();
    let config = || LeaseConfig::builder().stripes(1).max_lease(8).build().unwrap();
    let (a, b) = (ManualClock::starting_at(origin), ManualClock::starting_at(origin));
    let lean = LeasedGcra::with_clock(quota, config(), a.clone());
    let full = LeasedGcra::with_clock(quota, config(), b.clone());
    let seven = quota.with_burst(7).unwrap();
    for (clock, limiter) in [(&a, &lean), (&b, &full)] {
        clock.set(Nanos::new(u64::MAX));
        limiter.set_quota(seven);
    }
    assert!(lean.admit().is_ok() && full.check().is_allowed());
    a.set(Nanos::ZERO);
    b.set(Nanos::ZERO);
    assert_eq!(lean.admit().is_ok(), full.check().is_allowed());
}
