//! Keys whose `Hash`, `Eq` or `Clone` (whichever is armed) panic on a chosen call,
//! each instance tracked from its making to its drop, and the harness that runs a
//! scenario on a store with each call in turn panicking and then checks the store
//! whole: what `panicking_keys.rs` and `hardening_panics.rs` share (each with its
//! own sizes and hasher).

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::time::Duration;
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{AtCapacity, HotKeyMode, HotKeys, Keyed, KeyedConfig, NoHotKeys};
use weir_rl_core::{DenyReason, ManualClock, Quota};

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
pub struct Key {
    pub id: u64,
    serial: u64,
}

impl Key {
    pub fn new(id: u64) -> Self {
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

/// The sizes a test file runs its scenarios at.
#[derive(Clone, Copy)]
pub struct Sizes {
    /// Places in the stores (one shard).
    pub max_keys: u64,
    /// Keys the scenarios work on.
    pub keys: u64,
    /// Which k are tried: every `k_step`-th from 1 (and always the last, which
    /// runs the scenario through).
    pub k_step: u64,
    /// Hot slots in the hot stores.
    pub hot_slots: usize,
}

pub type Store<S, H> = Keyed<Key, GcraAlgorithm, ManualClock, S, H>;
/// How to promote a key of a hot store (`None`: a store without hot keys).
pub type Promote<S, H> = Option<fn(&Store<S, H>, &Key) -> bool>;

/// One permit a second, a burst of 1; at most `max_keys` keys, new keys denied
/// when full (so that a lost place shows as a denial).
pub fn store<S: BuildHasher + Clone + Default>(sizes: Sizes, clock: &ManualClock) -> Store<S, NoHotKeys> {
    let algorithm = GcraAlgorithm::new(Quota::per_second(1).unwrap(), weir_rl_core::Nanos::ZERO);
    let config = KeyedConfig::builder(sizes.max_keys as usize).at_capacity(AtCapacity::Deny).build().unwrap();
    Keyed::with_hasher(algorithm, config, clock.clone(), S::default())
}

/// `store` with `hot_slots` hot keys.
pub fn hot_store<S: BuildHasher + Clone + Default>(sizes: Sizes, clock: &ManualClock) -> Store<S, HotKeys> {
    let lease = LeaseConfig::builder().stripes(2).lifetime(Duration::from_millis(1)).build().unwrap();
    store(sizes, clock).with_hot_keys(HotKeys::builder().lease(lease).max_hot_keys(sizes.hot_slots).build().unwrap())
}

/// Checks keys 0 to `keys` in: each admitted.
pub fn fill<S: BuildHasher + Clone, H: HotKeyMode<GcraAlgorithm>>(sizes: Sizes, store: &Store<S, H>) {
    for id in 0..sizes.keys {
        assert!(store.check(&Key::new(id)).is_allowed());
    }
}

/// What the store holds is what it says, all of it is usable, and every key it
/// took is dropped once: emptied by a sweep, refilled to its bound (and its hot
/// slots), and dropped.
fn assert_whole<S: BuildHasher + Clone, H: HotKeyMode<GcraAlgorithm>>(
    sizes: Sizes,
    store: Store<S, H>,
    clock: &ManualClock,
    hot: Promote<S, H>,
    what: &str,
) {
    let max_keys = sizes.max_keys;
    let mut seen = 0;
    store.for_each(|_, _| seen += 1);
    assert_eq!(store.len(), seen, "{what}: len() says {} keys, iteration finds {seen}", store.len());
    clock.advance(Duration::from_secs(10));
    store.sweep_all();
    assert_eq!(store.len(), 0, "{what}: a sweep of idle keys left {} counted", store.len());
    let mut seen = 0;
    store.for_each(|_, _| seen += 1);
    assert_eq!(seen, 0, "{what}: a sweep of idle keys left {seen} stored");
    for id in 1_000..1_000 + max_keys {
        let decision = store.check(&Key::new(id));
        assert_ne!(
            decision.deny_reason(),
            Some(DenyReason::KeyCapacity),
            "{what}: place {} of {max_keys} lost",
            id - 1_000
        );
        assert!(decision.is_allowed());
    }
    assert_eq!(store.len(), max_keys as usize, "{what}");
    if let Some(promote) = hot {
        // Every hot slot is free again (the keys promoted before were swept).
        let slots = sizes.hot_slots;
        let promoted = (1_000..1_000 + slots as u64).filter(|&id| promote(&store, &Key::new(id))).count();
        assert_eq!(promoted, slots, "{what}: a hot slot leaked");
    }
    drop(store);
    let alive = ALIVE.with_borrow(|alive| alive.len());
    assert_eq!(alive, 0, "{what}: {alive} keys never dropped");
}

/// Runs `scenario` on a store made by `make` and set up by `setup`, with the
/// `armed` user code panicking on its k-th call, for k = 1, 2, … until the
/// scenario runs to its end without a panic; after each, the store must be whole.
pub fn each_panic<S: BuildHasher + Clone, H: HotKeyMode<GcraAlgorithm>>(
    sizes: Sizes,
    make: fn(Sizes, &ManualClock) -> Store<S, H>,
    hot: Promote<S, H>,
    setup: impl Fn(&Store<S, H>, &ManualClock),
    scenario: impl Fn(&Store<S, H>, &ManualClock),
) {
    quiet_panics();
    for armed in [Armed::Hash, Armed::Eq, Armed::Clone] {
        for k in (1..).step_by(sizes.k_step as usize) {
            let clock = ManualClock::new();
            let store = make(sizes, &clock);
            setup(&store, &clock);
            ARMED.set(armed);
            COUNTDOWN.set(k);
            let ran = catch_unwind(AssertUnwindSafe(|| scenario(&store, &clock)));
            COUNTDOWN.set(0);
            if let Err(panic) = &ran {
                let message = panic.downcast_ref::<String>().map(String::as_str).unwrap_or("");
                assert_eq!(message, PANIC, "{armed:?} call {k}: another panic");
            }
            assert_whole(sizes, store, &clock, hot, &format!("{armed:?} panicking on call {k}"));
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
