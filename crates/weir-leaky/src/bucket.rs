//! [`LeakyBucket`]: a bounded queue drained at a constant rate by any number of
//! consumers that share one leak schedule.

use core::fmt;
use core::marker::PhantomData;
use core::time::Duration;
use weir_rl_core::__private::sync::{AtomicU64, Backoff, CachePadded, Ordering};
use weir_rl_core::__private::ticks;
#[cfg(any(feature = "std", loom))]
use weir_rl_core::Nanos;
use weir_rl_core::{Clock, Quota};

use crate::queue::{BoundedQueue, PopError, PushError, Snooze};
use crate::{BuildError, LeakSchedule, LeakSlot};

#[cfg(any(feature = "std", loom))]
use crate::wait::{self, BLOCKING_ONE, Waiters};

/// A leaky bucket as a queue: a throttle that delays instead of rejecting.
///
/// Producers [`offer`](Self::offer) items into a bounded queue (the bucket);
/// consumers take them no faster than the leak rate, **all consumers together**,
/// however bursty the arrivals; a full bucket rejects at once, handing the item
/// back with a retry-after. See the [crate docs](https://docs.rs/weir-leaky) for the design, the
/// guarantees and a worked example.
///
/// Consumers: [`try_recv`](Self::try_recv) (never waits),
/// [`recv`][recv] / [`recv_timeout`][recv_timeout] (block the
/// thread, `std`), [`recv_async`][recv_async] /
/// [`recv_async_timeout`][recv_async_timeout] (`tokio` feature). Any mix,
/// any number, share the bucket by reference (`&LeakyBucket`, `Arc<LeakyBucket>`).
///
/// (The consumers of a feature that is off link to their docs.rs pages.)
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::{ManualClock, Quota};
/// use weir_leaky::{LeakyBucket, TryRecvError};
///
/// let clock = ManualClock::new();
/// let bucket = LeakyBucket::with_clock(Quota::per_second(2)?, 10, clock.clone())?;
/// let ticket = bucket.offer("a").unwrap();
/// bucket.offer("b").unwrap();
/// assert_eq!((ticket.position(), ticket.expected_delay()), (0, Duration::ZERO));
///
/// assert_eq!(bucket.try_recv(), Ok("a"));
/// assert_eq!(bucket.try_recv(), Err(TryRecvError::NotYet { retry_after: Duration::from_millis(500) }));
/// clock.advance(Duration::from_millis(500));
/// assert_eq!(bucket.try_recv(), Ok("b"));
/// assert_eq!(bucket.try_recv(), Err(TryRecvError::Empty));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
#[cfg_attr(feature = "std", doc = "[recv]: Self::recv")]
#[cfg_attr(feature = "std", doc = "[recv_timeout]: Self::recv_timeout")]
#[cfg_attr(
    not(feature = "std"),
    doc = "[recv]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.LeakyBucket.html#method.recv"
)]
#[cfg_attr(
    not(feature = "std"),
    doc = "[recv_timeout]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.LeakyBucket.html#method.recv_timeout"
)]
#[cfg_attr(feature = "tokio", doc = "[recv_async]: Self::recv_async")]
#[cfg_attr(feature = "tokio", doc = "[recv_async_timeout]: Self::recv_async_timeout")]
#[cfg_attr(
    not(feature = "tokio"),
    doc = "[recv_async]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.LeakyBucket.html#method.recv_async"
)]
#[cfg_attr(
    not(feature = "tokio"),
    doc = "[recv_async_timeout]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.LeakyBucket.html#method.recv_async_timeout"
)]
pub struct LeakyBucket<T, C = weir_rl_core::DefaultClock> {
    /// The items waiting to leave, in order.
    queue: BoundedQueue<T>,
    /// How many items consumers have reserved (each reservation entitles one
    /// consumer to pop one item once its leak slot comes): at most the number of
    /// pushes that have claimed a position, at least the number of pops.
    /// Modulo 2⁶⁴, like the queue's positions.
    reserved: CachePadded<AtomicU64>,
    /// When items may leave.
    schedule: LeakSchedule,
    /// Consumers asleep waiting for an item.
    #[cfg(any(feature = "std", loom))]
    waiters: Waiters,
    clock: C,
}

/// An item accepted into the bucket by [`LeakyBucket::offer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Enqueued {
    position: usize,
    expected_delay: Duration,
}

impl Enqueued {
    /// How many items were ahead of it in the bucket when it entered: 0 means it is
    /// the next to leave.
    pub const fn position(&self) -> usize {
        self.position
    }

    /// How long until it is due to leave if consumers keep pace with the schedule: the
    /// time until the next free leak slot plus one leak interval for every item ahead
    /// of it that has no slot yet. For a bucket that has been idle, `position × T`.
    pub const fn expected_delay(&self) -> Duration {
        self.expected_delay
    }
}

/// Why [`LeakyBucket::offer`] turned an item away; the item comes back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OfferError<T> {
    /// The bucket held its capacity. While consumers keep pace, an item leaves (and
    /// makes room) within `retry_after`, the time to the next leak slot.
    Full {
        /// The item that was not accepted.
        item: T,
        /// When to try again: at most one leak interval.
        retry_after: Duration,
    },
    /// The bucket has been closed.
    Closed(T),
}

impl<T> OfferError<T> {
    /// The item that was not accepted.
    pub fn into_inner(self) -> T {
        match self {
            Self::Full { item, .. } | Self::Closed(item) => item,
        }
    }
}

impl<T> fmt::Debug for OfferError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { retry_after, .. } => {
                f.debug_struct("Full").field("retry_after", retry_after).finish_non_exhaustive()
            }
            Self::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

impl<T> fmt::Display for OfferError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { retry_after, .. } => {
                write!(f, "the bucket is full; retry after {retry_after:?}, when the next item is due to leave")
            }
            Self::Closed(_) => f.write_str("the bucket is closed; it takes no new items"),
        }
    }
}

#[cfg(feature = "std")]
impl<T> std::error::Error for OfferError<T> {}

/// Why [`LeakyBucket::try_recv`] returned no item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TryRecvError {
    /// No item is waiting (or every waiting item is already promised to a consumer
    /// that is waiting for its slot).
    Empty,
    /// An item is waiting but the next leak slot is not due yet.
    NotYet {
        /// How long until the next leak slot (at the time of the call).
        retry_after: Duration,
    },
    /// The bucket is closed and every item in it has been taken.
    Closed,
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("the bucket is empty"),
            Self::NotYet { retry_after } => write!(f, "the next item may leave in {retry_after:?}"),
            Self::Closed => f.write_str("the bucket is closed and drained"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TryRecvError {}

/// The bucket is closed and every item in it has been taken: [`LeakyBucket::recv`]
/// will never return another item.
///
#[cfg_attr(feature = "std", doc = "[`LeakyBucket::recv`]: LeakyBucket::recv")]
#[cfg_attr(
    not(feature = "std"),
    doc = "[`LeakyBucket::recv`]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.LeakyBucket.html#method.recv"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvError;

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the bucket is closed and drained")
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RecvError {}

/// Why [`LeakyBucket::recv_timeout`] returned no item.
///
#[cfg_attr(feature = "std", doc = "[`LeakyBucket::recv_timeout`]: LeakyBucket::recv_timeout")]
#[cfg_attr(
    not(feature = "std"),
    doc = "[`LeakyBucket::recv_timeout`]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.LeakyBucket.html#method.recv_timeout"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvTimeoutError {
    /// No item could leave by the deadline (none came, or the next leak slot is later).
    Timeout,
    /// The bucket is closed and every item in it has been taken.
    Closed,
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Timeout => "no item could leave the bucket before the deadline",
            Self::Closed => "the bucket is closed and drained",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RecvTimeoutError {}

/// How many of `pushed` items are not covered by `reserved` reservations.
///
/// The two counts live in different words and are read with Relaxed loads, so the push
/// count read can be *older* than a reservation count that already covers later
/// pushes: the difference is then "negative", which means nothing is available to this
/// reader (never, by wrapping, a huge number: that would reserve an item that does not
/// exist, and its holder would wait for it forever; loom found this). Counts wrap only
/// after 2⁶² operations, so the difference of two live counts fits an `i64`.
#[inline]
fn available(pushed: u64, reserved: u64) -> u64 {
    (pushed.wrapping_sub(reserved) as i64).max(0) as u64
}

/// Nothing to reserve: why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unavailable {
    Empty,
    Closed,
}

#[cfg(feature = "std")]
impl<T> LeakyBucket<T, weir_rl_core::MonotonicClock> {
    /// An empty bucket holding up to `capacity` items, leaking one every
    /// `quota.emission_interval()`, on the default
    /// [`MonotonicClock`](weir_rl_core::MonotonicClock).
    ///
    /// The output of a leaky bucket has no burst: a quota with one is a
    /// [`BuildError`] (see [`LeakSchedule::new`](crate::LeakSchedule::new), and
    /// [`LeakyBucketBuilder::tolerance`] for absorbing consumer lateness).
    pub fn new(quota: Quota, capacity: usize) -> Result<Self, BuildError> {
        Self::builder(quota, capacity).build()
    }
}

impl<T> LeakyBucket<T, weir_rl_core::DefaultClock> {
    /// A builder for a bucket of `capacity` items leaking at `quota`'s rate, for the
    /// option of a leak tolerance ([`LeakyBucketBuilder::tolerance`]); `build()` or
    /// `build_with_clock(clock)` validates and makes the bucket.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_leaky::LeakyBucket;
    ///
    /// let bucket = LeakyBucket::<u32, _>::builder(Quota::per_second(100)?, 64)
    ///     .tolerance(Duration::from_millis(2)) // consumers may come up to 2 ms late
    ///     .build_with_clock(ManualClock::new())?;
    /// assert_eq!(bucket.schedule().tolerance(), Duration::from_millis(2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(quota: Quota, capacity: usize) -> LeakyBucketBuilder<T> {
        LeakyBucketBuilder { quota, capacity, tolerance: Duration::ZERO, items: PhantomData }
    }
}

/// Builds a [`LeakyBucket`]: its rate and capacity, and a leak tolerance.
///
/// Made by [`LeakyBucket::builder`]; the setter never fails, and `build()` (default
/// clock) or [`build_with_clock`](Self::build_with_clock) validates everything and
/// returns the bucket or a [`BuildError`] naming what is wrong.
pub struct LeakyBucketBuilder<T> {
    quota: Quota,
    capacity: usize,
    tolerance: Duration,
    items: PhantomData<fn() -> T>,
}

impl<T> LeakyBucketBuilder<T> {
    /// A consumer that comes for its slot up to `tolerance` late keeps the schedule,
    /// so the long-run rate stays exact when wake-ups are late, at the price of
    /// releases up to `⌊tolerance / T⌋` items closer together than `T` (see the crate
    /// docs, "Pacing and tolerance"). Zero by default; above about 9.1 years the
    /// build fails with [`BuildError::ToleranceTooLong`].
    pub fn tolerance(self, tolerance: Duration) -> Self {
        Self { tolerance, ..self }
    }

    /// The bucket, on the default [`MonotonicClock`](weir_rl_core::MonotonicClock).
    ///
    /// Errors: see [`build_with_clock`](Self::build_with_clock).
    #[cfg(feature = "std")]
    pub fn build(self) -> Result<LeakyBucket<T>, BuildError> {
        self.build_with_clock(weir_rl_core::MonotonicClock::new())
    }

    /// The bucket, reading time from `clock`; the first item may leave at once.
    ///
    /// Errors: `capacity` 0, above [`MAX_CAPACITY`](crate::MAX_CAPACITY) or more
    /// memory than the allocator gives; a quota the leak cannot honour or a
    /// tolerance too long (see [`LeakScheduleBuilder::build`](crate::LeakScheduleBuilder::build)).
    pub fn build_with_clock<C: Clock>(self, clock: C) -> Result<LeakyBucket<T, C>, BuildError> {
        Ok(LeakyBucket {
            queue: BoundedQueue::new(self.capacity)?,
            reserved: CachePadded::new(AtomicU64::new(0)),
            schedule: LeakSchedule::validated(self.quota, clock.now(), self.tolerance)?,
            #[cfg(any(feature = "std", loom))]
            waiters: Waiters::new(),
            clock,
        })
    }
}

impl<T> Clone for LeakyBucketBuilder<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for LeakyBucketBuilder<T> {}

impl<T> fmt::Debug for LeakyBucketBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeakyBucketBuilder")
            .field("quota", &self.quota)
            .field("capacity", &self.capacity)
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

impl<T, C: Clock> LeakyBucket<T, C> {
    /// An empty bucket holding up to `capacity` items, leaking one every
    /// `quota.emission_interval()` (exactly, in ticks of 1/16 ns), reading time from
    /// `clock`. The first item may leave at once.
    ///
    /// `capacity` 0, above [`MAX_CAPACITY`](crate::MAX_CAPACITY) or more memory than
    /// the allocator gives is a [`BuildError`], and so is a quota the leak cannot
    /// honour (see [`LeakSchedule::new`](crate::LeakSchedule::new)).
    pub fn with_clock(quota: Quota, capacity: usize, clock: C) -> Result<Self, BuildError> {
        LeakyBucketBuilder { quota, capacity, tolerance: Duration::ZERO, items: PhantomData }.build_with_clock(clock)
    }

    /// Offers `item`: accepted into the bucket (with its position and expected delay),
    /// or handed back at once if the bucket is full or closed.
    ///
    /// Lock-free (see [`BoundedQueue::try_push`] for the one corner where it waits);
    /// no allocation, no lock, no syscall. With `std`, an accepted item costs one more
    /// SeqCst fence, to wake a sleeping consumer (only if one sleeps).
    #[inline]
    pub fn offer(&self, item: T) -> Result<Enqueued, OfferError<T>> {
        match self.queue.push_at(item) {
            Ok(position) => {
                #[cfg(any(feature = "std", loom))]
                self.waiters.wake_one();
                Ok(self.enqueued(position))
            }
            Err(PushError::Full(item)) => {
                Err(OfferError::Full { item, retry_after: self.schedule.until_next_leak(self.clock.now()) })
            }
            Err(PushError::Closed(item)) => Err(OfferError::Closed(item)),
        }
    }

    /// Where an item pushed at `position` stands.
    fn enqueued(&self, position: u64) -> Enqueued {
        let ordinal = self.queue.ordinal(position);
        let ahead = ordinal.saturating_sub(self.queue.popped());
        // Ordering: Relaxed; an estimate.
        let without_slot = ordinal.saturating_sub(self.reserved.load(Ordering::Relaxed));
        let (next, now) = self.schedule.next_and_now(self.clock.now());
        // Its slot if consumers keep pace: `without_slot` intervals after the next free
        // one (which, with a tolerance, may be in the past).
        let due = next.saturating_add(without_slot.saturating_mul(self.schedule.interval_ticks()));
        let delay = due.saturating_sub(now);
        Enqueued {
            position: usize::try_from(ahead).unwrap_or(usize::MAX).min(self.queue.capacity()),
            expected_delay: Duration::from_nanos(ticks::to_nanos_ceil(delay)),
        }
    }

    /// Takes the next item if one is waiting and its leak slot is due now; never
    /// waits.
    ///
    /// When an item is waiting but the slot is not due, nothing shared is written.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let (available, closed) = self.unreserved();
        if available == 0 {
            return Err(if closed { TryRecvError::Closed } else { TryRecvError::Empty });
        }
        let now = self.clock.now();
        let next = self.schedule.next_slot(&now);
        if next > now {
            return Err(TryRecvError::NotYet { retry_after: next.saturating_duration_since(now) });
        }
        let reservation = match self.reserve() {
            Ok(reservation) => reservation,
            Err(Unavailable::Empty) => return Err(TryRecvError::Empty),
            Err(Unavailable::Closed) => return Err(TryRecvError::Closed),
        };
        match self.schedule.try_claim(&self.clock) {
            // The slot is due: the item leaves now.
            Ok(_slot) => Ok(reservation.take()),
            // Another consumer took the slot first; `reservation` is given back on drop.
            Err(retry_after) => Err(TryRecvError::NotYet { retry_after }),
        }
    }

    /// The number of items pushed and not yet reserved, and whether the bucket is
    /// closed.
    #[inline]
    fn unreserved(&self) -> (u64, bool) {
        // Ordering: Relaxed; counts (the item data travels through the queue's stamps).
        // Callers that must not miss an item read these after a SeqCst fence (`wait`).
        let reserved = self.reserved.load(Ordering::Relaxed);
        let (pushed, closed) = self.queue.pushed();
        (available(pushed, reserved), closed)
    }

    /// Reserves one item: from now on this consumer, and only it, will pop one item
    /// (the reservation's drop gives it back unless it is taken).
    fn reserve(&self) -> Result<Reservation<'_, T, C>, Unavailable> {
        let mut backoff = Backoff::new();
        // Ordering: Relaxed; see `unreserved`. The CAS below keeps `reserved` at most the
        // number of pushes that have claimed a position: it succeeds only if no other
        // reservation landed since `reserved` was read, and the push count it compared
        // with can only have grown.
        let mut reserved = self.reserved.load(Ordering::Relaxed);
        loop {
            let (pushed, closed) = self.queue.pushed();
            if available(pushed, reserved) == 0 {
                return Err(if closed { Unavailable::Closed } else { Unavailable::Empty });
            }
            // Ordering: Relaxed on success and failure; see the load above.
            match self.reserved.compare_exchange_weak(
                reserved,
                reserved.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(Reservation { bucket: self, slot: None, taken: false }),
                Err(actual) => reserved = actual,
            }
            backoff.spin();
        }
    }

    /// Pops the item a reservation entitles its holder to.
    ///
    /// Every pop follows a reservation, and reservations never exceed the pushes that
    /// claimed a position, so while a reservation holder pops, some pushed item is not
    /// yet popped by anyone else. `pop` may still answer "empty" for a moment: another
    /// consumer may have popped the item this reservation was counted against, leaving
    /// ours a later item whose push this thread does not see yet (or whose producer
    /// is still writing it). So this retries, snoozing, until the item is there; it
    /// never gives up, which would lose the reservation.
    fn take_reserved(&self) -> T {
        let mut snooze = Snooze::new();
        loop {
            match self.queue.pop() {
                Ok(item) => return item,
                Err(PopError::Empty | PopError::Closed) => snooze.snooze(),
            }
        }
    }

    /// Gives one reservation back, and wakes a sleeping consumer to take the item.
    fn unreserve(&self) {
        // Ordering: Relaxed; see `unreserved`; `wake_one` fences before it reads.
        self.reserved.fetch_sub(1, Ordering::Relaxed);
        #[cfg(any(feature = "std", loom))]
        self.waiters.wake_one();
    }

    /// Closes the bucket: from now on every offer is turned away with
    /// [`OfferError::Closed`]; every item already accepted still leaves (on schedule),
    /// exactly once; then consumers see closed. Wakes every sleeping consumer.
    ///
    /// Returns `true` if this call closed it, `false` if it already was.
    pub fn close(&self) -> bool {
        let closed = self.queue.close();
        #[cfg(any(feature = "std", loom))]
        self.waiters.wake_all();
        closed
    }

    /// Whether [`close`](Self::close) has been called.
    pub fn is_closed(&self) -> bool {
        self.queue.is_closed()
    }

    /// The number of items in the bucket (including those whose consumer is waiting
    /// for their slot), at a moment during the call.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether the bucket held no item at a moment during the call.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The most items the bucket holds.
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// The leak schedule all consumers share.
    pub fn schedule(&self) -> &LeakSchedule {
        &self.schedule
    }

    /// The clock this bucket reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[cfg(any(feature = "std", loom))]
impl<T, C: Clock> LeakyBucket<T, C> {
    /// Takes the next item, blocking the thread until one is waiting and its leak slot
    /// comes; [`RecvError`] once the bucket is closed and drained.
    ///
    /// Waiting sleeps (on a condition variable for an item, `std::thread::sleep` for
    /// the slot); it never spins. The slot is claimed as soon as an item is reserved,
    /// ahead of time, so a consumer that is already waiting when the previous item
    /// leaves keeps the schedule exactly, however late its wake-up (see the crate docs,
    /// "Pacing and tolerance").
    pub fn recv(&self) -> Result<T, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// [`recv`](Self::recv), giving up after `timeout` (by the bucket's clock): an
    /// item whose slot is later than that is left for another consumer, and no slot is
    /// spent on it: it never claims a slot that comes after the deadline.
    ///
    /// A zero time-out polls, like [`try_recv`](Self::try_recv): it takes an item that
    /// is waiting and due now.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rl_core::Quota;
    /// use weir_leaky::{LeakyBucket, RecvTimeoutError};
    ///
    /// let bucket = LeakyBucket::new(Quota::per_hour(1)?, 4)?;
    /// bucket.offer("a").unwrap();
    /// bucket.offer("b").unwrap();
    /// assert_eq!(bucket.recv_timeout(Duration::ZERO), Ok("a")); // due now
    /// // "b" is due in an hour: give up at once, leaving it (and its slot) in the bucket.
    /// assert_eq!(bucket.recv_timeout(Duration::from_secs(1)), Err(RecvTimeoutError::Timeout));
    /// assert_eq!(bucket.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_until(Some(self.clock.now() + timeout))
    }

    /// [`recv`](Self::recv), giving up at `deadline` (a reading of the bucket's clock).
    /// A deadline that has passed polls, like [`try_recv`](Self::try_recv).
    pub fn recv_deadline(&self, deadline: Nanos) -> Result<T, RecvTimeoutError> {
        self.recv_until(Some(deadline))
    }

    fn recv_until(&self, deadline: Option<Nanos>) -> Result<T, RecvTimeoutError> {
        let mut reservation = loop {
            match self.reserve() {
                Ok(reservation) => break reservation,
                Err(Unavailable::Closed) => return Err(RecvTimeoutError::Closed),
                Err(Unavailable::Empty) => self.block_for_item(deadline)?,
            }
        };
        let slot = match deadline {
            None => self.schedule.claim(&self.clock),
            // Too late for the deadline: `reservation` is given back on drop.
            Some(deadline) => self.schedule.claim_by(&self.clock, deadline).map_err(|_| RecvTimeoutError::Timeout)?,
        };
        let at = slot.at();
        reservation.slot = Some(slot);
        wait::sleep_until(&self.clock, at);
        Ok(reservation.take())
    }

    /// Sleeps until an item may be available to reserve, the bucket is closed, or the
    /// deadline has passed.
    fn block_for_item(&self, deadline: Option<Nanos>) -> Result<(), RecvTimeoutError> {
        self.waiters.register(BLOCKING_ONE);
        let mut guard = self.waiters.lock();
        let result = loop {
            if self.available_or_closed() {
                break Ok(());
            }
            let timeout = match deadline {
                None => None,
                Some(deadline) => {
                    let now = self.clock.now();
                    if now >= deadline {
                        break Err(RecvTimeoutError::Timeout);
                    }
                    Some(deadline.saturating_duration_since(now))
                }
            };
            guard = self.waiters.wait(guard, timeout);
        };
        drop(guard);
        self.waiters.unregister(BLOCKING_ONE);
        if result.is_err() && self.available_or_closed() {
            // We may have taken a notification meant for an item we now leave: pass it on.
            self.waiters.wake_one();
        }
        result
    }

    fn available_or_closed(&self) -> bool {
        let (available, closed) = self.unreserved();
        available != 0 || closed
    }
}

#[cfg(feature = "tokio")]
impl<T, C: Clock> LeakyBucket<T, C> {
    /// Takes the next item, waiting asynchronously (on tokio's timer and a
    /// `tokio::sync::Notify`) until one is waiting and its leak slot comes;
    /// [`RecvError`] once the bucket is closed and drained.
    ///
    /// **Cancel safety.** Dropping the future never loses an item: an item reserved
    /// but not yet taken is left for another consumer (a sleeping one is woken). Its
    /// leak slot is given back if no later slot has been claimed since; otherwise that
    /// one slot goes unused (the output falls one interval behind, never ahead). Use
    /// [`recv_async_timeout`](Self::recv_async_timeout) rather than wrapping this in a
    /// timeout: it never claims a slot it cannot use.
    ///
    /// With tokio's paused time (tests), give the bucket a [`TokioClock`](weir_rl_core::TokioClock).
    pub async fn recv_async(&self) -> Result<T, RecvError> {
        self.recv_async_until(None).await.map_err(|_| RecvError)
    }

    /// [`recv_async`](Self::recv_async), giving up after `timeout` (by the bucket's
    /// clock): an item whose slot is later than that is left for another consumer, and
    /// no slot is spent on it. A zero time-out polls, like [`try_recv`](Self::try_recv).
    pub async fn recv_async_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_async_until(Some(self.clock.now() + timeout)).await
    }

    /// [`recv_async`](Self::recv_async), giving up at `deadline` (a reading of the
    /// bucket's clock). A deadline that has passed polls, like
    /// [`try_recv`](Self::try_recv).
    pub async fn recv_async_deadline(&self, deadline: Nanos) -> Result<T, RecvTimeoutError> {
        self.recv_async_until(Some(deadline)).await
    }

    async fn recv_async_until(&self, deadline: Option<Nanos>) -> Result<T, RecvTimeoutError> {
        let mut reservation = loop {
            match self.reserve() {
                Ok(reservation) => break reservation,
                Err(Unavailable::Closed) => return Err(RecvTimeoutError::Closed),
                Err(Unavailable::Empty) => self.wait_for_item(deadline).await?,
            }
        };
        let slot = match deadline {
            None => self.schedule.claim(&self.clock),
            Some(deadline) => self.schedule.claim_by(&self.clock, deadline).map_err(|_| RecvTimeoutError::Timeout)?,
        };
        let at = slot.at();
        reservation.slot = Some(slot);
        wait::sleep_until_async(&self.clock, at).await;
        Ok(reservation.take())
    }

    /// Waits until an item may be available to reserve, the bucket is closed, or the
    /// deadline has passed.
    async fn wait_for_item(&self, deadline: Option<Nanos>) -> Result<(), RecvTimeoutError> {
        use crate::wait::ASYNC_ONE;

        /// Unregisters on every exit, cancellation included. (A dropped `Notified`
        /// that had been picked by `notify_one` passes the notification on by itself.)
        struct Registered<'a>(&'a Waiters);
        impl Drop for Registered<'_> {
            fn drop(&mut self) {
                self.0.unregister(ASYNC_ONE);
            }
        }

        let notified = self.waiters.notified();
        let mut notified = core::pin::pin!(notified);
        // Enabled before the check below, so a `notify_one` after it is not lost.
        notified.as_mut().enable();
        self.waiters.register(ASYNC_ONE);
        let _registered = Registered(&self.waiters);
        if self.available_or_closed() {
            return Ok(());
        }
        match deadline {
            None => {
                notified.await;
                Ok(())
            }
            Some(deadline) => loop {
                let now = self.clock.now();
                let remaining = deadline.saturating_duration_since(now);
                match tokio::time::timeout(remaining, notified.as_mut()).await {
                    Ok(()) => return Ok(()),
                    Err(_) if self.clock.now() >= deadline => return Err(RecvTimeoutError::Timeout),
                    Err(_) => continue,
                }
            },
        }
    }
}

/// One consumer's claim on one item (and, once claimed, its leak slot). Dropped
/// without [`take`](Self::take) (a timeout, a cancelled future, a panic), it gives the
/// item back to the other consumers and tries to give the slot back.
struct Reservation<'a, T, C: Clock> {
    bucket: &'a LeakyBucket<T, C>,
    slot: Option<LeakSlot<'a>>,
    taken: bool,
}

impl<T, C: Clock> Reservation<'_, T, C> {
    /// Pops the reserved item (its slot, if any, is spent).
    fn take(mut self) -> T {
        self.taken = true;
        self.bucket.take_reserved()
    }
}

impl<T, C: Clock> Drop for Reservation<'_, T, C> {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        if let Some(slot) = self.slot.take() {
            // A slot that is not the latest claim comes back and is dropped: spent.
            let _not_given_back = self.bucket.schedule.give_back(slot);
        }
        self.bucket.unreserve();
    }
}

impl<T, C> fmt::Debug for LeakyBucket<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeakyBucket")
            .field("len", &self.queue.len())
            .field("capacity", &self.queue.capacity())
            .field("closed", &self.queue.is_closed())
            // Ordering: Relaxed; a reading for display.
            .field("reserved", &self.reserved.load(Ordering::Relaxed))
            .field("schedule", &self.schedule)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_rl_core::{ManualClock, Nanos};

    fn bucket(per_second: u64, capacity: usize) -> (LeakyBucket<u32, ManualClock>, ManualClock) {
        let clock = ManualClock::new();
        (LeakyBucket::with_clock(Quota::per_second(per_second).unwrap(), capacity, clock.clone()).unwrap(), clock)
    }

    #[test]
    fn reservations_never_exceed_pushes_and_are_given_back() {
        let (bucket, _clock) = bucket(10, 4);
        assert!(matches!(bucket.reserve(), Err(Unavailable::Empty)));
        bucket.offer(1).unwrap();
        bucket.offer(2).unwrap();
        let a = bucket.reserve().unwrap();
        let b = bucket.reserve().unwrap();
        assert!(matches!(bucket.reserve(), Err(Unavailable::Empty)));
        drop(b);
        assert_eq!(bucket.unreserved(), (1, false));
        assert_eq!(a.take(), 1);
        bucket.close();
        let c = bucket.reserve().unwrap();
        assert!(matches!(bucket.reserve(), Err(Unavailable::Closed)));
        assert_eq!(c.take(), 2);
        assert_eq!(bucket.try_recv(), Err(TryRecvError::Closed));
    }

    #[test]
    fn a_dropped_reservation_gives_its_slot_back() {
        let (bucket, clock) = bucket(10, 4);
        bucket.offer(1).unwrap();
        let mut reservation = bucket.reserve().unwrap();
        reservation.slot = Some(bucket.schedule.claim(&clock));
        drop(reservation);
        // Nothing was spent: the item leaves at once.
        assert_eq!(bucket.try_recv(), Ok(1));
    }

    #[test]
    fn the_not_yet_path_writes_nothing() {
        let (bucket, _clock) = bucket(10, 4);
        bucket.offer(1).unwrap();
        bucket.offer(2).unwrap();
        assert_eq!(bucket.try_recv(), Ok(1));
        let before = (bucket.reserved.load(Ordering::Relaxed), bucket.schedule.next_slot(&Nanos::ZERO));
        for _ in 0..3 {
            assert!(matches!(bucket.try_recv(), Err(TryRecvError::NotYet { .. })));
        }
        assert_eq!(before, (bucket.reserved.load(Ordering::Relaxed), bucket.schedule.next_slot(&Nanos::ZERO)));
    }

    #[test]
    fn drop_releases_every_item_left() {
        use alloc::sync::Arc;
        use core::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, StdOrdering::Relaxed);
            }
        }
        let drops = Arc::new(AtomicUsize::new(0));
        let clock = ManualClock::new();
        let bucket = LeakyBucket::with_clock(Quota::per_second(1).unwrap(), 3, clock).unwrap();
        for _ in 0..5 {
            let _ = bucket.offer(Counted(drops.clone()));
        }
        assert_eq!(drops.load(StdOrdering::Relaxed), 2, "the two turned away");
        drop(bucket.try_recv().unwrap());
        assert_eq!(drops.load(StdOrdering::Relaxed), 3);
        drop(bucket);
        assert_eq!(drops.load(StdOrdering::Relaxed), 5);
    }
}
