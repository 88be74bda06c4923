//! The queue suite: weir-leaky's bounded MPMC ring against crossbeam's `ArrayQueue`
//! and `concurrent-queue`'s bounded queue, in the same run: P producers and P
//! consumers move items through one queue of 1 024 slots; items moved per second.
//!
//! `--threads` counts threads in all: `t` threads run `t / 2` producers and as many
//! consumers (at least one of each), so `--threads 16` is 8P8C. Where pinning is on,
//! producer `p` takes core slot `2p` and consumer `c` slot `2c + 1`, so a producer
//! and its consumer never share a core while there are cores to spare.

use crate::harness::{BenchError, Config, Output, Spread, pin, progress};
use crate::html::{Cell, HtmlTable};
use crate::report::{Machine, Table, rate};
use serde::Serialize;
use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Slots in every queue measured.
const CAPACITY: usize = 1_024;

/// A bounded queue of `u64`.
pub trait Queue: Sync {
    /// Tries to push; false when full.
    fn push(&self, item: u64) -> bool;
    /// Tries to pop; false when empty.
    fn pop(&self) -> bool;
}

impl Queue for weir_leaky::BoundedQueue<u64> {
    #[inline]
    fn push(&self, item: u64) -> bool {
        self.try_push(item).is_ok()
    }
    #[inline]
    fn pop(&self) -> bool {
        black_box(weir_leaky::BoundedQueue::pop(self)).is_ok()
    }
}

impl Queue for crossbeam_queue::ArrayQueue<u64> {
    #[inline]
    fn push(&self, item: u64) -> bool {
        crossbeam_queue::ArrayQueue::push(self, item).is_ok()
    }
    #[inline]
    fn pop(&self) -> bool {
        black_box(crossbeam_queue::ArrayQueue::pop(self)).is_some()
    }
}

impl Queue for concurrent_queue::ConcurrentQueue<u64> {
    #[inline]
    fn push(&self, item: u64) -> bool {
        concurrent_queue::ConcurrentQueue::push(self, item).is_ok()
    }
    #[inline]
    fn pop(&self) -> bool {
        black_box(concurrent_queue::ConcurrentQueue::pop(self)).is_ok()
    }
}

/// Runs `pairs` producers and `pairs` consumers on `queue` for `duration`; returns
/// items moved per second (pops) and the slowest consumer's share of the mean.
fn transfer<Q: Queue>(queue: &Q, pairs: usize, duration: Duration) -> (f64, f64) {
    let barrier = Barrier::new(2 * pairs + 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for p in 0..pairs {
            let (queue, barrier, stop) = (queue, &barrier, &stop);
            s.spawn(move || {
                pin::pin_current(2 * p);
                barrier.wait();
                let mut item = (p as u64) << 40;
                // Ordering: Relaxed; the flag carries no data.
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..64 {
                        if queue.push(item) {
                            item += 1;
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                }
            });
        }
        let consumers: Vec<_> = (0..pairs)
            .map(|c| {
                let (queue, barrier, stop) = (queue, &barrier, &stop);
                s.spawn(move || {
                    pin::pin_current(2 * c + 1);
                    barrier.wait();
                    let mut popped = 0u64;
                    // Ordering: Relaxed; see above.
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..64 {
                            if queue.pop() {
                                popped += 1;
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                    }
                    popped
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(duration);
        // Ordering: Relaxed; see above.
        stop.store(true, Ordering::Relaxed);
        let counts: Vec<u64> = consumers.into_iter().map(|h| h.join().expect("a consumer panicked")).collect();
        let elapsed = start.elapsed().as_secs_f64();
        let total: u64 = counts.iter().sum();
        let slowest = counts.iter().copied().min().unwrap_or(0);
        (total as f64 / elapsed, slowest as f64 * pairs as f64 / total.max(1) as f64)
    })
}

/// One queue under test.
#[derive(Debug, Clone, Copy)]
pub struct Subject {
    /// Who.
    pub name: &'static str,
    /// Runs it: (pairs, duration) → (items/s, fairness).
    pub run: fn(usize, Duration) -> (f64, f64),
}

/// Every queue measured.
pub fn subjects() -> Vec<Subject> {
    vec![
        Subject {
            name: "weir-leaky",
            run: |p, d| transfer(&weir_leaky::BoundedQueue::<u64>::new(CAPACITY).expect("a valid capacity"), p, d),
        },
        Subject {
            name: "crossbeam-arrayqueue",
            run: |p, d| transfer(&crossbeam_queue::ArrayQueue::new(CAPACITY), p, d),
        },
        Subject {
            name: "concurrent-queue",
            run: |p, d| transfer(&concurrent_queue::ConcurrentQueue::bounded(CAPACITY), p, d),
        },
    ]
}

/// Subject ids for `--only`.
pub fn ids() -> Vec<String> {
    subjects().iter().map(|s| format!("queue/{}", s.name)).collect()
}

/// One queue at one size.
#[derive(Debug, Clone, Serialize)]
pub struct QueueResult {
    /// Who.
    pub subject: &'static str,
    /// Producers (= consumers).
    pub pairs: usize,
    /// Median items moved per second.
    pub items_per_sec: f64,
    /// Slowest repetition, items per second.
    pub min_items_per_sec: f64,
    /// Fastest repetition, items per second.
    pub max_items_per_sec: f64,
    /// Ratio to crossbeam's ArrayQueue in the same run.
    pub ratio_to_arrayqueue: f64,
    /// Worst slowest-consumer share over the repetitions.
    pub fairness: f64,
}

impl QueueResult {
    /// The repetitions' median, min and max.
    pub fn spread(&self) -> Spread {
        Spread { median: self.items_per_sec, min: self.min_items_per_sec, max: self.max_items_per_sec }
    }
}

/// Runs the queue suite.
pub fn run(config: &Config, out: &Output) -> Result<String, BenchError> {
    let mut pairs: Vec<usize> = config.threads.iter().map(|t| (t / 2).max(1)).collect();
    pairs.dedup();
    let chosen: Vec<Subject> =
        subjects().into_iter().filter(|s| config.selects(&format!("queue/{}", s.name))).collect();
    let bar = progress(config, chosen.len() * pairs.len());
    let mut results = Vec::new();
    for &p in &pairs {
        let mut at_this_size = Vec::new();
        for subject in &chosen {
            bar.set_message(format!("{} {p}P{p}C", subject.name));
            let _ = (subject.run)(p, config.duration.min(Duration::from_millis(50)));
            let runs: Vec<(f64, f64)> = (0..config.reps).map(|_| (subject.run)(p, config.duration)).collect();
            let rates: Vec<f64> = runs.iter().map(|r| r.0).collect();
            let fairness = runs.iter().map(|r| r.1).fold(1.0, f64::min);
            at_this_size.push((subject.name, Spread::of(&rates), fairness));
            bar.inc(1);
        }
        let base = at_this_size.iter().find(|r| r.0 == "crossbeam-arrayqueue").map(|r| r.1.median);
        for (name, spread, fairness) in at_this_size {
            results.push(QueueResult {
                subject: name,
                pairs: p,
                items_per_sec: spread.median,
                min_items_per_sec: spread.min,
                max_items_per_sec: spread.max,
                ratio_to_arrayqueue: base.map_or(f64::NAN, |b| spread.median / b),
                fairness,
            });
        }
    }
    bar.finish_and_clear();
    let machine = Machine::detect();
    let mut table = Table::with_left_columns(
        vec!["queue".into(), "threads".into(), "items/s".into(), "× ArrayQueue".into(), "fairness".into()],
        2,
    );
    let mut html = HtmlTable::new(
        "Queue: items moved per second",
        format!(
            "{}. {CAPACITY} slots, P producers and P consumers; each cell: median of {} runs of {:?}, and below it \
             the slowest and fastest run.",
            machine.describe(),
            config.reps,
            config.duration
        ),
        ["queue", "threads", "items/s", "× ArrayQueue", "fairness"].map(String::from).to_vec(),
    );
    for r in &results {
        let spread = r.spread();
        html.row(vec![
            Cell::text(r.subject),
            Cell::text(format!("{}P{}C", r.pairs, r.pairs)),
            Cell::spread(&spread, rate, ""),
            Cell::number(format!("{:.2}", r.ratio_to_arrayqueue)),
            Cell::number(format!("{:.2}", r.fairness)),
        ]);
        table.row(vec![
            r.subject.to_string(),
            format!("{}P{}C", r.pairs, r.pairs),
            format!("{}{}", rate(r.items_per_sec), if spread.is_noisy() { " ⚠" } else { "" }),
            format!("{:.2}", r.ratio_to_arrayqueue),
            format!("{:.2}", r.fairness),
        ]);
    }
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.subject.to_string(),
                r.pairs.to_string(),
                format!("{:.0}", r.items_per_sec),
                format!("{:.0}", r.min_items_per_sec),
                format!("{:.0}", r.max_items_per_sec),
                format!("{:.3}", r.ratio_to_arrayqueue),
                format!("{:.3}", r.fairness),
                machine.version(),
            ]
        })
        .collect();
    out.csv(
        "queue.csv",
        &[
            "subject",
            "pairs",
            "items_per_sec",
            "min_items_per_sec",
            "max_items_per_sec",
            "ratio_to_arrayqueue",
            "fairness",
            "commit",
        ],
        &rows,
    )?;
    out.html_table("queue", &html.render())?;
    out.json("queue.json", &serde_json::json!({ "machine": machine, "capacity": CAPACITY, "results": results }))?;
    Ok(format!(
        "weir-bench queue ({} profile)\nmachine: {}\n{CAPACITY} slots; P producers and P consumers; median of {} runs of {:?} \
         (⚠ = runs spread more than 20% of the median)\n\n{}",
        config.profile,
        machine.describe(),
        config.reps,
        config.duration,
        table.render()
    ))
}
