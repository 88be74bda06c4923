//! [`Quota`]: "N per period, with a burst", validated once, at construction.

use crate::nanos::ticks;
use core::fmt;
use core::time::Duration;

/// The longest span any quota may need to refill its burst, in ticks: 2⁶² ticks =
/// 2⁵⁸ ns, about 9.1 years. Keeping two bits of headroom below `u64::MAX` means a
/// theoretical arrival time (now + burst × interval) cannot overflow for the first
/// 27 years of a limiter's life, and saturates, never wraps, after that.
#[doc(hidden)] // in ticks, weir's shared fixed-point unit: not part of the public API
pub const MAX_TOLERANCE_TICKS: u64 = 1 << 62;

/// How far the enforced rate may be from the requested one: 1 part in 1000 (0.1%).
const PRECISION_PARTS: u128 = 1000;

/// The shortest emission interval charged in whole ticks: 1000 ticks (62.5 ns, a rate
/// of 16 million per second). Rounding such an interval up to a whole tick makes it
/// at most 0.1% longer; shorter intervals are charged exactly (see "Precision").
const WHOLE_TICK_INTERVAL: u128 = PRECISION_PARTS;

/// The fastest rate accepted is one unit per 10⁻⁶ tick (1.6 × 10¹⁶ per second):
/// beyond it, a single tick of rounding is more than a million units.
const MAX_UNITS_PER_TICK: u128 = 1_000_000;

/// Marks a [`Quota::unit_charge`] that is a fixed-point interval (2⁻³² tick) rather
/// than whole ticks. A whole-tick interval is at most 2⁶² ticks, clear of it.
const FRACTIONAL_CHARGE: u64 = 1 << 63;

/// A rate limit: `count` requests per `period`, with up to `burst` admitted back to
/// back from a full bucket.
///
/// Built by [`Quota::per_second`] and friends, or [`Quota::new`] for any period; the
/// burst defaults to `count` and is changed with [`Quota::with_burst`]. Every
/// constructor validates, so a `Quota` in hand is always usable:
///
/// - `count`, `period` and `burst` are non-zero;
/// - any rate from 1 per 9 years up to 1.6 × 10¹⁶ per second is accepted: request
///   rates, and byte or bit rates (100 GB/s is 10¹¹ per second) for
///   `check_n(bytes)`; up to 16 million per second every request is charged within
///   0.1% of its share, faster rates charge each call at least a whole tick (see
///   "Precision");
/// - refilling the whole burst (`burst × interval`) takes at most about 9.1 years.
///
/// # Precision
///
/// Time is kept in ticks of 1/16 ns. The emission interval `T = period / count` is
/// charged as follows, and the rate enforced is never faster than the one asked for:
///
/// - **Up to 16 million per second** (`T` ≥ 62.5 ns = 1000 ticks), `T` is rounded
///   *up* to a whole tick (at most 0.1% slower; exact for every interval that is a
///   whole number of ticks, such as 10 per second or 10⁹ per second), every request
///   costs exactly `T`, and exactly `burst` single requests fit in a full bucket.
/// - **Faster** (byte rates), a call for `n` is charged exactly `n × period / count`,
///   rounded up to a whole tick. A call asking for at least 62.5 ns
///   worth of capacity (`n ≥ 1000 / T` in ticks: 19 bytes at 300 MB/s, 157 at
///   2.5 GB/s, 6 250 at 100 GB/s) is within 0.1%, over any horizon; smaller calls
///   are charged more than their share (up to one tick more per call, never less),
///   so they can only be admitted less. Single-unit calls are admitted at
///   `T / ⌈T⌉` of the rate: one `check()` at a time at 3 × 10⁸ per second
///   (`T` = 53.3 ticks, charged 54) is admitted 1.2% less than the rate, at
///   2.5 × 10⁹ per second (`T` = 6.4, charged 7) 8.6% less. Above 16 × 10⁹ per second (under one tick per unit) the bucket itself is
///   rounded up to a tick, so several calls together may take up to one tick's
///   worth more than the burst; the burst must therefore hold at least 1000 ticks
///   (62.5 ns) of capacity ([`QuotaError::BurstTooShort`]), which keeps that under
///   0.1%. Refunds credit `n × T` rounded *down* ([`credit_ticks`]), so giving back
///   part of a call never creates capacity. A fraction of a tick per call is the
///   finest a 64-bit state can carry:
///   at 100 GB/s, a single byte is 1/6 of a tick, and the bytes of 6 years
///   already outnumber 2⁶⁴.
///
/// [`credit_ticks`]: Quota::credit_ticks
///
/// ```
/// use weir_rl_core::{Quota, QuotaError};
/// use std::time::Duration;
///
/// let api = Quota::per_minute(600)?.with_burst(20)?;
/// assert_eq!(api.emission_interval(), Duration::from_millis(100));
/// assert_eq!(api.burst(), 20);
///
/// assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroCount));
/// assert!(Quota::per_second(1_000_000_000).is_ok()); // one per nanosecond
///
/// // 300 MB/s for `check_n(bytes)`: a 1 500-byte packet is charged 5 µs.
/// let link = Quota::per_second(300_000_000)?;
/// assert_eq!(link.cost(1_500), Some(Duration::from_micros(5)));
/// assert!(Quota::per_second(100_000_000_000).is_ok()); // 100 GB/s
/// # Ok::<(), QuotaError>(())
/// ```
#[derive(Clone, Copy)]
pub struct Quota {
    count: u64,
    period_ns: u64,
    burst: u64,
    /// The emission interval charged per request, in ticks: `period / count` rounded
    /// up to a whole tick.
    interval_ticks: u64,
    /// 0 if every unit is charged `interval_ticks`; for a quota charged exactly, as
    /// `n × period / count` rounded up per call (intervals under 1000 ticks that are
    /// not whole), the interval in 2⁻³² tick rounded down (non-zero, below
    /// 2⁴²: an interval under 1000 ticks).
    fraction: u64,
    /// `burst` calls' worth of capacity (`⌈burst × interval⌉` ticks, at most
    /// [`MAX_TOLERANCE_TICKS`]) less one unit's (`interval_ticks`): the most
    /// capacity that may be in use for one more unit to be admitted, which is what
    /// a check of one unit compares with (kept rather than the whole, so that check
    /// subtracts nothing).
    slack_ticks: u64,
}

/// Quotas are equal when they enforce the same limit.
impl PartialEq for Quota {
    fn eq(&self, other: &Self) -> bool {
        self.to_words() == other.to_words()
    }
}

impl Eq for Quota {}

impl core::hash::Hash for Quota {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.to_words().hash(state);
    }
}

impl Quota {
    /// `count` requests per second, burst `count`.
    pub const fn per_second(count: u64) -> Result<Self, QuotaError> {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` requests per minute, burst `count`.
    pub const fn per_minute(count: u64) -> Result<Self, QuotaError> {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` requests per hour, burst `count`.
    pub const fn per_hour(count: u64) -> Result<Self, QuotaError> {
        Self::new(count, Duration::from_secs(3_600))
    }

    /// `count` requests per day, burst `count`.
    pub const fn per_day(count: u64) -> Result<Self, QuotaError> {
        Self::new(count, Duration::from_secs(86_400))
    }

    /// `count` requests per `period`, burst `count`.
    pub const fn new(count: u64, period: Duration) -> Result<Self, QuotaError> {
        if count == 0 {
            return Err(QuotaError::ZeroCount);
        }
        if period.is_zero() {
            return Err(QuotaError::ZeroPeriod);
        }
        let period_nanos = period.as_nanos();
        if period_nanos > u64::MAX as u128 {
            return Err(QuotaError::TooLong { count, period, burst: count });
        }
        let period_ticks = period_nanos * ticks::PER_NANO as u128;
        if period_ticks * MAX_UNITS_PER_TICK < count as u128 {
            return Err(QuotaError::RateTooHigh { count, period });
        }
        // Rounded up: never faster than asked; at most 0.1% slower from 1000 ticks on.
        let interval = period_ticks.div_ceil(count as u128);
        let exact_ratio = interval < WHOLE_TICK_INTERVAL && !period_ticks.is_multiple_of(count as u128);
        // Under 1000 ticks: below 2^42 in 2^-32 tick; at least 2^32 / 10^6 (non-zero).
        let fraction = if exact_ratio { ((period_ticks << 32) / count as u128) as u64 } else { 0 };
        let quota = Self {
            count,
            period_ns: period_nanos as u64,
            burst: count,
            // Truncation is harmless: an interval this long fails `with_burst` below.
            interval_ticks: if interval > u64::MAX as u128 { u64::MAX } else { interval as u64 },
            fraction,
            slack_ticks: 0,
        };
        quota.with_burst(count)
    }

    /// The same rate with up to `burst` requests admitted back to back from a full
    /// bucket.
    pub const fn with_burst(self, burst: u64) -> Result<Self, QuotaError> {
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        let quota = Self { burst, ..self };
        let tolerance = match quota.cost_ticks_wide(burst) {
            Some(tolerance) if tolerance <= MAX_TOLERANCE_TICKS as u128 => tolerance as u64,
            _ => return Err(QuotaError::TooLong { count: self.count, period: self.period(), burst }),
        };
        // Below one tick per unit, the bucket (rounded up to a tick) can hold up to a
        // tick's worth of units more than the burst: keep that under 0.1%.
        let period_ticks = self.period_ns as u128 * ticks::PER_NANO as u128;
        if self.fraction != 0 && period_ticks < self.count as u128 && tolerance < WHOLE_TICK_INTERVAL as u64 {
            let min_burst = (WHOLE_TICK_INTERVAL * self.count as u128).div_ceil(period_ticks);
            let min_burst = if min_burst > u64::MAX as u128 { u64::MAX } else { min_burst as u64 };
            return Err(QuotaError::BurstTooShort { count: self.count, period: self.period(), burst, min_burst });
        }
        // One unit costs `interval_ticks` (= `cost_ticks(1)`) ≤ `cost_ticks(burst)`.
        Ok(Self { slack_ticks: tolerance - quota.interval_ticks, ..quota })
    }

    /// Requests per period.
    pub const fn count(&self) -> u64 {
        self.count
    }

    /// The period `count` refers to.
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The most requests admitted back to back from a full bucket.
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// The time one request's capacity takes to come back (`period / count`),
    /// rounded to the nearest nanosecond.
    pub const fn emission_interval(&self) -> Duration {
        let ns = (self.period_ns as u128 + self.count as u128 / 2) / self.count as u128;
        Duration::from_nanos(ns as u64)
    }

    /// What one request of cost 1 is charged, in ticks (1/16 ns): the emission
    /// interval rounded up to a whole tick.
    #[doc(hidden)] // fixed-point arithmetic that weir's crates share: not part of the public API
    #[inline]
    pub const fn emission_interval_ticks(&self) -> u64 {
        self.interval_ticks
    }

    /// `burst` requests' worth of capacity in ticks (what a call for `burst` is
    /// charged): how long an empty bucket takes to refill completely. Never above
    /// [`MAX_TOLERANCE_TICKS`].
    #[doc(hidden)] // fixed-point arithmetic that weir's crates share: not part of the public API
    #[inline]
    pub const fn tolerance_ticks(&self) -> u64 {
        self.slack_ticks + self.interval_ticks
    }

    /// The most capacity in use, in ticks, at which a request of one unit is still
    /// admitted: [`tolerance_ticks`](Self::tolerance_ticks) less one unit's
    /// [`cost_ticks`](Self::cost_ticks) (which is
    /// [`emission_interval_ticks`](Self::emission_interval_ticks) for every quota).
    #[doc(hidden)] // fixed-point arithmetic that weir's crates share: not part of the public API
    #[inline]
    pub const fn unit_slack_ticks(&self) -> u64 {
        self.slack_ticks
    }

    /// What a call for `n` is charged, in ticks: `n` emission intervals (see
    /// "Precision"), saturating at `u64::MAX` (far above any tolerance, so such a call
    /// never fits).
    #[doc(hidden)] // fixed-point arithmetic that weir's crates share: not part of the public API
    #[inline]
    pub const fn cost_ticks(&self, n: u64) -> u64 {
        if self.fraction == 0 {
            n.saturating_mul(self.interval_ticks)
        } else {
            match self.cost_ticks_wide(n) {
                Some(ticks) if ticks <= u64::MAX as u128 => ticks as u64,
                _ => u64::MAX,
            }
        }
    }

    /// [`cost_ticks`](Self::cost_ticks) without saturation, `None` on overflow.
    const fn cost_ticks_wide(&self, n: u64) -> Option<u128> {
        if self.fraction == 0 {
            return (n as u128).checked_mul(self.interval_ticks as u128);
        }
        let period_ticks = self.period_ns as u128 * ticks::PER_NANO as u128;
        match (n as u128).checked_mul(period_ticks) {
            Some(product) => Some(product.div_ceil(self.count as u128)),
            None => None,
        }
    }

    /// What giving back `n` units credits, in ticks: never more than any call that
    /// took them was charged for them (`n` intervals rounded *down* where
    /// [`cost_ticks`](Self::cost_ticks) rounds up), so a refund of part of a call
    /// cannot create capacity.
    #[doc(hidden)] // fixed-point arithmetic that weir's crates share: not part of the public API
    #[inline]
    pub const fn credit_ticks(&self, n: u64) -> u64 {
        if self.fraction == 0 {
            n.saturating_mul(self.interval_ticks)
        } else {
            let period_ticks = self.period_ns as u128 * ticks::PER_NANO as u128;
            match (n as u128).checked_mul(period_ticks) {
                Some(product) => {
                    let ticks = product / self.count as u128;
                    if ticks > u64::MAX as u128 { u64::MAX } else { ticks as u64 }
                }
                None => u64::MAX,
            }
        }
    }

    /// What a call for `n` is charged, as a duration (rounded up to a nanosecond), or
    /// `None` if `n` exceeds the burst and so can never be admitted.
    pub const fn cost(&self, n: u64) -> Option<Duration> {
        if n > self.burst {
            return None;
        }
        Some(Duration::from_nanos(ticks::to_nanos_ceil(self.cost_ticks(n))))
    }

    /// How many units `ticks` of capacity pay for: the largest `n` whose
    /// [`cost_ticks`](Self::cost_ticks) is at most `ticks`.
    #[doc(hidden)] // fixed-point arithmetic that weir's crates share: not part of the public API
    #[inline]
    pub const fn units_in(&self, ticks: u64) -> u64 {
        if self.fraction == 0 {
            ticks / self.interval_ticks
        } else {
            let period_ticks = self.period_ns as u128 * ticks::PER_NANO as u128;
            let units = ticks as u128 * self.count as u128 / period_ticks;
            if units > u64::MAX as u128 { u64::MAX } else { units as u64 }
        }
    }

    /// Whether every request is charged exactly [`emission_interval_ticks`], a whole
    /// number of ticks: true for every rate up to 16 million per second, and for faster
    /// rates whose interval is a whole number of ticks (such as 10⁹ per second).
    /// Algorithms that admit one item at a time (a leaky bucket's queue) accept only
    /// such quotas.
    ///
    /// [`emission_interval_ticks`]: Self::emission_interval_ticks
    #[doc(hidden)] // fixed-point arithmetic that weir's crates share: not part of the public API
    #[inline]
    pub const fn is_whole_ticks(&self) -> bool {
        self.fraction == 0
    }

    /// What each unit of a call is charged, in one word that a [`Decision`](crate::Decision)
    /// carries so that a refund can credit what its admission was charged after the
    /// quota changed ([`credit_ticks_at`](Self::credit_ticks_at)): the emission
    /// interval in whole ticks (at most 2⁶²), or, for a quota charged exactly (a
    /// byte rate: not [`is_whole_ticks`](Self::is_whole_ticks)), the interval in 2⁻³²
    /// tick rounded down with the top bit set. Never zero.
    #[doc(hidden)] // fixed-point arithmetic that weir's crates share: not part of the public API
    #[inline]
    pub const fn unit_charge(&self) -> u64 {
        if self.fraction == 0 { self.interval_ticks } else { FRACTIONAL_CHARGE | self.fraction }
    }

    /// What giving back `n` units charged at `unit_charge` (a [`unit_charge`](Self::unit_charge))
    /// credits, in ticks: never more than the call that took them was charged for
    /// them (whole intervals exactly; a fixed-point interval rounded down, where the
    /// call was rounded up). For the quota the charge came from, at most
    /// [`credit_ticks`](Self::credit_ticks), and at most one tick less for up to 2³²
    /// units.
    #[doc(hidden)] // fixed-point arithmetic that weir's crates share: not part of the public API
    #[inline]
    pub const fn credit_ticks_at(unit_charge: u64, n: u64) -> u64 {
        if unit_charge & FRACTIONAL_CHARGE == 0 {
            n.saturating_mul(unit_charge)
        } else {
            let ticks = (n as u128 * (unit_charge & !FRACTIONAL_CHARGE) as u128) >> 32;
            if ticks > u64::MAX as u128 { u64::MAX } else { ticks as u64 }
        }
    }

    /// The quota as words, for [`QuotaCell`](crate::QuotaCell) (and equality).
    pub(crate) const fn to_words(self) -> [u64; 6] {
        [self.count, self.period_ns, self.burst, self.interval_ticks, self.fraction, self.slack_ticks]
    }

    /// The inverse of [`to_words`](Self::to_words), for words that came from it.
    pub(crate) const fn from_words(words: [u64; 6]) -> Self {
        Self {
            count: words[0],
            period_ns: words[1],
            burst: words[2],
            interval_ticks: words[3],
            fraction: words[4],
            slack_ticks: words[5],
        }
    }

    /// The rate actually enforced for calls of at least 62.5 ns worth of capacity, in
    /// units per second (within 0.1% of `count / period`, never above it).
    pub fn enforced_per_second(&self) -> f64 {
        let interval = match self.fraction {
            0 => self.interval_ticks as f64,
            _ => self.period_ns as f64 * ticks::PER_NANO as f64 / self.count as f64,
        };
        1e9 * ticks::PER_NANO as f64 / interval
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("count", &self.count)
            .field("period", &self.period())
            .field("burst", &self.burst)
            .field("emission_interval", &self.emission_interval())
            .finish()
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {:?} (burst {})", self.count, self.period(), self.burst)
    }
}

/// Why a [`Quota`] could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// The count was zero: a quota admits at least one request per period.
    ZeroCount,
    /// The period was zero.
    ZeroPeriod,
    /// The burst was zero: a bucket holds at least one request.
    ZeroBurst,
    /// The rate is faster than 1.6 × 10¹⁶ per second (10⁶ units per tick of 1/16 ns).
    RateTooHigh {
        /// Requested count.
        count: u64,
        /// Requested period.
        period: Duration,
    },
    /// Above 16 × 10⁹ per second, the burst holds less than 1000 ticks (62.5 ns) of
    /// capacity, too little for weir to keep it to 0.1% (see `Quota`'s "Precision").
    BurstTooShort {
        /// Requested count.
        count: u64,
        /// Requested period.
        period: Duration,
        /// Requested burst.
        burst: u64,
        /// The smallest burst accepted at this rate.
        min_burst: u64,
    },
    /// Refilling the burst (`burst × period / count`) would take longer than about
    /// 9.1 years, the span weir's time arithmetic covers.
    TooLong {
        /// Requested count.
        count: u64,
        /// Requested period.
        period: Duration,
        /// Requested burst.
        burst: u64,
    },
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroCount => f.write_str("a quota's count is zero; it must admit at least 1 request per period"),
            Self::ZeroPeriod => f.write_str("a quota's period is zero; use a period of at least 1 ns"),
            Self::ZeroBurst => f.write_str("a quota's burst is zero; it must admit at least 1 request at once"),
            Self::RateTooHigh { count, period } => write!(
                f,
                "{count} per {period:?} is faster than weir can enforce to within 0.1% \
                 (1.6 × 10^16 per second); count in larger units (kilobytes, not bytes)"
            ),
            Self::BurstTooShort { count, period, burst, min_burst } => write!(
                f,
                "a burst of {burst} at {count} per {period:?} holds less than 62.5 ns of capacity, \
                 too little to enforce to within 0.1%; use a burst of at least {min_burst}"
            ),
            Self::TooLong { count, period, burst } => write!(
                f,
                "{count} per {period:?} with burst {burst} takes longer than 9 years to refill, \
                 more than weir's time arithmetic spans; lower the burst or the period"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for QuotaError {}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::ToString;

    #[test]
    fn common_quotas_are_exact() {
        let q = Quota::per_second(10).unwrap();
        assert_eq!(q.emission_interval(), Duration::from_millis(100));
        assert_eq!(q.tolerance_ticks(), 10 * 100_000_000 * 16);
        let q = Quota::per_day(1).unwrap();
        assert_eq!(q.emission_interval(), Duration::from_secs(86_400));
        let q = Quota::per_second(1_000_000_000).unwrap();
        assert_eq!(q.emission_interval_ticks(), 16);
        let q = Quota::per_second(16_000_000_000).unwrap();
        assert_eq!(q.emission_interval_ticks(), 1);
        assert!(q.is_whole_ticks());
    }

    #[test]
    fn every_rate_up_to_16_million_per_second_is_within_a_tenth_of_a_percent() {
        for count in (1..16_000_000u64).step_by(9_973).chain([3, 7, 3_000_000, 7_000_000, 15_999_999]) {
            let q = Quota::per_second(count).unwrap_or_else(|e| panic!("{count}/s: {e}"));
            let error = (q.enforced_per_second() - count as f64).abs() / count as f64;
            assert!(error <= 0.001, "{count}/s enforced as {}", q.enforced_per_second());
        }
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroCount));
        assert_eq!(Quota::new(1, Duration::ZERO), Err(QuotaError::ZeroPeriod));
        assert_eq!(Quota::per_second(1).unwrap().with_burst(0), Err(QuotaError::ZeroBurst));
        assert!(matches!(Quota::per_second(1_000_000_000_000_000_000), Err(QuotaError::RateTooHigh { .. })));
        assert!(matches!(Quota::per_second(u64::MAX), Err(QuotaError::RateTooHigh { .. })));
        assert!(matches!(Quota::new(1, Duration::MAX), Err(QuotaError::TooLong { .. })));
        assert!(matches!(Quota::new(1, Duration::from_secs(10 * 365 * 86_400)), Err(QuotaError::TooLong { .. })));
        assert!(matches!(Quota::per_day(1).unwrap().with_burst(10_000), Err(QuotaError::TooLong { .. })));
        assert!(Quota::per_day(1).unwrap().with_burst(3_000).is_ok());
    }

    #[test]
    fn byte_rates_are_accepted_and_charged_within_a_tenth_of_a_percent() {
        // 300 MB/s, 2.5 GB/s, 100 GB/s (or bits per second), and awkward counts.
        for count in [300_000_000u64, 2_500_000_000, 16_000_000_001, 99_999_999_999, 100_000_000_000] {
            let q = Quota::per_second(count).unwrap_or_else(|e| panic!("{count}/s: {e}"));
            assert!(!q.is_whole_ticks() || count == 16_000_000_001, "{count}/s: {q:?}");
            // A call of at least 1000 ticks' worth is charged within 0.1%, never less.
            let n = 1000u64.div_ceil(q.emission_interval_ticks().max(1)).max(1_000 * count / 16_000_000_000 + 1);
            let charged = q.cost_ticks(n) as f64;
            let exact = n as f64 * 16e9 / count as f64;
            assert!(charged >= exact && charged <= exact * 1.001 + 1e-9, "{count}/s, n = {n}: {charged} vs {exact}");
            // Over a long horizon too: a million such calls.
            let charged = (0..1_000_000u64).map(|_| q.cost_ticks(n) as f64).sum::<f64>();
            assert!(charged <= exact * 1e6 * 1.001, "{count}/s: {charged} vs {}", exact * 1e6);
            // A full bucket pays for the whole burst (and, rounded up to a tick, for
            // less than one tick's worth more, which checks never see: n ≤ burst).
            let held = q.units_in(q.tolerance_ticks());
            assert!(held >= count && q.cost_ticks(held - count) <= 1, "{count}/s holds {held}");
            let error = (q.enforced_per_second() - count as f64).abs() / count as f64;
            assert!(error <= 0.001, "{count}/s enforced as {}", q.enforced_per_second());
        }
        let link = Quota::per_second(300_000_000).unwrap();
        assert_eq!(link.cost(1_500), Some(Duration::from_micros(5)));
        assert_eq!(link.cost(300_000_001), None, "more than the burst never fits");
    }

    #[test]
    fn a_burst_under_a_tick_per_unit_must_hold_62_5_ns() {
        // 100 GB/s: 0.16 tick per byte; a burst of 7 bytes is 1.12 ticks, rounded up to
        // 2, which several calls could overshoot by 6 bytes: refused.
        let fast = Quota::per_second(100_000_000_000).unwrap();
        let e = fast.with_burst(7).unwrap_err();
        assert!(matches!(e, QuotaError::BurstTooShort { burst: 7, min_burst: 6_250, .. }), "{e:?}");
        assert!(e.to_string().contains("at least 6250"), "{e}");
        assert!(fast.with_burst(6_250).is_ok());
        // One tick per unit or slower: exact, any burst.
        assert!(Quota::per_second(16_000_000_000).unwrap().with_burst(1).is_ok());
        assert!(Quota::per_second(300_000_000).unwrap().with_burst(1).is_ok());
    }

    #[test]
    fn a_credit_never_exceeds_what_any_call_was_charged_for_the_same_units() {
        for count in [300_000_000u64, 2_500_000_000, 100_000_000_000, 7, 1_000] {
            let q = Quota::per_second(count).unwrap();
            for (charged, given_back) in [(6u64, 1u64), (1_500, 1_499), (7, 3), (1, 1)] {
                // Net charge of a call of `charged` with `given_back` refunded covers
                // the units kept.
                let net = q.cost_ticks(charged) - q.credit_ticks(given_back);
                assert!(net >= q.credit_ticks(charged - given_back), "{count}/s: {charged} - {given_back}");
                let exact = (charged - given_back) as f64 * 16e9 / count as f64;
                assert!(net as f64 >= exact - 1e-6, "{count}/s: net {net} < {exact}");
            }
        }
    }

    #[test]
    fn whole_tick_intervals_are_never_faster_than_asked_and_hold_exactly_the_burst() {
        for (count, period) in [(7u64, 60u64), (3, 1), (1_000_003, 1), (16_000_000, 1), (10, 1), (999_999, 7)] {
            let q = Quota::new(count, Duration::from_secs(period)).unwrap().with_burst(count.min(1_000)).unwrap();
            assert!(q.is_whole_ticks());
            assert!(q.enforced_per_second() <= count as f64 / period as f64 * (1.0 + 1e-12));
            let burst = q.burst();
            assert_eq!(q.tolerance_ticks(), burst * q.emission_interval_ticks(), "{count} per {period} s");
            assert_eq!(q.cost_ticks(burst), q.tolerance_ticks());
        }
    }

    #[test]
    fn one_unit_costs_the_interval_for_every_quota() {
        for count in [1u64, 3, 7, 10, 1_000, 16_000_000, 300_000_000, 2_500_000_000, 16_000_000_001, 100_000_000_000] {
            for period in [1u64, 7, 60] {
                let Ok(q) = Quota::new(count, Duration::from_secs(period)) else { continue };
                let Ok(q) = q.with_burst(q.burst().max(7_000)) else { continue };
                assert_eq!(q.cost_ticks(1), q.emission_interval_ticks(), "{count} per {period} s");
                assert_eq!(q.unit_slack_ticks() + q.cost_ticks(1), q.cost_ticks(q.burst()), "{count} per {period} s");
            }
        }
    }

    #[test]
    fn a_quota_travels_as_words() {
        for q in [Quota::per_second(10).unwrap(), Quota::per_second(300_000_000).unwrap()] {
            assert_eq!(Quota::from_words(q.to_words()), q);
            assert_eq!(Quota::from_words(q.to_words()).to_words(), q.to_words());
        }
    }

    #[test]
    fn a_unit_charge_credits_at_most_what_the_units_were_charged() {
        for count in [300_000_000u64, 2_500_000_000, 100_000_000_000, 3, 7, 1_000, 16_000_000_000] {
            let q = Quota::per_second(count).unwrap();
            let charge = q.unit_charge();
            assert_ne!(charge, 0);
            for n in [1u64, 3, 7, 1_500, 299_999, 300_000_000] {
                let at = Quota::credit_ticks_at(charge, n);
                assert!(at <= q.credit_ticks(n) && at + 1 >= q.credit_ticks(n), "{count}/s, {n}: {at}");
            }
        }
        // Whole ticks: exact.
        let q = Quota::per_second(10).unwrap();
        assert_eq!(Quota::credit_ticks_at(q.unit_charge(), 5), q.credit_ticks(5));
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = Quota::per_second(u64::MAX).unwrap_err().to_string();
        assert!(e.contains("within 0.1%") && e.contains("larger units"), "{e}");
        let e = Quota::per_day(1).unwrap().with_burst(10_000).unwrap_err().to_string();
        assert!(e.contains("lower the burst"), "{e}");
    }
}
