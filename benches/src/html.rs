//! The HTML report: each suite's table as a fragment (`SUITE.table.html`), and the
//! `index.html` that shows every table and chart in the output folder.
//!
//! A cell measured over several runs shows its median and the range of the runs
//! (min–max); a cell whose runs spread more than [`NOISY_SPREAD`] of the median is
//! flagged (⚠, shaded), so a reader does not compare it closely.

use crate::harness::{NOISY_SPREAD, Spread};
use std::fmt::Write as _;
use std::path::Path;

/// Escapes text for HTML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One cell of an [`HtmlTable`].
#[derive(Debug, Clone)]
pub struct Cell {
    html: String,
    numeric: bool,
    noisy: bool,
}

impl Cell {
    /// A text cell, left-aligned.
    pub fn text(text: impl AsRef<str>) -> Self {
        Self { html: escape(text.as_ref()), numeric: false, noisy: false }
    }

    /// A number, right-aligned.
    pub fn number(text: impl AsRef<str>) -> Self {
        Self { html: escape(text.as_ref()), numeric: true, noisy: false }
    }

    /// The median of several runs with their range below it, formatted by `format`,
    /// flagged when the runs spread more than [`NOISY_SPREAD`]; `suffix` follows the
    /// median (a ratio, say).
    pub fn spread(spread: &Spread, format: impl Fn(f64) -> String, suffix: &str) -> Self {
        let noisy = spread.is_noisy();
        let mut html = format!(
            "{}{}<br><span class=\"range\">{}–{}</span>",
            escape(&format(spread.median)),
            escape(suffix),
            escape(&format(spread.min)),
            escape(&format(spread.max))
        );
        if noisy {
            let _ = write!(
                html,
                " <span class=\"flag\" title=\"runs spread {:.0}% of the median\">⚠ {:.0}%</span>",
                spread.relative() * 100.0,
                spread.relative() * 100.0
            );
        }
        Self { html, numeric: true, noisy }
    }

    /// Whether the cell is flagged as noisy.
    pub fn is_noisy(&self) -> bool {
        self.noisy
    }
}

/// A suite's table for `index.html`.
#[derive(Debug, Clone)]
pub struct HtmlTable {
    title: String,
    note: String,
    header: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

impl HtmlTable {
    /// An empty table under `title`, with `note` (how to read it) below the title.
    pub fn new(title: impl Into<String>, note: impl Into<String>, header: Vec<String>) -> Self {
        Self { title: title.into(), note: note.into(), header, rows: Vec::new() }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    /// Cells flagged as noisy.
    pub fn noisy_cells(&self) -> usize {
        self.rows.iter().flatten().filter(|c| c.noisy).count()
    }

    /// The HTML fragment: a `<section>` with the title, the note and the table.
    pub fn render(&self) -> String {
        let mut html = String::from("<section class=\"suite-table\">\n");
        let _ = writeln!(html, "<h3>{}</h3>", escape(&self.title));
        if !self.note.is_empty() {
            let _ = writeln!(html, "<p class=\"note\">{}</p>", escape(&self.note));
        }
        let noisy = self.noisy_cells();
        if noisy > 0 {
            let _ = writeln!(
                html,
                "<p class=\"note\"><span class=\"flag\">⚠</span> {noisy} cell(s) whose runs spread more than {:.0}% \
                 of their median ((max − min) / median): not worth comparing closely.</p>",
                NOISY_SPREAD * 100.0
            );
        }
        html.push_str("<table>\n<thead><tr>");
        for h in &self.header {
            let _ = write!(html, "<th>{}</th>", escape(h));
        }
        html.push_str("</tr></thead>\n<tbody>\n");
        for row in &self.rows {
            html.push_str("<tr>");
            for cell in row {
                let class = match (cell.numeric, cell.noisy) {
                    (true, true) => " class=\"num noisy\"",
                    (true, false) => " class=\"num\"",
                    (false, true) => " class=\"noisy\"",
                    (false, false) => "",
                };
                let _ = write!(html, "<td{class}>{}</td>", cell.html);
            }
            html.push_str("</tr>\n");
        }
        html.push_str("</tbody>\n</table>\n</section>\n");
        html
    }
}

/// The suites' tables, in report order (other fragments follow, by name).
const ORDER: [&str; 7] = ["throughput", "single", "memory", "accuracy", "queue", "pacing", "compare"];

/// Writes `index.html` in `dir`, showing every suite table (`*.table.html`) and chart
/// (`*.svg`) and linking every data file (`*.csv`, `*.json`) found there, under the
/// report `header`.
pub fn write_index(dir: &Path, header: &str) -> std::io::Result<()> {
    let mut files: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect();
    files.sort();
    let mut fragments: Vec<&String> = files.iter().filter(|f| f.ends_with(".table.html")).collect();
    fragments.sort_by_key(|f| {
        let suite = f.trim_end_matches(".table.html");
        (ORDER.iter().position(|s| *s == suite).unwrap_or(ORDER.len()), suite.to_string())
    });
    let mut html = String::from(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>weir-bench results</title>\n\
         <style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}\
         img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}pre{background:#f6f6f6;padding:1em;overflow-x:auto}\
         table{border-collapse:collapse;font-size:0.9em;margin:0.5em 0 1.5em}\
         th,td{border:1px solid #ccc;padding:0.25em 0.5em;vertical-align:top}th{background:#f0f0f0}\
         td.num{text-align:right;font-variant-numeric:tabular-nums}.range{color:#666;font-size:0.85em}\
         td.noisy{background:#fde2e1}.flag{color:#b00020;font-weight:bold}.note{color:#444;font-size:0.9em}\
         </style>\n</head>\n<body>\n<h1>weir-bench results</h1>\n",
    );
    let _ = writeln!(html, "<pre id=\"header\">{}</pre>", escape(header));
    let _ = writeln!(html, "<h2>Tables</h2>\n<div id=\"tables\">");
    for f in &fragments {
        html.push_str(&std::fs::read_to_string(dir.join(f))?);
    }
    let _ = writeln!(html, "</div>\n<h2>Data</h2>\n<ul id=\"data\">");
    for f in files.iter().filter(|f| f.ends_with(".csv") || f.ends_with(".json")) {
        let _ = writeln!(html, "<li><a href=\"{0}\">{0}</a></li>", escape(f));
    }
    let _ = writeln!(html, "</ul>\n<h2>Charts</h2>");
    for f in files.iter().filter(|f| f.ends_with(".svg")) {
        let _ = writeln!(html, "<figure><img src=\"{0}\" alt=\"{0}\"><figcaption>{0}</figcaption></figure>", escape(f));
    }
    // On load, record how many charts decoded and how many tables are shown, for the
    // headless-browser check in CI (`.ci/check-html`): `data-charts-rendered="3/3"`,
    // `data-tables="2"`.
    html.push_str(
        "<script>\nwindow.addEventListener('load', () => {\n  const imgs = [...document.images];\n  \
         const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;\n  \
         document.body.dataset.chartsRendered = `${ok}/${imgs.length}`;\n  \
         document.body.dataset.tables = document.querySelectorAll('#tables table').length;\n});\n</script>\n",
    );
    html.push_str("</body>\n</html>\n");
    std::fs::write(dir.join("index.html"), html)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noisy_cell_is_flagged_and_shows_its_range() {
        let mut table = HtmlTable::new("t", "", vec!["a".into(), "b".into()]);
        let tight = Spread { median: 100.0, min: 95.0, max: 110.0 };
        let wide = Spread { median: 100.0, min: 70.0, max: 110.0 };
        table.row(vec![Cell::text("x<y"), Cell::spread(&tight, |v| format!("{v:.0}"), " (1.0×)")]);
        table.row(vec![Cell::text("z"), Cell::spread(&wide, |v| format!("{v:.0}"), "")]);
        assert_eq!(table.noisy_cells(), 1);
        let html = table.render();
        assert!(html.contains("<td>x&lt;y</td>"), "{html}");
        assert!(html.contains("<td class=\"num\">100 (1.0×)<br><span class=\"range\">95–110</span></td>"), "{html}");
        assert!(html.contains("<td class=\"num noisy\">100<br><span class=\"range\">70–110</span>"), "{html}");
        assert!(html.contains("⚠ 40%"), "{html}");
    }
}
