//! The sliding window counter in one atomic word.
//!
//! # The algorithm
//!
//! The sliding window counter (described by Cloudflare in "How we built rate
//! limiting capable of scaling to millions of domains", 2017) keeps two counts per
//! limiter: the requests admitted in the previous fixed window and in the current
//! one. It estimates the requests of the last full window-length by assuming the
//! previous window's were spread evenly over it, so only the part of the previous
//! window still inside the last window-length counts:
//!
//! ```text
//! estimate = prev × (P − elapsed) / P + curr        (P: window length; elapsed: time into the current window)
//! admitted   iff   estimate + n ≤ limit             (then curr += n)
//! ```
//!
//! Worked example (Cloudflare's): 100 per minute, 80 admitted in the previous
//! minute, 30 in this one, 45 s into it: `80 × 15/60 + 30 = 50`, so 50 more may come.
//!
//! # Accuracy and burst
//!
//! The estimate is an approximation of a true sliding window (the exact one is
//! [`SlidingLog`](crate::SlidingLog)): it is exact when the previous window's
//! requests were evenly spread, and otherwise can admit somewhat more or fewer than
//! a true window would over a given window-length (Cloudflare measured 0.003% of
//! requests wrongly decided on their traffic). It removes the fixed window's 2×
//! boundary burst: after 100 at 12:00:55, a request at 12:01:05 sees an estimate of
//! `100 × 55/60 = 91.7` and only 8 more are admitted. What this limiter implements
//! exactly is the formula above: the comparison is made in integers
//! (`prev·(P − elapsed) ≤ (limit − curr − n)·P`), with no rounding.
//!
//! # Encoding and guarantees
//!
//! The state is one `u64`: `window | prev | curr`, each count in `⌈log₂(limit + 1)⌉`
//! bits, the window number in the rest. A rollover (previous := current, current :=
//! 0, or both 0 after an idle window) is the same single compare-and-swap as an
//! admission, so no admission can be counted in a window that has been rolled past
//! or lost in the roll.
//!
//! - **Exact** (to the formula) and **linearizable**: concurrent checks decide as the
//!   sequential algorithm in the order their CASes land (loom model and proptest).
//! - **Lock-free**; **allowed path** one CAS; **denied path** one load, no write
//!   (except the first denial in a new window, which records the rollover with one
//!   CAS, so that a reading stepping back cannot be decided in the older window).
//! - **Exact times**: a denial's `retry_after` is the first nanosecond at which the
//!   same request fits if nothing else is admitted (the estimate only falls while
//!   nothing is admitted, so that instant is well defined); `reset_after` is the time
//!   until the estimate is zero (the end of the next window if anything is counted in
//!   this one).
//! - **Refunds** ([`SlidingWindow::refund`]) take `n` off the count the admission
//!   was counted in: the current count in the same window, the previous count once
//!   the admission's window is the previous one, nothing after that. One CAS, which
//!   records the rollover like an admission's.
//! - **No panic.** A reading earlier than the stored window is decided at that
//!   window's start (its strictest point), never more loosely than the latest reading.
//! - **Limit range**: three fields share 64 bits, so the limit is bounded by the
//!   window length: the window numbers must last the 2⁵⁸ ns (9.1 years) every weir
//!   limiter runs. For example at most 4,095 per millisecond, 131,071 per second,
//!   1,048,575 per minute or 8,388,607 per hour; larger limits are [`WindowError::LimitTooLarge`] and
//!   belong in [`StripedSlidingWindow`](crate::StripedSlidingWindow), which is built
//!   for hot limits anyway.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use weir_rl_core::{ManualClock, Nanos, Quota};
//! use weir_window::SlidingWindow;
//!
//! let at = |h: u64, m: u64, s: u64| Nanos::new(((h * 60 + m) * 60 + s) * 1_000_000_000);
//! let clock = ManualClock::starting_at(at(12, 0, 0));
//! let limiter = SlidingWindow::with_clock(Quota::per_minute(100)?, clock.clone())?;
//!
//! clock.set(at(12, 0, 55));
//! assert!(limiter.check_n(100)?.is_allowed());
//! clock.set(at(12, 1, 5)); // 100 × 55/60 = 91.7 still counts
//! let admitted = (0..100).filter(|_| limiter.check().is_allowed()).count();
//! assert_eq!(admitted, 8);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::WindowError;
use crate::frame::{self, Frame};
use weir_rl_core::__private::sync::{AtomicU64, Backoff, CachePadded, Ordering};
use weir_rl_core::{Algorithm, Clock, Contention, Decision, InsufficientCapacity, Nanos, Quota, Retire, Snapshot};

/// Sliding-window-counter parameters shared by any number of
/// [`SlidingWindowState`]s.
///
/// This is the [`Algorithm`] half, for per-key stores; most users want
/// [`SlidingWindow`].
///
/// ```
/// use weir_rl_core::{Algorithm, Nanos, Quota};
/// use weir_window::SlidingWindowAlgorithm;
///
/// let algorithm = SlidingWindowAlgorithm::new(Quota::per_second(10)?, Nanos::ZERO)?;
/// let key = algorithm.new_state();
/// assert!(algorithm.check_n(&key, 10, &Nanos::ZERO)?.is_allowed());
/// // Half a second into the next window, half of the previous window still counts.
/// let d = algorithm.check(&key, &Nanos::new(1_500_000_000));
/// assert_eq!(d.remaining(), 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SlidingWindowAlgorithm {
    frame: Frame,
    /// Bits of each count field, `b` (1 to 31: the window number needs the rest).
    count_bits: u32,
    /// `2^b − 1`: one count field.
    mask: u64,
    /// What a check does after losing a race (read on the retry path only).
    contention: Contention,
}

/// One sliding window's state: `window << 2b | prev << b | curr` with `b` count
/// bits, where `window` is the current window's number since the
/// [`SlidingWindowAlgorithm`]'s creation, `curr` the requests admitted in it and
/// `prev` those admitted in the window before. The initial value, 0, is empty.
#[derive(Debug, Default)]
pub struct SlidingWindowState {
    word: AtomicU64,
}

impl SlidingWindowState {
    /// An empty window.
    pub fn new() -> Self {
        Self { word: AtomicU64::new(0) }
    }
}

/// A state word, unpacked and moved to the window a reading falls in.
#[derive(Debug, Clone, Copy)]
struct View {
    window: u64,
    elapsed: u64,
    prev: u64,
    curr: u64,
}

impl SlidingWindowAlgorithm {
    /// Parameters for `quota` (`count` per `period`), created at the clock reading
    /// `now`, with windows starting at the clock's origin and every period after it.
    ///
    /// Errors: the quota's burst differs from its count; the limit is too large for
    /// the one-word encoding (see the [module docs](crate::sliding)).
    pub fn new(quota: Quota, now: Nanos) -> Result<Self, WindowError> {
        Self::aligned(quota, now, Nanos::ZERO)
    }

    /// Like [`new`](Self::new), with windows starting at the reading `window_start`
    /// and every period before and after it.
    pub fn aligned(quota: Quota, now: Nanos, window_start: Nanos) -> Result<Self, WindowError> {
        let (limit, period) = frame::limit_and_period(&quota)?;
        let max_window = |count_bits: u32| u64::MAX.checked_shr(2 * count_bits).filter(|&m| m > 0);
        let count_bits = frame::bits(limit);
        max_window(count_bits)
            .and_then(|max| Frame::new(limit, period, now, window_start, max))
            .map(|frame| Self {
                frame,
                count_bits,
                mask: u64::MAX >> (u64::BITS - count_bits),
                contention: Contention::Fair,
            })
            .ok_or_else(|| Frame::too_large(limit, period, 0, max_window))
    }

    /// The same parameters, with checks that lose a race to another thread's
    /// retrying as `contention` says ([`Contention::Fair`] by default).
    pub fn with_contention(self, contention: Contention) -> Self {
        Self { contention, ..self }
    }

    /// What a check does after losing a race.
    pub fn contention(&self) -> Contention {
        self.contention
    }

    /// The most requests admitted per window-length.
    pub fn limit(&self) -> u64 {
        self.frame.limit
    }

    /// The window length.
    pub fn window(&self) -> core::time::Duration {
        core::time::Duration::from_nanos(self.frame.period)
    }

    // `b` is 1 to 31 (a construction whose window numbers would get no bits is
    // refused), so shifts by `b` and `2b` never overflow, and every window number a
    // reading reaches fits above both counts.

    #[inline]
    fn pack(&self, window: u64, prev: u64, curr: u64) -> u64 {
        let b = self.count_bits;
        window.wrapping_shl(2 * b) | prev.wrapping_shl(b) | curr
    }

    /// The window number stored in a state word.
    #[inline]
    fn window_of(&self, word: u64) -> u64 {
        word.wrapping_shr(2 * self.count_bits)
    }

    /// The state word as seen from relative time `rel`: the stored window when the
    /// reading is in it (or earlier), else the reading's window with the counts
    /// rolled forward (the current count becomes the previous one after one window;
    /// both are zero after two).
    #[inline]
    fn view(&self, word: u64, rel: u64) -> View {
        let b = self.count_bits;
        let stored = self.window_of(word);
        let prev = word.wrapping_shr(b) & self.mask;
        let curr = word & self.mask;
        let (window, elapsed) = frame::position(&self.frame, stored, rel);
        match window.saturating_sub(stored) {
            0 => View { window, elapsed, prev, curr },
            1 => View { window, elapsed, prev: curr, curr: 0 },
            _ => View { window, elapsed, prev: 0, curr: 0 },
        }
    }

    /// The snapshot of `view` with `curr` admitted in its window, read at `now`.
    #[inline]
    fn snapshot_of(&self, view: &View, curr: u64, now: Nanos) -> Snapshot {
        let f = &self.frame;
        let reset = match frame::sliding_reset(f.period, view.prev, curr) {
            Some(after) => f.delay(f.start(view.window).saturating_add(after), now),
            None => 0,
        };
        frame::sliding_snapshot(f.limit, f.period, view.prev, curr, view.elapsed, reset)
    }

    /// The one admission routine: `n ≤ limit` is the caller's to check.
    ///
    /// Inlined into the caller: one clock read, one load and, when the reading is
    /// in the stored window (admitted or denied), the next one (admitted) or any
    /// later one (admitted: a fresh window, found with one division), the decision
    /// and its one CAS, with no loop. A lost race, a denial that must record a
    /// rollover, a reading that lags the stored window or is out of the limiter's
    /// range, and a retired state take the out-of-line
    /// [`acquire_slow`](Self::acquire_slow), which decides the same and returns
    /// the view it judged (one word) with its reading, in two registers; the
    /// decision is built inline on either path, so a caller that reads only whether
    /// the request was admitted has nothing else computed.
    #[inline(always)]
    fn acquire<C: Clock + ?Sized>(&self, state: &SlidingWindowState, n: u64, clock: &C) -> Decision {
        let f = &self.frame;
        // The clock first: a clock that may call into the system then finds nothing
        // loaded to keep across the call. A word that moved on since the reading is
        // judged at the reading: as strict as at a later one or stricter.
        let now = clock.now();
        // Ordering: Relaxed; the word is the whole state and publishes no other memory.
        // Every read-modify-write of it is ordered by its modification order alone.
        let word = state.word.load(Ordering::Relaxed);
        let Some(rel) = f.rel_unclamped(now) else {
            return self.slow_decision(state, word, n, now, clock);
        };
        let stored = self.window_of(word);
        let prev = word.wrapping_shr(self.count_bits) & self.mask;
        let curr = word & self.mask;
        // `stored × period` fits for every live word; a retired one goes slow.
        let start = stored.wrapping_mul(f.period);
        if rel < start || word == RETIRED {
            return self.slow_decision(state, word, n, now, clock); // a lagging reading, or retired
        }
        let elapsed = rel - start;
        if (elapsed < f.period) & (curr + n > f.limit) {
            // Denied in the stored window by its own count alone (a limiter under
            // sustained overload): nothing to write, and no more to work out.
            let view = View { window: stored, elapsed, prev, curr };
            return self.denial(&view, n, now).at(now);
        }
        // How many windows on the reading is (0, 1 or 2) and how far into that one,
        // and the counts as seen from there, without a branch: a limiter checked
        // about once a window goes one way or the other unpredictably, and a missed
        // branch would cost more than the arithmetic.
        let one = u64::from(elapsed >= f.period);
        let into = elapsed - (f.period & one.wrapping_neg());
        let two = u64::from(into >= f.period) & one;
        let into = into - (f.period & two.wrapping_neg());
        let view = if into < f.period {
            let same = (one ^ 1).wrapping_neg(); // all ones when in the stored window
            let next = (one & !two).wrapping_neg(); // all ones when in the next one
            View { window: stored + one + two, elapsed: into, prev: (prev & same) | (curr & next), curr: curr & same }
        } else {
            // Three or more windows on (a client back after an idle spell): both
            // counts have expired.
            let (window, elapsed) = f.window_of(rel);
            View { window, elapsed, prev: 0, curr: 0 }
        };
        if !frame::fits(f.limit, f.period, view.prev, view.curr, view.elapsed, n) {
            if view.window == stored {
                return self.denial(&view, n, now).at(now); // nothing to write
            }
            return self.slow_decision(state, word, n, now, clock); // records the rollover
        }
        let new = self.pack(view.window, view.prev, view.curr + n);
        // Ordering: Relaxed on success and failure; see the load above. The CAS
        // admits only if the word (window and both counts) is unchanged since it was
        // read; a rollover is this same CAS writing the rolled counts.
        match state.word.compare_exchange(word, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => Decision::allowed(self.snapshot_of(&view, view.curr + n, now)).at(now),
            Err(found) => self.slow_decision(state, found, n, now, clock),
        }
    }

    /// The denial of `n` seen as `view` at `now`: the first instant it fits, and the
    /// state.
    #[inline(always)]
    fn denial(&self, view: &View, n: u64, now: Nanos) -> Decision {
        let f = &self.frame;
        let wait = frame::sliding_wait(f.limit, f.period, view.prev, view.curr, n);
        let retry = f.delay(f.start(view.window).saturating_add(wait), now);
        Decision::denied(self.snapshot_of(view, view.curr, now), retry)
    }

    /// The decision of [`acquire_slow`](Self::acquire_slow)'s outcome: the view it
    /// judged (a state word: the window and both counts before the request) at its
    /// reading; admitted iff `n` fits it, which is what the slow path decided.
    #[inline(always)]
    fn slow_decision<C: Clock + ?Sized>(
        &self,
        state: &SlidingWindowState,
        word: u64,
        n: u64,
        reading: Nanos,
        clock: &C,
    ) -> Decision {
        let f = &self.frame;
        let (judged, now) = self.acquire_slow(state, word, n, reading, clock);
        let rel = f.rel(now);
        let window = self.window_of(judged);
        let (_, elapsed) = frame::position(f, window, rel);
        let view =
            View { window, elapsed, prev: judged.wrapping_shr(self.count_bits) & self.mask, curr: judged & self.mask };
        let at = f.stamp(window, rel, now);
        if frame::fits(f.limit, f.period, view.prev, view.curr, view.elapsed, n) {
            Decision::allowed(self.snapshot_of(&view, view.curr + n, now)).at(at)
        } else {
            self.denial(&view, n, now).at(at)
        }
    }

    /// [`acquire`](Self::acquire) in a loop, for every case, from `word` (what the
    /// inline path read, or what its failed CAS found), at the inline path's
    /// reading: records a rollover on denial, retries a lost race at once at that
    /// reading ([`Contention::Fair`]) or after a short backoff at a fresh one
    /// ([`Contention::Greedy`]).
    /// Returns the view judged, packed as a state word, and its reading.
    #[cold]
    #[inline(never)]
    fn acquire_slow<C: Clock + ?Sized>(
        &self,
        state: &SlidingWindowState,
        mut word: u64,
        n: u64,
        reading: Nanos,
        clock: &C,
    ) -> (u64, Nanos) {
        let f = &self.frame;
        let mut backoff = Backoff::retrying(self.contention);
        let mut raced = false;
        loop {
            if raced {
                backoff.spin();
            }
            // The inline path's reading first, and on every retry under
            // `Contention::Fair` (a retry as short as the race it lost: the threads
            // take turns); a fresh one for each retry under `Contention::Greedy`.
            let now = if raced && self.contention == Contention::Greedy { clock.now() } else { reading };
            raced = true;
            let view = self.view(word, f.rel(now));
            let judged = self.pack(view.window, view.prev, view.curr);
            if !frame::fits(f.limit, f.period, view.prev, view.curr, view.elapsed, n) {
                if view.window != self.window_of(word) {
                    // Denied in a later window than the stored one: record the rollover
                    // (the same counts, re-encoded; once per window at most), so that a
                    // reading stepping back to the stored window is not decided there.
                    // Ordering: Relaxed; see `acquire`.
                    if let Err(actual) =
                        state.word.compare_exchange_weak(word, judged, Ordering::Relaxed, Ordering::Relaxed)
                    {
                        word = actual;
                        continue;
                    }
                }
                // Denied: no count is written.
                return (judged, now);
            }
            // Ordering: Relaxed on success and failure; see `acquire`.
            match state.word.compare_exchange_weak(word, judged + n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return (judged, now),
                Err(actual) => word = actual,
            }
        }
    }
}

impl Algorithm for SlidingWindowAlgorithm {
    type State = SlidingWindowState;

    #[inline]
    fn limit(&self) -> u64 {
        self.frame.limit
    }

    fn new_state(&self) -> SlidingWindowState {
        SlidingWindowState::new()
    }

    #[inline]
    fn check_n<C: Clock + ?Sized>(
        &self,
        state: &SlidingWindowState,
        n: u64,
        clock: &C,
    ) -> Result<Decision, InsufficientCapacity> {
        if n > self.frame.limit {
            return Err(InsufficientCapacity { requested: n, capacity: self.frame.limit });
        }
        if n == 0 {
            let now = clock.now();
            // Took nothing: a refund against it gives nothing back.
            return Ok(Decision::allowed(self.snapshot(state, now)).at(now).zero_cost());
        }
        Ok(self.acquire(state, n, clock))
    }

    #[inline(always)] // the whole fast path, into the caller
    fn check<C: Clock + ?Sized>(&self, state: &SlidingWindowState, clock: &C) -> Decision {
        self.acquire(state, 1, clock) // 1 ≤ limit, always
    }

    /// Takes `n` off the count the admission was counted in, as seen at the clock's
    /// reading: the current count if the admission's window is the current one, the
    /// previous count if it is the previous one, nothing if it is older. One CAS,
    /// which also records a rollover, as an admission's does.
    fn refund<C: Clock + ?Sized>(
        &self,
        state: &SlidingWindowState,
        n: u64,
        admission: &Decision,
        clock: &C,
    ) -> Result<(), InsufficientCapacity> {
        let f = &self.frame;
        if n > f.limit {
            return Err(InsufficientCapacity { requested: n, capacity: f.limit });
        }
        if n == 0 || admission.is_denied() || admission.is_zero_cost() {
            return Ok(()); // nothing taken, nothing to give back
        }
        let counted_in = f.window_at(admission.decided_at());
        // Ordering: Relaxed; see `acquire`.
        let mut word = state.word.load(Ordering::Relaxed);
        loop {
            if word == RETIRED {
                return Ok(()); // retired while idle: nothing to give back
            }
            // Read after the word, as in `acquire`.
            let view = self.view(word, f.rel(clock.now()));
            let (prev, curr) = match view.window.checked_sub(counted_in) {
                Some(0) => (view.prev, view.curr - n.min(view.curr)),
                Some(1) => (view.prev - n.min(view.prev), view.curr),
                _ => return Ok(()), // no longer weighs on any estimate
            };
            if (prev, curr) == (view.prev, view.curr) {
                return Ok(()); // nothing counted there
            }
            // Ordering: Relaxed on success and failure; see `acquire`. Lands only if
            // the word (window and both counts) is unchanged since it was read.
            match state.word.compare_exchange_weak(
                word,
                self.pack(view.window, prev, curr),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => word = actual,
            }
        }
    }

    fn snapshot(&self, state: &SlidingWindowState, now: Nanos) -> Snapshot {
        // Ordering: Relaxed; see `acquire`.
        let view = self.view(state.word.load(Ordering::Relaxed), self.frame.rel(now));
        self.snapshot_of(&view, view.curr, now)
    }

    fn is_idle(&self, state: &SlidingWindowState, now: Nanos) -> bool {
        // Ordering: Relaxed; see `acquire`.
        self.idle_word(state.word.load(Ordering::Relaxed), now)
    }
}

impl SlidingWindowAlgorithm {
    /// Whether the state word `word` counts nothing at `now`.
    fn idle_word(&self, word: u64, now: Nanos) -> bool {
        let view = self.view(word, self.frame.rel(now));
        view.prev == 0 && view.curr == 0
    }
}

/// The word of a retired state ([`Retire`]): the last window with both counts full,
/// which every later reading is decided in (a "future" window) and denied.
const RETIRED: u64 = u64::MAX;

impl Retire for SlidingWindowAlgorithm {
    fn try_retire(&self, state: &SlidingWindowState, now: Nanos) -> bool {
        // As for the fixed window: one CAS to RETIRED while the word is idle.
        weir_rl_core::__private::sync::replace_if(&state.word, RETIRED, |word| self.idle_word(word, now))
    }

    fn is_retired(&self, state: &SlidingWindowState) -> bool {
        // Ordering: Relaxed; see `try_retire`.
        state.word.load(Ordering::Relaxed) == RETIRED
    }
}

weir_rl_core::__private::single_limiter! {
    /// A sliding window counter: the previous window's count, weighted by its
    /// overlap with the last window-length, plus the current window's, in one
    /// atomic word.
    ///
    /// See the [module docs](crate::sliding) for the algorithm, its accuracy and
    /// guarantees. Share it by reference (`&SlidingWindow`, `Arc<SlidingWindow>`).
    ///
    /// ```
    /// use weir_rl_core::Quota;
    /// use weir_window::SlidingWindow;
    ///
    /// let limiter = SlidingWindow::new(Quota::per_minute(600)?)?;
    /// assert!(limiter.check().is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub struct SlidingWindow { algorithm: SlidingWindowAlgorithm, state: SlidingWindowState }
}

window_limiter_constructors!(SlidingWindow, SlidingWindowBuilder, SlidingWindowAlgorithm, SlidingWindowState);
