//! The leaky bucket as a queue: a throttle that delays instead of rejecting.
//!
//! Rate limiting rejects; throttling queues and delays. Requests enter a bounded queue
//! (the bucket); they leave at the leak rate, no faster, however bursty the arrivals;
//! when the bucket is full, new arrivals are rejected at once.
//!
//! | type | what |
//! |---|---|
//! | [`LeakyBucket<T>`](LeakyBucket) | the bucket: producers [`offer`](LeakyBucket::offer) items, any number of consumers take them at the leak rate (non-blocking, blocking, async) |
//! | [`Throttle`] (`tokio`) | for request handlers: [`acquire`][Throttle::acquire]`.await` waits its turn in FIFO order, with deadlines and cancellation that leak nothing |
//! | [`BoundedQueue<T>`](BoundedQueue) | the bucket's lock-free bounded MPMC ring (Vyukov), usable on its own |
//! | [`LeakSchedule`] | the one-word schedule of leak slots all consumers share |
//!
//! Use it when excess requests should wait their turn rather than be refused (a
//! client of a rate-limited upstream, a batch loop, a handler that may delay). To
//! refuse what is over the rate, use GCRA (`weir-gcra`) or a window
//! (`weir-window`). Each type has `new` (the default clock) and `with_clock`; the
//! leak tolerance goes on its builder (`LeakyBucket::builder(quota,
//! capacity).tolerance(t).build()?`).
//!
//! # Worked example
//!
//! Leak rate 10/s, capacity 50, 100 requests arrive at once: 50 are enqueued, 50
//! rejected, and the queue drains in 5 s at 10/s.
//!
//! ```
//! use std::time::Duration;
//! use weir_rl_core::{Clock, ManualClock, Nanos, Quota};
//! use weir_leaky::{LeakyBucket, OfferError, TryRecvError};
//!
//! let clock = ManualClock::new();
//! let bucket = LeakyBucket::with_clock(Quota::per_second(10)?, 50, clock.clone())?;
//! let interval = Duration::from_millis(100);
//!
//! let (mut enqueued, mut rejected) = (0u32, 0u32);
//! for request in 0..100u32 {
//!     match bucket.offer(request) {
//!         Ok(ticket) => {
//!             // Its place in line, and when it is due out: position × leak interval.
//!             assert_eq!(ticket.position(), enqueued as usize);
//!             assert_eq!(ticket.expected_delay(), interval * enqueued);
//!             enqueued += 1;
//!         }
//!         Err(OfferError::Full { item, retry_after }) => {
//!             assert_eq!((item, retry_after), (request, interval)); // handed back at once
//!             rejected += 1;
//!         }
//!         Err(OfferError::Closed(_)) => unreachable!(),
//!     }
//! }
//! assert_eq!((enqueued, rejected), (50, 50));
//!
//! // One item leaves every 100 ms, in order, however eagerly consumers ask.
//! for expected in 0..50u32 {
//!     assert_eq!(bucket.try_recv(), Ok(expected));
//!     if expected < 49 {
//!         assert_eq!(bucket.try_recv(), Err(TryRecvError::NotYet { retry_after: interval }));
//!     }
//!     clock.advance(interval);
//! }
//! // Drained in 5 s: the last item left at 4.9 s, and the bucket is free at 5 s.
//! assert_eq!(clock.now(), Nanos::new(5_000_000_000));
//! assert_eq!(bucket.try_recv(), Err(TryRecvError::Empty));
//! assert_eq!(bucket.schedule().next_slot(&clock), clock.now());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Guarantees
//!
//! - **Never faster than the rate.** Slots are at least `T` apart, so over any window
//!   of length `W` at most `⌊W / T⌋ + 1` items leave (rate × window + 1), counted at
//!   their slots; no item leaves before its slot. (A thread descheduled *after* its slot
//!   hands its item over late; no library can prevent that.) With a tolerance `τ`
//!   (below), at most `⌊(W + τ) / T⌋ + 1`.
//! - **Exactly once, in order.** Every accepted item is taken exactly once or dropped
//!   with the bucket; items leave in the order they were accepted (across consumers,
//!   in the order their pops are linearized), so each producer's items leave in its
//!   order.
//! - **Full only when full**, and the item comes back with a retry-after (the time to
//!   the next slot: while consumers keep pace, a place frees by then).
//! - **Close.** After [`close`](LeakyBucket::close) returns, no offer succeeds; every
//!   item accepted before still leaves, on schedule, exactly once; then consumers see
//!   closed. Sleeping consumers are woken.
//! - **Progress.** `offer` and `try_recv` are lock-free, with one corner where they
//!   wait for a thread preempted mid-operation on the same slot (see [`queue`]).
//!   Blocking and async consumers sleep; nothing waits by spinning a core.
//! - **No panic** on any input: zero or absurd capacities and tolerances are a
//!   [`BuildError`]; time arithmetic saturates; a clock stepping backwards is treated
//!   as no time passing.
//!
//! # The algorithm
//!
//! The leaky bucket (J. Turner, "New directions in communications", IEEE
//! Communications Magazine 24(10), 1986; the traffic shaper of A. Tanenbaum's
//! *Computer Networks*, "The leaky bucket algorithm") has two readings:
//!
//! - **As a meter** (no queue), it decides whether a request conforms to the rate and
//!   burst, and rejects it if not. That is exactly GCRA, ITU-T I.371's "continuous-state
//!   leaky bucket": use [`weir-gcra`](https://docs.rs/weir-gcra) (`weir_rl::gcra::Gcra`),
//!   which this crate does not duplicate.
//! - **As a queue** (this crate), it *delays*: requests wait in the bucket and leave one
//!   every leak interval `T`; only a full bucket rejects.
//!
//! The queue is a [`BoundedQueue`]. The leak is a [`LeakSchedule`]: one atomic word
//! holding the time of the next free *leak slot*, claimed GCRA-style
//! (`slot = max(next, now); next := slot + T`) with one CAS. Every consumer takes an
//! item in three steps:
//!
//! 1. **reserve** an item: a CAS on a counter that never exceeds the items pushed, so a
//!    slot is only ever claimed for an item that exists;
//! 2. **claim** the next slot, possibly ahead of time (that is what keeps pacing from
//!    drifting: see below), and wait until it (sleeping, never spinning);
//! 3. **pop** the item: it leaves at its slot.
//!
//! All consumers, whatever their kind and number, claim from the one schedule, so
//! **together** they never exceed the rate: it is not a per-consumer sleep.
//!
//! # Pacing and tolerance
//!
//! Slots are points in absolute time (ticks of 1/16 ns, so every rate a [`Quota`](weir_rl_core::Quota)
//! accepts is paced exactly), never "sleep `T` after each item". A consumer claims its
//! slot as soon as it has reserved an item, before the slot is due; so while some
//! consumer is already waiting when the previous item leaves, the next slot is exactly
//! `previous + T`, whatever the wake-up latency. With `k` consumers, a backlog is
//! paced exactly as long as each one comes back for its next item within `k × T`.
//!
//! A consumer that comes back later than its slot finds the bucket "idle" and starts
//! the schedule again from now: with the default tolerance of zero the output can only
//! fall behind the rate, never exceed it. If your consumers cannot come back within
//! `k × T` (above roughly 10⁴ items per second per blocking thread; above about 10³ per
//! async task, tokio's timer having a 1 ms resolution), set a tolerance with
//! [`LeakyBucketBuilder::tolerance`]: a consumer up to `τ` late still gets its scheduled
//! slot, so the long-run rate stays exact, and in exchange up to `⌊τ / T⌋` items may
//! leave closer together than `T`. (In GCRA terms, the output conforms to GCRA(`T`, `τ`);
//! `τ` plays the part of ATM's cell delay variation tolerance.)
//!
//! # Features
//!
//! - `std` (default): blocking consumers ([`LeakyBucket::recv`]), the default
//!   [`MonotonicClock`], `std::error::Error` impls. Without it
//!   the crate is `no_std` + `alloc`: the queue, the schedule, `offer` and `try_recv`.
//! - `tokio`: async consumers ([`LeakyBucket::recv_async`]) and [`Throttle`]; it turns
//!   on weir-rl-core's `tokio` feature, whose [`TokioClock`] tests them under tokio's
//!   paused time.
//!
//! Why the ring, the throttle's line and the pacing are built as they are:
//! [DESIGN.md, "weir-leaky"](https://github.com/weir-rs/weir/blob/main/DESIGN.md#weir-leaky).
//!
//! The items of a feature that is off link to their docs.rs pages.
//!
#![cfg_attr(feature = "std", doc = "[`LeakyBucket::recv`]: LeakyBucket::recv")]
#![cfg_attr(feature = "std", doc = "[`MonotonicClock`]: weir_rl_core::MonotonicClock")]
#![cfg_attr(
    not(feature = "std"),
    doc = "[`LeakyBucket::recv`]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.LeakyBucket.html#method.recv"
)]
#![cfg_attr(
    not(feature = "std"),
    doc = "[`MonotonicClock`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.MonotonicClock.html"
)]
#![cfg_attr(feature = "tokio", doc = "[`Throttle`]: Throttle")]
#![cfg_attr(feature = "tokio", doc = "[Throttle::acquire]: Throttle::acquire")]
#![cfg_attr(feature = "tokio", doc = "[`LeakyBucket::recv_async`]: LeakyBucket::recv_async")]
#![cfg_attr(feature = "tokio", doc = "[`TokioClock`]: weir_rl_core::TokioClock")]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`Throttle`]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.Throttle.html"
)]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[Throttle::acquire]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.Throttle.html#method.acquire"
)]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`LeakyBucket::recv_async`]: https://docs.rs/weir-leaky/latest/weir_leaky/struct.LeakyBucket.html#method.recv_async"
)]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`TokioClock`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.TokioClock.html"
)]
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(any(feature = "std", loom, test))]
extern crate std;

mod bucket;
pub mod queue;
pub mod schedule;
#[cfg(feature = "tokio")]
pub mod throttle;
#[cfg(any(feature = "std", loom))]
mod wait;

pub use bucket::{Enqueued, LeakyBucket, LeakyBucketBuilder, OfferError, RecvError, RecvTimeoutError, TryRecvError};
pub use queue::{BoundedQueue, MAX_CAPACITY, PopError, PushError};
pub use schedule::{LeakSchedule, LeakScheduleBuilder, LeakSlot};
#[cfg(feature = "tokio")]
pub use throttle::{Throttle, ThrottleBuilder, ThrottleError};

use core::fmt;
use core::time::Duration;

/// Why a queue, bucket, schedule or throttle could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The capacity was zero: a bucket must hold at least one item.
    ZeroCapacity,
    /// The capacity was above [`MAX_CAPACITY`].
    CapacityTooLarge {
        /// The capacity asked for.
        requested: usize,
        /// The largest accepted.
        max: usize,
    },
    /// The allocator could not provide the queue's memory.
    OutOfMemory {
        /// The capacity asked for.
        capacity: usize,
        /// The bytes that would have taken (saturating).
        bytes: usize,
    },
    /// The tolerance was longer than about 9.1 years (2⁵⁸ ns), the span weir's time
    /// arithmetic covers.
    ToleranceTooLong {
        /// The tolerance asked for.
        tolerance: Duration,
    },
    /// The quota has a burst other than its count. A leak releases one item per
    /// interval and has no burst, so the burst would be silently ignored.
    BurstNotUsed {
        /// The quota's burst.
        burst: u64,
        /// The quota's count.
        count: u64,
    },
    /// The quota's emission interval is not a whole number of ticks (1/16 ns), which
    /// happens only above 16 million per second: one item per interval could not be
    /// released at that rate to within 0.1%.
    FractionalInterval {
        /// The quota's count.
        count: u64,
        /// The quota's period.
        period: Duration,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroCapacity => f.write_str(
                "the capacity is zero; a bucket must hold at least 1 item \
                 (to reject everything above the rate without queueing, use weir-gcra)",
            ),
            Self::CapacityTooLarge { requested, max } => {
                write!(f, "a capacity of {requested} items is above the maximum of {max}; use a smaller capacity")
            }
            Self::OutOfMemory { capacity, bytes } => {
                write!(f, "could not allocate {bytes} bytes for a capacity of {capacity} items; use a smaller capacity")
            }
            Self::ToleranceTooLong { tolerance } => write!(
                f,
                "a tolerance of {tolerance:?} is longer than about 9.1 years, the span weir's time \
                 arithmetic covers; use a shorter one (a few milliseconds is typical)"
            ),
            Self::BurstNotUsed { burst, count } => write!(
                f,
                "the quota has a burst of {burst} but a leaky bucket releases items one interval \
                 apart and has no burst; build the quota without `with_burst` (count {count}), \
                 and use the builder's `tolerance` to absorb late consumers"
            ),
            Self::FractionalInterval { count, period } => write!(
                f,
                "{count} per {period:?} leaks one item every {:.3} ns, not a whole number of \
                 1/16 ns ticks, so it cannot be paced to within 0.1%; choose a rate whose \
                 interval is whole (such as 10^9 per second) or queue batches of items",
                period.as_nanos() as f64 / count as f64
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BuildError {}

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
