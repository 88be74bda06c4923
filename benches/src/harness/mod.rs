//! What every suite shares, below the suites and below the command line: the
//! validated [`Config`], the [`BenchError`] a run can end with, the [`Output`]
//! folder a suite writes to, the thread-sweep runner ([`run`]), thread pinning
//! ([`pin`]) and the statistics of repeated runs ([`Spread`]).
//!
//! The command line (`cli`) parses arguments into a [`Config`] and dispatches to the
//! suites; the suites import from here, never from `cli`, so the dependency graph
//! has no cycle: `cli` → suites → `harness`.

mod config;
mod output;
pub mod pin;
mod stats;
mod sweep;

pub use config::{BenchError, Config, Profile};
pub use output::{Output, progress};
pub use stats::{NOISY_SPREAD, Spread, median};
pub use sweep::{BATCH, ClockSpan, Latency, Sample, Workload, run, run_clocked};
