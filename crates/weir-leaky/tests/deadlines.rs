//! Deadlines that have passed, or that fall before the clock's origin, on a clock that
//! moves forward by 1 ns every time it is read: each reading is later than the one
//! before, as on a real clock, but deterministically. A wrong result is an assertion
//! failure, never a hang: every wait here is for a time the clock reaches within a few
//! hundred readings.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weir_leaky::{LeakSchedule, LeakyBucket, RecvTimeoutError, TryRecvError};
use weir_rl_core::{Clock, Nanos, Quota};

/// A clock that reads 1 ns later every time it is read ("re-reading the clock moves
/// time"), and that a test can set, backwards too.
#[derive(Debug, Clone, Default)]
struct SteppingClock(Arc<AtomicU64>);

impl SteppingClock {
    fn starting_at(ns: u64) -> Self {
        Self(Arc::new(AtomicU64::new(ns)))
    }

    fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::Relaxed);
    }

    /// The next reading, without taking it.
    fn peek(&self) -> Nanos {
        Nanos::new(self.0.load(Ordering::Relaxed))
    }
}

impl Clock for SteppingClock {
    fn now(&self) -> Nanos {
        Nanos::new(self.0.fetch_add(1, Ordering::Relaxed))
    }
}

fn stepping_bucket(per_second: u64, start: u64) -> (LeakyBucket<u32, SteppingClock>, SteppingClock) {
    let clock = SteppingClock::starting_at(start);
    (LeakyBucket::with_clock(Quota::per_second(per_second).unwrap(), 4, clock.clone()).unwrap(), clock)
}

#[test]
fn a_zero_timeout_takes_an_item_that_is_due_now() {
    let (bucket, _clock) = stepping_bucket(10, 1_000);
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    // Item 1 is due now: a zero time-out takes it, as `try_recv` would.
    assert_eq!(bucket.recv_timeout(Duration::ZERO), Ok(1));
    // Item 2 is due in 100 ms: a zero time-out gives up at once and spends nothing.
    let next = bucket.schedule().next_slot(&bucket.clock().peek());
    assert_eq!(bucket.recv_timeout(Duration::ZERO), Err(RecvTimeoutError::Timeout));
    assert_eq!(bucket.schedule().next_slot(&bucket.clock().peek()), next, "no slot spent");
    assert_eq!(bucket.len(), 1);
    assert!(matches!(bucket.try_recv(), Err(TryRecvError::NotYet { .. })));
}

#[test]
fn a_passed_deadline_takes_an_item_that_is_due_now() {
    let (bucket, clock) = stepping_bucket(10, 1_000);
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    clock.set(5_000);
    assert_eq!(bucket.recv_deadline(Nanos::new(4_000)), Ok(1));
    assert_eq!(bucket.recv_deadline(Nanos::new(4_000)), Err(RecvTimeoutError::Timeout));
    // Once item 2's slot (100 ms after item 1's) is due, a passed deadline takes it.
    clock.set(200_000_000);
    assert_eq!(bucket.recv_deadline(Nanos::new(4_000)), Ok(2));
}

#[test]
fn a_deadline_before_the_clocks_origin_claims_no_slot_and_returns_in_time() {
    // Built at 1 000 ns; the clock then steps back to 500 (a backwards step). The
    // first slot is at the origin, 1 000: later than a deadline of 600, so the call
    // gives up at once rather than wait for a slot past its deadline.
    let (bucket, clock) = stepping_bucket(10, 1_000);
    bucket.offer(1).unwrap();
    clock.set(500);
    assert_eq!(bucket.recv_deadline(Nanos::new(600)), Err(RecvTimeoutError::Timeout));
    assert!(clock.peek() <= Nanos::new(600), "overran the deadline: the clock reads {:?}", clock.peek());
    assert_eq!(bucket.len(), 1, "the item is still there");
    // And no slot was spent: the item leaves at the origin.
    clock.set(1_000);
    assert_eq!(bucket.try_recv(), Ok(1));
}

#[test]
fn claim_by_never_claims_a_slot_later_than_its_bound() {
    let origin = Nanos::new(1_000);
    let schedule = LeakSchedule::new(Quota::per_second(10).unwrap(), origin).unwrap();
    // A frozen clock before the origin, a bound before the origin: nothing can be
    // claimed (every slot is at or after the origin); the answer is when the first is.
    for (now, latest) in [(500, 600), (0, 0), (999, 999), (500, 999)] {
        match schedule.claim_by(&Nanos::new(now), Nanos::new(latest)) {
            Ok(slot) => panic!("claimed a slot at {:?}, after its bound {latest} ns", slot.at()),
            Err(at) => assert_eq!(at, origin),
        }
    }
    assert_eq!(schedule.try_claim(&Nanos::new(500)).unwrap_err(), Duration::from_nanos(500));
    // A bound at the origin takes the slot at the origin.
    let slot = schedule.claim_by(&Nanos::new(500), origin).unwrap();
    assert_eq!(slot.at(), origin);
    // Read at 1 000 + 1 ns, a bound of 1 000 that has just passed still takes a slot
    // that is due now (here the next one is not: 100 ms later).
    assert_eq!(schedule.claim_by(&Nanos::new(1_001), origin).unwrap_err(), Nanos::new(100_001_000));
    // Read 5 ns after the slot at 100 ms + 1 µs came due, a bound that passed 5 ns ago
    // takes the slot, due now, as `try_claim` would.
    let slot = schedule.claim_by(&Nanos::new(100_001_005), Nanos::new(100_001_000)).unwrap();
    assert_eq!(slot.at(), Nanos::new(100_001_005));
}

#[cfg(feature = "tokio")]
mod on_tokio {
    use super::*;
    use weir_leaky::{Throttle, ThrottleError};

    #[tokio::test]
    async fn a_zero_timeout_takes_an_item_that_is_due_now_async() {
        let (bucket, _clock) = stepping_bucket(10, 1_000);
        bucket.offer(7).unwrap();
        bucket.offer(8).unwrap();
        assert_eq!(bucket.recv_async_timeout(Duration::ZERO).await, Ok(7));
        assert_eq!(bucket.recv_async_timeout(Duration::ZERO).await, Err(RecvTimeoutError::Timeout));
    }

    #[tokio::test]
    async fn an_idle_throttle_lets_a_zero_timeout_through() {
        let throttle = Throttle::with_clock(Quota::per_second(10).unwrap(), 4, SteppingClock::starting_at(0)).unwrap();
        assert_eq!(throttle.acquire_timeout(Duration::ZERO).await, Ok(()));
        // The next turn is 100 ms away: a zero time-out gives up at once.
        assert_eq!(throttle.acquire_timeout(Duration::ZERO).await, Err(ThrottleError::TimedOut));
    }
}
