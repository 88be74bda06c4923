//! The pacing suite: a leaky bucket kept full by a producer, drained by blocking
//! consumers; does the output leave at the configured rate, and how late is each
//! item against an ideal schedule?
//!
//! Achieved rate = (items − 1) / (last output − first output). Lateness of the k-th
//! item = its output time − (first output + k × T).
//!
//! Each rate runs twice: with the default tolerance of 0, the strict guarantee (no
//! window W ever sees more than W/T + 1 items), where a consumer that wakes late
//! loses that time for good, so lateness accumulates and the rate falls short; and
//! with a tolerance τ of 1 ms, where a late consumer may catch up (at most τ/T items
//! back to back; any window sees at most (W + τ)/T + 1).
//!
//! Lateness percentiles come from an HDR histogram (`hdrhistogram`, 3 significant
//! digits), which also shows the early items of a bucket with tolerance as negative
//! lateness.

use crate::harness::{BenchError, Config, Output, progress};
use crate::html::{Cell, HtmlTable};
use crate::report::{Machine, Table};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use weir_leaky::LeakyBucket;
use weir_rl_core::Quota;

/// One rate's result.
#[derive(Debug, Clone, Serialize)]
pub struct PacingResult {
    /// Configured items per second.
    pub rate: u64,
    /// The bucket's tolerance, µs.
    pub tolerance_us: u64,
    /// Consumer threads.
    pub consumers: usize,
    /// Items that left.
    pub items: u64,
    /// Items per second achieved.
    pub achieved: f64,
    /// |achieved − rate| / rate.
    pub error: f64,
    /// Median lateness, µs.
    pub p50_late_us: f64,
    /// 99th-percentile lateness, µs.
    pub p99_late_us: f64,
}

/// Rates measured (items per second) and the consumers each gets.
fn rates(full: bool) -> Vec<(u64, usize)> {
    let mut rates = vec![(100, 1), (1_000, 1), (10_000, 1), (100_000, 2)];
    if !full {
        rates.retain(|r| r.0 >= 1_000);
    }
    rates
}

/// Subject ids for `--only`.
pub fn ids() -> Vec<String> {
    rates(true).iter().map(|(r, _)| format!("pacing/{r}")).collect()
}

fn pace(rate: u64, consumers: usize, tolerance: Duration, duration: Duration) -> PacingResult {
    let quota = Quota::per_second(rate).expect("a valid rate");
    let bucket = LeakyBucket::<u64>::builder(quota, 1_024).tolerance(tolerance).build();
    let bucket = Arc::new(bucket.expect("a valid bucket"));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let outputs: Vec<Vec<Duration>> = std::thread::scope(|s| {
        let producer = {
            let (bucket, stop) = (bucket.clone(), stop.clone());
            s.spawn(move || {
                let mut item = 0;
                // Ordering: Relaxed; the flag carries no data.
                while !stop.load(Ordering::Relaxed) {
                    match bucket.offer(item) {
                        Ok(_) => item += 1,
                        Err(_) => std::thread::sleep(Duration::from_micros(100)),
                    }
                }
                bucket.close();
            })
        };
        let handles: Vec<_> = (0..consumers)
            .map(|_| {
                let bucket = bucket.clone();
                s.spawn(move || {
                    let mut times = Vec::new();
                    while bucket.recv().is_ok() {
                        times.push(start.elapsed());
                    }
                    times
                })
            })
            .collect();
        std::thread::sleep(duration);
        // Ordering: Relaxed; see above.
        stop.store(true, Ordering::Relaxed);
        let _ = producer.join();
        handles.into_iter().map(|h| h.join().expect("a consumer panicked")).collect()
    });
    let mut times: Vec<Duration> = outputs.into_iter().flatten().filter(|t| *t <= duration).collect();
    times.sort();
    let items = times.len() as u64;
    let interval_ns = 1e9 / rate as f64;
    let (achieved, late_ns) = match (times.first(), times.last()) {
        (Some(first), Some(last)) if items > 1 => {
            let span = (*last - *first).as_secs_f64();
            let late: Vec<i64> = times
                .iter()
                .enumerate()
                .map(|(k, t)| ((*t - *first).as_nanos() as f64 - k as f64 * interval_ns) as i64)
                .collect();
            ((items - 1) as f64 / span, late)
        }
        _ => (0.0, Vec::new()),
    };
    let pct = lateness_percentiles(&late_ns, &[0.5, 0.99]);
    PacingResult {
        rate,
        tolerance_us: tolerance.as_micros() as u64,
        consumers,
        items,
        achieved,
        error: (achieved - rate as f64).abs() / rate as f64,
        p50_late_us: pct[0],
        p99_late_us: pct[1],
    }
}

/// The `quantiles` of `late_ns`, in µs (NaN for no items). Lateness is negative for
/// an item ahead of the ideal schedule (a bucket with tolerance catching up), and a
/// histogram counts only non-negative values, so every value is recorded as its
/// distance above the smallest one and the quantile shifted back.
fn lateness_percentiles(late_ns: &[i64], quantiles: &[f64]) -> Vec<f64> {
    let Some(&lowest) = late_ns.iter().min() else { return vec![f64::NAN; quantiles.len()] };
    let Ok(mut histogram) = Histogram::<u64>::new(3) else { return vec![f64::NAN; quantiles.len()] };
    for &late in late_ns {
        // Auto-resizing: recording cannot fail for a u64 value.
        let _ = histogram.record(late.abs_diff(lowest));
    }
    quantiles.iter().map(|&q| (histogram.value_at_quantile(q) as f64 + lowest as f64) / 1e3).collect()
}

/// Runs the pacing suite.
pub fn run(config: &Config, out: &Output) -> Result<String, BenchError> {
    let duration = if config.full() { Duration::from_secs(3) } else { Duration::from_millis(500) };
    let chosen: Vec<(u64, usize)> =
        rates(config.full()).into_iter().filter(|(r, _)| config.selects(&format!("pacing/{r}"))).collect();
    let tolerances = [Duration::ZERO, Duration::from_millis(1)];
    let bar = progress(config, chosen.len() * tolerances.len());
    let mut results = Vec::new();
    for (rate, consumers) in chosen {
        for tolerance in tolerances {
            bar.set_message(format!("{rate}/s, τ {tolerance:?}"));
            results.push(pace(rate, consumers, tolerance, duration));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let machine = Machine::detect();
    let mut table = Table::with_left_columns(
        vec![
            "rate/s".into(),
            "τ µs".into(),
            "consumers".into(),
            "items".into(),
            "achieved/s".into(),
            "error".into(),
            "p50 late µs".into(),
            "p99 late µs".into(),
        ],
        0,
    );
    let mut html = HtmlTable::new(
        "Pacing: the leaky bucket's output against its rate",
        format!(
            "{}. A leaky bucket of 1 024 kept full, drained by blocking consumers for {duration:?} (one run each); \
             lateness against the ideal schedule from the first output.",
            machine.describe()
        ),
        ["rate/s", "τ µs", "consumers", "items", "achieved/s", "error", "p50 late µs", "p99 late µs"]
            .map(String::from)
            .to_vec(),
    );
    for r in &results {
        html.row(vec![
            Cell::number(r.rate.to_string()),
            Cell::number(r.tolerance_us.to_string()),
            Cell::number(r.consumers.to_string()),
            Cell::number(r.items.to_string()),
            Cell::number(format!("{:.1}", r.achieved)),
            Cell::number(format!("{:.3}%", r.error * 100.0)),
            Cell::number(format!("{:.1}", r.p50_late_us)),
            Cell::number(format!("{:.1}", r.p99_late_us)),
        ]);
        table.row(vec![
            r.rate.to_string(),
            r.tolerance_us.to_string(),
            r.consumers.to_string(),
            r.items.to_string(),
            format!("{:.1}", r.achieved),
            format!("{:.3}%", r.error * 100.0),
            format!("{:.1}", r.p50_late_us),
            format!("{:.1}", r.p99_late_us),
        ]);
    }
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.rate.to_string(),
                r.tolerance_us.to_string(),
                r.consumers.to_string(),
                r.items.to_string(),
                format!("{:.3}", r.achieved),
                format!("{:.6}", r.error),
                format!("{:.2}", r.p50_late_us),
                format!("{:.2}", r.p99_late_us),
                machine.version(),
            ]
        })
        .collect();
    out.csv(
        "pacing.csv",
        &[
            "rate",
            "tolerance_us",
            "consumers",
            "items",
            "achieved_per_sec",
            "error",
            "p50_late_us",
            "p99_late_us",
            "commit",
        ],
        &rows,
    )?;
    out.html_table("pacing", &html.render())?;
    out.json("pacing.json", &serde_json::json!({ "machine": machine, "results": results }))?;
    Ok(format!(
        "weir-bench pacing ({} profile)\nmachine: {}\na leaky bucket of 1 024 kept full, drained by blocking consumers for {duration:?}\n\n{}",
        config.profile,
        machine.describe(),
        table.render()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_percentiles_keep_early_items_negative() {
        let late: Vec<i64> = (-500..1_500).map(|v| v * 1_000).collect();
        let p = lateness_percentiles(&late, &[0.0, 0.5, 0.99, 1.0]);
        // 3 significant digits of the distance above the lowest value.
        assert!((p[0] + 500.0).abs() < 1.0, "{p:?}");
        assert!((p[1] - 499.0).abs() < 2.0, "{p:?}");
        assert!((p[2] - 1_479.0).abs() < 3.0, "{p:?}");
        assert!((p[3] - 1_499.0).abs() < 3.0, "{p:?}");
        assert!(lateness_percentiles(&[], &[0.5])[0].is_nan());
    }
}
