//! Window rate limiters: "at most N per window" as users read it. The fixed window,
//! the sliding window counter (in one word, and striped per thread for one hot
//! limit), and the exact sliding log.
//!
//! # What to use when
//!
//! - Per-key limits with small counts: [`SlidingWindow`] (or [`FixedWindow`] if a
//!   burst of up to twice the limit across a window boundary is acceptable).
//! - One limit shared by every thread of a busy server: [`StripedSlidingWindow`].
//! - The limit must hold in *every* interval, not on average, and the limit is
//!   small: [`SlidingLog`].
//! - A rate with a burst allowance rather than a count per window: GCRA
//!   (`weir-gcra`).
//!
//! Every limiter here enforces "`limit` requests per window of length `P`", built
//! from a [`Quota`](weir_rl_core::Quota) (`limit = quota.count()`, `P =
//! quota.period()`; a quota whose burst differs from its count is refused with
//! [`WindowError::BurstIsNotCount`]), implements weir's [`Limiter`](weir_rl_core::Limiter)
//! contract (`check`, `check_n`, `refund`, `snapshot`, with `limit`, `remaining`,
//! `reset_after` and `retry_after` in every [`Decision`](weir_rl_core::Decision)), and
//! all but the striped one implement [`Algorithm`](weir_rl_core::Algorithm) and
//! [`Retire`](weir_rl_core::Retire), so `weir-keyed` can keep one per key and drop idle
//! ones without changing a decision (a retired state is an all-ones word, or for the
//! log a reserved sequence number, that admits nothing).
//!
//! `FixedWindow`, `SlidingWindow` and `SlidingLog` have `new(quota)` (the default
//! clock) and `with_clock(quota, clock)`; the two counters' one option, where
//! windows start, goes on their builders
//! (`FixedWindow::builder(quota).window_start(start).build()?`). The striped
//! window has several options (stripes, batch, mode, where windows start) and is
//! built only through `StripedSlidingWindow::builder(quota)`, with `build()` or
//! `build_with_clock(clock)`; `StripedSlidingWindow::new(quota)` gives the defaults.
//!
//! # Example
//!
//! ```
//! use weir_rl_core::{Limiter, ManualClock, Quota};
//! use weir_window::{FixedWindow, SlidingLog, SlidingWindow, StripedSlidingWindow};
//!
//! let quota = Quota::per_minute(100)?;
//! let clock = ManualClock::new();
//! let limiters: Vec<Box<dyn Limiter>> = vec![
//!     Box::new(FixedWindow::with_clock(quota, clock.clone())?),
//!     Box::new(SlidingWindow::with_clock(quota, clock.clone())?),
//!     Box::new(SlidingLog::with_clock(quota, clock.clone())?),
//!     Box::new(StripedSlidingWindow::builder(quota).build_with_clock(clock.clone())?),
//! ];
//! for limiter in &limiters {
//!     assert!(limiter.check_n(100)?.is_allowed());
//!     let denied = limiter.check();
//!     assert!(denied.is_denied() && denied.limit() == 100 && denied.remaining() == 0);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

//!
//! # Choosing a window algorithm
//!
//! | algorithm | memory per limiter | burst behaviour | accuracy | speed against governor's GCRA, allowed / denied: one thread; one hot limiter, 2 threads |
//! |---|---|---|---|---|
//! | [`FixedWindow`] | one `u64` state (8 B; 128 B padded as a limiter) | up to **2 × limit** in an interval shorter than a window, across a boundary | exact per window (linearizable) | 1.0× / 1.0×; 1.0–2.6× / 1.0× |
//! | [`SlidingWindow`] | one `u64` state (8 B; 128 B padded) | smoothed: the previous window counts by its overlap | estimate of a true sliding window, exact to its formula (linearizable); limit bounded by window length (131,071 per second) | 0.74× / 1.0×; 0.8–1.9× / 1.0× |
//! | [`SlidingLog`] | 8 B × limit + 40 B, allocated once; limit ≤ 2²⁴ | never more than `limit` in **any** interval of length `P` | exact true sliding window (linearizable); the reference; **blocking** (sequence lock) | 0.2× / 0.85×; 0.4× / 0.5× |
//! | [`StripedSlidingWindow`], exact | 128 B × stripes + 128 B | as [`SlidingWindow`] | never over-admits; may deny while other threads hold unused leases (≤ batch − 1 each) | 1.0× / 1.0×; 1.4–3.1× / 1.0× |
//! | [`StripedSlidingWindow`], approximate | 128 B × stripes + 128 B | as [`SlidingWindow`] | estimate exceeds the limit by at most **batch − 1** (default batch `limit / 1024`: < 0.1%) | 1.0× / 1.0×; not re-measured on 2 threads |
//!
//! Speed is checks per second relative to governor's GCRA measured in the same run,
//! every limiter on its default clock (how and where it was measured:
//! [DESIGN.md, "weir-window"](https://github.com/weir-rs/weir/blob/main/DESIGN.md#weir-window)).
//! A check costs about one clock read: the window arithmetic hides under it. Under
//! overload every window limiter stays within 0.4% of its ideal, none above it.
//!
//! # Windows and time
//!
//! Windows are aligned to the clock's origin by default: window `k` covers
//! `[k·P, (k+1)·P)` of the clock's readings, so limiters with the same period share
//! boundaries and, with a clock counting from midnight, a minute window starts on the
//! minute (the worked examples use a [`ManualClock`](weir_rl_core::ManualClock) set to
//! 12:00:00 that way). Each limiter's builder takes a `window_start` to align elsewhere, e.g.
//! its creation reading. The sliding log has no boundaries.
//!
//! A reading earlier than one already used (a clock stepping backwards, or a thread
//! whose reading is older than another's) is treated as no time having passed:
//! decisions are as strict as at the later reading, or stricter, never looser. The
//! window counters remember the latest window any check (admitted or denied) was
//! decided in; the sliding log remembers the latest *admitted* reading only (its
//! denials write nothing at all), so after a denied reading a log may decide an
//! earlier reading as of that earlier time. A monotonic clock never shows either.
//! Window numbers count from the limiter's creation and last at least 2⁵⁸ ns (9.1
//! years); quotas whose encoding cannot reach that are refused with
//! [`WindowError::LimitTooLarge`]. Nothing panics on any input: `check_n(u64::MAX)`
//! is [`InsufficientCapacity`](weir_rl_core::InsufficientCapacity), readings near
//! [`Nanos::MAX`](weir_rl_core::Nanos::MAX) saturate.
//!
//! # Refunds
//!
//! `refund(n, &admission)` gives back `n` units an admission took and the caller
//! did not use, to the window the admission was counted in (every decision is
//! stamped with the reading it was decided at, [`Decision::decided_at`](weir_rl_core::Decision::decided_at)),
//! and only while that window still weighs on decisions: the fixed window while it
//! is the current window; the sliding counters (one-word and striped) to the current
//! count while in the same window, to the previous count once it is the previous
//! window; the log removes `n` of the entries recorded at the admission's time.
//! Nothing for a denial or for an admission of 0 (it took nothing, whatever `n` is
//! given back); never more than the window holds. A refund is one CAS on
//! the state word (the striped limiter's global line; the log's write side when it
//! has entries to remove) and may race with checks: each decides before or after it.
//!
//! ```
//! use weir_rl_core::{Limiter, ManualClock, Quota};
//! use weir_window::SlidingWindow;
//!
//! let limiter = SlidingWindow::with_clock(Quota::per_minute(10)?, ManualClock::new())?;
//! let admission = limiter.check_n(10)?;
//! limiter.refund(3, &admission)?; // the work took 7
//! assert_eq!(limiter.snapshot().remaining(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Progress
//!
//! | operation | fixed / sliding | sliding log | striped |
//! |---|---|---|---|
//! | allowed check | lock-free, one CAS | blocking (sequence lock, `n` + 3 stores) | lock-free, one CAS on the thread's stripe (plus one on the global line per lease) |
//! | denied check | one load, no write (the sliding counter's first denial in a new window records the rollover: one CAS) | lock-free read, no write (waits out a write under way) | two cache lines read, no write (in exact mode the first denial once capacity runs out reclaims leases and records it) |
//! | snapshot | one load | as a denied check | one load per stripe |
//! | refund | lock-free, one CAS | blocking (sequence lock; moves the entries admitted after the refunded ones) | lock-free, one CAS on the global line |
//!
//! No check allocates, locks (except the log's sequence lock) or makes a syscall;
//! the clock read is the caller's choice (weir-rl-core's `CoarseClock`
//! costs one load).
//!
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

/// What the one-word window limiters ([`FixedWindow`], [`SlidingWindow`]) share:
/// `new` on the default clock, `with_clock`, `builder` (for where windows start)
/// and its builder type, `limit` and `window`. Doc comments after a `;` are added
/// to the builder's `window_start` docs.
macro_rules! window_limiter_constructors {
    ($name:ident, $builder:ident, $algorithm:ty, $state:ty $(; $(#[$start_doc:meta])*)?) => {
        #[cfg(feature = "std")]
        impl $name<weir_rl_core::MonotonicClock> {
            /// An empty limiter enforcing `quota` (`count` per `period`) on the default
            /// [`MonotonicClock`](weir_rl_core::MonotonicClock), windows aligned to its
            /// origin (the first `MonotonicClock` made in the process).
            ///
            /// Errors: see [`WindowError`].
            pub fn new(quota: Quota) -> Result<Self, WindowError> {
                Self::builder(quota).build()
            }
        }

        impl $name<weir_rl_core::DefaultClock> {
            /// A builder for `quota`, for the option of where windows start
            #[doc = concat!("([`", stringify!($builder), "::window_start`]); `build()` or")]
            /// `build_with_clock(clock)` validates and makes the limiter.
            pub fn builder(quota: Quota) -> $builder {
                $builder { quota, window_start: Nanos::ZERO }
            }
        }

        impl<C: Clock> $name<C> {
            /// An empty limiter enforcing `quota`, reading time from `clock`, with
            /// windows starting at the clock's origin and every period after it.
            ///
            /// Errors: see [`WindowError`].
            pub fn with_clock(quota: Quota, clock: C) -> Result<Self, WindowError> {
                $builder { quota, window_start: Nanos::ZERO }.build_with_clock(clock)
            }

            /// The most requests admitted per window-length.
            pub fn limit(&self) -> u64 {
                self.algorithm.limit()
            }

            /// The window length.
            pub fn window(&self) -> core::time::Duration {
                self.algorithm.window()
            }

            /// The same limiter, whose checks that lose a race to another thread's
            /// retry as `contention` says ([`Contention::Fair`](weir_rl_core::Contention::Fair)
            /// by default; [`Contention::Greedy`](weir_rl_core::Contention::Greedy)
            /// trades fairness between threads for throughput).
            pub fn with_contention(self, contention: weir_rl_core::Contention) -> Self {
                Self { algorithm: self.algorithm.with_contention(contention), ..self }
            }
        }

        #[doc = concat!("Builds a [`", stringify!($name), "`]: its quota, and where its windows start.")]
        ///
        #[doc = concat!("Made by [`", stringify!($name), "::builder`]; the setters never fail, and")]
        /// `build()` (default clock) or `build_with_clock(clock)` validates the quota
        /// and returns the limiter or a [`WindowError`].
        #[derive(Debug, Clone, Copy)]
        pub struct $builder {
            quota: Quota,
            window_start: Nanos,
        }

        impl $builder {
            /// Windows start at the reading `window_start` and every period before and
            /// after it (default: the clock's origin, [`Nanos::ZERO`]). Pass the
            /// clock's `now()` to start them when the limiter is made.
            $($(#[$start_doc])*)?
            pub fn window_start(self, window_start: Nanos) -> Self {
                Self { window_start, ..self }
            }

            /// The limiter, on the default [`MonotonicClock`](weir_rl_core::MonotonicClock).
            ///
            /// Errors: see [`WindowError`].
            #[cfg(feature = "std")]
            pub fn build(self) -> Result<$name, WindowError> {
                self.build_with_clock(weir_rl_core::MonotonicClock::new())
            }

            /// The limiter, reading time from `clock`.
            ///
            /// Errors: see [`WindowError`].
            pub fn build_with_clock<C: Clock>(self, clock: C) -> Result<$name<C>, WindowError> {
                let algorithm = <$algorithm>::aligned(self.quota, clock.now(), self.window_start)?;
                Ok($name { algorithm, state: CachePadded::new(<$state>::new()), clock })
            }
        }
    };
}

mod error;
pub mod fixed;
mod frame;
pub mod log;
pub mod sliding;
pub mod striped;

/// Not part of weir's public API and not covered by its semver promises: what
/// weir's own tests and models reach into. Hidden from the docs; a program that
/// uses weir never needs it.
#[doc(hidden)]
pub mod __private {
    use crate::StripedSlidingWindow;
    use weir_rl_core::{Clock, Decision, InsufficientCapacity, Nanos, Snapshot};

    /// A striped window's check of cost `n` on stripe `stripe` at the explicit
    /// reading `now`, ignoring its clock (the loom models pass time in).
    pub fn check_n_on_at<C: Clock>(
        limiter: &StripedSlidingWindow<C>,
        stripe: usize,
        n: u64,
        now: Nanos,
    ) -> Result<Decision, InsufficientCapacity> {
        limiter.check_n_on_at(stripe, n, now)
    }

    /// A striped window's snapshot at the explicit reading `now`.
    pub fn snapshot_at<C: Clock>(limiter: &StripedSlidingWindow<C>, now: Nanos) -> Snapshot {
        limiter.snapshot_at(now)
    }
}

pub use error::WindowError;
pub use fixed::{FixedWindow, FixedWindowAlgorithm, FixedWindowBuilder, FixedWindowState};
pub use log::{MAX_LOG_LIMIT, SlidingLog, SlidingLogAlgorithm, SlidingLogState};
pub use sliding::{SlidingWindow, SlidingWindowAlgorithm, SlidingWindowBuilder, SlidingWindowState};
pub use striped::{MAX_STRIPES, StripedBuilder, StripedMode, StripedSlidingWindow};

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
