//! `bench-w2 [--quick]`: training throughput of the synthetic BiLSTM tagger
//! (sentences/s, useful GFLOP/s, utilisation against the same-run sgemm
//! peak) for sequential, depth, agenda and the hand-batched `manual`, each
//! beside its GEMM-only bound, and agenda's ratio to manual; depth and
//! agenda again with the model written with sheaf-nn layers (variant
//! `layers`), and their ratio to the hand-written model.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::bound::{record_gemms, Products};
use sheaf_benches::measure::{with_threads, Budget};
use sheaf_benches::peak::sgemm_peak_gflops;
use sheaf_benches::report::{default_results_path, Report};
use sheaf_benches::w2::{
    optimizer, sentences, strategies, train_step, Config, Model, Sentence, BATCH, LR,
};
use sheaf_benches::w2_manual::Manual;
use sheaf_benches::w2_nn::{self, NnModel};
use sheaf_sched::{Executor, Strategy};

#[derive(Parser, Debug)]
#[command(about = "W2: synthetic BiLSTM tagger, training sentences/s per strategy and manual")]
struct Args {
    /// 256 timed sentences instead of 1280 (and shorter limit measurements).
    #[arg(long)]
    quick: bool,
    /// Thread counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Where to append the JSON lines.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the plan statistics of each batched run's last step.
    #[arg(long)]
    stats: bool,
    /// Skip the GEMM-only bound (its timing would swamp a profile).
    #[arg(long)]
    no_bound: bool,
}

/// Sentences of warm-up before the timed ones.
const WARM: usize = 128;

/// How a run trains: through a graph (None = Sequential), through the
/// model written with sheaf-nn layers, or by hand.
#[derive(Clone, Copy)]
enum Impl {
    Graph(Option<Strategy>),
    Layers(Strategy),
    Manual,
}

fn main() {
    sheaf_examples::logging::init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("bench-w2: {e}");
        std::process::exit(1);
    }
}

/// Seconds to train on `timed` after `warm`, the timed steps' products and
/// the last step's plan statistics.
fn time_run(
    how: Impl,
    warm: &[Sentence],
    timed: &[Sentence],
) -> Result<(f64, Products, Option<String>), String> {
    let cfg = Config::w2();
    let mut store = ParamStore::new();
    let m = Model::new(&mut store, cfg, 1)?;
    // The layers' model starts from the hand-written one's values.
    let mut layers_store = ParamStore::new();
    let layers = NnModel::new(&mut layers_store, cfg, 1).map_err(|e| e.to_string())?;
    layers.copy_from(&mut layers_store, &m, &store);
    if let Impl::Layers(_) = how {
        store = layers_store;
    }
    let mut opt = optimizer();
    let mut g = Graph::new();
    let mut manual = Manual::new()?;
    let mut exec = match how {
        Impl::Graph(s) => s.map(Executor::new),
        Impl::Layers(s) => Some(Executor::new(s)),
        Impl::Manual => None,
    };
    let mut step = |store: &mut ParamStore, batch: &[Sentence]| match how {
        Impl::Graph(_) => train_step(&m, store, &mut opt, &mut g, exec.as_mut(), batch),
        Impl::Layers(_) => {
            w2_nn::train_step(&layers, store, &mut opt, &mut g, exec.as_mut(), batch)
        }
        Impl::Manual => manual.step(store, &m, batch, LR),
    };
    for batch in warm.chunks(BATCH) {
        step(&mut store, batch)?;
    }
    let start = Instant::now();
    let (result, products) = record_gemms(|| -> Result<(), String> {
        for batch in timed.chunks(BATCH) {
            step(&mut store, batch)?;
        }
        Ok(())
    });
    let secs = start.elapsed().as_secs_f64();
    result?;
    Ok((secs, products, exec.map(|e| e.stats().to_string())))
}

fn run(args: Args) -> Result<(), String> {
    let cfg = Config::w2();
    let n = if args.quick { 256 } else { 1280 };
    let data = sentences(&cfg, WARM + n, 7);
    let (warm, timed) = data.split_at(WARM);
    let flops = cfg.train_flops(cfg.len) * n as f64;
    let budget = if args.quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    println!(
        "W2: BiLSTM tagger, {n} timed sentences of {} after {WARM} ({:.1} useful MFLOP/sentence), batch {BATCH}",
        cfg.len,
        cfg.train_flops(cfg.len) / 1e6
    );
    println!(
        "{:>11} {:>8} {:>12} {:>9} {:>8} {:>7} {:>11} {:>8}",
        "impl", "threads", "sentences/s", "GFLOP/s", "peak", "util", "bound", "of bound"
    );
    let mut report = Report::new();
    for &threads in &args.threads {
        let peak = sgemm_peak_gflops(threads, budget);
        let mut runs: Vec<(&str, Impl)> = strategies()
            .into_iter()
            .map(|(name, s)| (name, Impl::Graph(s)))
            .collect();
        runs.push(("manual", Impl::Manual));
        // The model written with sheaf-nn layers, beside the hand-written.
        runs.push(("depth/layers", Impl::Layers(Strategy::Depth)));
        runs.push(("agenda/layers", Impl::Layers(Strategy::Agenda)));
        let mut rates = Vec::new();
        for (name, how) in runs {
            let (secs, products, stats) = with_threads(threads, || time_run(how, warm, timed))
                .map_err(|e| format!("{name}: {e}"))?;
            let rate = n as f64 / secs;
            let gflops = flops / secs / 1e9;
            let bound = if args.no_bound {
                f64::NAN
            } else {
                n as f64 / products.seconds(threads, budget)
            };
            println!(
                "{name:>11} {threads:>8} {rate:>12.1} {gflops:>9.2} {peak:>8.1} {:>6.1}% {bound:>11.1} {:>7.1}%",
                100.0 * gflops / peak,
                100.0 * rate / bound
            );
            if let (true, Some(stats)) = (args.stats, stats) {
                println!("last step of {name} at {threads} thread(s): {stats}");
            }
            let (base, variant) = name.split_once('/').unwrap_or((name, ""));
            report.add(
                "W2",
                base,
                threads,
                BATCH,
                "throughput",
                rate,
                "sentences/s",
                peak,
                Some(gflops),
                &format!(
                    "{n} sentences of {}, utilisation {:.3}, {:.3} of the GEMM-only bound ({} products, {} shapes)",
                    cfg.len,
                    gflops / peak,
                    rate / bound,
                    products.calls(),
                    products.distinct()
                ),
            );
            if !args.no_bound {
                report.add_bound(bound);
            }
            report.set_variant(variant);
            rates.push((name, rate));
        }
        let of = |name: &str| rates.iter().find(|r| r.0 == name).map(|r| r.1);
        if let (Some(a), Some(m)) = (of("agenda"), of("manual")) {
            println!("agenda / manual at {threads} thread(s): {:.3}", a / m);
        }
        for s in ["depth", "agenda"] {
            if let (Some(l), Some(h)) = (of(&format!("{s}/layers")), of(s)) {
                println!(
                    "{s}: layers / hand-written at {threads} thread(s): {:.3}",
                    l / h
                );
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
