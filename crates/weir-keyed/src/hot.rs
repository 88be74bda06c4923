//! Hot keys: a GCRA store moves a key that every core hits to per-core lease
//! stripes ([`HotKeys`], [`Keyed::with_hot_keys`]).

#[cfg(doc)]
use crate::KeyedConfig;
use crate::Shard;
use crate::store::Full;
use crate::table::{Guard, Inserted};
use crate::{Keyed, KeyedAlgorithm, KeyedConfigError};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use weir_core::__private::sync::Ordering;
use weir_core::{Clock, Decision, InsufficientCapacity, Nanos, Retire};
use weir_gcra::__private::{LeaseStripes, StateKind, is_promoted, promote, retire_orphan, retire_promoted, state_kind};
use weir_gcra::{GcraAlgorithm, GcraState, LeaseConfig};

/// Hot-key mode for a GCRA store: when checks of one key collide (a check loses
/// `after_lost_races` CAS races to other checks of the same key), the key's bucket
/// moves to per-core lease stripes ([`LeaseStripes`], the engine of
/// [`weir_gcra::LeasedGcra`]), so its checks stop contending on one cache line. The
/// key then has the leased limiter's bounded over-admission
/// ([`LeaseConfig::over_admission_bound`]); every other key stays exact. At most
/// `max_hot_keys` keys are hot at once (each costs a few KiB of stripes); a hot key
/// whose bucket is idle with every lease expired is swept like any idle key
/// (insertions pace sweeps while every hot slot is taken, whatever
/// [`KeyedConfig::sweep_from`] says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotKeys {
    pub(crate) lease: LeaseConfig,
    pub(crate) after_lost_races: u32,
    pub(crate) max_hot_keys: usize,
}

impl HotKeys {
    /// Leases as `lease` says; promote a key after 2 lost races; at most 64 hot keys.
    pub fn new(lease: LeaseConfig) -> Self {
        Self { lease, after_lost_races: 2, max_hot_keys: 64 }
    }

    /// Promote a key when one of its checks loses `n` CAS races (at least 1).
    pub fn after_lost_races(self, n: u32) -> Result<Self, KeyedConfigError> {
        if n == 0 {
            return Err(KeyedConfigError::ZeroLostRaces);
        }
        Ok(Self { after_lost_races: n, ..self })
    }

    /// At most `n` hot keys at once (at least 1).
    pub fn max_hot_keys(self, n: usize) -> Result<Self, KeyedConfigError> {
        if n == 0 {
            return Err(KeyedConfigError::ZeroHotKeys);
        }
        Ok(Self { max_hot_keys: n, ..self })
    }

    /// The lease configuration of a hot key.
    pub fn lease(&self) -> &LeaseConfig {
        &self.lease
    }
}

impl<K, C, S> Keyed<K, GcraAlgorithm, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Turns on hot-key mode (see [`HotKeys`]).
    ///
    /// ```
    /// use weir_core::{ManualClock, Quota};
    /// use weir_gcra::LeaseConfig;
    /// use weir_keyed::{HotKeys, Keyed, KeyedConfig};
    ///
    /// let hot = HotKeys::new(LeaseConfig::new(8)?.with_max_lease(32)?);
    /// let per_tenant: Keyed<u64, _, _> =
    ///     Keyed::gcra_with_clock(Quota::per_second(1_000_000)?, KeyedConfig::new(10_000)?, ManualClock::new())
    ///         .with_hot_keys(hot);
    /// assert!(per_tenant.check(&7).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_hot_keys(self, hot: HotKeys) -> Self {
        Self { hot: Some(hot), ..self }
    }

    /// Moves `key` into hot mode now, whatever its contention (for a key known to be
    /// hot, e.g. a tenant's global limit). Returns whether it is hot afterwards.
    /// Without [`with_hot_keys`](Self::with_hot_keys) this does nothing.
    pub fn promote<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if self.hot.is_none() {
            return false;
        }
        let hash = self.hash(key);
        let guard = self.collector.enter();
        let index = self.shard_index(hash);
        let shard = &self.shards[index];
        let state = match shard.get(hash, key, &guard) {
            Some(state) => state,
            None => match self.insert(shard, hash, key, &guard) {
                Ok((state, inserted)) => {
                    if inserted {
                        self.note_new_key(index, state, self.clock.now());
                    }
                    state
                }
                Err(Full) => return false,
            },
        };
        self.try_promote(shard, hash, key, &self.algorithm, state, &guard);
        is_promoted(state)
            && self.hot_keys.get(hash, key, &guard).is_some_and(|stripes| stripes.owner() == owner_of(state))
    }

    /// Whether `key` is in hot mode.
    pub fn is_hot<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let guard = self.collector.enter();
        self.shard(hash).get(hash, key, &guard).is_some_and(|state| is_promoted(state))
    }
}

impl<K, A, C, S> Keyed<K, A, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: KeyedAlgorithm,
    A::State: Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// For a hot key (whose hash `hash` gives, only if the state is promoted):
    /// retires its hot bucket if idle with every lease expired, drops it, and
    /// retires the key's state. Returns whether the key's state was retired.
    pub(crate) fn try_retire_hot(
        &self,
        hash: impl FnOnce() -> u64,
        key: &K,
        state: &A::State,
        now: Nanos,
        guard: &Guard<'_>,
    ) -> bool {
        let (Some(gcra), Some(gcra_state)) = (self.algorithm.as_gcra(), self.algorithm.gcra_state(state)) else {
            return false;
        };
        if !is_promoted(gcra_state) {
            return false;
        }
        let hash = hash();
        match self.hot_keys.get(hash, key, guard) {
            Some(stripes) if stripes.owner() == owner_of(gcra_state) => {
                if !retire_promoted(gcra, gcra_state, stripes, now) {
                    return false;
                }
                self.drop_hot(hash, key, stripes, guard);
                true
            }
            // Promoted, but its stripes are gone (dropped by a sweep or `remove`).
            _ => retire_orphan(gcra_state),
        }
    }

    /// Removes `key`'s hot stripes if they are still `stripes`.
    pub(crate) fn drop_hot<Q>(&self, hash: u64, key: &Q, stripes: &LeaseStripes, guard: &Guard<'_>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.hot_keys.remove_if(hash, key, |_, current| std::ptr::eq(current, stripes), guard).is_some() {
            // Ordering: Relaxed; see `remove`.
            self.hot_count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Checks a promoted key on its hot stripes. `None`: the hot bucket is gone or
    /// retired (the key is being evicted); the caller retries from the lookup.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_hot<Q>(
        &self,
        shard: &Shard<K, A::State>,
        hash: u64,
        key: &Q,
        gcra: &GcraAlgorithm,
        gcra_state: &GcraState,
        state: &A::State,
        n: u64,
        now: Nanos,
        guard: &Guard<'_>,
    ) -> Option<Result<Decision, InsufficientCapacity>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.hot_keys.get(hash, key, guard) {
            Some(stripes) if stripes.owner() == owner_of(gcra_state) => {
                let decision = stripes.check_on(gcra, weir_core::__private::thread_stripe(), n, &now);
                match decision {
                    Ok(d) if d.is_denied() && gcra.is_retired(stripes.bucket()) => {
                        // A sweep retired the hot bucket (it was idle, every lease
                        // expired) and may not have finished: finish for it, rather than
                        // wait, and retry on a fresh state.
                        retire_orphan(gcra_state);
                        self.drop_hot(hash, key, stripes, guard);
                        self.unlink(shard, hash, key, state, guard);
                        None
                    }
                    other => Some(other),
                }
            }
            _ => {
                // Promoted, but its own stripes are gone (dropped by a sweep or
                // `remove`; any stripes here belong to a newer state): finish retiring
                // this state and retry on whatever the key maps to now.
                retire_orphan(gcra_state);
                self.unlink(shard, hash, key, state, guard);
                None
            }
        }
    }

    /// Moves `key` to hot mode, within `max_hot_keys`. Only the thread whose stripes
    /// entered the hot map promotes into them; the stripes record the state they
    /// belong to, so no holder of another state ever uses them.
    pub(crate) fn try_promote<Q>(
        &self,
        shard: &Shard<K, A::State>,
        hash: u64,
        key: &Q,
        _gcra: &GcraAlgorithm,
        gcra_state: &GcraState,
        guard: &Guard<'_>,
    ) where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let Some(config) = self.hot else { return };
        // Ordering: Relaxed; the bound needs only the CAS's atomicity (see `reserve`).
        let mut count = self.hot_count.load(Ordering::Relaxed);
        loop {
            if count >= config.max_hot_keys || is_promoted(gcra_state) {
                return;
            }
            // Ordering: Relaxed; see above.
            match self.hot_count.compare_exchange_weak(count, count + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => count = actual,
            }
        }
        let owner = owner_of(gcra_state);
        let mut dropped_stale = false;
        let ours = loop {
            let stripes = LeaseStripes::new(config.lease, self.clock.now()).with_owner(owner);
            match self.hot_keys.try_insert(hash, key.to_owned(), stripes, &self.hasher, guard) {
                Ok(ours) => break Some(ours),
                // Stripes of another state of this key. Whose are stale? If ours is
                // still the key's linked, live state, theirs: their state was linked
                // when they were made, before ours (a state once unlinked is never
                // linked again), so it is gone for good; drop them and try once more.
                // Otherwise ours is the stale state (swept or removed while this
                // thread was promoting it) and they may be the key's current state's:
                // leave them alone and give up.
                Err(Inserted::Held(current))
                    if current.owner() != owner
                        && !dropped_stale
                        && state_kind(gcra_state) == StateKind::Live
                        && self.is_linked(shard, hash, key, gcra_state, guard) =>
                {
                    dropped_stale = true;
                    self.drop_hot(hash, key, current, guard);
                }
                // Another thread is promoting this very state, or ours is stale.
                Err(_) => break None,
            }
        };
        let release = |stripes: &LeaseStripes| {
            if self.hot_keys.remove_if(hash, key, |_, current| std::ptr::eq(current, stripes), guard).is_some() {
                // Ordering: Relaxed; see `remove`.
                self.hot_count.fetch_sub(1, Ordering::Relaxed);
            }
        };
        let Some(ours) = ours else {
            // Ordering: Relaxed; give back the reservation (see `remove`).
            self.hot_count.fetch_sub(1, Ordering::Relaxed);
            return;
        };
        if !promote(gcra_state, ours) {
            // Retired or promoted meanwhile: ours was never used.
            release(ours);
            return;
        }
        // If `remove` unlinked the state while it was being promoted, no sweep will
        // ever see it: retire it (its holders retry on the key's current state) and
        // drop its stripes.
        if !self.is_linked(shard, hash, key, gcra_state, guard) {
            retire_orphan(gcra_state);
            release(ours);
        }
    }

    /// Whether `key` maps to `gcra_state` now.
    pub(crate) fn is_linked<Q>(
        &self,
        shard: &Shard<K, A::State>,
        hash: u64,
        key: &Q,
        gcra_state: &GcraState,
        guard: &Guard<'_>,
    ) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        shard
            .get(hash, key, guard)
            .is_some_and(|current| self.algorithm.gcra_state(current).is_some_and(|s| std::ptr::eq(s, gcra_state)))
    }

    /// Evicts a hot key idle at `now` (its bucket idle, every lease expired), if
    /// one is: one look at each hot key.
    pub(crate) fn evict_idle_hot_key(&self, now: Nanos, guard: &Guard<'_>) -> bool {
        // Ordering: Relaxed; a hint (a key promoted meanwhile is busy, not idle).
        if self.hot.is_none() || self.hot_count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.hot_keys.iter(guard).any(|(key, _)| {
            let hash = self.hash(key);
            let shard = self.shard(hash);
            shard.get(hash, key, guard).is_some_and(|state| {
                self.try_retire_hot(|| hash, key, state, now, guard) && self.unlink(shard, hash, key, state, guard)
            })
        })
    }
}

/// The identity a hot key's stripes record: the address of the key's state (stable
/// while any guard that can reach the state is held).
pub(crate) fn owner_of(state: &GcraState) -> usize {
    state as *const GcraState as usize
}
