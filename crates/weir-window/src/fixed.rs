//! The fixed window counter: one atomic word per limiter.
//!
//! # The algorithm
//!
//! Time is cut into windows of the quota's period; each window admits up to `limit`
//! requests and the count starts again from zero when the next window begins. It is
//! the oldest and simplest rate limiter (it is what `INCR key; EXPIRE key period`
//! does in Redis), and the one whose weakness every write-up on window limiters
//! starts from.
//!
//! # The boundary burst
//!
//! A fixed window never admits more than `limit` *per window*, but a client can
//! spend one window's limit at its very end and the next window's at the very
//! start: up to **2 × limit in any interval shorter than a window**. With 100 per
//! minute, 100 requests at 12:00:55 and 100 more at 12:01:05 are all admitted, 200
//! in ten seconds (the worked example below, and a test). When that matters, use
//! [`SlidingWindow`](crate::SlidingWindow) (estimates the last full window) or
//! [`SlidingLog`](crate::SlidingLog) (exact, at a memory cost).
//!
//! # Encoding and guarantees
//!
//! The state is one `u64`: the window number in the high bits and the count in the
//! low `⌈log₂(limit + 1)⌉` bits. A window rollover is therefore the same single
//! compare-and-swap as an admission — the new window number and the new count are
//! written together — so there is no moment at which a new window shows an old
//! count or a reset races with an increment.
//!
//! - **Exact**: concurrent checks decide exactly as the sequential algorithm, in the
//!   order their compare-and-swaps land (linearizable; loom model
//!   `loom-tests/tests/window.rs`, proptest against a reference model).
//! - **Lock-free**: a check retries only when another check's CAS succeeded.
//! - **Allowed path**: one CAS on one word. **Denied path**: one load, nothing written.
//! - **Exact times**: a denial's `retry_after` is the start of the next window, to the
//!   nanosecond; `reset_after` is the same instant (or zero when nothing is counted).
//! - **Refunds** ([`FixedWindow::refund`]) take `n` off the admission's window's
//!   count while that window is still the current one, with one CAS; once the
//!   window has ended they give nothing (its count no longer matters).
//! - **No panic** on any input. A reading earlier than the window already counted in
//!   is treated as a reading in that window (no time passing). Window numbers count
//!   from the limiter's creation and last at least 2⁶³ emission intervals (18 years
//!   at the fastest quota weir accepts); after that the last window never ends and
//!   the limiter fails closed.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use weir_rl_core::{ManualClock, Nanos, Quota};
//! use weir_window::FixedWindow;
//!
//! let at = |h: u64, m: u64, s: u64| Nanos::new(((h * 60 + m) * 60 + s) * 1_000_000_000);
//! let clock = ManualClock::starting_at(at(12, 0, 0));
//! // Windows start at the clock's origin and every minute after: 12:00:00, 12:01:00, ...
//! let limiter = FixedWindow::with_clock(Quota::per_minute(100)?, clock.clone())?;
//!
//! clock.set(at(12, 0, 55));
//! assert!(limiter.check_n(100)?.is_allowed());
//! let denied = limiter.check();
//! assert_eq!(denied.retry_after(), Some(Duration::from_secs(5))); // 12:01:00
//!
//! clock.set(at(12, 1, 5));
//! assert!(limiter.check_n(100)?.is_allowed()); // 200 in ten seconds: the boundary burst
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::WindowError;
use crate::frame::{self, Frame};
use weir_rl_core::__private::sync::{AtomicU64, Backoff, CachePadded, Ordering};
use weir_rl_core::{Algorithm, Clock, Contention, Decision, InsufficientCapacity, Nanos, Quota, Retire, Snapshot};

/// Fixed-window parameters shared by any number of [`FixedWindowState`]s: the limit,
/// the window length and alignment, and the state's bit layout.
///
/// This is the [`Algorithm`] half, for per-key stores; most users want
/// [`FixedWindow`].
///
/// ```
/// use weir_rl_core::{Algorithm, Nanos, Quota};
/// use weir_window::FixedWindowAlgorithm;
///
/// let algorithm = FixedWindowAlgorithm::new(Quota::per_second(2)?, Nanos::ZERO)?;
/// let (alice, bob) = (algorithm.new_state(), algorithm.new_state());
/// let now = Nanos::new(5);
/// assert!(algorithm.check_n(&alice, 2, &now)?.is_allowed());
/// assert!(algorithm.check(&alice, &now).is_denied());
/// assert!(algorithm.check(&bob, &now).is_allowed());
/// assert!(algorithm.is_idle(&alice, Nanos::new(1_000_000_000)), "a new window");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FixedWindowAlgorithm {
    frame: Frame,
    /// Bits of the count field: the low bits of the state word (1 to 63).
    count_bits: u32,
    /// `2^count_bits − 1`: the count field.
    count_mask: u64,
    /// What a check does after losing a race (read on the retry path only).
    contention: Contention,
}

/// One fixed window's state: `window << count_bits | count`, where `window` is the
/// window number since the [`FixedWindowAlgorithm`]'s creation and `count` the
/// requests admitted in it. The initial value, 0, is window 0 with nothing counted.
#[derive(Debug, Default)]
pub struct FixedWindowState {
    word: AtomicU64,
}

impl FixedWindowState {
    /// An empty window.
    pub fn new() -> Self {
        Self { word: AtomicU64::new(0) }
    }
}

impl FixedWindowAlgorithm {
    /// Parameters for `quota` (`count` per `period`), created at the clock reading
    /// `now`, with windows starting at the clock's origin and every period after it.
    ///
    /// Errors: the quota's burst differs from its count.
    pub fn new(quota: Quota, now: Nanos) -> Result<Self, WindowError> {
        Self::aligned(quota, now, Nanos::ZERO)
    }

    /// Like [`new`](Self::new), with windows starting at the reading `window_start`
    /// and every period before and after it (pass `now` to start them at creation).
    pub fn aligned(quota: Quota, now: Nanos, window_start: Nanos) -> Result<Self, WindowError> {
        let (limit, period) = frame::limit_and_period(&quota)?;
        let max_window = |count_bits: u32| u64::MAX.checked_shr(count_bits);
        let count_bits = frame::bits(limit);
        max_window(count_bits)
            .and_then(|max| Frame::new(limit, period, now, window_start, max))
            .map(|frame| Self {
                frame,
                count_bits,
                count_mask: u64::MAX >> (u64::BITS - count_bits),
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

    /// The most requests admitted per window.
    pub fn limit(&self) -> u64 {
        self.frame.limit
    }

    /// The window length.
    pub fn window(&self) -> core::time::Duration {
        core::time::Duration::from_nanos(self.frame.period)
    }

    // `count_bits` is 1 to 63 (a limit of 2^63 or more leaves no window bits and is
    // refused), so plain shifts by it never overflow, and every window number a
    // reading reaches fits above it.

    #[inline]
    fn unpack(&self, word: u64) -> (u64, u64) {
        (word.wrapping_shr(self.count_bits), word & self.count_mask)
    }

    #[inline]
    fn pack(&self, window: u64, count: u64) -> u64 {
        window.wrapping_shl(self.count_bits) | count
    }

    /// The window a reading counts in and what that window holds, given the state
    /// word: the stored window if the reading is in it or earlier, else a fresh one.
    #[inline]
    fn effective(&self, word: u64, rel: u64) -> (u64, u64) {
        let (stored, count) = self.unpack(word);
        let (window, _) = frame::position(&self.frame, stored, rel);
        (window, if window == stored { count } else { 0 })
    }

    /// The snapshot of a window holding `count`, read at `now`.
    #[inline]
    fn snapshot_of(&self, window: u64, count: u64, now: Nanos) -> Snapshot {
        let f = &self.frame;
        let reset = if count == 0 { 0 } else { f.delay(f.start(window).saturating_add(f.period), now) };
        Snapshot::new(f.limit, f.limit.saturating_sub(count), reset)
    }

    /// The one admission routine: `n ≤ limit` is the caller's to check.
    ///
    /// Inlined into the caller: one clock read, one load and, when the reading is
    /// in the stored window or the next one, the decision and its one CAS, with no
    /// loop and no repacking (the new word is the old one plus `n`, or the next
    /// window's first `n`). A lost race, a reading out of the limiter's range or
    /// behind the stored window, and a jump of more than one window take the
    /// out-of-line [`acquire_slow`](Self::acquire_slow), which decides the same.
    /// Both paths yield the window and count the request was judged against (one
    /// word) and the reading: the decision is built from them once they join,
    /// inline, so a caller that reads only whether the request was admitted has
    /// nothing else computed (measured in BENCHMARKS.md, "The single check").
    #[inline(always)]
    fn acquire<C: Clock + ?Sized>(&self, state: &FixedWindowState, n: u64, clock: &C) -> Decision {
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
        let (stored, count) = self.unpack(word);
        // Time into the stored window; a reading before it wraps to a huge value.
        // (`stored × period` fits for every live word; a retired word is caught
        // below.)
        let elapsed = rel.wrapping_sub(stored.wrapping_mul(f.period));
        let (view, new) = if elapsed < f.period {
            if count + n > f.limit {
                // Denied in the stored window: nothing is written (count ≤ limit,
                // so no overflow; a retired word's count is the whole field).
                return self.decision(word, n, now);
            }
            (word, word + n) // count + n ≤ limit: no carry into the window number
        } else if elapsed - f.period < f.period && word != RETIRED {
            // The next window: its first n (any n ≤ limit fits an empty window).
            let next = (word | self.count_mask) + 1;
            (next, next + n)
        } else {
            return self.slow_decision(state, word, n, now, clock);
        };
        // Ordering: Relaxed on success and failure; see the load above. The CAS
        // admits only if nothing was admitted (and no rollover happened) since
        // `word` was read; a rollover is this same CAS writing a new window number.
        match state.word.compare_exchange(word, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => self.decision(view, n, now),
            Err(found) => self.slow_decision(state, found, n, now, clock),
        }
    }

    /// The decision of [`acquire_slow`](Self::acquire_slow)'s outcome.
    #[inline(always)]
    fn slow_decision<C: Clock + ?Sized>(
        &self,
        state: &FixedWindowState,
        word: u64,
        n: u64,
        reading: Nanos,
        clock: &C,
    ) -> Decision {
        let (view, now) = self.acquire_slow(state, word, n, reading, clock);
        self.decision(view, n, now)
    }

    /// The decision for `n` judged against `view` (a window and its count before
    /// the request, packed as a state word) at the reading `now`: admitted iff
    /// the count has room for `n`, which is what the admission paths decided.
    #[inline(always)]
    fn decision(&self, view: u64, n: u64, now: Nanos) -> Decision {
        let f = &self.frame;
        let (window, count) = self.unpack(view);
        let at = f.stamp(window, f.rel(now), now);
        if count + n <= f.limit {
            Decision::allowed(self.snapshot_of(window, count + n, now)).at(at)
        } else {
            // A fresh window admits any n ≤ limit, so the wait is exactly the time
            // to the next window's start.
            let end = f.start(window).saturating_add(f.period);
            Decision::denied(self.snapshot_of(window, count, now), f.delay(end, now)).at(at)
        }
    }

    /// [`acquire`](Self::acquire) in a loop, for every case: judges `word` (what the
    /// inline path read, or what its failed CAS found) at the inline path's reading,
    /// and retries a lost race at once at that reading ([`Contention::Fair`]) or
    /// after a short backoff at a fresh one ([`Contention::Greedy`]). Returns the view the request was
    /// judged against (see [`decision`](Self::decision)) and the reading it was
    /// judged at: two words, so that they come back in registers.
    #[cold]
    #[inline(never)]
    fn acquire_slow<C: Clock + ?Sized>(
        &self,
        state: &FixedWindowState,
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
            let (window, count) = self.effective(word, f.rel(now));
            let view = self.pack(window, count);
            if count + n > f.limit {
                return (view, now); // denied: nothing is written
            }
            // Ordering: Relaxed on success and failure; see `acquire`.
            match state.word.compare_exchange_weak(word, view + n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return (view, now),
                Err(actual) => word = actual,
            }
            raced = true;
        }
    }
}

impl Algorithm for FixedWindowAlgorithm {
    type State = FixedWindowState;

    #[inline]
    fn limit(&self) -> u64 {
        self.frame.limit
    }

    fn new_state(&self) -> FixedWindowState {
        FixedWindowState::new()
    }

    #[inline]
    fn check_n<C: Clock + ?Sized>(
        &self,
        state: &FixedWindowState,
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
    fn check<C: Clock + ?Sized>(&self, state: &FixedWindowState, clock: &C) -> Decision {
        self.acquire(state, 1, clock) // 1 ≤ limit, always
    }

    /// Takes `n` off the count of the admission's window if that window is still
    /// the current one at the clock's reading; otherwise nothing (a fixed window's
    /// past windows no longer matter). One CAS, like an admission.
    fn refund<C: Clock + ?Sized>(
        &self,
        state: &FixedWindowState,
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
            // Read after the word, as in `acquire`: a reading that lags the word's
            // window is in that window (no time passing).
            let (window, count) = self.effective(word, f.rel(clock.now()));
            if window != counted_in || count == 0 || word == RETIRED {
                return Ok(()); // a later window, or a retired (idle) state: nothing to give back
            }
            let new = self.pack(window, count - n.min(count));
            // Ordering: Relaxed on success and failure; see `acquire`. Lands only if
            // the word (window and count) is unchanged since it was read.
            match state.word.compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(actual) => word = actual,
            }
        }
    }

    fn snapshot(&self, state: &FixedWindowState, now: Nanos) -> Snapshot {
        // Ordering: Relaxed; see `acquire`.
        let (window, count) = self.effective(state.word.load(Ordering::Relaxed), self.frame.rel(now));
        self.snapshot_of(window, count, now)
    }

    fn is_idle(&self, state: &FixedWindowState, now: Nanos) -> bool {
        // Ordering: Relaxed; see `acquire`.
        let (window, count) = self.unpack(state.word.load(Ordering::Relaxed));
        count == 0 || self.frame.window_of(self.frame.rel(now)).0 > window
    }
}

/// The word of a retired state ([`Retire`]): the last window, full, which every later
/// reading is decided in (a "future" window) and denied.
const RETIRED: u64 = u64::MAX;

impl Retire for FixedWindowAlgorithm {
    fn try_retire(&self, state: &FixedWindowState, now: Nanos) -> bool {
        let window_now = self.frame.window_of(self.frame.rel(now)).0;
        // One CAS to RETIRED while the word is idle (see `replace_if`): an admission
        // that lands first changes the word and it is judged again; one that comes
        // after finds RETIRED and is denied.
        weir_rl_core::__private::sync::replace_if(&state.word, RETIRED, |word| {
            let (window, count) = self.unpack(word);
            count == 0 || window_now > window
        })
    }

    fn is_retired(&self, state: &FixedWindowState) -> bool {
        // Ordering: Relaxed; see `try_retire`.
        state.word.load(Ordering::Relaxed) == RETIRED
    }
}

weir_rl_core::__private::single_limiter! {
    /// A fixed window counter: at most `limit` requests per window, one atomic word.
    ///
    /// See the [module docs](crate::fixed) for the algorithm, its boundary burst
    /// and its guarantees. Share it between threads by reference (`&FixedWindow`,
    /// `Arc<FixedWindow>`); every method takes `&self`.
    ///
    /// ```
    /// use weir_rl_core::Quota;
    /// use weir_window::FixedWindow;
    ///
    /// let limiter = FixedWindow::new(Quota::per_second(100)?)?;
    /// let decision = limiter.check();
    /// assert!(decision.is_allowed());
    /// assert_eq!(decision.remaining(), 99);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub struct FixedWindow { algorithm: FixedWindowAlgorithm, state: FixedWindowState }
}

window_limiter_constructors!(FixedWindow, FixedWindowBuilder, FixedWindowAlgorithm, FixedWindowState;
    ///
    /// ```
    /// use weir_rl_core::{Clock, ManualClock, Nanos, Quota};
    /// use weir_window::FixedWindow;
    ///
    /// let clock = ManualClock::starting_at(Nanos::new(25_000_000_000)); // 25 s
    /// // Windows start when the limiter is made: [25 s, 85 s), [85 s, 145 s), ...
    /// let limiter = FixedWindow::builder(Quota::per_minute(1)?)
    ///     .window_start(clock.now())
    ///     .build_with_clock(clock.clone())?;
    /// assert!(limiter.check().is_allowed());
    /// assert_eq!(limiter.check().retry_after().unwrap().as_secs(), 60);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
);
