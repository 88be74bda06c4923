//! The accuracy suite: every limiter under overload, on every thread, for several
//! refill periods; admitted requests against the ideal `burst + rate × span`.
//!
//! `span` is the time the limiter itself saw, on its own clock: every thread reads
//! the limiter's clock just before its first check and just after its last, and the
//! span runs from the earliest of those readings to the latest
//! ([`ClockSpan`](crate::harness::ClockSpan)).
//! Every reading the limiter took lies inside it, so an exact limiter reads at most
//! 1.0 however the threads were scheduled; a span taken by the main thread instead
//! (which may wake after the workers have started) made exact limiters read up to
//! 1.02 on a loaded machine. Peers whose clock cannot be read from outside
//! (`ratelimit`, `leaky-bucket`, the mutex bucket) read `Instant`, the clock they use.
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
use std::time::{Duration, Instant};
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_rl_core::{Clock, CoarseClock, MonotonicClock, Quota};

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
    /// Runs it under overload on `threads` threads for about `duration`.
    pub run: fn(usize, Duration) -> Measured,
}

/// What one overload run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Requests admitted.
    pub admitted: u64,
    /// The span of the limiter's own clock that its checks read
    /// ([`ClockSpan`](crate::harness::ClockSpan)).
    pub span: Duration,
}

impl Measured {
    /// `burst + rate × span`: the most an exact limiter can admit in `span`.
    pub fn ideal(&self) -> f64 {
        BURST as f64 + RATE as f64 * self.span.as_secs_f64()
    }

    /// `admitted / ideal`: at most 1.0 for an exact limiter.
    pub fn ratio(&self) -> f64 {
        self.admitted as f64 / self.ideal()
    }
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

/// Runs `limiter` under overload; `read` reads the limiter's clock in nanoseconds
/// (any origin), before each thread's first check and after its last.
pub fn overload<L: Check>(limiter: L, read: impl Fn(&L) -> u64 + Sync, threads: usize, duration: Duration) -> Measured {
    let workload = Overload(limiter);
    let (sample, span) = crate::harness::run_clocked(&workload, threads, duration, &|| read(&workload.0));
    Measured { admitted: sample.admitted, span: span.map_or(Duration::ZERO, |s| s.duration()) }
}

/// A reader of a weir clock (a clone shares the limiter's time and origin).
fn weir_clock<L>(clock: impl Clock + Sync) -> impl Fn(&L) -> u64 + Sync {
    move |_| clock.now().as_u64()
}

/// A reader of `Instant`, for limiters that read it and do not expose their clock.
fn instant<L>() -> impl Fn(&L) -> u64 + Sync {
    let origin = Instant::now();
    move |_| u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs weir's GCRA on `clock`, read by a clone of it.
fn gcra<C: Clock + Clone + Sync>(clock: C, threads: usize, duration: Duration) -> Measured {
    overload(Gcra::with_clock(quota(), clock.clone()), weir_clock(clock), threads, duration)
}

fn coarse() -> CoarseClock {
    CoarseClock::with_upkeep(Duration::from_millis(1)).expect("the coarse clock's upkeep thread starts")
}

fn zero() -> u64 {
    0
}

/// A window limiter with the same rate and initial burst as the token buckets:
/// [`BURST`] per `BURST / RATE` (1 000 per 10 ms).
fn window(kind: WindowKind, threads: usize, duration: Duration) -> Measured {
    let period = Duration::from_nanos(1_000_000_000 * BURST / RATE);
    let quota = Quota::new(BURST, period).expect("a valid quota");
    let clock = MonotonicClock::new();
    let limiter = Weir(crate::windows::with_clock(quota, clock.clone(), kind));
    overload(limiter, weir_clock(clock), threads, duration)
}

fn governor(threads: usize, duration: Duration) -> Measured {
    use governor::clock::{Clock as _, Reference as _};
    let limiter = crate::peers::governor(RATE as u32, BURST as u32);
    let origin = limiter.clock().now();
    let read = move |g: &crate::peers::Governor| g.clock().now().duration_since(origin).as_u64();
    overload(limiter, read, threads, duration)
}

/// Every subject of the accuracy suite.
pub fn subjects() -> Vec<Subject> {
    let s = |name, bound, run| Subject { name, bound, run };
    vec![
        s("weir-gcra", zero, |t, d| gcra(MonotonicClock::new(), t, d)),
        s("weir-gcra+coarse", zero, |t, d| gcra(coarse(), t, d)),
        s(
            "weir-leased",
            || LeaseConfig::default().over_admission_bound(&quota()),
            |t, d| {
                let clock = MonotonicClock::new();
                let limiter = LeasedGcra::with_clock(quota(), LeaseConfig::default(), clock.clone());
                overload(limiter, weir_clock(clock), t, d)
            },
        ),
        s("governor", zero, governor),
        s("ratelimit", zero, |t, d| overload(ratelimit(RATE, BURST), instant(), t, d)),
        s("leaky-bucket", zero, |t, d| {
            let limiter = leaky_bucket(BURST as usize, (RATE / 1_000) as usize, Duration::from_millis(1));
            overload(limiter, instant(), t, d)
        }),
        s("mutex-bucket", zero, |t, d| overload(MutexTokenBucket::new(RATE as f64, BURST as f64), instant(), t, d)),
        s("weir-fixed", || BURST, |t, d| window(WindowKind::Fixed, t, d)),
        s("weir-sliding", zero, |t, d| window(WindowKind::Sliding, t, d)),
        s("weir-log", zero, |t, d| window(WindowKind::Log, t, d)),
        s("weir-striped", zero, |t, d| window(WindowKind::StripedExact, t, d)),
        s("weir-striped-approx", || BURST / 1_024, |t, d| window(WindowKind::StripedApproximate, t, d)),
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
    /// `burst + rate × span`, the span of the limiter's clock that its checks read.
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
            let measured = (s.run)(threads, duration);
            bar.inc(1);
            AccuracyResult {
                subject: s.name,
                threads,
                admitted: measured.admitted,
                ideal: measured.ideal(),
                ratio: measured.ratio(),
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
             ideal = burst + rate × span, the span of its own clock that the limiter's checks read; \
             bound = the documented over-admission, in requests.",
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
         {duration:?}; ideal = burst + rate × span (the limiter's own clock, first to last check)\n\n{}",
        config.profile,
        machine.describe(),
        table.render()
    ))
}

/// Subject ids for `--only`.
pub fn ids() -> Vec<String> {
    subjects().iter().map(|s| format!("accuracy/{}", s.name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_rl_core::ManualClock;

    /// Half a GCRA emission interval of the overload quota (10 µs).
    const STEP: Duration = Duration::from_micros(5);

    /// GCRA on a manual clock that every check moves on by [`STEP`]: the limiter's
    /// time runs far faster than the wall clock, and only its own clock knows how much
    /// of it passed.
    struct Ticking {
        gcra: Gcra<ManualClock>,
        clock: ManualClock,
    }

    impl Check for Ticking {
        fn check_one(&self) -> bool {
            let admitted = self.gcra.check_one();
            self.clock.advance(STEP);
            admitted
        }
    }

    fn ticking(threads: usize) -> Measured {
        let clock = ManualClock::new();
        let limiter = Ticking { gcra: Gcra::with_clock(quota(), clock.clone()), clock: clock.clone() };
        overload(limiter, weir_clock(clock), threads, Duration::from_millis(5))
    }

    #[test]
    fn the_ideal_is_taken_on_the_limiters_own_clock() {
        let measured = ticking(1);
        // One thread: the span is exactly the time the checks moved the clock by.
        let checks = measured.span.as_nanos() / STEP.as_nanos();
        assert_eq!(measured.span, STEP * checks as u32);
        assert!(measured.ratio() <= 1.0, "an exact limiter read {} of ideal: {measured:?}", measured.ratio());
        // Every check admitted until the burst ran out, then one in two: the ideal,
        // less at most the one emission interval after the last check (in integers:
        // the ideal in doubles carries rounding).
        let ideal = BURST + (measured.span.as_nanos() * u128::from(RATE) / 1_000_000_000) as u64;
        let all = measured.admitted == checks as u64;
        assert!(all || measured.admitted + 1 >= ideal, "{measured:?} after {checks} checks");
    }

    #[test]
    fn an_exact_limiter_reads_at_most_one_whatever_the_threads_do() {
        let measured = ticking(3);
        assert!(measured.ratio() <= 1.0, "an exact limiter read {} of ideal: {measured:?}", measured.ratio());
    }
}
