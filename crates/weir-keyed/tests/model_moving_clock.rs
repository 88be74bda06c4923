//! Property test: random checks, refunds, quota changes, sweeps, removals and
//! evictions (a full store making room), some checks stalled right after a clock
//! reading while the time moves on and another operation (a sweep, a removal, a
//! check of the same or another key) runs in between. Every decision is asserted
//! against an independent reference per key (a GCRA state that is never evicted)
//! fed the reading the store decided at, which must be one the clock gave during
//! the call: the store decides each key exactly as its own limiter would.

use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_gcra::{GcraAlgorithm, GcraState};
use weir_keyed::{AtCapacity, Keyed, KeyedConfig};
use weir_rl_core::{Algorithm, Clock, Decision, DenyReason, InsufficientCapacity, Nanos, Quota};

mod support;
use support::HookClock;

type Store = Keyed<u8, GcraAlgorithm, HookClock>;

/// What runs while a check is stalled after its clock reading.
#[derive(Debug, Clone)]
enum Meanwhile {
    SweepAll,
    Sweep,
    Remove(u8),
    Check { key: u8, n: u64 },
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check {
        key: u8,
        n: u64,
    },
    /// A check of `key` stalled right after its clock reading while the time moves
    /// `advance` ns and `meanwhile` runs.
    Stalled {
        key: u8,
        n: u64,
        advance: u64,
        meanwhile: Meanwhile,
    },
    /// Refunds `n` (at most what it took) of the key's last admission, once.
    Refund {
        key: u8,
        n: u64,
    },
    SetQuota {
        per_second: u64,
        burst: u64,
    },
    Sweep,
    SweepAll,
    Remove(u8),
}

const KEYS: u8 = 6;

fn meanwhile() -> impl Strategy<Value = Meanwhile> {
    prop_oneof![
        3 => Just(Meanwhile::SweepAll),
        1 => Just(Meanwhile::Sweep),
        1 => (0..KEYS).prop_map(Meanwhile::Remove),
        3 => (0..KEYS, 1u64..5).prop_map(|(key, n)| Meanwhile::Check { key, n }),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u64..1_500_000_000).prop_map(Op::Advance),
            8 => (0..KEYS, 1u64..5).prop_map(|(key, n)| Op::Check { key, n }),
            6 => (0..KEYS, 1u64..5, 0u64..2_000_000_000, meanwhile())
                .prop_map(|(key, n, advance, meanwhile)| Op::Stalled { key, n, advance, meanwhile }),
            2 => (0..KEYS, 1u64..5).prop_map(|(key, n)| Op::Refund { key, n }),
            1 => (1u64..8, 1u64..5).prop_map(|(per_second, burst)| Op::SetQuota { per_second, burst }),
            1 => Just(Op::Sweep),
            1 => Just(Op::SweepAll),
            1 => (0..KEYS).prop_map(Op::Remove),
        ],
        1..120,
    )
}

/// Whether the store held the stalled check's key once the check returned.
#[derive(Debug, Clone, Copy)]
struct Held(bool);

/// The references: one GCRA state per key, never evicted, under the same quota
/// changes; and each key's last admission (the store's and the reference's
/// decision, and its cost), to refund.
struct Model {
    algorithm: GcraAlgorithm,
    states: HashMap<u8, GcraState>,
    admissions: HashMap<u8, (Decision, Decision, u64)>,
    /// Store decisions that disagreed with the reference (asserted empty).
    mismatches: Vec<String>,
    /// The key of the check stalled now, and its reference state if a `remove` of
    /// that key ran meanwhile: the stalled check is decided on that state (it found
    /// or inserted it before the removal, see `Keyed::remove`; the key is then not
    /// stored after the call) or on a fresh one (it looked the key up after, and
    /// the key is stored).
    stalled: Option<(u8, Option<GcraState>)>,
}

impl Model {
    /// Checks the store's `actual` decision for `key` against the reference, at
    /// the reading the store decided at, which must lie in `span`.
    /// `stalled`: the call is the stalled check (not one that ran meanwhile).
    fn decide(
        &mut self,
        key: u8,
        n: u64,
        actual: Result<Decision, InsufficientCapacity>,
        span: (Nanos, Nanos),
        stalled: Option<Held>,
    ) {
        let removed = match stalled.and_then(|held| Some((held, self.stalled.take()?))) {
            // Held after the call: the check looked the key up after the removal and
            // decided (and left) a fresh state; else it decided the removed one.
            Some((Held(false), (_, Some(state)))) => Some(state),
            Some((Held(true), (_, Some(_)))) => {
                self.states.insert(key, self.algorithm.new_state());
                None
            }
            _ => None,
        };
        let on_removed = removed.is_some();
        let mut removed = removed;
        let state = match &mut removed {
            Some(state) => state,
            None => self.states.entry(key).or_insert_with(|| self.algorithm.new_state()),
        };
        let actual = match actual {
            Ok(actual) => actual,
            Err(error) => {
                // Only a cost above the limit is an error, at any reading.
                let expected = self.algorithm.check_n(state, n, &span.1);
                if !matches!(expected, Err(e) if e == error) {
                    self.mismatches.push(format!("key {key}, n {n}: store {error:?}, reference {expected:?}"));
                }
                return;
            }
        };
        if actual.deny_reason() == Some(DenyReason::KeyCapacity) {
            return; // a full store refused the key: nothing consumed, nothing to charge
        }
        let at = actual.decided_at();
        if at < span.0 || at > span.1 {
            self.mismatches.push(format!("key {key}: decided at {at:?}, outside the call's readings {span:?}"));
            return;
        }
        let same = |expected: &Decision| {
            expected.is_allowed() == actual.is_allowed()
                && expected.remaining() == actual.remaining()
                && expected.retry_after() == actual.retry_after()
                && expected.reset_after() == actual.reset_after()
        };
        let expected = self.algorithm.check_n(state, n, &at).unwrap();
        if same(&expected) {
            if actual.is_allowed() && !on_removed {
                self.admissions.insert(key, (actual, expected, n));
            }
            return;
        }
        self.mismatches.push(format!(
            "key {key}, n {n} at {at:?}: store {actual:?}, reference {expected:?} (a burst the key's own limiter would \
             not admit, or a denial it would not make)"
        ));
    }
}

fn run(max_keys: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let quota = Quota::per_second(4).unwrap().with_burst(3).unwrap();
    let clock = HookClock::new();
    let config =
        KeyedConfig::builder(max_keys).at_capacity(AtCapacity::EvictIdle).sweep_every(1).sweep_from(0).build().unwrap();
    let store: Arc<Store> = Arc::new(Keyed::gcra_with_clock(quota, config, clock.clone()));
    let model = Arc::new(Mutex::new(Model {
        algorithm: GcraAlgorithm::new(quota, clock.inner.now()),
        states: HashMap::new(),
        admissions: HashMap::new(),
        mismatches: Vec::new(),
        stalled: None,
    }));
    let time = clock.inner.clone();
    for op in ops {
        match op {
            Op::Advance(ns) => {
                time.advance(Duration::from_nanos(ns));
            }
            Op::Check { key, n } => {
                let start = time.now();
                let actual = store.check_n(&key, n);
                model.lock().unwrap().decide(key, n, actual, (start, time.now()), None);
            }
            Op::Stalled { key, n, advance, meanwhile } => {
                let (other, references, moving) = (store.clone(), model.clone(), time.clone());
                clock.arm_stale(1, move || {
                    let _ = moving.advance(Duration::from_nanos(advance));
                    match meanwhile {
                        Meanwhile::SweepAll => {
                            other.sweep_all();
                        }
                        Meanwhile::Sweep => {
                            other.sweep();
                        }
                        Meanwhile::Remove(key) => {
                            other.remove(&key);
                            let mut model = references.lock().unwrap();
                            let state = model.states.remove(&key).unwrap_or_else(|| model.algorithm.new_state());
                            model.admissions.remove(&key);
                            if let Some((stalled, removed)) = &mut model.stalled
                                && *stalled == key
                            {
                                *removed = Some(state);
                            }
                        }
                        Meanwhile::Check { key, n } => {
                            let start = moving.now();
                            let actual = other.check_n(&key, n);
                            references.lock().unwrap().decide(key, n, actual, (start, moving.now()), None);
                        }
                    }
                });
                model.lock().unwrap().stalled = Some((key, None));
                let start = time.now();
                let actual = store.check_n(&key, n);
                clock.arm(0, || {}); // disarmed, if the check never read the clock
                let end = time.now();
                let mut held = false;
                store.for_each(|stored, _| held |= *stored == key);
                model.lock().unwrap().decide(key, n, actual, (start, end), Some(Held(held)));
            }
            Op::Refund { key, n } => {
                let mut model = model.lock().unwrap();
                if let Some((actual, expected, taken)) = model.admissions.remove(&key) {
                    let n = n.min(taken);
                    let refunded = store.refund(&key, n, &actual);
                    let Model { algorithm, states, .. } = &mut *model;
                    let state = states.get(&key).expect("an admitted key has a reference");
                    let reference = algorithm.refund(state, n, &expected, &time);
                    prop_assert_eq!(
                        format!("{refunded:?}"),
                        format!("{reference:?}"),
                        "refund of {} for key {}",
                        n,
                        key
                    );
                }
            }
            Op::SetQuota { per_second, burst } => {
                let quota = Quota::per_second(per_second).unwrap().with_burst(burst).unwrap();
                store.set_quota(quota);
                model.lock().unwrap().algorithm.set_quota(quota);
            }
            Op::Sweep => {
                store.sweep();
            }
            Op::SweepAll => {
                store.sweep_all();
            }
            Op::Remove(key) => {
                store.remove(&key);
                let mut model = model.lock().unwrap();
                model.states.remove(&key);
                model.admissions.remove(&key);
            }
        }
        let model = model.lock().unwrap();
        prop_assert!(model.mismatches.is_empty(), "{}", model.mismatches.join("\n"));
        prop_assert!(store.len() <= max_keys);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 300 }))]

    /// Room for every key: evictions are sweeps (paced by every new key) and
    /// removals.
    #[test]
    fn every_decision_is_the_keys_own_with_a_moving_clock(ops in ops()) {
        run(1_000, ops)?;
    }

    /// Room for half the keys: new keys also evict idle ones to make room.
    #[test]
    fn every_decision_is_the_keys_own_in_a_full_store_with_a_moving_clock(ops in ops()) {
        run(KEYS as usize / 2, ops)?;
    }
}
