//! Where fixed and sliding windows start: at the Unix epoch's boundaries, as
//! envoyproxy/ratelimit's do.
//!
//! Upstream counts a request in the window `⌊now / unit⌋ · unit` of Unix time: a
//! minute window starts on the minute, an hour on the hour, a day at 00:00 UTC, a
//! week on a Thursday at 00:00 UTC (1970-01-01 was a Thursday), a "month" every 30
//! days and a "year" every 365 days from 1970-01-01. A client sees its counter
//! reset at those instants, and `duration_until_reset` counts down to them.
//!
//! weir's limiters read a monotonic clock (never stepping back when the system
//! clock is set), whose readings count from an arbitrary origin. So the service
//! reads the system clock once, at startup, beside the limiters' clock
//! ([`EpochOffset::now`]), and gives each window limiter the reading at which one
//! of its windows starts on an epoch boundary ([`EpochOffset::window_start`]). From
//! then on the windows follow the monotonic clock: a system clock that is stepped
//! later (an NTP correction) moves no window; one that drifts moves them by its
//! drift against the monotonic clock, until the next start.
//!
//! [`WindowAlignment::Start`] starts every window when its limiter is made
//! instead: upstream's windows are then not reproduced, but no two counters reset
//! at the same instant.
//!
//! The sliding log and GCRA have no windows.

use core::time::Duration;
use weir_rl_core::{Clock, Nanos};

/// Where windows start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WindowAlignment {
    /// At the Unix epoch's boundaries, as upstream's (the default).
    #[default]
    Epoch,
    /// When each counter's limiter is made.
    Start,
}

/// The Unix time of one reading of a limiter's clock: what places windows on the
/// epoch's boundaries.
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::{Clock, Limiter, ManualClock, Nanos, Quota};
/// use weir_rls::windows::EpochOffset;
/// use weir_window::FixedWindow;
///
/// // The clock reads 5 s when it is 12:00:45 UTC.
/// let clock = ManualClock::new();
/// clock.set(Nanos::new(5_000_000_000));
/// let offset = EpochOffset::at(clock.now(), Duration::from_secs(1_700_000_000 / 3_600 * 3_600 + 45));
/// let minute = Duration::from_secs(60);
/// let limiter = FixedWindow::builder(Quota::new(10, minute)?)
///     .window_start(offset.window_start(minute))
///     .build_with_clock(clock.clone())?;
/// // 15 s to the next whole minute of Unix time, as upstream answers.
/// assert_eq!(limiter.check().reset_after(), Duration::from_secs(15));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochOffset {
    reading: Nanos,
    unix: Duration,
}

impl EpochOffset {
    /// The system clock's Unix time now, beside `clock`'s reading. A system clock
    /// before 1970 is read as the epoch.
    pub fn now(clock: &impl Clock) -> Self {
        let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Self { reading: clock.now(), unix }
    }

    /// The reading `reading` taken at Unix time `unix`.
    pub const fn at(reading: Nanos, unix: Duration) -> Self {
        Self { reading, unix }
    }

    /// A reading of the clock at which a window of length `period` starts on a Unix
    /// epoch boundary (windows start there and every `period` before and after);
    /// [`Nanos::ZERO`] for a zero period.
    pub fn window_start(&self, period: Duration) -> Nanos {
        let period = period.as_nanos();
        if period == 0 {
            return Nanos::ZERO;
        }
        // The boundary is at reading r such that (r - reading + unix) ≡ 0, i.e.
        // r ≡ reading - unix (mod period). Both remainders are below the period,
        // which a window limiter keeps below 2^64 ns.
        let reading = u128::from(self.reading.as_u64()) % period;
        let unix = self.unix.as_nanos() % period;
        let start = (reading + period - unix) % period;
        Nanos::new(u64::try_from(start).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn boundaries_fall_on_the_epochs() {
        // Reading 0 at 1970-01-02 06:00: a day starts at reading 18 h.
        let offset = EpochOffset::at(Nanos::ZERO, DAY + Duration::from_secs(6 * 3_600));
        assert_eq!(offset.window_start(DAY), Nanos::new(18 * 3_600 * 1_000_000_000));
        // A week (Thursdays): 1970-01-08 00:00 is 5 d 18 h later.
        let week = DAY * 7;
        assert_eq!(offset.window_start(week), Nanos::new((5 * 86_400 + 18 * 3_600) * 1_000_000_000));
        // A reading past the boundary gives the same boundary modulo the period.
        let later = EpochOffset::at(Nanos::new(3_600 * 1_000_000_000), DAY + Duration::from_secs(7 * 3_600));
        assert_eq!(later.window_start(DAY), offset.window_start(DAY));
        // On a boundary: reading itself.
        let on = EpochOffset::at(Nanos::new(42), Duration::from_secs(3_600));
        assert_eq!(on.window_start(Duration::from_secs(60)), Nanos::new(42));
        assert_eq!(on.window_start(Duration::ZERO), Nanos::ZERO);
    }

    #[test]
    fn a_clock_read_near_its_maximum_saturates_nothing() {
        let offset = EpochOffset::at(Nanos::new(u64::MAX), Duration::MAX);
        let start = offset.window_start(Duration::from_secs(31_536_000));
        assert!(start.as_u64() < 31_536_000 * 1_000_000_000);
    }
}
