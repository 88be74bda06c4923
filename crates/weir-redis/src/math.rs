//! The arithmetic of each algorithm in microseconds: what the scripts are given,
//! and how their replies become weir [`Decision`]s (the same formulas as the local
//! crates, at a resolution of 1 µs).

use weir_rl_core::{Decision, Quota, Snapshot};

/// Nanoseconds per microsecond.
pub(crate) const NS: u64 = 1_000;

/// A GCRA quota in microseconds.
///
/// Rounding, the local crate's rule at 1 µs in place of 1/16 ns: when the
/// emission interval `T = period / count` is a whole number of microseconds, or at
/// least 1 ms, every unit is charged `T` rounded up to a whole µs (exact, or at
/// most 0.1% slower) and exactly `burst` single requests fit a full bucket.
/// Otherwise a call for `n` is charged `⌈n·period / count⌉` µs (exact for calls of
/// at least 1 ms worth of capacity to within 0.1%; smaller calls are charged up to
/// 1 µs more, never less).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GcraMicros {
    burst: u64,
    count: u64,
    period_ns: u64,
    /// `T` in whole µs, or 0 for the per-call charge.
    interval_us: u64,
    tolerance_us: u64,
}

impl GcraMicros {
    pub(crate) fn new(quota: &Quota) -> Self {
        let count = quota.count();
        let period_ns = u64::try_from(quota.period().as_nanos()).unwrap_or(u64::MAX);
        let per_unit_ns = u128::from(count) * u128::from(NS);
        let whole = u128::from(period_ns) >= per_unit_ns * 1_000 || u128::from(period_ns) % per_unit_ns == 0;
        let mut micros = Self { burst: quota.burst(), count, period_ns, interval_us: 0, tolerance_us: 0 };
        if whole {
            micros.interval_us = u64::try_from(u128::from(period_ns).div_ceil(per_unit_ns)).unwrap_or(u64::MAX);
        }
        micros.tolerance_us = micros.cost_us(quota.burst());
        micros
    }

    /// The quota's burst.
    pub(crate) fn burst(&self) -> u64 {
        self.burst
    }

    /// The capacity of a full bucket, in µs.
    pub(crate) fn tolerance_us(&self) -> u64 {
        self.tolerance_us
    }

    /// What a call for `n` (≤ burst) is charged, in µs.
    pub(crate) fn cost_us(&self, n: u64) -> u64 {
        if self.interval_us > 0 {
            return n.saturating_mul(self.interval_us);
        }
        let charged = (u128::from(n) * u128::from(self.period_ns)).div_ceil(u128::from(self.count) * u128::from(NS));
        u64::try_from(charged).unwrap_or(u64::MAX)
    }

    /// What giving back `n` units credits, in µs: never more than any call that
    /// took them was charged for them (`n·period / count` rounded *down* where
    /// [`cost_us`](Self::cost_us) rounds up), so a refund of part of a call cannot
    /// create capacity (weir-rl-core's `Quota::credit_ticks`, in µs).
    pub(crate) fn credit_us(&self, n: u64) -> u64 {
        if self.interval_us > 0 {
            return n.saturating_mul(self.interval_us);
        }
        let credit = u128::from(n) * u128::from(self.period_ns) / (u128::from(self.count) * u128::from(NS));
        u64::try_from(credit).unwrap_or(u64::MAX)
    }

    /// How many units `left_us` of capacity pay for.
    fn units_in(&self, left_us: u64) -> u64 {
        if let Some(units) = left_us.checked_div(self.interval_us) {
            return units;
        }
        let units = u128::from(left_us) * u128::from(self.count) * u128::from(NS) / u128::from(self.period_ns.max(1));
        u64::try_from(units).unwrap_or(u64::MAX).min(self.burst)
    }

    /// The snapshot with `used_us` of capacity in use.
    pub(crate) fn snapshot(&self, used_us: u64) -> Snapshot {
        let left = self.tolerance_us.saturating_sub(used_us);
        let reset_ns = used_us.saturating_mul(NS);
        if self.interval_us > 0 {
            Snapshot::with_capacity_left(self.burst, left, self.interval_us, reset_ns)
        } else {
            Snapshot::new(self.burst, self.units_in(left), reset_ns)
        }
    }

    /// The decision for a call of cost `cost_us` that found `used_us` in use
    /// (`admitted`: `used_us` is already after the admission).
    pub(crate) fn decision(&self, admitted: bool, used_us: u64, cost_us: u64) -> Decision {
        if admitted {
            return Decision::allowed(self.snapshot(used_us));
        }
        let excess = used_us.saturating_add(cost_us).saturating_sub(self.tolerance_us);
        Decision::denied(self.snapshot(used_us), excess.saturating_mul(NS))
    }
}

/// A window limiter's limit and length in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowMicros {
    pub(crate) limit: u64,
    /// Window length P in µs, at least 1 000.
    pub(crate) period_us: u64,
}

impl WindowMicros {
    fn start(&self, window: u64) -> u64 {
        window.saturating_mul(self.period_us)
    }

    /// ns from `now_us` to `target_us`, 0 if not later.
    fn delay_ns(target_us: u64, now_us: u64) -> u64 {
        target_us.saturating_sub(now_us).saturating_mul(NS)
    }

    /// A fixed window's decision: `count` in `window` (after the admission).
    pub(crate) fn fixed(&self, admitted: bool, now_us: u64, window: u64, count: u64) -> Decision {
        let end = self.start(window).saturating_add(self.period_us);
        let reset = if count == 0 { 0 } else { Self::delay_ns(end, now_us) };
        let snapshot = Snapshot::new(self.limit, self.limit.saturating_sub(count), reset);
        if admitted { Decision::allowed(snapshot) } else { Decision::denied(snapshot, Self::delay_ns(end, now_us)) }
    }

    /// A sliding window counter's decision, as `weir_window::SlidingWindow`'s.
    pub(crate) fn sliding(&self, admitted: bool, now_us: u64, window: u64, prev: u64, curr: u64, n: u64) -> Decision {
        let p = self.period_us;
        let start = self.start(window);
        let elapsed = now_us.saturating_sub(start).min(p);
        let reset = match (curr, prev) {
            (0, 0) => 0,
            (0, _) => Self::delay_ns(start.saturating_add(p), now_us),
            _ => Self::delay_ns(start.saturating_add(p.saturating_mul(2)), now_us),
        };
        let room = u128::from(self.limit.saturating_sub(curr)) * u128::from(p);
        let left = room.saturating_sub(u128::from(prev) * u128::from(p - elapsed));
        let snapshot = match u64::try_from(left) {
            Ok(left) => Snapshot::with_capacity_left(self.limit, left, p, reset),
            Err(_) => Snapshot::new(self.limit, u64::try_from(left / u128::from(p)).unwrap_or(u64::MAX), reset),
        };
        if admitted {
            return Decision::allowed(snapshot);
        }
        let wait = sliding_wait(self.limit, p, prev, curr, n);
        Decision::denied(snapshot, Self::delay_ns(start.saturating_add(wait), now_us))
    }

    /// A sliding log's decision: `live` entries, the newest at `newest_us`; on
    /// denial the request fits when the entry at `blocking_us` leaves the window.
    pub(crate) fn log(&self, admitted: bool, now_us: u64, live: u64, newest_us: u64, blocking_us: u64) -> Decision {
        let reset = if live == 0 { 0 } else { Self::delay_ns(newest_us.saturating_add(self.period_us), now_us) };
        let snapshot = Snapshot::new(self.limit, self.limit.saturating_sub(live), reset);
        if admitted {
            Decision::allowed(snapshot)
        } else {
            Decision::denied(snapshot, Self::delay_ns(blocking_us.saturating_add(self.period_us), now_us))
        }
    }
}

/// The earliest offset from the current window's start at which `n` fit a sliding
/// window holding `prev` and `curr` if nothing else is admitted (the local crate's
/// formula, in µs: its nanosecond answer rounded up to a whole µs).
pub(crate) fn sliding_wait(limit: u64, period: u64, prev: u64, curr: u64, n: u64) -> u64 {
    let first_fit = |before: u64, room: u64| -> Option<u64> {
        if before == 0 || room >= before {
            return Some(0);
        }
        if room == 0 {
            return None;
        }
        let slack = u64::try_from(u128::from(room) * u128::from(period) / u128::from(before)).unwrap_or(u64::MAX);
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

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn whole_microsecond_intervals_are_exact() {
        let g = GcraMicros::new(&Quota::per_second(10).unwrap().with_burst(20).unwrap());
        assert_eq!((g.cost_us(1), g.tolerance_us()), (100_000, 2_000_000));
        let g = GcraMicros::new(&Quota::per_second(1_000_000).unwrap());
        assert_eq!((g.cost_us(1), g.tolerance_us()), (1, 1_000_000));
        // 3 per second: T = 333 333.3 µs, at least 1 ms: rounded up to a whole µs.
        let g = GcraMicros::new(&Quota::per_second(3).unwrap());
        assert_eq!((g.cost_us(1), g.tolerance_us()), (333_334, 1_000_002));
    }

    #[test]
    fn fast_rates_are_charged_per_call() {
        // 300 MB/s: 1 500 bytes are 5 µs exactly; one byte is charged a whole µs.
        let g = GcraMicros::new(&Quota::per_second(300_000_000).unwrap());
        assert_eq!((g.cost_us(1_500), g.cost_us(1)), (5, 1));
        assert_eq!(g.tolerance_us(), 1_000_000);
        assert_eq!(g.snapshot(500_000).remaining(), 150_000_000);
        let g = GcraMicros::new(&Quota::new(3, Duration::from_micros(1_000)).unwrap());
        assert_eq!((g.cost_us(1), g.cost_us(3)), (334, 1_000));
    }

    #[test]
    fn denial_times_are_the_excess() {
        let g = GcraMicros::new(&Quota::per_second(10).unwrap());
        let d = g.decision(false, 1_000_000, 100_000);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(100)));
        assert_eq!((d.remaining(), d.reset_after()), (0, Duration::from_secs(1)));
    }

    #[test]
    fn the_sliding_worked_example() {
        // 100 per minute, 80 in the previous window, 30 in this one, 45 s in: 50 left.
        let w = WindowMicros { limit: 100, period_us: 60_000_000 };
        let d = w.sliding(true, 45_000_000, 0, 80, 30, 1);
        assert_eq!(d.remaining(), 50);
    }
}
