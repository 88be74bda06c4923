//! Refunds at the edges of what `Quota` accepts: admissions of the whole burst and
//! of 0, a quota change to another extreme quota, a clock at its last readings, and
//! refunds of every kind of decision (charged, zero-cost, without its charge) of
//! any size never panic; a refund of an admission of 0 gives nothing back, and no
//! refund fills the bucket beyond its burst.

use proptest::prelude::*;
use std::time::Duration;
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_rl_core::{Decision, ManualClock, Nanos, Quota};

fn extreme() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(1u64),
        Just(86_400_000_000_000), // a day in ns
        (0u32..64).prop_map(|k| 1u64 << k),
        (1u32..64).prop_map(|k| (1u64 << k) - 1),
        any::<u64>().prop_map(|c| c.max(1)),
    ]
}

fn quota() -> impl Strategy<Value = Option<Quota>> {
    (extreme(), extreme(), extreme()).prop_map(|(count, period_ns, burst)| {
        Quota::new(count, Duration::from_nanos(period_ns)).and_then(|q| q.with_burst(burst)).ok()
    })
}

fn refunds(n: u64, admission: Decision, refund: impl Fn(u64, &Decision)) {
    for n in [0, 1, n / 2, n, n.saturating_add(1), u64::MAX] {
        refund(n, &admission);
        refund(n, &admission.without_charge());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn refunds_of_extreme_quotas_never_panic(
        first in quota(),
        second in quota(),
        change in any::<bool>(),
        start in prop_oneof![Just(0u64), Just(u64::MAX / 2), Just(u64::MAX - 1), Just(u64::MAX), any::<u64>()],
        advance in prop_oneof![Just(0u64), Just(1), Just(u64::MAX), any::<u64>()],
    ) {
        let (Some(first), Some(second)) = (first, second) else { return Ok(()) };
        let clock = ManualClock::starting_at(Nanos::new(start));
        let gcra = Gcra::with_clock(first, clock.clone());
        let config = LeaseConfig::builder().stripes(2).max_lease(64).build().unwrap();
        let leased = LeasedGcra::with_clock(first, config, clock.clone());
        let burst = first.burst();
        let (a, b) = (gcra.check_n(burst).unwrap(), leased.check_on(0, burst).unwrap());
        let (za, zb) = (gcra.check_n(0).unwrap(), leased.check_on(1, 0).unwrap());
        prop_assert!(a.is_allowed() && b.is_allowed() && za.is_zero_cost() && zb.is_zero_cost());
        // Both drained: a refund of the admissions of 0 gives nothing back.
        refunds(burst, za, |n, d| { let _ = gcra.refund(n, d); });
        refunds(burst, zb, |n, d| { let _ = leased.refund(n, d); });
        prop_assert_eq!(gcra.snapshot().remaining(), 0);
        prop_assert_eq!(leased.snapshot().remaining(), 0);
        clock.set(Nanos::new(start.saturating_add(advance)));
        if change {
            gcra.set_quota(second);
            leased.set_quota(second);
        }
        let full = gcra.quota().burst();
        refunds(burst, a, |n, d| { let _ = gcra.refund(n, d); });
        refunds(burst, b, |n, d| { let _ = leased.refund(n, d); });
        prop_assert!(gcra.snapshot().remaining() <= full);
        prop_assert!(leased.snapshot().remaining() <= full);
    }
}
