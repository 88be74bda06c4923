//! Per-key window limiters: the store decides, key by key, exactly as independent
//! window limiters would, however sweeps interleave (eviction changes no decision).
#![cfg(feature = "window")]

use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;
use weir_keyed::KeyHasher;
use weir_keyed::{Keyed, KeyedAlgorithm, KeyedConfig};
use weir_rl_core::{Clock, Limiter, ManualClock, Quota};
use weir_window::fixed::FixedWindowAlgorithm;
use weir_window::log::SlidingLogAlgorithm;
use weir_window::sliding::SlidingWindowAlgorithm;
use weir_window::{FixedWindow, SlidingLog, SlidingWindow};

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check { key: u8, n: u64 },
    Sweep,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u64..600_000_000).prop_map(Op::Advance),
            10 => (0u8..5, 1u64..4).prop_map(|(key, n)| Op::Check { key, n }),
            2 => Just(Op::Sweep),
        ],
        1..150,
    )
}

/// Runs `ops` on a keyed store of `algorithm` and on one `model` limiter per key.
fn same_decisions<A, L>(
    algorithm: A,
    clock: &ManualClock,
    model: impl Fn() -> L,
    ops: Vec<Op>,
) -> Result<(), TestCaseError>
where
    A: KeyedAlgorithm,
    A::State: Send + Sync + 'static,
    L: Limiter,
{
    let limit = algorithm.limit();
    let config = KeyedConfig::builder(1_000).sweep_every(1).sweep_from(0).build().unwrap();
    let store: Keyed<u8, A, ManualClock> = Keyed::with_hasher(algorithm, config, clock.clone(), KeyHasher::new());
    let mut models: HashMap<u8, L> = HashMap::new();
    for op in ops {
        match op {
            Op::Advance(ns) => {
                clock.advance(Duration::from_nanos(ns));
            }
            Op::Check { key, n } => {
                let n = n.min(limit);
                let expected = models.entry(key).or_insert_with(&model).check_n(n).unwrap();
                let actual = store.check_n(&key, n).unwrap();
                prop_assert_eq!(actual.is_allowed(), expected.is_allowed(), "key {}", key);
                prop_assert_eq!(actual.remaining(), expected.remaining());
                prop_assert_eq!(actual.retry_after(), expected.retry_after());
            }
            Op::Sweep => {
                store.sweep_all();
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn fixed_windows_per_key(limit in 1u64..6, ops in ops()) {
        let quota = Quota::per_second(limit).unwrap();
        let clock = ManualClock::new();
        let algorithm = FixedWindowAlgorithm::new(quota, clock.now()).unwrap();
        same_decisions(algorithm, &clock, || FixedWindow::with_clock(quota, clock.clone()).unwrap(), ops)?;
    }

    #[test]
    fn sliding_windows_per_key(limit in 1u64..6, ops in ops()) {
        let quota = Quota::per_second(limit).unwrap();
        let clock = ManualClock::new();
        let algorithm = SlidingWindowAlgorithm::new(quota, clock.now()).unwrap();
        same_decisions(algorithm, &clock, || SlidingWindow::with_clock(quota, clock.clone()).unwrap(), ops)?;
    }

    #[test]
    fn sliding_logs_per_key(limit in 1u64..6, ops in ops()) {
        let quota = Quota::per_second(limit).unwrap();
        let clock = ManualClock::new();
        let algorithm = SlidingLogAlgorithm::new(quota, clock.now()).unwrap();
        same_decisions(algorithm, &clock, || SlidingLog::with_clock(quota, clock.clone()).unwrap(), ops)?;
    }
}
