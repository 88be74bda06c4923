//! The command line: parse, validate into a [`Config`], dispatch to the suites,
//! write the report. The types the suites share live below them, in
//! [`crate::harness`]; this module only parses and dispatches.

use crate::harness::{BenchError, Config, Output, Profile, pin};
use crate::report::Machine;
use clap::{Parser, Subcommand};
use std::ffi::OsString;
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

    /// Run only subjects whose id contains this text (repeatable; `list` shows ids).
    #[arg(long, global = true, value_name = "TEXT")]
    pub only: Vec<String>,

    /// Folder for the CSV, JSON, SVG and HTML output (created if missing).
    #[arg(long, global = true, default_value = "weir-bench-out", value_name = "DIR")]
    pub out: PathBuf,

    /// No progress bar.
    #[arg(long, global = true)]
    pub no_progress: bool,

    /// Do not pin benchmark threads to cores (by default thread t runs on core t mod
    /// N where the OS allows pinning).
    #[arg(long, global = true)]
    pub no_pin: bool,

    /// (internal) The weir-bench binary the memory suite runs its probes with
    /// (default: this one).
    #[arg(long, global = true, hide = true, value_name = "PATH")]
    pub probe_binary: Option<PathBuf>,
}

/// The parts of the suite.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Every suite below, one after the other (the default).
    All,
    /// Aggregate checks per second over a thread sweep: hot limiter (allowed and
    /// denied paths), per-thread limiters, keyed stores, hardware references, peers.
    Throughput,
    /// ns per check on one thread, every subject interleaved round by round (best
    /// and median round), with clock read costs.
    Single,
    /// Bytes per key of every keyed store, each measured in a fresh process.
    Memory,
    /// Every limiter under overload on all threads: admitted against the ideal.
    Accuracy,
    /// weir-leaky's bounded MPMC queue against crossbeam's ArrayQueue and
    /// concurrent-queue: items moved per second, P producers and P consumers.
    Queue,
    /// The leaky bucket's output rate and lateness against its configured rate.
    Pacing,
    /// Every algorithm on the same synthetic traffic (steady, page loads, a saved-up
    /// burst, the boundary attack, a flood): traces, charts and a trade-off table.
    Compare,
    /// List every subject id, for `--only`.
    List,
    /// (internal) Measure one keyed store's memory in this process and print it.
    #[command(hide = true)]
    MemoryProbe {
        /// The subject.
        subject: String,
        /// Keys to insert.
        keys: u64,
    },
}

/// A duration like `200ms`, `1s`, `1.5s`, `500us` (humantime's syntax), at least 1 ms.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration like 200ms or 1.5s: {e}"))?;
    if duration < Duration::from_millis(1) {
        return Err(format!("{text:?} is too short to measure; use at least 1ms"));
    }
    Ok(duration)
}

/// What to run, and how.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The suite (or `list`, or a memory probe).
    pub command: Command,
    /// How every suite runs.
    pub config: Config,
}

/// Every subject id of every suite.
pub fn all_ids() -> Vec<String> {
    let mut ids: Vec<String> = crate::throughput::subjects().iter().map(|s| s.id()).collect();
    ids.extend(crate::single::singles().iter().map(|s| format!("single/{}", s.id)));
    ids.extend(crate::memory::ids());
    ids.extend(crate::accuracy::ids());
    ids.extend(crate::queue::ids());
    ids.extend(crate::pacing::ids());
    ids.extend(crate::compare::ids());
    ids
}

impl Args {
    /// Validates the arguments into what to run and a [`Config`].
    pub fn validate(self) -> Result<Invocation, BenchError> {
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
        let ids = all_ids();
        for text in &self.only {
            if !ids.iter().any(|id| id.contains(text.as_str())) {
                return Err(BenchError::UnknownSubject(text.clone()));
            }
        }
        let command = self.command.unwrap_or(Command::All);
        if !matches!(command, Command::List | Command::MemoryProbe { .. }) {
            ensure_writable(&self.out).map_err(|e| BenchError::Output(self.out.clone(), e))?;
        }
        let config = Config {
            profile: if full { Profile::Full } else { Profile::Quick },
            threads,
            duration: self.duration.unwrap_or(if full { Duration::from_secs(1) } else { Duration::from_millis(200) }),
            reps,
            only: self.only,
            out: self.out,
            progress: !self.no_progress,
            pin: !self.no_pin,
            probe_binary: self.probe_binary,
        };
        Ok(Invocation { command, config })
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
    match args.validate().and_then(|run| execute(&run.command, &run.config)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}

/// The suites `All` runs, in order.
const SUITES: [Command; 7] = [
    Command::Throughput,
    Command::Single,
    Command::Memory,
    Command::Accuracy,
    Command::Queue,
    Command::Pacing,
    Command::Compare,
];

/// Runs `command` with a validated configuration.
pub fn execute(command: &Command, config: &Config) -> Result<(), BenchError> {
    pin::set_enabled(config.pin);
    let out = Output::new(&config.out);
    match command {
        Command::List => {
            for id in all_ids() {
                println!("{id}");
            }
            return Ok(());
        }
        Command::MemoryProbe { subject, keys } => return crate::memory::probe(subject, *keys),
        Command::All => {
            for suite in SUITES {
                if suite_selected(&suite, config) {
                    println!("{}", run_suite(&suite, config, &out)?);
                }
            }
        }
        suite => println!("{}", run_suite(suite, config, &out)?),
    }
    let header = format!(
        "weir-bench ({} profile)\nmachine: {}\ncommand: {}",
        config.profile,
        Machine::detect().describe(),
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    crate::html::write_index(&config.out, &header).map_err(|e| out.error(e))?;
    println!("wrote {}", config.out.join("index.html").display());
    Ok(())
}

fn run_suite(suite: &Command, config: &Config, out: &Output) -> Result<String, BenchError> {
    match suite {
        Command::Throughput => crate::throughput::run(config, out),
        Command::Single => crate::single::run(config, out),
        Command::Memory => crate::memory::run(config, out),
        Command::Accuracy => crate::accuracy::run(config, out),
        Command::Queue => crate::queue::run(config, out),
        Command::Pacing => crate::pacing::run(config, out),
        Command::Compare => crate::compare::run(config, out),
        Command::All | Command::List | Command::MemoryProbe { .. } => Ok(String::new()),
    }
}

/// Whether any subject of `suite` passes the `--only` filters.
fn suite_selected(suite: &Command, config: &Config) -> bool {
    let ids: Vec<String> = match suite {
        Command::Throughput => crate::throughput::subjects().iter().map(|s| s.id()).collect(),
        Command::Single => crate::single::singles().iter().map(|s| format!("single/{}", s.id)).collect(),
        Command::Memory => crate::memory::ids(),
        Command::Accuracy => crate::accuracy::ids(),
        Command::Queue => crate::queue::ids(),
        Command::Pacing => crate::pacing::ids(),
        Command::Compare => crate::compare::ids(),
        _ => return true,
    };
    ids.iter().any(|id| config.selects(id))
}
