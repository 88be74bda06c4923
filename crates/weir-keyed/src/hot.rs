//! Hot keys: a store's [`HotKeyMode`]. Every store starts in [`NoHotKeys`] (every
//! key exact); a GCRA store can move a key that every thread hits to per-thread
//! lease stripes ([`HotKeys`], [`Keyed::with_hot_keys`]).

#[cfg(doc)]
use crate::KeyedConfig;
use crate::Shard;
use crate::store::NotInserted;
use crate::table::{Guard, Inserted};
use crate::{Keyed, KeyedAlgorithm, KeyedConfigError};
use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use weir_gcra::__private::{
    LeaseStripes, StateKind, check_contended, check_n_contended, is_promoted, promote, retire_orphan, retire_promoted,
    state_kind,
};
use weir_gcra::{GcraAlgorithm, GcraState, LeaseConfig};
use weir_rl_core::__private::sync::{AtomicUsize, Ordering};
use weir_rl_core::{Algorithm, Clock, Decision, InsufficientCapacity, Nanos, Retire, Snapshot};

mod sealed {
    use super::*;

    /// The store's side of a [`HotKeyMode`](super::HotKeyMode): the methods its
    /// check, sweeps and refunds call. In a private module, so that only
    /// weir-keyed's modes implement it and only weir-keyed calls its methods (they
    /// take the store's epoch guard, which must be the store's own).
    pub trait Sealed<A: KeyedAlgorithm>: Copy + fmt::Debug + Send + Sync + 'static {
        /// What the store keeps per hot key.
        type Stripes: Send + Sync + 'static;

        /// [`Algorithm::check_n`], also returning how many CAS races the check lost (0
        /// where nothing would use the count).
        fn check_n<C: Clock + ?Sized>(
            &self,
            algorithm: &A,
            state: &A::State,
            n: u64,
            clock: &C,
        ) -> Result<(Decision, u32), InsufficientCapacity>;

        /// [`check_n`](Self::check_n) for one unit ([`Algorithm::check`]), which no
        /// limit is below: the store's inlined fast path.
        fn check<C: Clock + ?Sized>(&self, algorithm: &A, state: &A::State, clock: &C) -> (Decision, u32);

        /// What `state` is, from one load: live, retired or moved to a hot bucket.
        fn kind(algorithm: &A, state: &A::State) -> StateKind;

        /// Decides a check of a key (in shard number `shard`) whose state `kind` found
        /// moved to a hot bucket (`denied` is what the state itself said). `None`:
        /// retry from the lookup.
        #[allow(clippy::too_many_arguments)]
        fn check_hot<K, C, S, Q>(
            store: &Keyed<K, A, C, S, Self>,
            shard: usize,
            hash: u64,
            key: &Q,
            state: &A::State,
            n: u64,
            now: Nanos,
            denied: Decision,
            guard: &Guard<'_>,
        ) -> Option<Result<Decision, InsufficientCapacity>>
        where
            Self: super::HotKeyMode<A>,
            K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
            Q: Hash + Eq + ?Sized,
            C: Clock,
            S: BuildHasher + Clone;

        /// After an admission that lost `lost_races` CAS races (at least 1): whether
        /// that is contention enough to move the key to a hot bucket now (it is not
        /// hot yet, and a hot slot is free). Reads two counters; clones nothing.
        fn wants_promotion<K, C, S>(store: &Keyed<K, A, C, S, Self>, state: &A::State, lost_races: u32) -> bool
        where
            Self: super::HotKeyMode<A>;

        /// Moves the key (in shard number `shard`, with state `state`) to a hot
        /// bucket, within `max_hot_keys`; `owned` is the key, cloned outside any
        /// guard (see `wants_promotion`).
        fn contended<K, C, S, Q>(
            store: &Keyed<K, A, C, S, Self>,
            shard: usize,
            hash: u64,
            key: &Q,
            state: &A::State,
            owned: K,
            guard: &Guard<'_>,
        ) where
            Self: super::HotKeyMode<A>,
            K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
            Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
            C: Clock,
            S: BuildHasher + Clone;

        /// The snapshot of a key whose state is hot; `None` if it is being retired.
        fn hot_snapshot<K, C, S, Q>(
            store: &Keyed<K, A, C, S, Self>,
            hash: u64,
            key: &Q,
            state: &A::State,
            now: Nanos,
            guard: &Guard<'_>,
        ) -> Option<Snapshot>
        where
            Self: super::HotKeyMode<A>,
            K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
            Q: Hash + Eq + ?Sized,
            C: Clock,
            S: BuildHasher + Clone;

        /// A refund to a key whose state is hot.
        #[allow(clippy::too_many_arguments)]
        fn hot_refund<K, C, S, Q>(
            store: &Keyed<K, A, C, S, Self>,
            hash: u64,
            key: &Q,
            state: &A::State,
            n: u64,
            admission: &Decision,
            guard: &Guard<'_>,
        ) -> Result<(), InsufficientCapacity>
        where
            Self: super::HotKeyMode<A>,
            K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
            Q: Hash + Eq + ?Sized,
            C: Clock,
            S: BuildHasher + Clone;

        /// Drops the hot stripes of `state`, just removed for `key`, if it has any.
        fn forget<K, C, S, Q>(store: &Keyed<K, A, C, S, Self>, hash: u64, key: &Q, state: &A::State, guard: &Guard<'_>)
        where
            Self: super::HotKeyMode<A>,
            K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
            Q: Hash + Eq + ?Sized,
            C: Clock,
            S: BuildHasher + Clone;

        /// For a hot key's state: retires its hot bucket if idle with every lease
        /// expired, drops it, and retires the state. Returns whether the state was
        /// retired (false for any other state).
        fn try_retire_hot<K, C, S>(
            store: &Keyed<K, A, C, S, Self>,
            hash: impl FnOnce() -> u64,
            key: &K,
            state: &A::State,
            now: Nanos,
            guard: &Guard<'_>,
        ) -> bool
        where
            Self: super::HotKeyMode<A>,
            K: Hash + Eq + Clone + Send + Sync + 'static,
            C: Clock,
            S: BuildHasher + Clone;

        /// Evicts a hot key idle at `now`, if one is.
        fn evict_idle_hot_key<K, C, S>(store: &Keyed<K, A, C, S, Self>, now: Nanos, guard: &Guard<'_>) -> bool
        where
            Self: super::HotKeyMode<A>,
            K: Hash + Eq + Clone + Send + Sync + 'static,
            C: Clock,
            S: BuildHasher + Clone;

        /// Whether every hot-key slot is taken (`count` hot keys are stored).
        fn slots_full(&self, count: &AtomicUsize) -> bool;
    }
}

/// How a [`Keyed`] store treats keys that every thread hits at once: the store's
/// last type parameter. [`NoHotKeys`], every store's default, keeps every key
/// exact; [`HotKeys`], for GCRA stores ([`Keyed::with_hot_keys`]), moves such keys
/// to per-thread lease stripes.
///
/// A mode is chosen by type, so a store without hot keys compiles to a check with
/// no hot-key code in it at all. Sealed: implemented by those two types only; its
/// methods are the store's and are not part of the public API.
///
/// The store's hot-key operations take its epoch guard on trust, so they cannot be
/// named outside weir-keyed:
///
/// ```compile_fail
/// use weir_gcra::GcraAlgorithm;
/// use weir_keyed::{HotKeyMode, HotKeys};
///
/// let _ = <HotKeys as HotKeyMode<GcraAlgorithm>>::slots_full;
/// ```
pub trait HotKeyMode<A: KeyedAlgorithm>: sealed::Sealed<A> {}

/// The hot-key mode of a store that keeps every key exact: the default of every
/// [`Keyed`] store. Its checks contain no hot-key code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoHotKeys;

impl<A: KeyedAlgorithm> HotKeyMode<A> for NoHotKeys {}

impl<A: KeyedAlgorithm> sealed::Sealed<A> for NoHotKeys {
    type Stripes = ();

    #[inline(always)]
    fn check_n<C: Clock + ?Sized>(
        &self,
        algorithm: &A,
        state: &A::State,
        n: u64,
        clock: &C,
    ) -> Result<(Decision, u32), InsufficientCapacity> {
        algorithm.check_n(state, n, clock).map(|decision| (decision, 0))
    }

    #[inline(always)]
    fn check<C: Clock + ?Sized>(&self, algorithm: &A, state: &A::State, clock: &C) -> (Decision, u32) {
        (algorithm.check(state, clock), 0)
    }

    #[inline(always)]
    fn kind(algorithm: &A, state: &A::State) -> StateKind {
        if algorithm.is_retired(state) { StateKind::Retired } else { StateKind::Live }
    }

    fn check_hot<K, C, S, Q>(
        _: &Keyed<K, A, C, S, Self>,
        _: usize,
        _: u64,
        _: &Q,
        _: &A::State,
        _: u64,
        _: Nanos,
        denied: Decision,
        _: &Guard<'_>,
    ) -> Option<Result<Decision, InsufficientCapacity>>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
        Some(Ok(denied)) // never reached: no state of this store is hot
    }

    #[inline(always)]
    fn wants_promotion<K, C, S>(_: &Keyed<K, A, C, S, Self>, _: &A::State, _: u32) -> bool {
        false
    }

    #[inline(always)]
    fn contended<K, C, S, Q>(_: &Keyed<K, A, C, S, Self>, _: usize, _: u64, _: &Q, _: &A::State, _: K, _: &Guard<'_>)
    where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
    }

    fn hot_snapshot<K, C, S, Q>(
        _: &Keyed<K, A, C, S, Self>,
        _: u64,
        _: &Q,
        _: &A::State,
        _: Nanos,
        _: &Guard<'_>,
    ) -> Option<Snapshot>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
        None
    }

    fn hot_refund<K, C, S, Q>(
        _: &Keyed<K, A, C, S, Self>,
        _: u64,
        _: &Q,
        _: &A::State,
        _: u64,
        _: &Decision,
        _: &Guard<'_>,
    ) -> Result<(), InsufficientCapacity>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
        Ok(())
    }

    #[inline(always)]
    fn forget<K, C, S, Q>(_: &Keyed<K, A, C, S, Self>, _: u64, _: &Q, _: &A::State, _: &Guard<'_>)
    where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
    }

    #[inline(always)]
    fn try_retire_hot<K, C, S>(
        _: &Keyed<K, A, C, S, Self>,
        _: impl FnOnce() -> u64,
        _: &K,
        _: &A::State,
        _: Nanos,
        _: &Guard<'_>,
    ) -> bool
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock,
        S: BuildHasher + Clone,
    {
        false
    }

    #[inline(always)]
    fn evict_idle_hot_key<K, C, S>(_: &Keyed<K, A, C, S, Self>, _: Nanos, _: &Guard<'_>) -> bool
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock,
        S: BuildHasher + Clone,
    {
        false
    }

    #[inline(always)]
    fn slots_full(&self, _: &AtomicUsize) -> bool {
        false
    }
}

/// Hot-key mode for a GCRA store ([`Keyed::with_hot_keys`]): when checks of one
/// key collide (a check loses `after_lost_races` CAS races to other checks of the
/// same key), the key's bucket moves to per-thread lease stripes (the engine of
/// [`weir_gcra::LeasedGcra`]), so its checks stop contending on one cache line.
/// The key then has the leased limiter's bounded over-admission
/// ([`LeaseConfig::over_admission_bound`]); every other key stays exact. At most
/// `max_hot_keys` keys are hot at once (each costs a few KiB of stripes); a hot key
/// whose bucket is idle with every lease expired is swept like any idle key
/// (insertions pace sweeps while every hot slot is taken, whatever
/// [`KeyedConfig::sweep_from`] says).
///
/// Built with [`HotKeys::builder`]; the [`Default`] is leases as
/// [`LeaseConfig::default`], promotion after 2 lost races, at most 64 hot keys.
///
/// ```
/// use weir_gcra::LeaseConfig;
/// use weir_keyed::HotKeys;
///
/// let hot = HotKeys::builder().lease(LeaseConfig::builder().stripes(8).build()?).max_hot_keys(16).build()?;
/// assert_eq!((hot.lease().stripes(), hot.max_hot_keys()), (8, 16));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotKeys {
    pub(crate) lease: LeaseConfig,
    pub(crate) after_lost_races: u32,
    pub(crate) max_hot_keys: usize,
}

impl Default for HotKeys {
    /// Leases as [`LeaseConfig::default`]; promote after 2 lost races; at most 64
    /// hot keys.
    fn default() -> Self {
        Self { lease: LeaseConfig::default(), after_lost_races: 2, max_hot_keys: 64 }
    }
}

/// Builds a [`HotKeys`]: every option starts at its default, each setter replaces
/// one and never fails, and [`build`](Self::build) checks them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct HotKeysBuilder {
    hot: HotKeys,
}

impl HotKeys {
    /// A builder starting from the [`Default`]s.
    pub fn builder() -> HotKeysBuilder {
        HotKeysBuilder { hot: Self::default() }
    }

    /// The lease configuration of a hot key.
    pub fn lease(&self) -> &LeaseConfig {
        &self.lease
    }

    /// How many CAS races one check of a key must lose for the key to turn hot.
    pub fn after_lost_races(&self) -> u32 {
        self.after_lost_races
    }

    /// The most keys hot at once.
    pub fn max_hot_keys(&self) -> usize {
        self.max_hot_keys
    }
}

impl HotKeysBuilder {
    /// How a hot key's bucket is spread over stripes. Default:
    /// [`LeaseConfig::default`].
    pub fn lease(mut self, lease: LeaseConfig) -> Self {
        self.hot.lease = lease;
        self
    }

    /// Promote a key when one of its checks loses `n` CAS races (at least 1).
    /// Default: 2.
    pub fn after_lost_races(mut self, n: u32) -> Self {
        self.hot.after_lost_races = n;
        self
    }

    /// At most `n` hot keys at once (at least 1). Default: 64.
    pub fn max_hot_keys(mut self, n: usize) -> Self {
        self.hot.max_hot_keys = n;
        self
    }

    /// The configuration, or the first option out of its range.
    pub fn build(self) -> Result<HotKeys, KeyedConfigError> {
        if self.hot.after_lost_races == 0 {
            return Err(KeyedConfigError::ZeroLostRaces);
        }
        if self.hot.max_hot_keys == 0 {
            return Err(KeyedConfigError::ZeroHotKeys);
        }
        Ok(self.hot)
    }
}

impl HotKeyMode<GcraAlgorithm> for HotKeys {}

impl sealed::Sealed<GcraAlgorithm> for HotKeys {
    type Stripes = LeaseStripes;

    #[inline(always)]
    fn check_n<C: Clock + ?Sized>(
        &self,
        algorithm: &GcraAlgorithm,
        state: &GcraState,
        n: u64,
        clock: &C,
    ) -> Result<(Decision, u32), InsufficientCapacity> {
        check_n_contended(algorithm, state, n, clock)
    }

    #[inline(always)]
    fn check<C: Clock + ?Sized>(&self, algorithm: &GcraAlgorithm, state: &GcraState, clock: &C) -> (Decision, u32) {
        check_contended(algorithm, state, clock)
    }

    #[inline(always)]
    fn kind(_: &GcraAlgorithm, state: &GcraState) -> StateKind {
        state_kind(state)
    }

    fn check_hot<K, C, S, Q>(
        store: &Keyed<K, GcraAlgorithm, C, S, Self>,
        shard: usize,
        hash: u64,
        key: &Q,
        state: &GcraState,
        n: u64,
        now: Nanos,
        _: Decision,
        guard: &Guard<'_>,
    ) -> Option<Result<Decision, InsufficientCapacity>>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
        store.check_hot(&store.shards[shard], hash, key, state, n, now, guard)
    }

    fn wants_promotion<K, C, S>(
        store: &Keyed<K, GcraAlgorithm, C, S, Self>,
        state: &GcraState,
        lost_races: u32,
    ) -> bool {
        // Ordering: Relaxed; a hint (`try_promote` takes the slot by a CAS).
        lost_races >= store.hot.after_lost_races
            && store.hot_count.load(Ordering::Relaxed) < store.hot.max_hot_keys
            && !is_promoted(state)
    }

    fn contended<K, C, S, Q>(
        store: &Keyed<K, GcraAlgorithm, C, S, Self>,
        shard: usize,
        hash: u64,
        key: &Q,
        state: &GcraState,
        owned: K,
        guard: &Guard<'_>,
    ) where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
        store.try_promote(&store.shards[shard], hash, key, owned, state, guard);
    }

    fn hot_snapshot<K, C, S, Q>(
        store: &Keyed<K, GcraAlgorithm, C, S, Self>,
        hash: u64,
        key: &Q,
        state: &GcraState,
        now: Nanos,
        guard: &Guard<'_>,
    ) -> Option<Snapshot>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
        let stripes = store.stripes_of(hash, key, state, guard)?;
        Some(store.algorithm.snapshot(stripes.bucket(), now))
    }

    fn hot_refund<K, C, S, Q>(
        store: &Keyed<K, GcraAlgorithm, C, S, Self>,
        hash: u64,
        key: &Q,
        state: &GcraState,
        n: u64,
        admission: &Decision,
        guard: &Guard<'_>,
    ) -> Result<(), InsufficientCapacity>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
        // The admission may have come from a lease, so the lease machinery credits
        // it (the debt less the time since it was charged: never more than is still
        // owed). A key being retired is idle, so full: nothing to give back.
        match store.stripes_of(hash, key, state, guard) {
            Some(stripes) => stripes.refund(&store.algorithm, n, admission, &store.clock),
            None => Ok(()),
        }
    }

    fn forget<K, C, S, Q>(
        store: &Keyed<K, GcraAlgorithm, C, S, Self>,
        hash: u64,
        key: &Q,
        state: &GcraState,
        guard: &Guard<'_>,
    ) where
        K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        C: Clock,
        S: BuildHasher + Clone,
    {
        // Only this state's hot stripes: a newer state of the key may have its own.
        let owner = owner_of(state);
        // By the stripes' owner: no key is compared (the key is already unlinked and
        // counted, so nothing may unwind here).
        let _ = key;
        if store.hot_keys.remove_value(hash, |stripes| stripes.owner() == owner, guard) {
            // Ordering: Relaxed; the count publishes nothing, and its bound is kept
            // by the CAS in `try_promote`.
            store.hot_count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn try_retire_hot<K, C, S>(
        store: &Keyed<K, GcraAlgorithm, C, S, Self>,
        hash: impl FnOnce() -> u64,
        key: &K,
        state: &GcraState,
        now: Nanos,
        guard: &Guard<'_>,
    ) -> bool
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock,
        S: BuildHasher + Clone,
    {
        store.try_retire_hot(hash, key, state, now, guard)
    }

    fn evict_idle_hot_key<K, C, S>(store: &Keyed<K, GcraAlgorithm, C, S, Self>, now: Nanos, guard: &Guard<'_>) -> bool
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock,
        S: BuildHasher + Clone,
    {
        store.evict_idle_hot_key(now, guard)
    }

    #[inline]
    fn slots_full(&self, count: &AtomicUsize) -> bool {
        // Ordering: Relaxed; a hint (see `Keyed::paced_sweep`).
        count.load(Ordering::Relaxed) >= self.max_hot_keys
    }
}

impl<K, C, S> Keyed<K, GcraAlgorithm, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Replaces the quota of every key ([`GcraAlgorithm::set_quota_with_clock`],
    /// with the store's clock: each key keeps its state, read under the new quota
    /// from its next check, and a refund credits at most what its admission was
    /// charged). The store's
    /// [`policies`](weir_rl_core::KeyedLimiter::policies) (what middleware reports in
    /// `RateLimit-Policy`) stay those it was built with.
    pub fn set_quota(&self, quota: weir_rl_core::Quota) {
        self.algorithm.set_quota_with_clock(quota, &self.clock);
    }

    /// This store in hot-key mode (see [`HotKeys`]); its type says so
    /// (`Keyed<K, GcraAlgorithm, C, S, HotKeys>`).
    ///
    /// ```
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_gcra::LeaseConfig;
    /// use weir_keyed::{HotKeys, Keyed, KeyedConfig};
    ///
    /// let hot = HotKeys::builder().lease(LeaseConfig::builder().stripes(8).max_lease(32).build()?).build()?;
    /// let config = KeyedConfig::builder(10_000).build()?;
    /// let per_tenant = Keyed::<u64, _, _>::gcra_with_clock(Quota::per_second(1_000_000)?, config, ManualClock::new())
    ///     .with_hot_keys(hot);
    /// assert!(per_tenant.check(&7).is_allowed());
    /// assert!(per_tenant.promote(&7) && per_tenant.is_hot(&7));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_hot_keys(self, hot: HotKeys) -> Keyed<K, GcraAlgorithm, C, S, HotKeys> {
        Keyed {
            collector: self.collector,
            shards: self.shards,
            hasher: self.hasher,
            algorithm: self.algorithm,
            policies: self.policies,
            clock: self.clock,
            config: self.config,
            live: self.live,
            inserted: self.inserted,
            cursor: self.cursor,
            bounds: self.bounds,
            store_bound: self.store_bound,
            publishing: self.publishing,
            // Its slab grows only while the stripes awaiting reclamation are at most
            // the hot keys plus `max_hot_keys` (see `Shard::with_slack`): hot keys
            // that come and go while a guard is held cost at most that many.
            hot_keys: Shard::with_slack(hot.max_hot_keys),
            hot,
            hot_count: AtomicUsize::new(0),
        }
    }
}

impl<K, C, S> Keyed<K, GcraAlgorithm, C, S, HotKeys>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Replaces the quota of every key, as [`GcraAlgorithm::set_quota_with_clock`] does, and
    /// gives back what the hot keys' leases hold (the unused permits' debt less
    /// the time since they were charged), as [`LeasedGcra::set_quota`] does: the
    /// new quota then holds within its own lease bound. Changing the quota through
    /// [`algorithm()`](Keyed::algorithm) instead would leave leases taken under the
    /// old quota to be spent under the new one. The store's
    /// [`policies`](weir_rl_core::KeyedLimiter::policies) (what middleware reports in
    /// `RateLimit-Policy`) stay those it was built with.
    ///
    /// [`LeasedGcra::set_quota`]: weir_gcra::LeasedGcra::set_quota
    pub fn set_quota(&self, quota: weir_rl_core::Quota) {
        self.algorithm.set_quota_with_clock(quota, &self.clock);
        let guard = self.collector.enter();
        for (_, stripes) in self.hot_keys.iter(&guard) {
            stripes.release(&self.algorithm, &self.clock);
        }
    }

    /// Moves `key` into hot mode now, whatever its contention (for a key known to be
    /// hot, e.g. a tenant's global limit). Returns whether it is hot afterwards
    /// (false if every hot-key slot is taken, or the store is full and `key` not in it).
    pub fn promote<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut hash = self.hash(key);
        let index = self.shard_index(hash);
        let shard = &self.shards[index];
        // The key's `Clone` (user code, which may take long) runs outside the guard,
        // as a check's does: once for the hot map, and once per insertion.
        let hot_key = key.to_owned();
        let mut guard = self.collector.enter();
        let mut owned = None;
        let mut retry_slab = true;
        let state = loop {
            if let Some(state) = shard.get(hash, key, &guard) {
                break state;
            }
            let Some(cloned) = owned.take() else {
                drop(guard);
                owned = Some(key.to_owned());
                guard = self.collector.enter();
                continue;
            };
            match self.insert(shard, hash, key, cloned, retry_slab, &guard) {
                Ok((state, inserted)) => {
                    if inserted {
                        self.note_new_key(index, state, self.clock.now());
                    }
                    break state;
                }
                Err(NotInserted::Retry { slab }) => retry_slab &= !slab,
                Err(NotInserted::Rehash) => hash = self.hash(key),
                Err(NotInserted::Full) => return false,
            }
        };
        self.try_promote(shard, hash, key, hot_key, state, &guard);
        is_promoted(state) && self.stripes_of(hash, key, state, &guard).is_some()
    }

    /// Whether `key` is in hot mode.
    pub fn is_hot<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let guard = self.collector.enter();
        self.shard(hash).get(hash, key, &guard).is_some_and(is_promoted)
    }

    /// The hot stripes of `key` whose state is `state`, if they are still there
    /// (stripes of another state of the key are not these).
    fn stripes_of<'g, Q>(
        &'g self,
        hash: u64,
        key: &Q,
        state: &GcraState,
        guard: &'g Guard<'_>,
    ) -> Option<&'g LeaseStripes>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.hot_keys.get(self.hot_hash(hash, key), key, guard).filter(|stripes| stripes.owner() == owner_of(state))
    }

    /// For a hot key (whose hash `hash` gives, only if the state is promoted):
    /// retires its hot bucket if idle with every lease expired, drops it, and
    /// retires the key's state. Returns whether the key's state was retired.
    fn try_retire_hot(
        &self,
        hash: impl FnOnce() -> u64,
        key: &K,
        state: &GcraState,
        now: Nanos,
        guard: &Guard<'_>,
    ) -> bool {
        if !is_promoted(state) {
            return false;
        }
        let hash = hash();
        match self.stripes_of(hash, key, state, guard) {
            Some(stripes) => {
                if !retire_promoted(&self.algorithm, state, stripes, now) {
                    return false;
                }
                self.drop_hot(hash, key, stripes, guard);
                true
            }
            // Promoted, but its stripes are gone (dropped by a sweep or `remove`).
            None => retire_orphan(state),
        }
    }

    /// Removes `key`'s hot stripes if they are still `stripes`.
    fn drop_hot<Q>(&self, hash: u64, key: &Q, stripes: &LeaseStripes, guard: &Guard<'_>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // By identity: no key is compared (this runs after a retirement, when
        // nothing may unwind).
        let _ = key;
        if self.hot_keys.remove_value(hash, |current| std::ptr::eq(current, stripes), guard) {
            // Ordering: Relaxed; see `forget`.
            self.hot_count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Checks a promoted key on its hot stripes. `None`: the hot bucket is gone or
    /// retired (the key is being evicted); the caller retries from the lookup.
    #[allow(clippy::too_many_arguments)]
    fn check_hot<Q>(
        &self,
        shard: &Shard<K, GcraState>,
        hash: u64,
        key: &Q,
        state: &GcraState,
        n: u64,
        now: Nanos,
        guard: &Guard<'_>,
    ) -> Option<Result<Decision, InsufficientCapacity>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.stripes_of(hash, key, state, guard) {
            Some(stripes) => {
                let decision = stripes.check_on(&self.algorithm, weir_rl_core::__private::thread_stripe(), n, &now);
                match decision {
                    Ok(d) if d.is_denied() && self.algorithm.is_retired(stripes.bucket()) => {
                        // A sweep retired the hot bucket (it was idle, every lease
                        // expired) and may not have finished: finish for it, rather than
                        // wait, and retry on a fresh state.
                        retire_orphan(state);
                        self.drop_hot(hash, key, stripes, guard);
                        self.unlink(shard, hash, key, state, guard);
                        None
                    }
                    other => Some(other),
                }
            }
            None => {
                // Promoted, but its own stripes are gone (dropped by a sweep or
                // `remove`; any stripes here belong to a newer state): finish retiring
                // this state and retry on whatever the key maps to now.
                retire_orphan(state);
                self.unlink(shard, hash, key, state, guard);
                None
            }
        }
    }

    /// Moves `key` to hot mode, within `max_hot_keys`. Only the thread whose stripes
    /// entered the hot map promotes into them; the stripes record the state they
    /// belong to, so no holder of another state ever uses them.
    /// `owned` is `key` cloned outside the guard; only the second try, after
    /// dropping stale stripes of the key (a promotion racing with the key's
    /// removal), clones it inside.
    fn try_promote<Q>(
        &self,
        shard: &Shard<K, GcraState>,
        hash: u64,
        key: &Q,
        owned: K,
        state: &GcraState,
        guard: &Guard<'_>,
    ) where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let config = self.hot;
        // Ordering: Relaxed; the bound needs only the CAS's atomicity (see `reserve`).
        let mut count = self.hot_count.load(Ordering::Relaxed);
        loop {
            if count >= config.max_hot_keys || is_promoted(state) {
                return;
            }
            // Ordering: Relaxed; see above.
            match self.hot_count.compare_exchange_weak(count, count + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => count = actual,
            }
        }
        /// Gives back the hot slot reserved above if the key's `Clone`, `Hash` or
        /// `Eq` (user code, run by the insertion below) panics.
        struct Reserved<'a>(&'a AtomicUsize);
        impl Drop for Reserved<'_> {
            fn drop(&mut self) {
                // Ordering: Relaxed; see `forget`.
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let reserved = Reserved(&self.hot_count);
        let owner = owner_of(state);
        let mut owned = Some(owned);
        let mut dropped_stale = false;
        let mut hot_hash = self.hot_hash(hash, key);
        let ours = loop {
            let stripes = LeaseStripes::new(config.lease, self.clock.now()).with_owner(owner);
            let hot_key = owned.take().unwrap_or_else(|| key.to_owned());
            match self.hot_keys.try_insert(hot_hash, hot_key, stripes, || true, &self.hasher, guard) {
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
                        && state_kind(state) == StateKind::Live
                        && self.is_linked(shard, hash, key, state, guard) =>
                {
                    dropped_stale = true;
                    self.drop_hot(hash, key, current, guard);
                }
                // The hot keys' shard hardened (by this insertion's rebuild, or
                // another's since `hot_hash`): hash the key for it again.
                Err(Inserted::Rehash { hardened }) => {
                    metric!(self, |m| if hardened {
                        m.hardened_shards.increment(1);
                    });
                    let _ = hardened;
                    hot_hash = self.hasher.for_shard(key, self.hot_keys.is_hardened());
                }
                // Another thread is promoting this very state, or ours is stale.
                Err(_) => break None,
            }
        };
        let Some(ours) = ours else {
            // Gives back the reservation.
            drop(reserved);
            return;
        };
        // The slot is the inserted stripes' from here on (`drop_hot` gives it back).
        std::mem::forget(reserved);
        if !promote(state, ours) {
            // Retired or promoted meanwhile: ours was never used.
            self.drop_hot(hash, key, ours, guard);
            return;
        }
        // If `remove` unlinked the state while it was being promoted, no sweep will
        // ever see it: retire it (its holders retry on the key's current state) and
        // drop its stripes.
        if !self.is_linked(shard, hash, key, state, guard) {
            retire_orphan(state);
            self.drop_hot(hash, key, ours, guard);
        }
    }

    /// Whether `key` maps to `state` now.
    fn is_linked<Q>(
        &self,
        shard: &Shard<K, GcraState>,
        hash: u64,
        key: &Q,
        state: &GcraState,
        guard: &Guard<'_>,
    ) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // By identity (a state belongs to one key): no key is compared, so this runs
        // no user code (it runs after a promotion, when nothing may unwind).
        let _ = key;
        shard.holds_value(hash, |current| std::ptr::eq(current, state), guard)
    }

    /// Evicts a hot key idle at `now` (its bucket idle, every lease expired), if
    /// one is: one look at each hot key.
    fn evict_idle_hot_key(&self, now: Nanos, guard: &Guard<'_>) -> bool {
        // Ordering: Relaxed; a hint (a key promoted meanwhile is busy, not idle).
        if self.hot_count.load(Ordering::Relaxed) == 0 {
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
fn owner_of(state: &GcraState) -> usize {
    state as *const GcraState as usize
}
