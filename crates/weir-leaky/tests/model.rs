//! Property tests against plain sequential reference models.
//!
//! - The ring against `VecDeque` (plus a flag for close): for any sequence of pushes,
//!   pops and closes, through many laps of the ring, it answers exactly as the model.
//! - The bucket against a reference written with plain integers: a queue, the next free
//!   slot in ticks, `slot = max(next, now − τ)`. Every answer (item, position, expected
//!   delay, retry-after, not-yet) must match.
//! - The leak rate: for any arrival pattern and any consumer timing, releases over any
//!   window `[a, b]` number at most `⌊((b − a) + τ) / T⌋ + 1`; with τ = 0, rate × window + 1.

use proptest::prelude::*;
use std::collections::VecDeque;
use std::time::Duration;
use weir_leaky::{BoundedQueue, LeakyBucket, OfferError, PopError, PushError, TryRecvError};
use weir_rl_core::{Clock, ManualClock, Nanos, Quota};

const TICKS: u64 = 16;

#[derive(Debug, Clone)]
enum QueueOp {
    Push(u16),
    Pop,
    Close,
}

fn queue_op() -> impl Strategy<Value = QueueOp> {
    prop_oneof![
        10 => any::<u16>().prop_map(QueueOp::Push),
        10 => Just(QueueOp::Pop),
        1 => Just(QueueOp::Close),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn the_ring_behaves_as_a_vecdeque(capacity in 1usize..9, ops in prop::collection::vec(queue_op(), 1..300)) {
        let queue = BoundedQueue::new(capacity).unwrap();
        let mut model = VecDeque::new();
        let mut closed = false;
        for op in ops {
            match op {
                QueueOp::Push(v) => {
                    let expected = if closed {
                        Err(PushError::Closed(v))
                    } else if model.len() == capacity {
                        Err(PushError::Full(v))
                    } else {
                        model.push_back(v);
                        Ok(())
                    };
                    prop_assert_eq!(queue.try_push(v), expected);
                }
                QueueOp::Pop => {
                    let expected = match model.pop_front() {
                        Some(v) => Ok(v),
                        None if closed => Err(PopError::Closed),
                        None => Err(PopError::Empty),
                    };
                    prop_assert_eq!(queue.pop(), expected);
                }
                QueueOp::Close => {
                    prop_assert_eq!(queue.close(), !closed);
                    closed = true;
                }
            }
            prop_assert_eq!(queue.len(), model.len());
            prop_assert_eq!(queue.is_empty(), model.is_empty());
            prop_assert_eq!(queue.is_full(), model.len() == capacity);
            prop_assert_eq!(queue.is_closed(), closed);
        }
    }
}

#[derive(Debug, Clone)]
enum BucketOp {
    Advance(u64),
    Offer,
    TryRecv,
    Close,
}

fn bucket_op() -> impl Strategy<Value = BucketOp> {
    prop_oneof![
        6 => (0u64..3_000).prop_map(BucketOp::Advance),
        1 => (0u64..50_000).prop_map(BucketOp::Advance),
        6 => Just(BucketOp::Offer),
        8 => Just(BucketOp::TryRecv),
        1 => Just(BucketOp::Close),
    ]
}

/// Leak intervals from 1 tick (16 G/s) to 1.3 µs, some not whole nanoseconds.
fn quota() -> impl Strategy<Value = Quota> {
    (1u64..40, prop_oneof![Just(1u64), Just(7), Just(100), Just(1_000)])
        .prop_filter_map("a whole number of ticks", |(c, p)| {
            Quota::new(c, Duration::from_nanos(p)).ok().filter(|q| q.is_whole_ticks())
        })
}

/// The reference: plain integers, no atomics, no saturation needed at these sizes.
struct Reference {
    items: VecDeque<u32>,
    capacity: usize,
    closed: bool,
    /// The next free slot, in ticks.
    next: u64,
    interval: u64,
    tolerance: u64,
}

fn ceil_ns(ticks: u64) -> Duration {
    Duration::from_nanos(ticks.div_ceil(TICKS))
}

impl Reference {
    fn slot(&self, now: u64) -> u64 {
        self.next.max((now * TICKS).saturating_sub(self.tolerance))
    }

    fn offer(&mut self, item: u32, now: u64) -> Result<(usize, Duration), (bool, Duration)> {
        if self.closed {
            return Err((true, Duration::ZERO));
        }
        if self.items.len() == self.capacity {
            let now = now * TICKS;
            let wait = if self.next > now { (self.next - now - 1) % self.interval + 1 } else { self.interval };
            return Err((false, ceil_ns(wait)));
        }
        let position = self.items.len();
        let due = self.slot(now) + position as u64 * self.interval;
        self.items.push_back(item);
        Ok((position, ceil_ns(due.saturating_sub(now * TICKS))))
    }

    fn try_recv(&mut self, now: u64) -> Result<u32, TryRecvError> {
        if self.items.is_empty() {
            return Err(if self.closed { TryRecvError::Closed } else { TryRecvError::Empty });
        }
        let slot = self.slot(now);
        if slot > now * TICKS {
            // The retry-after is measured to the slot rounded up to a nanosecond.
            return Err(TryRecvError::NotYet { retry_after: Duration::from_nanos(slot.div_ceil(TICKS) - now) });
        }
        self.next = slot + self.interval;
        Ok(self.items.pop_front().unwrap())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn the_bucket_decides_exactly_as_the_reference(
        q in quota(),
        capacity in 1usize..6,
        tolerance_ns in prop_oneof![Just(0u64), 0u64..5_000],
        start in 0u64..1 << 40,
        ops in prop::collection::vec(bucket_op(), 1..200),
    ) {
        let clock = ManualClock::starting_at(Nanos::new(start));
        let bucket = LeakyBucket::builder(q, capacity)
            .tolerance(Duration::from_nanos(tolerance_ns))
            .build_with_clock(clock.clone())
            .unwrap();
        let mut reference = Reference {
            items: VecDeque::new(),
            capacity,
            closed: false,
            next: 0,
            interval: q.emission_interval_ticks(),
            tolerance: tolerance_ns * TICKS,
        };
        let mut now = 0u64; // ns since the bucket's creation
        let mut next_item = 0u32;
        for op in ops {
            match op {
                BucketOp::Advance(ns) => {
                    clock.advance(Duration::from_nanos(ns));
                    now += ns;
                }
                BucketOp::Offer => {
                    let item = next_item;
                    next_item += 1;
                    let actual = bucket.offer(item);
                    match (reference.offer(item, now), actual) {
                        (Ok((position, delay)), Ok(ticket)) => {
                            prop_assert_eq!((ticket.position(), ticket.expected_delay()), (position, delay));
                        }
                        (Err((false, retry)), Err(OfferError::Full { item: back, retry_after })) => {
                            prop_assert_eq!((back, retry_after), (item, retry));
                        }
                        (Err((true, _)), Err(OfferError::Closed(back))) => prop_assert_eq!(back, item),
                        (expected, actual) => prop_assert!(false, "expected {:?}, got {:?}", expected, actual),
                    }
                }
                BucketOp::TryRecv => prop_assert_eq!(bucket.try_recv(), reference.try_recv(now)),
                BucketOp::Close => {
                    prop_assert_eq!(bucket.close(), !reference.closed);
                    reference.closed = true;
                }
            }
            prop_assert_eq!(bucket.len(), reference.items.len());
        }
    }

    /// Any arrival pattern, any consumer timing: over any window `[a, b]` of release
    /// times, at most `⌊((b − a)·16 + τ) / T⌋ + 1` releases (times in ns, T and τ in ticks).
    #[test]
    fn output_over_any_window_never_exceeds_rate_times_window_plus_one(
        q in quota(),
        capacity in 1usize..40,
        tolerance_ns in prop_oneof![3 => Just(0u64), 1 => 0u64..5_000],
        steps in prop::collection::vec((0u64..2_000, 0usize..6, 0usize..6), 1..200),
    ) {
        let clock = ManualClock::new();
        let bucket = LeakyBucket::builder(q, capacity)
            .tolerance(Duration::from_nanos(tolerance_ns))
            .build_with_clock(clock.clone())
            .unwrap();
        let mut releases = Vec::new();
        let mut accepted = 0u32;
        for (advance, offers, receives) in steps {
            clock.advance(Duration::from_nanos(advance));
            for _ in 0..offers {
                if bucket.offer(accepted).is_ok() {
                    accepted += 1;
                }
            }
            for _ in 0..receives {
                if let Ok(item) = bucket.try_recv() {
                    prop_assert_eq!(item as usize, releases.len(), "in order, exactly once");
                    releases.push(clock.now().as_u64());
                }
            }
        }
        let (t, tau) = (q.emission_interval_ticks(), tolerance_ns * TICKS);
        for i in 0..releases.len() {
            for j in i..releases.len() {
                let window = (releases[j] - releases[i]) * TICKS;
                prop_assert!(((j - i) as u64) <= (window + tau) / t,
                    "{} releases in {} ticks with T = {}, τ = {}", j - i + 1, window, t, tau);
            }
        }
    }
}
