//! Keys whose `Hash`, `Eq` or `Clone` panic on their k-th call, for every k, through
//! every operation that runs user code on keys: insertion (with index rebuilds), a
//! sweep, `remove`, promotion to hot mode and the checks of hot keys. A panicking
//! key may fail its own call; afterwards the store must hold exactly what it says:
//! `len()` equals what iteration finds, every one of the `max_keys` places (and
//! every hot slot) is usable, and every key the store took is dropped exactly once.
//!
//! A small version runs under miri (`MIRIFLAGS=-Zmiri-permissive-provenance
//! cargo +nightly miri test -p weir-keyed --test panicking_keys`), which also
//! checks that nothing leaks and nothing is dropped twice.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::time::Duration;
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{AtCapacity, HotKeyMode, HotKeys, Keyed, KeyedConfig, NoHotKeys};
use weir_rl_core::{DenyReason, ManualClock, Quota};

/// Places in the stores below (one shard): enough for several index rebuilds
/// (under miri, one: the smallest index is rebuilt at its 15th key).
const MAX_KEYS: u64 = if cfg!(miri) { 16 } else { 64 };
/// Keys the scenarios work on.
const KEYS: u64 = if cfg!(miri) { 15 } else { 40 };
/// Which k are tried: every one, or under miri every third (from 1, and always
/// the last, which runs the scenario through).
const K_STEP: u64 = if cfg!(miri) { 3 } else { 1 };
/// Hot slots in the hot stores.
const HOT_SLOTS: usize = 4;

thread_local! {
    /// Calls of user code on keys until the one that panics (0: none panics).
    static COUNTDOWN: Cell<u64> = const { Cell::new(0) };
    /// Which of `Hash`, `Eq` and `Clone` count down.
    static ARMED: Cell<Armed> = const { Cell::new(Armed::Hash) };
    /// The serial numbers of the keys alive now (made and not yet dropped).
    static ALIVE: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
    static NEXT_SERIAL: Cell<u64> = const { Cell::new(0) };
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Armed {
    Hash,
    Eq,
    Clone,
}

/// The message of the panics these keys raise.
const PANIC: &str = "a key's user code panics on its k-th call";

fn tick(what: Armed) {
    if ARMED.get() != what {
        return;
    }
    let left = COUNTDOWN.get();
    if left > 0 {
        COUNTDOWN.set(left - 1);
        if left == 1 {
            panic!("{PANIC}");
        }
    }
}

/// A key whose `Hash`, `Eq` or `Clone` (whichever is armed) panics on a chosen
/// call; each instance is tracked from its making to its drop.
#[derive(Debug)]
struct Key {
    id: u64,
    serial: u64,
}

impl Key {
    fn new(id: u64) -> Self {
        let serial = NEXT_SERIAL.get();
        NEXT_SERIAL.set(serial + 1);
        ALIVE.with_borrow_mut(|alive| alive.insert(serial));
        Self { id, serial }
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        tick(Armed::Hash);
        self.id.hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        tick(Armed::Eq);
        self.id == other.id
    }
}

impl Eq for Key {}

impl Clone for Key {
    fn clone(&self) -> Self {
        tick(Armed::Clone);
        Key::new(self.id)
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        let was_alive = ALIVE.with_borrow_mut(|alive| alive.remove(&self.serial));
        assert!(was_alive, "key {} (serial {}) dropped twice", self.id, self.serial);
    }
}

type Fixed = BuildHasherDefault<DefaultHasher>;
type Store<H> = Keyed<Key, GcraAlgorithm, ManualClock, Fixed, H>;
/// How to promote a key of a hot store (`None`: a store without hot keys).
type Promote<H> = Option<fn(&Store<H>, &Key) -> bool>;

/// One permit a second, a burst of 1; at most `MAX_KEYS` keys, new keys denied
/// when full (so that a lost place shows as a denial).
fn store(clock: &ManualClock) -> Store<NoHotKeys> {
    let algorithm = GcraAlgorithm::new(Quota::per_second(1).unwrap(), weir_rl_core::Nanos::ZERO);
    let config = KeyedConfig::builder(MAX_KEYS as usize).at_capacity(AtCapacity::Deny).build().unwrap();
    Keyed::with_hasher(algorithm, config, clock.clone(), Fixed::default())
}

fn hot_store(clock: &ManualClock) -> Store<HotKeys> {
    let lease = LeaseConfig::builder().stripes(2).lifetime(Duration::from_millis(1)).build().unwrap();
    store(clock).with_hot_keys(HotKeys::builder().lease(lease).max_hot_keys(HOT_SLOTS).build().unwrap())
}

/// What the store holds is what it says, all of it is usable, and every key it
/// took is dropped once: emptied by a sweep, refilled to its bound (and its hot
/// slots), and dropped.
fn assert_whole<H: HotKeyMode<GcraAlgorithm>>(store: Store<H>, clock: &ManualClock, hot: Promote<H>, what: &str) {
    let mut seen = 0;
    store.for_each(|_, _| seen += 1);
    assert_eq!(store.len(), seen, "{what}: len() says {} keys, iteration finds {seen}", store.len());
    clock.advance(Duration::from_secs(10));
    store.sweep_all();
    assert_eq!(store.len(), 0, "{what}: a sweep of idle keys left {} counted", store.len());
    let mut seen = 0;
    store.for_each(|_, _| seen += 1);
    assert_eq!(seen, 0, "{what}: a sweep of idle keys left {seen} stored");
    for id in 1_000..1_000 + MAX_KEYS {
        let decision = store.check(&Key::new(id));
        assert_ne!(
            decision.deny_reason(),
            Some(DenyReason::KeyCapacity),
            "{what}: place {} of {MAX_KEYS} lost",
            id - 1_000
        );
        assert!(decision.is_allowed());
    }
    assert_eq!(store.len(), MAX_KEYS as usize, "{what}");
    if let Some(promote) = hot {
        // Every hot slot is free again (the keys promoted before were swept).
        let promoted = (1_000..1_000 + HOT_SLOTS as u64).filter(|&id| promote(&store, &Key::new(id))).count();
        assert_eq!(promoted, HOT_SLOTS, "{what}: a hot slot leaked");
    }
    drop(store);
    let alive = ALIVE.with_borrow(|alive| alive.len());
    assert_eq!(alive, 0, "{what}: {alive} keys never dropped");
}

/// Runs `scenario` on a store set up by `setup`, with the `armed` user code
/// panicking on its k-th call, for k = 1, 2, … until the scenario runs to its end
/// without a panic; after each, the store must be whole.
fn each_panic<H: HotKeyMode<GcraAlgorithm>>(
    make: fn(&ManualClock) -> Store<H>,
    hot: Promote<H>,
    setup: impl Fn(&Store<H>, &ManualClock),
    scenario: impl Fn(&Store<H>, &ManualClock),
) {
    quiet_panics();
    for armed in [Armed::Hash, Armed::Eq, Armed::Clone] {
        for k in (1..).step_by(K_STEP as usize) {
            let clock = ManualClock::new();
            let store = make(&clock);
            setup(&store, &clock);
            ARMED.set(armed);
            COUNTDOWN.set(k);
            let ran = catch_unwind(AssertUnwindSafe(|| scenario(&store, &clock)));
            COUNTDOWN.set(0);
            if let Err(panic) = &ran {
                let message = panic.downcast_ref::<String>().map(String::as_str).unwrap_or("");
                assert_eq!(message, PANIC, "{armed:?} call {k}: another panic");
            }
            assert_whole(store, &clock, hot, &format!("{armed:?} panicking on call {k}"));
            if ran.is_ok() {
                break;
            }
        }
    }
}

/// Leaves the panics these keys raise out of the test output.
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<String>().map(String::as_str) != Some(PANIC) {
                previous(info);
            }
        }));
    });
}

fn fill<H: HotKeyMode<GcraAlgorithm>>(store: &Store<H>, _: &ManualClock) {
    for id in 0..KEYS {
        assert!(store.check(&Key::new(id)).is_allowed());
    }
}

#[test]
fn insertions_and_index_rebuilds() {
    each_panic(store, None, |_, _| {}, fill);
}

#[test]
fn a_sweep() {
    each_panic(store, None, fill, |store, clock| {
        clock.advance(Duration::from_secs(1));
        store.sweep_all();
    });
}

#[test]
fn a_partial_sweep_with_busy_keys() {
    each_panic(store, None, fill, |store, clock| {
        clock.advance(Duration::from_secs(1));
        for id in (0..KEYS).step_by(3) {
            let _ = store.check(&Key::new(id));
        }
        store.sweep_all();
        for id in (0..KEYS).step_by(2) {
            let _ = store.check(&Key::new(id));
        }
    });
}

#[test]
fn removals() {
    each_panic(store, None, fill, |store, _| {
        for id in 0..KEYS {
            assert!(store.remove(&Key::new(id)));
        }
    });
}

#[test]
fn promotions_checks_and_sweeps_of_hot_keys() {
    each_panic(hot_store, Some(|store, key| store.promote(key)), fill, |store, clock| {
        for id in 0..HOT_SLOTS as u64 {
            store.promote(&Key::new(id));
        }
        for id in 0..HOT_SLOTS as u64 + 2 {
            let _ = store.check(&Key::new(id));
        }
        store.remove(&Key::new(0));
        clock.advance(Duration::from_secs(1));
        store.sweep_all();
        store.promote(&Key::new(1));
    });
}
