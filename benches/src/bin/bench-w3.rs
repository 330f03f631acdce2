//! `bench-w3 [--quick]`: Tree-LSTM inference on random 128-leaf trees
//! (TensorFlow Fold's Table 1): ms/tree per implementation and batch size,
//! graph construction included, with Fold's cost ratio (dynamic / manual
//! at the same batch size) and speedup ratio (manual at batch 1 / this),
//! and the GEMM-only bound: the per-tree time of each run's products alone.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::bound::{record_gemms, Products};
use sheaf_benches::host::HostTime;
use sheaf_benches::measure::{with_threads, Budget};
use sheaf_benches::peak::sgemm_peak_gflops;
use sheaf_benches::report::{default_results_path, Report};
use sheaf_benches::w3::{
    build_tree_with, infer_flops, infer_graph_with, trees, Manual, Model, VertexCells,
};
use sheaf_sched::{Executor, Strategy};

#[derive(Parser, Debug)]
#[command(about = "W3: Tree-LSTM inference on random trees, ms/tree per implementation")]
struct Args {
    /// Few timed trees per figure (and a shorter peak measurement).
    #[arg(long)]
    quick: bool,
    /// Thread counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// State sizes (E = H); Fold's paper also has 1024.
    #[arg(long, value_delimiter = ',', default_value = "256")]
    state: Vec<usize>,
    /// Trees per batch; Fold's paper also has 1024.
    #[arg(long, value_delimiter = ',', default_value = "1,32,256")]
    batch: Vec<usize>,
    /// Where to append the JSON lines.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the plan statistics of each batched run's last batch.
    #[arg(long)]
    stats: bool,
    /// Skip the GEMM-only bound (its timing would swamp a profile).
    #[arg(long)]
    no_bound: bool,
    /// Run the executors as for training, keeping what a backward would
    /// need, instead of in inference mode (`Executor::set_inference`).
    #[arg(long)]
    recorded: bool,
}

/// One column group of Fold's table: who runs the trees, on which shapes.
#[derive(Debug, Clone, Copy)]
struct Config {
    /// `manual`, `depth`, `agenda` or `sequential`.
    name: &'static str,
    /// None: hand-batched; Some(None): the reference executor.
    exec: Option<Option<Strategy>>,
    /// All trees one shape (else each its own: "full dynamic").
    same: bool,
    /// The cells called as vertex functions (`w3::VertexCells`).
    vertex: bool,
}

impl Config {
    fn shape(&self) -> &'static str {
        match (self.same, self.vertex) {
            (true, _) => "same",
            (false, false) => "full",
            (false, true) => "full+vf",
        }
    }
    fn notes(&self) -> &'static str {
        match (self.same, self.vertex) {
            (true, _) => "same shape",
            (false, false) => "full dynamic",
            (false, true) => "full dynamic, vertex",
        }
    }
}

const CONFIGS: [Config; 9] = [
    Config {
        name: "manual",
        exec: None,
        same: true,
        vertex: false,
    },
    Config {
        name: "depth",
        exec: Some(Some(Strategy::Depth)),
        same: true,
        vertex: false,
    },
    Config {
        name: "agenda",
        exec: Some(Some(Strategy::Agenda)),
        same: true,
        vertex: false,
    },
    // Not in Fold's table (its manual batching needs one shape), but the
    // level-batched baseline on random shapes that PyTorch peers report.
    Config {
        name: "manual",
        exec: None,
        same: false,
        vertex: false,
    },
    Config {
        name: "depth",
        exec: Some(Some(Strategy::Depth)),
        same: false,
        vertex: false,
    },
    Config {
        name: "agenda",
        exec: Some(Some(Strategy::Agenda)),
        same: false,
        vertex: false,
    },
    Config {
        name: "sequential",
        exec: Some(None),
        same: false,
        vertex: false,
    },
    // The batched runs again, the cells as vertex functions (Cavs).
    Config {
        name: "depth",
        exec: Some(Some(Strategy::Depth)),
        same: false,
        vertex: true,
    },
    Config {
        name: "agenda",
        exec: Some(Some(Strategy::Agenda)),
        same: false,
        vertex: true,
    },
];

/// One measured figure.
struct Row {
    cfg: Config,
    batch: usize,
    /// Median seconds per tree over the timed batches.
    secs: f64,
    trees: usize,
    /// The products of the timed batches.
    products: Products,
    stats: Option<String>,
    /// Host work per tree of the last batch (batched runs).
    host: Option<HostTime>,
}

/// Batches to time: enough trees for a stable median, few with `--quick`.
fn timed_batches(batch: usize, quick: bool) -> usize {
    if quick {
        16usize.div_ceil(batch)
    } else {
        3usize.max(256usize.div_ceil(batch))
    }
}

/// Times `cfg` on batches of `batch` trees at state `h` after a warm-up
/// batch (one tree for the reference executor, which keeps no buffers);
/// every configuration sees the same trees of a given shape kind.
fn time_config(cfg: Config, batch: usize, h: usize, args: &Args) -> Result<Row, String> {
    let quick = args.quick;
    let timed = timed_batches(batch, quick);
    let warm = if cfg.exec == Some(None) { 1 } else { batch };
    let all = trees(warm + timed * batch, cfg.same, 11);
    let (warm, all) = all.split_at(warm);
    let mut store = ParamStore::new();
    let model = Model::new(&mut store, h, 1)?;
    let mut manual = Manual::new()?;
    let mut g = Graph::new();
    let mut exec = cfg.exec.flatten().map(Executor::new);
    if let Some(e) = exec.as_mut() {
        // Inference: nothing kept for a backward.
        e.set_inference(!args.recorded);
    }
    let cells = cfg.vertex.then(|| VertexCells::new(&model)).transpose()?;
    let mut run = |chunk: &[_]| -> Result<(), String> {
        match cfg.exec {
            None => manual.infer(&store, &model, chunk).map(drop),
            Some(_) => {
                infer_graph_with(&mut g, exec.as_mut(), &store, &model, cells.as_ref(), chunk)
                    .map(drop)
            }
        }
    };
    run(warm)?;
    let mut times = Vec::with_capacity(timed);
    let mut products = Products::default();
    for chunk in all.chunks(batch) {
        let t0 = Instant::now();
        let (done, p) = record_gemms(|| run(chunk));
        times.push(t0.elapsed().as_secs_f64());
        done?;
        products.merge(&p);
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    // Host work on the last batch, five times (the graph and the arena
    // reused, as in the timed loop): its graph built alone (timed), then
    // run, for the executor's planning and bookkeeping; the median of the
    // last three (one probe read up to 2.5x its neighbours).
    let host = match (exec.as_mut(), all.chunks(batch).last()) {
        (Some(e), Some(chunk)) => {
            let mut runs = Vec::with_capacity(5);
            for _ in 0..5 {
                g.clear();
                let t0 = Instant::now();
                let mut last = None;
                for t in chunk {
                    last = Some(build_tree_with(&mut g, &model, cells.as_ref(), t)?);
                }
                let built = t0.elapsed().as_secs_f64();
                if let Some(last) = last {
                    e.forward(&mut g, &store, last)
                        .map_err(|e| format!("W3 forward: {e}"))?;
                }
                runs.push(HostTime::of_step(built, g.len(), e.stats(), chunk.len()));
            }
            runs.drain(..2);
            runs.sort_by(|a, b| a.total().total_cmp(&b.total()));
            Some(runs[runs.len() / 2])
        }
        _ => None,
    };
    Ok(Row {
        cfg,
        batch,
        secs: median / batch as f64,
        trees: timed * batch,
        products,
        stats: exec.map(|e| e.stats().to_string()),
        host,
    })
}

fn main() {
    sheaf_examples::logging::init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("bench-w3: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    if args.batch.contains(&0) || args.state.contains(&0) || args.threads.contains(&0) {
        return Err("--batch, --state and --threads take positive numbers".into());
    }
    let budget = if args.quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    let mut report = Report::new();
    for &threads in &args.threads {
        let peak = sgemm_peak_gflops(threads, budget);
        for &h in &args.state {
            let flops = infer_flops(&trees(1, false, 0)[0], h);
            println!(
                "W3 at {threads} thread(s), state {h} ({:.1} useful MFLOP/tree), sgemm peak {peak:.1} GFLOP/s",
                flops / 1e6
            );
            println!(
                "{:>11} {:>6} {:>6} {:>10} {:>9} {:>7} {:>6} {:>8} {:>10} {:>8}",
                "impl",
                "shape",
                "batch",
                "ms/tree",
                "GFLOP/s",
                "util",
                "cost",
                "speedup",
                "bound ms",
                "of bound"
            );
            let mut rows: Vec<Row> = Vec::new();
            for &batch in &args.batch {
                for cfg in CONFIGS {
                    let row = with_threads(threads, || time_config(cfg, batch, h, &args)).map_err(
                        |e| format!("{} ({}), batch {batch}: {e}", cfg.name, cfg.shape()),
                    )?;
                    rows.push(row);
                }
            }
            // Fold's ratios against the same-shape manual run.
            let manual_at = |b: usize| {
                rows.iter()
                    .find(|r| r.cfg.exec.is_none() && r.cfg.same && r.batch == b)
                    .map(|r| r.secs)
            };
            for r in &rows {
                let gflops = flops / r.secs / 1e9;
                let cost = manual_at(r.batch).map(|m| r.secs / m);
                let speedup = manual_at(1).map(|m| m / r.secs);
                let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
                // Per-tree time at the bound; the run's share of it is
                // bound / measured, as for a rate.
                let bound =
                    (!args.no_bound).then(|| r.products.seconds(threads, budget) / r.trees as f64);
                println!(
                    "{:>11} {:>6} {:>6} {:>10.3} {gflops:>9.2} {:>6.1}% {:>6} {:>8} {:>10} {:>8}",
                    r.cfg.name,
                    r.cfg.shape(),
                    r.batch,
                    1e3 * r.secs,
                    100.0 * gflops / peak,
                    fmt(cost),
                    fmt(speedup),
                    bound.map_or("-".into(), |b| format!("{:.3}", 1e3 * b)),
                    bound.map_or("-".into(), |b| format!("{:.1}%", 100.0 * b / r.secs)),
                );
                if let (true, Some(stats)) = (args.stats, &r.stats) {
                    println!("  last batch: {stats}");
                }
                if let (true, Some(h)) = (args.stats, &r.host) {
                    println!("  host: {}", h.describe("tree"));
                }
                let notes = format!(
                    "{}, state {h}, {} timed trees (median batch), utilisation {:.3}{}",
                    r.cfg.notes(),
                    r.trees,
                    gflops / peak,
                    bound.map_or(String::new(), |b| format!(
                        ", {:.3} of the GEMM-only bound ({} products, {} shapes)",
                        b / r.secs,
                        r.products.calls(),
                        r.products.distinct()
                    ))
                );
                let variant = format!("state {h}, {}", r.cfg.notes());
                let add = |report: &mut Report, metric: &str, value: f64, unit: &str| {
                    report.add(
                        "W3",
                        r.cfg.name,
                        threads,
                        r.batch,
                        metric,
                        value,
                        unit,
                        peak,
                        Some(gflops),
                        &notes,
                    );
                    report.set_variant(&variant);
                };
                add(&mut report, "time_per_tree", 1e3 * r.secs, "ms/tree");
                if let Some(b) = bound {
                    report.add_bound(1e3 * b);
                }
                if let Some(h) = &r.host {
                    h.record(
                        &mut report,
                        "W3",
                        r.cfg.name,
                        threads,
                        r.batch,
                        peak,
                        "tree",
                    );
                }
                if let (Some(c), false) = (cost, r.cfg.exec.is_none() && r.cfg.same) {
                    add(&mut report, "cost_ratio", c, "ratio");
                }
                if let Some(s) = speedup {
                    add(&mut report, "speedup_ratio", s, "ratio");
                }
            }
        }
    }
    let path = args.out.unwrap_or_else(default_results_path);
    report
        .append_jsonl(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!(
        "appended {} results to {}",
        report.records().len(),
        path.display()
    );
    Ok(())
}
