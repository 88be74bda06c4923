//! Where a run happened, and how its figures are printed.

use crate::harness::pin::{self, Pinning};
use comfy_table::{CellAlignment, presets};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// The machine and build every figure belongs to.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    /// CPU model, from `/proc/cpuinfo` where there is one.
    pub cpu: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// The commit the binary was built from (read from `.git` at build time).
    pub commit: &'static str,
    /// Whether the work tree had uncommitted changes to tracked files when this run
    /// started: `"clean"`, `"dirty"`, or `"unknown"` (no git, no checkout, or HEAD
    /// has moved since the build).
    pub tree: &'static str,
    /// The compiler that built it.
    pub rustc: &'static str,
    /// Whether benchmark threads are pinned to cores.
    pub pinning: Pinning,
}

/// What does not change during a run: probed once.
struct Fixed {
    cpu: String,
    cores: usize,
    tree: &'static str,
}

fn fixed() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_else(|| format!("unknown {} CPU", std::env::consts::ARCH));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Fixed { cpu, cores, tree: tree_state(Path::new(env!("CARGO_MANIFEST_DIR")), env!("WEIR_BENCH_COMMIT")) }
    })
}

/// Asks git, at run time, whether the checkout the binary was built in still has
/// `commit` checked out and whether its tracked files differ from it.
///
/// This is asked here rather than in the build script: a build script that runs
/// `git status` must re-run whenever `.git/index` changes, and `git status` itself
/// rewrites the index, so every build re-ran it and relinked the (fat-LTO) binary.
/// `--no-optional-locks` keeps this `git status` from writing the index at all.
fn tree_state(checkout: &Path, commit: &str) -> &'static str {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").arg("-C").arg(checkout).arg("--no-optional-locks").args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    if !checkout.is_dir() || commit == "unknown" {
        return "unknown";
    }
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(head) if head == commit => {}
        _ => return "unknown",
    }
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if changes.is_empty() => "clean",
        Some(_) => "dirty",
        None => "unknown",
    }
}

impl Machine {
    /// Describes this machine (the CPU and the tree state are probed once per process).
    pub fn detect() -> Self {
        let fixed = fixed();
        Self {
            cpu: fixed.cpu.clone(),
            cores: fixed.cores,
            commit: env!("WEIR_BENCH_COMMIT"),
            tree: fixed.tree,
            rustc: env!("WEIR_BENCH_RUSTC"),
            pinning: pin::status(),
        }
    }

    /// The commit, `-dirty` when the tree had changes, `?` when that is unknown.
    pub fn version(&self) -> String {
        match self.tree {
            "clean" => self.commit.to_string(),
            "dirty" => format!("{}-dirty", self.commit),
            _ => format!("{} (tree state unknown)", self.commit),
        }
    }

    /// One line for the top of a report.
    pub fn describe(&self) -> String {
        format!("{}, {} logical cores, {}; weir {}; {}", self.cpu, self.cores, self.pinning, self.version(), self.rustc)
    }
}

/// Formats an operations-per-second figure compactly: `123.4 M`, `5.67 k`.
pub fn rate(ops_per_sec: f64) -> String {
    match ops_per_sec {
        r if r >= 1e9 => format!("{:.2} G", r / 1e9),
        r if r >= 1e6 => format!("{:.1} M", r / 1e6),
        r if r >= 1e3 => format!("{:.1} k", r / 1e3),
        r => format!("{r:.0}"),
    }
}

/// A plain-text table for the terminal (comfy-table, Markdown style, so it also
/// pastes into a Markdown file as a table): the first `left` columns left-aligned,
/// the others (numbers) right-aligned.
#[derive(Debug)]
pub struct Table {
    inner: comfy_table::Table,
    left: usize,
}

impl Table {
    /// A table with `header`, its first column left-aligned.
    pub fn new(header: Vec<String>) -> Self {
        Self::with_left_columns(header, 1)
    }

    /// A table with `header`, its first `left` columns left-aligned.
    pub fn with_left_columns(header: Vec<String>, left: usize) -> Self {
        let mut inner = comfy_table::Table::new();
        inner.load_style(presets::ASCII_MARKDOWN).set_header(header);
        Self { inner, left }
    }

    /// Appends a row.
    pub fn row(&mut self, row: Vec<String>) {
        self.inner.add_row(row);
    }

    /// Renders the table.
    pub fn render(&self) -> String {
        let mut table = self.inner.clone();
        for (i, column) in table.column_iter_mut().enumerate() {
            column.set_cell_alignment(if i < self.left { CellAlignment::Left } else { CellAlignment::Right });
        }
        let mut out = table.to_string();
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_compact() {
        assert_eq!(rate(1.234e9), "1.23 G");
        assert_eq!(rate(45_600_000.0), "45.6 M");
        assert_eq!(rate(5_670.0), "5.7 k");
        assert_eq!(rate(12.0), "12");
    }

    #[test]
    fn tables_align_names_left_and_numbers_right() {
        let mut t = Table::with_left_columns(vec!["a".into(), "b".into(), "n".into()], 2);
        t.row(vec!["long".into(), "x".into(), "1".into()]);
        t.row(vec!["s".into(), "yy".into(), "100".into()]);
        assert_eq!(t.render(), "| a    | b  |   n |\n|------|----|-----|\n| long | x  |   1 |\n| s    | yy | 100 |\n");
    }

    #[test]
    fn the_tree_state_is_unknown_away_from_the_checkout() {
        let nowhere = std::env::temp_dir().join("weir-bench-no-such-checkout");
        assert_eq!(tree_state(&nowhere, "0123456789ab"), "unknown");
        assert_eq!(tree_state(Path::new(env!("CARGO_MANIFEST_DIR")), "unknown"), "unknown");
    }
}
