//! Hand-over at each sweep: what a key's removal or eviction unlinked is given to
//! the collector by the next sweep, the hot keys' shard included, and each sweep
//! retries its thread's collector batch, so that a hand-over made while another
//! thread was inside a guard is reclaimed once that guard is gone. A key counts
//! its live copies: the store's copy is dropped when its entry is reclaimed.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{HotKeys, Keyed, KeyedConfig};
use weir_rl_core::{ManualClock, Quota};

/// A key that counts its live copies: each clone adds one to `alive`, each drop
/// takes one off. Hashed and compared by `id` alone.
#[derive(Debug)]
struct Counted {
    id: u64,
    alive: Arc<AtomicUsize>,
}

impl Counted {
    /// A key whose count starts at 1 (this copy).
    fn new(id: u64) -> Self {
        Self { id, alive: Arc::new(AtomicUsize::new(1)) }
    }

    /// Copies alive, this one included.
    fn copies(&self) -> usize {
        self.alive.load(SeqCst)
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        self.alive.fetch_add(1, SeqCst);
        Self { id: self.id, alive: self.alive.clone() }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, SeqCst);
    }
}

impl PartialEq for Counted {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Counted {}

impl Hash for Counted {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

fn hot_store(clock: &ManualClock) -> Keyed<Counted, GcraAlgorithm, ManualClock, weir_keyed::KeyHasher, HotKeys> {
    let config = KeyedConfig::builder(1_000).build().unwrap();
    let hot = HotKeys::builder().lease(LeaseConfig::builder().stripes(4).build().unwrap()).build().unwrap();
    Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config, clock.clone()).with_hot_keys(hot)
}

/// A hot key removed, or swept as idle, is dropped by the first sweep after it
/// left, as a cold key is, with no guard held anywhere: its stripes and its key's
/// copy in the hot keys' shard are handed over by that sweep, not once
/// `min(256, max_hot_keys)` more hot keys have gone.
#[test]
fn a_removed_or_idle_hot_key_is_dropped_by_the_next_sweep_as_a_cold_key_is() {
    let clock = ManualClock::new();
    let store = hot_store(&clock);
    let (hot, cold) = (Counted::new(1), Counted::new(2));
    assert!(store.check(&hot).is_allowed() && store.check(&cold).is_allowed());
    assert!(store.promote(&hot) && store.is_hot(&hot));
    // This copy, the key's entry, and (hot) the key of its stripes.
    assert_eq!((hot.copies(), cold.copies()), (3, 2));
    assert!(store.remove(&hot) && store.remove(&cold));
    let mut after = Vec::new();
    for _ in 0..4 {
        store.sweep_all();
        after.push((hot.copies(), cold.copies()));
    }

    // Swept as idle: the key's state and its stripes are evicted by one sweep, and
    // both of its copies are dropped by it.
    let idle = Counted::new(3);
    assert!(store.check(&idle).is_allowed());
    assert!(store.promote(&idle) && store.is_hot(&idle));
    assert_eq!(idle.copies(), 3);
    clock.advance(Duration::from_secs(3_600)); // the bucket full, every lease expired
    assert_eq!(store.sweep_all(), 1);
    assert!(store.is_empty());
    assert_eq!(
        (after, idle.copies()),
        (vec![(1, 1); 4], 1),
        "(hot, cold) copies alive after each of four sweeps of a store with both removed; \
         copies of a hot key alive after the sweep that evicted it as idle"
    );
}

/// The same for `par_sweep_all`: its first run after the removal drops the hot
/// key's copies.
#[cfg(feature = "rayon")]
#[test]
fn a_removed_hot_key_is_dropped_by_the_next_parallel_sweep() {
    let clock = ManualClock::new();
    let store = hot_store(&clock);
    let hot = Counted::new(1);
    assert!(store.promote(&hot) && store.is_hot(&hot));
    assert_eq!(hot.copies(), 3);
    assert!(store.remove(&hot));
    store.par_sweep_all();
    assert_eq!(hot.copies(), 1, "copies of a removed hot key alive after a parallel sweep");
}

type Store = Keyed<Counted, GcraAlgorithm, ManualClock>;

/// Removes a key and runs `sweep_while_paused` while another thread is paused
/// inside a `for_each` callback (inside a guard); then, once that thread has
/// returned and no guard is held anywhere, runs `sweep` (and a check of a stored
/// key) eight times. Returns the removed key's copies alive after each of the
/// eight.
fn copies_after_sweeps_once_the_guard_is_gone(sweep_while_paused: fn(&Store), sweep: fn(&Store)) -> Vec<usize> {
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(1_000).build().unwrap();
    let store: Store = Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config, clock.clone());
    let (removed, other) = (Counted::new(1), Counted::new(2));
    assert!(store.check(&removed).is_allowed() && store.check(&other).is_allowed());
    assert_eq!(removed.copies(), 2);
    let (paused, resume) = (Barrier::new(2), Barrier::new(2));
    let store = &store;
    std::thread::scope(|scope| {
        let pinned = scope.spawn(|| {
            let mut first = true;
            store.for_each(|_, _| {
                if std::mem::take(&mut first) {
                    paused.wait(); // inside the shard's guard
                    resume.wait();
                }
            });
        });
        paused.wait();
        assert!(store.remove(&removed));
        sweep_while_paused(store);
        // Held back by the paused callback's guard, rightly.
        assert_eq!(removed.copies(), 2, "a removed key dropped while a guard entered before its removal is held");
        resume.wait();
        pinned.join().unwrap();
    });
    // No guard is held anywhere now.
    (0..8)
        .map(|_| {
            sweep(store);
            let _ = store.check(&other);
            removed.copies()
        })
        .collect()
}

/// A sweep that hands a removed key over while another thread is inside a guard
/// (a paused `for_each` callback) leaves it in this thread's collector batch (a
/// batch is retired only once it holds an entry per thread inside a guard); the
/// next sweep after that guard is gone retries the batch, though nothing new is
/// pending, and the key is dropped: by `sweep_all`, and by `sweep` of one shard
/// (of any shard: the batch is the thread's, not the shard's).
#[test]
fn a_hand_over_made_while_another_thread_is_inside_a_guard_is_reclaimed_by_the_next_sweep() {
    let after_sweep_all = copies_after_sweeps_once_the_guard_is_gone(
        |store| {
            store.sweep_all();
        },
        |store| {
            store.sweep_all();
        },
    );
    // Round the store's shards (three) and more while paused, so that the key's
    // own shard hands it over then.
    let after_sweep = copies_after_sweeps_once_the_guard_is_gone(
        |store| {
            for _ in 0..16 {
                store.sweep();
            }
        },
        |store| {
            store.sweep();
        },
    );
    assert_eq!(
        (after_sweep_all, after_sweep),
        (vec![1; 8], vec![1; 8]),
        "copies of the removed key alive after each sweep (sweep_all, sweep) once the guard is gone"
    );
}

/// The same for `par_sweep_all`, whose hand-overs are made on the pool's threads:
/// each of them retries its batch at every parallel sweep.
#[cfg(feature = "rayon")]
#[test]
fn a_hand_over_made_while_another_thread_is_inside_a_guard_is_reclaimed_by_the_next_parallel_sweep() {
    let after = copies_after_sweeps_once_the_guard_is_gone(
        |store| {
            store.par_sweep_all();
        },
        |store| {
            store.par_sweep_all();
        },
    );
    assert_eq!(after, [1; 8], "copies of the removed key alive after each parallel sweep once the guard is gone");
}
