//! `Keyed::check`'s inlined fast path (the lookup, the state's check, the return)
//! against what can happen between its lookup and its check: the store's clock is
//! read once, after the lookup and before the state's check, so a hook clock runs
//! a sweep, a removal or a promotion exactly there. Each check is decided once: no
//! unit taken twice, none lost.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::HookClock;
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{AtCapacity, HotKeyMode, HotKeys, KeyHasher, Keyed, KeyedConfig};
use weir_rl_core::{DenyReason, ManualClock, Quota};

type Plain = Keyed<u64, GcraAlgorithm, HookClock>;
type Hot = Keyed<u64, GcraAlgorithm, HookClock, KeyHasher, HotKeys>;

fn quota(burst: u64) -> Quota {
    Quota::per_second(10).and_then(|q| q.with_burst(burst)).expect("a valid quota")
}

fn plain(clock: &HookClock, burst: u64) -> Arc<Plain> {
    Arc::new(Keyed::gcra_with_clock(quota(burst), KeyedConfig::builder(100).build().expect("a config"), clock.clone()))
}

fn hot(clock: &HookClock, burst: u64) -> Arc<Hot> {
    let lease = LeaseConfig::builder().stripes(1).max_lease(1).lifetime(Duration::from_millis(1)).build();
    let hot = HotKeys::builder().lease(lease.expect("a lease")).build().expect("hot keys");
    Arc::new(
        Keyed::gcra_with_clock(quota(burst), KeyedConfig::builder(100).build().expect("a config"), clock.clone())
            .with_hot_keys(hot),
    )
}

/// Arms `clock` to run `between` at the next check's one reading (between its
/// lookup and its state's check); the flag says it ran.
fn between_lookup_and_check(clock: &HookClock, between: impl FnOnce() + Send + 'static) -> Arc<AtomicBool> {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    clock.arm(1, move || {
        between();
        flag.store(true, Ordering::SeqCst);
    });
    ran
}

/// The found state is swept (retired, unlinked) between the lookup and its check:
/// denied on the retired state, retried on a fresh one, admitted once.
#[test]
fn a_state_swept_between_lookup_and_check_is_retried_on_a_fresh_state() {
    let clock = HookClock::new();
    let store = plain(&clock, 2);
    assert!(store.check(&1).is_allowed());
    clock.inner.advance(Duration::from_secs(1)); // idle
    let sweeper = store.clone();
    let ran = between_lookup_and_check(&clock, move || assert_eq!(sweeper.sweep_all(), 1));
    let decision = store.check(&1);
    assert!(ran.load(Ordering::SeqCst), "the hook ran in the check's reading");
    assert!(decision.is_allowed(), "{decision:?}");
    assert_eq!(decision.remaining(), 1, "decided once, on a fresh state");
    assert_eq!(store.len(), 1);
    assert!(store.check(&1).is_allowed());
    assert!(store.check(&1).is_denied(), "the fresh state's burst of 2 is spent");
}

/// Same, and the key is inserted again and spent (by a check inside the hook)
/// before the retry looks it up: the retry is a real denial.
#[test]
fn a_retry_after_a_sweep_decides_on_the_keys_new_state() {
    let clock = HookClock::new();
    let store = plain(&clock, 1);
    assert!(store.check(&1).is_allowed());
    clock.inner.advance(Duration::from_secs(1));
    let other = store.clone();
    let ran = between_lookup_and_check(&clock, move || {
        assert_eq!(other.sweep_all(), 1);
        assert!(other.check(&1).is_allowed()); // the key's new state, spent
    });
    assert!(store.check(&1).is_denied(), "burst 1: the new state was spent in the hook");
    assert!(ran.load(Ordering::SeqCst));
    assert_eq!(store.len(), 1);
}

/// A removal (a reset) between the lookup and the check of a spent key: the
/// check is decided once, on the old state or on a fresh one, so the reset's burst
/// of 1 is admitted once between it and the next check.
#[test]
fn a_state_removed_between_lookup_and_check_is_decided_once() {
    let clock = HookClock::new();
    let store = plain(&clock, 1);
    assert!(store.check(&1).is_allowed()); // spent
    removal_between_lookup_and_check(&clock, &store);
}

/// Removes key 1 of `store` (spent, burst 1) between the next check's lookup and
/// its state's check: that check and the one after admit once between them.
fn removal_between_lookup_and_check<H: HotKeyMode<GcraAlgorithm>>(
    clock: &HookClock,
    store: &Arc<Keyed<u64, GcraAlgorithm, HookClock, KeyHasher, H>>,
) {
    let remover = store.clone();
    let ran = between_lookup_and_check(clock, move || assert!(remover.remove(&1)));
    let racing = store.check(&1);
    assert!(ran.load(Ordering::SeqCst), "the hook ran in the check's reading");
    let after = store.check(&1);
    assert_eq!(racing.is_allowed() as u32 + after.is_allowed() as u32, 1, "{racing:?} {after:?}");
}

/// A hot key swept (its bucket, then its state retired) between the lookup and
/// the check: retried on a fresh state, which is not hot.
#[test]
fn a_hot_key_swept_between_lookup_and_check_is_retried() {
    let clock = HookClock::new();
    let store = hot(&clock, 2);
    assert!(store.promote(&1));
    assert!(store.check(&1).is_allowed());
    clock.inner.advance(Duration::from_secs(1)); // idle, its lease expired
    let sweeper = store.clone();
    let ran = between_lookup_and_check(&clock, move || assert_eq!(sweeper.sweep_all(), 1));
    let decision = store.check(&1);
    assert!(ran.load(Ordering::SeqCst), "the hook ran in the check's reading");
    assert!(decision.is_allowed(), "{decision:?}");
    assert_eq!(store.len(), 1);
    assert!(!store.is_hot(&1), "the fresh state is not hot");
    assert!(store.check(&1).is_allowed());
    assert!(store.check(&1).is_denied());
}

/// The key is promoted between the lookup and the check: its state denies
/// (promoted), and the check is decided on the hot stripes, once.
#[test]
fn a_key_promoted_between_lookup_and_check_is_decided_on_its_stripes() {
    let clock = HookClock::new();
    let store = hot(&clock, 3);
    assert!(store.check(&1).is_allowed()); // 2 left
    let promoter = store.clone();
    let ran = between_lookup_and_check(&clock, move || assert!(promoter.promote(&1)));
    assert!(store.check(&1).is_allowed()); // 1 left
    assert!(ran.load(Ordering::SeqCst));
    assert!(store.is_hot(&1));
    assert!(store.check(&1).is_allowed()); // 0 left
    assert!(store.check(&1).is_denied(), "a burst of 3 at a frozen clock");
}

/// A hot key removed between the lookup and the check (its stripes dropped, its
/// state orphaned): decided once, and the key is stored once.
#[test]
fn a_hot_key_removed_between_lookup_and_check_is_decided_once() {
    let clock = HookClock::new();
    let store = hot(&clock, 1);
    assert!(store.promote(&1));
    assert!(store.check(&1).is_allowed()); // spent
    removal_between_lookup_and_check(&clock, &store);
    assert_eq!(store.len(), 1);
}

/// A full store that denies new keys: a new key's `check` (the cold path) is a
/// capacity denial until a sweep makes room.
#[test]
fn a_full_store_denies_a_new_key_until_a_sweep_makes_room() {
    let clock = HookClock::new();
    let config = KeyedConfig::builder(1).at_capacity(AtCapacity::Deny).build().expect("a config");
    let store: Plain = Keyed::gcra_with_clock(quota(1), config, clock.clone());
    assert!(store.check(&1).is_allowed());
    assert_eq!(store.check(&2).deny_reason(), Some(DenyReason::KeyCapacity));
    clock.inner.advance(Duration::from_secs(1));
    assert_eq!(store.sweep_all(), 1);
    assert!(store.check(&2).is_allowed());
    assert!(store.check(&2).is_denied());
    assert_eq!(store.check(&3).deny_reason(), Some(DenyReason::KeyCapacity));
}

/// A key whose `Clone` panics at a missing key's first check (the clone the cold
/// path makes outside the guard): nothing is inserted, the store stays usable,
/// and the key is inserted at its next check.
#[test]
fn a_panicking_clone_in_the_cold_path_leaves_the_store_whole() {
    use std::cell::Cell;
    thread_local!(static PANIC_CLONE: Cell<bool> = const { Cell::new(false) });
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct Key(u64);
    impl Clone for Key {
        fn clone(&self) -> Self {
            assert!(!PANIC_CLONE.get(), "a panicking clone");
            Key(self.0)
        }
    }
    let config = KeyedConfig::builder(10).build().expect("a config");
    let store: Keyed<Key, GcraAlgorithm, ManualClock> = Keyed::gcra_with_clock(quota(1), config, ManualClock::new());
    PANIC_CLONE.set(true);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.check(&Key(1))));
    PANIC_CLONE.set(false);
    assert!(unwound.is_err());
    assert_eq!(store.len(), 0, "nothing inserted");
    assert!(store.check(&Key(1)).is_allowed());
    assert!(store.check(&Key(1)).is_denied());
    assert_eq!(store.len(), 1);
    assert!(store.remove(&Key(1)));
    assert!(store.check(&Key(1)).is_allowed());
}
