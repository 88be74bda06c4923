//! [`Throttle`]: request handlers wait their turn, in FIFO order, and proceed at the
//! leak rate.
//!
//! # Design, and why each property holds
//!
//! A throttle is a leaky bucket whose items are the waiting requests themselves. Its
//! parts:
//!
//! - a [`LeakSchedule`], the same shared slot schedule as [`LeakyBucket`]'s;
//! - *the line*: a `tokio::sync::Mutex`, whose waiters tokio serves strictly in
//!   the order they called `lock` (its documented FIFO guarantee; `try_lock` cannot
//!   barge past queued waiters), and which removes a waiter whose future is dropped.
//!   It guards one thing: a slot a cancelled head could not give back (see below);
//! - a count of admitted waiters, at most `capacity`.
//!
//! [`acquire`](Throttle::acquire) is admission, then the line, then the slot:
//!
//! 1. **Admission**: if `capacity` requests are already waiting, it fails at once with
//!    [`ThrottleError::Full`] and a retry-after (the time to the next slot); otherwise
//!    it counts itself in (a guard counts it out on every exit).
//! 2. **The line**: it waits for the line's lock. Holding it makes it the head of the
//!    line; nobody else claims slots meanwhile.
//! 3. **The slot**: the head claims the next slot (or takes the slot a cancelled head
//!    left, below) and sleeps until it, *still holding the line*; at its slot it
//!    returns `Ok`, releasing the line to the next waiter, which claims the slot after.
//!
//! Hence:
//!
//! - **FIFO.** Slots are claimed only by the head, in line order, and are increasing,
//!   so requests proceed in the order they queued.
//! - **Rate.** Slots are at least `T` apart (see [`LeakSchedule`]); the next head claims
//!   its slot as soon as the previous one leaves, ahead of time, so pacing does not
//!   drift with wake-up latency below `T` (or below the tolerance).
//! - **Deadlines.** [`acquire_timeout`](Throttle::acquire_timeout) waits in line at most
//!   until its deadline; at the head, it claims a slot only if the slot is at or before
//!   the deadline, otherwise it gives up *at once* (it knows it cannot make it). A zero
//!   or passed deadline still takes a slot that is due now (see
//!   [`LeakSchedule::claim_by`]): an idle throttle lets it through.
//! - **Cancellation and time-outs leak nothing.** A request dropped while in line never
//!   held a slot (tokio removes it from the line). A request dropped at the head gives
//!   its slot back: when only heads claim, the schedule's `next` is still the value its
//!   own claim wrote, so the give-back restores the schedule *exactly* and the next
//!   request in line gets that very slot. Either way the admission guard counts it
//!   out, freeing its place.
//! - **Claims from outside.** The schedule is public ([`Throttle::schedule`]): code
//!   that claims from it directly takes turns like a request that skipped the line
//!   (in total, still never faster than the rate). A head cancelled after such a claim
//!   cannot give its slot back (it is no longer the latest claim); it leaves the slot
//!   in the line's lock instead, and the next head takes it rather than claim a later
//!   one, so the slot still goes to the next request in line, in order. Only if no
//!   request comes for it before its time has passed (the throttle was idle then) is
//!   it dropped, unused.
//!
//! **Cost.** The line's lock lives off the check path (waiting is, by definition, not
//! the hot path): a request that finds the line empty and its slot due takes the
//! uncontended lock and returns without waiting. Why the line is a lock and not the
//! bucket's lock-free ring is in
//! [DESIGN.md](https://github.com/weir-rs/weir/blob/main/DESIGN.md#the-throttles-line-a-lock-not-the-ring).

use core::fmt;
use core::time::Duration;
use weir_rl_core::__private::sync::{AtomicU64, CachePadded, Ordering};
use weir_rl_core::{Clock, Nanos, Quota, TokioClock};

use crate::schedule::RawSlot;
use crate::{BuildError, LeakSchedule, LeakSlot};

#[cfg(doc)]
use crate::LeakyBucket;

/// Why [`Throttle::acquire`] did not let a request through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ThrottleError {
    /// `capacity` requests were already waiting: turned away at once. While requests
    /// keep leaving, a place frees within `retry_after` (the time to the next slot).
    Full {
        /// When to try again: at most one leak interval.
        retry_after: Duration,
    },
    /// The request could not proceed by its deadline (it waited in line until then, or
    /// its slot would have come later); it spent no slot.
    TimedOut,
}

impl fmt::Display for ThrottleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { retry_after } => {
                write!(f, "too many requests are waiting; retry after {retry_after:?} (answer 429 or 503)")
            }
            Self::TimedOut => f.write_str("the request's turn would come after its deadline"),
        }
    }
}

impl std::error::Error for ThrottleError {}

/// A throttle for request handlers: [`acquire`](Self::acquire)`.await` waits its turn,
/// in FIFO order, and returns when the request may proceed, at most one request per
/// leak interval; at most `capacity` wait, more are turned away at once.
///
/// See the [module docs](self) for how FIFO order, deadlines and cancellation without
/// leaked capacity follow from the design.
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::Quota;
/// use weir_leaky::{Throttle, ThrottleError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let throttle = Throttle::new(Quota::per_second(10)?, 2)?;
/// let start = tokio::time::Instant::now();
/// throttle.acquire().await?; // an idle throttle lets the first request through at once
/// let (b, c, d) = tokio::join!(throttle.acquire(), throttle.acquire(), throttle.acquire());
/// assert_eq!((b, c), (Ok(()), Ok(()))); // 100 ms and 200 ms later, in order
/// assert!(matches!(d, Err(ThrottleError::Full { .. }))); // two were waiting: turned away
/// assert_eq!(start.elapsed(), Duration::from_millis(200));
/// # Ok(())
/// # }
/// ```
pub struct Throttle<C = TokioClock> {
    /// When requests may proceed.
    schedule: LeakSchedule,
    /// The line: its holder is the head, the only claimer of slots. It holds the slot a
    /// cancelled head could not give back, if any, for the next head (see `Head`).
    line: tokio::sync::Mutex<Option<RawSlot>>,
    /// Requests admitted and not yet gone: at most `capacity`.
    waiting: CachePadded<AtomicU64>,
    /// The most requests waiting at once (`1..`).
    capacity: u64,
    clock: C,
}

impl Throttle<TokioClock> {
    /// A throttle letting one request through every `quota.emission_interval()`, with
    /// at most `capacity` requests waiting, on a [`TokioClock`]. A quota with a burst
    /// is a [`BuildError`] (a throttle has none; see [`LeakSchedule::new`], and
    /// [`ThrottleBuilder::tolerance`] for absorbing late wake-ups).
    pub fn new(quota: Quota, capacity: usize) -> Result<Self, BuildError> {
        Self::builder(quota, capacity).build()
    }

    /// A builder for a throttle of `quota` with at most `capacity` waiting, for the
    /// option of a leak tolerance ([`ThrottleBuilder::tolerance`]); `build()` or
    /// `build_with_clock(clock)` validates and makes the throttle.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rl_core::Quota;
    /// use weir_leaky::Throttle;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let throttle = Throttle::builder(Quota::per_second(1_000)?, 100)
    ///     .tolerance(Duration::from_millis(1)) // tokio's timer resolution
    ///     .build()?;
    /// throttle.acquire().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(quota: Quota, capacity: usize) -> ThrottleBuilder {
        ThrottleBuilder { quota, capacity, tolerance: Duration::ZERO }
    }
}

/// Builds a [`Throttle`]: its rate and capacity, and a leak tolerance.
///
/// Made by [`Throttle::builder`]; the setter never fails, and `build()` (on a
/// [`TokioClock`]) or [`build_with_clock`](Self::build_with_clock) validates
/// everything and returns the throttle or a [`BuildError`] naming what is wrong.
#[derive(Debug, Clone, Copy)]
pub struct ThrottleBuilder {
    quota: Quota,
    capacity: usize,
    tolerance: Duration,
}

impl ThrottleBuilder {
    /// A request whose slot comes up to `tolerance` late keeps the schedule (see
    /// [`LeakScheduleBuilder::tolerance`](crate::LeakScheduleBuilder::tolerance)).
    /// Zero by default.
    pub fn tolerance(self, tolerance: Duration) -> Self {
        Self { tolerance, ..self }
    }

    /// The throttle, on a [`TokioClock`].
    ///
    /// Errors: see [`build_with_clock`](Self::build_with_clock).
    pub fn build(self) -> Result<Throttle<TokioClock>, BuildError> {
        self.build_with_clock(TokioClock::new())
    }

    /// The throttle, reading time from `clock`. The clock must move with tokio's
    /// timer (the waits are tokio sleeps of the clock's remaining time), so under
    /// paused time use a [`TokioClock`].
    ///
    /// Errors: `capacity` 0 ([`BuildError::ZeroCapacity`]); a quota the leak cannot
    /// honour or a tolerance too long (see
    /// [`LeakScheduleBuilder::build`](crate::LeakScheduleBuilder::build)).
    pub fn build_with_clock<C: Clock>(self, clock: C) -> Result<Throttle<C>, BuildError> {
        if self.capacity == 0 {
            return Err(BuildError::ZeroCapacity);
        }
        Ok(Throttle {
            schedule: LeakSchedule::validated(self.quota, clock.now(), self.tolerance)?,
            line: tokio::sync::Mutex::new(None),
            waiting: CachePadded::new(AtomicU64::new(0)),
            capacity: self.capacity as u64,
            clock,
        })
    }
}

impl<C: Clock> Throttle<C> {
    /// [`new`](Throttle::new) with another clock. The clock must move with tokio's
    /// timer (the waits are tokio sleeps of the clock's remaining time), so under
    /// paused time use a [`TokioClock`].
    pub fn with_clock(quota: Quota, capacity: usize, clock: C) -> Result<Self, BuildError> {
        ThrottleBuilder { quota, capacity, tolerance: Duration::ZERO }.build_with_clock(clock)
    }

    /// Waits for this request's turn (FIFO), then returns `Ok`: the request may
    /// proceed. Fails at once with [`ThrottleError::Full`] if `capacity` requests are
    /// already waiting. Dropping the future gives back its place and, at the head of
    /// the line, its slot.
    pub async fn acquire(&self) -> Result<(), ThrottleError> {
        self.acquire_until(None).await
    }

    /// [`acquire`](Self::acquire), giving up with [`ThrottleError::TimedOut`] if the
    /// request cannot proceed within `timeout` (by the throttle's clock).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<(), ThrottleError> {
        self.acquire_until(Some(self.clock.now() + timeout)).await
    }

    /// [`acquire`](Self::acquire), giving up with [`ThrottleError::TimedOut`] if the
    /// request cannot proceed by `deadline` (a reading of the throttle's clock).
    pub async fn acquire_deadline(&self, deadline: Nanos) -> Result<(), ThrottleError> {
        self.acquire_until(Some(deadline)).await
    }

    async fn acquire_until(&self, deadline: Option<Nanos>) -> Result<(), ThrottleError> {
        let _place = self.admit()?;
        let line = match deadline {
            None => self.line.lock().await,
            Some(deadline) => self.lock_by(deadline).await.ok_or(ThrottleError::TimedOut)?,
        };
        // At the head of the line: the only claimer of slots (but see `Head`).
        let mut head = Head { schedule: &self.schedule, left: line, slot: None };
        let at = head.claim(&self.clock, deadline).ok_or(ThrottleError::TimedOut)?;
        crate::wait::sleep_until_async(&self.clock, at).await;
        // The request proceeds at its slot: the slot is spent.
        head.slot = None;
        Ok(())
    }

    /// Counts a request in, unless `capacity` already wait.
    fn admit(&self) -> Result<Place<'_>, ThrottleError> {
        // Ordering: Relaxed; a count of places, publishing no other memory; the CAS keeps
        // it at most `capacity`.
        let mut waiting = self.waiting.load(Ordering::Relaxed);
        loop {
            if waiting >= self.capacity {
                return Err(ThrottleError::Full { retry_after: self.schedule.until_next_leak(self.clock.now()) });
            }
            // Ordering: Relaxed on success and failure; see the load above.
            match self.waiting.compare_exchange_weak(waiting, waiting + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(Place(&self.waiting)),
                Err(actual) => waiting = actual,
            }
        }
    }

    /// Waits in line until `deadline`; `None` if the head was not reached by then.
    async fn lock_by(&self, deadline: Nanos) -> Option<tokio::sync::MutexGuard<'_, Option<RawSlot>>> {
        let lock = self.line.lock();
        let mut lock = core::pin::pin!(lock);
        loop {
            let remaining = deadline.saturating_duration_since(self.clock.now());
            // `timeout` polls the lock before the timer, so a free line is taken even
            // with no time left.
            match tokio::time::timeout(remaining, lock.as_mut()).await {
                Ok(guard) => return Some(guard),
                Err(_) if self.clock.now() >= deadline => return None,
                Err(_) => continue,
            }
        }
    }

    /// How many requests are waiting (admitted and not yet through), at a moment during
    /// the call.
    pub fn waiting(&self) -> usize {
        // Ordering: Relaxed; a reading.
        self.waiting.load(Ordering::Relaxed) as usize
    }

    /// The most requests waiting at once.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// The leak schedule. Slots claimed from it directly are turns taken outside the
    /// line: they delay the requests waiting, and the total never exceeds the rate
    /// (see the [module docs](self), "Claims from outside").
    pub fn schedule(&self) -> &LeakSchedule {
        &self.schedule
    }

    /// The clock this throttle reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C> fmt::Debug for Throttle<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            // Ordering: Relaxed; a reading for display.
            .field("waiting", &self.waiting.load(Ordering::Relaxed))
            .field("capacity", &self.capacity)
            .field("schedule", &self.schedule)
            .finish_non_exhaustive()
    }
}

/// An admitted request's place; counted out on drop.
struct Place<'a>(&'a AtomicU64);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        // Ordering: Relaxed; see `Throttle::admit`.
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The head of the line: holds the line (and, in it, the slot a cancelled head may
/// have left), and its claimed slot, given back on drop unless spent.
struct Head<'a> {
    schedule: &'a LeakSchedule,
    /// The line's lock, guarding the slot a cancelled head could not give back.
    left: tokio::sync::MutexGuard<'a, Option<RawSlot>>,
    /// The head's slot, until it is spent.
    slot: Option<LeakSlot<'a>>,
}

impl<'a> Head<'a> {
    /// Takes the head's slot: the one a cancelled head left, if its time has not passed,
    /// or else the next one from the schedule; with a deadline, only a slot within it
    /// (see [`LeakSchedule::claim_by`]). Returns when the slot is due, or `None` if it
    /// would be after the deadline (then nothing is claimed, and a slot left by a
    /// cancelled head stays for the next).
    fn claim<C: Clock>(&mut self, clock: &C, deadline: Option<Nanos>) -> Option<Nanos> {
        if let Some(raw) = self.left.take() {
            let left = self.schedule.slot_from_raw(raw);
            let now = clock.now();
            if self.schedule.is_current(&left, now) {
                // Earlier than any slot the schedule has left to give (it was claimed
                // before the claims that kept it from being given back).
                if deadline.is_some_and(|deadline| !self.schedule.is_within(&left, deadline, now)) {
                    *self.left = Some(left.into_raw());
                    return None;
                }
                let at = left.at();
                self.slot = Some(left);
                return Some(at);
            }
            // Its time has passed with nobody waiting for it: give it back if it has
            // become the latest claim again, or else drop it, unused.
            let _stale = self.schedule.give_back(left);
        }
        let slot = match deadline {
            None => self.schedule.claim(clock),
            Some(deadline) => self.schedule.claim_by(clock, deadline).ok()?,
        };
        let at = slot.at();
        self.slot = Some(slot);
        Some(at)
    }
}

impl Drop for Head<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            // Usually the latest claim (only heads claim), and given back exactly. If a
            // caller has claimed from the public schedule since, it cannot be; then it
            // is left in the line for the next head, which takes it before any later
            // slot, so it is not wasted.
            if let Err(slot) = self.schedule.give_back(slot) {
                *self.left = Some(slot.into_raw());
            }
        }
    }
}
