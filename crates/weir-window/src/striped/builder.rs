//! [`StripedBuilder`]: the striped window's options and their validation.

use super::protocol::Core;
use super::{StripedMode, StripedSlidingWindow};
use crate::WindowError;
use weir_rl_core::{Clock, Nanos, Quota};

/// Builds a [`StripedSlidingWindow`]: stripes, batch, mode and window alignment.
///
/// Made by [`StripedSlidingWindow::builder`]; the setters never fail, and `build()`
/// (default clock) or `build_with_clock(clock)` validates every option and returns
/// the limiter or a [`WindowError`] naming the bad one.
///
/// ```
/// use weir_rl_core::{ManualClock, Quota};
/// use weir_window::{StripedMode, StripedSlidingWindow};
///
/// let limiter = StripedSlidingWindow::builder(Quota::per_second(1_000_000)?)
///     .stripes(16)
///     .batch(1_000) // 0.1% of the limit
///     .mode(StripedMode::Approximate)
///     .build_with_clock(ManualClock::new())?;
/// assert_eq!((limiter.stripes(), limiter.batch()), (16, 1_000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StripedBuilder {
    pub(super) quota: Quota,
    pub(super) stripes: Option<usize>,
    pub(super) batch: Option<u64>,
    pub(super) mode: StripedMode,
    pub(super) window_start: Nanos,
}

impl StripedBuilder {
    /// A builder for `quota` (`count` per `period`): exact mode, one stripe per
    /// hardware thread (1 without `std`), batch `max(1, limit / 1024)`, windows
    /// starting at the clock's origin.
    pub(super) fn new(quota: Quota) -> Self {
        Self { quota, stripes: None, batch: None, mode: StripedMode::Exact, window_start: Nanos::ZERO }
    }

    /// The number of stripes, rounded up to a power of two; 1 to [`MAX_STRIPES`](super::MAX_STRIPES).
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

    /// The limiter, on the default [`MonotonicClock`](weir_rl_core::MonotonicClock).
    #[cfg(feature = "std")]
    pub fn build(self) -> Result<StripedSlidingWindow<weir_rl_core::MonotonicClock>, WindowError> {
        self.build_with_clock(weir_rl_core::MonotonicClock::new())
    }
}
