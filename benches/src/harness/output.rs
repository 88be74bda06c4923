//! Where a suite writes its files, and the progress bar it draws while measuring.

use super::{BenchError, Config};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::{Path, PathBuf};

/// The output folder of a run: CSV, JSON, SVG and HTML files go there.
#[derive(Debug, Clone)]
pub struct Output {
    dir: PathBuf,
}

impl Output {
    /// Files go into `dir` (which [`Config`] validation has created).
    pub fn new(dir: &Path) -> Self {
        Self { dir: dir.to_path_buf() }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of file `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// An output error for this folder.
    pub fn error(&self, e: impl Into<std::io::Error>) -> BenchError {
        BenchError::Output(self.dir.clone(), e.into())
    }

    /// Writes `rows` under `header` as the CSV file `name` (fields quoted where
    /// they need it).
    pub fn csv(&self, name: &str, header: &[&str], rows: &[Vec<String>]) -> Result<(), BenchError> {
        let write = || -> Result<(), csv::Error> {
            let mut writer = csv::Writer::from_path(self.path(name))?;
            writer.write_record(header)?;
            for row in rows {
                writer.write_record(row)?;
            }
            writer.flush()?;
            Ok(())
        };
        write().map_err(|e| self.error(std::io::Error::other(format!("{name}: {e}"))))
    }

    /// Writes `value` as pretty JSON to `name`.
    pub fn json(&self, name: &str, value: &impl serde::Serialize) -> Result<(), BenchError> {
        let text = serde_json::to_string_pretty(value).map_err(|e| self.error(std::io::Error::other(e)))?;
        std::fs::write(self.path(name), text + "\n").map_err(|e| self.error(e))
    }

    /// Writes `html` (a suite's table, rendered by `crate::html`) as the fragment
    /// `SUITE.table.html`, which `index.html` shows inline.
    pub fn html_table(&self, suite: &str, html: &str) -> Result<(), BenchError> {
        std::fs::write(self.path(&format!("{suite}.table.html")), html).map_err(|e| self.error(e))
    }
}

/// A progress bar on stderr, or a hidden one.
pub fn progress(config: &Config, total: usize) -> ProgressBar {
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
