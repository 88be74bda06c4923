//! The command line: parse, validate, run, report.

use crate::harness::{Sample, median};
use crate::report::{Machine, Table, rate, write_csv};
use crate::single::{SingleResult, singles};
use crate::throughput::{Subject, subjects};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// weir's benchmark suite: weir's limiters and their peers, side by side, on this machine.
#[derive(Debug, Parser)]
#[command(name = "weir-bench", version, about, long_about = None)]
pub struct Args {
    /// What to run (default: every suite, one after the other).
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Quick profile: short runs, few repetitions (the default; under 2 minutes on 2 cores).
    #[arg(long, global = true, conflicts_with = "full")]
    pub quick: bool,

    /// Full profile: longer runs, more repetitions, for figures worth publishing.
    #[arg(long, global = true)]
    pub full: bool,

    /// Thread counts to sweep, comma-separated (default: 1, 2 and the core count).
    #[arg(long, global = true, value_delimiter = ',', value_name = "N,N,...")]
    pub threads: Option<Vec<usize>>,

    /// Length of one timed run, e.g. 200ms, 1s (default: 200ms quick, 1s full).
    #[arg(long, global = true, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,

    /// Timed runs per point; the median is reported (default: 3 quick, 5 full).
    #[arg(long, global = true, value_name = "N")]
    pub reps: Option<usize>,

    /// Run only subjects whose `scenario/subject` id contains this text (repeatable).
    #[arg(long, global = true, value_name = "TEXT")]
    pub only: Vec<String>,

    /// Folder for the CSV files (created if missing).
    #[arg(long, global = true, default_value = "weir-bench-out", value_name = "DIR")]
    pub out: PathBuf,

    /// No progress bar.
    #[arg(long, global = true)]
    pub no_progress: bool,
}

/// The parts of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Every suite below, one after the other (the default).
    All,
    /// Aggregate checks per second over a thread sweep: hot limiter (allowed and
    /// denied paths), per-thread limiters, hardware references, with peers.
    Throughput,
    /// ns per check on one thread, every subject interleaved round by round (best
    /// and median round), with clock read costs.
    Single,
    /// List every subject id, for `--only`.
    List,
}

/// A duration like `200ms`, `1s`, `1.5s`, `500us`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 200ms or 1s"))?;
    let scale = match unit.trim() {
        "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        _ => return Err(format!("{text:?}: unknown unit {unit:?}; use s, ms or us")),
    };
    let duration = Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{text:?}: {e}"))?;
    if duration < Duration::from_millis(1) {
        return Err(format!("{text:?} is too short to measure; use at least 1ms"));
    }
    Ok(duration)
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// What to run.
    pub command: Command,
    /// "quick" or "full".
    pub profile: &'static str,
    /// Thread counts, ascending, without duplicates.
    pub threads: Vec<usize>,
    /// One timed run.
    pub duration: Duration,
    /// Timed runs per point.
    pub reps: usize,
    /// `--only` filters.
    pub only: Vec<String>,
    /// Output folder (exists and is writable).
    pub out: PathBuf,
    /// Whether to draw a progress bar.
    pub progress: bool,
}

/// Why a run could not start or finish.
#[derive(Debug)]
pub enum BenchError {
    /// A thread count of zero, or an absurd one.
    BadThreads(String),
    /// `--reps 0`.
    ZeroReps,
    /// An `--only` filter that matches no subject.
    UnknownSubject(String),
    /// The output folder cannot be created or written.
    Output(PathBuf, std::io::Error),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadThreads(why) => write!(f, "--threads: {why}"),
            Self::ZeroReps => f.write_str("--reps must be at least 1"),
            Self::UnknownSubject(text) => write!(
                f,
                "--only {text:?} matches no subject; `weir-bench list` shows them all (e.g. hot-allowed/weir-gcra)"
            ),
            Self::Output(dir, e) => write!(f, "cannot write to the output folder {}: {e}", dir.display()),
        }
    }
}

impl std::error::Error for BenchError {}

impl Args {
    /// Validates the arguments into a [`Config`].
    pub fn validate(self) -> Result<Config, BenchError> {
        let full = self.full && !self.quick;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut threads = self.threads.unwrap_or_else(|| vec![1, 2, cores]);
        if threads.is_empty() {
            return Err(BenchError::BadThreads("give at least one thread count".into()));
        }
        if let Some(bad) = threads.iter().find(|&&t| t == 0 || t > 4096) {
            return Err(BenchError::BadThreads(format!("{bad} is not a thread count between 1 and 4096")));
        }
        threads.sort_unstable();
        threads.dedup();
        let reps = self.reps.unwrap_or(if full { 5 } else { 3 });
        if reps == 0 {
            return Err(BenchError::ZeroReps);
        }
        let all: Vec<String> =
            subjects().iter().map(Subject::id).chain(singles().iter().map(|s| format!("single/{}", s.id))).collect();
        for text in &self.only {
            if !all.iter().any(|id| id.contains(text.as_str())) {
                return Err(BenchError::UnknownSubject(text.clone()));
            }
        }
        let command = self.command.unwrap_or(Command::All);
        if command != Command::List {
            ensure_writable(&self.out).map_err(|e| BenchError::Output(self.out.clone(), e))?;
        }
        Ok(Config {
            command,
            profile: if full { "full" } else { "quick" },
            threads,
            duration: self.duration.unwrap_or(if full { Duration::from_secs(1) } else { Duration::from_millis(200) }),
            reps,
            only: self.only,
            out: self.out,
            progress: !self.no_progress,
        })
    }
}

fn ensure_writable(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(".weir-bench-write-test");
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(probe)
}

/// Runs the command line `args`; returns the process exit code.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let args = match Args::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match args.validate().and_then(|config| execute(&config)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}

/// Runs a validated configuration.
pub fn execute(config: &Config) -> Result<(), BenchError> {
    match config.command {
        Command::All => {
            for command in [Command::Throughput, Command::Single] {
                let part = Config { command, ..config.clone() };
                // `--only` filters that match nothing in one suite skip it.
                if part.only.is_empty() || suite_matches(&part) {
                    execute(&part)?;
                    println!();
                }
            }
            Ok(())
        }
        Command::List => {
            for subject in subjects() {
                println!("{}", subject.id());
            }
            for single in singles() {
                println!("single/{}", single.id);
            }
            Ok(())
        }
        Command::Single => {
            let (text, rows) = single(config);
            print!("{text}");
            let path = config.out.join("single.csv");
            let header = ["subject", "best_ns", "median_ns", "cpu", "cores", "commit"];
            let machine = Machine::detect();
            let rows: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.id.replace(['(', ')', ' '], ""),
                        format!("{:.3}", r.best_ns),
                        format!("{:.3}", r.median_ns),
                        machine.cpu.replace(',', " "),
                        machine.cores.to_string(),
                        machine.commit.to_string(),
                    ]
                })
                .collect();
            write_csv(&path, &header, &rows).map_err(|e| BenchError::Output(config.out.clone(), e))?;
            println!("\nwrote {}", path.display());
            Ok(())
        }
        Command::Throughput => {
            let result = throughput(config);
            print!("{}", result.render(config));
            let path = config.out.join("throughput.csv");
            result.write_csv(&path).map_err(|e| BenchError::Output(config.out.clone(), e))?;
            println!("\nwrote {}", path.display());
            Ok(())
        }
    }
}

fn suite_matches(config: &Config) -> bool {
    match config.command {
        Command::Throughput => !selected(config).is_empty(),
        Command::Single => {
            singles().iter().any(|s| config.only.iter().any(|o| format!("single/{}", s.id).contains(o.as_str())))
        }
        _ => true,
    }
}

/// Runs the single-thread suite; returns the report and the rows.
pub fn single(config: &Config) -> (String, Vec<SingleResult>) {
    let chosen: Vec<_> = singles()
        .into_iter()
        .filter(|s| {
            config.only.is_empty() || config.only.iter().any(|o| format!("single/{}", s.id).contains(o.as_str()))
        })
        .collect();
    let rounds = if config.profile == "full" { 200 } else { 60 };
    let bar = progress(config, rounds);
    let results = crate::single::run(&chosen, rounds, 100_000, || bar.inc(1));
    bar.finish_and_clear();
    let mut out = format!(
        "weir-bench single ({} profile)\nmachine: {}\n{rounds} rounds of 100k operations, every subject once per round \
         (interleaved); ns per operation\n\n",
        config.profile,
        Machine::detect().describe()
    );
    let mut table = Table::new(vec!["subject".into(), "".into(), "best ns".into(), "median ns".into()]);
    for r in &results {
        table.row(vec![r.id.to_string(), String::new(), format!("{:.2}", r.best_ns), format!("{:.2}", r.median_ns)]);
    }
    out.push_str(&table.render());
    (out, results)
}

/// The medians of one subject over the thread sweep.
#[derive(Debug, Clone)]
pub struct Row {
    /// Who.
    pub subject: Subject,
    /// One point per thread count: (threads, median ops/s, min, max, admitted fraction).
    pub points: Vec<Point>,
}

/// One subject at one thread count.
#[derive(Debug, Clone, Copy)]
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
}

/// A whole throughput run.
#[derive(Debug, Clone)]
pub struct ThroughputResult {
    /// Where it ran.
    pub machine: Machine,
    /// Every subject measured.
    pub rows: Vec<Row>,
}

fn selected(config: &Config) -> Vec<Subject> {
    subjects()
        .into_iter()
        .filter(|s| config.only.is_empty() || config.only.iter().any(|o| s.id().contains(o)))
        .collect()
}

fn progress(config: &Config, total: usize) -> ProgressBar {
    let bar = if config.progress {
        ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Runs the throughput suite.
pub fn throughput(config: &Config) -> ThroughputResult {
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
                    let mut rates: Vec<f64> = samples.iter().map(Sample::ops_per_sec).collect();
                    let (ops, admitted) = samples.iter().fold((0, 0), |(o, a), s| (o + s.ops, a + s.admitted));
                    Point {
                        threads,
                        median: median(&mut rates),
                        min: rates.first().copied().unwrap_or(f64::NAN),
                        max: rates.last().copied().unwrap_or(f64::NAN),
                        admitted: admitted as f64 / ops.max(1) as f64,
                        fairness: samples.iter().map(|s| s.fairness).fold(1.0, f64::min),
                    }
                })
                .collect();
            Row { subject, points }
        })
        .collect();
    bar.finish_and_clear();
    ThroughputResult { machine, rows }
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

    /// The report printed on stdout.
    pub fn render(&self, config: &Config) -> String {
        let mut out = format!(
            "weir-bench throughput ({} profile)\nmachine: {}\neach cell: median of {} runs of {:?}, \
             aggregate checks per second over all threads; (×) = ratio to the governor row of the same clock class, same run;\n\
             fairness = slowest thread's operations / mean per thread, worst run (1 = fair, 0 = starved)\n\n",
            config.profile,
            self.machine.describe(),
            config.reps,
            config.duration
        );
        let mut header = vec!["scenario".to_string(), "subject".to_string()];
        header.extend(config.threads.iter().map(|t| format!("{t} thr")));
        header.push("ns/check @1".into());
        let widest = config.threads.last().copied().unwrap_or(1);
        header.push(format!("fairness @{widest}"));
        let mut table = Table::new(header);
        for row in &self.rows {
            let mut cells = vec![row.subject.scenario.name().to_string(), row.subject.name.to_string()];
            for point in &row.points {
                let mut cell = rate(point.median);
                if let Some(base) = self.baseline(row, point.threads) {
                    cell.push_str(&format!(" ({:.1}×)", point.median / base));
                }
                cells.push(cell);
            }
            let single =
                row.points.iter().find(|p| p.threads == 1).map_or("-".into(), |p| format!("{:.1}", 1e9 / p.median));
            cells.push(single);
            let fairness =
                row.points.iter().find(|p| p.threads == widest).map_or("-".into(), |p| format!("{:.2}", p.fairness));
            cells.push(fairness);
            table.row(cells);
        }
        out.push_str(&table.render());
        out
    }

    /// Saves every point as CSV.
    pub fn write_csv(&self, path: &Path) -> std::io::Result<()> {
        let header = [
            "scenario",
            "subject",
            "threads",
            "median_ops_per_sec",
            "min_ops_per_sec",
            "max_ops_per_sec",
            "compared_to",
            "ratio",
            "admitted_fraction",
            "fairness",
            "cpu",
            "cores",
            "commit",
        ];
        let rows: Vec<Vec<String>> = self
            .rows
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
                        row.subject.compare_to.unwrap_or("").to_string(),
                        ratio,
                        format!("{:.4}", p.admitted),
                        format!("{:.3}", p.fairness),
                        self.machine.cpu.replace(',', " "),
                        self.machine.cores.to_string(),
                        self.machine.commit.to_string(),
                    ]
                })
            })
            .collect();
        write_csv(path, &header, &rows)
    }
}
