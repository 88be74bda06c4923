//! A check of 0 takes nothing from a window, so a refund against its admission gives
//! nothing back, whatever `n` it names: the units it would give back were taken by
//! other admissions.

use weir_rl_core::{Limiter, ManualClock, Quota};
use weir_window::{FixedWindow, SlidingLog, SlidingWindow};

/// Spends the whole window, takes an admission of 0, refunds 5 against it: the
/// window must stay spent.
fn a_refund_against_an_admission_of_zero_gives_nothing_back(limiter: &dyn Limiter) {
    let spent = limiter.check_n(10).unwrap();
    assert!(spent.is_allowed());
    let free = limiter.check_n(0).unwrap();
    assert!(free.is_allowed());
    limiter.refund(5, &free).unwrap();
    assert_eq!(limiter.snapshot().remaining(), 0);
    assert!(limiter.check().is_denied());
    // An admission that took something is still refunded.
    limiter.refund(3, &spent).unwrap();
    assert_eq!(limiter.snapshot().remaining(), 3);
}

fn quota() -> Quota {
    Quota::per_second(10).unwrap()
}

#[test]
fn fixed_window() {
    a_refund_against_an_admission_of_zero_gives_nothing_back(
        &FixedWindow::with_clock(quota(), ManualClock::new()).unwrap(),
    );
}

#[test]
fn sliding_window() {
    a_refund_against_an_admission_of_zero_gives_nothing_back(
        &SlidingWindow::with_clock(quota(), ManualClock::new()).unwrap(),
    );
}

#[test]
fn sliding_log() {
    a_refund_against_an_admission_of_zero_gives_nothing_back(
        &SlidingLog::with_clock(quota(), ManualClock::new()).unwrap(),
    );
}
