//! Hand-over at each sweep: what a key's removal or eviction unlinked is given to
//! the collector by the next sweep, the hot keys' shard included. A key counts
//! its live copies: the store's copy is dropped when its entry is reclaimed.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
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
