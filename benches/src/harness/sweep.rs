//! The thread-sweep runner: runs one workload on N threads that start together on a
//! barrier, for a fixed wall-clock duration, and counts operations.
//!
//! The hot loop is monomorphized per workload (no dynamic dispatch per operation),
//! spawning, pinning and per-thread setup are outside the timed region, and the stop
//! flag is read once per batch of [`BATCH`] operations.

use super::pin;
use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Operations between two reads of the stop flag.
pub const BATCH: u64 = 256;

/// Something to run on every thread of a sweep.
pub trait Workload: Sync {
    /// Per-thread state (a per-thread limiter, a key cursor, ...).
    type Local: Send;
    /// Builds thread `thread`'s state, before the timed region.
    fn local(&self, thread: usize) -> Self::Local;
    /// One operation; true when it admitted (or otherwise succeeded).
    fn op(&self, local: &mut Self::Local) -> bool;
}

/// What one timed run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Threads that ran.
    pub threads: usize,
    /// Operations completed by all threads together.
    pub ops: u64,
    /// Operations that admitted.
    pub admitted: u64,
    /// Wall-clock time from the barrier's release to the last thread's stop.
    pub elapsed: Duration,
    /// The slowest thread's operations divided by the mean per thread: 1.0 is
    /// perfectly fair; near 0 means some thread was starved.
    pub fairness: f64,
    /// Whether every thread was pinned to its core.
    pub pinned: bool,
}

impl Sample {
    /// Aggregate operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `workload` on `threads` threads for about `duration`; thread `t` is pinned to
/// the core for slot `t` where pinning is on ([`pin`]).
pub fn run<W: Workload>(workload: &W, threads: usize, duration: Duration) -> Sample {
    let barrier = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, stop) = (&barrier, &stop);
                s.spawn(move || {
                    let pinned = pin::pin_current(t);
                    let mut local = workload.local(t);
                    barrier.wait();
                    let (mut ops, mut admitted) = (0u64, 0u64);
                    // Ordering: Relaxed; the flag carries no data, only "stop soon".
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..BATCH {
                            admitted += black_box(workload.op(&mut local)) as u64;
                        }
                        ops += BATCH;
                    }
                    (ops, admitted, pinned)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(duration);
        // Ordering: Relaxed; see the load above.
        stop.store(true, Ordering::Relaxed);
        let (mut ops, mut admitted, mut slowest, mut all_pinned) = (0, 0, u64::MAX, true);
        for handle in handles {
            let (o, a, pinned) = handle.join().expect("a benchmark thread panicked");
            ops += o;
            admitted += a;
            slowest = slowest.min(o);
            all_pinned &= pinned;
        }
        let elapsed = start.elapsed();
        let fairness = slowest as f64 * threads as f64 / ops.max(1) as f64;
        Sample { threads, ops, admitted, elapsed, fairness, pinned: all_pinned }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Count;
    impl Workload for Count {
        type Local = u64;
        fn local(&self, _: usize) -> u64 {
            0
        }
        fn op(&self, local: &mut u64) -> bool {
            *local += 1;
            local.is_multiple_of(2)
        }
    }

    #[test]
    fn counts_every_operation_of_every_thread() {
        let sample = run(&Count, 3, Duration::from_millis(5));
        assert_eq!(sample.threads, 3);
        // No timing assumption: a starved thread may run zero batches.
        assert!(sample.ops.is_multiple_of(BATCH));
        assert_eq!(sample.admitted * 2, sample.ops);
        assert!((0.0..=1.0).contains(&sample.fairness));
    }

    #[test]
    fn pins_where_the_report_says_it_does() {
        let sample = run(&Count, 2, Duration::from_millis(1));
        assert_eq!(sample.pinned, matches!(pin::status(), pin::Pinning::Pinned { .. }));
    }
}
