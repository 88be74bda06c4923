//! weir-bench: weir's benchmark suite, the first thing to run on a new machine.
//!
//! `cargo run --release -p weir-bench` runs the quick profile. See `--help`, the
//! README and BENCHMARKS.md. Benchmarks are measurements, never assertions: the
//! figures that hold across machines are ratios against a peer measured in the
//! same run, which is why every table prints them.

pub mod accuracy;
pub mod chart;
pub mod cli;
pub mod compare;
pub mod harness;
pub mod keyed;
pub mod memory;
pub mod pacing;
pub mod peers;
pub mod queue;
pub mod report;
pub mod single;
pub mod throughput;
pub mod windows;
