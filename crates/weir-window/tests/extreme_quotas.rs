//! Quotas at the edges of what `Quota` accepts (limits up to `u64::MAX`, windows
//! from 1 ns to years): every builder either refuses the quota with a typed error
//! or builds a limiter that enforces it exactly. None panics, in debug or release.

use proptest::prelude::*;
use std::time::Duration;
use weir_rl_core::{Limiter, ManualClock, Nanos, Quota};
use weir_window::{FixedWindow, SlidingLog, SlidingWindow, StripedMode, StripedSlidingWindow, WindowError};

/// The striped window's count fields hold `limit + batch`: a limit near `u64::MAX`
/// is refused at build time (it used to overflow that sum: a panic in debug, and in
/// release a limiter whose counts wrapped).
#[test]
fn the_striped_window_refuses_a_limit_its_counts_cannot_hold() {
    let quota = Quota::new(u64::MAX, Duration::from_nanos(1 << 50)).unwrap();
    let built = StripedSlidingWindow::builder(quota).stripes(1).build_with_clock(ManualClock::new());
    assert!(matches!(built, Err(WindowError::LimitTooLarge { limit: u64::MAX, .. })), "{built:?}");

    let quota = Quota::new((1 << 63) + 1, Duration::from_nanos(1 << 50)).unwrap();
    for mode in [StripedMode::Exact, StripedMode::Approximate] {
        let built = StripedSlidingWindow::builder(quota)
            .stripes(1)
            .batch(quota.count())
            .mode(mode)
            .build_with_clock(ManualClock::new());
        let Err(WindowError::LimitTooLarge { max_limit, .. }) = built else { panic!("{mode:?}: {built:?}") };
        assert!(max_limit > 0 && max_limit < 1 << 62, "{max_limit}");
        // The limit the error names builds, with a batch as large as itself.
        let named = Quota::new(max_limit, Duration::from_nanos(1 << 50)).unwrap();
        let l = StripedSlidingWindow::builder(named)
            .stripes(1)
            .batch(max_limit)
            .mode(mode)
            .build_with_clock(ManualClock::new())
            .unwrap();
        if mode == StripedMode::Exact {
            exact_at_one_instant(&l, max_limit, "striped at the named limit");
        }
    }
}

/// A limit whose count fields fit is still admitted exactly, up to the largest the
/// error names.
#[test]
fn the_largest_striped_limit_named_by_the_error_builds_and_is_exact() {
    let period = Duration::from_nanos(1 << 50);
    let quota = Quota::new(u64::MAX, period).unwrap();
    let Err(WindowError::LimitTooLarge { max_limit, .. }) =
        StripedSlidingWindow::builder(quota).stripes(1).batch(1).build_with_clock(ManualClock::new())
    else {
        panic!("u64::MAX must be refused")
    };
    let quota = Quota::new(max_limit, period).unwrap();
    let limiter =
        StripedSlidingWindow::builder(quota).stripes(1).batch(1).build_with_clock(ManualClock::new()).unwrap();
    exact_at_one_instant(&limiter, max_limit, "striped at its largest limit");
}

/// From a fresh limiter at one instant: the whole limit in one call, then nothing.
fn exact_at_one_instant(limiter: &dyn Limiter, limit: u64, name: &str) {
    let all = limiter.check_n(limit).unwrap();
    assert!(all.is_allowed(), "{name}: the whole limit of {limit} at once");
    assert_eq!(all.remaining(), 0, "{name}");
    assert!(limiter.check().is_denied(), "{name}: one over the limit of {limit}");
    assert_eq!(limiter.snapshot().remaining(), 0, "{name}");
    assert!(limiter.check_n(limit + (limit < u64::MAX) as u64).is_err() || limit == u64::MAX, "{name}");
}

fn extreme_count() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u64::MAX - 1),
        (0u32..64).prop_map(|k| 1u64 << k),
        (1u32..64).prop_map(|k| (1u64 << k) - 1),
        (0u32..63).prop_map(|k| (1u64 << k) + 1),
        any::<u64>().prop_map(|c| c.max(1)),
    ]
}

fn extreme_period_ns() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1u64),
        Just(1_000_000_000),
        (0u32..64).prop_map(|k| 1u64 << k),
        any::<u64>().prop_map(|p| p.max(1))
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Every window builder, for any quota `Quota` accepts: an error, or a limiter
    /// that admits exactly its limit at one instant (the striped window in exact
    /// mode; in approximate mode at most one batch more, its stated bound).
    #[test]
    fn every_builder_errors_or_is_exact(
        count in extreme_count(),
        period_ns in extreme_period_ns(),
        batch_choice in 0u8..3,
        start in prop_oneof![Just(0u64), Just(u64::MAX / 2), any::<u64>()],
    ) {
        let Ok(quota) = Quota::new(count, Duration::from_nanos(period_ns)) else { return Ok(()) };
        let clock = ManualClock::starting_at(Nanos::new(start));
        if let Ok(l) = FixedWindow::with_clock(quota, clock.clone()) {
            exact_at_one_instant(&l, count, "fixed");
        }
        if let Ok(l) = SlidingWindow::with_clock(quota, clock.clone()) {
            exact_at_one_instant(&l, count, "sliding");
        }
        if count <= 1 << 16 && let Ok(l) = SlidingLog::with_clock(quota, clock.clone()) {
            exact_at_one_instant(&l, count, "log");
        }
        let batch = match batch_choice { 0 => 1, 1 => (count / 2).max(1), _ => count };
        for mode in [StripedMode::Exact, StripedMode::Approximate] {
            let built = StripedSlidingWindow::builder(quota).stripes(2).batch(batch).mode(mode).build_with_clock(clock.clone());
            let Ok(l) = built else { continue };
            match mode {
                StripedMode::Exact => exact_at_one_instant(&l, count, "striped exact"),
                _ => {
                    prop_assert!(l.check_n(count).unwrap().is_allowed());
                    let extra = (0..3).filter(|_| l.check().is_allowed()).count() as u64;
                    prop_assert!(extra < batch.max(1) || extra == 0, "striped approximate: {extra} over, batch {batch}");
                    prop_assert!(l.snapshot().remaining() <= count);
                }
            }
        }
    }
}

/// The module docs' bound: `limit + batch` may take up to 61 bits when the window
/// is long enough for the few window numbers left.
#[test]
fn count_fields_take_up_to_61_bits() {
    let period = Duration::from_nanos(1 << 58); // the longest window a `Quota` accepts
    let fits = Quota::new(1 << 60, period).unwrap();
    let l = StripedSlidingWindow::builder(fits).stripes(1).batch(1).build_with_clock(ManualClock::new()).unwrap();
    exact_at_one_instant(&l, 1 << 60, "61 bits");
    let too_wide = Quota::new(1 << 61, period).unwrap();
    let built = StripedSlidingWindow::builder(too_wide).stripes(1).batch(1).build_with_clock(ManualClock::new());
    assert!(matches!(built, Err(WindowError::LimitTooLarge { .. })), "{built:?}");
}
