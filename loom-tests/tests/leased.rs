//! loom models of the leased GCRA's protocol: stripes claim, refill and install
//! leases while other threads spend them. At a frozen clock no permit is admitted
//! beyond the burst and none is lost (after `release_leases`, remaining + admitted =
//! burst); with time moving, admissions stay within the documented bound.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use weir_core::{ManualClock, Nanos, Quota};
use weir_gcra::{LeaseConfig, LeasedGcra};

fn quota(burst: u64) -> Quota {
    Quota::per_second(100_000_000).unwrap().with_burst(burst).unwrap() // T = 10 ns
}

fn config(stripes: usize, max_lease: u64) -> LeaseConfig {
    LeaseConfig::new(stripes).unwrap().with_max_lease(max_lease).unwrap()
}

/// `plan[t]` = the stripes thread `t` checks (cost 1 each), at a frozen clock.
fn frozen(burst: u64, stripes: usize, max_lease: u64, plan: &'static [&'static [usize]]) {
    loom::model(move || {
        let l = Arc::new(LeasedGcra::with_clock(quota(burst), config(stripes, max_lease), Nanos::new(0)));
        let handles: Vec<_> = plan
            .iter()
            .map(|checks| {
                let l = l.clone();
                thread::spawn(move || checks.iter().filter(|&&s| l.check_on(s, 1).unwrap().is_allowed()).count() as u64)
            })
            .collect();
        let admitted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(admitted <= burst, "admitted {admitted} > burst {burst}");
        l.release_leases();
        assert_eq!(l.snapshot().remaining() + admitted, burst, "a permit was lost");
    });
}

#[test]
fn two_stripes_lease_and_spend_concurrently() {
    // Burst 8 over 2 stripes: first leases are 8 / 4 = 2 permits.
    frozen(8, 2, 4, &[&[0, 0, 0], &[1, 1]]);
}

#[test]
fn two_threads_on_one_stripe_race_to_claim_and_install() {
    frozen(8, 1, 4, &[&[0, 0], &[0, 0]]);
}

#[test]
fn near_the_limit_the_stripes_share_the_last_permits_exactly() {
    // Burst 3, leases shrink to 1: exactly 3 of the 4 checks are admitted.
    frozen(3, 2, 4, &[&[0, 0], &[1, 1]]);
}

#[test]
fn time_moving_during_refills_stays_within_the_bound() {
    loom::model(|| {
        let clock = ManualClock::new();
        let config = LeaseConfig::new(2)
            .unwrap()
            .with_max_lease(4)
            .unwrap()
            .with_lifetime(std::time::Duration::from_micros(5))
            .unwrap();
        let l = Arc::new(LeasedGcra::with_clock(quota(4), config, clock.clone()));
        let bound = l.over_admission_bound();
        let spender = {
            let l = l.clone();
            thread::spawn(move || (0..3).filter(|_| l.check_on(0, 1).unwrap().is_allowed()).count() as u64)
        };
        let mut admitted = 0;
        for _ in 0..2 {
            admitted += l.check_on(1, 1).unwrap().is_allowed() as u64;
            clock.advance(std::time::Duration::from_nanos(10));
        }
        admitted += spender.join().unwrap();
        // 20 ns elapsed at T = 10 ns: at most burst + 2 + bound.
        assert!(admitted <= 4 + 2 + bound, "admitted {admitted}");
    });
}
