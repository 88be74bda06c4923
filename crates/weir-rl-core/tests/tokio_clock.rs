//! `TokioClock` under tokio's paused time: it reads exactly the runtime's time, so a
//! limiter built on it is tested to the nanosecond without sleeping.
#![cfg(feature = "tokio")]

use std::time::Duration;
use weir_rl_core::{Clock, Nanos, TokioClock};

#[tokio::test(start_paused = true)]
async fn reads_the_paused_runtime_time_exactly() {
    let clock = TokioClock::new();
    assert_eq!(clock.now(), Nanos::ZERO);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(clock.now(), Nanos::new(250_000_000));
    tokio::time::advance(Duration::from_nanos(7)).await;
    assert_eq!(clock.now(), Nanos::new(250_000_007));
}

#[tokio::test(start_paused = true)]
async fn clones_share_the_origin_and_new_clocks_start_at_zero() {
    let first = TokioClock::new();
    tokio::time::advance(Duration::from_secs(3)).await;
    let copy = first;
    let later = TokioClock::default();
    assert_eq!(copy.now(), first.now());
    assert_eq!(first.now(), Nanos::new(3_000_000_000));
    assert_eq!(later.now(), Nanos::ZERO);
}

#[test]
fn never_goes_backwards_outside_a_runtime() {
    let clock = TokioClock::new();
    let t = clock.now();
    assert!(clock.now() >= t);
}
