//! Under `cfg(loom)`, the store's shards: a small map over a loom mutex with the
//! table's interface, each operation one atomic step (as each of the table's is to
//! the store: a lookup reads one published word, an insertion or unlinking is one
//! store of a word under the shard's lock). The store's own protocols (eviction,
//! promotion, the idle bounds) are modelled over it in `loom-tests`, in models that
//! stay small; the table's publication protocol is modelled on its own code
//! (`loom-tests/tests/keyed_eviction.rs`, `mod table`), without its collector:
//! under loom retired slots are never reused, so slot reuse and reclamation are
//! checked by miri on the table's unit tests, not by loom. Entries are never freed
//! before the map is, as the epoch guards keep them in the real table.

use crate::table::{Guard, Inserted};
use loom::sync::Mutex;
use std::borrow::Borrow;
use std::sync::OnceLock;

/// The most entries one map may ever hold (inserted, removed included) in a
/// model: models insert a handful.
const CAPACITY: usize = 32;

/// A map over a loom mutex. Every entry ever inserted stays in `arena` (an
/// append-only array, so references to it stay valid without `unsafe`) until the
/// map drops; `linked` says which of them the map holds now.
pub(crate) struct Shard<K, V> {
    arena: Box<[OnceLock<(K, V)>]>,
    linked: Mutex<Vec<usize>>,
}

impl<K: Eq, V> Shard<K, V> {
    pub(crate) fn with_slack(_slack: usize) -> Self {
        Self::new()
    }

    /// Nothing to give back: entries are kept until the map drops.
    pub(crate) fn compact<S>(&self, _hasher: &S, _shrink_index: bool, _guard: &Guard<'_>) -> (usize, bool) {
        (0, false)
    }

    /// Never: a model's keys are compared, not hashed.
    pub(crate) fn is_hardened(&self) -> bool {
        false
    }

    /// Nothing to hand over: no collector under loom (nothing flushed).
    pub(crate) fn retire_pending(&self, _guard: &Guard<'_>) -> bool {
        false
    }

    pub(crate) fn new() -> Self {
        Self { arena: (0..CAPACITY).map(|_| OnceLock::new()).collect(), linked: Mutex::new(Vec::new()) }
    }

    fn entry(&self, slot: usize) -> (&K, &V) {
        let (key, value) = self.arena[slot].get().expect("a linked slot is filled");
        (key, value)
    }

    fn find<Q>(&self, linked: &[usize], key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        linked.iter().position(|&slot| self.entry(slot).0.borrow() == key)
    }

    pub(crate) fn get<'g, Q>(&'g self, _hash: u64, key: &Q, _guard: &'g Guard<'_>) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let linked = self.linked.lock().unwrap();
        self.find(&linked, key).map(|at| self.entry(linked[at]).1)
    }

    pub(crate) fn try_insert<'g, S>(
        &'g self,
        _hash: u64,
        key: K,
        value: V,
        admit: impl FnOnce() -> bool,
        _hasher: &S,
        _guard: &'g Guard<'_>,
    ) -> Result<&'g V, Inserted<'g, V>> {
        let mut linked = self.linked.lock().unwrap();
        if let Some(at) = self.find(&linked, &key) {
            return Err(Inserted::Held(self.entry(linked[at]).1));
        }
        if !admit() {
            return Err(Inserted::Refused);
        }
        let slot = self.arena.iter().position(|slot| slot.get().is_none()).expect("a loom model's map is small");
        let _ = self.arena[slot].set((key, value));
        linked.push(slot);
        Ok(self.entry(slot).1)
    }

    pub(crate) fn remove_if<'g, Q>(
        &'g self,
        _hash: u64,
        key: &Q,
        mut remove: impl FnMut(&K, &V) -> bool,
        _guard: &'g Guard<'_>,
    ) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let mut linked = self.linked.lock().unwrap();
        let at = self.find(&linked, key)?;
        let (k, v) = self.entry(linked[at]);
        if !remove(k, v) {
            return None;
        }
        Some(self.entry(linked.swap_remove(at)).1)
    }

    /// Unlinks the entry whose value satisfies `matches`, comparing no key.
    pub(crate) fn remove_value(&self, _hash: u64, mut matches: impl FnMut(&V) -> bool, _guard: &Guard<'_>) -> bool {
        let mut linked = self.linked.lock().unwrap();
        match linked.iter().position(|&slot| matches(self.entry(slot).1)) {
            Some(at) => {
                linked.swap_remove(at);
                true
            }
            None => false,
        }
    }

    /// Unlinks the entry whose value is `value` (the position is the table's hint).
    pub(crate) fn remove_at(&self, _at: usize, value: &V, guard: &Guard<'_>) -> bool {
        self.remove_value(0, |current| std::ptr::eq(current, value), guard)
    }

    /// Whether the entry whose value satisfies `matches` is linked.
    pub(crate) fn holds_value(&self, _hash: u64, mut matches: impl FnMut(&V) -> bool, _guard: &Guard<'_>) -> bool {
        self.linked.lock().unwrap().iter().any(|&slot| matches(self.entry(slot).1))
    }

    /// [`iter`](Self::iter), with a position for each entry.
    pub(crate) fn iter_at<'g>(&'g self, guard: &'g Guard<'_>) -> impl Iterator<Item = (usize, &'g K, &'g V)> + 'g {
        self.iter(guard).enumerate().map(|(at, (key, value))| (at, key, value))
    }

    /// A snapshot of the entries at one instant (which the table's weakly
    /// consistent iteration may also yield).
    pub(crate) fn iter<'g>(&'g self, _guard: &'g Guard<'_>) -> impl Iterator<Item = (&'g K, &'g V)> + 'g {
        let linked = self.linked.lock().unwrap().clone();
        linked.into_iter().map(move |slot| self.entry(slot))
    }
}
