//! The striped sliding window counter: one hot limit shared by many threads.
//!
//! # What it computes
//!
//! The same sliding-window estimate as [`SlidingWindow`](crate::SlidingWindow)
//! (Cloudflare's: the previous window's count weighted by its overlap with the last
//! window-length, plus the current window's):
//!
//! ```text
//! admitted   iff   prev × (P − elapsed) / P + curr + n ≤ limit
//! ```
//!
//! but without every thread writing one shared word: on a hot limiter that word's
//! cache line would move between cores on every admission, and throughput would
//! fall as threads are added (the measurement is in
//! [DESIGN.md, "weir-window"](https://github.com/weir-rs/weir/blob/main/DESIGN.md#weir-window)).
//!
//! # The construction: budget leases
//!
//! Capacity is handed out in **leases**. The window's count lives in a global
//! word, `granted`: requests admitted *plus* capacity leased to stripes and not yet
//! used. Each stripe (a cache-padded word, one per thread) holds a lease
//! tagged with its window. A check:
//!
//! 1. **fast path** — takes `n` from its own stripe's lease with one CAS on that
//!    stripe's line, if the lease holds `n` and belongs to the reading's window. No
//!    shared line is read or written.
//! 2. **slow path** — otherwise asks the global word for a new lease with one CAS:
//!    `n` plus up to `batch − n` ahead, granted only if the estimate with *everything
//!    granted counted as admitted* stays within the limit. The stripe's unused
//!    leftover is folded back into the same CAS.
//!
//! Because every admission spends capacity that was granted under the limit, and
//! the global word's count only overstates what was admitted, **the exact mode
//! never over-admits**: for every admission, `prev_admitted × weight +
//! curr_admitted ≤ prev_granted × weight + curr_granted ≤ limit` at the time of the
//! grant, and the estimate only loosens as the window advances. (A reading is never
//! earlier than the grant it spends for the limiter's purposes: a clock that steps
//! back is no time passing.) loom checks this on small models and a proptest checks
//! that, used from one thread on any stripes with readings that never go back, the
//! exact mode decides exactly as the single-word sliding counter. A reading that
//! lags behind a lease's grant within the same window is decided as of the grant
//! (no time passing), so it may be admitted from that lease where the single-word
//! counter, deciding at the lagging reading, would deny it; never more than the
//! limit at the latest reading.
//!
//! Near the limit the exact mode shrinks leases to what is left, and **before
//! denying it reclaims every stripe's unused lease** (one CAS per stripe holding
//! one) and asks again; a denial is therefore exact whenever no other thread holds
//! capacity during that pass (see "Under-admission" below). A flag in the global
//! word, `drained`, records that the leases have been reclaimed, so that denials
//! under sustained overload cost two loads, not one per stripe. A check sets it
//! *before* its pass, and every grant clears it. A lease lands on its stripe only
//! after its grant, so a pass may miss one on its way; its installer reads the flag
//! after the lease lands, and clears it if set. A `SeqCst` fence on each side (after
//! setting the flag, after installing) makes at least one of the two see the other:
//! the pass takes the lease or the installer clears the flag. So once the checks
//! that raced have finished, the flag is never set while a stripe holds capacity.
//!
//! The idea is Linux's `__percpu_counter_limited_add` (`lib/percpu_counter.c`)
//! turned around: the check is done once per lease, when capacity is *reserved*,
//! so the fast path reads no shared line, and exactness follows from accounting
//! (admitted ≤ granted ≤ limit). How the two differ is in
//! [DESIGN.md, "weir-window"](https://github.com/weir-rs/weir/blob/main/DESIGN.md#weir-window).
//!
//! ## Under-admission (exact mode)
//!
//! Leased capacity that a stripe never uses is counted as admitted until it is
//! reclaimed: by a check about to deny (above), or at the next rollover. A denial
//! can thus be stricter than the sequential algorithm's only while another check
//! is still running and holds capacity the denying check cannot take: a lease it
//! took *during* the reclaiming pass (at most `batch − 1` per concurrently checking
//! stripe), a lease granted and not yet on its stripe, or tokens in hand that it
//! has not yet granted or returned (its own stripe's leftover, taken back at the
//! start of its slow path, or leases it reclaimed from other stripes in a pass
//! racing with this one). Once the checks that raced have finished, none of these
//! is left, and a denial happens only when no capacity is left anywhere: loom
//! models check that a further check on an idle stripe, after every thread has
//! finished, is decided exactly as the sequential algorithm decides it. With a
//! frozen clock, threads that each check until their first denial admit exactly
//! `limit` between them (a stress test). Decisions' `remaining` on the fast path is
//! an estimate (the global capacity left when the stripe's lease was granted, plus
//! the lease); [`snapshot`] sums every stripe.
//!
//! ## Approximate mode: over-admission below one batch
//!
//! The approximate mode grants a full `batch` whenever the *request* fits, even if
//! the batch does not, and never reclaims other stripes' leases before denying.
//! Each grant needs `granted + n ≤ allowance`, so `granted` exceeds the allowance by
//! less than one batch, and the sliding estimate of what was admitted never exceeds
//!
//! ```text
//! limit + batch − 1
//! ```
//!
//! (asserted by a proptest, a concurrent stress test and a loom model). With the
//! default batch, `max(1, limit / 1024)`, that is under 0.1% of the limit. It saves
//! the exact mode's work near the limit: shrinking leases, reclaiming passes, the
//! `drained` bookkeeping. Leases stranded in idle stripes are not reclaimed before
//! a denial (under-admission by up to `(stripes − 1) × batch` until they are used or
//! the window rolls over). Far from the limit the two modes run the same fast path.
//!
//! # Rollover
//!
//! The global state is two words on one cache line: `current = window | closed |
//! drained | granted`, the only window that grants, and `previous = window |
//! granted`, a closed window's count. A check whose reading is in a later window
//! **closes** `current` with a CAS (nothing can land in it after that: no grant, and
//! no return, see below), **copies** its count to `previous` (a CAS that only ever
//! raises `previous`'s window number, so the first copy of a window stands),
//! **opens** the new window with a CAS on `current` from the closed value, and then
//! returns every older lease to the window it was granted in, one CAS per stripe
//! holding one. Closing and opening are CASes on the same word, so at most one
//! window is ever open, and a window opens only after its predecessor's count is in
//! `previous` (a check reads `current`, then `previous`). A returned lease lowers
//! its window's count where that count is kept: in `current` while the window is
//! open, in `previous` once it is closed (a return that finds its window closed
//! and not yet copied makes the copy itself), so no return lands after the copy and
//! is lost to it. A lease can be spent or returned but not both (both are CASes on
//! the stripe's word). So a
//! rollover while other threads are mid-check neither loses nor double-counts a
//! window's requests: a thread that read its lease before the rollover either
//! spends it in the old window (its CAS lands first) or finds it gone and goes to
//! the slow path. Any thread that finds the current window closed completes the
//! rollover itself, so no thread waits on another.
//!
//! # Refunds
//!
//! [`StripedSlidingWindow::refund`] gives an admission's tokens back the way a
//! returned lease is given back: to the window they were counted in (every decision
//! is stamped with its reading, the lease's window for a reading that lags it), in
//! `current` while that window is open, in `previous` once it is closed, nowhere once
//! it is older. The count it lowers includes capacity leased to stripes, so a refund
//! of more than the admission took can give back leased capacity too: refund at
//! most what the admission took.
//!
//! # Picking a stripe
//!
//! With `std`, [`check`](StripedSlidingWindow::check) uses the calling thread's
//! stripe: the first time a thread checks any striped limiter it takes the next
//! number from a process-wide counter (round robin), and uses `number mod stripes`
//! from then on (one thread-local read per check). Threads beyond the stripe count
//! share stripes, which stays correct (stripe words are only changed by CAS) and
//! costs only contention on that line. Without `std` there are no thread-locals:
//! `check` uses stripe 0, and [`check_on`](StripedSlidingWindow::check_on) takes an
//! explicit stripe (a worker id from your executor, say). The stripe count is rounded
//! up to a power of two (at most [`MAX_STRIPES`]); with `std` it defaults to the
//! available parallelism.
//!
//! # Progress and costs
//!
//! Every operation is **lock-free**: a CAS fails only because another thread's
//! succeeded, and no thread ever waits for another to finish a step. Allowed
//! (fast path): one load and one CAS on the thread's own stripe. Allowed (slow
//! path, once per lease): a few loads of the global line and one CAS on it, one
//! on the stripe, and in exact mode a `SeqCst` fence and one more load of the
//! global line after the lease is installed. Denied: the stripe and the global line
//! read, nothing written (in exact mode, except by the first denial after a grant,
//! which sets `drained` and reclaims). Rollover:
//! two CASes on the global line plus one per stripe holding a lease, once per
//! window. Memory: 128 bytes per stripe plus 128 for the global words.
//!
//! # Limits and time
//!
//! Window numbers count from the limiter's creation in the global words' high bits,
//! above count fields wide enough for `limit + batch`: at least 2⁶⁰ emission
//! intervals (36 years at a billion per second); a quota whose numbers would not
//! reach 2⁵⁸ ns (9.1 years), or whose `limit + batch` needs more than 61 bits, is
//! [`WindowError::LimitTooLarge`](crate::WindowError::LimitTooLarge) at build time. No panic on any input; a reading earlier than the
//! open window is decided at that window's start.
//!
//! # Example
//!
//! ```
//! use weir_rl_core::{ManualClock, Quota};
//! use weir_window::{StripedSlidingWindow, StripedMode};
//!
//! let limiter = StripedSlidingWindow::builder(Quota::per_second(10_000)?)
//!     .stripes(8)
//!     .batch(64)
//!     .mode(StripedMode::Exact)
//!     .build_with_clock(ManualClock::new())?;
//! // Four threads, each checking until it is denied.
//! let admitted: u64 = std::thread::scope(|s| {
//!     let workers: Vec<_> = (0..4)
//!         .map(|_| s.spawn(|| (0..).take_while(|_| limiter.check().is_allowed()).count() as u64))
//!         .collect();
//!     workers.into_iter().map(|w| w.join().unwrap()).sum()
//! });
//! assert_eq!(admitted, 10_000); // never more; with the clock frozen, no less
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`snapshot`]: StripedSlidingWindow::snapshot

mod builder;
mod layout;
mod protocol;

use core::fmt;
use protocol::Core;
use weir_rl_core::__private::thread_stripe;
use weir_rl_core::{Clock, Decision, InsufficientCapacity, Limiter, Nanos, Snapshot};

pub use builder::StripedBuilder;
pub use weir_rl_core::stripes::MAX_STRIPES;

/// How a [`StripedSlidingWindow`] trades accuracy for throughput near its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StripedMode {
    /// Never admits more than the sliding-window estimate allows; reclaims unused
    /// leases before denying. See the [module docs](crate::striped).
    #[default]
    Exact,
    /// May admit up to `batch − 1` beyond the limit per window; does no reclaiming.
    Approximate,
}

/// A sliding window counter striped per thread, for one hot limit checked
/// by many threads: an admission touches only the thread's own stripe.
///
/// See the [module docs](crate::striped) for the construction, the exact
/// mode's zero over-admission and the approximate mode's bound. Built with
/// [`StripedBuilder`] (or `StripedSlidingWindow::new` for the defaults, with `std`). Share it by
/// reference (`&StripedSlidingWindow`, `Arc<StripedSlidingWindow>`).
///
/// ```
/// use weir_rl_core::Quota;
/// use weir_window::StripedSlidingWindow;
///
/// let limiter = StripedSlidingWindow::new(Quota::per_second(1_000_000)?)?;
/// assert!(limiter.check().is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct StripedSlidingWindow<C = weir_rl_core::DefaultClock> {
    core: Core,
    clock: C,
}

impl<C: fmt::Debug> fmt::Debug for StripedSlidingWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = &self.core;
        f.debug_struct("StripedSlidingWindow")
            .field("limit", &core.frame.limit)
            .field("window", &core::time::Duration::from_nanos(core.frame.period))
            .field("stripes", &core.stripes.len())
            .field("batch", &core.batch)
            .field("mode", &core.mode)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "std")]
impl StripedSlidingWindow<weir_rl_core::MonotonicClock> {
    /// The defaults (exact mode, one stripe per hardware thread, batch
    /// `max(1, limit / 1024)`) on the default
    /// [`MonotonicClock`](weir_rl_core::MonotonicClock).
    ///
    /// Errors: see [`WindowError`](crate::WindowError).
    pub fn new(quota: weir_rl_core::Quota) -> Result<Self, crate::WindowError> {
        Self::builder(quota).build()
    }
}

impl StripedSlidingWindow<weir_rl_core::DefaultClock> {
    /// A builder for `quota` (`count` per `period`), for the options: stripes,
    /// batch, mode and where windows start (see [`StripedBuilder`]).
    pub fn builder(quota: weir_rl_core::Quota) -> StripedBuilder {
        StripedBuilder::new(quota)
    }
}

impl<C: Clock> StripedSlidingWindow<C> {
    /// Checks one request on the calling thread's stripe (see the module docs,
    /// "Picking a stripe").
    #[inline(always)] // the whole fast path, into the caller
    pub fn check(&self) -> Decision {
        self.core.check(thread_stripe(), 1, self.clock.now())
    }

    /// Checks a request of cost `n`, all or nothing, on the calling thread's stripe.
    /// `n` above the limit is an error; `n == 0` is admitted and consumes nothing.
    #[inline]
    pub fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_n_on_at(thread_stripe(), n, self.clock.now())
    }

    /// Checks one request on stripe `stripe` (taken modulo the stripe count): for
    /// callers that number their own workers, and without `std`.
    #[inline]
    pub fn check_on(&self, stripe: usize) -> Decision {
        self.core.check(stripe, 1, self.clock.now())
    }

    /// Checks a request of cost `n` on stripe `stripe` (modulo the stripe count).
    #[inline]
    pub fn check_n_on(&self, stripe: usize, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_n_on_at(stripe, n, self.clock.now())
    }

    /// Checks a request of cost `n` on stripe `stripe` at the explicit reading `now`,
    /// ignoring the limiter's clock: for the models that pass time in (reached
    /// through `crate::__private`).
    pub(crate) fn check_n_on_at(&self, stripe: usize, n: u64, now: Nanos) -> Result<Decision, InsufficientCapacity> {
        let limit = self.core.frame.limit;
        if n > limit {
            return Err(InsufficientCapacity { requested: n, capacity: limit });
        }
        if n == 0 {
            // Took nothing: a refund against it gives nothing back.
            return Ok(Decision::allowed(self.core.snapshot_at(now)).at(now).zero_cost());
        }
        Ok(self.core.check(stripe, n, now))
    }

    /// Gives back `n` tokens that `admission` (a decision of this limiter) spent and
    /// the caller did not use, to the window it was counted in: that window's count
    /// while it is the current or the previous window, nothing once it is older (it
    /// no longer weighs on any estimate), as a returned lease is. Nothing for a
    /// denial or an admission of 0 (it took nothing); `n` above the limit is an
    /// error.
    ///
    /// ```
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_window::StripedSlidingWindow;
    ///
    /// let limiter = StripedSlidingWindow::builder(Quota::per_second(10)?).stripes(2).build_with_clock(ManualClock::new())?;
    /// let admission = limiter.check_n_on(0, 10)?;
    /// limiter.refund(4, &admission)?;
    /// assert_eq!(limiter.snapshot().remaining(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        let limit = self.core.frame.limit;
        if n > limit {
            return Err(InsufficientCapacity { requested: n, capacity: limit });
        }
        if n > 0 && admission.is_allowed() && !admission.is_zero_cost() {
            self.core.refund(n, admission.decided_at());
        }
        Ok(())
    }

    /// The current state, summing every stripe's unused lease: exact when no check
    /// runs concurrently, a best effort while they do.
    pub fn snapshot(&self) -> Snapshot {
        self.core.snapshot_at(self.clock.now())
    }

    /// [`snapshot`](Self::snapshot) at the explicit reading `now` (for the models,
    /// through `crate::__private`).
    pub(crate) fn snapshot_at(&self, now: Nanos) -> Snapshot {
        self.core.snapshot_at(now)
    }

    /// The most requests admitted per window-length (exact mode).
    pub fn limit(&self) -> u64 {
        self.core.frame.limit
    }

    /// The window length.
    pub fn window(&self) -> core::time::Duration {
        core::time::Duration::from_nanos(self.core.frame.period)
    }

    /// The number of stripes (a power of two).
    pub fn stripes(&self) -> usize {
        self.core.stripes.len()
    }

    /// The most capacity a stripe leases at once.
    pub fn batch(&self) -> u64 {
        self.core.batch
    }

    /// Exact or approximate.
    pub fn mode(&self) -> StripedMode {
        self.core.mode
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C: Clock> Limiter for StripedSlidingWindow<C> {
    #[inline(always)]
    fn check(&self) -> Decision {
        StripedSlidingWindow::check(self)
    }
    #[inline]
    fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        StripedSlidingWindow::check_n(self, n)
    }
    #[inline]
    fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        StripedSlidingWindow::refund(self, n, admission)
    }
    fn snapshot(&self) -> Snapshot {
        StripedSlidingWindow::snapshot(self)
    }
}
