//! Hot keys: a key moved to lease stripes keeps its state, stays within the leased
//! bound, and is swept like any idle key.

use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weir_gcra::{Gcra, GcraAlgorithm, LeaseConfig};
use weir_keyed::{HotKeys, Keyed, KeyedConfig, KeyedConfigError};
use weir_rl_core::{ManualClock, Quota};

/// A GCRA store in hot-key mode.
type Hot<C> = Keyed<u64, GcraAlgorithm, C, weir_keyed::KeyHasher, HotKeys>;

fn store(quota: Quota, lease: LeaseConfig, clock: &ManualClock) -> Hot<ManualClock> {
    Keyed::gcra_with_clock(quota, KeyedConfig::builder(1_000).build().unwrap(), clock.clone())
        .with_hot_keys(HotKeys::builder().lease(lease).build().unwrap())
}

#[test]
fn promotion_carries_the_state_over() {
    let clock = ManualClock::new();
    let s = store(Quota::per_second(10).unwrap(), LeaseConfig::builder().stripes(4).build().unwrap(), &clock);
    assert!(s.check_n(&1, 7).unwrap().is_allowed()); // 3 left
    assert!(!s.is_hot(&1));
    assert!(s.promote(&1));
    assert!(s.is_hot(&1));
    assert_eq!(s.snapshot(&1).remaining(), 3, "the hot bucket starts where the key was");
    let admitted = (0..20).filter(|_| s.check(&1).is_allowed()).count();
    assert_eq!(admitted, 3, "leases shrink to 1 near the limit: exact");
    clock.advance(Duration::from_millis(100));
    assert!(s.check(&1).is_allowed());
    assert!(!s.is_hot(&2) && s.check(&2).is_allowed(), "other keys are unaffected");
}

#[test]
fn an_idle_hot_key_is_swept() {
    let clock = ManualClock::new();
    let lease = LeaseConfig::builder().stripes(2).lifetime(Duration::from_millis(1)).build().unwrap();
    let s = store(Quota::per_second(1_000).unwrap(), lease, &clock);
    assert!(s.promote(&9));
    for _ in 0..50 {
        assert!(s.check(&9).is_allowed());
    }
    assert_eq!(s.sweep_all(), 0, "in use");
    clock.advance(Duration::from_secs(2)); // refilled, leases long expired
    assert_eq!(s.sweep_all(), 1);
    assert!(s.is_empty() && !s.is_hot(&9));
    assert!(s.check_n(&9, 1_000).unwrap().is_allowed(), "back as a fresh, exact key");
}

#[test]
fn removing_a_hot_key_drops_its_stripes() {
    let clock = ManualClock::new();
    let s = store(Quota::per_second(10).unwrap(), LeaseConfig::builder().stripes(2).build().unwrap(), &clock);
    assert!(s.promote(&5));
    assert!(s.check_n(&5, 10).unwrap().is_allowed());
    assert!(s.remove(&5));
    assert!(!s.is_hot(&5));
    assert!(s.check_n(&5, 10).unwrap().is_allowed(), "fresh after removal");
}

#[test]
fn hot_key_configuration_errors_are_typed() {
    assert_eq!(HotKeys::builder().after_lost_races(0).build().unwrap_err(), KeyedConfigError::ZeroLostRaces);
    assert_eq!(HotKeys::builder().max_hot_keys(0).build().unwrap_err(), KeyedConfigError::ZeroHotKeys);
    let e = HotKeys::builder().max_hot_keys(0).build().unwrap_err();
    assert!(e.to_string().contains("max_hot_keys"), "the error names the option: {e}");
    assert_eq!(HotKeys::builder().build(), Ok(HotKeys::default()));
}

#[test]
fn at_most_max_hot_keys_are_hot() {
    let clock = ManualClock::new();
    let hot =
        HotKeys::builder().lease(LeaseConfig::builder().stripes(2).build().unwrap()).max_hot_keys(3).build().unwrap();
    let s = Keyed::<u64, _, _>::gcra_with_clock(
        Quota::per_second(10).unwrap(),
        KeyedConfig::builder(100).build().unwrap(),
        clock,
    )
    .with_hot_keys(hot);
    let promoted = (0..10u64).filter(|k| s.promote(k)).count();
    assert_eq!(promoted, 3);
}

/// Below `sweep_from`, insertions still pace sweeps while every hot slot is taken,
/// so a hot key gone idle gives its slot to the next key that needs one.
#[test]
fn idle_hot_keys_free_their_slots_in_a_sparse_store() {
    let clock = ManualClock::new();
    let lease = LeaseConfig::builder().stripes(2).lifetime(Duration::from_millis(1)).build().unwrap();
    let hot = HotKeys::builder().lease(lease).max_hot_keys(2).build().unwrap();
    let s: Hot<ManualClock> = Keyed::gcra_with_clock(
        Quota::per_second(1_000).unwrap(),
        KeyedConfig::builder(10_000).build().unwrap(),
        clock.clone(),
    )
    .with_hot_keys(hot);
    assert!(s.promote(&1) && s.promote(&2));
    assert!(!s.promote(&3), "both slots are taken");
    clock.advance(Duration::from_secs(1)); // both hot keys idle, their leases expired
    // A sweep of one shard every 64 insertions: 4 100 new keys take the sweep round
    // all 23 shards, wherever the hash put keys 1 and 2 (1 900, before, left a
    // shard or two unswept, so the test failed about once in 200 runs); still below
    // sweep_from (5 000 keys).
    for k in 100..4_200u64 {
        let _ = s.check(&k);
    }
    assert!(s.promote(&3), "a sweep freed an idle hot key's slot");
}

#[test]
fn eight_threads_on_one_hot_key_at_a_frozen_clock_never_exceed_the_burst() {
    for promote_first in [true, false] {
        let clock = ManualClock::new();
        let burst = 20_000;
        let lease = LeaseConfig::builder().stripes(8).max_lease(64).build().unwrap();
        let hot = HotKeys::builder().lease(lease).after_lost_races(1).build().unwrap();
        let s = Keyed::<u64, _, _>::gcra_with_clock(
            Quota::per_second(1).unwrap().with_burst(burst).unwrap(),
            KeyedConfig::builder(100).build().unwrap(),
            clock,
        )
        .with_hot_keys(hot);
        if promote_first {
            assert!(s.promote(&42));
        }
        let barrier = Barrier::new(8);
        let admitted = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    barrier.wait();
                    let mine = (0..burst).filter(|_| s.check(&42).is_allowed()).count() as u64;
                    admitted.fetch_add(mine, Ordering::Relaxed);
                });
            }
        });
        let admitted = admitted.into_inner();
        assert!(admitted <= burst, "admitted {admitted} > burst {burst} (promoted first: {promote_first})");
    }
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check { key: u8, n: u64 },
    Promote(u8),
    SweepAll,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// With leases of one permit a hot key is exact, so promotion (and sweeping hot
    /// keys) must never change a decision: the store decides as per-key `Gcra`s.
    #[test]
    fn promotion_never_changes_a_decision_when_leases_are_exact(
        burst in 1u64..6,
        ops in prop::collection::vec(prop_oneof![
            3 => (0u64..300_000_000).prop_map(Op::Advance),
            10 => (0u8..6, 1u64..4).prop_map(|(key, n)| Op::Check { key, n }),
            2 => (0u8..6).prop_map(Op::Promote),
            1 => Just(Op::SweepAll),
        ], 1..150),
    ) {
        let quota = Quota::per_second(5).unwrap().with_burst(burst).unwrap();
        let clock = ManualClock::new();
        let lease = LeaseConfig::builder().stripes(4).max_lease(1).lifetime(Duration::from_millis(1)).build().unwrap();
        let s = store(quota, lease, &clock);
        let mut model: HashMap<u8, Gcra<ManualClock>> = HashMap::new();
        for op in ops {
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { key, n } => {
                    let n = n.min(burst);
                    let expected = model.entry(key).or_insert_with(|| Gcra::with_clock(quota, clock.clone())).check_n(n).unwrap();
                    let actual = s.check_n(&(key as u64), n).unwrap();
                    prop_assert_eq!(actual.is_allowed(), expected.is_allowed(), "key {}", key);
                }
                Op::Promote(key) => {
                    model.entry(key).or_insert_with(|| Gcra::with_clock(quota, clock.clone()));
                    s.promote(&(key as u64));
                }
                Op::SweepAll => { s.sweep_all(); }
            }
        }
    }
}

/// An independent sequential reference: the leaky bucket as a meter (equivalent to
/// GCRA), the capacity in use in ns, draining with time; no ticks, no CAS.
#[derive(Debug, Clone, Copy)]
struct Meter {
    interval_ns: i128,
    burst: i128,
    used_ns: i128,
    last_ns: i128,
}

impl Meter {
    fn new(interval_ns: u64, burst: u64) -> Self {
        Self { interval_ns: interval_ns as i128, burst: burst as i128, used_ns: 0, last_ns: 0 }
    }
    fn check(&mut self, n: u64, now_ns: u64) -> bool {
        let now = now_ns as i128;
        self.used_ns = (self.used_ns - (now - self.last_ns)).max(0);
        self.last_ns = now;
        let cost = n as i128 * self.interval_ns;
        let admitted = self.used_ns + cost <= self.burst * self.interval_ns;
        if admitted {
            self.used_ns += cost;
        }
        admitted
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// With real leases (more than one permit each) a hot key over-admits, within
    /// the documented bound: each key's admissions, fed in order into a bucket of
    /// `burst + LeaseConfig::over_admission_bound` permits refilled at the quota's
    /// rate, always fit (over every interval, at most burst + bound + elapsed / T
    /// are admitted), however promotions, sweeps and lease expiries interleave.
    ///
    /// (Comparing running totals with an exact bucket fed the same requests is not
    /// this bound: a 3-permit request that the exact bucket denies for lack of one
    /// permit would count as 3 over.)
    #[test]
    fn hot_keys_over_admit_at_most_the_lease_bound(
        per_second in prop::sample::select(vec![5u64, 10, 100, 1_000, 10_000]),
        burst in 1u64..8,
        stripes in 1usize..5,
        max_lease in 2u64..9,
        lifetime_us in 5u64..50_000,
        ops in prop::collection::vec(prop_oneof![
            2 => (0u64..2_000_000).prop_map(Op::Advance),
            1 => (0u64..300_000_000).prop_map(Op::Advance),
            10 => (0u8..4, 1u64..4).prop_map(|(key, n)| Op::Check { key, n }),
            2 => (0u8..4).prop_map(Op::Promote),
            1 => Just(Op::SweepAll),
        ], 1..200),
    ) {
        let quota = Quota::per_second(per_second).unwrap().with_burst(burst).unwrap();
        let lease = LeaseConfig::builder().stripes(stripes).max_lease(max_lease).lifetime(Duration::from_micros(lifetime_us)).build().unwrap();
        let bound = lease.over_admission_bound(&quota);
        let clock = ManualClock::new();
        let s = store(quota, lease, &clock);
        let mut now_ns = 0u64;
        // Per key: a bucket of burst + bound that every admission must fit.
        let mut keys: HashMap<u8, Meter> = HashMap::new();
        for op in ops {
            match op {
                Op::Advance(ns) => {
                    clock.advance(Duration::from_nanos(ns));
                    now_ns += ns;
                }
                Op::Check { key, n } => {
                    let n = n.min(burst);
                    let meter = keys.entry(key).or_insert(Meter::new(1_000_000_000 / per_second, burst + bound));
                    if s.check_n(&(key as u64), n).unwrap().is_allowed() {
                        prop_assert!(
                            meter.check(n, now_ns),
                            "key {}: {} admitted at {} ns beyond the burst {} + bound {}", key, n, now_ns, burst, bound
                        );
                    }
                }
                Op::Promote(key) => {
                    s.promote(&(key as u64));
                }
                Op::SweepAll => {
                    s.sweep_all();
                }
            }
        }
    }
}

// Regressions: races placed exactly with a hook clock.

mod support;
use support::HookClock;

#[test]
fn a_remove_racing_with_a_promotion_leaks_no_hot_slot() {
    let clock = HookClock::new();
    let hot =
        HotKeys::builder().lease(LeaseConfig::builder().stripes(2).build().unwrap()).max_hot_keys(1).build().unwrap();
    let s: &'static Hot<HookClock> = Box::leak(Box::new(
        Keyed::gcra_with_clock(
            Quota::per_second(10).unwrap(),
            KeyedConfig::builder(100).build().unwrap(),
            clock.clone(),
        )
        .with_hot_keys(hot),
    ));
    assert!(s.check(&1).is_allowed());
    // The promotion reads the clock once, to create the stripes: an operator's
    // remove(&1) lands right there, before the stripes enter the hot map.
    clock.arm(1, move || assert!(s.remove(&1)));
    assert!(!s.promote(&1), "the promoted state was removed: the key is not hot");
    assert!(!s.is_hot(&1));
    assert!(s.check(&1).is_allowed());
    assert!(s.promote(&2), "the one hot-key slot is free again");
}

#[test]
fn a_zero_cost_check_of_a_hot_key_reports_its_hot_bucket_and_stores_nothing_new() {
    let s: Hot<ManualClock> = Keyed::gcra_with_clock(
        Quota::per_second(10).unwrap(),
        KeyedConfig::builder(100).build().unwrap(),
        ManualClock::new(),
    )
    .with_hot_keys(HotKeys::builder().lease(LeaseConfig::builder().stripes(2).build().unwrap()).build().unwrap());
    assert!(s.promote(&7));
    assert!(s.check_n(&7, 3).unwrap().is_allowed());
    let d = s.check_n(&7, 0).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), s.snapshot(&7).remaining());
    assert!(d.reset_after() < Duration::from_secs(2));
    assert!(s.check_n(&8, 0).unwrap().is_allowed());
    assert_eq!(s.len(), 1, "a zero-cost check stores nothing");
}

#[test]
fn sweeping_on_every_insertion_never_evicts_a_key_before_its_first_check() {
    let config = KeyedConfig::builder(100).sweep_every(1).sweep_from(0).build().unwrap(); // one shard
    let s: &'static Keyed<u64, GcraAlgorithm, ManualClock> =
        Box::leak(Box::new(Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config, ManualClock::new())));
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let admitted = (0..50u64).all(|k| s.check(&k).is_allowed());
        let _ = done.send(admitted);
    });
    // Bounded wait for a result that needs no timing, only termination.
    assert_eq!(finished.recv_timeout(Duration::from_secs(60)), Ok(true));
}

#[test]
fn a_sweeper_with_a_zero_interval_is_an_error() {
    let s = std::sync::Arc::new(Keyed::<u64, _, _>::gcra_with_clock(
        Quota::per_second(1).unwrap(),
        KeyedConfig::builder(10).build().unwrap(),
        ManualClock::new(),
    ));
    assert!(matches!(s.spawn_sweeper(Duration::ZERO), Err(weir_keyed::SweeperError::ZeroInterval)));
}

/// A store of burst 10 at a frozen clock, with hot keys, on a hook clock.
fn hooked_store(clock: &HookClock) -> &'static Hot<HookClock> {
    let quota = Quota::per_second(10).unwrap();
    Box::leak(Box::new(
        Keyed::gcra_with_clock(quota, KeyedConfig::builder(100).build().unwrap(), clock.clone()).with_hot_keys(
            HotKeys::builder().lease(LeaseConfig::builder().stripes(2).build().unwrap()).build().unwrap(),
        ),
    ))
}

/// A promotion of state S0 delayed past S0's eviction, the key's return as S1 and
/// S1's own promotion must leave S1's stripes alone: dropping them would leave S1
/// promoted without a bucket, and the key's next check would start from a fresh,
/// full one.
#[test]
fn a_delayed_promotion_of_a_swept_state_leaves_the_new_states_stripes_alone() {
    let clock = HookClock::new();
    let s = hooked_store(&clock);
    assert!(s.check(&1).is_allowed()); // S0
    clock.inner.advance(Duration::from_secs(1)); // S0 is idle; the clock stays here
    // The promotion of S0 reads the clock once, to create its stripes: right there,
    // S0 is swept, the key comes back as S1, S1 turns hot and spends its burst.
    clock.arm(1, move || {
        assert_eq!(s.sweep_all(), 1);
        assert!(s.check(&1).is_allowed()); // S1
        assert!(s.promote(&1));
        let admitted = (0..20).filter(|_| s.check(&1).is_allowed()).count();
        assert_eq!(admitted, 9);
    });
    assert!(!s.promote(&1), "S0 is gone: the delayed promotion gives up");
    assert!(s.is_hot(&1), "S1 keeps its stripes");
    let admitted = (0..20).filter(|_| s.check(&1).is_allowed()).count();
    assert_eq!(admitted, 0, "at a frozen clock the key's burst of 10 is spent");
}

/// The same with an operator's `remove` in place of the sweep.
#[test]
fn a_delayed_promotion_of_a_removed_state_leaves_the_new_states_stripes_alone() {
    let clock = HookClock::new();
    let s = hooked_store(&clock);
    assert!(s.check(&1).is_allowed()); // S0
    clock.arm(1, move || {
        assert!(s.remove(&1));
        assert!(s.promote(&1)); // S1, inserted and promoted
        let admitted = (0..20).filter(|_| s.check(&1).is_allowed()).count();
        assert_eq!(admitted, 10);
    });
    assert!(!s.promote(&1), "S0 is gone: the delayed promotion gives up");
    assert!(s.is_hot(&1), "S1 keeps its stripes");
    let admitted = (0..20).filter(|_| s.check(&1).is_allowed()).count();
    assert_eq!(admitted, 0, "at a frozen clock the key's burst of 10 is spent");
}

/// A lower quota set on a store with hot keys gives back what the hot keys' leases
/// hold, as `LeasedGcra::set_quota` does: the new quota is kept within its own lease
/// bound, however large the leases taken under the old one.
#[test]
fn a_quota_change_gives_back_the_hot_keys_leases() {
    let clock = ManualClock::new();
    let lease = LeaseConfig::builder().stripes(1).max_lease(64).build().unwrap();
    let store = Keyed::gcra_with_clock(
        Quota::per_second(1_000_000).unwrap().with_burst(100).unwrap(),
        KeyedConfig::builder(100).build().unwrap(),
        clock.clone(),
    )
    .with_hot_keys(HotKeys::builder().lease(lease).build().unwrap());
    assert!(store.promote(&1));
    assert!(store.check(&1).is_allowed()); // a lease of 64 taken, one spent
    let quota = Quota::per_hour(1).unwrap();
    store.set_quota(quota);
    let bound = lease.over_admission_bound(&quota);
    let admitted = (0..100).filter(|_| store.check(&1).is_allowed()).count() as u64;
    assert!(
        admitted <= quota.burst() + bound,
        "{admitted} admitted after the change, at most {} + {bound}",
        quota.burst()
    );
}
