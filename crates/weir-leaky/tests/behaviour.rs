//! The bucket's documented behaviours, with a manual clock, and its blocking
//! consumers on real threads. No sleeps for correctness, no timing assertions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;
use weir_leaky::{
    BoundedQueue, BuildError, LeakyBucket, MAX_CAPACITY, OfferError, RecvError, RecvTimeoutError, TryRecvError,
};
use weir_rl_core::{Clock, ManualClock, MonotonicClock, Nanos, Quota};

fn manual(per_second: u64, capacity: usize) -> (LeakyBucket<u32, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (LeakyBucket::with_clock(Quota::per_second(per_second).unwrap(), capacity, clock.clone()).unwrap(), clock)
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn worked_example_100_at_once_into_capacity_50_at_10_per_second() {
    let (bucket, clock) = manual(10, 50);
    let results: Vec<_> = (0..100).map(|i| bucket.offer(i)).collect();
    let enqueued: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(enqueued.len(), 50);
    for (i, ticket) in enqueued.iter().enumerate() {
        assert_eq!(ticket.position(), i);
        assert_eq!(ticket.expected_delay(), 100 * MS * i as u32);
    }
    for (i, rejected) in results.iter().enumerate().skip(50) {
        match rejected {
            Err(OfferError::Full { item, retry_after }) => assert_eq!((*item, *retry_after), (i as u32, 100 * MS)),
            other => panic!("{other:?}"),
        }
    }
    // Three eager consumers poll every millisecond for 6 s: together, 10 per second.
    let mut released = Vec::new();
    for _ in 0..6_000 {
        for _consumer in 0..3 {
            if let Ok(item) = bucket.try_recv() {
                released.push((clock.now().as_u64() / 1_000_000, item));
            }
        }
        clock.advance(MS);
    }
    let expected: Vec<_> = (0..50).map(|i| (100 * i as u64, i)).collect();
    assert_eq!(released, expected, "one every 100 ms, in order: drained at 4.9 s, free at 5 s");
    assert!(bucket.is_empty());
}

#[test]
fn retry_after_and_not_yet_say_when() {
    let (bucket, clock) = manual(4, 2); // T = 250 ms
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    assert_eq!(bucket.try_recv(), Ok(1));
    clock.advance(100 * MS);
    assert_eq!(bucket.try_recv(), Err(TryRecvError::NotYet { retry_after: 150 * MS }));
    bucket.offer(3).unwrap();
    // Full: the next slot (at 250 ms) is 150 ms away.
    assert!(matches!(bucket.offer(4), Err(OfferError::Full { retry_after, .. }) if retry_after == 150 * MS));
    clock.advance(150 * MS);
    assert_eq!(bucket.try_recv(), Ok(2));
    let ticket = bucket.offer(4).unwrap();
    assert_eq!((ticket.position(), ticket.expected_delay()), (1, 500 * MS));
}

#[test]
fn a_late_consumer_restarts_the_schedule_unless_within_tolerance() {
    let (bucket, clock) = manual(1_000, 10); // T = 1 ms
    for i in 0..4 {
        bucket.offer(i).unwrap();
    }
    assert_eq!(bucket.try_recv(), Ok(0));
    clock.advance(1_500 * Duration::from_micros(1)); // 0.5 ms late
    assert_eq!(bucket.try_recv(), Ok(1)); // slot 1.5 ms: the next is at 2.5 ms
    clock.advance(900 * Duration::from_micros(1));
    assert!(matches!(bucket.try_recv(), Err(TryRecvError::NotYet { .. })));

    let clock = ManualClock::new();
    let bucket = LeakyBucket::builder(Quota::per_second(1_000).unwrap(), 10)
        .tolerance(Duration::from_micros(600))
        .build_with_clock(clock.clone())
        .unwrap();
    for i in 0..4 {
        bucket.offer(i).unwrap();
    }
    assert_eq!(bucket.try_recv(), Ok(0));
    clock.advance(1_500 * Duration::from_micros(1));
    assert_eq!(bucket.try_recv(), Ok(1)); // slot 1 ms kept: the next is at 2 ms
    clock.advance(500 * Duration::from_micros(1));
    assert_eq!(bucket.try_recv(), Ok(2));
}

#[test]
fn close_lets_accepted_items_leave_then_reports_closed() {
    let (bucket, clock) = manual(10, 5);
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    assert!(bucket.close());
    assert!(!bucket.close());
    assert!(matches!(bucket.offer(3), Err(OfferError::Closed(3))));
    assert_eq!(bucket.try_recv(), Ok(1));
    assert!(matches!(bucket.try_recv(), Err(TryRecvError::NotYet { .. })), "still on schedule");
    clock.advance(100 * MS);
    assert_eq!(bucket.try_recv(), Ok(2));
    assert_eq!(bucket.try_recv(), Err(TryRecvError::Closed));
    assert_eq!(bucket.recv(), Err(RecvError));
    assert_eq!(bucket.recv_timeout(MS), Err(RecvTimeoutError::Closed));
}

#[test]
fn bad_input_is_a_typed_error_with_advice() {
    let q = Quota::per_second(10).unwrap();
    let clock = ManualClock::new();
    let e = LeakyBucket::<u8, _>::with_clock(q, 0, clock.clone()).unwrap_err();
    assert_eq!(e, BuildError::ZeroCapacity);
    assert!(e.to_string().contains("at least 1"), "{e}");
    let e = LeakyBucket::<u8, _>::with_clock(q, usize::MAX, clock.clone()).unwrap_err();
    assert_eq!(e, BuildError::CapacityTooLarge { requested: usize::MAX, max: MAX_CAPACITY });
    assert!(e.to_string().contains("smaller capacity"), "{e}");
    // Within the limit but more than any allocator gives: an error, not an abort.
    let e = BoundedQueue::<[u8; 1 << 20]>::new(MAX_CAPACITY).unwrap_err();
    assert!(matches!(e, BuildError::OutOfMemory { .. }), "{e:?}");
    assert!(e.to_string().contains("could not allocate"), "{e}");
    let e = LeakyBucket::<u8, _>::builder(q, 1).tolerance(Duration::MAX).build_with_clock(clock).unwrap_err();
    assert!(matches!(e, BuildError::ToleranceTooLong { .. }));
    assert!(e.to_string().contains("shorter"), "{e}");
}

#[test]
fn a_backwards_clock_is_no_time_passing() {
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000));
    let bucket = LeakyBucket::with_clock(Quota::per_second(10).unwrap(), 4, clock.clone()).unwrap();
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    assert_eq!(bucket.try_recv(), Ok(1));
    clock.set(Nanos::ZERO);
    assert!(matches!(bucket.try_recv(), Err(TryRecvError::NotYet { .. })));
    assert!(bucket.offer(3).is_ok());
    clock.set(Nanos::MAX);
    assert_eq!(bucket.try_recv(), Ok(2));
}

#[test]
fn drop_frees_each_item_once() {
    #[derive(Debug)]
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let clock = ManualClock::new();
    let bucket = LeakyBucket::with_clock(Quota::per_second(1).unwrap(), 8, clock.clone()).unwrap();
    for _ in 0..8 {
        bucket.offer(Counted(drops.clone())).unwrap();
    }
    for _ in 0..3 {
        drop(bucket.try_recv().unwrap());
        clock.advance(Duration::from_secs(1));
    }
    assert!(bucket.offer(Counted(drops.clone())).is_ok(), "there was room again");
    assert_eq!(drops.load(Ordering::Relaxed), 3);
    drop(bucket);
    assert_eq!(drops.load(Ordering::Relaxed), 9);
}

/// Consumers on real threads, the clock frozen in phases: every release in a phase
/// happens at the phase's time, so the window bound can be checked exactly while
/// three threads race for slots and a producer races with them.
#[test]
fn concurrent_consumers_together_never_exceed_the_rate() {
    const PHASES: u64 = 400;
    const CONSUMERS: usize = 3;
    let clock = ManualClock::new();
    let quota = Quota::per_second(1_000).unwrap(); // T = 1 ms
    let bucket = LeakyBucket::with_clock(quota, 16, clock.clone()).unwrap();
    let barrier = Barrier::new(CONSUMERS + 2);
    let releases = std::sync::Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..CONSUMERS {
            s.spawn(|| {
                for _ in 0..PHASES {
                    barrier.wait();
                    let now = clock.now().as_u64();
                    while let Ok(item) = bucket.try_recv() {
                        releases.lock().unwrap().push((now, item));
                    }
                    barrier.wait();
                }
            });
        }
        s.spawn(|| {
            let mut next = 0u32;
            for _ in 0..PHASES {
                barrier.wait();
                for _ in 0..2 {
                    if bucket.offer(next).is_ok() {
                        next += 1;
                    }
                }
                barrier.wait();
            }
        });
        for phase in 0..PHASES {
            barrier.wait();
            barrier.wait();
            // Steps of 0.3 to 2.7 ms: some phases have no slot, some more than one is due.
            clock.advance(Duration::from_micros(300 + (phase * 7_919) % 2_400));
        }
    });
    let mut releases = releases.into_inner().unwrap();
    releases.sort();
    let items: Vec<u32> = releases.iter().map(|r| r.1).collect();
    let mut sorted = items.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), items.len(), "no item twice");
    assert!(sorted.iter().enumerate().all(|(i, &v)| v == i as u32), "no item skipped");
    for i in 0..releases.len() {
        for j in i..releases.len() {
            let window_ms = (releases[j].0 - releases[i].0) / 1_000_000;
            assert!((j - i) as u64 <= window_ms, "{} releases within {window_ms} ms", j - i + 1);
        }
    }
    assert!(releases.len() > 100, "the consumers kept up: {}", releases.len());
}

#[test]
fn blocking_consumers_take_each_item_exactly_once_in_producer_order() {
    const PRODUCERS: u32 = 2;
    const PER_PRODUCER: u32 = 400;
    // 200 000 per second: the whole run paces in a few milliseconds.
    let bucket = LeakyBucket::new(Quota::per_second(200_000).unwrap(), 8).unwrap();
    let done = AtomicUsize::new(0);
    let received: Vec<Vec<(u32, u32)>> = thread::scope(|s| {
        for p in 0..PRODUCERS {
            let (bucket, done) = (&bucket, &done);
            s.spawn(move || {
                for i in 0..PER_PRODUCER {
                    let mut item = (p, i);
                    while let Err(e) = bucket.offer(item) {
                        item = e.into_inner();
                        thread::yield_now();
                    }
                }
                if done.fetch_add(1, Ordering::AcqRel) + 1 == PRODUCERS as usize {
                    bucket.close();
                }
            });
        }
        let consumers: Vec<_> = (0..3)
            .map(|c| {
                let bucket = &bucket;
                s.spawn(move || {
                    let mut got = Vec::new();
                    loop {
                        let item = if c == 0 {
                            bucket.recv().ok()
                        } else {
                            match bucket.recv_timeout(Duration::from_micros(200)) {
                                Ok(item) => Some(item),
                                Err(RecvTimeoutError::Timeout) => continue,
                                Err(RecvTimeoutError::Closed) => None,
                            }
                        };
                        match item {
                            Some(item) => got.push(item),
                            None => return got,
                        }
                    }
                })
            })
            .collect();
        consumers.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut seen = vec![vec![0u8; PER_PRODUCER as usize]; PRODUCERS as usize];
    for got in &received {
        let mut last = [None::<u32>; PRODUCERS as usize];
        for &(p, i) in got {
            assert!(last[p as usize].is_none_or(|l| l < i), "a consumer saw producer {p}'s items out of order");
            last[p as usize] = Some(i);
            seen[p as usize][i as usize] += 1;
        }
    }
    assert!(seen.iter().flatten().all(|&n| n == 1), "each item exactly once");
}

#[test]
fn a_blocked_consumer_wakes_for_an_item_and_for_close() {
    let bucket = LeakyBucket::<u32>::new(Quota::per_second(1_000_000).unwrap(), 4).unwrap();
    thread::scope(|s| {
        let consumer = s.spawn(|| (bucket.recv(), bucket.recv(), bucket.recv()));
        bucket.offer(7).unwrap();
        bucket.offer(8).unwrap();
        bucket.close();
        assert_eq!(consumer.join().unwrap(), (Ok(7), Ok(8), Err(RecvError)));
    });
}

#[test]
fn recv_waits_for_the_slot_by_the_buckets_clock() {
    // T = 1 ms of the manual clock: the consumer sleeps in real time and re-reads it.
    let (bucket, clock) = manual(1_000, 4);
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    assert_eq!(bucket.recv(), Ok(1));
    thread::scope(|s| {
        let consumer = s.spawn(|| bucket.recv());
        thread::sleep(MS); // not for correctness: the result is the same either way
        clock.advance(MS);
        assert_eq!(consumer.join().unwrap(), Ok(2));
    });
    assert_eq!(clock.now(), Nanos::new(1_000_000));
}

#[test]
fn recv_timeout_gives_up_without_spending_a_slot() {
    let clock = MonotonicClock::new();
    let bucket = LeakyBucket::with_clock(Quota::per_hour(1).unwrap(), 4, clock).unwrap();
    // Nothing comes: times out (after 1 ms of real time).
    assert_eq!(bucket.recv_timeout(MS), Err(RecvTimeoutError::Timeout));
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    assert_eq!(bucket.recv_timeout(MS), Ok(1));
    let next = bucket.schedule().next_slot(bucket.clock());
    // The next slot is an hour away: gives up at once, leaving the item and the slot.
    assert_eq!(bucket.recv_timeout(Duration::from_secs(60)), Err(RecvTimeoutError::Timeout));
    assert!(bucket.schedule().next_slot(bucket.clock()) <= next, "no slot spent");
    assert!(matches!(bucket.try_recv(), Err(TryRecvError::NotYet { .. })), "the item is still there");
    assert_eq!(bucket.len(), 1);
}
