//! The striped sliding window counter: one hot limit shared by many cores.
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
//! but without every core writing one shared word: on a hot limiter that word's
//! cache line would move between cores on every admission, and throughput would
//! fall as cores are added (BENCHMARKS.md measures one shared `fetch_add` against a
//! per-thread counter).
//!
//! # The construction: budget leases
//!
//! Capacity is handed out in **leases**. The window's count lives in a global
//! word, `granted`: requests admitted *plus* capacity leased to stripes and not yet
//! used. Each stripe (a [`CachePadded`] word, one per core or thread) holds a lease
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
//! This is the kernel's idea turned around. Linux's `__percpu_counter_limited_add`
//! (`lib/percpu_counter.c`, added for tmpfs block accounting) lets each CPU add to
//! its local count while `global + cpus × batch ≤ limit`, and sums every CPU's
//! count under a lock near the limit. That fast path reads the shared global count
//! on every call and relies on interrupts being off between the check and the add.
//! Threads in user space can be preempted anywhere and several may share a stripe,
//! so here the check is done once per lease, when capacity is *reserved*: the fast
//! path needs no shared read at all, and exactness follows from accounting
//! (admitted ≤ granted ≤ limit) rather than from bounding what other stripes might
//! hold.
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
//! rollover itself, so no thread waits on another. (An earlier design kept one word
//! per window parity; loom found two windows open at once when a rollover by two
//! windows raced with one by one window.)
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
//! explicit stripe (a core id from your executor, say). The stripe count is rounded
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
//! Window numbers count from the limiter's creation in the global words' high bits:
//! at least 2⁶⁰ emission intervals (36 years at a billion per second); a quota
//! whose numbers would not reach 2⁵⁸ ns (9.1 years) is
//! [`WindowError::LimitTooLarge`]. No panic on any input; a reading earlier than the
//! open window is decided at that window's start.
//!
//! # Example
//!
//! ```
//! use weir_core::{ManualClock, Quota};
//! use weir_window::{StripedBuilder, StripedMode};
//!
//! let limiter = StripedBuilder::new(Quota::per_second(10_000)?)
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

use crate::WindowError;
use crate::frame::{self, Frame};
use alloc::boxed::Box;
use core::fmt;
use weir_core::__private::sync::{AtomicU64, Backoff, CachePadded, Ordering, fence};
use weir_core::{Clock, Decision, InsufficientCapacity, Limiter, Nanos, Quota, Snapshot};

pub use weir_core::stripes::MAX_STRIPES;

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

/// The bit layout of the global words and the stripes' lease words:
/// `window << (c + 2) | closed << (c + 1) | drained << c | count`, `c` count bits.
/// `previous` and the lease words use the window and count fields only.
#[derive(Debug, Clone, Copy)]
struct Layout {
    count_bits: u32,
}

impl Layout {
    #[inline]
    fn count(self, word: u64) -> u64 {
        word & (u64::MAX >> (u64::BITS - self.count_bits))
    }
    #[inline]
    fn window(self, word: u64) -> u64 {
        word >> (self.count_bits + 2)
    }
    #[inline]
    fn closed(self, word: u64) -> bool {
        (word >> (self.count_bits + 1)) & 1 == 1
    }
    #[inline]
    fn drained(self, word: u64) -> bool {
        (word >> self.count_bits) & 1 == 1
    }
    #[inline]
    fn drained_bit(self) -> u64 {
        1 << self.count_bits
    }
    #[inline]
    fn closed_bit(self) -> u64 {
        1 << (self.count_bits + 1)
    }
    /// The word for `window` holding `count` (flags clear). `window` is at most the
    /// largest window number and `count` fits the count field (callers keep both).
    #[inline]
    fn pack(self, window: u64, count: u64) -> u64 {
        (window << (self.count_bits + 2)) | count
    }
}

/// One stripe: a lease and the capacity hint of its last grant, on a line of its own.
#[derive(Debug)]
struct Stripe {
    /// `window | count`: `count` tokens granted in `window` and not yet spent.
    lease: AtomicU64,
    /// The global capacity left (beyond every lease) when this stripe's last lease
    /// was granted: the estimate of `remaining` in fast-path decisions.
    hint: AtomicU64,
}

/// Tokens taken out of a stripe and not yet spent or returned.
#[derive(Debug, Clone, Copy)]
struct Tokens {
    window: u64,
    count: u64,
}

impl Tokens {
    const NONE: Tokens = Tokens { window: 0, count: 0 };
}

/// The two global words, on one cache line (they are read together).
#[derive(Debug)]
struct Global {
    /// `window | closed | drained | count`: the latest window. While open it is the
    /// only window that grants; closing it and opening the next are CASes on this
    /// one word, so two windows are never open at once.
    current: AtomicU64,
    /// `window | count`: a closed window's count, copied here after it is closed
    /// and before its successor opens (its window number only grows). The previous
    /// window's count when `window + 1` is the current window.
    previous: AtomicU64,
}

/// The global words as one check saw them.
#[derive(Debug, Clone, Copy)]
struct GlobalView {
    /// The current word.
    word: u64,
    /// Its window number.
    window: u64,
    /// Its count: admitted in the window plus leased out (plus held by checks
    /// between taking and returning a lease).
    count: u64,
    /// The previous window's count (0 if the other word holds an older window).
    prev: u64,
}

/// Everything but the clock.
struct Core {
    frame: Frame,
    layout: Layout,
    mode: StripedMode,
    batch: u64,
    /// `stripes.len() − 1`; the length is a power of two.
    mask: usize,
    /// The largest window number the layout holds.
    max_window: u64,
    global: CachePadded<Global>,
    stripes: Box<[CachePadded<Stripe>]>,
}

impl Core {
    fn new(builder: &StripedBuilder, now: Nanos) -> Result<Self, WindowError> {
        let (limit, period) = frame::limit_and_period(&builder.quota)?;
        let stripes = match builder.stripes {
            Some(0) => return Err(WindowError::ZeroStripes),
            Some(s) => weir_core::__private::checked_stripes(s)
                .ok_or(WindowError::TooManyStripes { stripes: s, max: MAX_STRIPES })?,
            None => default_stripes(),
        };
        let batch = match builder.batch {
            Some(0) => return Err(WindowError::ZeroBatch),
            Some(b) if b > limit => return Err(WindowError::BatchAboveLimit { batch: b, limit }),
            Some(b) => b,
            None => (limit / 1024).max(1),
        };
        // Counts reach limit + batch − 1 (approximate mode); window numbers start at 1
        // (0 is "before the first window") and take the 62 − c bits left.
        let max_window = |count_bits: u32| 62u32.checked_sub(count_bits).filter(|&w| w >= 1).map(|w| (1u64 << w) - 1);
        let count_bits = frame::bits(limit + batch); // limit ≤ 2^62, batch ≤ limit
        let too_large = || Frame::too_large(limit, period, batch, |b| max_window(b).map(|m| m - 1));
        let max = max_window(count_bits).ok_or_else(too_large)?;
        let frame = Frame::new(limit, period, now, builder.window_start, max - 1).ok_or_else(too_large)?;
        let layout = Layout { count_bits };
        let stripes: Box<[CachePadded<Stripe>]> = (0..stripes)
            .map(|_| CachePadded::new(Stripe { lease: AtomicU64::new(0), hint: AtomicU64::new(0) }))
            .collect();
        Ok(Self {
            frame,
            layout,
            mode: builder.mode,
            batch,
            mask: stripes.len() - 1,
            max_window: max,
            // Window 1 (the creation window) is open; window 0 stands for "before it".
            global: CachePadded::new(Global {
                current: AtomicU64::new(layout.pack(1, 0)),
                previous: AtomicU64::new(layout.pack(0, 0)),
            }),
            stripes,
        })
    }

    #[inline]
    fn stripe(&self, index: usize) -> &Stripe {
        // In bounds: `mask` is `stripes.len() − 1` and the length is a power of two.
        &self.stripes[index & self.mask]
    }

    /// The window number (from 1) and time into it of a relative time.
    #[inline]
    fn at(&self, rel: u64) -> (u64, u64) {
        let (window, elapsed) = self.frame.window_of(rel);
        (window + 1, elapsed)
    }

    /// The window (from 1) a relative time falls in and the time since its start,
    /// or `(window, 0)` if it is earlier than `window`: the same as `at(rel)` for
    /// readings in or after `window`, without a division when in it.
    #[inline]
    fn position(&self, window: u64, rel: u64) -> (u64, u64) {
        let (inside, elapsed) = frame::position(&self.frame, window.saturating_sub(1), rel);
        (inside + 1, elapsed)
    }

    /// The relative time at which window `window` (from 1) starts.
    #[inline]
    fn start(&self, window: u64) -> u64 {
        self.frame.start(window.saturating_sub(1))
    }

    /// Checks `1 ≤ n ≤ limit` on `stripe` at the reading `now`. The fast path (one
    /// attempt to spend from the stripe's lease) and the settled denial (two loads,
    /// see `settled_denial`) are inlined into the caller, so a caller that reads only
    /// allowed-or-denied does not compute the rest of the decision; a lost race on
    /// the stripe and the slow path are out of line.
    #[inline(always)]
    fn check(&self, stripe: usize, n: u64, now: Nanos) -> Decision {
        let stripe = self.stripe(stripe);
        let rel = self.frame.rel(now);
        // Ordering: Relaxed; a lease word is a number of tokens and publishes no other
        // memory. Tokens are conserved by the atomicity of each CAS on it alone.
        let lease = stripe.lease.load(Ordering::Relaxed);
        match self.spend(stripe, lease, n, rel, now) {
            Ok(decision) => decision,
            Err(None) => match self.settled_denial(lease, n, rel, now) {
                Some(decision) => decision,
                None => self.slow(stripe, n, rel, now),
            },
            Err(actual) => self.retry(stripe, lease, actual, n, rel, now),
        }
    }

    /// After a first attempt on the stripe: retries while the CAS loses to another
    /// thread sharing the stripe; once the lease cannot serve, denies at once if
    /// nothing needs writing (see `settled_denial`), else takes the slow path.
    #[inline(never)]
    fn retry(
        &self,
        stripe: &Stripe,
        mut lease: u64,
        mut actual: Option<u64>,
        n: u64,
        rel: u64,
        now: Nanos,
    ) -> Decision {
        let mut backoff = Backoff::new();
        while let Some(next) = actual {
            backoff.spin();
            lease = next;
            match self.spend(stripe, lease, n, rel, now) {
                Ok(decision) => return decision,
                Err(next) => actual = next,
            }
        }
        match self.settled_denial(lease, n, rel, now) {
            Some(decision) => decision,
            None => self.slow(stripe, n, rel, now),
        }
    }

    /// A denial decided from two loads, if the slow path would deny without writing
    /// anything: the open window is the reading's (or later), the stripe's lease
    /// holds nothing of it, the request does not fit, and (exact mode) no stripe
    /// holds a lease of it either (`drained`: every lease was reclaimed, and none
    /// installed since). The denied path under sustained overload.
    #[inline(always)]
    fn settled_denial(&self, lease: u64, n: u64, rel: u64, now: Nanos) -> Option<Decision> {
        let l = self.layout;
        let view = self.read_global()?;
        let (reading_window, elapsed) = self.position(view.window, rel);
        let settled = !l.closed(view.word)
            && reading_window == view.window
            && (l.count(lease) == 0 || l.window(lease) != view.window)
            && (self.mode == StripedMode::Approximate || l.drained(view.word))
            && !frame::fits(self.frame.limit, self.frame.period, view.prev, view.count, elapsed, n);
        settled.then(|| self.denial(&view, view.count, elapsed, n, rel, now))
    }

    /// The denial of `n` in the view's window with `used` counted, `elapsed` into it.
    /// Always inlined: the decision is then built where it is returned (returned
    /// through one more call, its copy stalled on store forwarding and cost more than
    /// the rest of the denied path; measured with `perf`).
    #[inline(always)]
    fn denial(&self, view: &GlobalView, used: u64, elapsed: u64, n: u64, rel: u64, now: Nanos) -> Decision {
        let f = &self.frame;
        let wait = frame::sliding_wait(f.limit, f.period, view.prev, used, n);
        let start = self.start(view.window);
        let reset = match frame::sliding_reset(f.period, view.prev, used) {
            Some(after) => f.delay(start.saturating_add(after), now),
            None => 0,
        };
        let snapshot = frame::sliding_snapshot(f.limit, f.period, view.prev, used, elapsed, reset);
        Decision::denied(snapshot, f.delay(start.saturating_add(wait), now)).at(self.stamp(view.window, rel, now))
    }

    /// What a decision in `window` (from 1) at the reading `now` is stamped with:
    /// see [`Frame::stamp`].
    #[inline(always)]
    fn stamp(&self, window: u64, rel: u64, now: Nanos) -> Nanos {
        self.frame.stamp(window.saturating_sub(1), rel, now)
    }

    /// Spends `n` from the lease word `lease` if it holds `n` and belongs to the
    /// reading's window (or a later one: a reading stepping back is no time
    /// passing). `Err(None)`: it cannot serve; `Err(Some(word))`: the CAS lost.
    #[inline(always)]
    fn spend(&self, stripe: &Stripe, lease: u64, n: u64, rel: u64, now: Nanos) -> Result<Decision, Option<u64>> {
        let (window, tokens) = (self.layout.window(lease), self.layout.count(lease));
        let start = self.start(window);
        if tokens < n || (rel >= start && rel - start >= self.frame.period) {
            return Err(None);
        }
        // Ordering: Relaxed; see `check`. The CAS spends tokens only if nobody spent,
        // reclaimed or replaced the lease since it was read.
        match stripe.lease.compare_exchange_weak(lease, lease - n, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                // Ordering: Relaxed; an estimate for the decision, published by nothing.
                let hint = stripe.hint.load(Ordering::Relaxed);
                let reset = self.frame.delay(start.saturating_add(self.frame.period.saturating_mul(2)), now);
                let at = if rel >= start { now } else { self.frame.reading_at(start) }; // see `stamp`
                Ok(Decision::allowed(Snapshot::new(self.frame.limit, (tokens - n).saturating_add(hint), reset)).at(at))
            }
            Err(actual) => Err(Some(actual)),
        }
    }

    /// The slow path: take back the stripe's lease, then grant from the open window
    /// (rolling over first if the reading is past it), reclaiming every stripe's
    /// lease before denying in exact mode.
    #[inline(never)]
    fn slow(&self, stripe: &Stripe, n: u64, rel: u64, now: Nanos) -> Decision {
        let (l, f) = (self.layout, &self.frame);
        let mut pocket = Tokens::NONE;
        let mut backoff = Backoff::new();
        // Take the stripe's lease: it cannot serve this request, and its tokens are
        // either folded into the grant below or returned to their window.
        // Ordering: Relaxed; see `check`.
        let mut lease = stripe.lease.load(Ordering::Relaxed);
        while l.count(lease) > 0 {
            match self.spend(stripe, lease, n, rel, now) {
                Ok(decision) => return decision, // refilled by a thread sharing the stripe
                Err(Some(actual)) => lease = actual,
                Err(None) => {
                    // Ordering: Relaxed; see `check`.
                    match stripe.lease.compare_exchange(
                        lease,
                        l.pack(l.window(lease), 0),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => pocket = Tokens { window: l.window(lease), count: l.count(lease) },
                        Err(actual) => lease = actual,
                    }
                    if pocket.count > 0 {
                        break;
                    }
                }
            }
        }
        loop {
            let Some(view) = self.read_global() else {
                backoff.spin();
                continue;
            };
            let window = view.window;
            // The reading's window and the time into it, found from the open window's
            // start with a multiply (a division only when the reading is past it).
            let (reading_window, reading_elapsed) = self.position(window, rel);
            if l.closed(view.word) || reading_window > window {
                let target = reading_window.max(window + 1).min(self.max_window);
                if target <= window {
                    // Only past the horizon (the last window never closes): fail closed.
                    self.give_back(pocket);
                    return Decision::denied(self.snapshot_at(now), 0).at(now);
                }
                self.advance(&view, target);
                continue;
            }
            let elapsed = if reading_window == window { reading_elapsed } else { 0 };
            if pocket.count > 0 && pocket.window != window {
                self.give_back(pocket);
                pocket = Tokens::NONE;
            }
            let used = view.count.saturating_sub(pocket.count);
            if frame::fits(f.limit, f.period, view.prev, used, elapsed, n) {
                let available = self.available(view.prev, used, elapsed);
                let grant = match self.mode {
                    StripedMode::Exact => n.max(self.batch.min(available)),
                    StripedMode::Approximate => n.max(self.batch),
                };
                // Ordering: AcqRel/Acquire like every RMW of the window words, so that
                // they all belong to the release sequence of the CAS that opened the
                // window (see `read_global`). This CAS grants only if nothing changed
                // since the view was read: the window is still open and its count and
                // the previous window's (read after it) are what the grant assumed.
                if self
                    .global
                    .current
                    .compare_exchange(view.word, l.pack(window, used + grant), Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    backoff.spin();
                    continue;
                }
                let leased = grant - n;
                let hint = available.saturating_sub(grant);
                if leased > 0 {
                    self.install(stripe, window, leased);
                }
                // Ordering: Relaxed; an estimate, published by nothing.
                stripe.hint.store(hint, Ordering::Relaxed);
                let reset = f.delay(self.start(window).saturating_add(f.period.saturating_mul(2)), now);
                let snapshot = Snapshot::new(f.limit, leased.saturating_add(hint), reset);
                return Decision::allowed(snapshot).at(self.stamp(window, rel, now));
            }
            if pocket.count > 0 {
                // Not enough even with the stripe's leftover: return it before looking
                // further (or denying), so the count is what was really taken.
                let returned = view.word - l.count(view.word) + used; // flags kept
                // Ordering: AcqRel/Acquire; see the grant above.
                if self
                    .global
                    .current
                    .compare_exchange(view.word, returned, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    pocket = Tokens::NONE;
                }
                continue;
            }
            if self.mode == StripedMode::Exact && !l.drained(view.word) {
                // Reclaim before denying: set `drained` first, then take every
                // stripe's lease. A lease that lands on a stripe after the pass read it
                // was granted before the flag and is installed after it; its
                // installer sees the flag and clears it (`install`), so the flag is
                // never left set over a lease once both checks have finished.
                // Ordering: AcqRel/Acquire; see the grant above.
                if self
                    .global
                    .current
                    .compare_exchange(view.word, view.word | l.drained_bit(), Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    backoff.spin();
                    continue;
                }
                // Ordering: SeqCst fence, between setting the flag and reading the
                // stripes; pairs with the SeqCst fence in `install`, between putting a
                // lease on a stripe and reading the flag. Whichever fence comes first
                // in their single total order, the other side's read sees the first
                // side's write: this pass finds the lease, or the installer finds the
                // flag. (Without the fences each read could miss the other's write.)
                fence(Ordering::SeqCst);
                let taken = self.sweep(window, true);
                if taken > 0 {
                    // Granted (the grant clears the flag) or returned (the flag stays:
                    // every stripe's lease was taken or is its installer's to report).
                    pocket = Tokens { window, count: taken };
                }
                continue;
            }
            // Denied, writing nothing. In exact mode every stripe's lease has been
            // reclaimed (the `drained` flag; a lease installed since clears it), so
            // once racing checks have finished, `used` is what was admitted and the
            // wait is exact.
            return self.denial(&view, used, elapsed, n, rel, now);
        }
    }

    /// How many requests fit: `limit − used − ⌈prev·(P − elapsed)/P⌉`, at least 0.
    #[inline]
    fn available(&self, prev: u64, used: u64, elapsed: u64) -> u64 {
        let period = self.frame.period;
        let weighted = u128::from(prev) * u128::from(period.saturating_sub(elapsed));
        // ⌈weighted / P⌉ ≤ prev, which fits a u64.
        let weighted = frame::div_u128(weighted + u128::from(period - 1), period);
        self.frame.limit.saturating_sub(used).saturating_sub(weighted)
    }

    /// The global words: the current window's word and the previous window's
    /// count. `None` if a rollover moved them between the two reads (read again).
    ///
    /// Why the previous count can be trusted: a window's count is copied to
    /// `previous` after the window is closed (nothing lands in a closed word;
    /// returns go to the copy, and only lower it) and before its successor is opened
    /// by a Release CAS on `current`. `current` is read first, with Acquire, and
    /// `previous` after it, so a check that sees window `w` open reads `w − 1`'s
    /// count as copied, or lower: an upper bound of what was admitted in it. A grant
    /// CASes `current`, so it lands only if `w` is still open.
    fn read_global(&self) -> Option<GlobalView> {
        let l = self.layout;
        // Ordering: Acquire; see above.
        let word = self.global.current.load(Ordering::Acquire);
        // Ordering: Acquire, and read after `current`; see above.
        let previous = self.global.previous.load(Ordering::Acquire);
        let window = l.window(word);
        if !l.closed(word) && l.window(previous) >= window {
            return None; // `current` moved on after it was read
        }
        let prev = if l.window(previous) + 1 == window { l.count(previous) } else { 0 };
        Some(GlobalView { word, window, count: l.count(word), prev })
    }

    /// Moves the limiter from the view's window to `target` (later): closes the
    /// current window, copies its count to `previous`, opens `target` in its place,
    /// and returns the leases of earlier windows. Any step may lose a race to
    /// another thread doing the same (each is a CAS that another may have made); the
    /// caller reads again.
    fn advance(&self, view: &GlobalView, target: u64) {
        let l = self.layout;
        let mut word = view.word;
        if !l.closed(word) {
            let closed = word | l.closed_bit();
            // Ordering: AcqRel; its Release half orders the close before this thread's
            // opening CAS below (and, through it, before any check that Acquires the
            // new window). See `read_global`.
            if self.global.current.compare_exchange(word, closed, Ordering::AcqRel, Ordering::Acquire).is_err() {
                return;
            }
            word = closed;
        }
        self.copy_closed(word);
        // Ordering: AcqRel; Release publishes the close and the copy to every check
        // that Acquires the new window; Acquire reads the word it replaces. It fails
        // only if another thread opened a window first (a closed word never changes).
        if self.global.current.compare_exchange(word, l.pack(target, 0), Ordering::AcqRel, Ordering::Acquire).is_ok() {
            // Every lease of an earlier window back to its window: exact previous
            // counts for the new window, and no lease of a finished window left for a
            // check whose reading lags (see the module docs).
            self.sweep(target, false);
        }
    }

    /// Copies the closed window `word`'s count to `previous`, unless `previous` holds
    /// that window or a later one already (a slower thread must not bring an older
    /// window back). A closed word never changes (nothing is granted in it and
    /// nothing returned to it: see `give_back`), so every copy of a window is the same.
    fn copy_closed(&self, word: u64) {
        let l = self.layout;
        let window = l.window(word);
        // Ordering: Acquire; pairs with the Release half of another copy's CAS.
        let mut previous = self.global.previous.load(Ordering::Acquire);
        while l.window(previous) < window {
            // Ordering: AcqRel; the Release half publishes the copy to whoever
            // Acquires it before opening (sequenced before the opening CAS in
            // `advance`).
            match self.global.previous.compare_exchange_weak(
                previous,
                l.pack(window, l.count(word)),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => previous = actual,
            }
        }
    }

    /// Returns tokens taken from a lease to the window they were granted in: to
    /// `previous` if it holds that window's count, to `current` if that window is
    /// open there, and nowhere if `previous` holds a later window (the tokens' window
    /// no longer weighs on any estimate).
    ///
    /// Never to a closed `current`: its count is copied to `previous` (perhaps
    /// already, from the closed word as it was), and a return landing after that
    /// copy would be lost to it, overstating the count that weighs on the whole next
    /// window. A return that finds its window closed makes the copy itself (as
    /// `advance` does) and returns to `previous`.
    fn give_back(&self, tokens: Tokens) {
        if tokens.count == 0 {
            return;
        }
        let l = self.layout;
        let mut backoff = Backoff::new();
        loop {
            // Ordering: Acquire; see `read_global`.
            let previous = self.global.previous.load(Ordering::Acquire);
            let (word, value) = match l.window(previous).cmp(&tokens.window) {
                core::cmp::Ordering::Greater => return,
                core::cmp::Ordering::Equal => (&self.global.previous, previous),
                core::cmp::Ordering::Less => {
                    // Ordering: Acquire; see `read_global`.
                    let current = self.global.current.load(Ordering::Acquire);
                    match l.window(current).cmp(&tokens.window) {
                        // Not reached: tokens are granted in the current window, and
                        // window numbers only grow.
                        core::cmp::Ordering::Less => return,
                        // Moved on since `previous` was read: the tokens' window was
                        // copied there before the next one opened, and this load,
                        // through the opening CAS's Release, makes the copy visible.
                        core::cmp::Ordering::Greater => continue,
                        core::cmp::Ordering::Equal if l.closed(current) => {
                            self.copy_closed(current);
                            continue;
                        }
                        core::cmp::Ordering::Equal => (&self.global.current, current),
                    }
                }
            };
            let returned = value - tokens.count.min(l.count(value));
            // Ordering: AcqRel/Acquire, like every RMW of the global words, so they
            // all continue the release sequence of the CAS that opened the window.
            if word.compare_exchange(value, returned, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return;
            }
            backoff.spin();
        }
    }

    /// Puts a lease of `tokens` for `window` on the stripe, unless the stripe holds
    /// one already (a thread sharing it was faster): then the tokens go back.
    ///
    /// The lease was granted before it lands here, so a reclaiming pass in between
    /// (exact mode) may have missed it and set `drained`: once the lease is on the
    /// stripe, this clears the flag if it is set, so that the next denial reclaims.
    fn install(&self, stripe: &Stripe, window: u64, tokens: u64) {
        let l = self.layout;
        // Ordering: Relaxed; see `check`.
        let mut lease = stripe.lease.load(Ordering::Relaxed);
        loop {
            if l.count(lease) != 0 {
                self.give_back(Tokens { window, count: tokens });
                return;
            }
            // Ordering: Relaxed; see `check`.
            match stripe.lease.compare_exchange_weak(
                lease,
                l.pack(window, tokens),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => lease = actual,
            }
        }
        if self.mode == StripedMode::Approximate {
            return; // no reclaiming, no flag
        }
        // Ordering: SeqCst fence, between the lease landing and the flag being read;
        // pairs with the fence in `slow` between setting `drained` and the pass.
        fence(Ordering::SeqCst);
        // Ordering: Relaxed; the fence above orders it after the lease, and only the
        // flag is read (a grant or return changing the count is one more retry).
        let mut word = self.global.current.load(Ordering::Relaxed);
        // A closed window grants no more and its successor opens with the flag clear;
        // a pass that sets it there reads the stripes after this thread's fence.
        while l.drained(word) && !l.closed(word) {
            // Ordering: AcqRel/Acquire; see the grant in `slow`.
            match self.global.current.compare_exchange_weak(
                word,
                word & !l.drained_bit(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => word = actual,
            }
        }
    }

    /// Takes every stripe's lease of a window before `window` (returning it to its
    /// window), and of `window` itself if `current` (adding it up for the caller).
    fn sweep(&self, window: u64, current: bool) -> u64 {
        let l = self.layout;
        let mut taken = 0u64;
        for stripe in self.stripes.iter() {
            // Ordering: Relaxed; see `check`.
            let mut lease = stripe.lease.load(Ordering::Relaxed);
            loop {
                let (leased, tokens) = (l.window(lease), l.count(lease));
                if tokens == 0 || leased > window || (leased == window && !current) {
                    break;
                }
                // Ordering: Relaxed; see `check`.
                match stripe.lease.compare_exchange_weak(lease, l.pack(leased, 0), Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        if leased == window {
                            taken = taken.saturating_add(tokens);
                        } else {
                            self.give_back(Tokens { window: leased, count: tokens });
                        }
                        break;
                    }
                    Err(actual) => lease = actual,
                }
            }
        }
        taken
    }

    /// Gives back `n` tokens that an admission stamped `at` spent: to the window it
    /// was counted in, where that window's count is kept (`current` while it is
    /// open, `previous` once closed), and nowhere once it is older than the previous
    /// window (see `give_back`).
    fn refund(&self, n: u64, at: Nanos) {
        let window = self.frame.window_at(at).saturating_add(1);
        self.give_back(Tokens { window, count: n });
    }

    /// The state at `now`: the global words less every stripe's unused lease.
    fn snapshot_at(&self, now: Nanos) -> Snapshot {
        let (l, f) = (self.layout, &self.frame);
        let rel = f.rel(now);
        let (reading_window, reading_elapsed) = self.at(rel);
        let mut backoff = Backoff::new();
        let view = loop {
            match self.read_global() {
                Some(view) => break view,
                None => backoff.spin(),
            }
        };
        let (mut leased_now, mut leased_before) = (0u64, 0u64);
        for stripe in self.stripes.iter() {
            // Ordering: Relaxed; see `check` (a snapshot taken while checks run is a
            // best effort, exact when they are not running).
            let lease = stripe.lease.load(Ordering::Relaxed);
            if l.window(lease) == view.window {
                leased_now = leased_now.saturating_add(l.count(lease));
            } else if l.window(lease) + 1 == view.window {
                leased_before = leased_before.saturating_add(l.count(lease));
            }
        }
        let curr = view.count.saturating_sub(leased_now);
        let prev = view.prev.saturating_sub(leased_before);
        let (window, prev, curr, elapsed) = match reading_window.checked_sub(view.window) {
            None => (view.window, prev, curr, 0),
            Some(0) => (view.window, prev, curr, reading_elapsed),
            Some(1) => (reading_window, curr, 0, reading_elapsed),
            Some(_) => (reading_window, 0, 0, reading_elapsed),
        };
        let reset = match frame::sliding_reset(f.period, prev, curr) {
            Some(after) => f.delay(self.start(window).saturating_add(after), now),
            None => 0,
        };
        frame::sliding_snapshot(f.limit, f.period, prev, curr, elapsed, reset)
    }
}

use weir_core::__private::thread_stripe;
use weir_core::stripes::default_stripes;

/// Builds a [`StripedSlidingWindow`]: stripes, batch, mode and window alignment.
///
/// ```
/// use weir_core::{ManualClock, Quota};
/// use weir_window::{StripedBuilder, StripedMode};
///
/// let limiter = StripedBuilder::new(Quota::per_second(1_000_000)?)
///     .stripes(16)
///     .batch(1_000) // 0.1% of the limit
///     .mode(StripedMode::Approximate)
///     .build_with_clock(ManualClock::new())?;
/// assert_eq!((limiter.stripes(), limiter.batch()), (16, 1_000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StripedBuilder {
    quota: Quota,
    stripes: Option<usize>,
    batch: Option<u64>,
    mode: StripedMode,
    window_start: Nanos,
}

impl StripedBuilder {
    /// A builder for `quota` (`count` per `period`): exact mode, one stripe per
    /// available core (1 without `std`), batch `max(1, limit / 1024)`, windows
    /// starting at the clock's origin.
    pub fn new(quota: Quota) -> Self {
        Self { quota, stripes: None, batch: None, mode: StripedMode::Exact, window_start: Nanos::ZERO }
    }

    /// The number of stripes, rounded up to a power of two; 1 to [`MAX_STRIPES`].
    pub fn stripes(self, stripes: usize) -> Self {
        Self { stripes: Some(stripes), ..self }
    }

    /// The most capacity a stripe leases at once; 1 to the limit. Larger batches mean
    /// fewer writes to the shared line; in approximate mode the over-admission is
    /// below one batch.
    pub fn batch(self, batch: u64) -> Self {
        Self { batch: Some(batch), ..self }
    }

    /// Exact or approximate (see [`StripedMode`]).
    pub fn mode(self, mode: StripedMode) -> Self {
        Self { mode, ..self }
    }

    /// Windows start at the reading `window_start` and every period before and
    /// after it (default: the clock's origin).
    pub fn window_start(self, window_start: Nanos) -> Self {
        Self { window_start, ..self }
    }

    /// The limiter, reading time from `clock`.
    ///
    /// Errors: the quota's burst differs from its count; zero or too many stripes; a
    /// zero batch or one above the limit; a limit too large for the encoding.
    pub fn build_with_clock<C: Clock>(self, clock: C) -> Result<StripedSlidingWindow<C>, WindowError> {
        let core = Core::new(&self, clock.now())?;
        Ok(StripedSlidingWindow { core, clock })
    }

    /// The limiter, on the default [`MonotonicClock`](weir_core::MonotonicClock).
    #[cfg(feature = "std")]
    pub fn build(self) -> Result<StripedSlidingWindow<weir_core::MonotonicClock>, WindowError> {
        self.build_with_clock(weir_core::MonotonicClock::new())
    }
}

/// A sliding window counter striped across cores, for one hot limit checked
/// by many threads: an admission touches only the thread's own stripe.
///
/// See the [module docs](crate::striped) for the construction, the exact
/// mode's zero over-admission and the approximate mode's bound. Built with
/// [`StripedBuilder`] (or `StripedSlidingWindow::new` for the defaults, with `std`). Share it by
/// reference (`&StripedSlidingWindow`, `Arc<StripedSlidingWindow>`).
///
/// ```
/// use weir_core::Quota;
/// use weir_window::StripedSlidingWindow;
///
/// let limiter = StripedSlidingWindow::new(Quota::per_second(1_000_000)?)?;
/// assert!(limiter.check().is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct StripedSlidingWindow<C = weir_core::DefaultClock> {
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
impl StripedSlidingWindow<weir_core::MonotonicClock> {
    /// The defaults (exact mode, one stripe per core, batch `max(1, limit / 1024)`)
    /// on the default [`MonotonicClock`](weir_core::MonotonicClock).
    pub fn new(quota: Quota) -> Result<Self, WindowError> {
        StripedBuilder::new(quota).build()
    }

    /// A builder for `quota`; the same as [`StripedBuilder::new`].
    pub fn builder(quota: Quota) -> StripedBuilder {
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
    /// callers that know their core, and without `std`.
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
            return Ok(Decision::allowed(self.core.snapshot_at(now)).at(now));
        }
        Ok(self.core.check(stripe, n, now))
    }

    /// Gives back `n` tokens that `admission` (a decision of this limiter) spent and
    /// the caller did not use, to the window it was counted in: that window's count
    /// while it is the current or the previous window, nothing once it is older (it
    /// no longer weighs on any estimate), as a returned lease is. Nothing for a
    /// denial; `n` above the limit is an error.
    ///
    /// ```
    /// use weir_core::{ManualClock, Quota};
    /// use weir_window::StripedBuilder;
    ///
    /// let limiter = StripedBuilder::new(Quota::per_second(10)?).stripes(2).build_with_clock(ManualClock::new())?;
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
        if n > 0 && admission.is_allowed() {
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
