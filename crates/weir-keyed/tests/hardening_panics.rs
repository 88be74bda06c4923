//! Keys that all hash alike under the store's hasher (so that their shard, and
//! the hot keys' shard, harden: their indexes are rebuilt by the strong hash), and
//! whose `Hash`, `Eq` or `Clone` panic on their k-th call, for every k: also
//! inside the rebuild that hardens, and inside the strong hash. Afterwards the
//! store must hold exactly what it says (see `panicking_keys.rs`).

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::time::Duration;
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{AtCapacity, HotKeyMode, HotKeys, Keyed, KeyedConfig, NoHotKeys};
use weir_rl_core::{DenyReason, ManualClock, Quota};

/// Places in the stores below (one shard).
const MAX_KEYS: u64 = 128;
/// Keys the scenarios work on: the index rebuilt at the 85th holds 84 colliding
/// keys, and hardens.
const KEYS: u64 = 100;
/// Which k are tried: every one in optimized builds (CI runs this test so, beside
/// the flood test), every 9th in debug ones (about 9 s instead of 80).
const K_STEP: u64 = if cfg!(debug_assertions) { 9 } else { 1 };
/// Hot slots in the hot stores: enough for the hot keys' shard to harden.
const HOT_SLOTS: usize = 100;

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

/// Every key hashes alike under the store's own hasher.
#[derive(Clone, Copy, Default)]
struct Fixed;

impl std::hash::BuildHasher for Fixed {
    type Hasher = Constant;
    fn build_hasher(&self) -> Constant {
        Constant
    }
}

struct Constant;

impl Hasher for Constant {
    fn finish(&self) -> u64 {
        0x0123_4567_89ab_cdef
    }
    fn write(&mut self, _: &[u8]) {}
}

type Store<H> = Keyed<Key, GcraAlgorithm, ManualClock, Fixed, H>;
/// How to promote a key of a hot store (`None`: a store without hot keys).
type Promote<H> = Option<fn(&Store<H>, &Key) -> bool>;

/// One permit a second, a burst of 1; at most `MAX_KEYS` keys, new keys denied
/// when full (so that a lost place shows as a denial).
fn store(clock: &ManualClock) -> Store<NoHotKeys> {
    let algorithm = GcraAlgorithm::new(Quota::per_second(1).unwrap(), weir_rl_core::Nanos::ZERO);
    let config = KeyedConfig::builder(MAX_KEYS as usize).at_capacity(AtCapacity::Deny).build().unwrap();
    Keyed::with_hasher(algorithm, config, clock.clone(), Fixed)
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
        let promoted = (1_000..1_000 + HOT_SLOTS as u64)
            .filter(|&id| promote(&store, &Key::new(id)) || promote(&store, &Key::new(id)))
            .count();
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
fn insertions_through_the_hardening_rebuild() {
    each_panic(store, None, |_, _| {}, fill);
}

#[test]
fn a_partial_sweep_and_compaction_of_a_hardened_shard() {
    each_panic(store, None, fill, |store, clock| {
        clock.advance(Duration::from_secs(1));
        for id in (0..KEYS).step_by(4) {
            let _ = store.check(&Key::new(id));
        }
        store.sweep_all();
        for id in (0..KEYS).step_by(2) {
            let _ = store.check(&Key::new(id));
        }
    });
}

#[test]
fn removals_from_a_hardened_shard() {
    each_panic(store, None, fill, |store, _| {
        for id in 0..KEYS {
            assert!(store.remove(&Key::new(id)));
        }
    });
}

#[test]
fn promotions_that_harden_the_hot_keys_shard() {
    each_panic(hot_store, Some(|store, key| store.promote(key)), fill, |store, clock| {
        for id in 0..90 {
            store.promote(&Key::new(id));
        }
        for id in 0..4 {
            let _ = store.check(&Key::new(id));
        }
        store.remove(&Key::new(0));
        clock.advance(Duration::from_secs(1));
        store.sweep_all();
        store.promote(&Key::new(1));
    });
}

#[test]
fn the_scenarios_harden_both_shards() {
    let clock = ManualClock::new();
    let store = hot_store(&clock);
    fill(&store, &clock);
    assert_eq!((store.hardened_shards().keys, store.hardened_shards().hot_keys), (1, false));
    for id in 0..90 {
        store.promote(&Key::new(id));
    }
    assert_eq!((store.hardened_shards().keys, store.hardened_shards().hot_keys), (1, true));
}
