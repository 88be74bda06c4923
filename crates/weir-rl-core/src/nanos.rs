//! [`Nanos`]: a reading of a [`Clock`](crate::Clock), and weir's fixed-point time unit.

use core::fmt;
use core::time::Duration;

/// A point in time: nanoseconds since the origin of the [`Clock`](crate::Clock)
/// that produced it. Readings of different clocks are not comparable.
///
/// Arithmetic on `Nanos` saturates: a reading never wraps around.
///
/// ```
/// use core::time::Duration;
/// use weir_rl_core::Nanos;
///
/// let t = Nanos::new(1_500);
/// assert_eq!(t + Duration::from_nanos(500), Nanos::new(2_000));
/// assert_eq!(Nanos::MAX + Duration::from_secs(1), Nanos::MAX); // saturates
/// assert_eq!(Nanos::new(2_000).saturating_duration_since(t), Duration::from_nanos(500));
/// assert_eq!(t.saturating_duration_since(Nanos::new(2_000)), Duration::ZERO);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(u64);

impl Nanos {
    /// The clock's origin.
    pub const ZERO: Nanos = Nanos(0);
    /// The latest representable reading, about 584 years after the origin.
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// The reading `nanos` nanoseconds after the origin.
    #[inline]
    pub const fn new(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    #[inline]
    pub const fn saturating_duration_since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The time from the origin to `self`.
    #[inline]
    pub const fn since_origin(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// `self + duration`, saturating at [`Nanos::MAX`].
    #[inline]
    pub const fn saturating_add(self, duration: Duration) -> Nanos {
        Nanos(self.0.saturating_add(duration_as_nanos_saturating(duration)))
    }
}

impl core::ops::Add<Duration> for Nanos {
    type Output = Nanos;
    #[inline]
    fn add(self, rhs: Duration) -> Nanos {
        self.saturating_add(rhs)
    }
}

impl fmt::Debug for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nanos({:?})", Duration::from_nanos(self.0))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", Duration::from_nanos(self.0))
    }
}

/// `duration` in nanoseconds, saturating at `u64::MAX` (about 584 years).
#[inline]
pub const fn duration_as_nanos_saturating(duration: Duration) -> u64 {
    let nanos = duration.as_nanos();
    if nanos > u64::MAX as u128 { u64::MAX } else { nanos as u64 }
}

/// Sub-nanosecond fixed point for rate arithmetic: one tick is 1/16 ns.
///
/// Algorithms that add an emission interval per admitted request (GCRA, the leak
/// schedule) keep time in ticks so that rates up to 16 × 10⁹ per second are exact to
/// a tick, and any rate up to 16 × 10⁶ per second is within 0.1% (see
/// [`Quota`](crate::Quota)). A `u64` of ticks spans 2⁶⁰ ns, about 36.5 years, counted
/// from a limiter's creation, not from the clock's origin.
pub mod ticks {
    /// log2 of [`PER_NANO`].
    pub const SHIFT: u32 = 4;
    /// Ticks per nanosecond.
    pub const PER_NANO: u64 = 1 << SHIFT;

    /// `nanos` in ticks, saturating at `u64::MAX`.
    #[inline]
    pub const fn from_nanos(nanos: u64) -> u64 {
        if nanos > (u64::MAX >> SHIFT) { u64::MAX } else { nanos << SHIFT }
    }

    /// `ticks` in nanoseconds, rounded up: waiting this long is always enough.
    #[inline]
    pub const fn to_nanos_ceil(ticks: u64) -> u64 {
        (ticks >> SHIFT) + (ticks & (PER_NANO - 1) != 0) as u64
    }
}
