//! Reclamation and the slab bound: a shard refuses new keys only for entries a
//! live epoch guard holds back (not for retirements no thread has handed to the
//! collector yet), a key's `Clone` never runs inside a guard on a new key's way in
//! or a promotion's, entries awaiting reclamation stay within a shard's keys plus
//! its slack, hot keys that come and go while a guard is held are bounded by
//! `max_hot_keys`, and sweeps give back the memory of keys that left by `remove`.
//! Memory is measured per test thread, by a counting allocator.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::time::Duration;
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{AtCapacity, HotKeys, Keyed, KeyedConfig};
use weir_rl_core::{Clock, DenyReason, ManualClock, Quota};

thread_local! {
    static THREAD_BYTES: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
}

/// Forwards to the system allocator, counting what each thread holds.
struct Counting;

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = THREAD_BYTES.try_with(|b| b.set(b.get() + layout.size() as isize));
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        let _ = THREAD_BYTES.try_with(|b| b.set(b.get() - layout.size() as isize));
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes this thread has allocated and not freed.
fn thread_bytes() -> isize {
    THREAD_BYTES.with(|b| b.get())
}

/// Hashes a `u64` key to itself: a key below 2³² lands in shard 0, so that a test
/// can aim every key at one shard.
#[derive(Clone, Copy, Default)]
struct Ident;

struct IdentHasher(u64);

impl Hasher for IdentHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl BuildHasher for Ident {
    type Hasher = IdentHasher;
    fn build_hasher(&self) -> IdentHasher {
        IdentHasher(0)
    }
}

/// A store of 64 shards (`max_keys` 28 160, 440 keys a shard): each shard's slack is 64 slots.
fn store_of_64_shards(clock: &ManualClock) -> Keyed<u64, GcraAlgorithm, ManualClock, Ident> {
    let config = KeyedConfig::builder(64 * 440).at_capacity(AtCapacity::EvictIdle).build().unwrap();
    let algorithm = GcraAlgorithm::new(Quota::per_second(10).unwrap(), clock.now());
    Keyed::with_hasher(algorithm, config, clock.clone(), Ident)
}

/// 120 keys of one shard removed by this thread, no guard held: their entries
/// (more than the shard's slack) await no guard, and the empty store takes the
/// next key of that shard.
#[test]
fn an_empty_store_takes_a_new_key_after_this_thread_removed_many_of_one_shard() {
    let clock = ManualClock::new();
    let store = store_of_64_shards(&clock);
    for key in 0..120u64 {
        assert!(store.check(&key).is_allowed());
    }
    for key in 0..120u64 {
        assert!(store.remove(&key));
    }
    assert_eq!(store.len(), 0);
    for key in 1_000..1_200u64 {
        assert_eq!(store.check(&key).deny_reason(), None, "key {key} refused by an empty store, no guard held");
        assert!(store.remove(&key));
    }
}

/// The same with the removals made by another thread that then waits, holding no
/// guard (a pooled worker with no more work): whichever thread needs a slot next
/// hands the shard's retirements to the collector.
#[test]
fn removals_by_a_thread_gone_idle_make_no_new_key_refused() {
    let clock = ManualClock::new();
    let store = Arc::new(store_of_64_shards(&clock));
    let (done_tx, done) = mpsc::channel();
    let release = Arc::new(Barrier::new(2));
    let worker = {
        let (store, release) = (store.clone(), release.clone());
        std::thread::spawn(move || {
            for key in 0..120u64 {
                assert!(store.check(&key).is_allowed());
            }
            for key in 0..120u64 {
                assert!(store.remove(&key));
            }
            done_tx.send(()).unwrap();
            release.wait(); // idle, holding no guard
        })
    };
    done.recv().unwrap();
    assert_eq!(store.len(), 0);
    let mut refused = 0;
    for key in 1_000..1_100u64 {
        clock.advance(Duration::from_secs(1));
        if store.check(&key).deny_reason() == Some(DenyReason::KeyCapacity) {
            refused += 1;
        }
        store.remove(&key);
    }
    release.wait();
    worker.join().unwrap();
    assert_eq!(refused, 0, "{refused} of 100 new keys refused by an empty store with no guard held");
}

/// The same with the default hasher and `String` keys, picked (with a clone of the
/// store's hasher) among those of one shard.
#[test]
fn removals_of_one_shard_make_no_new_key_refused_with_the_default_hasher() {
    let clock = ManualClock::new();
    let hasher = weir_keyed::KeyHasher::new();
    let config = KeyedConfig::builder(64 * 440).at_capacity(AtCapacity::EvictIdle).build().unwrap();
    let algorithm = GcraAlgorithm::new(Quota::per_second(10).unwrap(), clock.now());
    let store: Keyed<String, GcraAlgorithm, ManualClock> =
        Keyed::with_hasher(algorithm, config, clock.clone(), hasher.clone());
    // The store's shard of a hash: its bits 32 to 47 scaled to the 64 shards.
    let shard_of = |key: &str| ((hasher.hash_one(key) >> 32) & 0xFFFF) >> 10;
    let keys: Vec<String> = (0..).map(|i| format!("client-{i}")).filter(|k| shard_of(k) == 0).take(121).collect();
    for key in &keys[..120] {
        assert!(store.check(key.as_str()).is_allowed());
    }
    for key in &keys[..120] {
        assert!(store.remove(key.as_str()));
    }
    let decision = store.check(keys[120].as_str());
    assert_eq!(decision.deny_reason(), None, "an empty store (len {}) refused a new key", store.len());
}

/// A key whose `Clone` pauses on its `PAUSE_AT`-th clone (of key `u64::MAX`) and
/// says so on `PAUSED`, until released.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SlowClone(u64);

static CLONES: AtomicUsize = AtomicUsize::new(0);
static PAUSE_AT: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::type_complexity)]
static PAUSE: Mutex<Option<(mpsc::Sender<&'static str>, mpsc::Receiver<()>)>> = Mutex::new(None);

impl Clone for SlowClone {
    fn clone(&self) -> Self {
        if self.0 == u64::MAX {
            let n = CLONES.fetch_add(1, SeqCst) + 1;
            if n == PAUSE_AT.load(SeqCst) {
                let (paused, resume) = PAUSE.lock().unwrap().take().unwrap();
                paused.send("paused").unwrap();
                resume.recv().unwrap();
            }
        }
        SlowClone(self.0)
    }
}

/// A key's `Clone` paused on any of its clones by a new key's first check at a
/// full store (the first try, and the retry after making room) or by `promote` (of
/// a new key at a full store) holds no reclamation back: another thread's 10 000
/// new keys, each evicting an idle one, are all admitted meanwhile.
#[test]
fn a_paused_clone_of_a_new_key_or_a_promotion_holds_no_reclamation_back() {
    for (promote, pause_at) in [(false, 1), (false, 2), (true, 1), (true, 2), (true, 3)] {
        let clock = ManualClock::new();
        let config = KeyedConfig::builder(64).at_capacity(AtCapacity::EvictIdle).build().unwrap();
        let store = Arc::new(
            Keyed::<SlowClone, GcraAlgorithm, ManualClock>::gcra_with_clock(
                Quota::per_second(10).unwrap(),
                config,
                clock.clone(),
            )
            .with_hot_keys(HotKeys::default()),
        );
        for key in 0..64 {
            assert!(store.check(&SlowClone(key)).is_allowed());
        }
        clock.advance(Duration::from_secs(1)); // every key idle
        let (paused_tx, paused) = mpsc::channel();
        let (resume, resume_rx) = mpsc::channel();
        *PAUSE.lock().unwrap() = Some((paused_tx.clone(), resume_rx));
        CLONES.store(0, SeqCst);
        PAUSE_AT.store(pause_at, SeqCst);
        let paused_op = {
            let store = store.clone();
            std::thread::spawn(move || {
                if promote {
                    store.promote(&SlowClone(u64::MAX));
                } else {
                    let _ = store.check(&SlowClone(u64::MAX));
                }
                paused_tx.send("done").unwrap();
            })
        };
        assert_eq!(paused.recv().unwrap(), "paused", "promote {promote}: fewer than {pause_at} clones");
        let mut refused = 0;
        for key in 1_000..11_000u64 {
            clock.advance(Duration::from_secs(1)); // the previous new key is idle by now
            if store.check(&SlowClone(key)).deny_reason() == Some(DenyReason::KeyCapacity) {
                refused += 1;
            }
        }
        resume.send(()).unwrap();
        paused_op.join().unwrap();
        assert_eq!(refused, 0, "promote {promote}, clone {pause_at} paused: {refused} of 10 000 new keys refused");
    }
}

static COUNTED_ALIVE: AtomicIsize = AtomicIsize::new(0);

/// A key that counts its live instances.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Counted(u64);

impl Counted {
    fn new(id: u64) -> Self {
        COUNTED_ALIVE.fetch_add(1, SeqCst);
        Counted(id)
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        Counted::new(self.0)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        COUNTED_ALIVE.fetch_sub(1, SeqCst);
    }
}

/// While a `for_each` callback is paused, a full store's churn (each new key
/// evicting an idle one) leaves at most the slab's bound less its keys awaiting
/// reclamation: twice the most keys the shard has held plus its slack (one shard,
/// 64 keys, slack 4 096). (The growth test allows the most keys held plus the
/// slack: a sweep that evicted most of a shard's keys leaves as many awaiting the
/// collector with no guard holding them back.)
#[test]
fn entries_awaiting_reclamation_stay_within_keys_plus_slack_while_a_guard_is_held() {
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(64).at_capacity(AtCapacity::EvictIdle).build().unwrap();
    let store: Keyed<Counted, GcraAlgorithm, ManualClock> =
        Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config, clock.clone());
    for key in 0..64 {
        assert!(store.check(&Counted::new(key)).is_allowed());
    }
    let (paused_tx, paused) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let store = &store;
    let (mut most_awaiting, mut refused) = (0isize, 0);
    std::thread::scope(|scope| {
        let pinned = scope.spawn(move || {
            let mut first = true;
            store.for_each(|_, _| {
                if std::mem::take(&mut first) {
                    paused_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                }
            });
        });
        paused.recv().unwrap();
        for key in 1_000..21_000u64 {
            clock.advance(Duration::from_secs(1));
            if store.check(&Counted::new(key)).deny_reason() == Some(DenyReason::KeyCapacity) {
                refused += 1;
            }
            most_awaiting = most_awaiting.max(COUNTED_ALIVE.load(SeqCst) - store.len() as isize);
        }
        release.send(()).unwrap();
        pinned.join().unwrap();
    });
    let bound = 2 * 64 + 4096;
    assert!(refused > 0, "the churn never reached the bound");
    assert!(
        most_awaiting <= bound,
        "{most_awaiting} keys awaiting reclamation, beyond twice the keys + slack = {bound}"
    );
}

/// Keys removed (an operator reset) leave no slab behind: the next sweep gives
/// their chunks back, although it evicts nothing. 4 000 keys inserted then removed.
#[test]
fn chunks_emptied_by_remove_are_given_back_by_the_next_sweep() {
    let clock = ManualClock::new();
    let before = thread_bytes();
    let config = KeyedConfig::builder(4_096).build().unwrap();
    let store: Keyed<u64, GcraAlgorithm, ManualClock> =
        Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config, clock.clone());
    let empty = thread_bytes() - before;
    for key in 0..4_000u64 {
        assert!(store.check(&key).is_allowed());
    }
    let full = thread_bytes() - before;
    for key in 0..4_000u64 {
        assert!(store.remove(&key));
    }
    assert_eq!(store.sweep_all(), 0);
    assert!(store.is_empty());
    let after = thread_bytes() - before;
    assert!(
        after - empty <= (full - empty) / 50,
        "{after} B held with no key stored (empty store: {empty} B, with 4 000 keys: {full} B)"
    );
}

/// Hot keys that come and go (promoted, then removed) while a `for_each` callback
/// is paused leave their stripes awaiting reclamation: the hot keys' slab grows
/// only while those are at most the hot keys plus `max_hot_keys`, so at most
/// `3 × max_hot_keys + 1` stripe sets are held, whatever the churn.
#[test]
fn hot_key_churn_while_a_guard_is_held_is_bounded_by_max_hot_keys() {
    for max_hot_keys in [1, 4] {
        let clock = ManualClock::new();
        let config = KeyedConfig::builder(16).at_capacity(AtCapacity::EvictIdle).build().unwrap();
        let hot = HotKeys::builder()
            .lease(LeaseConfig::builder().stripes(64).build().unwrap())
            .max_hot_keys(max_hot_keys)
            .build()
            .unwrap();
        let store = Keyed::<u64, _, _>::gcra_with_clock(Quota::per_second(1_000).unwrap(), config, clock.clone())
            .with_hot_keys(hot);
        let store = &store;
        let (paused_tx, paused) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let mut promoted = 0;
        std::thread::scope(|scope| {
            assert!(store.check(&u64::MAX).is_allowed()); // one key stored, so that the callback runs
            let pinned = scope.spawn(move || {
                let mut first = true;
                store.for_each(|_, _| {
                    if std::mem::take(&mut first) {
                        paused_tx.send(()).unwrap();
                        release_rx.recv().unwrap();
                    }
                });
            });
            paused.recv().unwrap();
            for key in 0..3_000u64 {
                if store.promote(&key) {
                    promoted += 1;
                }
                store.remove(&key);
            }
            release.send(()).unwrap();
            pinned.join().unwrap();
        });
        assert!(promoted > 0);
        assert!(
            promoted <= 3 * max_hot_keys + 1,
            "{promoted} hot keys' stripes held at once with max_hot_keys {max_hot_keys}"
        );
        // Once the guard is gone, hot keys come and go again.
        for key in 10_000..10_100u64 {
            assert!(store.promote(&key), "hot key {key} refused with no guard held");
            store.remove(&key);
        }
    }
}

/// Checks racing `remove`, sweeps that give chunks back (and their reallocation by
/// new keys), `for_each` and evictions of a full store: keys own heap memory, so a
/// use after free, a double drop or a leak shows (under miri too).
#[test]
fn churn_with_removals_sweeps_and_chunk_returns_is_memory_safe() {
    let rounds = if cfg!(miri) { 6 } else { 300 };
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(16).at_capacity(AtCapacity::EvictIdle).build().unwrap();
    let store: Keyed<String, GcraAlgorithm, ManualClock> =
        Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config, clock.clone());
    let store = &store;
    std::thread::scope(|scope| {
        let checker = scope.spawn(|| {
            for round in 0..rounds {
                for key in 0..20 {
                    let _ = store.check(format!("key-{}", (key + round) % 24).as_str());
                }
            }
        });
        let sweeper = scope.spawn(|| {
            for round in 0..rounds {
                clock.advance(Duration::from_secs(1));
                store.sweep_all();
                for key in 0..24 {
                    if (key + round) % 3 == 0 {
                        store.remove(format!("key-{key}").as_str());
                    }
                }
                let mut seen = 0;
                store.for_each(|key, _| {
                    assert!(key.starts_with("key-"));
                    seen += 1;
                });
                assert!(seen <= 16);
            }
        });
        checker.join().unwrap();
        sweeper.join().unwrap();
    });
    clock.advance(Duration::from_secs(1));
    store.sweep_all();
    let mut seen = 0;
    store.for_each(|_, _| seen += 1);
    assert_eq!(seen, store.len(), "len() {} but iteration finds {seen}", store.len());
    for key in 100..116 {
        assert!(store.check(format!("new-{key}").as_str()).is_allowed(), "a place of max_keys was lost");
    }
}

/// The same for hot keys: 64 keys promoted, then removed, and one sweep gives the
/// hot keys' shard's chunks back and shrinks its index, as it does an ordinary
/// shard's.
#[test]
fn hot_keys_chunks_emptied_by_remove_are_given_back_by_the_next_sweep() {
    let clock = ManualClock::new();
    let before = thread_bytes();
    let config = KeyedConfig::builder(4_096).build().unwrap();
    let hot =
        HotKeys::builder().lease(LeaseConfig::builder().stripes(4).build().unwrap()).max_hot_keys(64).build().unwrap();
    let store =
        Keyed::<u64, _, _>::gcra_with_clock(Quota::per_second(10).unwrap(), config, clock.clone()).with_hot_keys(hot);
    let empty = thread_bytes() - before;
    for key in 0..64u64 {
        assert!(store.promote(&key), "hot key {key} refused");
    }
    let full = thread_bytes() - before;
    for key in 0..64u64 {
        assert!(store.remove(&key));
    }
    assert_eq!(store.sweep_all(), 0);
    assert!(store.is_empty());
    let after = thread_bytes() - before;
    assert!(
        after - empty <= (full - empty) / 10,
        "{after} B held with no key stored (empty store: {empty} B, with 64 hot keys: {full} B)"
    );
}
