//! SVG line charts of benchmark results, and the `index.html` that shows them.

use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points, x ascending.
    pub points: Vec<(f64, f64)>,
}

/// Axis scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear axis from 0.
    Linear,
    /// Logarithmic axis (for values spanning orders of magnitude).
    Log,
}

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Draws `series` as an SVG line chart at `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    y_scale: Scale,
    series: &[Series],
) -> std::io::Result<()> {
    let points = series.iter().flat_map(|s| s.points.iter());
    let (mut x_max, mut y_min, mut y_max) = (1.0f64, f64::INFINITY, 0.0f64);
    for &(x, y) in points {
        x_max = x_max.max(x);
        if y > 0.0 {
            y_min = y_min.min(y);
        }
        y_max = y_max.max(y);
    }
    if !y_min.is_finite() {
        y_min = 1.0;
    }
    let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let x_min = series.iter().flat_map(|s| s.points.first()).map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_min = if x_min.is_finite() { x_min.min(x_max) } else { 0.0 };
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut builder = ChartBuilder::on(&root);
        builder.caption(title, ("sans-serif", 22)).margin(16).x_label_area_size(48).y_label_area_size(80);
        macro_rules! finish {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw()?;
                for (i, s) in series.iter().enumerate() {
                    let color = COLORS[i % COLORS.len()];
                    chart
                        .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
                    chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperLeft)
                    .draw()?;
            }};
        }
        match y_scale {
            Scale::Linear => finish!(builder.build_cartesian_2d(x_min..x_max, 0.0..y_max)?),
            Scale::Log => finish!(builder.build_cartesian_2d(x_min..x_max, (y_min * 0.8..y_max).log_scale())?),
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| std::io::Error::other(format!("drawing {}: {e}", path.display())))
}

/// Writes `index.html` in `dir`, showing every chart (`*.svg`) and linking every
/// table (`*.csv`, `*.json`) found there, under the report `header`.
pub fn write_index(dir: &Path, header: &str) -> std::io::Result<()> {
    let mut files: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect();
    files.sort();
    let escape = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let mut html = String::from(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>weir-bench results</title>\n\
         <style>body{font-family:sans-serif;max-width:960px;margin:2em auto;padding:0 1em}\
         img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}pre{background:#f6f6f6;padding:1em;overflow-x:auto}\
         </style>\n</head>\n<body>\n<h1>weir-bench results</h1>\n",
    );
    let _ = writeln!(html, "<pre id=\"header\">{}</pre>", escape(header));
    let _ = writeln!(html, "<h2>Tables</h2>\n<ul id=\"tables\">");
    for f in files.iter().filter(|f| f.ends_with(".csv") || f.ends_with(".json")) {
        let _ = writeln!(html, "<li><a href=\"{0}\">{0}</a></li>", escape(f));
    }
    let _ = writeln!(html, "</ul>\n<h2>Charts</h2>");
    for f in files.iter().filter(|f| f.ends_with(".svg")) {
        let _ = writeln!(html, "<figure><img src=\"{0}\" alt=\"{0}\"><figcaption>{0}</figcaption></figure>", escape(f));
    }
    // On load, record how many charts decoded, for the headless-browser check in CI
    // (`.ci/check-html`): `data-charts-rendered="3/3"`.
    html.push_str(
        "<script>\nwindow.addEventListener('load', () => {\n  const imgs = [...document.images];\n  \
         const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;\n  \
         document.body.dataset.chartsRendered = `${ok}/${imgs.length}`;\n});\n</script>\n",
    );
    html.push_str("</body>\n</html>\n");
    std::fs::write(dir.join("index.html"), html)
}
