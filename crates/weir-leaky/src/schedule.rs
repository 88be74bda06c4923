//! [`LeakSchedule`]: the shared schedule of leak slots that paces every consumer of a
//! bucket together, GCRA-style.
//!
//! # The schedule
//!
//! One word, `next`: the earliest time, in ticks (1/16 ns) since the schedule's
//! origin, that the next slot may take. With leak interval `T` and tolerance `τ`
//! (zero by default), claiming a slot at time `now` is
//!
//! ```text
//! slot = max(next, now − τ)        next := slot + T
//! ```
//!
//! in one compare-and-swap: GCRA's update (`new_tat = max(tat, now) + T`), applied
//! to leaks instead of admissions. Slots are points in absolute time, so pacing does
//! not drift: a consumer that claims its next slot before it is due (one that is
//! already waiting when the previous item leaves) gets exactly `previous + T`, however
//! late its own wake-up was. Slot claims may be made ahead of time (the claimer then
//! waits until its slot), by any number of threads.
//!
//! # Guarantees
//!
//! - **Never faster than the rate.** Each slot is at least `T` after the one claimed
//!   before it (`next` only grows by claims), so any window of length `W` contains at
//!   most `⌊W / T⌋ + 1` slots. An item released at its slot (or later) never makes the
//!   output exceed `rate × W + 1` in slot time. With a tolerance `τ`, a slot may be up
//!   to `τ` in the past when claimed, so *release* times obey `⌊(W + τ) / T⌋ + 1`.
//! - **Each slot is held once.** A [`LeakSlot`] is a move-only token: it is neither
//!   `Clone` nor `Copy`, [`give_back`](LeakSchedule::give_back) consumes it, and it
//!   borrows the schedule it came from (a slot offered to another schedule is refused).
//!   So a slot, once given back, can be claimed again by one claimer only.
//! - **Give-back.** [`give_back`](LeakSchedule::give_back) undoes the latest claim
//!   exactly, so a caller that claims slots one at a time (as [`Throttle`] does) never
//!   wastes one. A slot that is not the latest claim comes back to its holder, still
//!   claimed.
//! - **Deadlines.** [`claim_by`](LeakSchedule::claim_by) never claims a slot later
//!   than its bound or, once the clock reads later than the bound, later than now: a
//!   caller that waits for its slot never waits past its deadline, and a deadline that
//!   has just passed still takes a slot that is due, as
//!   [`try_claim`](LeakSchedule::try_claim) does.
//! - **Lock-free**: a claim retries only when another claim (or give-back) landed.
//! - **No panic.** Time arithmetic saturates; a clock reading earlier than one already
//!   used is treated as no time having passed.
//!
#![cfg_attr(feature = "tokio", doc = "[`Throttle`]: crate::Throttle")]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`Throttle`]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.Throttle.html"
)]

use core::fmt;
use core::time::Duration;
use weir_rl_core::__private::MAX_TOLERANCE_TICKS;
use weir_rl_core::__private::duration_as_nanos_saturating;
use weir_rl_core::__private::sync::{AtomicU64, Backoff, CachePadded, Ordering};
use weir_rl_core::__private::ticks;
use weir_rl_core::{Clock, Nanos, Quota};

use crate::BuildError;

/// The latest time, in ticks since the origin, a schedule uses: later clock readings
/// are clamped to it (about 18 years after the schedule's creation), so
/// `now + T` cannot overflow.
const HORIZON_TICKS: u64 = (1 << 63) - 1;

/// A leak slot claimed from a [`LeakSchedule`]: the time its item may leave, and what
/// [`give_back`](LeakSchedule::give_back) needs to undo the claim.
///
/// A move-only token: not `Clone`, not `Copy`. Dropping it spends the slot;
/// [`give_back`](LeakSchedule::give_back) consumes it. So no slot can be given back
/// twice (which would let two claimers have it):
///
/// ```compile_fail,E0382
/// use weir_rl_core::{Nanos, Quota};
/// use weir_leaky::LeakSchedule;
///
/// let schedule = LeakSchedule::new(Quota::per_second(10)?, Nanos::ZERO)?;
/// let slot = schedule.claim(&Nanos::ZERO);
/// let _ = schedule.give_back(slot);
/// let _ = schedule.give_back(slot); // error: the slot was moved into the first give-back
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a claimed slot is spent unless its item leaves or it is given back"]
pub struct LeakSlot<'s> {
    /// The schedule it was claimed from: [`give_back`](LeakSchedule::give_back) refuses
    /// a slot of another schedule.
    schedule: &'s LeakSchedule,
    /// What undoing the claim needs.
    raw: RawSlot,
    /// The slot's time as a clock reading, rounded up to a whole nanosecond.
    at: Nanos,
}

/// A claim, without the schedule it belongs to: what a [`LeakSlot`] carries, and what
/// the [`Throttle`](crate::Throttle) keeps of a slot it hands from one waiter to the
/// next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawSlot {
    /// The slot's time, in ticks since the schedule's origin.
    at_ticks: u64,
    /// The schedule's `next` before this claim.
    previous: u64,
}

impl LeakSlot<'_> {
    /// The time (a reading of the schedule's clock) at which this slot's item may
    /// leave: never earlier than the slot, rounded up to a nanosecond.
    #[inline]
    pub const fn at(&self) -> Nanos {
        self.at
    }

    /// The claim, the token given up. The caller keeps it for one holder only (see
    /// [`LeakSchedule::slot_from_raw`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn into_raw(self) -> RawSlot {
        self.raw
    }
}

/// Two slots are equal when they are the same claim of the same schedule (a slot given
/// back and claimed again is the same claim).
impl PartialEq for LeakSlot<'_> {
    fn eq(&self, other: &Self) -> bool {
        core::ptr::eq(self.schedule, other.schedule) && self.raw == other.raw
    }
}

impl Eq for LeakSlot<'_> {}

impl fmt::Debug for LeakSlot<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeakSlot").field("at", &self.at).field("at_ticks", &self.raw.at_ticks).finish()
    }
}

/// The shared leak schedule: one atomic word, slots `T` apart in absolute time, any
/// number of claimers. See the [module docs](self).
///
/// Most users want [`LeakyBucket`](crate::LeakyBucket) or
/// [`Throttle`], which are built on it; it is public for callers
/// that pace something else (a batch loop, say) with the same guarantees.
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::{Nanos, Quota};
/// use weir_leaky::LeakSchedule;
///
/// let schedule = LeakSchedule::new(Quota::per_second(10)?, Nanos::ZERO)?;
/// let now = Nanos::ZERO;
/// let first = schedule.claim(&now);
/// let second = schedule.claim(&now); // claimed ahead of time
/// assert_eq!(first.at(), Nanos::ZERO);
/// assert_eq!(second.at(), Nanos::new(100_000_000)); // 100 ms later, however late we are
/// assert!(schedule.try_claim(&now).is_err());       // nothing due before 200 ms
/// assert!(schedule.give_back(second).is_ok());      // the latest claim can be undone
/// assert_eq!(schedule.next_slot(&now), Nanos::new(100_000_000));
/// // Not the latest claim: it comes back, still claimed (dropping it spends it).
/// let third = schedule.claim(&now);
/// let first = schedule.give_back(first).unwrap_err();
/// assert_eq!((first.at(), third.at()), (Nanos::ZERO, Nanos::new(100_000_000)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
#[cfg_attr(feature = "tokio", doc = "[`Throttle`]: crate::Throttle")]
#[cfg_attr(
    not(feature = "tokio"),
    doc = "[`Throttle`]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.Throttle.html"
)]
pub struct LeakSchedule {
    /// The earliest time, in ticks since `origin`, the next slot may take: `T` after
    /// the latest slot claimed (and not given back), or 0. Grows by claims only;
    /// a give-back restores the value a claim replaced.
    next: CachePadded<AtomicU64>,
    /// The leak interval `T` in ticks: `1..=MAX_TOLERANCE_TICKS` (a [`Quota`]'s
    /// emission interval).
    interval: u64,
    /// How far in the past a slot may be claimed, in ticks (`τ`); at most
    /// [`MAX_TOLERANCE_TICKS`].
    tolerance: u64,
    /// The clock reading that tick 0 corresponds to.
    origin: Nanos,
}

impl LeakSchedule {
    /// A schedule leaking one item per `quota.emission_interval()`, with tick 0 at
    /// the clock reading `origin` (use the clock's `now()`). The first slot is due at
    /// `origin`.
    ///
    /// A leak has no burst (for consumer lateness see
    /// [`LeakScheduleBuilder::tolerance`]), so a quota whose burst is not its
    /// count is refused ([`BuildError::BurstNotUsed`]) rather than silently misread;
    /// and one item leaves per whole interval, so a rate whose interval is not a whole
    /// number of ticks of 1/16 ns (some rates above 16 million per second) is
    /// refused too ([`BuildError::FractionalInterval`]).
    pub fn new(quota: Quota, origin: Nanos) -> Result<Self, BuildError> {
        Self::validated(quota, origin, Duration::ZERO)
    }

    /// A builder for a schedule of `quota` with tick 0 at `origin`, for the option of
    /// a tolerance ([`LeakScheduleBuilder::tolerance`]); `build()` validates.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rl_core::{Nanos, Quota};
    /// use weir_leaky::LeakSchedule;
    ///
    /// let schedule = LeakSchedule::builder(Quota::per_second(10)?, Nanos::ZERO)
    ///     .tolerance(Duration::from_millis(5))
    ///     .build()?;
    /// assert_eq!(schedule.tolerance(), Duration::from_millis(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(quota: Quota, origin: Nanos) -> LeakScheduleBuilder {
        LeakScheduleBuilder { quota, origin, tolerance: Duration::ZERO }
    }

    /// The schedule, or the error naming what it cannot honour: the quota's burst,
    /// a fractional interval, then the tolerance.
    pub(crate) fn validated(quota: Quota, origin: Nanos, tolerance: Duration) -> Result<Self, BuildError> {
        if quota.burst() != quota.count() {
            return Err(BuildError::BurstNotUsed { burst: quota.burst(), count: quota.count() });
        }
        if !quota.is_whole_ticks() {
            return Err(BuildError::FractionalInterval { count: quota.count(), period: quota.period() });
        }
        let tolerance_ticks = ticks::from_nanos(duration_as_nanos_saturating(tolerance));
        if tolerance_ticks > MAX_TOLERANCE_TICKS {
            return Err(BuildError::ToleranceTooLong { tolerance });
        }
        Ok(Self {
            next: CachePadded::new(AtomicU64::new(0)),
            interval: quota.emission_interval_ticks(),
            tolerance: tolerance_ticks,
            origin,
        })
    }

    /// The leak interval `T`, in ticks (1/16 ns), exactly as enforced.
    #[inline]
    pub(crate) fn interval_ticks(&self) -> u64 {
        self.interval
    }

    /// The leak interval `T`, rounded up to a whole nanosecond.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(ticks::to_nanos_ceil(self.interval))
    }

    /// The tolerance `τ` (see [`LeakScheduleBuilder::tolerance`]), rounded up to a
    /// whole nanosecond.
    pub fn tolerance(&self) -> Duration {
        Duration::from_nanos(ticks::to_nanos_ceil(self.tolerance))
    }

    /// The clock reading that tick 0 corresponds to.
    pub fn origin(&self) -> Nanos {
        self.origin
    }

    /// `now` in ticks since the origin, clamped to the horizon (in ns first, so that
    /// the shift cannot overflow).
    #[inline]
    fn ticks_at(&self, now: Nanos) -> u64 {
        now.as_u64().saturating_sub(self.origin.as_u64()).min(HORIZON_TICKS >> ticks::SHIFT) << ticks::SHIFT
    }

    /// A time in ticks as a clock reading, rounded up: never earlier than the slot.
    #[inline]
    fn nanos_at(&self, at_ticks: u64) -> Nanos {
        Nanos::new(self.origin.as_u64().saturating_add(ticks::to_nanos_ceil(at_ticks)))
    }

    /// The slot a claim at `now_ticks` would take given `next`.
    #[inline]
    fn slot_for(&self, next: u64, now_ticks: u64) -> u64 {
        next.max(now_ticks.saturating_sub(self.tolerance))
    }

    /// Claims the next slot, however far ahead it is, and returns it: the caller's
    /// item may leave at [`LeakSlot::at`].
    ///
    /// The schedule's time saturates about 36 years after its origin (2⁶⁴ ticks of
    /// 1/16 ns): claims that run that far ahead (13 344 claims of a one-per-day
    /// schedule, say) all get the last representable slot, so slots beyond it are
    /// not an interval apart. [`claim_by`](Self::claim_by) and
    /// [`try_claim`](Self::try_claim) never look that far ahead.
    #[inline]
    pub fn claim<C: Clock + ?Sized>(&self, clock: &C) -> LeakSlot<'_> {
        let mut backoff = Backoff::new();
        // Ordering: Relaxed; see `claim_by`.
        let mut next = self.next.load(Ordering::Relaxed);
        loop {
            let at = self.slot_for(next, self.ticks_at(clock.now()));
            match self.replace(next, at) {
                Ok(slot) => return slot,
                Err(actual) => next = actual,
            }
            backoff.spin();
        }
    }

    /// Claims the next slot if it is at or before `latest` (a clock reading), or, once
    /// the clock reads later than `latest`, if it is due now; otherwise claims nothing
    /// and returns when the next slot would be.
    ///
    /// So the slot is never later than `latest` or the clock's reading, whichever is
    /// later: a caller that waits for it never waits past its deadline. A deadline
    /// that has passed (a zero time-out, say) still takes a slot that is due now, as
    /// [`try_claim`](Self::try_claim) does; it never takes one in the past that a claim
    /// at `now` would not take, so passed deadlines cannot release a burst. Before the
    /// schedule's origin no slot is due (the first is at the origin).
    ///
    /// The clock is read inside the retry loop, so a claim that loses a race decides
    /// with a fresh reading.
    ///
    /// ```
    /// use weir_rl_core::{Nanos, Quota};
    /// use weir_leaky::LeakSchedule;
    ///
    /// let schedule = LeakSchedule::new(Quota::per_second(10)?, Nanos::ZERO)?;
    /// let ms = |n: u64| Nanos::new(n * 1_000_000);
    /// // Read at 5 ms, a deadline of 3 ms has passed, but the slot at 5 ms is due now.
    /// assert_eq!(schedule.claim_by(&ms(5), ms(3)).map(|slot| slot.at()), Ok(ms(5)));
    /// // The next slot is at 105 ms: after a deadline of 100 ms; nothing is claimed.
    /// assert_eq!(schedule.claim_by(&ms(5), ms(100)).unwrap_err(), ms(105));
    /// assert_eq!(schedule.claim_by(&ms(5), ms(105)).map(|slot| slot.at()), Ok(ms(105)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn claim_by<C: Clock + ?Sized>(&self, clock: &C, latest: Nanos) -> Result<LeakSlot<'_>, Nanos> {
        let mut backoff = Backoff::new();
        // Ordering: Relaxed; `next` is the whole state of the schedule and publishes no
        // other memory (an item's data travels through the queue's own Release/Acquire
        // stamps); every claim is a read-modify-write ordered by `next`'s modification
        // order alone, which is what makes slots distinct and `T` apart.
        let mut next = self.next.load(Ordering::Relaxed);
        loop {
            let now = clock.now();
            let at = self.slot_for(next, self.ticks_at(now));
            if !self.within(at, latest, now) {
                // Too late for the caller: nothing is written.
                return Err(self.nanos_at(at));
            }
            match self.replace(next, at) {
                Ok(slot) => return Ok(slot),
                Err(actual) => next = actual,
            }
            backoff.spin();
        }
    }

    /// Whether a slot at `at_ticks` is at or before `latest`, or due at `now`: at or
    /// before the later of the two. Never for a bound before the origin, where
    /// `ticks_at` would clamp the bound up to tick 0 and so accept the slot at the
    /// origin, after the bound.
    #[inline]
    fn within(&self, at_ticks: u64, latest: Nanos, now: Nanos) -> bool {
        let bound = latest.max(now);
        bound >= self.origin && at_ticks <= self.ticks_at(bound)
    }

    /// The claim itself: moves `next` from `next` to `at + T` if no other claim landed
    /// since `next` was read.
    #[inline(always)]
    fn replace(&self, next: u64, at: u64) -> Result<LeakSlot<'_>, u64> {
        // Ordering: Relaxed on success and failure; see `claim_by`.
        match self.next.compare_exchange_weak(
            next,
            at.saturating_add(self.interval),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => Ok(self.slot_from_raw(RawSlot { at_ticks: at, previous: next })),
            Err(actual) => Err(actual),
        }
    }

    /// Claims the next slot if it is due now; otherwise claims nothing and returns how
    /// long until it is.
    #[inline]
    pub fn try_claim<C: Clock + ?Sized>(&self, clock: &C) -> Result<LeakSlot<'_>, Duration> {
        let now = clock.now();
        self.claim_by(&now, now).map_err(|at| at.saturating_duration_since(now))
    }

    /// Undoes `slot`'s claim if no slot has been claimed after it (and not given back),
    /// restoring the schedule exactly as it was. Otherwise the slot comes back in the
    /// `Err`, still claimed: its holder may still use it, or drop it, and a slot that is
    /// dropped is spent (the output falls behind by one interval, never ahead). A slot
    /// claimed from another schedule always comes back.
    ///
    /// The slot is consumed either way: a slot given back can be claimed again, and then
    /// only one claimer holds it.
    pub fn give_back<'s>(&self, slot: LeakSlot<'s>) -> Result<(), LeakSlot<'s>> {
        if !core::ptr::eq(slot.schedule, self) {
            return Err(slot);
        }
        let claimed = slot.raw.at_ticks.saturating_add(self.interval);
        // Ordering: Relaxed; see `claim_by`. The CAS succeeds only if `next` is still
        // the value this claim wrote, i.e. every later claim has been given back: a
        // claim moves `next` past every slot outstanding, and a give-back restores the
        // value the latest outstanding claim replaced, so `next` equals a slot's `at + T`
        // only while it is the latest claim outstanding; and the token being unique, no
        // other holder can give the same claim back.
        match self.next.compare_exchange(claimed, slot.raw.previous, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => Ok(()),
            Err(_) => Err(slot),
        }
    }

    /// The token for a claim of this schedule. The caller guarantees that `raw` came
    /// from [`LeakSlot::into_raw`] of a slot of this schedule, and that the claim has one
    /// holder: tokens are never duplicated.
    #[inline]
    pub(crate) fn slot_from_raw(&self, raw: RawSlot) -> LeakSlot<'_> {
        LeakSlot { schedule: self, raw, at: self.nanos_at(raw.at_ticks) }
    }

    /// Whether `slot` is a slot a claim at `now` could still take, or a later one: not
    /// more than the tolerance in the past. An earlier slot left unused is stale: its
    /// time has gone.
    #[cfg(feature = "tokio")]
    pub(crate) fn is_current(&self, slot: &LeakSlot<'_>, now: Nanos) -> bool {
        slot.raw.at_ticks >= self.ticks_at(now).saturating_sub(self.tolerance)
    }

    /// Whether `slot` is at or before `latest`, or due at `now` (see
    /// [`claim_by`](Self::claim_by)).
    #[cfg(feature = "tokio")]
    pub(crate) fn is_within(&self, slot: &LeakSlot<'_>, latest: Nanos, now: Nanos) -> bool {
        self.within(slot.raw.at_ticks, latest, now)
    }

    /// When the next slot would be if claimed at the clock's `now` (read-only).
    pub fn next_slot<C: Clock + ?Sized>(&self, clock: &C) -> Nanos {
        let now = self.ticks_at(clock.now());
        // Ordering: Relaxed; see `claim_by`.
        self.nanos_at(self.slot_for(self.next.load(Ordering::Relaxed), now))
    }

    /// How long, from `now`, until the next slot boundary: `(0, T]`. When consumers keep
    /// pace with the schedule, an item leaves by then; a hint for callers turned away
    /// from a full bucket.
    pub(crate) fn until_next_leak(&self, now: Nanos) -> Duration {
        let now_ticks = self.ticks_at(now);
        // Ordering: Relaxed; see `claim_by`.
        let next = self.next.load(Ordering::Relaxed);
        let wait = if next > now_ticks { (next - now_ticks - 1) % self.interval + 1 } else { self.interval };
        Duration::from_nanos(ticks::to_nanos_ceil(wait))
    }

    /// When the next slot would be, in ticks since the origin, and `now` in ticks.
    pub(crate) fn next_and_now(&self, now: Nanos) -> (u64, u64) {
        let now_ticks = self.ticks_at(now);
        // Ordering: Relaxed; see `claim_by`.
        (self.slot_for(self.next.load(Ordering::Relaxed), now_ticks), now_ticks)
    }
}

/// Builds a [`LeakSchedule`]: its quota and origin, and a tolerance.
///
/// Made by [`LeakSchedule::builder`]; the setter never fails, and
/// [`build`](Self::build) validates everything and returns the schedule or a
/// [`BuildError`] naming what is wrong.
#[derive(Debug, Clone, Copy)]
pub struct LeakScheduleBuilder {
    quota: Quota,
    origin: Nanos,
    tolerance: Duration,
}

impl LeakScheduleBuilder {
    /// A slot may be claimed up to `tolerance` (`τ`) in the past, so a consumer that
    /// comes late by less than `τ` keeps the schedule (the long-run rate stays exact)
    /// at the price of releases up to `⌊τ / T⌋` items closer together than `T` (see
    /// the crate docs, "Pacing and tolerance"). Zero by default; above about 9.1
    /// years (2⁵⁸ ns), [`build`](Self::build) fails with
    /// [`BuildError::ToleranceTooLong`].
    pub fn tolerance(self, tolerance: Duration) -> Self {
        Self { tolerance, ..self }
    }

    /// The schedule.
    ///
    /// Errors: the quota's burst is not its count ([`BuildError::BurstNotUsed`]), its
    /// interval is not a whole number of ticks ([`BuildError::FractionalInterval`]),
    /// or the tolerance is too long ([`BuildError::ToleranceTooLong`]).
    pub fn build(self) -> Result<LeakSchedule, BuildError> {
        LeakSchedule::validated(self.quota, self.origin, self.tolerance)
    }
}

impl fmt::Debug for LeakSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeakSchedule")
            .field("interval_ticks", &self.interval)
            .field("tolerance_ticks", &self.tolerance)
            .field("origin", &self.origin)
            // Ordering: Relaxed; a reading for display.
            .field("next_ticks", &self.next.load(Ordering::Relaxed))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn per_second(n: u64) -> Quota {
        Quota::per_second(n).unwrap()
    }

    #[test]
    fn a_quota_the_leak_would_misread_is_refused() {
        // A burst would be silently ignored: a leak has none.
        let bursty = Quota::per_second(10).unwrap().with_burst(50).unwrap();
        assert_eq!(
            LeakSchedule::new(bursty, Nanos::ZERO).err(),
            Some(BuildError::BurstNotUsed { burst: 50, count: 10 })
        );
        // 300 million per second is 53⅓ ticks: one item per whole interval cannot
        // keep that rate, so it is refused; 10⁹ per second (16 ticks) is fine.
        let fractional = LeakSchedule::new(per_second(300_000_000), Nanos::ZERO).err();
        assert!(matches!(fractional, Some(BuildError::FractionalInterval { count: 300_000_000, .. })));
        assert!(std::string::ToString::to_string(&fractional.unwrap()).contains("whole"));
        assert!(LeakSchedule::new(per_second(1_000_000_000), Nanos::ZERO).is_ok());
    }

    #[test]
    fn slots_are_an_interval_apart_in_absolute_time() {
        let schedule = LeakSchedule::new(per_second(10), Nanos::new(1_000)).unwrap();
        let at = |ms: u64| Nanos::new(1_000 + ms * 1_000_000);
        assert_eq!(schedule.claim(&at(0)).at(), at(0));
        // Claimed ahead, the next slot is exactly one interval later.
        assert_eq!(schedule.claim(&at(0)).at(), at(100));
        // A late claim within no tolerance starts from now: the bucket idled.
        assert_eq!(schedule.claim(&at(250)).at(), at(250));
        assert_eq!(schedule.try_claim(&at(300)), Err(Duration::from_millis(50)));
        assert_eq!(schedule.claim_by(&at(300), at(349)), Err(at(350)));
        assert_eq!(schedule.claim_by(&at(300), at(350)).map(|s| s.at()), Ok(at(350)));
    }

    #[test]
    fn tolerance_keeps_the_schedule_for_late_claims() {
        let schedule = LeakSchedule::builder(per_second(1_000), Nanos::ZERO)
            .tolerance(Duration::from_micros(300))
            .build()
            .unwrap();
        let us = |n: u64| Nanos::new(n * 1_000);
        assert_eq!(schedule.claim(&us(0)).at(), us(0));
        // 200 µs late for the slot at 1 ms: still given the slot at 1 ms.
        assert_eq!(schedule.claim(&us(1_200)).at(), us(1_000));
        // 500 µs late for the slot at 2 ms: beyond the tolerance, so 300 µs back.
        assert_eq!(schedule.claim(&us(2_500)).at(), us(2_200));
        assert_eq!(schedule.tolerance(), Duration::from_micros(300));
        assert!(matches!(
            LeakSchedule::builder(per_second(1), Nanos::ZERO).tolerance(Duration::MAX).build(),
            Err(BuildError::ToleranceTooLong { .. })
        ));
    }

    #[test]
    fn give_back_undoes_only_the_latest_claim() {
        let schedule = LeakSchedule::new(per_second(10), Nanos::ZERO).unwrap();
        let now = Nanos::new(5);
        let a = schedule.claim(&now);
        let b = schedule.claim(&now);
        let c = schedule.claim(&now);
        let b_at = b.at();
        let b = schedule.give_back(b).expect_err("not the latest");
        assert_eq!(b.at(), b_at, "it comes back, still claimed");
        assert!(schedule.give_back(c).is_ok());
        assert!(schedule.give_back(b).is_ok(), "the latest once c is back");
        assert_eq!(schedule.claim(&now).at(), b_at, "the same slot again");
        assert_eq!(a.at(), now);
        // Giving back the very first claim restores the untouched schedule.
        let fresh = LeakSchedule::new(per_second(10), Nanos::ZERO).unwrap();
        let first = fresh.claim(&Nanos::new(7));
        assert!(fresh.give_back(first).is_ok());
        assert_eq!(fresh.claim(&Nanos::new(9)).at(), Nanos::new(9));
    }

    #[test]
    fn a_slot_of_another_schedule_is_never_given_back() {
        // Two schedules in the same state: a slot of one matches the other's `next`.
        let (one, other) = (
            LeakSchedule::new(per_second(10), Nanos::ZERO).unwrap(),
            LeakSchedule::new(per_second(10), Nanos::ZERO).unwrap(),
        );
        let now = Nanos::ZERO;
        let held = other.claim(&now);
        let foreign = one.claim(&now);
        assert_eq!(foreign.at(), held.at());
        let foreign = other.give_back(foreign).expect_err("a slot of another schedule");
        // `other` still hands out each slot once: the next one is after `held`.
        assert_eq!(other.claim(&now).at(), Nanos::new(100_000_000), "{held:?} handed out twice");
        assert!(one.give_back(foreign).is_ok(), "its own schedule takes it back");
    }

    #[test]
    fn backwards_clock_and_extremes_never_panic() {
        let schedule = LeakSchedule::new(per_second(1), Nanos::new(1_000_000)).unwrap();
        assert_eq!(schedule.claim(&Nanos::ZERO).at(), Nanos::new(1_000_000)); // before origin
        assert_eq!(schedule.claim(&Nanos::new(1)).at(), Nanos::new(1_001_000_000));
        let far = Nanos::MAX;
        let late = schedule.claim(&far);
        assert!(late.at() >= schedule.origin());
        let _ = schedule.claim(&far);
        let _ = schedule.try_claim(&far);
        let _ = schedule.next_slot(&far);
        let slowest = LeakSchedule::new(Quota::per_day(1).unwrap(), Nanos::ZERO).unwrap();
        let mut last = Nanos::ZERO;
        for _ in 0..if cfg!(miri) { 100 } else { 10_000 } {
            let slot = slowest.claim(&Nanos::ZERO);
            assert!(slot.at() >= last);
            last = slot.at();
        }
    }

    #[test]
    fn concurrent_claims_are_distinct_and_an_interval_apart() {
        let schedule = LeakSchedule::new(Quota::per_second(1_000_000_000).unwrap(), Nanos::ZERO).unwrap();
        let per_thread = if cfg!(miri) { 20 } else { 5_000 };
        let mut slots: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|t| {
                    let schedule = &schedule;
                    s.spawn(move || {
                        (0..per_thread).map(|i| schedule.claim(&Nanos::new(i * t)).raw.at_ticks).collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        slots.sort_unstable();
        for pair in slots.windows(2) {
            assert!(pair[1] - pair[0] >= 16, "{pair:?}");
        }
    }
}
