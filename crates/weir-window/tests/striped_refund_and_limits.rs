//! The striped window's refund of an admission that took nothing, and what its
//! "limit too large" error names.

use std::time::Duration;
use weir_rl_core::{ManualClock, Quota};
use weir_window::{StripedSlidingWindow, WindowError};

/// A check of 0 took nothing, so a refund against it gives nothing back, whatever
/// `n` it names (it used to give back `n` from the window: 5 of 10 again).
#[test]
fn a_refund_against_a_zero_cost_admission_credits_nothing() {
    let limiter = StripedSlidingWindow::builder(Quota::per_second(10).unwrap())
        .stripes(1)
        .batch(1)
        .build_with_clock(ManualClock::new())
        .unwrap();
    assert!(limiter.check_n_on(0, 10).unwrap().is_allowed());
    let free = limiter.check_n_on(0, 0).unwrap();
    assert!(free.is_allowed());
    limiter.refund(5, &free).unwrap();
    assert_eq!(limiter.snapshot().remaining(), 0);
    assert!(limiter.check_n_on(0, 1).unwrap().is_denied());
}

fn build(limit: u64, batch: u64) -> Result<StripedSlidingWindow<ManualClock>, WindowError> {
    let quota = Quota::new(limit, Duration::from_nanos(1 << 50)).unwrap();
    StripedSlidingWindow::builder(quota).stripes(1).batch(batch).build_with_clock(ManualClock::new())
}

fn max_limit(error: WindowError) -> u64 {
    match error {
        WindowError::LimitTooLarge { max_limit, .. } => max_limit,
        other => panic!("{other:?}"),
    }
}

/// The limit a striped window's error names is the largest that fits with the
/// batch asked for, not the largest that fits at all: the count fields hold the
/// limit plus the batch, and a smaller batch fits a larger limit. The message says
/// so.
#[test]
fn the_largest_limit_named_is_the_largest_for_the_batch_asked_for() {
    let batch = 1 << 40;
    let error = build(u64::MAX, batch).err().unwrap();
    let named = max_limit(error);
    assert!(build(named, batch).is_ok(), "the named limit builds with the batch");
    assert!(build(named + 1, batch).is_err(), "and is the largest that does");
    assert!(build(named + 1, 1).is_ok(), "a smaller batch fits a larger limit");
    assert!(max_limit(build(u64::MAX, 1).err().unwrap()) > named);
    let message = error.to_string();
    assert!(message.contains(&format!("at most {named} per")), "{message}");
    assert!(message.contains("batch"), "the message says the limit named is for the batch: {message}");
}
