//! loom models of weir-keyed's store on a clock that moves: a check racing with an
//! eviction of the same key, while another thread moves the time past the key's
//! idle time and sweeps. Each check is decided at one reading, and a fresh state
//! (inserted after the eviction) only at a reading taken after the key was found
//! absent, so the key admits exactly what its own limiter would at those readings
//! (`loom_tests::keyed::a_check_racing_an_eviction_as_the_clock_moves`).
#![cfg(all(loom, feature = "keyed"))]

use loom_tests::keyed::a_check_racing_an_eviction_as_the_clock_moves;
use std::time::Duration;
use weir_gcra::GcraAlgorithm;
use weir_rl_core::{Nanos, Quota};

#[test]
fn gcra_eviction_racing_a_check_as_the_clock_moves() {
    // A burst of 2, one permit every 10 ns: spent at 0, idle at 20 ns.
    a_check_racing_an_eviction_as_the_clock_moves(
        || GcraAlgorithm::new(Quota::per_second(100_000_000).unwrap().with_burst(2).unwrap(), Nanos::ZERO),
        Duration::from_nanos(20),
    );
}

#[cfg(feature = "window")]
mod window {
    use super::*;
    use weir_window::fixed::FixedWindowAlgorithm;
    use weir_window::sliding::SlidingWindowAlgorithm;

    #[test]
    fn fixed_window_eviction_racing_a_check_as_the_clock_moves() {
        // 2 a second: spent at 0, idle once the next window begins.
        a_check_racing_an_eviction_as_the_clock_moves(
            || FixedWindowAlgorithm::new(Quota::per_second(2).unwrap(), Nanos::ZERO).unwrap(),
            Duration::from_secs(1),
        );
    }

    #[test]
    fn sliding_window_eviction_racing_a_check_as_the_clock_moves() {
        // 2 a second: spent at 0, idle once that window no longer weighs (2 s).
        a_check_racing_an_eviction_as_the_clock_moves(
            || SlidingWindowAlgorithm::new(Quota::per_second(2).unwrap(), Nanos::ZERO).unwrap(),
            Duration::from_secs(2),
        );
    }
}
