//! The validated configuration every suite reads, and the errors a run can end with.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How long and how often to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Short runs, few repetitions (the default; about 2 minutes on 2 cores).
    Quick,
    /// Longer runs, more repetitions, for figures worth publishing.
    Full,
}

impl Profile {
    /// `"quick"` or `"full"`, as printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Quick => "quick",
            Self::Full => "full",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A validated configuration: what every suite needs to know about the run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Quick or full.
    pub profile: Profile,
    /// Thread counts, ascending, without duplicates, each in 1..=4096.
    pub threads: Vec<usize>,
    /// One timed run.
    pub duration: Duration,
    /// Timed runs per point (at least 1).
    pub reps: usize,
    /// `--only` filters.
    pub only: Vec<String>,
    /// Output folder (exists and is writable).
    pub out: PathBuf,
    /// Whether to draw a progress bar.
    pub progress: bool,
    /// Whether benchmark threads are pinned to cores (where the OS allows).
    pub pin: bool,
    /// The binary for memory probes (`None`: this one).
    pub probe_binary: Option<PathBuf>,
}

impl Config {
    /// Whether `id` passes the `--only` filters.
    pub fn selects(&self, id: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| id.contains(o.as_str()))
    }

    /// Whether this is the full profile.
    pub fn full(&self) -> bool {
        self.profile == Profile::Full
    }
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
    /// A measurement could not be made (a child process failed, say).
    Measurement(String),
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
            Self::Measurement(why) => write!(f, "measurement failed: {why}"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Output(_, e) => Some(e),
            _ => None,
        }
    }
}
