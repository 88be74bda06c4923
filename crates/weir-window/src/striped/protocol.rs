//! The striped window's protocol: leases spent on the fast path, granted,
//! reclaimed and returned on the slow path, and the rollover (see the module docs).

use super::StripedMode;
use super::builder::StripedBuilder;
use super::layout::{Global, GlobalView, Layout, Stripe, Tokens};
use crate::WindowError;
use crate::frame::{self, Frame};
use alloc::boxed::Box;
use weir_rl_core::__private::sync::{AtomicU64, Backoff, CachePadded, Ordering, fence};
use weir_rl_core::stripes::{MAX_STRIPES, default_stripes};
use weir_rl_core::{Decision, Nanos, Snapshot};

/// Everything but the clock.
pub(super) struct Core {
    pub(super) frame: Frame,
    pub(super) layout: Layout,
    pub(super) mode: StripedMode,
    pub(super) batch: u64,
    /// `stripes.len() − 1`; the length is a power of two.
    pub(super) mask: usize,
    /// The largest window number the layout holds.
    pub(super) max_window: u64,
    pub(super) global: CachePadded<Global>,
    pub(super) stripes: Box<[CachePadded<Stripe>]>,
}

impl Core {
    pub(super) fn new(builder: &StripedBuilder, now: Nanos) -> Result<Self, WindowError> {
        let (limit, period) = frame::limit_and_period(&builder.quota)?;
        let stripes = match builder.stripes {
            Some(0) => return Err(WindowError::ZeroStripes),
            Some(s) => weir_rl_core::__private::checked_stripes(s)
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
        let too_large = || Frame::too_large(limit, period, batch, |b| max_window(b).map(|m| m - 1));
        // A `Quota`'s limit may be anything up to u64::MAX: a sum that overflows
        // needs more count bits than a word has, and is refused like any count
        // field too wide for the window numbers.
        let count_bits = limit.checked_add(batch).map(frame::bits).ok_or_else(too_large)?;
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
    pub(super) fn check(&self, stripe: usize, n: u64, now: Nanos) -> Decision {
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
    pub(super) fn refund(&self, n: u64, at: Nanos) {
        let window = self.frame.window_at(at).saturating_add(1);
        self.give_back(Tokens { window, count: n });
    }

    /// The state at `now`: the global words less every stripe's unused lease.
    pub(super) fn snapshot_at(&self, now: Nanos) -> Snapshot {
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
