//! The training curves: `history.csv` and `training.svg` (two panels: dev
//! fine-grained and binary accuracy per epoch above, training loss per node
//! below), rewritten atomically after every epoch.

use std::path::Path;

use plotters::prelude::*;

use crate::error::{Error, Result};
use crate::state::{write_atomic, EpochRecord};

/// The header of `history.csv`.
pub const CSV_HEADER: &str =
    "epoch,step,train_loss_per_node,train_trees,train_seconds,trees_per_sec,dev_fine,dev_binary";

/// The history as CSV text, one row per epoch, accuracies in `[0, 1]`.
pub fn history_csv(history: &[EpochRecord]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for r in history {
        s.push_str(&format!(
            "{},{},{:.6},{},{:.3},{:.1},{:.6},{:.6}\n",
            r.epoch,
            r.step,
            r.train_loss,
            r.train_trees,
            r.train_seconds,
            r.trees_per_sec,
            r.dev_fine,
            r.dev_binary
        ));
    }
    s
}

/// Writes [`history_csv`] to `path` atomically.
pub fn write_history(path: &Path, history: &[EpochRecord]) -> Result<()> {
    write_atomic(path, history_csv(history).as_bytes())
}

/// Renders the curves as an SVG document (`title` above them).
pub fn training_svg(history: &[EpochRecord], title: &str) -> Result<String> {
    let mut svg = String::new();
    draw(&mut svg, history, title).map_err(|e| Error::Config(format!("plotting: {e}")))?;
    Ok(svg)
}

/// Writes [`training_svg`] to `path` atomically.
pub fn write_plot(path: &Path, history: &[EpochRecord], title: &str) -> Result<()> {
    write_atomic(path, training_svg(history, title)?.as_bytes())
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// A named, coloured line of `(epoch, value)` points.
type Series = (&'static str, RGBColor, Vec<(f64, f64)>);

fn draw(svg: &mut String, history: &[EpochRecord], title: &str) -> DrawResult {
    let root = SVGBackend::with_string(svg, (800, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let panels = root.split_evenly((2, 1));
    let last = history.last().map_or(1, |r| r.epoch).max(1);
    let x_range = 0.5f64..last as f64 + 0.5;
    let pct = |v: f64| 100.0 * v;

    // Accuracies.
    let series: [Series; 2] = [
        (
            "dev fine-grained",
            RGBColor(31, 119, 180),
            history
                .iter()
                .map(|r| (r.epoch as f64, pct(r.dev_fine)))
                .collect(),
        ),
        (
            "dev binary",
            RGBColor(214, 39, 40),
            history
                .iter()
                .map(|r| (r.epoch as f64, pct(r.dev_binary)))
                .collect(),
        ),
    ];
    let values = series.iter().flat_map(|s| s.2.iter().map(|p| p.1));
    let (lo, hi) = bounds(values, 0.0, 100.0);
    let mut chart = ChartBuilder::on(&panels[0])
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x_range.clone(), lo..hi)?;
    chart
        .configure_mesh()
        .x_desc("epoch")
        .y_desc("dev accuracy (%)")
        .x_labels(last.min(20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    for (name, color, points) in series {
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 3, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;

    // Training loss.
    let color = RGBColor(44, 160, 44);
    let points: Vec<(f64, f64)> = history
        .iter()
        .map(|r| (r.epoch as f64, r.train_loss))
        .collect();
    let (lo, hi) = bounds(points.iter().map(|p| p.1), 0.0, 2.0);
    let mut chart = ChartBuilder::on(&panels[1])
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x_range, lo..hi)?;
    chart
        .configure_mesh()
        .x_desc("epoch")
        .y_desc("train loss per node")
        .x_labels(last.min(20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    chart
        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
        .label("training loss (with dropout)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    chart.draw_series(
        points
            .into_iter()
            .map(|p| Circle::new(p, 3, color.filled())),
    )?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// A padded range around `values`, or `[lo, hi]` when there are none.
fn bounds(values: impl Iterator<Item = f64>, lo: f64, hi: f64) -> (f64, f64) {
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        min = min.min(v);
        max = max.max(v);
    }
    if min > max {
        return (lo, hi);
    }
    let pad = ((max - min) * 0.1).max(0.5 * (hi - lo) / 100.0);
    (min - pad, max + pad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(epoch: usize) -> EpochRecord {
        EpochRecord {
            epoch,
            step: 10 * epoch as u64,
            train_loss: 1.0 / epoch as f64,
            train_trees: 100,
            train_seconds: 1.0,
            trees_per_sec: 100.0,
            dev_fine: 0.3 + 0.01 * epoch as f64,
            dev_binary: 0.7 + 0.01 * epoch as f64,
        }
    }

    #[test]
    fn plots_and_tables() {
        for n in [0, 1, 3] {
            let h: Vec<EpochRecord> = (1..=n).map(record).collect();
            let svg = training_svg(&h, "test").unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("dev binary"));
            assert_eq!(history_csv(&h).lines().count(), n + 1);
        }
    }
}
