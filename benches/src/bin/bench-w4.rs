//! `bench-w4 [--quick]`: training throughput of the BiLSTM tagger with
//! character embeddings of rare words on the SST training sentences
//! (sentences/s, useful GFLOP/s, utilisation against the same-run sgemm
//! peak) for sequential, depth and agenda, each beside its GEMM-only bound;
//! depth and agenda again with the model written with sheaf-nn layers
//! (variant `layers`), and their ratio to the hand-written model.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::bound::{record_gemms, Products};
use sheaf_benches::measure::{with_threads, Budget};
use sheaf_benches::peak::sgemm_peak_gflops;
use sheaf_benches::report::{default_results_path, Report};
use sheaf_benches::w2::{optimizer, strategies, BATCH};
use sheaf_benches::w4::{train_flops, train_step, CharModel, Data, Sentence};
use sheaf_benches::w4_nn::{self, NnCharModel};
use sheaf_examples::sst::read_trees;
use sheaf_sched::{Executor, Strategy};

#[derive(Parser, Debug)]
#[command(
    about = "W4: BiLSTM tagger with character embeddings of rare words, sentences/s per strategy"
)]
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

fn main() {
    sheaf_examples::logging::init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("bench-w4: {e}");
        std::process::exit(1);
    }
}

/// Seconds to train on `timed` after `warm` with `strategy` (None =
/// Sequential), the model written with layers or by hand; the timed
/// steps' products and the last step's plan statistics.
fn time_run(
    data: &Data,
    strategy: Option<Strategy>,
    layers: bool,
    warm: &[Sentence],
    timed: &[Sentence],
) -> Result<(f64, Products, Option<String>), String> {
    let mut store = ParamStore::new();
    let m = CharModel::new(&mut store, data, 1)?;
    // The layers' model starts from the hand-written one's values.
    let mut layers_store = ParamStore::new();
    let nn = NnCharModel::new(&mut layers_store, data, 1).map_err(|e| e.to_string())?;
    nn.copy_from(&mut layers_store, &m, &store);
    if layers {
        store = layers_store;
    }
    let mut opt = optimizer();
    let mut g = Graph::new();
    let mut exec = strategy.map(Executor::new);
    let mut step = |store: &mut ParamStore, batch: &[Sentence]| match layers {
        true => w4_nn::train_step(&nn, store, &mut opt, &mut g, exec.as_mut(), batch),
        false => train_step(&m, store, &mut opt, &mut g, exec.as_mut(), batch),
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
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sst/train.txt");
    let trees = read_trees(&path).map_err(|e| e.to_string())?;
    let data = Data::new(&trees, sheaf_benches::w2::Config::w2().classes, 7);
    let n = if args.quick { 256 } else { 1280 };
    if data.sentences.len() < WARM + n {
        return Err(format!(
            "{} holds {} sentences, fewer than {}",
            path.display(),
            data.sentences.len(),
            WARM + n
        ));
    }
    let (warm, rest) = data.sentences.split_at(WARM);
    let timed = &rest[..n];
    let flops: f64 = timed.iter().map(train_flops).sum();
    let words: usize = timed.iter().map(|s| s.words.len()).sum();
    let budget = if args.quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    println!(
        "W4: SST training sentences ({} words, {} characters, {:.1}% of tokens rare), {n} timed after {WARM}, {:.1} words and {:.1} useful MFLOP per sentence, batch {BATCH}",
        data.words,
        data.chars,
        100.0 * data.rare_share,
        words as f64 / n as f64,
        flops / n as f64 / 1e6
    );
    println!(
        "{:>11} {:>8} {:>12} {:>9} {:>8} {:>7} {:>11} {:>8}",
        "impl", "threads", "sentences/s", "GFLOP/s", "peak", "util", "bound", "of bound"
    );
    let mut report = Report::new();
    for &threads in &args.threads {
        let peak = sgemm_peak_gflops(threads, budget);
        let mut runs: Vec<(&str, Option<Strategy>, bool)> = strategies()
            .into_iter()
            .map(|(name, s)| (name, s, false))
            .collect();
        // The model written with sheaf-nn layers, beside the hand-written.
        runs.push(("depth/layers", Some(Strategy::Depth), true));
        runs.push(("agenda/layers", Some(Strategy::Agenda), true));
        let mut rates = Vec::new();
        for (name, strategy, layers) in runs {
            let (secs, products, stats) =
                with_threads(threads, || time_run(&data, strategy, layers, warm, timed))
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
                "W4",
                base,
                threads,
                BATCH,
                "throughput",
                rate,
                "sentences/s",
                peak,
                Some(gflops),
                &format!(
                    "{n} SST sentences, {:.1}% rare tokens, utilisation {:.3}, {:.3} of the GEMM-only bound ({} products, {} shapes)",
                    100.0 * data.rare_share,
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
