//! SVG plots of the report: utilisation per strategy per workload (bars,
//! with the GEMM-only bound marked), and W3's per-tree time against batch
//! size (log-log).

use std::collections::BTreeMap;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::Record;
use crate::summary::{latest, IMPLS};

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Twelve distinguishable colours (tab10, then two more): a plot with
/// more series than this reuses them, and says so in its legend order.
const COLORS: [RGBColor; 12] = [
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
    RGBColor(0, 0, 128),
    RGBColor(128, 128, 0),
];

/// Ticks at 1, 2 and 5 times the powers of ten within `lo..hi`, so that a
/// log axis is labelled where its data lies, however narrow the span.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let t = decade * m;
            if t >= lo && t <= hi {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

/// Bars: per workload (throughput records at `threads`), each strategy's
/// useful FLOP rate as % of the sgemm peak; a black tick marks the rate
/// its GEMM-only bound allows.
pub fn utilisation_svg(records: &[Record], threads: usize) -> Result<String, String> {
    let mut svg = String::new();
    draw_utilisation(&mut svg, &latest(records), threads).map_err(|e| format!("plotting: {e}"))?;
    Ok(svg)
}

fn draw_utilisation(svg: &mut String, recs: &[Record], threads: usize) -> DrawResult {
    let rows: Vec<&Record> = recs
        .iter()
        .filter(|r| r.metric == "throughput" && r.threads == threads && r.gflops.is_some())
        .collect();
    let mut groups: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
    for r in &rows {
        let name = if r.variant.is_empty() {
            r.workload.clone()
        } else {
            format!("{} {}", r.workload, r.variant)
        };
        groups.entry(name).or_default().push(r);
    }
    let root = SVGBackend::with_string(svg, (900, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = groups.len().max(1);
    let width = IMPLS.len() as f64 + 1.0;
    let pct = |r: &Record| 100.0 * r.gflops.unwrap_or(0.0) / r.peak_gflops.max(1e-9);
    let bound_pct = |r: &Record| r.bound.map(|b| pct(r) * b / r.value.max(1e-12));
    let top = rows
        .iter()
        .flat_map(|r| [Some(pct(r)), bound_pct(r)])
        .flatten()
        .fold(10.0f64, f64::max)
        // Headroom above the tallest bar for the legend, which then
        // covers no bar.
        * 1.6;
    let names: Vec<String> = groups.keys().cloned().collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("useful FLOP rate, % of same-run sgemm peak ({threads} thread(s))"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..n as f64 * width, 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("% of peak")
        .draw()?;
    // Every group's name under its bars (the mesh's own labels fall at
    // evenly spaced values, which miss most group centres).
    for (g, name) in names.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(g as f64 * width + width / 2.0, 0.0));
        root.draw(&Text::new(
            name.clone(),
            (x, y + 8),
            ("sans-serif", 13)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
    }
    for (k, implementation) in IMPLS.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let mut bars = Vec::new();
        let mut ticks = Vec::new();
        for (g, rs) in groups.values().enumerate() {
            if let Some(r) = rs.iter().find(|r| r.implementation == *implementation) {
                let x0 = g as f64 * width + 0.5 + k as f64;
                bars.push(Rectangle::new(
                    [(x0, 0.0), (x0 + 0.9, pct(r))],
                    color.filled(),
                ));
                if let Some(b) = bound_pct(r) {
                    ticks.push(PathElement::new(
                        vec![(x0, b), (x0 + 0.9, b)],
                        BLACK.stroke_width(2),
                    ));
                }
            }
        }
        if bars.is_empty() {
            continue; // no legend entry for what is not drawn
        }
        chart
            .draw_series(bars)?
            .label(*implementation)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart.draw_series(ticks)?;
    }
    chart
        .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())?
        .label("GEMM-only bound")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Lines: W3 per-tree time (ms) against batch size, log-log, one line per
/// implementation and shape, for `variant_prefix` (e.g. `state 256`) at
/// `threads`.
pub fn w3_time_svg(
    records: &[Record],
    variant_prefix: &str,
    threads: usize,
) -> Result<String, String> {
    let mut svg = String::new();
    draw_w3(&mut svg, &latest(records), variant_prefix, threads)
        .map_err(|e| format!("plotting: {e}"))?;
    Ok(svg)
}

fn draw_w3(svg: &mut String, recs: &[Record], prefix: &str, threads: usize) -> DrawResult {
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in recs.iter().filter(|r| {
        r.workload == "W3"
            && r.metric == "time_per_tree"
            && r.threads == threads
            && r.variant.starts_with(prefix)
    }) {
        let shape = r.variant.split_once(", ").map_or("", |s| s.1);
        lines
            .entry(format!("{}, {shape}", r.implementation))
            .or_default()
            .push((r.batch as f64, r.value));
    }
    let points = lines.values().flatten();
    let (mut x_hi, mut y_lo, mut y_hi) = (2.0f64, f64::INFINITY, 0.0f64);
    for &(x, y) in points {
        x_hi = x_hi.max(x);
        y_lo = y_lo.min(y);
        y_hi = y_hi.max(y);
    }
    if !y_lo.is_finite() {
        (y_lo, y_hi) = (0.01, 1.0);
    }
    // The legend goes to the right of the plot, off the data.
    let root = SVGBackend::with_string(svg, (1000, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (plot, legend) = root.split_horizontally(760);
    let (y_lo, y_hi) = (y_lo / 1.5, y_hi * 1.5);
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!("W3 Tree-LSTM inference, {prefix}: time per tree ({threads} thread(s))"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(
            (0.8f64..x_hi * 1.25)
                .log_scale()
                .with_key_points(log_ticks(0.8, x_hi * 1.25)),
            (y_lo..y_hi)
                .log_scale()
                .with_key_points(log_ticks(y_lo, y_hi)),
        )?;
    chart
        .configure_mesh()
        .x_desc("batch size (trees)")
        .y_desc("ms per tree")
        .y_label_formatter(&|v| format!("{v}"))
        .draw()?;
    let mut entries = Vec::new();
    for (k, (name, mut pts)) in lines.into_iter().enumerate() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = COLORS[k % COLORS.len()];
        let width = if name.contains("full") { 2 } else { 1 };
        chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(width)))?;
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
        entries.push((name, color, width));
    }
    for (i, (name, color, width)) in entries.into_iter().enumerate() {
        let y = 60 + 22 * i as i32;
        legend.draw(&PathElement::new(
            vec![(8, y), (36, y)],
            color.stroke_width(width),
        ))?;
        legend.draw(&Circle::new((22, y), 3, color.filled()))?;
        legend.draw(&Text::new(
            name,
            (44, y - 7),
            ("sans-serif", 13).into_font().color(&BLACK),
        ))?;
    }
    root.present()?;
    Ok(())
}
