//! `AtCapacity::EvictIdle` at its word: a full store evicts an idle key for a new
//! one whenever one is idle, wherever it is stored, and denies the new key only if
//! none is.

use std::time::Duration;
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{HotKeys, Keyed, KeyedConfig};
use weir_rl_core::{DenyReason, KeyedLimiter, ManualClock, Quota};

mod support;

type Store = Keyed<u64, GcraAlgorithm, ManualClock>;
type HotStore = Keyed<u64, GcraAlgorithm, ManualClock, weir_keyed::KeyHasher, HotKeys>;

const MAX_KEYS: u64 = 8192; // 19 shards

/// A full store (burst 1, one permit a second) in which only `idle` goes idle at
/// 1 s (checked at 0); every other key was checked at 0.5 s and is idle at 1.5 s.
/// The clock is left at 0.5 s.
fn full_store(idle: u64) -> (Store, ManualClock) {
    let clock = ManualClock::new();
    let store = Keyed::gcra_with_clock(
        Quota::per_second(1).unwrap(),
        KeyedConfig::builder(MAX_KEYS as usize).build().unwrap(),
        clock.clone(),
    );
    fill(&store, idle, &clock);
    (store, clock)
}

/// [`full_store`] in hot-key mode, with `idle` hot.
fn full_hot_store(idle: u64, hot: HotKeys) -> (HotStore, ManualClock) {
    let clock = ManualClock::new();
    let store = Keyed::gcra_with_clock(
        Quota::per_second(1).unwrap(),
        KeyedConfig::builder(MAX_KEYS as usize).build().unwrap(),
        clock.clone(),
    )
    .with_hot_keys(hot);
    assert!(store.promote(&idle));
    fill(&store, idle, &clock);
    (store, clock)
}

fn fill(store: &impl KeyedLimiter<u64>, idle: u64, clock: &ManualClock) {
    assert!(store.check_n(&idle, 1).unwrap().is_allowed());
    clock.advance(Duration::from_millis(500));
    for key in (0..MAX_KEYS).filter(|&k| k != idle) {
        assert!(store.check_n(&key, 1).unwrap().is_allowed());
    }
}

#[test]
fn a_full_store_with_one_idle_key_admits_a_new_key() {
    for trial in 0..20 {
        let idle = trial * 409; // spread over the shards
        let (store, clock) = full_store(idle);
        clock.advance(Duration::from_millis(500)); // 1 s: `idle` alone is idle
        let decision = store.check(&(MAX_KEYS + trial));
        assert!(decision.is_allowed(), "trial {trial}: the new key was denied: {:?}", decision.deny_reason());
        assert_eq!(store.len(), MAX_KEYS as usize);
        assert_eq!(store.snapshot(&idle).remaining(), 1, "the idle key was the one evicted");
        assert!(store.check(&(MAX_KEYS + 100)).is_denied(), "no other key is idle");
    }
}

/// A fruitless search does not keep a key that goes idle a moment later out.
#[test]
fn a_key_going_idle_just_after_a_denial_makes_room() {
    let (store, clock) = full_store(7);
    clock.advance(Duration::from_millis(500) - Duration::from_micros(50)); // 50 µs before key 7 is idle
    let denied = store.check(&(MAX_KEYS + 1));
    assert_eq!(denied.deny_reason(), Some(DenyReason::KeyCapacity));
    clock.advance(Duration::from_micros(49));
    assert_eq!(store.check(&(MAX_KEYS + 2)).deny_reason(), Some(DenyReason::KeyCapacity), "nothing is idle yet");
    clock.advance(Duration::from_micros(1)); // key 7 is idle
    assert!(store.check(&(MAX_KEYS + 3)).is_allowed());
}

/// A key inserted after a fruitless search may go idle before any key the search
/// saw: it is found.
#[test]
fn a_key_inserted_after_a_fruitless_search_is_found_when_idle() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(1).unwrap().with_burst(5).unwrap();
    let store: Store = Keyed::gcra_with_clock(quota, KeyedConfig::builder(1024).build().unwrap(), clock.clone());
    for key in 0..1024 {
        assert!(store.check_n(&key, 5).unwrap().is_allowed()); // idle at 5 s
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.check(&5000).deny_reason(), Some(DenyReason::KeyCapacity)); // nothing idle before 5 s
    assert!(store.remove(&0));
    assert!(store.check(&5001).is_allowed()); // idle at 2 s
    clock.advance(Duration::from_secs(1));
    assert!(store.check(&5002).is_allowed(), "key 5001 is idle and makes room");
    assert_eq!(store.snapshot(&5001).remaining(), 5);
}

/// A hot key gone idle (bucket full, every lease expired) makes room like any key.
#[test]
fn a_full_store_evicts_an_idle_hot_key_for_a_new_key() {
    let lease = LeaseConfig::builder().stripes(2).lifetime(Duration::from_millis(1)).build().unwrap();
    for idle in [3, 4000] {
        let (store, clock) = full_hot_store(idle, HotKeys::builder().lease(lease).build().unwrap());
        assert!(store.is_hot(&idle));
        clock.advance(Duration::from_millis(500) - Duration::from_micros(1)); // its lease expires at 1 s + 1 ms
        assert_eq!(store.check(&(MAX_KEYS + 1)).deny_reason(), Some(DenyReason::KeyCapacity));
        clock.advance(Duration::from_millis(2));
        assert!(store.check(&(MAX_KEYS + 2)).is_allowed());
        assert!(!store.is_hot(&idle));
    }
}

/// The same for the window algorithms: a full store of 1 024 keys in which one key
/// is idle (nothing counted in its current or, for the sliding counter, previous
/// window; no live entry in its log) admits a new key, and only one.
#[cfg(feature = "window")]
#[test]
fn a_full_window_store_with_one_idle_key_admits_a_new_key() {
    use weir_keyed::KeyHasher;
    use weir_keyed::KeyedAlgorithm;
    use weir_rl_core::{Clock, Nanos};
    use weir_window::fixed::FixedWindowAlgorithm;
    use weir_window::log::SlidingLogAlgorithm;
    use weir_window::sliding::SlidingWindowAlgorithm;

    /// Key 7 is checked at 0, the others at `others_at`; a new key is denied at
    /// `others_at` if `busy_then` (key 7 not idle yet), and admitted at `idle_at`.
    fn run<A: KeyedAlgorithm>(make: impl Fn(Nanos) -> A, others_at: u64, busy_then: bool, idle_at: u64, name: &str)
    where
        A::State: Send + Sync + 'static,
    {
        let clock = ManualClock::new();
        let store: Keyed<u64, A, ManualClock> = Keyed::with_hasher(
            make(clock.now()),
            KeyedConfig::builder(1024).build().unwrap(),
            clock.clone(),
            KeyHasher::new(),
        );
        assert!(store.check(&7).is_allowed());
        clock.advance(Duration::from_millis(others_at));
        for key in (0..1024).filter(|&k| k != 7) {
            assert!(store.check(&key).is_allowed());
        }
        if busy_then {
            assert_eq!(store.check(&5000).deny_reason(), Some(DenyReason::KeyCapacity), "{name}: nothing idle yet");
        }
        clock.advance(Duration::from_millis(idle_at - others_at));
        let decision = store.check(&5001);
        assert!(decision.is_allowed(), "{name}: the new key was denied: {:?}", decision.deny_reason());
        assert_eq!(store.check(&5002).deny_reason(), Some(DenyReason::KeyCapacity), "{name}: no other key is idle");
    }

    let quota = Quota::per_second(2).unwrap(); // windows of 1 s
    // Key 7's window ends at 1 s; the others' (from 1.5 s) at 2 s.
    run(|now| FixedWindowAlgorithm::new(quota, now).unwrap(), 1_500, false, 1_500, "fixed window");
    // Key 7's count weighs nothing from 2 s on; the others' (from 1.5 s) until 3 s.
    run(|now| SlidingWindowAlgorithm::new(quota, now).unwrap(), 1_500, true, 2_250, "sliding window");
    // Key 7's entry expires at 1 s; the others' (from 0.5 s) at 1.5 s.
    run(|now| SlidingLogAlgorithm::new(quota, now).unwrap(), 500, true, 1_250, "sliding log");
}

/// A refund makes a key idle again (its bucket full): a full store whose last
/// search found no idle key must see it, not trust the bound that search published.
#[test]
fn a_key_made_idle_by_a_refund_makes_room() {
    let clock = ManualClock::new();
    let store: Store =
        Keyed::gcra_with_clock(Quota::per_minute(3).unwrap(), KeyedConfig::builder(1).build().unwrap(), clock.clone());
    let admission = store.check_n(&1, 3).unwrap(); // key 1: bucket spent, idle in 60 s
    assert!(admission.is_allowed());
    clock.advance(Duration::from_millis(1));
    // Full, key 1 busy: the search publishes "no idle key before 60 s".
    assert_eq!(store.check(&2).deny_reason(), Some(DenyReason::KeyCapacity));
    store.refund(&1, 3, &admission).unwrap(); // the request was not served: key 1 is full, so idle
    assert_eq!(store.snapshot(&1).remaining(), 3);
    let decision = store.check(&2);
    assert!(decision.is_allowed(), "a new key was refused ({:?}) while key 1 is idle", decision.deny_reason());
}

mod racing_first_checks {
    //! Two first checks of one new key: whichever inserts it, the other finds it.
    //! A place in the bound is taken only under the shard's lock, after the key was
    //! found absent, so no order of the two gives a capacity denial.

    use std::hash::{Hash, Hasher};
    use std::sync::mpsc::{Receiver, Sender, channel};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use weir_gcra::GcraAlgorithm;
    use weir_keyed::{AtCapacity, Keyed, KeyedConfig};
    use weir_rl_core::{DenyReason, ManualClock, Quota};

    type Pause = Arc<Mutex<Option<(std::thread::ThreadId, Sender<()>, Receiver<()>)>>>;

    /// A key whose clone (the store's `to_owned` when it inserts a new key) pauses
    /// the thread named in the pause slot until told to go on.
    struct Key(u64, Pause);

    impl Clone for Key {
        fn clone(&self) -> Self {
            let pause = {
                let mut slot = self.1.lock().unwrap();
                match &*slot {
                    Some((id, _, _)) if *id == std::thread::current().id() => slot.take(),
                    _ => None,
                }
            };
            if let Some((_, paused, go)) = pause {
                paused.send(()).unwrap();
                go.recv_timeout(Duration::from_secs(60)).expect("resumed");
            }
            Key(self.0, self.1.clone())
        }
    }
    impl PartialEq for Key {
        fn eq(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }
    impl Eq for Key {}
    impl Hash for Key {
        fn hash<H: Hasher>(&self, state: &mut H) {
            self.0.hash(state)
        }
    }

    /// Thread A's first check of key 1 is paused inside its insertion; thread B's
    /// first check of key 1 runs meanwhile.
    fn race(policy: AtCapacity, max_keys: usize, stored_before: u64) {
        let pause: Pause = Arc::new(Mutex::new(None));
        let store: Arc<Keyed<Key, GcraAlgorithm, ManualClock>> = Arc::new(Keyed::gcra_with_clock(
            Quota::per_second(10).unwrap(),
            KeyedConfig::builder(max_keys).at_capacity(policy).build().unwrap(),
            ManualClock::new(),
        ));
        for k in 0..stored_before {
            assert!(store.check(&Key(100 + k, pause.clone())).is_allowed()); // busy keys
        }
        let (paused_tx, paused_rx) = channel();
        let (go_tx, go_rx) = channel();
        let a = {
            let store = store.clone();
            let pause = pause.clone();
            std::thread::spawn(move || {
                *pause.lock().unwrap() = Some((std::thread::current().id(), paused_tx, go_rx));
                store.check(&Key(1, pause.clone()))
            })
        };
        paused_rx.recv_timeout(Duration::from_secs(60)).expect("A paused in its insertion");
        let b = store.check(&Key(1, pause.clone()));
        go_tx.send(()).unwrap();
        let a = a.join().unwrap();
        assert!(a.is_allowed(), "A: {:?}", a.deny_reason());
        assert_ne!(b.deny_reason(), Some(DenyReason::KeyCapacity), "B refused for capacity while the store had room");
        assert!(b.is_allowed());
        assert_eq!(store.len(), stored_before as usize + 1);
    }

    #[test]
    fn deny_policy_store_with_room() {
        race(AtCapacity::Deny, 2, 1);
    }

    #[test]
    fn evict_idle_policy_store_with_room_and_no_idle_key() {
        race(AtCapacity::EvictIdle, 2, 1);
    }

    #[test]
    fn empty_store_of_one() {
        race(AtCapacity::EvictIdle, 1, 0);
    }
}

/// An admission of the overflow limiter took nothing from the key's own state, so
/// its refund gives nothing back to it, even once the key is stored.
#[test]
fn a_refund_of_an_overflow_admission_gives_nothing_to_the_key() {
    use std::sync::Arc;
    use weir_gcra::Gcra;
    use weir_keyed::AtCapacity;
    let clock = ManualClock::new();
    let overflow = Arc::new(Gcra::with_clock(Quota::per_second(1_000).unwrap(), clock.clone()));
    let config = KeyedConfig::builder(1).at_capacity(AtCapacity::EvictIdleOrOverflow(overflow)).build().unwrap();
    let store: Store = Keyed::gcra_with_clock(Quota::per_second(1).unwrap(), config, clock.clone());
    assert!(store.check(&1).is_allowed()); // full; key 1 busy until 1 s
    clock.advance(Duration::from_millis(999));
    let by_overflow = store.check(&2); // admitted by the overflow limiter
    assert!(by_overflow.is_allowed());
    assert!(by_overflow.is_from_fallback());
    clock.advance(Duration::from_millis(1)); // key 1 idle
    assert!(store.check(&2).is_allowed()); // key 2 stored, its one permit spent
    store.refund(&2, 1, &by_overflow).unwrap();
    clock.advance(Duration::from_millis(1));
    assert!(store.check(&2).is_denied(), "key 2's state (burst 1, 1/s) admitted twice in 1 ms");
}

/// An overflow limiter's denial is the store's capacity, not the key's rate: it
/// was a rate-limit denial, which a server then answered as the client's quota.
#[test]
fn an_overflow_denial_is_for_the_stores_capacity() {
    use std::sync::Arc;
    use weir_gcra::Gcra;
    use weir_keyed::AtCapacity;
    use weir_rl_core::DenyReason;
    let clock = ManualClock::new();
    let overflow = Arc::new(Gcra::with_clock(Quota::per_hour(1).unwrap(), clock.clone()));
    let config = KeyedConfig::builder(1).at_capacity(AtCapacity::EvictIdleOrOverflow(overflow)).build().unwrap();
    let store: Store = Keyed::gcra_with_clock(Quota::per_second(1).unwrap(), config, clock.clone());
    assert!(store.check(&1).is_allowed()); // full; key 1 busy
    assert!(store.check(&2).is_allowed(), "the overflow's one");
    let denied = store.check(&3);
    assert_eq!((denied.deny_reason(), denied.is_from_fallback()), (Some(DenyReason::KeyCapacity), true));
}

mod racing_first_checks_at_a_full_store {
    //! A first check of a new key, refused a place at a full store, while another
    //! first check of the same key makes room and inserts it: the refused one finds
    //! the key, as it would in either order.

    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use weir_gcra::{Gcra, GcraAlgorithm};
    use weir_keyed::{AtCapacity, HotKeys, Keyed, KeyedConfig};
    use weir_rl_core::{DenyReason, ManualClock, Quota};

    use super::support::HookClock;

    type Store = Keyed<u64, GcraAlgorithm, HookClock>;

    /// Two keys at most (one shard), 1/s with a burst of 2: key 10 checked at 0
    /// (idle at 1 s), key 11 at 0.5 s (idle at 1.5 s); the clock left at 1 s.
    fn full_store_with_one_idle_key(policy: AtCapacity) -> (&'static Store, HookClock) {
        let clock = HookClock::new();
        let quota = Quota::per_second(1).unwrap().with_burst(2).unwrap();
        let config = KeyedConfig::builder(2).at_capacity(policy).build().unwrap();
        let store: &'static Store = Box::leak(Box::new(Keyed::gcra_with_clock(quota, config, clock.clone())));
        assert!(store.check(&10).is_allowed());
        clock.inner.advance(Duration::from_millis(500));
        assert!(store.check(&11).is_allowed());
        clock.inner.advance(Duration::from_millis(500));
        (store, clock)
    }

    #[test]
    fn the_refused_check_finds_the_key_the_other_inserted() {
        let (store, clock) = full_store_with_one_idle_key(AtCapacity::EvictIdle);
        let other = Arc::new(Mutex::new(None));
        {
            let other = other.clone();
            // The refused check's readings: 1 its check's, 2 its search's for room.
            clock.arm(2, move || *other.lock().unwrap() = Some(store.check(&1)));
        }
        let refused = store.check(&1);
        let other = other.lock().unwrap().take().expect("the other check ran inside the first");
        assert!(other.is_allowed());
        assert_eq!(store.len(), 2);
        assert_ne!(
            refused.deny_reason(),
            Some(DenyReason::KeyCapacity),
            "refused for capacity while the key is stored"
        );
        assert!(refused.is_allowed());
        assert_eq!(store.snapshot(&1).remaining(), 0, "both checks decided on the key's one state");
    }

    #[test]
    fn the_refused_check_is_not_sent_to_the_overflow_limiter() {
        let overflow = Gcra::with_clock(Quota::per_hour(1).unwrap(), ManualClock::new());
        assert!(weir_rl_core::Limiter::check(&overflow).is_allowed()); // spent
        let (store, clock) = full_store_with_one_idle_key(AtCapacity::EvictIdleOrOverflow(Arc::new(overflow)));
        clock.arm(2, move || assert!(store.check(&1).is_allowed()));
        let refused = store.check(&1);
        assert!(refused.is_allowed(), "decided on the overflow limiter while the key is stored: {:?}", refused);
        assert!(!refused.is_from_fallback());
    }

    #[test]
    fn promote_finds_the_key_the_other_inserted() {
        let clock = HookClock::new();
        let quota = Quota::per_second(1).unwrap().with_burst(2).unwrap();
        let config = KeyedConfig::builder(2).build().unwrap();
        let store: &'static Keyed<u64, GcraAlgorithm, HookClock, weir_keyed::KeyHasher, HotKeys> =
            Box::leak(Box::new(Keyed::gcra_with_clock(quota, config, clock.clone()).with_hot_keys(HotKeys::default())));
        assert!(store.check(&10).is_allowed());
        clock.inner.advance(Duration::from_millis(500));
        assert!(store.check(&11).is_allowed());
        clock.inner.advance(Duration::from_millis(500));
        clock.arm(1, move || assert!(store.check(&1).is_allowed())); // promote's first reading: its search's
        assert!(store.promote(&1), "the key is stored and a hot slot is free");
    }
}

/// A capacity denial tells a client when to come back in both its numbers: no
/// reset of zero beside nothing remaining.
#[test]
fn a_capacity_denial_resets_when_it_says_to_retry() {
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(1)
        .at_capacity(weir_keyed::AtCapacity::Deny)
        .capacity_retry_after(Duration::from_secs(2))
        .build()
        .unwrap();
    let store: Store = Keyed::gcra_with_clock(Quota::per_second(5).unwrap(), config, clock.clone());
    assert!(store.check(&1).is_allowed());
    let denied = store.check(&2);
    assert_eq!(denied.deny_reason(), Some(DenyReason::KeyCapacity));
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(2)));
    assert_eq!(denied.reset_after(), Duration::from_secs(2));
}
