//! weir-bench: weir's benchmark suite, the first thing to run on a new machine.
//!
//! `cargo run --release -p weir-bench` runs the quick profile. See `--help`, the
//! README and BENCHMARKS.md. Benchmarks are measurements, never assertions: the
//! figures that hold across machines are ratios against a peer measured in the
//! same run, which is why every table prints them.
//!
//! Layers, each using only the ones below it: `cli` parses the command line and
//! dispatches to the suites (`throughput`, `single`, `memory`, `accuracy`, `queue`,
//! `pacing`, `compare`); the suites build on the subjects (`check`, `peers`,
//! `windows`, `keyed`) and the output (`report` for the terminal, `chart` for SVG,
//! `html` for `index.html`); everything shares `harness` (configuration, errors,
//! the output folder, the thread-sweep runner, thread pinning, run statistics).
//!
//! Instruction counts (callgrind) are a separate bench target,
//! `benches/instructions.rs`; see BENCHMARKS.md, "Instruction counts".
//!
//! With the `rls` feature, `rls` holds the load of an Envoy rate-limit service,
//! which the `rls-loadgen` binary sends over gRPC (to weir-rls, Limitador or
//! envoyproxy/ratelimit) and `examples/rls_instructions.rs` answers in process;
//! `benches/rls/` has the servers' configs and `run.sh`, the comparison.

pub mod accuracy;
pub mod chart;
pub mod check;
pub mod cli;
pub mod compare;
pub mod harness;
pub mod html;
pub mod keyed;
pub mod memory;
pub mod pacing;
pub mod peers;
pub mod queue;
pub mod report;
#[cfg(feature = "rls")]
pub mod rls;
pub mod single;
pub mod throughput;
pub mod windows;
