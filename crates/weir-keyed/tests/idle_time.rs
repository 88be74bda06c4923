//! `KeyedAlgorithm::earliest_idle` is a lower bound on when a state goes idle (a
//! full store skips a shard until its keys' least bound, so a bound too late would
//! deny new keys while an idle key is stored), and for the built-in algorithms it
//! is the exact time, once the clock has reached the algorithm's origin.

use proptest::prelude::*;
use weir_gcra::GcraAlgorithm;
use weir_keyed::KeyedAlgorithm;
use weir_rl_core::{Nanos, Quota};

/// Checks of cost `n` after `dt` ns each, from the reading `start` on.
fn steps() -> impl Strategy<Value = (u64, Vec<(u64, u64)>)> {
    (0u64..3_000_000_000, prop::collection::vec((0u64..1_500_000_000, 1u64..4), 1..40))
}

/// Runs `steps` on one state of `algorithm` (whose origin is `origin`), checking
/// after each step that `earliest_idle` is a lower bound on the idle time, and the
/// exact idle time from the origin on.
fn bound_holds<A: KeyedAlgorithm>(
    algorithm: &A,
    origin: u64,
    start: u64,
    steps: Vec<(u64, u64)>,
) -> Result<(), TestCaseError> {
    let state = algorithm.new_state();
    let mut now = start;
    for (dt, n) in steps {
        now += dt;
        let reading = Nanos::new(now);
        let _ = algorithm.check_n(&state, n.min(algorithm.limit()), &reading);
        let at = algorithm.earliest_idle(&state, reading).as_u64();
        prop_assert!(at >= now, "a bound before now: {at} < {now}");
        if algorithm.is_idle(&state, reading) {
            prop_assert_eq!(at, now, "idle now, yet bounded later");
            continue;
        }
        prop_assert!(at > now);
        prop_assert!(!algorithm.is_idle(&state, Nanos::new(at - 1)), "idle at {} before its bound {at}", at - 1);
        if now >= origin {
            prop_assert!(algorithm.is_idle(&state, Nanos::new(at)), "not idle at its bound {at}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn gcra_bounds_are_exact(per_second in 1u64..1_000, burst in 1u64..6, origin in 0u64..2_000_000_000, (start, steps) in steps()) {
        let quota = Quota::per_second(per_second).unwrap().with_burst(burst).unwrap();
        bound_holds(&GcraAlgorithm::new(quota, Nanos::new(origin)), origin, start, steps)?;
    }
}

#[cfg(feature = "window")]
mod window {
    use super::*;
    use weir_window::fixed::FixedWindowAlgorithm;
    use weir_window::log::SlidingLogAlgorithm;
    use weir_window::sliding::SlidingWindowAlgorithm;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn fixed_window_bounds_are_exact(limit in 1u64..6, origin in 0u64..2_000_000_000, (start, steps) in steps()) {
            let quota = Quota::per_second(limit).unwrap();
            let algorithm = FixedWindowAlgorithm::new(quota, Nanos::new(origin)).unwrap();
            bound_holds(&algorithm, origin, start, steps)?;
        }

        #[test]
        fn sliding_window_bounds_are_exact(limit in 1u64..6, origin in 0u64..2_000_000_000, (start, steps) in steps()) {
            let quota = Quota::per_second(limit).unwrap();
            let algorithm = SlidingWindowAlgorithm::new(quota, Nanos::new(origin)).unwrap();
            bound_holds(&algorithm, origin, start, steps)?;
        }

        #[test]
        fn sliding_log_bounds_are_exact(limit in 1u64..6, origin in 0u64..2_000_000_000, (start, steps) in steps()) {
            let quota = Quota::per_second(limit).unwrap();
            let algorithm = SlidingLogAlgorithm::new(quota, Nanos::new(origin)).unwrap();
            bound_holds(&algorithm, origin, start, steps)?;
        }
    }
}
