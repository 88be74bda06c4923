//! ns per operation on one thread, measured interleaved: every subject runs one
//! short batch per round, round after round, and each subject's best and median
//! round are reported. Interleaving cancels the drift of a shared, noisy machine
//! that makes back-to-back measurements (subject A for 2 s, then B for 2 s)
//! disagree by more than the differences being measured.

use crate::check::Check;
use crate::harness::{BenchError, Config, Output, Spread, progress};
use crate::html::{Cell, HtmlTable};
use crate::peers::{Governor, GovernorUpkeep, MutexTokenBucket, governor, governor_upkeep, leaky_bucket, ratelimit};
use crate::report::{Machine, Table};
use crate::windows;
use std::hint::black_box;
use std::time::{Duration, Instant};
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_rl_core::{Clock, CoarseClock, InstantClock, ManualClock, MonotonicClock, Quota};
use weir_window::StripedMode;

/// Something timed in batches; the per-operation loop inside is monomorphized.
pub trait Batch {
    /// Runs `n` operations and returns the time they took.
    fn run(&mut self, n: u32) -> Duration;
}

struct Checks<L>(L);

impl<L: Check> Batch for Checks<L> {
    fn run(&mut self, n: u32) -> Duration {
        let start = Instant::now();
        let mut admitted = 0u32;
        for _ in 0..n {
            admitted += black_box(&self.0).check_one() as u32;
        }
        black_box(admitted);
        start.elapsed()
    }
}

struct Reads<C>(C);

impl<C: Clock> Batch for Reads<C> {
    fn run(&mut self, n: u32) -> Duration {
        let start = Instant::now();
        let mut sum = 0u64;
        for _ in 0..n {
            sum = sum.wrapping_add(black_box(&self.0).now().as_u64());
        }
        black_box(sum);
        start.elapsed()
    }
}

/// One subject of the single-thread suite.
#[derive(Debug, Clone, Copy)]
pub struct Single {
    /// `group/name`.
    pub id: &'static str,
    /// Builds it (outside the timed region).
    pub make: fn() -> Box<dyn Batch>,
}

fn open() -> Quota {
    Quota::per_second(1_000_000_000).and_then(|q| q.with_burst(1_000_000_000)).expect("a valid quota")
}

fn closed<C: Clock>(clock: C) -> Gcra<C> {
    let limiter = Gcra::with_clock(Quota::per_hour(1).expect("a valid quota"), clock);
    let _ = limiter.check();
    limiter
}

fn coarse() -> CoarseClock {
    CoarseClock::with_upkeep(Duration::from_millis(1)).expect("the coarse clock's upkeep thread starts")
}

fn closed_governor() -> Governor {
    let l = governor(1, 1);
    let _ = l.check();
    l
}

fn closed_governor_upkeep() -> GovernorUpkeep {
    let l = governor_upkeep(1, 1);
    let _ = l.check();
    l
}

/// Every subject, in report order.
pub fn singles() -> Vec<Single> {
    let s = |id, make| Single { id, make };
    vec![
        s("clock/monotonic (quanta TSC)", || Box::new(Reads(MonotonicClock::new()))),
        s("clock/instant (std)", || Box::new(Reads(InstantClock::new()))),
        s("clock/coarse", || Box::new(Reads(coarse()))),
        s("clock/manual", || Box::new(Reads(ManualClock::new()))),
        s("allowed/weir-gcra", || Box::new(Checks(Gcra::with_clock(open(), MonotonicClock::new())))),
        s("allowed/weir-gcra+coarse", || Box::new(Checks(Gcra::with_clock(open(), coarse())))),
        s("allowed/governor", || Box::new(Checks(governor(1_000_000_000, 1_000_000_000)))),
        s("allowed/governor+upkeep", || Box::new(Checks(governor_upkeep(1_000_000_000, 1_000_000_000)))),
        s("allowed/ratelimit", || Box::new(Checks(ratelimit(1_000_000_000, 1_000_000_000)))),
        s("allowed/leaky-bucket", || {
            Box::new(Checks(leaky_bucket(1_000_000_000, 1_000_000, Duration::from_millis(1))))
        }),
        s("allowed/mutex-bucket", || Box::new(Checks(MutexTokenBucket::new(1e9, 1e9)))),
        s("allowed/weir-leased", || {
            Box::new(Checks(LeasedGcra::with_clock(open(), LeaseConfig::default(), MonotonicClock::new())))
        }),
        s("allowed/weir-fixed", || Box::new(Checks(windows::fixed_open()))),
        s("allowed/weir-sliding", || Box::new(Checks(windows::sliding_open()))),
        s("allowed/weir-striped", || Box::new(Checks(windows::striped_open(StripedMode::Exact)))),
        s("allowed/weir-striped-approx", || Box::new(Checks(windows::striped_open(StripedMode::Approximate)))),
        s("allowed/weir-log", || Box::new(Checks(windows::log_open()))),
        s("denied/weir-gcra", || Box::new(Checks(closed(MonotonicClock::new())))),
        s("denied/weir-gcra+coarse", || Box::new(Checks(closed(coarse())))),
        s("denied/governor", || Box::new(Checks(closed_governor()))),
        s("denied/governor+upkeep", || Box::new(Checks(closed_governor_upkeep()))),
        s("denied/ratelimit", || Box::new(Checks(ratelimit(0, 1)))),
        s("denied/leaky-bucket", || Box::new(Checks(leaky_bucket(1, 0, Duration::ZERO)))),
        s("denied/weir-leased", || Box::new(Checks(crate::throughput::drained_leased()))),
        s("denied/weir-fixed", || Box::new(Checks(windows::fixed_closed()))),
        s("denied/weir-sliding", || Box::new(Checks(windows::sliding_closed()))),
        s("denied/weir-striped", || Box::new(Checks(windows::striped_closed(StripedMode::Exact)))),
        s("denied/weir-striped-approx", || Box::new(Checks(windows::striped_closed(StripedMode::Approximate)))),
        s("denied/weir-log", || Box::new(Checks(windows::log_closed()))),
    ]
}

/// One subject's result: best, median and worst ns per operation over the rounds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SingleResult {
    /// Which subject.
    pub id: &'static str,
    /// Fastest round, ns per operation.
    pub best_ns: f64,
    /// Median round, ns per operation.
    pub median_ns: f64,
    /// Slowest round, ns per operation.
    pub worst_ns: f64,
}

impl SingleResult {
    /// The rounds' median, min (best) and max (worst).
    pub fn spread(&self) -> Spread {
        Spread { median: self.median_ns, min: self.best_ns, max: self.worst_ns }
    }
}

/// Runs `subjects` interleaved for `rounds` rounds of `batch` operations each.
pub fn interleaved(subjects: &[Single], rounds: usize, batch: u32, mut tick: impl FnMut()) -> Vec<SingleResult> {
    let mut batches: Vec<Box<dyn Batch>> = subjects.iter().map(|s| (s.make)()).collect();
    for b in &mut batches {
        b.run(batch); // warm up
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); subjects.len()];
    for _ in 0..rounds {
        for (b, t) in batches.iter_mut().zip(&mut times) {
            t.push(b.run(batch).as_nanos() as f64 / f64::from(batch));
        }
        tick();
    }
    subjects
        .iter()
        .zip(&mut times)
        .map(|(s, t)| {
            let spread = Spread::of(t);
            SingleResult { id: s.id, best_ns: spread.min, median_ns: spread.median, worst_ns: spread.max }
        })
        .collect()
}

/// Measures the single-thread suite; returns the report and the rows.
pub fn measure(config: &Config) -> (String, Vec<SingleResult>) {
    let chosen: Vec<_> = singles().into_iter().filter(|s| config.selects(&format!("single/{}", s.id))).collect();
    let rounds = if config.full() { 200 } else { 60 };
    let bar = progress(config, rounds);
    let results = interleaved(&chosen, rounds, 100_000, || bar.inc(1));
    bar.finish_and_clear();
    let mut out = format!(
        "weir-bench single ({} profile)\nmachine: {}\n{rounds} rounds of 100k operations, every subject once per round \
         (interleaved); ns per operation; ⚠ = rounds spread more than {:.0}% of the median\n\n",
        config.profile,
        Machine::detect().describe(),
        crate::harness::NOISY_SPREAD * 100.0
    );
    let mut table = Table::new(vec!["subject".into(), "best ns".into(), "median ns".into(), "worst ns".into()]);
    for r in &results {
        let flag = if r.spread().is_noisy() { " ⚠" } else { "" };
        table.row(vec![
            r.id.to_string(),
            format!("{:.2}", r.best_ns),
            format!("{:.2}{flag}", r.median_ns),
            format!("{:.2}", r.worst_ns),
        ]);
    }
    out.push_str(&table.render());
    (out, results)
}

/// Runs the single-thread suite: measures, prints, writes `single.csv`,
/// `single.json` and its table for `index.html`.
pub fn run(config: &Config, out: &Output) -> Result<String, BenchError> {
    let (text, rows) = measure(config);
    let machine = Machine::detect();
    let header = ["subject", "best_ns", "median_ns", "worst_ns", "spread", "cpu", "cores", "commit"];
    let csv: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                format!("{:.3}", r.best_ns),
                format!("{:.3}", r.median_ns),
                format!("{:.3}", r.worst_ns),
                format!("{:.4}", r.spread().relative()),
                machine.cpu.clone(),
                machine.cores.to_string(),
                machine.version(),
            ]
        })
        .collect();
    out.csv("single.csv", &header, &csv)?;
    out.json("single.json", &serde_json::json!({ "machine": machine, "results": rows }))?;
    let mut table = HtmlTable::new(
        "Single thread: ns per operation",
        format!(
            "{}. Every subject runs one batch of 100k operations per round, all subjects in turn; each cell: \
             the median round, and below it the best and the worst round.",
            machine.describe()
        ),
        vec!["subject".into(), "ns per operation".into()],
    );
    for r in &rows {
        table.row(vec![Cell::text(r.id), Cell::spread(&r.spread(), |v| format!("{v:.2}"), "")]);
    }
    out.html_table("single", &table.render())?;
    Ok(text)
}
