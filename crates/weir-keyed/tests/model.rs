//! Property tests: the store decides, key by key, exactly as independent per-key
//! limiters would, however sweeps and evictions interleave; at capacity it denies
//! new keys without consuming anything and never exceeds its bound.

use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;
use weir_gcra::Gcra;
use weir_keyed::{AtCapacity, Keyed, KeyedConfig};
use weir_rl_core::{DenyReason, ManualClock, Quota};

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check { key: u8, n: u64 },
    Sweep,
    SweepAll,
    Remove(u8),
}

fn ops(keys: u8) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u64..400_000_000).prop_map(Op::Advance),
            10 => (0..keys, 1u64..4).prop_map(|(key, n)| Op::Check { key, n }),
            2 => Just(Op::Sweep),
            1 => Just(Op::SweepAll),
            1 => (0..keys).prop_map(Op::Remove),
        ],
        1..200,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn eviction_never_changes_a_decision(burst in 1u64..5, ops in ops(12)) {
        let quota = Quota::per_second(4).unwrap().with_burst(burst).unwrap();
        let clock = ManualClock::new();
        let config = KeyedConfig::builder(10_000).sweep_every(1).sweep_from(0).build().unwrap();
        let store: Keyed<u8, _, _> = Keyed::gcra_with_clock(quota, config, clock.clone());
        let mut model: HashMap<u8, Gcra<ManualClock>> = HashMap::new();
        for op in ops {
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { key, n } => {
                    let expected = model.entry(key).or_insert_with(|| Gcra::with_clock(quota, clock.clone())).check_n(n);
                    let actual = store.check_n(&key, n);
                    match (expected, actual) {
                        (Ok(e), Ok(a)) => {
                            prop_assert_eq!(a.is_allowed(), e.is_allowed());
                            prop_assert_eq!(a.retry_after(), e.retry_after());
                            prop_assert_eq!(a.remaining(), e.remaining());
                        }
                        (Err(e), Err(a)) => prop_assert_eq!(a, e),
                        (e, a) => prop_assert!(false, "model {:?}, store {:?}", e, a),
                    }
                }
                Op::Sweep => { store.sweep(); }
                Op::SweepAll => { store.sweep_all(); }
                Op::Remove(key) => {
                    store.remove(&key);
                    model.remove(&key);
                }
            }
            prop_assert!(store.len() <= model.len());
        }
    }

    #[test]
    fn at_capacity_new_keys_are_denied_without_consuming(burst in 1u64..4, ops in ops(40)) {
        let quota = Quota::per_second(4).unwrap().with_burst(burst).unwrap();
        let clock = ManualClock::new();
        let config = KeyedConfig::builder(6).at_capacity(AtCapacity::EvictIdle).build().unwrap();
        let store: Keyed<u8, _, _> = Keyed::gcra_with_clock(quota, config, clock.clone());
        let mut model: HashMap<u8, Gcra<ManualClock>> = HashMap::new();
        for op in ops {
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { key, n } => {
                    let n = n.min(burst);
                    let actual = store.check_n(&key, n).unwrap();
                    if actual.deny_reason() == Some(DenyReason::KeyCapacity) {
                        prop_assert_eq!(store.len(), 6);
                        continue; // the key's state is untouched: the model is not charged
                    }
                    let expected = model.entry(key).or_insert_with(|| Gcra::with_clock(quota, clock.clone())).check_n(n).unwrap();
                    prop_assert_eq!(actual.is_allowed(), expected.is_allowed(), "key {}", key);
                }
                Op::Sweep => { store.sweep(); }
                Op::SweepAll => { store.sweep_all(); }
                Op::Remove(key) => {
                    store.remove(&key);
                    model.remove(&key);
                }
            }
            prop_assert!(store.len() <= 6);
        }
    }
}
