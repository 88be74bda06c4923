//! The maps a store keeps its keys (and its hot keys' stripes) in: papaya's
//! lock-free hash map, behind the few operations the store uses.
//!
//! Under `cfg(loom)` the same interface is a small map over a loom mutex (papaya and
//! its epoch collector are not loom-aware), so that loom runs the store's own code
//! paths (`check_n`, the sweeps, `remove`, promotion) against a map whose every
//! operation is one atomic step, as each of papaya's is. Values are never freed
//! before the map is, as papaya's epoch guards keep them alive while a guard is held.

#[cfg(not(loom))]
pub(crate) use papaya_map::{Collector, Guard, Map};

#[cfg(loom)]
pub(crate) use loom_map::{Collector, Guard, Map};

#[cfg(not(loom))]
mod papaya_map {
    use std::borrow::Borrow;
    use std::hash::{BuildHasher, Hash};
    use std::sync::Arc;

    /// The epoch collector every map of a store shares.
    pub(crate) type Collector = seize::Collector;

    /// Keeps whatever it was entered before reachable (entries removed meanwhile
    /// included) until dropped.
    pub(crate) type Guard<'c> = seize::LocalGuard<'c>;

    /// papaya's hash map.
    pub(crate) struct Map<K, V, S> {
        inner: papaya::HashMap<K, V, S>,
    }

    impl<K: Send + 'static, V: Send + 'static, S> Map<K, V, S> {
        /// An empty map hashing with `hasher`, reclaiming through `collector`.
        pub(crate) fn new(hasher: S, collector: &Arc<Collector>) -> Self {
            Self { inner: papaya::HashMap::builder().hasher(hasher).shared_collector(collector.clone()).build() }
        }
    }

    impl<K: Hash + Eq, V, S: BuildHasher> Map<K, V, S> {
        /// `key`'s value.
        #[inline]
        pub(crate) fn get<'g, Q>(&'g self, key: &Q, guard: &'g Guard<'_>) -> Option<&'g V>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            self.inner.get(key, guard)
        }

        /// Inserts `value` for `key` unless `key` is present: `Ok` with the inserted
        /// value, or `Err` with the present one.
        pub(crate) fn try_insert<'g>(&'g self, key: K, value: V, guard: &'g Guard<'_>) -> Result<&'g V, &'g V> {
            self.inner.try_insert(key, value, guard).map_err(|occupied| occupied.current)
        }

        /// Removes `key`; returns its value if it was present.
        pub(crate) fn remove<'g, Q>(&'g self, key: &Q, guard: &'g Guard<'_>) -> Option<&'g V>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            self.inner.remove(key, guard)
        }

        /// Removes `key` if `remove(key, value)` holds; returns whether it did.
        pub(crate) fn remove_if<Q>(&self, key: &Q, remove: impl FnMut(&K, &V) -> bool, guard: &Guard<'_>) -> bool
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            matches!(self.inner.remove_if(key, remove, guard), Ok(Some(_)))
        }

        /// Every entry (weakly consistent: entries inserted or removed meanwhile may
        /// or may not be seen; entries present throughout are).
        pub(crate) fn iter<'g>(&'g self, guard: &'g Guard<'_>) -> impl Iterator<Item = (&'g K, &'g V)> + 'g {
            self.inner.iter(guard)
        }
    }
}

#[cfg(loom)]
mod loom_map {
    use loom::sync::Mutex;
    use std::borrow::Borrow;
    use std::hash::Hash;
    use std::marker::PhantomData;
    use std::sync::{Arc, OnceLock};

    /// The most entries one map may ever hold (inserted, removed included) in a
    /// model: models insert a handful.
    const CAPACITY: usize = 32;

    /// No collector: entries live as long as their map.
    #[derive(Debug, Default)]
    pub(crate) struct Collector;

    impl Collector {
        pub(crate) fn new() -> Self {
            Self
        }

        pub(crate) fn enter(&self) -> Guard<'_> {
            Guard(PhantomData)
        }
    }

    /// Stands for an epoch guard.
    pub(crate) struct Guard<'c>(PhantomData<&'c Collector>);

    /// A map over a loom mutex. Every entry ever inserted stays in `arena` (an
    /// append-only array, so references to it stay valid without `unsafe`) until
    /// the map drops; `linked` says which of them the map holds now.
    pub(crate) struct Map<K, V, S> {
        arena: Box<[OnceLock<(K, V)>]>,
        linked: Mutex<Vec<usize>>,
        _hasher: PhantomData<S>,
    }

    impl<K: Hash + Eq, V, S> Map<K, V, S> {
        pub(crate) fn new(hasher: S, collector: &Arc<Collector>) -> Self {
            let _ = (hasher, collector);
            Self {
                arena: (0..CAPACITY).map(|_| OnceLock::new()).collect(),
                linked: Mutex::new(Vec::new()),
                _hasher: PhantomData,
            }
        }

        fn entry(&self, slot: usize) -> (&K, &V) {
            let (key, value) = self.arena[slot].get().expect("a linked slot is filled");
            (key, value)
        }

        fn find<Q>(&self, linked: &[usize], key: &Q) -> Option<usize>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            linked.iter().position(|&slot| self.entry(slot).0.borrow() == key)
        }

        pub(crate) fn get<'g, Q>(&'g self, key: &Q, _guard: &'g Guard<'_>) -> Option<&'g V>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            let linked = self.linked.lock().unwrap();
            self.find(&linked, key).map(|at| self.entry(linked[at]).1)
        }

        pub(crate) fn try_insert<'g>(&'g self, key: K, value: V, _guard: &'g Guard<'_>) -> Result<&'g V, &'g V> {
            let mut linked = self.linked.lock().unwrap();
            if let Some(at) = self.find(&linked, &key) {
                return Err(self.entry(linked[at]).1);
            }
            let slot = self.arena.iter().position(|slot| slot.get().is_none()).expect("a loom model's map is small");
            let _ = self.arena[slot].set((key, value));
            linked.push(slot);
            Ok(self.entry(slot).1)
        }

        pub(crate) fn remove<'g, Q>(&'g self, key: &Q, _guard: &'g Guard<'_>) -> Option<&'g V>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            let mut linked = self.linked.lock().unwrap();
            let at = self.find(&linked, key)?;
            Some(self.entry(linked.swap_remove(at)).1)
        }

        pub(crate) fn remove_if<Q>(&self, key: &Q, mut remove: impl FnMut(&K, &V) -> bool, _guard: &Guard<'_>) -> bool
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            let mut linked = self.linked.lock().unwrap();
            match self.find(&linked, key) {
                Some(at) if remove(self.entry(linked[at]).0, self.entry(linked[at]).1) => {
                    linked.swap_remove(at);
                    true
                }
                _ => false,
            }
        }

        /// A snapshot of the entries at one instant (which papaya's weakly
        /// consistent iteration may also yield).
        pub(crate) fn iter<'g>(&'g self, _guard: &'g Guard<'_>) -> impl Iterator<Item = (&'g K, &'g V)> + 'g {
            let linked = self.linked.lock().unwrap().clone();
            linked.into_iter().map(move |slot| self.entry(slot))
        }
    }
}
