//! `bench-w4 [--quick]`: training throughput of the BiLSTM tagger with
//! character embeddings of rare words on the SST training sentences
//! (sentences/s, useful GFLOP/s, utilisation against the same-run sgemm
//! peak) for sequential, depth and agenda, each beside its GEMM-only bound.

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

/// Seconds to train on `timed` after `warm`, the timed steps' products and
/// the last step's plan statistics.
fn time_run(
    data: &Data,
    strategy: Option<Strategy>,
    warm: &[Sentence],
    timed: &[Sentence],
) -> Result<(f64, Products, Option<String>), String> {
    let mut store = ParamStore::new();
    let m = CharModel::new(&mut store, data, 1)?;
    let mut opt = optimizer();
    let mut g = Graph::new();
    let mut exec = strategy.map(Executor::new);
    for batch in warm.chunks(BATCH) {
        train_step(&m, &mut store, &mut opt, &mut g, exec.as_mut(), batch)?;
    }
    let start = Instant::now();
    let (result, products) = record_gemms(|| -> Result<(), String> {
        for batch in timed.chunks(BATCH) {
            train_step(&m, &mut store, &mut opt, &mut g, exec.as_mut(), batch)?;
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
        for (name, strategy) in strategies() {
            let (secs, products, stats) =
                with_threads(threads, || time_run(&data, strategy, warm, timed))
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
            report.add(
                "W4",
                name,
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
