//! Where a run happened, and how its figures are printed and saved.

use std::fmt::Write as _;
use std::path::Path;

/// The machine and build every figure belongs to.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    /// CPU model, from `/proc/cpuinfo` where there is one.
    pub cpu: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// The commit the binary was built from (`-dirty` if the tree had changes).
    pub commit: &'static str,
    /// The compiler that built it.
    pub rustc: &'static str,
}

impl Machine {
    /// Describes this machine.
    pub fn detect() -> Self {
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
        Self { cpu, cores, commit: env!("WEIR_BENCH_COMMIT"), rustc: env!("WEIR_BENCH_RUSTC") }
    }

    /// One line for the top of a report.
    pub fn describe(&self) -> String {
        format!("{}, {} logical cores; weir {}; {}", self.cpu, self.cores, self.commit, self.rustc)
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

/// A plain-text table with aligned columns.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with `header` as its first row.
    pub fn new(header: Vec<String>) -> Self {
        Self { rows: vec![header] }
    }

    /// Appends a row.
    pub fn row(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Renders the table, the header underlined.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| self.rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for (i, row) in self.rows.iter().enumerate() {
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                if c == 0 || c == 1 {
                    let _ = write!(out, "{cell}{}  ", " ".repeat(pad));
                } else {
                    let _ = write!(out, "{}{cell}  ", " ".repeat(pad));
                }
            }
            out.truncate(out.trim_end().len());
            out.push('\n');
            if i == 0 {
                let width = widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
                out.push_str(&"-".repeat(width));
                out.push('\n');
            }
        }
        out
    }
}

/// Writes `rows` as CSV with `header` to `path`. Fields never contain commas,
/// quotes or newlines (they are names and numbers), which `write_csv` checks.
pub fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut out = header.join(",");
    out.push('\n');
    for row in rows {
        debug_assert_eq!(row.len(), header.len());
        for field in row {
            if field.contains([',', '"', '\n']) {
                return Err(std::io::Error::other(format!("CSV field needs quoting: {field:?}")));
            }
        }
        out.push_str(&row.join(","));
        out.push('\n');
    }
    std::fs::write(path, out)
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
    fn tables_align() {
        let mut t = Table::new(vec!["a".into(), "b".into(), "n".into()]);
        t.row(vec!["long".into(), "x".into(), "1".into()]);
        t.row(vec!["s".into(), "yy".into(), "100".into()]);
        assert_eq!(t.render(), "a     b     n\n-------------\nlong  x     1\ns     yy  100\n");
    }
}
