//! The compare suite: every algorithm on the same synthetic traffic, with a hand-
//! driven clock (so the traces are deterministic: same input, same data), limited to
//! 10 per second (burst 10, windows of 1 s).
//!
//! Patterns: steady traffic above the limit; page loads that fire 10 calls at once
//! every 2 s; an idle client that saved up a burst; the fixed-window boundary attack
//! (10 just before a window boundary, 10 just after); a flood. For each, the
//! cumulative admissions over time (a chart per pattern) and a table measuring the
//! trade-offs the write-ups only describe: admitted and rejected, the most admitted
//! in any 1 s (burst allowance), how evenly admissions spread (the coefficient of
//! variation of admissions per 100 ms), and memory per limiter. The leaky bucket
//! queues instead of rejecting: its row counts items leaving the queue.

use crate::chart::{Chart, Scale, Series, Style, XAxis, line_chart};
use crate::harness::{BenchError, Config, Output};
use crate::html::{Cell, HtmlTable};
use crate::report::{Machine, Table};
use serde::Serialize;
use weir_gcra::Gcra;
use weir_leaky::LeakyBucket;
use weir_rl_core::{Limiter, ManualClock, Nanos, Quota};
use weir_window::{FixedWindow, SlidingLog, SlidingWindow, StripedMode, StripedSlidingWindow};

/// The limit every algorithm enforces: 10 per second, burst 10.
const LIMIT: u64 = 10;
/// Simulation step.
const STEP_MS: u64 = 1;
/// Trace bucket.
const BUCKET_MS: u64 = 100;

/// A traffic pattern: request counts at millisecond offsets, over a duration.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// Name.
    pub name: &'static str,
    /// What it models.
    pub about: &'static str,
    /// Length, ms.
    pub length_ms: u64,
    /// (ms, requests) in ascending time.
    pub arrivals: Vec<(u64, u64)>,
}

/// The patterns.
pub fn patterns() -> Vec<Pattern> {
    let every = |period_ms: u64, count: u64, from: u64, to: u64| -> Vec<(u64, u64)> {
        (from..to).step_by(period_ms as usize).map(|t| (t, count)).collect()
    };
    let mut saved = vec![(10_000, 50)];
    saved.extend(every(50, 1, 10_050, 15_000));
    vec![
        Pattern {
            name: "steady",
            about: "15 per second, evenly spaced (above the limit)",
            length_ms: 20_000,
            arrivals: every(67, 1, 0, 20_000),
        },
        Pattern {
            name: "page-loads",
            about: "10 calls at once every 2 s (5 per second on average)",
            length_ms: 20_000,
            arrivals: every(2_000, 10, 0, 20_000),
        },
        Pattern {
            name: "saved-burst",
            about: "idle 10 s, then 50 at once, then 20 per second",
            length_ms: 15_000,
            arrivals: saved,
        },
        Pattern {
            name: "boundary-attack",
            about: "10 at 0.999 s and 10 at 1.000 s, across a window boundary",
            length_ms: 3_000,
            arrivals: vec![(999, 10), (1_000, 10)],
        },
        Pattern { name: "flood", about: "100 per second", length_ms: 10_000, arrivals: every(10, 1, 0, 10_000) },
    ]
}

/// The algorithms compared.
const ALGORITHMS: [&str; 7] =
    ["gcra", "fixed-window", "sliding-window", "sliding-log", "striped-window", "leased-gcra", "leaky-bucket"];

/// Subject ids for `--only`.
pub fn ids() -> Vec<String> {
    ALGORITHMS.iter().map(|a| format!("compare/{a}")).collect()
}

fn quota() -> Quota {
    Quota::per_second(LIMIT).expect("a valid quota")
}

fn limiter(name: &str, clock: &ManualClock) -> Option<(Box<dyn Limiter>, usize)> {
    let c = clock.clone();
    let q = quota();
    Some(match name {
        "gcra" => (Box::new(Gcra::with_clock(q, c)), size_of::<Gcra<ManualClock>>()),
        "fixed-window" => (Box::new(FixedWindow::with_clock(q, c).ok()?), size_of::<FixedWindow<ManualClock>>()),
        "sliding-window" => (Box::new(SlidingWindow::with_clock(q, c).ok()?), size_of::<SlidingWindow<ManualClock>>()),
        "sliding-log" => {
            (Box::new(SlidingLog::with_clock(q, c).ok()?), size_of::<SlidingLog<ManualClock>>() + 8 * LIMIT as usize)
        }
        "striped-window" => {
            let l = StripedSlidingWindow::builder(q).stripes(2).mode(StripedMode::Exact).build_with_clock(c).ok()?;
            (Box::new(l), size_of::<weir_window::StripedSlidingWindow<ManualClock>>() + 2 * 128)
        }
        "leased-gcra" => {
            let config = weir_gcra::LeaseConfig::builder().stripes(2).build().ok()?;
            let size = size_of::<weir_gcra::LeasedGcra<ManualClock>>() + 2 * 128;
            (Box::new(weir_gcra::LeasedGcra::with_clock(q, config, c)), size)
        }
        _ => return None,
    })
}

/// What one algorithm did with one pattern.
#[derive(Debug, Clone, Serialize)]
pub struct Trace {
    /// Pattern.
    pub pattern: &'static str,
    /// Algorithm.
    pub algorithm: &'static str,
    /// Admitted (or, for the leaky bucket, left the queue).
    pub admitted: u64,
    /// Rejected.
    pub rejected: u64,
    /// The most admitted in any 1 s interval.
    pub max_in_one_second: u64,
    /// Coefficient of variation of admissions per 100 ms bucket (0 = perfectly even).
    pub unevenness: f64,
    /// Bytes per limiter.
    pub bytes: usize,
    /// Admissions per 100 ms bucket.
    pub per_bucket: Vec<u64>,
}

/// Runs one algorithm over one pattern, deterministically.
pub fn simulate(pattern: &Pattern, algorithm: &'static str) -> Option<Trace> {
    let clock = ManualClock::new();
    let mut admitted_at: Vec<u64> = Vec::new();
    let mut rejected = 0;
    let bytes;
    if algorithm == "leaky-bucket" {
        // Queue capacity = the burst; the bucket drains at the limit.
        let bucket = LeakyBucket::with_clock(quota(), LIMIT as usize, clock.clone()).ok()?;
        bytes = size_of::<LeakyBucket<u64, ManualClock>>() + 16 * LIMIT as usize;
        let mut next = 0;
        for t in (0..pattern.length_ms).step_by(STEP_MS as usize) {
            clock.set(Nanos::new(t * 1_000_000));
            while next < pattern.arrivals.len() && pattern.arrivals[next].0 <= t {
                for _ in 0..pattern.arrivals[next].1 {
                    if bucket.offer(t).is_err() {
                        rejected += 1;
                    }
                }
                next += 1;
            }
            while bucket.try_recv().is_ok() {
                admitted_at.push(t);
            }
        }
    } else {
        let (limiter, size) = limiter(algorithm, &clock)?;
        bytes = size;
        for &(t, count) in &pattern.arrivals {
            clock.set(Nanos::new(t * 1_000_000));
            for _ in 0..count {
                if limiter.check().is_allowed() {
                    admitted_at.push(t);
                } else {
                    rejected += 1;
                }
            }
        }
    }
    let buckets = pattern.length_ms.div_ceil(BUCKET_MS) as usize;
    let mut per_bucket = vec![0u64; buckets];
    for &t in &admitted_at {
        per_bucket[((t / BUCKET_MS) as usize).min(buckets - 1)] += 1;
    }
    let max_in_one_second = (0..admitted_at.len())
        .map(|i| admitted_at[i..].iter().take_while(|&&t| t < admitted_at[i] + 1_000).count() as u64)
        .max()
        .unwrap_or(0);
    let mean = per_bucket.iter().sum::<u64>() as f64 / buckets as f64;
    let variance = per_bucket.iter().map(|&b| (b as f64 - mean).powi(2)).sum::<f64>() / buckets as f64;
    let unevenness = if mean > 0.0 { variance.sqrt() / mean } else { 0.0 };
    Some(Trace {
        pattern: pattern.name,
        algorithm,
        admitted: admitted_at.len() as u64,
        rejected,
        max_in_one_second,
        unevenness,
        bytes,
        per_bucket,
    })
}

/// Runs every selected algorithm over every pattern.
pub fn traces(config: &Config) -> Vec<Trace> {
    let chosen: Vec<&'static str> =
        ALGORITHMS.iter().copied().filter(|a| config.selects(&format!("compare/{a}"))).collect();
    patterns().iter().flat_map(|p| chosen.iter().filter_map(move |a| simulate(p, a))).collect()
}

/// Runs the compare suite.
pub fn run(config: &Config, out: &Output) -> Result<String, BenchError> {
    let traces = traces(config);
    let machine = Machine::detect();
    let mut text = format!(
        "weir-bench compare\nmachine: {}\nevery algorithm limited to {LIMIT} per second (burst {LIMIT}, windows of 1 s), \
         on the same traffic, with a hand-driven clock\n",
        machine.describe()
    );
    let mut html = HtmlTable::new(
        "Compare: every algorithm on the same traffic",
        format!(
            "Every algorithm limited to {LIMIT} per second (burst {LIMIT}, windows of 1 s), with a hand-driven clock \
             (deterministic: one run each). max in 1 s = the most admitted in any 1 s; unevenness = coefficient of \
             variation of admissions per 100 ms."
        ),
        ["pattern", "algorithm", "admitted", "rejected", "max in 1 s", "unevenness", "bytes"]
            .map(String::from)
            .to_vec(),
    );
    for pattern in patterns() {
        let rows: Vec<&Trace> = traces.iter().filter(|t| t.pattern == pattern.name).collect();
        if rows.is_empty() {
            continue;
        }
        let offered: u64 = pattern.arrivals.iter().map(|a| a.1).sum();
        text.push_str(&format!("\n{}: {} ({offered} requests)\n", pattern.name, pattern.about));
        let mut table = Table::new(vec![
            "algorithm".into(),
            "admitted".into(),
            "rejected".into(),
            "max in 1 s".into(),
            "unevenness".into(),
            "bytes".into(),
        ]);
        for t in &rows {
            html.row(vec![
                Cell::text(t.pattern),
                Cell::text(t.algorithm),
                Cell::number(t.admitted.to_string()),
                Cell::number(t.rejected.to_string()),
                Cell::number(t.max_in_one_second.to_string()),
                Cell::number(format!("{:.2}", t.unevenness)),
                Cell::number(t.bytes.to_string()),
            ]);
            table.row(vec![
                t.algorithm.to_string(),
                t.admitted.to_string(),
                t.rejected.to_string(),
                t.max_in_one_second.to_string(),
                format!("{:.2}", t.unevenness),
                t.bytes.to_string(),
            ]);
        }
        text.push_str(&table.render());
        // The limit: no algorithm that enforces it exactly admits more than
        // burst + rate × t by time t (the fixed window's boundary burst can touch it).
        let seconds = pattern.length_ms as f64 / 1_000.0;
        let limit = Series::new(
            format!("limit: {LIMIT} + {LIMIT}/s × t"),
            Style::Guide,
            vec![(0.0, LIMIT as f64), (seconds, LIMIT as f64 * (1.0 + seconds))],
        );
        let series: Vec<Series> = std::iter::once(limit)
            .chain(rows.iter().map(|t| {
                let mut total = 0;
                let points = t
                    .per_bucket
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| {
                        total += n;
                        ((i as u64 + 1) as f64 * BUCKET_MS as f64 / 1_000.0, total as f64)
                    })
                    .collect();
                Series::new(t.algorithm, Style::Weir, points)
            }))
            .collect();
        let title = format!("{}: admitted so far ({} per second)", pattern.name, LIMIT);
        let chart = Chart {
            title: &title,
            x_label: "seconds",
            y_label: "admitted (cumulative)",
            x_axis: XAxis::Continuous,
            y_scale: Scale::Linear,
        };
        line_chart(&out.path(&format!("compare-{}.svg", pattern.name)), &chart, &series).map_err(|e| out.error(e))?;
    }
    let rows: Vec<Vec<String>> = traces
        .iter()
        .map(|t| {
            vec![
                t.pattern.to_string(),
                t.algorithm.to_string(),
                t.admitted.to_string(),
                t.rejected.to_string(),
                t.max_in_one_second.to_string(),
                format!("{:.4}", t.unevenness),
                t.bytes.to_string(),
            ]
        })
        .collect();
    out.csv(
        "compare.csv",
        &["pattern", "algorithm", "admitted", "rejected", "max_in_one_second", "unevenness", "bytes"],
        &rows,
    )?;
    out.html_table("compare", &html.render())?;
    out.json("compare.json", &serde_json::json!({ "limit_per_second": LIMIT, "traces": traces }))?;
    Ok(text)
}
