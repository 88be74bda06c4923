//! The accuracy suite: every limiter under overload, on every thread, for several
//! refill periods; admitted requests against the ideal `burst + rate × elapsed`.
//!
//! The window limiters run 1 000 per 10 ms: the same rate and initial burst, so the
//! same ideal. A ratio above 1 is over-admission (documented for the fixed window's
//! boundary burst and for leased and approximate modes, a bug anywhere else); below 1 is capacity left unused (a lagging coarse clock
//! refills late; a lock that serializes threads cannot keep up).

use crate::check::{Check, Weir};
use crate::harness::{BenchError, Config, Output, Workload, progress};
use crate::html::{Cell, HtmlTable};
use crate::peers::{MutexTokenBucket, leaky_bucket, ratelimit};
use crate::report::{Machine, Table};
use crate::windows::WindowKind;
use serde::Serialize;
use std::time::Duration;
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_rl_core::{CoarseClock, MonotonicClock, Quota};

/// The overload quota: 100 000 per second, burst 1 000.
pub const RATE: u64 = 100_000;
/// See [`RATE`].
pub const BURST: u64 = 1_000;

fn quota() -> Quota {
    Quota::per_second(RATE).and_then(|q| q.with_burst(BURST)).expect("a valid quota")
}

/// A limiter under test, built fresh for each run.
#[derive(Debug, Clone, Copy)]
pub struct Subject {
    /// Who.
    pub name: &'static str,
    /// Its documented over-admission bound in requests (0: exact), for the report.
    pub bound: fn() -> u64,
    /// Runs it under overload on `threads` threads for `duration`; returns
    /// (admitted, elapsed).
    pub run: fn(usize, Duration) -> (u64, Duration),
}

struct Overload<L>(L);

impl<L: Check> Workload for Overload<L> {
    type Local = ();
    fn local(&self, _: usize) {}
    #[inline]
    fn op(&self, _: &mut ()) -> bool {
        self.0.check_one()
    }
}

fn overload<L: Check>(limiter: L, threads: usize, duration: Duration) -> (u64, Duration) {
    let sample = crate::harness::run(&Overload(limiter), threads, duration);
    (sample.admitted, sample.elapsed)
}

fn coarse() -> CoarseClock {
    CoarseClock::with_upkeep(Duration::from_millis(1)).expect("the coarse clock's upkeep thread starts")
}

fn zero() -> u64 {
    0
}

/// A window limiter with the same rate and initial burst as the token buckets:
/// [`BURST`] per `BURST / RATE` (1 000 per 10 ms).
fn window(kind: WindowKind) -> Weir<Box<dyn weir_rl_core::Limiter + Send + Sync>> {
    let period = Duration::from_nanos(1_000_000_000 * BURST / RATE);
    let quota = Quota::new(BURST, period).expect("a valid quota");
    Weir(crate::windows::with_clock(quota, MonotonicClock::new(), kind))
}

/// Every subject of the accuracy suite.
pub fn subjects() -> Vec<Subject> {
    let s = |name, bound, run| Subject { name, bound, run };
    vec![
        s("weir-gcra", zero, |t, d| overload(Gcra::with_clock(quota(), MonotonicClock::new()), t, d)),
        s("weir-gcra+coarse", zero, |t, d| overload(Gcra::with_clock(quota(), coarse()), t, d)),
        s(
            "weir-leased",
            || LeaseConfig::default().over_admission_bound(&quota()),
            |t, d| overload(LeasedGcra::with_clock(quota(), LeaseConfig::default(), MonotonicClock::new()), t, d),
        ),
        s("governor", zero, |t, d| overload(crate::peers::governor(RATE as u32, BURST as u32), t, d)),
        s("ratelimit", zero, |t, d| overload(ratelimit(RATE, BURST), t, d)),
        s("leaky-bucket", zero, |t, d| {
            overload(leaky_bucket(BURST as usize, (RATE / 1_000) as usize, Duration::from_millis(1)), t, d)
        }),
        s("mutex-bucket", zero, |t, d| overload(MutexTokenBucket::new(RATE as f64, BURST as f64), t, d)),
        s("weir-fixed", || BURST, |t, d| overload(window(WindowKind::Fixed), t, d)),
        s("weir-sliding", zero, |t, d| overload(window(WindowKind::Sliding), t, d)),
        s("weir-log", zero, |t, d| overload(window(WindowKind::Log), t, d)),
        s("weir-striped", zero, |t, d| overload(window(WindowKind::StripedExact), t, d)),
        s("weir-striped-approx", || BURST / 1_024, |t, d| overload(window(WindowKind::StripedApproximate), t, d)),
    ]
}

/// One subject's result.
#[derive(Debug, Clone, Serialize)]
pub struct AccuracyResult {
    /// Who.
    pub subject: &'static str,
    /// Threads.
    pub threads: usize,
    /// Admitted requests.
    pub admitted: u64,
    /// `burst + rate × elapsed`.
    pub ideal: f64,
    /// `admitted / ideal`.
    pub ratio: f64,
    /// The documented over-admission bound, in requests.
    pub bound: u64,
}

/// Runs the accuracy suite.
pub fn run(config: &Config, out: &Output) -> Result<String, BenchError> {
    let threads = *config.threads.last().unwrap_or(&1);
    let duration = if config.full() { Duration::from_secs(2) } else { Duration::from_millis(500) };
    let chosen: Vec<Subject> =
        subjects().into_iter().filter(|s| config.selects(&format!("accuracy/{}", s.name))).collect();
    let bar = progress(config, chosen.len());
    let results: Vec<AccuracyResult> = chosen
        .iter()
        .map(|s| {
            bar.set_message(s.name);
            let (admitted, elapsed) = (s.run)(threads, duration);
            bar.inc(1);
            let ideal = BURST as f64 + RATE as f64 * elapsed.as_secs_f64();
            AccuracyResult {
                subject: s.name,
                threads,
                admitted,
                ideal,
                ratio: admitted as f64 / ideal,
                bound: (s.bound)(),
            }
        })
        .collect();
    bar.finish_and_clear();
    let machine = Machine::detect();
    let mut table =
        Table::new(vec!["limiter".into(), "admitted".into(), "ideal".into(), "admitted/ideal".into(), "bound".into()]);
    for r in &results {
        table.row(vec![
            r.subject.to_string(),
            r.admitted.to_string(),
            format!("{:.0}", r.ideal),
            format!("{:.4}", r.ratio),
            r.bound.to_string(),
        ]);
    }
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.subject.to_string(),
                r.threads.to_string(),
                r.admitted.to_string(),
                format!("{:.1}", r.ideal),
                format!("{:.5}", r.ratio),
                r.bound.to_string(),
                machine.version(),
            ]
        })
        .collect();
    out.csv("accuracy.csv", &["subject", "threads", "admitted", "ideal", "ratio", "bound", "commit"], &rows)?;
    let mut html = HtmlTable::new(
        "Accuracy under overload: admitted against the ideal",
        format!(
            "{}. {RATE}/s, burst {BURST}, every limiter hammered by {threads} threads for {duration:?} (one run each); \
             ideal = burst + rate × elapsed; bound = the documented over-admission, in requests.",
            machine.describe()
        ),
        ["limiter", "admitted", "ideal", "admitted / ideal", "bound"].map(String::from).to_vec(),
    );
    for r in &results {
        html.row(vec![
            Cell::text(r.subject),
            Cell::number(r.admitted.to_string()),
            Cell::number(format!("{:.0}", r.ideal)),
            Cell::number(format!("{:.4}", r.ratio)),
            Cell::number(r.bound.to_string()),
        ]);
    }
    out.html_table("accuracy", &html.render())?;
    out.json(
        "accuracy.json",
        &serde_json::json!({ "machine": machine, "rate_per_sec": RATE, "burst": BURST, "results": results }),
    )?;
    Ok(format!(
        "weir-bench accuracy ({} profile)\nmachine: {}\n{RATE}/s, burst {BURST}, every limiter hammered by {threads} threads for \
         {duration:?}; ideal = burst + rate × elapsed\n\n{}",
        config.profile,
        machine.describe(),
        table.render()
    ))
}

/// Subject ids for `--only`.
pub fn ids() -> Vec<String> {
    subjects().iter().map(|s| format!("accuracy/{}", s.name)).collect()
}
