//! Quotas at the edges of what `Quota` accepts (counts and bursts up to `u64::MAX`,
//! periods from 1 ns to years): `Gcra` and `LeasedGcra` (whose constructors cannot
//! fail) enforce each exactly at one instant, and nothing panics.

use proptest::prelude::*;
use std::time::Duration;
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_rl_core::{ManualClock, Nanos, Quota};

fn extreme() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        (0u32..64).prop_map(|k| 1u64 << k),
        (1u32..64).prop_map(|k| (1u64 << k) - 1),
        any::<u64>().prop_map(|c| c.max(1)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn every_accepted_quota_is_enforced_exactly(
        count in extreme(),
        period_ns in extreme(),
        burst in extreme(),
        start in prop_oneof![Just(0u64), Just(u64::MAX / 2), Just(u64::MAX), any::<u64>()],
        max_lease in prop_oneof![Just(1u64), Just(64), Just(weir_gcra::leased::MAX_LEASE)],
    ) {
        let Ok(quota) = Quota::new(count, Duration::from_nanos(period_ns)).and_then(|q| q.with_burst(burst)) else {
            return Ok(());
        };
        let clock = ManualClock::starting_at(Nanos::new(start));
        let gcra = Gcra::with_clock(quota, clock.clone());
        let all = gcra.check_n(burst).unwrap();
        prop_assert!(all.is_allowed() && all.remaining() == 0, "{quota:?}: {all:?}");
        prop_assert!(gcra.check().is_denied(), "{quota:?}: one over the burst");
        prop_assert!(gcra.check_n(burst.saturating_add(1)).is_err() || burst == u64::MAX);

        let config = LeaseConfig::builder().stripes(2).max_lease(max_lease).build().unwrap();
        let leased = LeasedGcra::with_clock(quota, config, clock.clone());
        let all = leased.check_on(0, burst).unwrap();
        prop_assert!(all.is_allowed(), "{quota:?}: {all:?}");
        prop_assert!(leased.check_on(1, 1).unwrap().is_denied(), "{quota:?}: one over the burst");
        prop_assert_eq!(leased.snapshot().remaining(), 0);
    }
}
