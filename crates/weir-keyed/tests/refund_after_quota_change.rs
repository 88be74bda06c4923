//! A keyed store's refund (through `Algorithm::refund`, and through a hot key's
//! lease stripes) gives back what the admission was charged, even after the store's
//! quota changed in between.

use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{HotKeys, Keyed, KeyedConfig};
use weir_rl_core::{ManualClock, Quota};

fn config() -> KeyedConfig {
    KeyedConfig::builder(100).build().unwrap()
}

fn one_per_second_burst_10() -> Quota {
    Quota::per_second(1).unwrap().with_burst(10).unwrap()
}

/// Take 10 at 10/s, change to 1/s with burst 10, refund 5 of the 10: they were
/// charged 0.5 s, so 9 of the new burst fit, as for one `Gcra` (not 10).
#[test]
fn a_keys_refund_credits_the_interval_it_was_charged() {
    let clock = ManualClock::new();
    let store: Keyed<u64, GcraAlgorithm, ManualClock> =
        Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config(), clock.clone());
    let admission = store.check_n(&7, 10).unwrap();
    assert!(admission.is_allowed());
    store.set_quota(one_per_second_burst_10());
    store.refund(&7, 5, &admission).unwrap();
    let admitted = (0..100).filter(|_| store.check(&7).is_allowed()).count();
    assert_eq!(admitted, 9);
}

/// The same for a hot key, whose bucket lives in lease stripes.
#[test]
fn a_hot_keys_refund_credits_the_interval_it_was_charged() {
    let clock = ManualClock::new();
    let hot =
        HotKeys::builder().lease(LeaseConfig::builder().stripes(1).max_lease(4).build().unwrap()).build().unwrap();
    let store =
        Keyed::<u64, _, _>::gcra_with_clock(Quota::per_second(10).unwrap(), config(), clock.clone()).with_hot_keys(hot);
    assert!(store.promote(&7));
    let admission = store.check_n(&7, 10).unwrap();
    assert!(admission.is_allowed());
    store.set_quota(one_per_second_burst_10());
    store.refund(&7, 5, &admission).unwrap();
    let admitted = (0..100).filter(|_| store.check(&7).is_allowed()).count();
    assert_eq!(admitted, 9);
}

mod against_one_limiter {
    use proptest::prelude::*;
    use std::time::Duration;
    use weir_gcra::{Gcra, GcraAlgorithm};
    use weir_keyed::{Keyed, KeyedConfig};
    use weir_rl_core::{Decision, ManualClock, Quota};

    #[derive(Debug, Clone)]
    enum Op {
        Advance(u64),
        Check(u64),
        Refund(u64),
        SetQuota(Quota),
    }

    fn quota() -> impl Strategy<Value = Quota> {
        (1u64..20, prop_oneof![Just(1_000u64), Just(1_000_000), Just(1_000_000_000)], 1u64..20).prop_filter_map(
            "representable",
            |(count, period_ns, burst)| {
                Quota::new(count, Duration::from_nanos(period_ns * 7)).ok()?.with_burst(burst).ok()
            },
        )
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..20_000_000_000).prop_map(Op::Advance),
            6 => (1u64..20).prop_map(Op::Check),
            2 => (1u64..20).prop_map(Op::Refund),
            1 => quota().prop_map(Op::SetQuota),
        ]
    }

    proptest! {
        /// Checks, refunds of the last admission (never more than it took) and quota
        /// changes on one key decide exactly as one `Gcra` given the same operations
        /// at the same readings (its own reference model is in weir-gcra's
        /// tests/model.rs).
        #[test]
        fn a_key_decides_as_its_own_limiter(q in quota(), ops in prop::collection::vec(op(), 1..80)) {
            let clock = ManualClock::new();
            let store: Keyed<u64, GcraAlgorithm, ManualClock> =
                Keyed::gcra_with_clock(q, KeyedConfig::builder(10).build().unwrap(), clock.clone());
            let limiter = Gcra::with_clock(q, clock.clone());
            // The last admission of each, and what is left of it to refund.
            let mut last: Option<(Decision, Decision, u64)> = None;
            for op in ops {
                match op {
                    Op::Advance(ns) => {
                        clock.advance(Duration::from_nanos(ns));
                    }
                    Op::Check(n) => {
                        let (keyed, single) = (store.check_n(&7, n), limiter.check_n(n));
                        prop_assert_eq!(keyed, single);
                        if let (Ok(k), Ok(s)) = (keyed, single) && s.is_allowed() {
                            last = Some((k, s, n));
                        }
                    }
                    Op::Refund(n) => if let Some((k, s, left)) = &mut last {
                        let n = n.min(*left);
                        *left -= n;
                        prop_assert_eq!(store.refund(&7, n, k), limiter.refund(n, s));
                        prop_assert_eq!(store.snapshot(&7), limiter.snapshot());
                    },
                    Op::SetQuota(q) => {
                        store.set_quota(q);
                        limiter.set_quota(q);
                    }
                }
            }
        }
    }
}

/// A check of cost 0 takes nothing, so a refund against it gives nothing back: with
/// the burst spent, a refund of 5 against `check_n(k, 0)` leaves the key spent (as
/// for one `Gcra`), on a clock at 0 and later.
#[test]
fn a_refund_against_a_zero_cost_check_credits_nothing() {
    for start in [0, 3_600] {
        let clock = ManualClock::new();
        clock.advance(std::time::Duration::from_secs(start));
        let store: Keyed<u64, GcraAlgorithm, ManualClock> =
            Keyed::gcra_with_clock(Quota::per_second(1).unwrap().with_burst(10).unwrap(), config(), clock.clone());
        assert!(store.check_n(&7, 10).unwrap().is_allowed());
        let free = store.check_n(&7, 0).unwrap();
        assert!(free.is_allowed() && free.is_zero_cost());
        store.refund(&7, 5, &free).unwrap();
        assert!(store.check(&7).is_denied(), "a zero-cost check was credited (clock at {start} s)");
    }
}
