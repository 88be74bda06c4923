//! The throughput suite: aggregate checks per second over a thread sweep, weir and
//! peers side by side, allowed and denied paths separately.
//!
//! Each point is the median of `--reps` timed runs, with the slowest and fastest
//! kept (CSV, JSON, and the ranges in `index.html`); a point whose runs spread more
//! than 20% of the median is flagged (⚠). Threads are pinned to cores where the OS
//! allows it (see [`crate::harness::pin`]). The per-thread counter (every thread
//! increments its own cache line) is measured in every run of the suite, even when
//! `--only` leaves it out, because every chart draws it as the ideal.

use crate::chart::{Chart, Scale, Series, Style, XAxis, line_chart};
use crate::check::Check;
use crate::harness::{BenchError, Config, Latency, Output, Sample, Spread, Workload, progress};
use crate::html::{Cell, HtmlTable};
use crate::keyed::{KeyedWorkload, Keys, governor_keyed, weir_keyed, weir_keyed_hot, weir_keyed_siphash};
use crate::peers::{MutexTokenBucket, governor, governor_upkeep, leaky_bucket, ratelimit};
use crate::report::{Machine, Table, rate};
use crossbeam_utils::CachePadded;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_rl_core::{Clock, CoarseClock, MonotonicClock, Quota};
use weir_window::StripedMode;

/// Which situation a subject measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// One limiter shared by every thread, every check admitted.
    HotAllowed,
    /// One limiter shared by every thread, exhausted: every check denied.
    HotDenied,
    /// One limiter per thread, every check admitted.
    PerThread,
    /// One keyed store, thread `t` asking for key `t`.
    KeyPerThread,
    /// One keyed store, 100k keys uniformly spread.
    Keys100k,
    /// One keyed store, 100k keys, Zipf-skewed.
    KeysZipf,
    /// One keyed store, every thread asking for the same key.
    HotKey,
    /// Hardware references: what the machine can do at all.
    Reference,
}

impl Scenario {
    /// Short name for tables and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Self::HotAllowed => "hot-allowed",
            Self::HotDenied => "hot-denied",
            Self::PerThread => "per-thread",
            Self::KeyPerThread => "keyed-per-thread",
            Self::Keys100k => "keyed-100k",
            Self::KeysZipf => "keyed-zipf",
            Self::HotKey => "keyed-hot-key",
            Self::Reference => "reference",
        }
    }
}

/// One measurable thing.
#[derive(Debug, Clone, Copy)]
pub struct Subject {
    /// What it measures.
    pub scenario: Scenario,
    /// Who is measured ("weir-gcra", "governor", ...).
    pub name: &'static str,
    /// The subject of the same scenario this one is compared with (same clock
    /// class: precise with precise, coarse with coarse); `None` for peers.
    pub compare_to: Option<&'static str>,
    /// Runs it once on `threads` threads for `duration`.
    pub run: fn(usize, Duration) -> Sample,
}

impl Subject {
    /// `scenario/name`, what `--only` matches against.
    pub fn id(&self) -> String {
        format!("{}/{}", self.scenario.name(), self.name)
    }
}

/// A rate the allowed-path subjects never reach: 10⁹ per second, burst 10⁹.
const OPEN: u32 = 1_000_000_000;

fn open_quota() -> Quota {
    Quota::per_second(OPEN as u64).and_then(|q| q.with_burst(OPEN as u64)).expect("a valid quota")
}

/// One request per hour, already taken: every check is denied.
fn closed_quota() -> Quota {
    Quota::per_hour(1).expect("a valid quota")
}

/// A shared limiter, checked by every thread.
struct Shared<L>(L);

impl<L: Check> Workload for Shared<L> {
    type Local = ();
    fn local(&self, _: usize) {}
    #[inline]
    fn op(&self, _: &mut ()) -> bool {
        self.0.check_one()
    }
}

/// A limiter per thread, made by the function before the timed region.
struct EachThread<L>(fn() -> L);

impl<L: Check + Send> Workload for EachThread<L> {
    type Local = L;
    fn local(&self, _: usize) -> L {
        (self.0)()
    }
    #[inline]
    fn op(&self, local: &mut L) -> bool {
        local.check_one()
    }
}

fn coarse_clock() -> CoarseClock {
    CoarseClock::with_upkeep(Duration::from_millis(1)).expect("the coarse clock's upkeep thread starts")
}

fn drained_gcra<C: Clock>(clock: C) -> Gcra<C> {
    let limiter = Gcra::with_clock(closed_quota(), clock);
    let _ = limiter.check();
    limiter
}

/// A leased GCRA limiter, one stripe per core, that is empty for the next hour.
pub fn drained_leased() -> LeasedGcra<MonotonicClock> {
    let limiter = LeasedGcra::with_clock(closed_quota(), LeaseConfig::default(), MonotonicClock::new());
    let _ = limiter.check();
    limiter
}

/// The hardware reference: every thread increments one shared word.
struct SharedAtomic(CachePadded<AtomicU64>);

impl Workload for SharedAtomic {
    type Local = ();
    fn local(&self, _: usize) {}
    #[inline]
    fn op(&self, _: &mut ()) -> bool {
        // Ordering: Relaxed; a counter, publishing nothing.
        self.0.fetch_add(1, Ordering::Relaxed) != u64::MAX
    }
}

/// The hardware reference: every thread increments its own word on its own line.
struct PerThreadAtomic(Vec<CachePadded<AtomicU64>>);

impl Workload for PerThreadAtomic {
    type Local = usize;
    fn local(&self, thread: usize) -> usize {
        thread
    }
    #[inline]
    fn op(&self, thread: &mut usize) -> bool {
        // Ordering: Relaxed; a counter, publishing nothing.
        self.0[*thread].fetch_add(1, Ordering::Relaxed) != u64::MAX
    }
}

/// Every subject of the throughput suite, in table order.
pub fn subjects() -> Vec<Subject> {
    use Scenario::*;
    let s = |scenario, name, compare_to, run| Subject { scenario, name, compare_to, run };
    let (gov, gov_upkeep, gov_keyed) = (Some("governor"), Some("governor+upkeep"), Some("governor-keyed"));
    vec![
        s(HotAllowed, "weir-gcra", gov, |t, d| {
            crate::harness::run(&Shared(Gcra::with_clock(open_quota(), MonotonicClock::new())), t, d)
        }),
        s(HotAllowed, "weir-gcra+coarse", gov_upkeep, |t, d| {
            crate::harness::run(&Shared(Gcra::with_clock(open_quota(), coarse_clock())), t, d)
        }),
        s(HotAllowed, "governor", None, |t, d| crate::harness::run(&Shared(governor(OPEN, OPEN)), t, d)),
        s(HotAllowed, "governor+upkeep", None, |t, d| crate::harness::run(&Shared(governor_upkeep(OPEN, OPEN)), t, d)),
        s(HotAllowed, "weir-leased", gov, |t, d| {
            crate::harness::run(
                &Shared(LeasedGcra::with_clock(open_quota(), LeaseConfig::default(), MonotonicClock::new())),
                t,
                d,
            )
        }),
        s(HotAllowed, "weir-leased+coarse", gov_upkeep, |t, d| {
            crate::harness::run(
                &Shared(LeasedGcra::with_clock(open_quota(), LeaseConfig::default(), coarse_clock())),
                t,
                d,
            )
        }),
        s(HotAllowed, "weir-fixed", gov, |t, d| crate::harness::run(&Shared(crate::windows::fixed_open()), t, d)),
        s(HotAllowed, "weir-sliding", gov, |t, d| crate::harness::run(&Shared(crate::windows::sliding_open()), t, d)),
        s(HotAllowed, "weir-log", gov, |t, d| crate::harness::run(&Shared(crate::windows::log_open()), t, d)),
        s(HotAllowed, "weir-striped", gov, |t, d| {
            crate::harness::run(&Shared(crate::windows::striped_open(StripedMode::Exact)), t, d)
        }),
        s(HotAllowed, "weir-striped-approx", gov, |t, d| {
            crate::harness::run(&Shared(crate::windows::striped_open(StripedMode::Approximate)), t, d)
        }),
        s(HotAllowed, "ratelimit", None, |t, d| {
            crate::harness::run(&Shared(ratelimit(OPEN as u64, OPEN as u64)), t, d)
        }),
        s(HotAllowed, "leaky-bucket", None, |t, d| {
            crate::harness::run(&Shared(leaky_bucket(OPEN as usize, 1_000_000, Duration::from_millis(1))), t, d)
        }),
        s(HotAllowed, "mutex-bucket", gov, |t, d| {
            crate::harness::run(&Shared(MutexTokenBucket::new(OPEN as f64, OPEN as f64)), t, d)
        }),
        s(HotDenied, "weir-gcra", gov, |t, d| crate::harness::run(&Shared(drained_gcra(MonotonicClock::new())), t, d)),
        s(HotDenied, "weir-gcra+coarse", gov_upkeep, |t, d| {
            crate::harness::run(&Shared(drained_gcra(coarse_clock())), t, d)
        }),
        s(HotDenied, "governor", None, |t, d| {
            let limiter = governor(1, 1);
            let _ = limiter.check();
            crate::harness::run(&Shared(limiter), t, d)
        }),
        s(HotDenied, "governor+upkeep", None, |t, d| {
            let limiter = governor_upkeep(1, 1);
            let _ = limiter.check();
            crate::harness::run(&Shared(limiter), t, d)
        }),
        s(HotDenied, "weir-leased", gov, |t, d| crate::harness::run(&Shared(drained_leased()), t, d)),
        s(HotDenied, "weir-fixed", gov, |t, d| crate::harness::run(&Shared(crate::windows::fixed_closed()), t, d)),
        s(HotDenied, "weir-sliding", gov, |t, d| crate::harness::run(&Shared(crate::windows::sliding_closed()), t, d)),
        s(HotDenied, "weir-log", gov, |t, d| crate::harness::run(&Shared(crate::windows::log_closed()), t, d)),
        s(HotDenied, "weir-striped", gov, |t, d| {
            crate::harness::run(&Shared(crate::windows::striped_closed(StripedMode::Exact)), t, d)
        }),
        s(HotDenied, "ratelimit", None, |t, d| crate::harness::run(&Shared(ratelimit(0, 1)), t, d)),
        s(HotDenied, "leaky-bucket", None, |t, d| {
            crate::harness::run(&Shared(leaky_bucket(1, 0, Duration::ZERO)), t, d)
        }),
        s(HotDenied, "mutex-bucket", gov, |t, d| {
            let limiter = MutexTokenBucket::new(1.0 / 3600.0, 1.0);
            limiter.drain();
            crate::harness::run(&Shared(limiter), t, d)
        }),
        s(PerThread, "weir-gcra", gov, |t, d| {
            crate::harness::run(&EachThread(|| Gcra::with_clock(open_quota(), MonotonicClock::new())), t, d)
        }),
        s(PerThread, "governor", None, |t, d| crate::harness::run(&EachThread(|| governor(OPEN, OPEN)), t, d)),
        s(KeyPerThread, "weir-keyed", gov_keyed, |t, d| {
            crate::harness::run(&KeyedWorkload::new(weir_keyed(), Keys::PerThread, t), t, d)
        }),
        s(KeyPerThread, "governor-keyed", None, |t, d| {
            crate::harness::run(&KeyedWorkload::new(governor_keyed(), Keys::PerThread, t), t, d)
        }),
        s(Keys100k, "weir-keyed", gov_keyed, |t, d| {
            crate::harness::run(&KeyedWorkload::new(weir_keyed(), Keys::Uniform, t), t, d)
        }),
        s(Keys100k, "weir-keyed+siphash", gov_keyed, |t, d| {
            crate::harness::run(&KeyedWorkload::new(weir_keyed_siphash(), Keys::Uniform, t), t, d)
        }),
        s(Keys100k, "governor-keyed", None, |t, d| {
            crate::harness::run(&KeyedWorkload::new(governor_keyed(), Keys::Uniform, t), t, d)
        }),
        s(KeysZipf, "weir-keyed", gov_keyed, |t, d| {
            crate::harness::run(&KeyedWorkload::new(weir_keyed(), Keys::Zipf, t), t, d)
        }),
        s(KeysZipf, "governor-keyed", None, |t, d| {
            crate::harness::run(&KeyedWorkload::new(governor_keyed(), Keys::Zipf, t), t, d)
        }),
        s(HotKey, "weir-keyed", gov_keyed, |t, d| {
            crate::harness::run(&KeyedWorkload::new(weir_keyed(), Keys::Hot, t), t, d)
        }),
        s(HotKey, "weir-keyed+hot", gov_keyed, |t, d| {
            crate::harness::run(&KeyedWorkload::new(weir_keyed_hot(), Keys::Hot, t), t, d)
        }),
        s(HotKey, "governor-keyed", None, |t, d| {
            crate::harness::run(&KeyedWorkload::new(governor_keyed(), Keys::Hot, t), t, d)
        }),
        s(Reference, "shared-fetch-add", None, |t, d| {
            crate::harness::run(&SharedAtomic(CachePadded::new(AtomicU64::new(0))), t, d)
        }),
        s(Reference, "per-thread-counter", None, |t, d| {
            crate::harness::run(&PerThreadAtomic((0..t).map(|_| CachePadded::new(AtomicU64::new(0))).collect()), t, d)
        }),
    ]
}

/// The runs of one subject over the thread sweep.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Who.
    #[serde(serialize_with = "subject_fields")]
    pub subject: Subject,
    /// One point per thread count.
    pub points: Vec<Point>,
}

/// One subject at one thread count.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Point {
    /// Threads.
    pub threads: usize,
    /// Median aggregate ops/s over the repetitions.
    pub median: f64,
    /// Slowest repetition.
    pub min: f64,
    /// Fastest repetition.
    pub max: f64,
    /// Fraction of operations that admitted, over all repetitions.
    pub admitted: f64,
    /// The lowest fairness of any repetition (see [`Sample::fairness`]).
    pub fairness: f64,
    /// Whether every thread of every repetition was pinned to its core.
    pub pinned: bool,
    /// One check's latency (sampled, with two clock reads around it): each
    /// quantile's median over the repetitions.
    pub latency: Latency,
}

impl Point {
    /// The repetitions' median, min and max.
    pub fn spread(&self) -> Spread {
        Spread { median: self.median, min: self.min, max: self.max }
    }
}

/// A whole throughput run.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputResult {
    /// Where it ran.
    pub machine: Machine,
    /// Every subject measured.
    pub rows: Vec<Row>,
}

/// The hardware reference every chart draws as its ideal: a counter per thread, on
/// its own cache line (what the machine does when threads share nothing).
pub const IDEAL: (Scenario, &str) = (Scenario::Reference, "per-thread-counter");

/// The subjects `config` selects, and the ideal (measured in every run of the suite:
/// it is every chart's guide line).
fn selected(config: &Config) -> Vec<Subject> {
    subjects().into_iter().filter(|s| config.selects(&s.id()) || (s.scenario, s.name) == IDEAL).collect()
}

/// Measures every selected subject.
pub fn measure(config: &Config) -> ThroughputResult {
    let machine = Machine::detect();
    let subjects = selected(config);
    let bar = progress(config, subjects.len() * config.threads.len());
    let warmup = config.duration.min(Duration::from_millis(50));
    let rows = subjects
        .into_iter()
        .map(|subject| {
            let points = config
                .threads
                .iter()
                .map(|&threads| {
                    bar.set_message(format!("{} × {threads}", subject.id()));
                    let _ = (subject.run)(threads, warmup);
                    let samples: Vec<Sample> =
                        (0..config.reps).map(|_| (subject.run)(threads, config.duration)).collect();
                    bar.inc(1);
                    let rates: Vec<f64> = samples.iter().map(Sample::ops_per_sec).collect();
                    let spread = Spread::of(&rates);
                    let (ops, admitted) = samples.iter().fold((0, 0), |(o, a), s| (o + s.ops, a + s.admitted));
                    Point {
                        threads,
                        median: spread.median,
                        min: spread.min,
                        max: spread.max,
                        admitted: admitted as f64 / ops.max(1) as f64,
                        fairness: samples.iter().map(|s| s.fairness).fold(1.0, f64::min),
                        pinned: samples.iter().all(|s| s.pinned),
                        latency: median_latency(&samples),
                    }
                })
                .collect();
            Row { subject, points }
        })
        .collect();
    bar.finish_and_clear();
    ThroughputResult { machine, rows }
}

/// Each latency quantile's median over `samples` (the upper median of an even
/// count).
fn median_latency(samples: &[Sample]) -> Latency {
    let median = |quantile: fn(&Latency) -> u64| {
        let mut values: Vec<u64> = samples.iter().map(|s| quantile(&s.latency)).collect();
        values.sort_unstable();
        values.get(values.len() / 2).copied().unwrap_or(0)
    };
    Latency {
        samples: samples.iter().map(|s| s.latency.samples).sum(),
        p50: median(|l| l.p50),
        p99: median(|l| l.p99),
        p999: median(|l| l.p999),
    }
}

/// `p50 / p99 / p99.9` in ns.
fn quantiles(latency: &Latency) -> String {
    format!("{} / {} / {}", latency.p50, latency.p99, latency.p999)
}

impl ThroughputResult {
    /// The point `row` is compared with at `threads`, if measured.
    fn baseline(&self, row: &Row, threads: usize) -> Option<f64> {
        let peer = row.subject.compare_to?;
        self.rows
            .iter()
            .find(|r| r.subject.name == peer && r.subject.scenario == row.subject.scenario)
            .and_then(|r| r.points.iter().find(|p| p.threads == threads))
            .map(|p| p.median)
    }

    fn ratio(&self, row: &Row, point: &Point) -> String {
        self.baseline(row, point.threads).map_or(String::new(), |base| format!(" ({:.1}×)", point.median / base))
    }

    /// The report printed on stdout.
    pub fn render(&self, config: &Config) -> String {
        let mut out = format!(
            "weir-bench throughput ({} profile)\nmachine: {}\neach cell: median of {} runs of {:?}, \
             aggregate checks per second over all threads; (×) = ratio to the governor row of the same clock class, same run;\n\
             ⚠ = the runs spread more than {:.0}% of the median (see index.html for every range);\n\
             fairness = slowest thread's operations / mean per thread, worst run (1 = fair, 0 = starved);\n\
             latency = one check timed alone (every {}th), ns, p50 / p99 / p99.9, with two clock reads around it\n\n",
            config.profile,
            self.machine.describe(),
            config.reps,
            config.duration,
            crate::harness::NOISY_SPREAD * 100.0,
            crate::harness::BATCH,
        );
        let mut header = vec!["scenario".to_string(), "subject".to_string()];
        header.extend(config.threads.iter().map(|t| format!("{t} thr")));
        header.push("ns/check @1".into());
        let widest = config.threads.last().copied().unwrap_or(1);
        header.push(format!("fairness @{widest}"));
        header.push(format!("latency @{widest}"));
        let mut table = Table::with_left_columns(header, 2);
        for row in &self.rows {
            let mut cells = vec![row.subject.scenario.name().to_string(), row.subject.name.to_string()];
            for point in &row.points {
                let flag = if point.spread().is_noisy() { " ⚠" } else { "" };
                cells.push(format!("{}{}{flag}", rate(point.median), self.ratio(row, point)));
            }
            let single =
                row.points.iter().find(|p| p.threads == 1).map_or("-".into(), |p| format!("{:.1}", 1e9 / p.median));
            cells.push(single);
            let fairness =
                row.points.iter().find(|p| p.threads == widest).map_or("-".into(), |p| format!("{:.2}", p.fairness));
            cells.push(fairness);
            cells.push(row.points.iter().find(|p| p.threads == widest).map_or("-".into(), |p| quantiles(&p.latency)));
            table.row(cells);
        }
        out.push_str(&table.render());
        out
    }

    /// The table for `index.html`: every cell with the range of its runs.
    pub fn html_table(&self, config: &Config) -> HtmlTable {
        let mut header = vec!["scenario".to_string(), "subject".to_string()];
        header.extend(
            config.threads.iter().map(|&t| if t == 1 { "1 thread".to_string() } else { format!("{t} threads") }),
        );
        header.push("ns/check @1".into());
        let widest = config.threads.last().copied().unwrap_or(1);
        header.push(format!("fairness @{widest}"));
        header.push(format!("latency ns @{widest} (p50 / p99 / p99.9)"));
        let mut table = HtmlTable::new(
            "Throughput: aggregate checks per second",
            format!(
                "{}. Each cell: median of {} runs of {:?} (×: ratio to governor, same clock class, same run), \
                 and below it the slowest and fastest run.",
                self.machine.describe(),
                config.reps,
                config.duration
            ),
            header,
        );
        for row in &self.rows {
            let mut cells = vec![Cell::text(row.subject.scenario.name()), Cell::text(row.subject.name)];
            for point in &row.points {
                cells.push(Cell::spread(&point.spread(), rate, &self.ratio(row, point)));
            }
            cells.push(Cell::number(
                row.points.iter().find(|p| p.threads == 1).map_or("-".into(), |p| format!("{:.1}", 1e9 / p.median)),
            ));
            cells.push(Cell::number(
                row.points.iter().find(|p| p.threads == widest).map_or("-".into(), |p| format!("{:.2}", p.fairness)),
            ));
            cells.push(Cell::number(
                row.points.iter().find(|p| p.threads == widest).map_or("-".into(), |p| quantiles(&p.latency)),
            ));
            table.row(cells);
        }
        table
    }

    /// Every point as CSV rows.
    pub fn csv_rows(&self) -> Vec<Vec<String>> {
        self.rows
            .iter()
            .flat_map(|row| {
                row.points.iter().map(move |p| {
                    let ratio = self.baseline(row, p.threads).map_or(String::new(), |b| format!("{:.3}", p.median / b));
                    vec![
                        row.subject.scenario.name().to_string(),
                        row.subject.name.to_string(),
                        p.threads.to_string(),
                        format!("{:.0}", p.median),
                        format!("{:.0}", p.min),
                        format!("{:.0}", p.max),
                        format!("{:.4}", p.spread().relative()),
                        row.subject.compare_to.unwrap_or("").to_string(),
                        ratio,
                        format!("{:.4}", p.admitted),
                        format!("{:.3}", p.fairness),
                        p.latency.p50.to_string(),
                        p.latency.p99.to_string(),
                        p.latency.p999.to_string(),
                        p.pinned.to_string(),
                        self.machine.cpu.clone(),
                        self.machine.cores.to_string(),
                        self.machine.version(),
                    ]
                })
            })
            .collect()
    }

    /// One chart per scenario: every subject against threads, with the ideal.
    pub fn charts(&self, config: &Config, out: &Output) -> Result<(), BenchError> {
        let mut scenarios: Vec<Scenario> = self.rows.iter().map(|r| r.subject.scenario).collect();
        scenarios.dedup();
        let millions = |row: &Row| row.points.iter().map(|p| (p.threads as f64, p.median / 1e6)).collect::<Vec<_>>();
        let ideal = self.rows.iter().find(|r| (r.subject.scenario, r.subject.name) == IDEAL);
        for scenario in scenarios {
            let mut series = Vec::new();
            if let Some(ideal) = ideal.filter(|_| scenario != Scenario::Reference) {
                series.push(Series::new("ideal: a counter per thread", Style::Guide, millions(ideal)));
            }
            for row in self.rows.iter().filter(|r| r.subject.scenario == scenario) {
                let style = match (scenario, row.subject.name.starts_with("weir")) {
                    (Scenario::Reference, _) => Style::Reference,
                    (_, true) => Style::Weir,
                    (_, false) => Style::Peer,
                };
                series.push(Series::new(row.subject.name, style, millions(row)));
            }
            let title = format!("{}: aggregate checks per second ({})", scenario.name(), self.machine.cpu);
            let chart = Chart {
                title: &title,
                x_label: "threads",
                y_label: "million checks per second (log)",
                x_axis: XAxis::Threads(config.threads.clone()),
                y_scale: Scale::Log,
            };
            line_chart(&out.path(&format!("throughput-{}.svg", scenario.name())), &chart, &series)
                .map_err(|e| out.error(e))?;
        }
        Ok(())
    }
}

/// The CSV columns of `throughput.csv`.
pub const CSV_HEADER: [&str; 18] = [
    "scenario",
    "subject",
    "threads",
    "median_ops_per_sec",
    "min_ops_per_sec",
    "max_ops_per_sec",
    "spread",
    "compared_to",
    "ratio",
    "admitted_fraction",
    "fairness",
    "latency_p50_ns",
    "latency_p99_ns",
    "latency_p999_ns",
    "pinned",
    "cpu",
    "cores",
    "commit",
];

fn subject_fields<S: serde::Serializer>(subject: &Subject, serializer: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut s = serializer.serialize_struct("Subject", 3)?;
    s.serialize_field("scenario", subject.scenario.name())?;
    s.serialize_field("name", subject.name)?;
    s.serialize_field("compare_to", &subject.compare_to)?;
    s.end()
}

/// Runs the throughput suite: measures, prints, and writes `throughput.csv`,
/// `throughput.json`, its table for `index.html` and one chart per scenario.
pub fn run(config: &Config, out: &Output) -> Result<String, BenchError> {
    let result = measure(config);
    out.csv("throughput.csv", &CSV_HEADER, &result.csv_rows())?;
    out.json("throughput.json", &result)?;
    out.html_table("throughput", &result.html_table(config).render())?;
    result.charts(config, out)?;
    Ok(result.render(config))
}
