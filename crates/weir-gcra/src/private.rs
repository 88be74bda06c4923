//! Hot keys: moving one key's bucket to a [`LeaseStripes`] and back. What
//! weir-keyed's hot-key mode uses, through [`crate::__private`]; not part of the
//! public API.

use crate::stripes::LeaseStripes;
use crate::{GcraAlgorithm, GcraState, PROMOTED, RETIRED};
use weir_rl_core::__private::sync::Ordering;
use weir_rl_core::{Clock, Decision, InsufficientCapacity, Nanos, Retire};

/// What a GCRA state currently is, read in one load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    /// A live bucket.
    Live,
    /// Retired ([`Retire`]): admits nothing; a per-key store replaces it.
    Retired,
    /// Promoted to a hot bucket ([`promote`]).
    Promoted,
}

/// [`Algorithm::check_n`](weir_rl_core::Algorithm::check_n), also returning how many CAS races the check lost to
/// other checks of the same state: a per-key store's signal that a key is hot.
#[inline]
pub fn check_n_contended<C: Clock + ?Sized>(
    algorithm: &GcraAlgorithm,
    state: &GcraState,
    n: u64,
    clock: &C,
) -> Result<(Decision, u32), InsufficientCapacity> {
    algorithm.check_n_counting(&algorithm.quota.load(), state, n, clock)
}

/// [`check_n_contended`] for one unit (`Algorithm::check`): 1 ≤ burst always, so
/// there is no error to return.
#[inline(always)]
pub fn check_contended<C: Clock + ?Sized>(algorithm: &GcraAlgorithm, state: &GcraState, clock: &C) -> (Decision, u32) {
    algorithm.check_counting(state, clock)
}

/// Moves `from`'s bucket into `to` (a fresh, not yet shared hot bucket) and marks
/// `from` promoted, atomically with respect to checks of `from`: a check that
/// lands before the hand-over is carried into `to`'s TAT; one that comes after is
/// denied on `from` and sees [`is_promoted`]. Returns false if `from` was already
/// promoted or retired. Only one thread may promote into a given `to`, and `to`
/// must not be checked before this returns true.
pub fn promote(from: &GcraState, to: &LeaseStripes) -> bool {
    // Ordering: Relaxed; see `GcraAlgorithm::acquire_counting`.
    let mut tat = from.tat.load(Ordering::Relaxed);
    loop {
        if tat >= PROMOTED {
            return false;
        }
        // Ordering: Relaxed; published by the Release CAS below.
        to.bucket().tat.store(tat, Ordering::Relaxed);
        // Ordering: Release publishes `to`'s TAT to checks that see PROMOTED with
        // the Acquire load in `is_promoted`; Relaxed on failure (nothing read).
        match from.tat.compare_exchange(tat, PROMOTED, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(actual) => tat = actual,
        }
    }
}

/// What `state` is (live, retired or promoted), from a single load, so a caller
/// never sees "not retired" and then "not promoted" across a change from one to
/// the other.
#[inline]
pub fn state_kind(state: &GcraState) -> StateKind {
    // Ordering: Acquire, as in `is_promoted`.
    match state.tat.load(Ordering::Acquire) {
        RETIRED => StateKind::Retired,
        PROMOTED => StateKind::Promoted,
        _ => StateKind::Live,
    }
}

/// Whether `state`'s bucket has moved to a hot bucket.
#[inline]
pub fn is_promoted(state: &GcraState) -> bool {
    // Ordering: Acquire pairs with the Release CAS in `promote`, so the hot
    // bucket's TAT written before it is visible to this thread.
    state.tat.load(Ordering::Acquire) == PROMOTED
}

/// Retires a promoted `from` whose hot bucket `to` is idle at `now` with every
/// lease expired, so the key can be dropped without changing any decision: `to`'s
/// bucket is retired first (checks routed to it are then denied and retry), then
/// `from`. Returns whether both were retired.
pub fn retire_promoted(algorithm: &GcraAlgorithm, from: &GcraState, to: &LeaseStripes, now: Nanos) -> bool {
    if !to.all_leases_expired(algorithm, now) || !algorithm.try_retire(to.bucket(), now) {
        return false;
    }
    retire_orphan(from)
}

/// Marks a promoted `from` retired whatever its hot bucket's state: for a key
/// whose hot bucket is gone (retired by a sweep, or removed on purpose).
pub fn retire_orphan(from: &GcraState) -> bool {
    // Ordering: Relaxed; see `Retire::try_retire` for `GcraAlgorithm`.
    from.tat.compare_exchange(PROMOTED, RETIRED, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}
