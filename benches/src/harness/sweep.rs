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
    /// The latency of one operation, sampled (the first of every batch of
    /// [`BATCH`], timed alone with two reads of weir's `MonotonicClock`, whose own
    /// cost is included), over all threads.
    pub latency: Latency,
}

/// Quantiles of a single operation's latency, in nanoseconds, including two clock
/// reads around it (subtract the `clock` suite's read cost for the operation
/// alone).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Operations sampled.
    pub samples: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
}

impl Latency {
    /// The quantiles of `histogram`.
    pub fn of(histogram: &hdrhistogram::Histogram<u64>) -> Self {
        Self {
            samples: histogram.len(),
            p50: histogram.value_at_quantile(0.50),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
        }
    }
}

/// A histogram of nanoseconds, 3 significant figures, growing as needed.
fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new(3).expect("3 significant figures is a valid precision")
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
    run_clocked(workload, threads, duration, &|| 0).0
}

/// The interval of a clock that a run's operations read: from the earliest reading a
/// thread took just before its first operation to the latest one a thread took just
/// after its last. Every reading an operation took on the same (monotonic) clock lies
/// inside it, whenever the threads ran and however late the main thread woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSpan {
    /// The earliest reading before a first operation, in the clock's nanoseconds.
    pub first: u64,
    /// The latest reading after a last operation, in the clock's nanoseconds.
    pub last: u64,
}

impl ClockSpan {
    /// The span of per-thread `(before first operation, after last operation, operations)`
    /// readings; threads that ran no operation read nothing for the run and are left
    /// out. `None` when no thread ran an operation.
    pub fn of(threads: impl IntoIterator<Item = (u64, u64, u64)>) -> Option<Self> {
        threads.into_iter().filter(|&(_, _, ops)| ops > 0).fold(None, |span, (first, last, _)| {
            Some(match span {
                None => ClockSpan { first, last },
                Some(ClockSpan { first: f, last: l }) => ClockSpan { first: f.min(first), last: l.max(last) },
            })
        })
    }

    /// `last − first` (zero if a clock stepped back).
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.last.saturating_sub(self.first))
    }
}

/// [`run`], with every thread reading `read` (a clock, in nanoseconds) just before its
/// first operation and just after its last: the [`ClockSpan`] that the operations saw
/// on that clock (`None` if no thread ran an operation). The readings are outside the
/// timed loop.
pub fn run_clocked<W: Workload, R: Fn() -> u64 + Sync>(
    workload: &W,
    threads: usize,
    duration: Duration,
    read: &R,
) -> (Sample, Option<ClockSpan>) {
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
                    let mut latency = histogram();
                    let clock = weir_rl_core::MonotonicClock::new();
                    let first = read();
                    // Ordering: Relaxed; the flag carries no data, only "stop soon".
                    while !stop.load(Ordering::Relaxed) {
                        // The first operation of the batch, timed alone.
                        let before = weir_rl_core::Clock::now(&clock);
                        admitted += black_box(workload.op(&mut local)) as u64;
                        let after = weir_rl_core::Clock::now(&clock);
                        latency.saturating_record(after.as_u64().saturating_sub(before.as_u64()));
                        for _ in 1..BATCH {
                            admitted += black_box(workload.op(&mut local)) as u64;
                        }
                        ops += BATCH;
                    }
                    let last = read();
                    (ops, admitted, pinned, (first, last, ops), latency)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(duration);
        // Ordering: Relaxed; see the load above.
        stop.store(true, Ordering::Relaxed);
        let (mut ops, mut admitted, mut slowest, mut all_pinned) = (0, 0, u64::MAX, true);
        let mut readings = Vec::with_capacity(threads);
        let mut latency = histogram();
        for handle in handles {
            let (o, a, pinned, reading, thread_latency) = handle.join().expect("a benchmark thread panicked");
            ops += o;
            admitted += a;
            slowest = slowest.min(o);
            all_pinned &= pinned;
            readings.push(reading);
            latency.add(&thread_latency).expect("histograms that grow as needed merge");
        }
        let elapsed = start.elapsed();
        let fairness = slowest as f64 * threads as f64 / ops.max(1) as f64;
        let latency = Latency::of(&latency);
        (Sample { threads, ops, admitted, elapsed, fairness, pinned: all_pinned, latency }, ClockSpan::of(readings))
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
    fn a_clock_span_runs_from_the_earliest_first_reading_to_the_latest_last() {
        // The second thread started first and the first ended last; the third ran
        // nothing, so its readings (outside the others') do not count.
        let span = ClockSpan::of([(20, 90, 256), (10, 70, 512), (0, 1_000, 0)]);
        assert_eq!(span, Some(ClockSpan { first: 10, last: 90 }));
        assert_eq!(span.map(|s| s.duration()), Some(Duration::from_nanos(80)));
        assert_eq!(ClockSpan::of([(5, 9, 0)]), None);
        assert_eq!(ClockSpan { first: 9, last: 5 }.duration(), Duration::ZERO);
    }

    #[test]
    fn every_thread_reads_the_clock_around_its_operations() {
        // A clock that counts its readings: two per thread, one span over all.
        let readings = std::sync::atomic::AtomicU64::new(0);
        // Ordering: Relaxed; a counter, read after the threads are joined.
        let read = || readings.fetch_add(1, Ordering::Relaxed) + 1;
        let (sample, span) = run_clocked(&Count, 3, Duration::from_millis(5), &read);
        // Ordering: Relaxed; the scope joined every thread.
        assert_eq!(readings.load(Ordering::Relaxed), 6);
        if sample.ops > 0 {
            let span = span.expect("a thread ran, so it read the clock");
            assert!(1 <= span.first && span.first < span.last && span.last <= 6);
        }
    }

    #[test]
    fn pins_where_the_report_says_it_does() {
        let sample = run(&Count, 2, Duration::from_millis(1));
        assert_eq!(sample.pinned, matches!(pin::status(), pin::Pinning::Pinned { .. }));
    }
}
