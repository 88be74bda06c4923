//! The window limiters as benchmark subjects.
//!
//! Allowed-path quotas must stay above the check rate (10⁹ per second) and within
//! each limiter's encoding: the fixed window and the striped window take 10⁹ per
//! second directly; the one-word sliding counter holds that rate only as 16 per
//! 16 ns (its packed counts bound the limit per window length: 131 071 per second);
//! the sliding log holds it as 10⁶ per ms (a ring of 10⁶ timestamps, 8 MB).

pub use crate::check::Weir;
use std::time::Duration;
use weir_rl_core::{Clock, Limiter, MonotonicClock, Quota};
use weir_window::{FixedWindow, SlidingLog, SlidingWindow, StripedMode, StripedSlidingWindow};

fn quota(count: u64, period: Duration) -> Quota {
    Quota::new(count, period).expect("a valid quota")
}

fn closed() -> Quota {
    Quota::per_hour(1).expect("a valid quota")
}

fn drained<L: Limiter>(limiter: L) -> Weir<L> {
    let _ = limiter.check();
    Weir(limiter)
}

/// A fixed window that never runs out.
pub fn fixed_open() -> Weir<FixedWindow<MonotonicClock>> {
    Weir(FixedWindow::new(quota(1_000_000_000, Duration::from_secs(1))).expect("a valid window"))
}

/// A fixed window that is empty for the next hour.
pub fn fixed_closed() -> Weir<FixedWindow<MonotonicClock>> {
    drained(FixedWindow::new(closed()).expect("a valid window"))
}

/// A sliding counter that never runs out (16 per 16 ns).
pub fn sliding_open() -> Weir<SlidingWindow<MonotonicClock>> {
    Weir(SlidingWindow::new(quota(16, Duration::from_nanos(16))).expect("a valid window"))
}

/// A sliding counter that is empty for the next hour.
pub fn sliding_closed() -> Weir<SlidingWindow<MonotonicClock>> {
    drained(SlidingWindow::new(closed()).expect("a valid window"))
}

/// A sliding log that never runs out (10⁶ per ms).
pub fn log_open() -> Weir<SlidingLog<MonotonicClock>> {
    Weir(SlidingLog::new(quota(1_000_000, Duration::from_millis(1))).expect("a valid log"))
}

/// A sliding log that is empty for the next hour.
pub fn log_closed() -> Weir<SlidingLog<MonotonicClock>> {
    drained(SlidingLog::new(closed()).expect("a valid log"))
}

/// A striped sliding window, one stripe per core, that never runs out.
pub fn striped_open(mode: StripedMode) -> Weir<StripedSlidingWindow<MonotonicClock>> {
    Weir(
        StripedSlidingWindow::builder(quota(1_000_000_000, Duration::from_secs(1)))
            .mode(mode)
            .build()
            .expect("a valid window"),
    )
}

/// A striped sliding window that is empty for the next hour.
pub fn striped_closed(mode: StripedMode) -> Weir<StripedSlidingWindow<MonotonicClock>> {
    drained(StripedSlidingWindow::builder(closed()).mode(mode).build().expect("a valid window"))
}

/// A limiter with `clock`, for the accuracy and compare suites.
pub fn with_clock<C>(quota: Quota, clock: C, kind: WindowKind) -> Box<dyn Limiter + Send + Sync>
where
    C: Clock + Send + Sync + 'static,
{
    match kind {
        WindowKind::Fixed => Box::new(FixedWindow::with_clock(quota, clock).expect("a valid window")),
        WindowKind::Sliding => Box::new(SlidingWindow::with_clock(quota, clock).expect("a valid window")),
        WindowKind::Log => Box::new(SlidingLog::with_clock(quota, clock).expect("a valid log")),
        WindowKind::StripedExact => Box::new(
            StripedSlidingWindow::builder(quota)
                .mode(StripedMode::Exact)
                .build_with_clock(clock)
                .expect("a valid window"),
        ),
        WindowKind::StripedApproximate => Box::new(
            StripedSlidingWindow::builder(quota)
                .mode(StripedMode::Approximate)
                .build_with_clock(clock)
                .expect("a valid window"),
        ),
    }
}

/// Which window limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// [`FixedWindow`].
    Fixed,
    /// [`SlidingWindow`].
    Sliding,
    /// [`SlidingLog`].
    Log,
    /// [`StripedSlidingWindow`], exact mode.
    StripedExact,
    /// [`StripedSlidingWindow`], approximate mode.
    StripedApproximate,
}
