//! Window arithmetic shared by the crate's algorithms: which window a clock reading
//! falls in, how far a limiter's window numbers reach, and the sliding-window
//! estimate with its exact retry time.
//!
//! Time inside a limiter is "relative": nanoseconds since the start of the window
//! that contained the limiter's creation, after shifting readings so that windows
//! start where the user aligned them. Relative window `k` covers
//! `[k·P, (k+1)·P)`. Readings before the creation window count as its first
//! nanosecond; readings after the horizon count as the horizon's last nanosecond.

use crate::WindowError;
use core::num::NonZeroU64;
use core::time::Duration;
use weir_rl_core::{Nanos, Quota, Snapshot};

/// How long every limiter must run after its creation before its window numbers run
/// out: 2⁵⁸ ns, about 9.1 years, the span of weir's time arithmetic
/// (`weir_rl_core::__private::MAX_TOLERANCE_TICKS` is 2⁵⁸ ns in ticks).
pub(crate) const MIN_HORIZON_NS: u64 = 1 << 58;

/// Bits needed to write `value` (0 for 0).
#[inline]
pub(crate) const fn bits(value: u64) -> u32 {
    u64::BITS - value.leading_zeros()
}

/// The window's limit and length from a quota, refusing a burst that differs from
/// the count (a window has no separate burst).
pub(crate) fn limit_and_period(quota: &Quota) -> Result<(u64, u64), WindowError> {
    if quota.burst() != quota.count() {
        return Err(WindowError::BurstIsNotCount { count: quota.count(), burst: quota.burst() });
    }
    // A quota's period is non-zero and at most u64::MAX ns (validated by Quota).
    let period = weir_rl_core::__private::duration_as_nanos_saturating(quota.period()).max(1);
    Ok((quota.count(), period))
}

/// Where the windows of one limiter are and how far its window numbers reach.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    /// The window's limit.
    pub(crate) limit: u64,
    /// The window's length in ns, at least 1.
    pub(crate) period: u64,
    /// The same, as a divisor the compiler knows is not zero: a division by it has
    /// no panic path, so a check whose caller never reads what it computes does
    /// not compute it.
    divisor: NonZeroU64,
    /// Added to every reading so that windows start at multiples of `period`.
    shift: u64,
    /// The shifted reading at which relative window 0 starts (a multiple of `period`).
    base: u64,
    /// The largest relative time used: the last nanosecond of the last window the
    /// encoding can number. Later readings are clamped to it (time stops there).
    last: u64,
    /// With `unclamped` and `lead`, [`rel_unclamped`](Self::rel_unclamped)'s one
    /// compare: a reading `r` is clamped by nothing in [`rel`](Self::rel) iff
    /// `r − from ≤ unclamped` (wrapping), and then its relative time is `r − from
    /// + lead`. When the first window starts at or after the clock's origin
    /// (`base ≥ shift`), `from` is that start and `lead` is 0 (a reading before it
    /// wraps to above `unclamped`); when it starts before it (`shift − base` ns
    /// before: windows aligned to a start the limiter was made less than a window
    /// after), `from` is 0 and `lead` is that distance.
    from: u64,
    /// See `from`.
    unclamped: u64,
    /// See `from`.
    lead: u64,
}

impl Frame {
    /// The frame of a limiter created at reading `now`, whose windows start at
    /// `window_start` (and every `period` before and after it), numbering windows
    /// up to `max_window`. `None` if that reaches less than [`MIN_HORIZON_NS`].
    pub(crate) fn new(limit: u64, period: u64, now: Nanos, window_start: Nanos, max_window: u64) -> Option<Self> {
        let divisor = NonZeroU64::new(period)?;
        let span = (u128::from(max_window) + 1) * u128::from(period);
        if span < u128::from(MIN_HORIZON_NS) {
            return None;
        }
        let shift = (period - window_start.as_u64() % period) % period;
        let shifted = now.as_u64().saturating_add(shift);
        let base = shifted - shifted % period;
        let last = u64::try_from(span - 1).unwrap_or(u64::MAX);
        // Unclamped: `r + shift ≤ u64::MAX` and `base ≤ r + shift ≤ base + last`.
        let top = last.min(u64::MAX - base); // the largest unclamped relative time
        let (from, unclamped, lead) = match base.checked_sub(shift) {
            // r ≥ base − shift, and r − (base − shift) ≤ top.
            Some(from) => (from, top, 0),
            // Every reading is at or after the first window's start: r ≤ top − lead.
            // (Here `base` is 0, so `top` is `last`, which is at least a window
            // less a nanosecond, and `lead < shift < period`: no saturation.)
            None => (0, top.saturating_sub(shift - base), shift - base),
        };
        Some(Self { limit, period, divisor, shift, base, last, from, unclamped, lead })
    }

    /// Whether windows of `period` numbered up to `max_window` reach the horizon.
    pub(crate) fn reaches_horizon(period: u64, max_window: u64) -> bool {
        (u128::from(max_window) + 1) * u128::from(period) >= u128::from(MIN_HORIZON_NS)
    }

    /// The error for a limit too large for an encoding, with the largest limit that
    /// fits: `max_window(b)` is how many windows the encoding numbers when its
    /// count fields need `b` bits; `headroom` is what the count fields hold beyond
    /// the limit (a striped limiter's batch, which is at most the limit: a headroom
    /// larger than half the field leaves room for a limit of half the field with a
    /// batch no larger than it).
    pub(crate) fn too_large(
        limit: u64,
        period: u64,
        headroom: u64,
        max_window: impl Fn(u32) -> Option<u64>,
    ) -> WindowError {
        let fits = (1..=63u32).rev().find(|&b| max_window(b).is_some_and(|w| Self::reaches_horizon(period, w))).map_or(
            0,
            |b| {
                let field = (1u64 << b) - 1;
                field.saturating_sub(headroom).max(if headroom > 0 { field / 2 } else { 0 })
            },
        );
        WindowError::LimitTooLarge { limit, window: Duration::from_nanos(period), max_limit: fits.min(limit) }
    }

    /// `now` in relative ns, clamped to `[0, last]`.
    #[inline]
    pub(crate) fn rel(&self, now: Nanos) -> u64 {
        now.as_u64().saturating_add(self.shift).saturating_sub(self.base).min(self.last)
    }

    /// [`rel`](Self::rel) of a reading it clamps nothing of, in one subtraction,
    /// one compare and one addition: `None` for a reading before the first window
    /// or past the horizon (a check path's inline part reads time with it, and
    /// leaves those to its out-of-line part). See `from` for why one compare
    /// tells.
    #[inline(always)]
    pub(crate) fn rel_unclamped(&self, now: Nanos) -> Option<u64> {
        let since = now.as_u64().wrapping_sub(self.from);
        // At most `unclamped + lead ≤ top`: no overflow.
        if since <= self.unclamped { Some(since + self.lead) } else { None }
    }

    /// The relative window a relative time falls in, and the time since its start.
    #[inline]
    pub(crate) fn window_of(&self, rel: u64) -> (u64, u64) {
        (rel / self.divisor, rel % self.divisor)
    }

    /// The relative time at which relative window `window` starts.
    #[inline]
    pub(crate) fn start(&self, window: u64) -> u64 {
        window.saturating_mul(self.period)
    }

    /// The reading at which relative time `rel` is (saturating at zero: relative 0
    /// may be before the clock's origin).
    #[inline]
    pub(crate) fn reading_at(&self, rel: u64) -> Nanos {
        Nanos::new(self.base.saturating_add(rel).saturating_sub(self.shift))
    }

    /// What a decision in `window` made from the reading `now` (relative `rel`) is
    /// stamped with ([`Decision::at`](weir_rl_core::Decision::at)): `now`, or the
    /// window's start if the reading is earlier (a reading stepping back is decided
    /// there), so that the stamp's window is the one the decision counted in.
    #[inline]
    pub(crate) fn stamp(&self, window: u64, rel: u64, now: Nanos) -> Nanos {
        let start = self.start(window);
        if rel >= start { now } else { self.reading_at(start) }
    }

    /// The window a decision stamped `at` (see [`stamp`](Self::stamp)) was counted in.
    #[inline]
    pub(crate) fn window_at(&self, at: Nanos) -> u64 {
        self.window_of(self.rel(at)).0
    }

    /// Nanoseconds from the reading `now` to the relative time `target` (0 if
    /// `target` is not later). Computed from the unclamped reading, so a reading
    /// before the limiter's first window still gets the true wait.
    #[inline]
    pub(crate) fn delay(&self, target: u64, now: Nanos) -> u64 {
        self.base.saturating_add(target).saturating_sub(now.as_u64().saturating_add(self.shift))
    }
}

/// Where a reading stands against a stored window `stored`: the effective window
/// (never earlier than the stored one: a clock stepping back is no time passing)
/// and the time since its start. `elapsed` is 0 when the reading is earlier than
/// the stored window, the strictest point of that window.
///
/// A reading in the stored window or the next one (a limiter checked at least once
/// a window) costs a multiplication and a comparison or two; only a reading further
/// on divides.
#[inline]
pub(crate) fn position(frame: &Frame, stored: u64, rel: u64) -> (u64, u64) {
    let start = frame.start(stored);
    if rel < start {
        return (stored, 0);
    }
    let elapsed = rel - start;
    if elapsed < frame.period {
        (stored, elapsed)
    } else if elapsed - frame.period < frame.period {
        (stored.saturating_add(1), elapsed - frame.period)
    } else {
        frame.window_of(rel)
    }
}

/// Whether `n` more requests fit a sliding window whose previous window admitted
/// `prev` and current one `curr`, `elapsed` ns into the current window of
/// `period` ns: `prev·(period − elapsed)/period + curr + n ≤ limit`, compared
/// exactly as `prev·(period − elapsed) ≤ (limit − curr − n)·period`.
///
/// `prev ≤ room` (with `room = limit − curr − n`) settles it first, with no
/// multiplication: the weighted previous count is at most `prev`. Far from the
/// limit that is every check, and the decision does not wait for the products.
#[inline]
pub(crate) fn fits(limit: u64, period: u64, prev: u64, curr: u64, elapsed: u64, n: u64) -> bool {
    match limit.checked_sub(curr).and_then(|room| room.checked_sub(n)) {
        Some(room) => {
            prev <= room
                || u128::from(prev) * u128::from(period.saturating_sub(elapsed))
                    <= u128::from(room) * u128::from(period)
        }
        None => false,
    }
}

/// The snapshot of a sliding window: `remaining = limit − curr − ⌈prev·(P − e)/P⌉`
/// (kept as capacity left in units of 1/P request, divided only when asked for).
#[inline]
pub(crate) fn sliding_snapshot(
    limit: u64,
    period: u64,
    prev: u64,
    curr: u64,
    elapsed: u64,
    reset_after_ns: u64,
) -> Snapshot {
    let room = u128::from(limit.saturating_sub(curr)) * u128::from(period);
    let weighted = u128::from(prev) * u128::from(period.saturating_sub(elapsed));
    let left = room.saturating_sub(weighted);
    match u64::try_from(left) {
        Ok(left) => Snapshot::with_capacity_left(limit, left, period, reset_after_ns),
        // left / period ≤ limit, so the quotient fits.
        Err(_) => Snapshot::new(limit, div_u128(left, period), reset_after_ns),
    }
}

/// The earliest time, as an offset from the current window's start, at which `n`
/// requests fit a sliding window holding `prev` and `curr`, if nothing else is
/// admitted meanwhile. The estimate never grows while nothing is admitted, so the
/// first instant that fits is well defined and every later one fits too.
///
/// In the current window `n` fit once `prev·(P − e) ≤ room·P` with
/// `room = limit − curr − n`, that is from `e = P − ⌊room·P / prev⌋`; in the next
/// one `curr` becomes the previous window's count and nothing is current; two
/// windows on, everything has expired.
pub(crate) fn sliding_wait(limit: u64, period: u64, prev: u64, curr: u64, n: u64) -> u64 {
    // The first offset in a window with previous count `before` and room `room` at
    // which the weighted previous count fits, if one does.
    let first_fit = |before: u64, room: u64| -> Option<u64> {
        if before == 0 {
            return Some(0);
        }
        if room >= before {
            return Some(0); // room·P / before ≥ P: fits from the window's start
        }
        if room == 0 {
            return None; // nothing of the previous window may count: not in this window
        }
        // room < before here, so the quotient is below P and fits a u64.
        let slack = div_u128(u128::from(room) * u128::from(period), before);
        // slack ≥ 1 ⇔ some e < P fits; the offset is P − slack < P.
        (slack >= 1).then(|| period - slack)
    };
    if let Some(room) = limit.checked_sub(curr).and_then(|room| room.checked_sub(n))
        && let Some(offset) = first_fit(prev, room)
    {
        return offset;
    }
    match first_fit(curr, limit.saturating_sub(n)) {
        Some(offset) => period.saturating_add(offset),
        None => period.saturating_mul(2),
    }
}

/// `numerator / divisor` (divisor non-zero) for a quotient known to fit a `u64`,
/// with a 64-bit division when the numerator fits one (several times cheaper than
/// a 128-bit division; this is on the denied path).
///
/// A zero divisor gives `u64::MAX` rather than panicking: no caller passes one, and
/// with no panic path the compiler drops the division where its result goes unused
/// (a check whose caller reads only allowed-or-denied).
#[inline]
pub(crate) fn div_u128(numerator: u128, divisor: u64) -> u64 {
    match u64::try_from(numerator) {
        Ok(numerator) => numerator.checked_div(divisor).unwrap_or(u64::MAX),
        Err(_) => numerator.checked_div(u128::from(divisor)).map_or(u64::MAX, |q| u64::try_from(q).unwrap_or(u64::MAX)),
    }
}

/// How long after the current window's start a sliding window holding `prev` and
/// `curr` is empty again (its estimate is zero), or `None` if it already is.
#[inline]
pub(crate) fn sliding_reset(period: u64, prev: u64, curr: u64) -> Option<u64> {
    if curr > 0 {
        Some(period.saturating_mul(2))
    } else if prev > 0 {
        Some(period)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(period: u64, now: u64, start: u64) -> Frame {
        Frame::new(100, period, Nanos::new(now), Nanos::new(start), u64::MAX >> 8).unwrap()
    }

    #[test]
    fn windows_align_to_the_given_start() {
        let f = frame(60, 125, 0); // windows [120, 180), ...
        assert_eq!(f.rel(Nanos::new(125)), 5);
        assert_eq!(f.window_of(f.rel(Nanos::new(185))), (1, 5));
        let f = frame(60, 125, 30); // windows [90, 150), [150, 210)
        assert_eq!(f.rel(Nanos::new(125)), 35);
        assert_eq!(f.window_of(f.rel(Nanos::new(150))), (1, 0));
        assert_eq!(f.delay(60, Nanos::new(125)), 25);
        let f = frame(60, 10, 30); // the creation window [-30, 30) starts before the origin
        assert_eq!(f.window_of(f.rel(Nanos::new(10))), (0, 40));
        assert_eq!(f.window_of(f.rel(Nanos::new(30))), (1, 0));
        assert_eq!(f.delay(60, Nanos::new(10)), 20);
    }

    #[test]
    fn a_reading_is_unclamped_exactly_where_rel_clamps_nothing() {
        let frames = [
            frame(60, 125, 0),
            frame(60, 125, 30),
            frame(60, 10, 30),
            frame(1_000, u64::MAX - 5, 7),
            frame(7, 0, 3),
            Frame::new(1, u64::MAX, Nanos::MAX, Nanos::MAX, u64::MAX).unwrap(),
            Frame::new(3, 1 << 40, Nanos::new(5), Nanos::new(1), 1 << 24).unwrap(),
            Frame::new(3, u64::MAX / 2, Nanos::new(5), Nanos::new(1), 1).unwrap(),
            Frame::new(3, 1 << 58, Nanos::new(5), Nanos::new(1), 1).unwrap(),
        ];
        for f in &frames {
            let edges = [f.from, f.base, f.last, f.unclamped, u64::MAX - f.shift, f.base.wrapping_sub(f.shift), f.lead];
            let readings =
                edges.iter().flat_map(|&e| [e.wrapping_sub(1), e, e.wrapping_add(1)]).chain([0, 1, u64::MAX]);
            for reading in readings {
                let now = Nanos::new(reading);
                let unclamped =
                    now.as_u64().checked_add(f.shift).and_then(|s| s.checked_sub(f.base)).filter(|&r| r <= f.last);
                assert_eq!(f.rel_unclamped(now), unclamped, "{f:?} at {reading}");
                if let Some(rel) = unclamped {
                    assert_eq!(f.rel(now), rel);
                }
            }
        }
    }

    #[test]
    fn readings_are_clamped_without_overflow() {
        let f = frame(1_000, u64::MAX - 5, 7);
        assert_eq!(f.rel(Nanos::ZERO), 0);
        let _ = f.rel(Nanos::MAX);
        assert_eq!(f.delay(u64::MAX, Nanos::MAX), 0);
        assert!(Frame::new(1, 1, Nanos::ZERO, Nanos::ZERO, 10).is_none(), "too short a horizon");
        let f = Frame::new(1, u64::MAX, Nanos::MAX, Nanos::MAX, u64::MAX).unwrap();
        assert_eq!(f.rel(Nanos::MAX), 0);
    }

    #[test]
    fn the_sliding_estimate_of_the_worked_example() {
        // 100 per minute, previous window 80, current 30, 45 s in: 80·0.25 + 30 = 50.
        let minute = 60_000_000_000;
        assert!(fits(100, minute, 80, 30, 45_000_000_000, 50));
        assert!(!fits(100, minute, 80, 30, 45_000_000_000, 51));
        assert_eq!(sliding_snapshot(100, minute, 80, 30, 45_000_000_000, 0).remaining(), 50);
        // 79.5 → 20 remain, not 20.5.
        assert_eq!(sliding_snapshot(100, minute, 1, 79, 30_000_000_000, 0).remaining(), 20);
    }

    #[test]
    fn the_wait_is_the_first_instant_that_fits() {
        for (limit, period, prev, curr, n) in
            [(10, 100, 10, 0, 1), (10, 100, 10, 10, 1), (10, 100, 3, 9, 2), (10, 100, 0, 10, 10), (5, 7, 4, 5, 5)]
        {
            let wait = sliding_wait(limit, period, prev, curr, n);
            let at = |t: u64| {
                if t < period {
                    fits(limit, period, prev, curr, t, n)
                } else if t < 2 * period {
                    fits(limit, period, curr, 0, t - period, n)
                } else {
                    n <= limit
                }
            };
            assert!(at(wait), "{limit} {period} {prev} {curr} {n}: {wait}");
            assert!(wait == 0 || !at(wait - 1), "{limit} {period} {prev} {curr} {n}: {wait}");
        }
    }
}
