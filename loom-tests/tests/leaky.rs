//! loom models of weir-leaky's atomic protocols: the Vyukov ring (push, pop, close,
//! drop), the leak schedule (claims and give-backs), the bucket's reservations, and
//! the blocking consumers' wake-up protocol.
//!
//! The ring models check linearizability against `VecDeque`: what the threads saw
//! (every push and pop result) and what is left in the queue afterwards must be
//! exactly what running the same operations one at a time, in some order that keeps
//! each thread's program order, gives. That covers "no item lost, duplicated or
//! reordered per producer" and "full and empty only when true". Models where a thread
//! waits on another (a stalled consumer, a closed bucket) assert progress: loom fails
//! a model that deadlocks.
#![cfg(all(loom, feature = "leaky"))]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;
use loom_tests::{RealTime, Span, linearizations};
use std::collections::VecDeque;
use std::time::Duration;
use weir_leaky::{
    BoundedQueue, LeakSchedule, LeakSlot, LeakyBucket, PopError, PushError, RecvError, RecvTimeoutError, TryRecvError,
};
use weir_rl_core::{Clock, ManualClock, Nanos, Quota};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Push(u8),
    Pop,
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Pushed(Result<(), PushError<u8>>),
    Popped(Result<u8, PopError>),
    Closed(bool),
}

fn apply(queue: &BoundedQueue<u8>, op: Op) -> Outcome {
    match op {
        Op::Push(v) => Outcome::Pushed(queue.try_push(v)),
        Op::Pop => Outcome::Popped(queue.pop()),
        Op::Close => Outcome::Closed(queue.close()),
    }
}

/// The sequential reference.
struct Reference {
    items: VecDeque<u8>,
    capacity: usize,
    closed: bool,
}

impl Reference {
    fn apply(&mut self, op: Op) -> Outcome {
        match op {
            Op::Push(v) if self.closed => Outcome::Pushed(Err(PushError::Closed(v))),
            Op::Push(v) if self.items.len() == self.capacity => Outcome::Pushed(Err(PushError::Full(v))),
            Op::Push(v) => {
                self.items.push_back(v);
                Outcome::Pushed(Ok(()))
            }
            Op::Pop => Outcome::Popped(match self.items.pop_front() {
                Some(v) => Ok(v),
                None if self.closed => Err(PopError::Closed),
                None => Err(PopError::Empty),
            }),
            Op::Close => {
                let first = !self.closed;
                self.closed = true;
                Outcome::Closed(first)
            }
        }
    }
}

/// Runs `threads` concurrently on a queue of `capacity` (after `prefill` pushes) and
/// asserts that the outcomes and the items left equal those of some linearization
/// (program order and real-time precedence kept).
fn assert_linearizable(capacity: usize, prefill: &[u8], threads: Vec<Vec<Op>>) {
    let threads = std::sync::Arc::new(threads);
    let prefill = prefill.to_vec();
    loom::model(move || {
        let queue = Arc::new(BoundedQueue::new(capacity).unwrap());
        for &v in &prefill {
            queue.try_push(v).unwrap();
        }
        let clock = Arc::new(RealTime::new());
        let handles: Vec<_> = (0..threads.len())
            .map(|t| {
                let (queue, threads, clock) = (queue.clone(), threads.clone(), clock.clone());
                thread::spawn(move || threads[t].iter().map(|&op| clock.time(|| apply(&queue, op))).collect::<Vec<_>>())
            })
            .collect();
        let (seen, spans): (Vec<Vec<Outcome>>, Vec<Vec<Span>>) =
            handles.into_iter().map(|h| h.join().unwrap().into_iter().unzip()).unzip();
        let left: Vec<u8> = std::iter::from_fn(|| queue.pop().ok()).collect();

        let explained = linearizations(&threads, &spans).into_iter().any(|history| {
            let mut reference = Reference { items: prefill.iter().copied().collect(), capacity, closed: false };
            let mut next = vec![0; threads.len()];
            history.into_iter().all(|(t, op)| {
                let observed = seen[t][next[t]];
                next[t] += 1;
                reference.apply(op) == observed
            }) && reference.items.iter().copied().eq(left.iter().copied())
        });
        assert!(explained, "no linearization explains {seen:?} (spans {spans:?}) leaving {left:?}");
    });
}

// A note on model shapes. The ring's one blocking corner makes a thread wait (yield
// in a loop) for another thread preempted mid-operation. loom's scheduler is not fair
// among yielding threads: with two threads waiting on the same preempted third, it
// explores the endless schedule in which only the two waiters run, and gives up
// ("exceeded maximum number of branches"). So every model below lets at most one
// thread wait at a time: the models that wrap the ring round (where pushes wait for
// pops) have two threads; three-thread models stay within one lap, where only a pop
// can wait (for a producer that claimed its slot and has not written it yet).

#[test]
fn producer_and_consumer_crossing_laps() {
    // Capacity 1: every push after the first waits for, or races with, a pop.
    assert_linearizable(1, &[], vec![vec![Op::Push(1), Op::Push(2)], vec![Op::Pop, Op::Pop]]);
}

#[test]
fn push_pop_pairs_on_a_full_ring() {
    // Both threads push into and pop from a full ring, crossing into the next lap.
    assert_linearizable(2, &[8, 9], vec![vec![Op::Push(1), Op::Pop], vec![Op::Pop, Op::Push(2)]]);
}

#[test]
fn producers_race_for_the_last_place() {
    // Capacity 2 with one item in: one push finds room, the other finds the ring full
    // unless the pop lands first (then the second push wraps into the popped slot);
    // "full" only when it was.
    assert_linearizable(2, &[9], vec![vec![Op::Push(1)], vec![Op::Push(2)], vec![Op::Pop]]);
}

#[test]
fn two_consumers_around_the_lap() {
    // Capacity 1, one item in: a consumer may find the slot still being read by the
    // other (which already moved `head` on to the next lap) and must wait, not take
    // the item a second time.
    assert_linearizable(1, &[9], vec![vec![Op::Pop, Op::Push(1)], vec![Op::Pop, Op::Push(2)]]);
}

#[test]
fn two_producers_one_consumer() {
    // Within one lap; the pop may find a claimed, unwritten slot and wait.
    assert_linearizable(3, &[], vec![vec![Op::Push(1), Op::Push(2)], vec![Op::Push(3)], vec![Op::Pop]]);
}

#[test]
fn two_consumers_one_producer() {
    // One item in; the producer adds another while two consumers race: each item is
    // popped once, "empty" only when it was.
    assert_linearizable(2, &[9], vec![vec![Op::Pop], vec![Op::Pop], vec![Op::Push(1)]]);
}

#[test]
fn close_racing_with_pushes_and_pops() {
    // Items pushed before the close are popped, exactly once; pushes after it fail;
    // pops report closed only once everything is drained.
    assert_linearizable(2, &[], vec![vec![Op::Push(1), Op::Push(2)], vec![Op::Close], vec![Op::Pop, Op::Pop]]);
}

#[test]
fn after_close_returns_no_push_succeeds() {
    loom::model(|| {
        let queue = Arc::new(BoundedQueue::new(2).unwrap());
        let closed = Arc::new(AtomicBool::new(false));
        let closer = {
            let (queue, closed) = (queue.clone(), closed.clone());
            thread::spawn(move || {
                queue.close();
                closed.store(true, Ordering::Release);
            })
        };
        let first = queue.try_push(1);
        let saw_close = closed.load(Ordering::Acquire);
        let second = queue.try_push(2);
        if saw_close {
            assert_eq!(second, Err(PushError::Closed(2)), "a push after close returned succeeded");
        }
        closer.join().unwrap();
        let mut expected: Vec<u8> = Vec::new();
        expected.extend(first.ok().map(|()| 1));
        expected.extend(second.ok().map(|()| 2));
        let drained: Vec<u8> = std::iter::from_fn(|| queue.pop().ok()).collect();
        assert_eq!(drained, expected);
        assert_eq!(queue.pop(), Err(PopError::Closed));
    });
}

#[test]
fn a_push_that_finds_room_waits_for_a_stalled_consumer_instead_of_failing() {
    // Capacity 1, full. The consumer's pop moves `head` on and then reads the slot:
    // loom explores preempting it in between. A producer that has seen the room
    // (`len() == 0`, i.e. `head` moved) must not be told "full": it waits.
    loom::model(|| {
        let queue = Arc::new(BoundedQueue::new(1).unwrap());
        queue.try_push(1u8).unwrap();
        let consumer = {
            let queue = queue.clone();
            thread::spawn(move || queue.pop())
        };
        while !queue.is_empty() {
            thread::yield_now();
        }
        assert_eq!(queue.try_push(2), Ok(()), "a false 'full' while a consumer was mid-pop");
        assert_eq!(consumer.join().unwrap(), Ok(1));
        assert_eq!(queue.pop(), Ok(2));
    });
}

#[test]
fn a_pop_that_sees_an_item_waits_for_a_stalled_producer_instead_of_failing() {
    loom::model(|| {
        let queue = Arc::new(BoundedQueue::new(2).unwrap());
        let producer = {
            let queue = queue.clone();
            thread::spawn(move || queue.try_push(7u8))
        };
        while queue.is_empty() {
            thread::yield_now();
        }
        assert_eq!(queue.pop(), Ok(7), "a false 'empty' while a producer was mid-push");
        assert_eq!(producer.join().unwrap(), Ok(()));
    });
}

/// Counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn drop_frees_every_item_left_exactly_once() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let queue = Arc::new(BoundedQueue::new(2).unwrap());
        let producer = {
            let (queue, drops) = (queue.clone(), drops.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    // A rejected item comes back and is dropped here.
                    let _ = queue.try_push(Counted(drops.clone()));
                }
            })
        };
        let popped = queue.pop().is_ok() as usize; // dropped at once if popped
        producer.join().unwrap();
        let left = queue.len();
        assert_eq!(drops.load(Ordering::Relaxed), popped, "only the popped item is gone");
        drop(queue);
        assert_eq!(drops.load(Ordering::Relaxed), popped + left);
        assert_eq!(popped + left, 2);
    });
}

const T_NS: u64 = 10; // 100 M/s

fn quota() -> Quota {
    Quota::per_second(1_000_000_000 / T_NS).unwrap()
}

#[test]
fn concurrent_slot_claims_are_distinct_and_an_interval_apart() {
    loom::model(|| {
        let schedule = Arc::new(LeakSchedule::new(quota(), Nanos::ZERO).unwrap());
        let handles: Vec<_> = [0u64, 5, 25]
            .into_iter()
            .map(|at| {
                let schedule = schedule.clone();
                thread::spawn(move || schedule.claim(&Nanos::new(at)).at().as_u64())
            })
            .collect();
        let mut slots: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        slots.sort();
        assert!(slots.windows(2).all(|w| w[1] >= w[0] + T_NS), "{slots:?}");
        assert_eq!(schedule.next_slot(&Nanos::ZERO).as_u64(), slots[2] + T_NS);
    });
}

#[test]
fn give_back_racing_with_claims_never_duplicates_a_slot() {
    loom::model(|| {
        let schedule = Arc::new(LeakSchedule::new(quota(), Nanos::ZERO).unwrap());
        let now = Nanos::ZERO;
        let giver = {
            let schedule = schedule.clone();
            thread::spawn(move || {
                let slot: LeakSlot<'_> = schedule.claim(&now);
                let at = slot.at().as_u64();
                // Not given back, the slot comes back still claimed, and is kept.
                (at, schedule.give_back(slot).is_ok())
            })
        };
        let other = {
            let schedule = schedule.clone();
            thread::spawn(move || schedule.claim(&now).at().as_u64())
        };
        let mine = schedule.try_claim(&now).ok().map(|s| s.at().as_u64());
        let (given, returned) = giver.join().unwrap();
        let kept_other = other.join().unwrap();
        let mut kept: Vec<u64> = vec![kept_other];
        kept.extend(mine);
        if !returned {
            kept.push(given);
        }
        kept.sort();
        // At a frozen time, the slots held are exactly 0, T, 2T, ...: none twice, none
        // lost to the give-back; and the schedule continues right after the last.
        let expected: Vec<u64> = (0..kept.len() as u64).map(|i| i * T_NS).collect();
        assert_eq!(kept, expected, "returned: {returned}");
        assert_eq!(schedule.next_slot(&now).as_u64(), kept.len() as u64 * T_NS);
    });
}

#[test]
fn a_claim_with_a_passed_deadline_racing_with_a_give_back_takes_only_a_due_slot() {
    // One thread claims and gives back; one claims; one claims with a deadline that has
    // passed (3 ns, read at 12 ns): it may take only a slot due by 12 ns, and every
    // slot held is held once, an interval apart from the others.
    loom::model(|| {
        let schedule = Arc::new(LeakSchedule::new(quota(), Nanos::ZERO).unwrap());
        let giver = {
            let schedule = schedule.clone();
            thread::spawn(move || {
                let slot = schedule.claim(&Nanos::ZERO);
                let at = slot.at().as_u64();
                schedule.give_back(slot).err().map(|_kept| at)
            })
        };
        let other = {
            let schedule = schedule.clone();
            thread::spawn(move || schedule.claim(&Nanos::ZERO).at().as_u64())
        };
        let late = schedule.claim_by(&Nanos::new(12), Nanos::new(3));
        let late = match late {
            Ok(slot) => Some(slot.at().as_u64()),
            Err(at) => {
                assert!(at > Nanos::new(12), "refused a slot due at {at:?}");
                None
            }
        };
        if let Some(at) = late {
            assert!(at <= 12, "claimed a slot at {at} ns, after both its deadline and now");
        }
        let mut kept: Vec<u64> =
            [giver.join().unwrap(), Some(other.join().unwrap()), late].into_iter().flatten().collect();
        kept.sort();
        assert!(kept.windows(2).all(|w| w[1] >= w[0] + T_NS), "{kept:?}");
        // The schedule continues one interval after the latest slot held.
        assert_eq!(schedule.next_slot(&Nanos::ZERO).as_u64(), kept.last().unwrap() + T_NS, "{kept:?}");
    });
}

fn bucket(capacity: usize, clock: ManualClock) -> Arc<LeakyBucket<u8, ManualClock>> {
    Arc::new(LeakyBucket::with_clock(quota(), capacity, clock).unwrap())
}

#[test]
fn consumers_racing_for_a_slot_take_at_most_one_item_per_slot() {
    loom::model(|| {
        let clock = ManualClock::new(); // frozen at 0: one slot is due
        let bucket = bucket(2, clock.clone());
        let producer = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                bucket.offer(1).unwrap();
                bucket.offer(2).unwrap();
            })
        };
        let consumer = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.try_recv())
        };
        let mine = bucket.try_recv();
        producer.join().unwrap();
        let theirs = consumer.join().unwrap();
        let got: Vec<u8> = [mine, theirs].into_iter().filter_map(Result::ok).collect();
        assert!(got.len() <= 1, "two items left in one slot: {got:?}");
        for result in [mine, theirs] {
            assert!(matches!(result, Ok(_) | Err(TryRecvError::Empty | TryRecvError::NotYet { .. })), "{result:?}");
        }
        // Every item leaves exactly once, in order, one slot apart.
        let mut all = got.clone();
        while all.len() < 2 {
            clock.advance(Duration::from_nanos(T_NS));
            all.extend(bucket.try_recv().ok());
        }
        assert_eq!(all, [1, 2]);
    });
}

#[test]
fn a_blocking_consumer_is_woken_by_an_offer() {
    loom::model(|| {
        let bucket = bucket(2, ManualClock::new());
        let consumer = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.recv())
        };
        bucket.offer(5).unwrap();
        assert_eq!(consumer.join().unwrap(), Ok(5), "lost wake-up");
    });
}

#[test]
fn a_blocking_consumer_is_woken_by_close() {
    loom::model(|| {
        let bucket = bucket(2, ManualClock::new());
        let consumer = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.recv())
        };
        bucket.close();
        assert_eq!(consumer.join().unwrap(), Err(RecvError));
    });
}

#[test]
fn a_reservation_given_back_wakes_a_sleeping_consumer() {
    // The next slot is at T. C1 gives up at once (deadline 0): if it had reserved the
    // item, it gives the reservation back, and C2, asleep because the item was
    // reserved, must be woken to take it.
    loom::model(|| {
        let clock = ManualClock::new();
        let bucket = bucket(2, clock.clone());
        bucket.offer(0).unwrap();
        assert_eq!(bucket.try_recv(), Ok(0));
        bucket.offer(1).unwrap();
        let impatient = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.recv_deadline(Nanos::ZERO))
        };
        let patient = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.recv())
        };
        assert_eq!(impatient.join().unwrap(), Err(RecvTimeoutError::Timeout));
        clock.advance(Duration::from_nanos(T_NS));
        assert_eq!(patient.join().unwrap(), Ok(1), "lost wake-up after a give-back");
        assert_eq!(clock.now(), Nanos::new(T_NS));
    });
}

#[test]
fn a_stale_push_count_never_lets_a_consumer_reserve_a_missing_item() {
    // C2 may read C1's reservation and an older push count: it must not conclude that
    // an item is available (a reservation with no item behind it would wait forever).
    loom::model(|| {
        let clock = ManualClock::new();
        let bucket = bucket(2, clock.clone());
        let patient = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.recv())
        };
        let eager = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.try_recv())
        };
        bucket.offer(1).unwrap();
        let eager = eager.join().unwrap();
        bucket.close();
        clock.advance(Duration::from_nanos(T_NS));
        let patient = patient.join().unwrap();
        let got: Vec<u8> = [eager.ok(), patient.ok()].into_iter().flatten().collect();
        assert_eq!(got, [1], "eager: {eager:?}, patient: {patient:?}");
    });
}
