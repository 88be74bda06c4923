//! Concurrency stress on real threads: bounded in threads and operations, no sleeps,
//! no timing assertions.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use weir_gcra::Gcra;
use weir_rl_core::{ManualClock, Quota};

const THREADS: usize = 8;

#[test]
fn frozen_clock_eight_threads_admit_exactly_the_burst() {
    for burst in [1, 10, 1_000, 50_000] {
        let limiter = Gcra::with_clock(Quota::per_second(1).unwrap().with_burst(burst).unwrap(), ManualClock::new());
        let barrier = Barrier::new(THREADS);
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    barrier.wait();
                    let mine = (0..burst * 2).filter(|_| limiter.check().is_allowed()).count();
                    admitted.fetch_add(mine as u64, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(admitted.into_inner(), burst, "burst {burst}");
    }
}

#[test]
fn frozen_clock_mixed_costs_never_exceed_the_burst_and_fill_it() {
    let burst = 10_000;
    let limiter = Gcra::with_clock(Quota::per_second(1).unwrap().with_burst(burst).unwrap(), ManualClock::new());
    let barrier = Barrier::new(THREADS);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS as u64 {
            let (limiter, barrier, admitted) = (&limiter, &barrier, &admitted);
            s.spawn(move || {
                barrier.wait();
                let cost = t % 3 + 1;
                for _ in 0..burst {
                    if limiter.check_n(cost).unwrap().is_allowed() {
                        admitted.fetch_add(cost, Ordering::Relaxed);
                    }
                }
                // Costs of 1 are among the threads, so what is left is less than 1.
            });
        }
    });
    let total = admitted.into_inner();
    assert!(total <= burst, "admitted {total} > burst {burst}");
    assert_eq!(limiter.snapshot().remaining(), burst - total);
    assert_eq!(total, burst, "threads with cost 1 drain the bucket completely");
}

#[test]
fn advancing_clock_admits_at_most_burst_plus_refill() {
    // One thread moves time forward while eight others check: the total admitted is
    // bounded by burst + elapsed / interval, exactly as the sequential algorithm.
    let quota = Quota::per_second(1_000_000).unwrap().with_burst(100).unwrap(); // T = 1 µs
    let clock = ManualClock::new();
    let limiter = Gcra::with_clock(quota, clock.clone());
    let barrier = Barrier::new(THREADS + 1);
    let done = AtomicBool::new(false);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            barrier.wait();
            for _ in 0..20_000 {
                clock.advance(Duration::from_nanos(50));
            }
            done.store(true, Ordering::Release);
        });
        for _ in 0..THREADS {
            s.spawn(|| {
                barrier.wait();
                let mut mine = 0;
                while !done.load(Ordering::Acquire) {
                    mine += limiter.check().is_allowed() as u64;
                }
                admitted.fetch_add(mine, Ordering::Relaxed);
            });
        }
    });
    let elapsed_ns = 20_000 * 50;
    let bound = 100 + elapsed_ns / 1_000;
    let total = admitted.into_inner();
    assert!(total <= bound, "admitted {total} > bound {bound}");
}
