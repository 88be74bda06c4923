//! The two traits every algorithm implements: [`Limiter`] (one limiter with its own
//! state and clock) and [`Algorithm`] (shared parameters applied to any number of
//! separately stored states: what per-key stores are built from).

use crate::{Clock, Decision, InsufficientCapacity, Nanos, Snapshot, Wait};

/// One rate limiter: what servers, middleware and benchmarks call.
///
/// Every algorithm in weir implements it, so callers treat them alike:
///
/// ```
/// use weir_rl_core::{Decision, InsufficientCapacity, Limiter, Snapshot};
///
/// /// Admits a request of `cost`, and gives back what the work did not use.
/// fn serve(limiter: &dyn Limiter, cost: u64, work: impl FnOnce() -> u64) -> Result<bool, InsufficientCapacity> {
///     let decision = limiter.check_n(cost)?;
///     if decision.is_allowed() {
///         let used = work().min(cost);
///         limiter.refund(cost - used, &decision)?;
///     }
///     Ok(decision.is_allowed())
/// }
/// ```
pub trait Limiter {
    /// Checks one request: admits it (consuming one unit of capacity) or denies it
    /// (consuming nothing).
    fn check(&self) -> Decision;

    /// The lean check: admits one request (`Ok`) or says how long until it would
    /// be admitted (`Err`), as [`check`](Self::check) decides, with none of the
    /// rest of a [`Decision`] (remaining, reset, what a refund needs). For a caller
    /// that only asks "may this request pass, or how long must it wait?": an
    /// algorithm whose decision costs more than its verdict answers this with less
    /// work ([`Wait`] is one word, so the answer comes back in registers).
    ///
    /// ```
    /// use weir_rl_core::{Decision, InsufficientCapacity, Limiter, Snapshot, Wait};
    ///
    /// /// A limiter that is always spent, for one second more.
    /// struct Spent;
    /// impl Limiter for Spent {
    ///     fn check(&self) -> Decision {
    ///         Decision::denied(Snapshot::new(1, 0, 1_000_000_000), 1_000_000_000)
    ///     }
    /// #   fn check_n(&self, _: u64) -> Result<Decision, InsufficientCapacity> { Ok(self.check()) }
    /// #   fn refund(&self, _: u64, _: &Decision) -> Result<(), InsufficientCapacity> { Ok(()) }
    /// #   fn snapshot(&self) -> Snapshot { Snapshot::new(1, 0, 1_000_000_000) }
    ///     // ...
    /// }
    /// assert_eq!(Spent.admit(), Err(Wait::from_nanos(1_000_000_000)));
    /// ```
    #[inline]
    fn admit(&self) -> Result<(), Wait> {
        self.check().verdict()
    }

    /// Checks a request of cost `n`, all or nothing. `n` greater than the limit can
    /// never be admitted and is an error; `n == 0` is always admitted and consumes
    /// nothing.
    fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity>;

    /// Gives back `n` units that `admission` (a decision this limiter returned)
    /// consumed and the caller did not use. See [`Algorithm::refund`] for what each
    /// kind of algorithm gives back and when; in short, never more than was taken,
    /// never beyond a full limiter, and nothing for a denial. `n` above the limit is
    /// an error (no single check could have taken it).
    fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity>;

    /// The current state, without consuming anything.
    fn snapshot(&self) -> Snapshot;
}

impl<L: Limiter + ?Sized> Limiter for &L {
    #[inline]
    fn check(&self) -> Decision {
        (**self).check()
    }
    #[inline]
    fn admit(&self) -> Result<(), Wait> {
        (**self).admit()
    }
    #[inline]
    fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        (**self).check_n(n)
    }
    #[inline]
    fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        (**self).refund(n, admission)
    }
    #[inline]
    fn snapshot(&self) -> Snapshot {
        (**self).snapshot()
    }
}

#[cfg(feature = "alloc")]
impl<L: Limiter + ?Sized> Limiter for alloc::sync::Arc<L> {
    #[inline]
    fn check(&self) -> Decision {
        (**self).check()
    }
    #[inline]
    fn admit(&self) -> Result<(), Wait> {
        (**self).admit()
    }
    #[inline]
    fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        (**self).check_n(n)
    }
    #[inline]
    fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        (**self).refund(n, admission)
    }
    #[inline]
    fn snapshot(&self) -> Snapshot {
        (**self).snapshot()
    }
}

#[cfg(feature = "alloc")]
impl<L: Limiter + ?Sized> Limiter for alloc::boxed::Box<L> {
    #[inline]
    fn check(&self) -> Decision {
        (**self).check()
    }
    #[inline]
    fn admit(&self) -> Result<(), Wait> {
        (**self).admit()
    }
    #[inline]
    fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        (**self).check_n(n)
    }
    #[inline]
    fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        (**self).refund(n, admission)
    }
    #[inline]
    fn snapshot(&self) -> Snapshot {
        (**self).snapshot()
    }
}

/// An algorithm's parameters, applied to states kept elsewhere.
///
/// A per-key store keeps one small [`State`](Algorithm::State) per key and one
/// `Algorithm` for all of them; a single limiter keeps one of each. Time is passed
/// in: a [`Clock`] (read as late as the algorithm can, e.g. inside a CAS retry loop),
/// or a fixed [`Nanos`], which is itself a frozen clock.
pub trait Algorithm {
    /// The per-limiter (per-key) state.
    type State;

    /// The most requests admitted at once.
    fn limit(&self) -> u64;

    /// A fresh state: a full bucket, an empty window.
    fn new_state(&self) -> Self::State;

    /// Checks a request of cost `n` against `state` (see [`Limiter::check_n`]).
    fn check_n<C: Clock + ?Sized>(
        &self,
        state: &Self::State,
        n: u64,
        clock: &C,
    ) -> Result<Decision, InsufficientCapacity>;

    /// Checks one request against `state` (see [`Limiter::check`]).
    fn check<C: Clock + ?Sized>(&self, state: &Self::State, clock: &C) -> Decision;

    /// Gives back `n` units that `admission` consumed from `state` and the caller
    /// did not use: an all-of check that a later quota denied, a request the server
    /// chose not to count, or work that cost less than was asked for.
    ///
    /// `admission` must be a decision this algorithm returned for this `state`; its
    /// [`decided_at`](Decision::decided_at) (every algorithm stamps its decisions
    /// with [`Decision::at`]) says where the units were counted. The rules, the same
    /// for every algorithm:
    ///
    /// - **Never over-admission.** A refund gives back at most what the admission
    ///   took, to where it took it from, and never beyond an empty state (a full
    ///   bucket). Passing an `n` larger than the admission's cost, or a decision of
    ///   another state, is the caller's error: it may give back other admissions'
    ///   units, but never more than the state holds.
    /// - **Nothing for a denial**: a denied decision consumed nothing.
    /// - **Per-window algorithms give back to the admission's window**, and nothing
    ///   once that window no longer weighs on any decision: a fixed window only while
    ///   the admission's window is the current one; a sliding window counter to the
    ///   current count while in the same window, to the previous count once the
    ///   admission's window is the previous one; a sliding log removes `n` of the
    ///   entries recorded at the admission's time (the latest ones at or before it
    ///   that are still in the window). A token bucket credits `n` units' time,
    ///   never below a full bucket: their price under the quota in force or, if the
    ///   quota changed since the admission (the decision records what each unit was
    ///   charged, and under which quota), the smaller of their price then and now,
    ///   so a refund after a change to a slower quota never credits more than the
    ///   admission was charged. (The window algorithms' quotas never change.)
    /// - `n` above [`limit`](Self::limit) is [`InsufficientCapacity`]; `n == 0`
    ///   does nothing.
    ///
    /// A refund may race with checks of the same state: each is atomic, and a check
    /// sees the state before the refund or after it.
    fn refund<C: Clock + ?Sized>(
        &self,
        state: &Self::State,
        n: u64,
        admission: &Decision,
        clock: &C,
    ) -> Result<(), InsufficientCapacity>;

    /// `state` at `now`, without consuming anything.
    fn snapshot(&self, state: &Self::State, now: Nanos) -> Snapshot;

    /// Whether `state` at `now` is indistinguishable from [`new_state`](Self::new_state):
    /// every later decision would be the same for either, so a per-key store may drop
    /// it without changing any decision.
    fn is_idle(&self, state: &Self::State, now: Nanos) -> bool;
}

/// An [`Algorithm`] whose idle states a per-key store can drop while other threads
/// may still be checking them, without any check ever being decided on a dropped
/// state.
///
/// The protocol: the store calls [`try_retire`](Retire::try_retire), which in one
/// atomic step marks the state retired *only if* it is idle. A retired state admits
/// nothing, so a check that raced with the retirement is denied; the store sees
/// [`is_retired`](Retire::is_retired) and retries that check on a fresh state, which
/// decides exactly as the retired one would have (it was idle). A check whose
/// admission landed first changed the state, and the retirement judges the new
/// state: it retires it only if it is still idle at the sweep's `now`, when dropping
/// it changes no decision at or after that time. Either way no admission is lost and
/// none is granted twice.
pub trait Retire: Algorithm {
    /// Retires `state` if it is idle at `now` (see [`Algorithm::is_idle`]); returns
    /// whether it did. Atomic with respect to concurrent checks.
    fn try_retire(&self, state: &Self::State, now: Nanos) -> bool;

    /// Whether `state` has been retired.
    fn is_retired(&self, state: &Self::State) -> bool;
}
