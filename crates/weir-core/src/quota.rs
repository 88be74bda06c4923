//! [`Quota`]: "N per period, with a burst", validated once, at construction.

use crate::nanos::ticks;
use core::fmt;
use core::time::Duration;

/// The longest span any quota may need to refill its burst, in ticks: 2⁶² ticks =
/// 2⁵⁸ ns, about 9.1 years. Keeping two bits of headroom below `u64::MAX` means a
/// theoretical arrival time (now + burst × interval) cannot overflow for the first
/// 27 years of a limiter's life, and saturates, never wraps, after that.
pub const MAX_TOLERANCE_TICKS: u64 = 1 << 62;

/// How far the enforced rate may be from the requested one: 1 part in 1000 (0.1%).
const PRECISION_PARTS: u128 = 1000;

/// A rate limit: `count` requests per `period`, with up to `burst` admitted back to
/// back from a full bucket.
///
/// Built by [`Quota::per_second`] and friends, or [`Quota::new`] for any period; the
/// burst defaults to `count` and is changed with [`Quota::with_burst`]. Every
/// constructor validates, so a `Quota` in hand is always usable:
///
/// - `count`, `period` and `burst` are non-zero;
/// - the emission interval `period / count` is at least one tick (1/16 ns: rates up to
///   16 × 10⁹ per second) and is represented in ticks to within 0.1% (any rate up to
///   16 × 10⁶ per second, and above that rates whose interval is near a multiple of
///   1/16 ns, such as 10⁹ per second);
/// - refilling the whole burst (`burst × interval`) takes at most about 9.1 years.
///
/// ```
/// use weir_core::{Quota, QuotaError};
/// use std::time::Duration;
///
/// let api = Quota::per_minute(600)?.with_burst(20)?;
/// assert_eq!(api.emission_interval(), Duration::from_millis(100));
/// assert_eq!(api.burst(), 20);
///
/// assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroCount));
/// assert!(Quota::per_second(1_000_000_000).is_ok()); // one per nanosecond
/// assert!(matches!(
///     Quota::per_second(300_000_000), // 3.33 ns: 53.3 ticks, 0.6% off
///     Err(QuotaError::ImpreciseRate { .. })
/// ));
/// # Ok::<(), QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    count: u64,
    period_ns: u64,
    burst: u64,
    /// `period / count` in ticks, rounded to nearest (within 0.1%, validated).
    interval_ticks: u64,
    /// `burst × interval_ticks`, at most [`MAX_TOLERANCE_TICKS`].
    tolerance_ticks: u64,
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
        let scaled = period_nanos * ticks::PER_NANO as u128;
        if scaled < count as u128 {
            return Err(QuotaError::RateTooHigh { count, period });
        }
        let interval = (scaled + count as u128 / 2) / count as u128;
        let enforced = interval * count as u128;
        let error = enforced.abs_diff(scaled);
        if error * PRECISION_PARTS > scaled {
            return Err(QuotaError::ImpreciseRate { count, period });
        }
        if interval * count as u128 > MAX_TOLERANCE_TICKS as u128 {
            return Err(QuotaError::TooLong { count, period, burst: count });
        }
        let interval = interval as u64;
        Ok(Self {
            count,
            period_ns: period_nanos as u64,
            burst: count,
            interval_ticks: interval,
            tolerance_ticks: count * interval,
        })
    }

    /// The same rate with up to `burst` requests admitted back to back from a full
    /// bucket.
    pub const fn with_burst(self, burst: u64) -> Result<Self, QuotaError> {
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        if burst as u128 * self.interval_ticks as u128 > MAX_TOLERANCE_TICKS as u128 {
            return Err(QuotaError::TooLong { count: self.count, period: self.period(), burst });
        }
        Ok(Self { burst, tolerance_ticks: burst * self.interval_ticks, ..self })
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
        Duration::from_nanos((self.interval_ticks + ticks::PER_NANO / 2) >> ticks::SHIFT)
    }

    /// The emission interval in ticks (1/16 ns), exactly as enforced.
    pub const fn emission_interval_ticks(&self) -> u64 {
        self.interval_ticks
    }

    /// `burst × emission interval` in ticks: how long an empty bucket takes to
    /// refill completely. Never above [`MAX_TOLERANCE_TICKS`].
    pub const fn tolerance_ticks(&self) -> u64 {
        self.tolerance_ticks
    }

    /// The quota as words, for [`QuotaCell`](crate::QuotaCell).
    pub(crate) const fn to_words(self) -> [u64; 5] {
        [self.count, self.period_ns, self.burst, self.interval_ticks, self.tolerance_ticks]
    }

    /// The inverse of [`to_words`](Self::to_words), for words that came from it.
    pub(crate) const fn from_words(words: [u64; 5]) -> Self {
        Self {
            count: words[0],
            period_ns: words[1],
            burst: words[2],
            interval_ticks: words[3],
            tolerance_ticks: words[4],
        }
    }

    /// The rate actually enforced, in requests per second (within 0.1% of
    /// `count / period`).
    pub fn enforced_per_second(&self) -> f64 {
        1e9 * ticks::PER_NANO as f64 / self.interval_ticks as f64
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("count", &self.count)
            .field("period", &self.period())
            .field("burst", &self.burst)
            .field("emission_interval_ticks", &self.interval_ticks)
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
    /// The rate is faster than one request per tick (1/16 ns).
    RateTooHigh {
        /// Requested count.
        count: u64,
        /// Requested period.
        period: Duration,
    },
    /// The emission interval `period / count` is not within 0.1% of a whole number of
    /// ticks (1/16 ns), so the rate cannot be enforced to within 0.1%.
    ImpreciseRate {
        /// Requested count.
        count: u64,
        /// Requested period.
        period: Duration,
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
                "{count} per {period:?} is faster than one request per 1/16 ns \
                 (16 billion per second), the finest rate weir represents"
            ),
            Self::ImpreciseRate { count, period } => {
                let scaled = period.as_nanos() * ticks::PER_NANO as u128;
                let lower = scaled / count as u128;
                let (faster, slower) = (scaled as f64 / lower as f64, scaled as f64 / (lower + 1) as f64);
                write!(
                    f,
                    "{count} per {period:?} cannot be enforced to within 0.1%: its interval is not \
                     close to a multiple of 1/16 ns; the nearest enforceable rates are about \
                     {slower:.0} and {faster:.0} per {period:?} (any rate up to 16 million per \
                     second is enforceable)"
                )
            }
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
        assert!(matches!(Quota::per_second(17_000_000_000), Err(QuotaError::RateTooHigh { .. })));
        assert!(matches!(Quota::per_second(u64::MAX), Err(QuotaError::RateTooHigh { .. })));
        assert!(matches!(Quota::per_second(300_000_000), Err(QuotaError::ImpreciseRate { .. })));
        assert!(matches!(Quota::new(1, Duration::MAX), Err(QuotaError::TooLong { .. })));
        assert!(matches!(Quota::new(1, Duration::from_secs(10 * 365 * 86_400)), Err(QuotaError::TooLong { .. })));
        assert!(matches!(Quota::per_day(1).unwrap().with_burst(10_000), Err(QuotaError::TooLong { .. })));
        assert!(Quota::per_day(1).unwrap().with_burst(3_000).is_ok());
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = Quota::per_second(300_000_000).unwrap_err().to_string();
        assert!(e.contains("within 0.1%") && e.contains("nearest enforceable"), "{e}");
        let e = Quota::per_day(1).unwrap().with_burst(10_000).unwrap_err().to_string();
        assert!(e.contains("lower the burst"), "{e}");
    }
}
