//! `target/bench/report.md`: the recorded figures as tables in the form of
//! DyNet's Table 1 (throughput per strategy) and TensorFlow Fold's Table 1
//! (per-tree time, cost ratio, speedup ratio per batch size), each figure
//! with its share of the same-run sgemm peak and of its GEMM-only bound.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::report::Record;

/// Implementations in the order the tables show them.
pub const IMPLS: [&str; 5] = ["sequential", "depth", "agenda", "bucket", "manual"];

/// What makes a figure unique; a later record with the same key replaces an
/// earlier one (results.jsonl only grows).
type Key = (String, String, usize, usize, String, String, String);

fn key(r: &Record) -> Key {
    (
        r.workload.clone(),
        r.implementation.clone(),
        r.threads,
        r.batch,
        r.metric.clone(),
        r.variant.clone(),
        r.device.clone(),
    )
}

/// The latest record of every key, in key order.
pub fn latest(records: &[Record]) -> Vec<Record> {
    let mut by_key: BTreeMap<Key, Record> = BTreeMap::new();
    for r in records {
        by_key.insert(key(r), r.clone());
    }
    by_key.into_values().collect()
}

fn order(implementation: &str) -> usize {
    IMPLS
        .iter()
        .position(|i| *i == implementation)
        .unwrap_or(IMPLS.len())
}

/// `1,234` for large figures, three significant digits for small ones.
fn num(v: f64) -> String {
    if v >= 100.0 {
        let s = format!("{:.0}", v);
        let (head, tail) = s.split_at(s.len() % 3);
        let groups: Vec<&str> = tail
            .as_bytes()
            .chunks(3)
            .map(|c| std::str::from_utf8(c).unwrap_or(""))
            .collect();
        if head.is_empty() {
            groups.join(",")
        } else if groups.is_empty() {
            head.to_string()
        } else {
            format!("{head},{}", groups.join(","))
        }
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// `value (util% peak, x% bound)`; the bound share is value/bound for
/// rates and bound/value for times.
fn cell(r: &Record) -> String {
    let mut s = num(r.value);
    let mut parts = Vec::new();
    if let Some(g) = r.gflops {
        if r.peak_gflops > 0.0 {
            parts.push(format!("{:.0}% peak", 100.0 * g / r.peak_gflops));
        }
    }
    if let Some(b) = r.bound {
        let share = if is_time(r) { b / r.value } else { r.value / b };
        parts.push(format!("{:.0}% bound", 100.0 * share));
    }
    if !parts.is_empty() {
        let _ = write!(s, " ({})", parts.join(", "));
    }
    s
}

/// Whether the unit is a time (`ms/tree`, `s`), where smaller is better,
/// rather than a rate (`trees/s`, `sentences/s`).
fn is_time(r: &Record) -> bool {
    let u = r.unit.as_str();
    !u.ends_with("/s")
        && (u.starts_with("ms") || u.starts_with("us") || u == "s" || u.starts_with("s/"))
}

/// The whole report as markdown; `command` is the command that made it.
pub fn markdown(records: &[Record], command: &str) -> String {
    let recs = latest(records);
    let mut md = String::from("# sheaf benchmark report\n\n");
    let machines: Vec<&str> = dedup(recs.iter().map(|r| r.machine.as_str()));
    let gits: Vec<&str> = dedup(recs.iter().map(|r| r.git.as_str()));
    let dates: Vec<&str> = dedup(recs.iter().map(|r| r.date.as_str()));
    let _ = writeln!(md, "- Machine: {}", machines.join("; "));
    let _ = writeln!(md, "- Commit(s): {}", gits.join(", "));
    let _ = writeln!(
        md,
        "- Runs: {} to {}",
        dates.first().unwrap_or(&"?"),
        dates.last().unwrap_or(&"?")
    );
    let _ = writeln!(md, "- Command: `{command}`\n");
    md.push_str(
        "Each figure: the measured value, its useful model FLOP rate as a share of \
         the same-run sgemm peak (matrixmultiply 1024^3, same thread count), and its \
         share of the workload's GEMM-only bound (every product of the run timed \
         alone at the best same-run sgemm rate for its shape). Plots: \
         `utilisation.svg`, `w3_time.svg`.\n\n",
    );
    throughput_table(&mut md, &recs);
    fold_tables(&mut md, &recs);
    md
}

fn dedup<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = items.filter(|s| !s.is_empty()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// DyNet Table 1: one row per (workload, batch, variant, threads), one
/// column per strategy.
fn throughput_table(md: &mut String, recs: &[Record]) {
    let rows: Vec<&Record> = recs.iter().filter(|r| r.metric == "throughput").collect();
    if rows.is_empty() {
        return;
    }
    let present: Vec<&str> = IMPLS
        .iter()
        .copied()
        .filter(|i| rows.iter().any(|r| r.implementation == *i))
        .collect();
    md.push_str("## Throughput per strategy (DyNet Table 1)\n\n");
    let _ = writeln!(
        md,
        "| workload | batch | threads | unit | {} | sgemm peak GFLOP/s |",
        present.join(" | ")
    );
    let _ = writeln!(md, "|---|---|---|---|{}---|", "---|".repeat(present.len()));
    let mut groups: BTreeMap<(String, usize, String, usize), Vec<&Record>> = BTreeMap::new();
    for r in rows {
        groups
            .entry((r.workload.clone(), r.batch, r.variant.clone(), r.threads))
            .or_default()
            .push(r);
    }
    for ((workload, batch, variant, threads), rs) in groups {
        let name = if variant.is_empty() {
            workload
        } else {
            format!("{workload} ({variant})")
        };
        let cells: Vec<String> = present
            .iter()
            .map(|i| {
                rs.iter()
                    .find(|r| r.implementation == *i)
                    .map_or_else(|| "-".into(), |r| cell(r))
            })
            .collect();
        let peak = rs.iter().map(|r| r.peak_gflops).fold(0.0, f64::max);
        let _ = writeln!(
            md,
            "| {name} | {batch} | {threads} | {} | {} | {:.0} |",
            rs[0].unit,
            cells.join(" | "),
            peak
        );
    }
    md.push('\n');
}

/// W3 per-tree times: `(variant, impl, batch) -> record`.
type Times<'a> = BTreeMap<(String, String, usize), &'a Record>;

/// Fold Table 1, per W3 state size and thread count: per-tree time of the
/// manual, same-shape dynamic and full dynamic runs per batch size, the
/// cost ratio (dynamic / manual, same batch) and the speedup ratio (manual
/// at batch 1 / full dynamic at this batch).
fn fold_tables(md: &mut String, recs: &[Record]) {
    let w3: Vec<&Record> = recs
        .iter()
        .filter(|r| r.workload == "W3" && r.metric == "time_per_tree")
        .collect();
    let mut by_setting: BTreeMap<(String, usize), Times> = BTreeMap::new();
    for r in &w3 {
        // variant: "state 256, same shape" / "state 256, full dynamic".
        let (state, shape) = r.variant.split_once(", ").unwrap_or(("", &r.variant));
        by_setting
            .entry((state.to_string(), r.threads))
            .or_default()
            .insert((shape.to_string(), r.implementation.clone(), r.batch), r);
    }
    for ((state, threads), times) in by_setting {
        let _ = writeln!(
            md,
            "## W3 Tree-LSTM inference, {state}, {threads} thread(s) (Fold Table 1)\n"
        );
        let mut cols: Vec<(String, String)> = times
            .keys()
            .map(|(shape, i, _)| (shape.clone(), i.clone()))
            .collect();
        cols.sort_by_key(|(shape, i)| (shape != "same shape", order(i)));
        cols.dedup();
        let batches: Vec<usize> = dedup_sorted(times.keys().map(|k| k.2));
        let headers: Vec<String> = cols.iter().map(|(s, i)| format!("{i}, {s}")).collect();
        let _ = writeln!(
            md,
            "| batch | {} | cost ratio (agenda) | speedup ratio (agenda) |",
            headers.join(" | ")
        );
        let _ = writeln!(md, "|---|{}---|---|", "---|".repeat(cols.len()));
        let manual_at = |b: usize| {
            times
                .get(&("same shape".into(), "manual".into(), b))
                .map(|r| r.value)
        };
        for &b in &batches {
            let cells: Vec<String> = cols
                .iter()
                .map(|(s, i)| {
                    times
                        .get(&(s.clone(), i.clone(), b))
                        .map_or_else(|| "-".into(), |r| cell(r))
                })
                .collect();
            let agenda = |shape: &str| {
                times
                    .get(&(shape.into(), "agenda".into(), b))
                    .map(|r| r.value)
            };
            let cost = match (agenda("same shape"), manual_at(b)) {
                (Some(d), Some(m)) => format!("{:.2}", d / m),
                _ => "-".into(),
            };
            let speedup = match (manual_at(1), agenda("full dynamic")) {
                (Some(m1), Some(f)) => format!("{:.1}", m1 / f),
                _ => "-".into(),
            };
            let _ = writeln!(md, "| {b} | {} | {cost} | {speedup} |", cells.join(" | "));
        }
        md.push_str("\nTimes in ms per tree, graph construction included.\n\n");
    }
}

fn dedup_sorted(items: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut v: Vec<usize> = items.collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(
        workload: &str,
        i: &str,
        batch: usize,
        metric: &str,
        value: f64,
        variant: &str,
    ) -> Record {
        Record {
            workload: workload.into(),
            implementation: i.into(),
            threads: 1,
            batch,
            metric: metric.into(),
            value,
            unit: if metric == "throughput" {
                "trees/s"
            } else {
                "ms/tree"
            }
            .into(),
            peak_gflops: 100.0,
            gflops: Some(50.0),
            bound: Some(if metric == "throughput" {
                2.0 * value
            } else {
                value / 4.0
            }),
            device: "cpu".into(),
            variant: variant.into(),
            machine: "test CPU".into(),
            ranks: None,
            date: "2026-11-23T00:00:00Z".into(),
            git: "abc".into(),
            notes: String::new(),
        }
    }

    #[test]
    fn later_records_replace_earlier_ones() {
        let recs = vec![
            rec("W1", "agenda", 64, "throughput", 100.0, ""),
            rec("W1", "agenda", 64, "throughput", 200.0, ""),
            rec("W1", "depth", 64, "throughput", 150.0, ""),
        ];
        let l = latest(&recs);
        assert_eq!(l.len(), 2);
        assert_eq!(
            l.iter()
                .find(|r| r.implementation == "agenda")
                .unwrap()
                .value,
            200.0
        );
    }

    #[test]
    fn tables_show_shares_and_fold_ratios() {
        let v = |s| format!("state 256, {s}");
        let recs = vec![
            rec("W1", "agenda", 64, "throughput", 1234.5, ""),
            rec("W3", "manual", 1, "time_per_tree", 8.0, &v("same shape")),
            rec("W3", "manual", 32, "time_per_tree", 1.0, &v("same shape")),
            rec("W3", "agenda", 32, "time_per_tree", 1.1, &v("same shape")),
            rec("W3", "agenda", 32, "time_per_tree", 2.0, &v("full dynamic")),
        ];
        let md = markdown(&recs, "cargo xtask bench all");
        assert!(
            md.contains("| W1 | 64 | 1 | trees/s | 1,234 (50% peak, 50% bound) | 100 |"),
            "{md}"
        );
        // cost ratio 1.1 / 1.0; speedup 8.0 / 2.0.
        assert!(md.contains("| 1.10 | 4.0 |"), "{md}");
        assert!(md.contains("1.10 (50% peak, 25% bound)"), "{md}");
        assert!(md.contains("test CPU"));
    }

    #[test]
    fn rates_and_times_are_told_apart() {
        let mut r = rec("W2", "agenda", 64, "throughput", 90.0, "");
        for (unit, time) in [
            ("sentences/s", false),
            ("strings/s", false),
            ("trees/s", false),
            ("ms/tree", true),
            ("s", true),
        ] {
            r.unit = unit.into();
            assert_eq!(is_time(&r), time, "{unit}");
        }
        // A rate below its bound is a share below 100%.
        r.unit = "sentences/s".into();
        r.bound = Some(120.0);
        assert!(cell(&r).contains("75% bound"), "{}", cell(&r));
    }

    #[test]
    fn numbers_group_thousands() {
        assert_eq!(num(1234567.0), "1,234,567");
        assert_eq!(num(123.4), "123");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(0.1234), "0.123");
    }
}
