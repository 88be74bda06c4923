//! The ring on real threads: bounded in threads and items, no sleeps, no timing
//! assertions. Each item is popped exactly once, and each consumer sees each
//! producer's items in the order they were pushed.

use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use weir_leaky::{BoundedQueue, PopError};

fn mpmc(producers: u32, consumers: usize, capacity: usize, per_producer: u32) {
    let queue = BoundedQueue::new(capacity).unwrap();
    let barrier = Barrier::new(producers as usize + consumers);
    let done = AtomicUsize::new(0);
    let received: Vec<Vec<(u32, u32)>> = thread::scope(|s| {
        for p in 0..producers {
            let (queue, barrier, done) = (&queue, &barrier, &done);
            s.spawn(move || {
                barrier.wait();
                for i in 0..per_producer {
                    let mut item = (p, i);
                    while let Err(e) = queue.try_push(item) {
                        item = e.into_inner();
                        thread::yield_now();
                    }
                }
                if done.fetch_add(1, Ordering::AcqRel) + 1 == producers as usize {
                    queue.close();
                }
            });
        }
        let handles: Vec<_> = (0..consumers)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let mut got = Vec::new();
                    loop {
                        match queue.pop() {
                            Ok(item) => got.push(item),
                            Err(PopError::Empty) => thread::yield_now(),
                            Err(PopError::Closed) => return got,
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut seen = vec![vec![0u8; per_producer as usize]; producers as usize];
    for got in &received {
        let mut last = vec![None::<u32>; producers as usize];
        for &(p, i) in got {
            assert!(last[p as usize].is_none_or(|l| l < i), "producer {p}'s items reordered");
            last[p as usize] = Some(i);
            seen[p as usize][i as usize] += 1;
        }
    }
    for (p, counts) in seen.iter().enumerate() {
        for (i, &n) in counts.iter().enumerate() {
            assert_eq!(n, 1, "item ({p}, {i}) popped {n} times");
        }
    }
    assert!(queue.is_empty());
}

#[test]
fn one_producer_one_consumer() {
    mpmc(1, 1, 4, 20_000);
}

#[test]
fn four_producers_four_consumers_small_ring() {
    mpmc(4, 4, 3, 5_000);
}

#[test]
fn eight_producers_eight_consumers() {
    mpmc(8, 8, 64, 2_000);
}

#[test]
fn capacity_one_under_contention() {
    mpmc(3, 3, 1, 2_000);
}
