//! SVG line charts of benchmark results.
//!
//! Every series is told apart three ways, so that none is lost among 15 others or
//! under a twin: its color (plotters' `Palette99`, without its pale entries), its
//! marker (hollow circle, triangle, square or cross, at every point or, on long
//! series, at points staggered between series so overlapping lines still show
//! each marker) and its line (weir's solid, peers' dashed, hardware references
//! dotted). Reference lines (the per-thread-counter ideal on throughput charts, the
//! limit on compare charts) are black, dashed, without markers. The legend sits
//! beside the plot, never over the data.
//!
//! Thread counts are categories ([`XAxis::Threads`]): 1, 2, 4, 8, 16 evenly spaced,
//! each labelled with its count.

use plotters::coord::Shift;
use plotters::coord::combinators::{LogCoord, WithKeyPoints};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::path::Path;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A weir subject: solid line, markers.
    Weir,
    /// A peer crate or a hand-written baseline: dashed line, markers.
    Peer,
    /// A hardware reference (one shared atomic, a per-thread counter): dotted line,
    /// markers.
    Reference,
    /// A line to read the others against (the ideal, the limit): black, long dashes,
    /// no markers, drawn under the data.
    Guide,
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points, x ascending (for [`XAxis::Threads`], x is the thread count).
    pub points: Vec<(f64, f64)>,
    /// How it is drawn.
    pub style: Style,
}

impl Series {
    /// A series named `name` drawn in `style`.
    pub fn new(name: impl Into<String>, style: Style, points: Vec<(f64, f64)>) -> Self {
        Self { name: name.into(), points, style }
    }
}

/// The x axis.
#[derive(Debug, Clone, PartialEq)]
pub enum XAxis {
    /// A continuous axis from the smallest x to the largest.
    Continuous,
    /// Thread counts as evenly spaced categories, in this order; points whose x is
    /// not one of them are left out.
    Threads(Vec<usize>),
}

/// Y axis scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear axis from 0.
    Linear,
    /// Logarithmic axis (for values spanning orders of magnitude).
    Log,
}

/// A chart's title, axes and size.
#[derive(Debug, Clone)]
pub struct Chart<'a> {
    /// Caption above the plot.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// X axis kind.
    pub x_axis: XAxis,
    /// Y axis scale.
    pub y_scale: Scale,
}

/// Palette99 without its pale colors (yellow, cyan, lime, pinks, creams: unreadable as
/// thin lines on white) and without black, which guide lines use.
fn colors() -> Vec<RGBColor> {
    Palette99::COLORS
        .iter()
        .filter(|&&(r, g, b)| {
            let luminance = 0.2126 * f64::from(r) + 0.7152 * f64::from(g) + 0.0722 * f64::from(b);
            luminance < 170.0 && (r, g, b) != (0, 0, 0)
        })
        .map(|&(r, g, b)| RGBColor(r, g, b))
        .collect()
}

/// Marker shapes, cycled so that (color, marker) pairs stay distinct for the first
/// `colors × markers` series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Cross,
}

const MARKERS: [Marker; 4] = [Marker::Circle, Marker::Triangle, Marker::Square, Marker::Cross];

/// The look of the `index`-th data series (guides excluded) among `palette` colors.
fn look(index: usize, palette: usize) -> (usize, Marker) {
    let palette = palette.max(1);
    (index % palette, MARKERS[(index + index / palette) % MARKERS.len()])
}

/// Draws a marker centered on pixel `at`.
fn draw_marker(
    area: &DrawingArea<SVGBackend, Shift>,
    marker: Marker,
    at: (i32, i32),
    color: RGBColor,
) -> Result<(), Box<dyn std::error::Error>> {
    let style = ShapeStyle::from(&color).stroke_width(2);
    let (x, y) = at;
    match marker {
        Marker::Circle => area.draw(&Circle::new(at, 4, style))?,
        Marker::Triangle => {
            area.draw(&PathElement::new(vec![(x, y - 5), (x + 5, y + 4), (x - 5, y + 4), (x, y - 5)], style))?
        }
        Marker::Square => area.draw(&Rectangle::new([(x - 4, y - 4), (x + 4, y + 4)], style))?,
        Marker::Cross => area.draw(&Cross::new(at, 4, style))?,
    }
    Ok(())
}

/// Draws a polyline in `style` through pixel `points`.
fn draw_line(
    area: &DrawingArea<SVGBackend, Shift>,
    points: &[(i32, i32)],
    style: Style,
    color: RGBColor,
) -> Result<(), Box<dyn std::error::Error>> {
    if points.len() < 2 {
        return Ok(());
    }
    let stroke = ShapeStyle::from(&color).stroke_width(2);
    let path = points.to_vec();
    match style {
        Style::Weir => area.draw(&PathElement::new(path, stroke))?,
        Style::Peer => area.draw(&DashedPathElement::new(path, 9, 5, stroke))?,
        Style::Reference => area.draw(&DashedPathElement::new(path, 2, 4, stroke))?,
        Style::Guide => area.draw(&DashedPathElement::new(path, 14, 6, ShapeStyle::from(&BLACK).stroke_width(2)))?,
    }
    Ok(())
}

/// An axis label: as few digits as the value needs (`0.5`, `20`, `1500`).
fn axis_number(v: f64) -> String {
    let text = if v.abs() >= 100.0 || v == v.round() { format!("{v:.0}") } else { format!("{v:.2}") };
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text }
}

/// A log axis from a little below `lo` to a little above `hi`, labelled at 1, 2 and
/// 5 times each power of ten (plotters labels only the powers themselves, which on
/// a chart spanning one decade leaves one or two labels).
fn log_axis(lo: f64, hi: f64) -> WithKeyPoints<LogCoord<f64>> {
    let (lo, hi) = (lo * 0.8, hi * 1.25);
    let mut ticks = Vec::new();
    let mut decade = 10f64.powi(lo.log10().floor() as i32);
    while decade <= hi {
        ticks.extend([1.0, 2.0, 5.0].map(|m| m * decade).into_iter().filter(|t| (lo..=hi).contains(t)));
        decade *= 10.0;
    }
    (lo..hi).log_scale().with_key_points(ticks)
}

/// Draws `series` as an SVG line chart at `path`.
pub fn line_chart(path: &Path, chart: &Chart<'_>, series: &[Series]) -> std::io::Result<()> {
    draw(path, chart, series).map_err(|e| std::io::Error::other(format!("drawing {}: {e}", path.display())))
}

fn draw(path: &Path, spec: &Chart<'_>, series: &[Series]) -> Result<(), Box<dyn std::error::Error>> {
    // Keep only the points the x axis can place.
    let series: Vec<Series> = series
        .iter()
        .map(|s| {
            let points = match &spec.x_axis {
                XAxis::Continuous => s.points.clone(),
                XAxis::Threads(threads) => s
                    .points
                    .iter()
                    .filter_map(|&(x, y)| threads.iter().position(|&t| t as f64 == x).map(|i| (i as f64, y)))
                    .collect(),
            };
            Series { points, ..s.clone() }
        })
        .collect();
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).filter(|y| y.is_finite());
    let (mut y_min, mut y_max) = (f64::INFINITY, 0.0f64);
    for y in ys {
        if y > 0.0 {
            y_min = y_min.min(y);
        }
        y_max = y_max.max(y);
    }
    if !y_min.is_finite() {
        y_min = 1.0;
    }
    if y_max <= 0.0 {
        y_max = 1.0;
    }
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x_min, x_max) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (x_min, x_max) = if x_min.is_finite() && x_max > x_min { (x_min, x_max) } else { (0.0, 1.0) };

    let root = SVGBackend::new(path, (1040, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (plot, legend) = root.split_horizontally(780);
    let mut builder = ChartBuilder::on(&plot);
    builder.caption(spec.title, ("sans-serif", 20)).margin(16).x_label_area_size(48).y_label_area_size(80);

    let number = |v: &f64| axis_number(*v);
    // Build the coordinate system, draw the mesh, and map every point to pixels; the
    // lines and markers are then drawn in pixels, the same way for every axis kind.
    let pixels: Vec<Vec<(i32, i32)>> = match (&spec.x_axis, spec.y_scale) {
        (XAxis::Continuous, Scale::Linear) => {
            let mut c = builder.build_cartesian_2d(x_min..x_max, 0.0..y_max * 1.08)?;
            c.configure_mesh()
                .x_desc(spec.x_label)
                .y_desc(spec.y_label)
                .x_label_formatter(&number)
                .y_label_formatter(&number)
                .light_line_style(TRANSPARENT)
                .draw()?;
            series.iter().map(|s| s.points.iter().map(|&p| c.backend_coord(&p)).collect()).collect()
        }
        (XAxis::Continuous, Scale::Log) => {
            let mut c = builder.build_cartesian_2d(x_min..x_max, log_axis(y_min, y_max))?;
            c.configure_mesh()
                .x_desc(spec.x_label)
                .y_desc(spec.y_label)
                .x_label_formatter(&number)
                .y_label_formatter(&number)
                .light_line_style(TRANSPARENT)
                .draw()?;
            series.iter().map(|s| s.points.iter().map(|&p| c.backend_coord(&p)).collect()).collect()
        }
        (XAxis::Threads(threads), scale) => {
            // `0..last` is inclusive of `last` for integer coordinates: one segment per count.
            let last = threads.len().saturating_sub(1) as i32;
            let label = |v: &SegmentValue<i32>| match v {
                SegmentValue::CenterOf(i) => threads.get(*i as usize).map_or(String::new(), |t| t.to_string()),
                _ => String::new(),
            };
            let at = |x: f64| SegmentValue::CenterOf(x as i32);
            macro_rules! categorical {
                ($y:expr) => {{
                    let mut c = builder.build_cartesian_2d((0..last).into_segmented(), $y)?;
                    c.configure_mesh()
                        .x_desc(spec.x_label)
                        .y_desc(spec.y_label)
                        .x_labels(threads.len())
                        .x_label_formatter(&label)
                        .y_label_formatter(&number)
                        .light_line_style(TRANSPARENT)
                        .disable_x_mesh()
                        .draw()?;
                    series
                        .iter()
                        .map(|s| s.points.iter().map(|&(x, y)| c.backend_coord(&(at(x), y))).collect())
                        .collect()
                }};
            }
            match scale {
                Scale::Linear => categorical!(0.0..y_max * 1.08),
                Scale::Log => categorical!(log_axis(y_min, y_max)),
            }
        }
    };

    let palette = colors();
    let mut looks = Vec::with_capacity(series.len());
    let mut data_index = 0;
    for s in &series {
        if s.style == Style::Guide {
            looks.push((BLACK, None));
        } else {
            let (color, marker) = look(data_index, palette.len());
            looks.push((palette[color], Some(marker)));
            data_index += 1;
        }
    }
    // Guides first, under the data.
    for (i, s) in series.iter().enumerate().filter(|(_, s)| s.style == Style::Guide) {
        draw_line(&plot, &pixels[i], s.style, looks[i].0)?;
    }
    let data: Vec<usize> = (0..series.len()).filter(|&i| series[i].style != Style::Guide).collect();
    for &i in &data {
        draw_line(&plot, &pixels[i], series[i].style, looks[i].0)?;
    }
    // Markers: on every point of short series; on long ones every `step`-th point,
    // staggered by series so that coinciding lines show each other's markers.
    for (rank, &i) in data.iter().enumerate() {
        let (color, Some(marker)) = looks[i] else { continue };
        let len = pixels[i].len();
        // At most about 16 markers per series, and, where the series is long enough,
        // at least one x position per series between two markers, so that series
        // lying on top of each other show their markers side by side.
        let spread = if len >= 4 * data.len() { data.len() } else { 1 };
        let step = len.div_ceil(16).max(spread).max(1);
        let offset = if step > 1 { rank * step / data.len().max(1) } else { 0 };
        for p in pixels[i].iter().skip(offset).step_by(step) {
            draw_marker(&plot, marker, *p, color)?;
        }
    }

    // The legend, beside the plot.
    let text = ("sans-serif", 14).into_font().color(&BLACK);
    let mut y = 60;
    for (i, s) in series.iter().enumerate() {
        let (color, marker) = looks[i];
        draw_line(&legend, &[(8, y), (48, y)], s.style, color)?;
        if let Some(marker) = marker {
            draw_marker(&legend, marker, (28, y), color)?;
        }
        legend.draw(&Text::new(s.name.clone(), (56, y - 8), text.clone()))?;
        y += 24;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_palette_has_enough_dark_colors_and_no_black() {
        let palette = colors();
        assert!(palette.len() >= 10, "{}", palette.len());
        assert!(!palette.contains(&BLACK));
    }

    #[test]
    fn the_first_forty_series_look_different() {
        let palette = colors().len();
        let looks: Vec<(usize, Marker)> = (0..40).map(|i| look(i, palette)).collect();
        for (i, a) in looks.iter().enumerate() {
            for b in &looks[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn thread_counts_are_categories_and_lines_are_styled() {
        let dir = std::env::temp_dir().join(format!("weir-bench-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.svg");
        let chart = Chart {
            title: "t",
            x_label: "threads",
            y_label: "y",
            x_axis: XAxis::Threads(vec![1, 2, 4, 8, 16]),
            y_scale: Scale::Log,
        };
        let points = |k: f64| vec![(1.0, k), (2.0, 2.0 * k), (4.0, 4.0 * k), (8.0, 8.0 * k), (16.0, 16.0 * k)];
        let series = [
            Series::new("ideal", Style::Guide, points(10.0)),
            Series::new("weir", Style::Weir, points(5.0)),
            Series::new("peer", Style::Peer, points(5.0)),
        ];
        line_chart(&path, &chart, &series).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
            .collect();
        // Every thread count labelled, and no fractional tick between them.
        for t in ["1", "2", "4", "8", "16"] {
            assert!(texts.contains(&t), "no label {t} in {texts:?}");
        }
        assert!(!texts.iter().any(|t| t.contains("1.5") || *t == "3"), "{texts:?}");
        // Dashed lines are drawn as separate segments: more paths than series.
        assert!(svg.matches("<polyline").count() + svg.matches("<path").count() > series.len());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
