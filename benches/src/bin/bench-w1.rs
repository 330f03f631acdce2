//! `cargo xtask bench W1 [--quick]`: Tree-LSTM training throughput on SST
//! (trees/s, useful GFLOP/s, utilisation against the same-run sgemm peak)
//! for sequential, depth and agenda at 1 and 2 threads, each beside its
//! GEMM-only bound: the trees/s its products alone would allow.

use std::path::Path;
use std::time::Instant;

use clap::Parser;
use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::bound::{record_gemms, Products};
use sheaf_benches::host::HostTime;
use sheaf_benches::measure::{with_threads, Budget};
use sheaf_benches::peak::sgemm_peak_gflops;
use sheaf_benches::report::{default_results_path, Report};
use sheaf_benches::w1::{
    build_loss, model, optimizer, strategies, train_flops, train_step, train_step_blocks,
    train_step_split, train_steps_pipelined,
};
use sheaf_benches::w1_hand::{self, HandTreeLstm};
use sheaf_examples::sst::{read_trees, Tree, Vocab};
use sheaf_examples::tree_lstm_blocks::{compile_training, Phrase};
use sheaf_sched::{Executor, Pipeline, Strategy};

#[derive(Parser, Debug)]
#[command(about = "W1: Tree-LSTM training on SST, trees/s per strategy")]
struct Args {
    /// 512 timed trees instead of 2048 (and a shorter peak measurement).
    #[arg(long)]
    quick: bool,
    /// Thread counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Where to append the JSON lines.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Print the plan statistics of each batched run's last step (batches
    /// per op, gathered bytes, arena memory, planning vs. kernel time).
    #[arg(long)]
    stats: bool,
    /// Instead of the table: the model written with blocks against the
    /// graph-written one (the SST example's, on sheaf-nn layers), depth and
    /// agenda, alternating runs (median of 3 each), as the ratio of their
    /// throughputs.
    #[arg(long)]
    blocks: bool,
    /// Instead of the table: the SST example's model (sheaf-nn layers)
    /// against the hand-written one it replaced, as `--blocks` does.
    #[arg(long)]
    layers: bool,
    /// Instead of the table: the SST example's model with its cells as
    /// vertex functions against the same model inlined, as `--blocks` does
    /// (with `--blocks`: the blocks model's functions as vertex functions
    /// against them run inline).
    #[arg(long)]
    vertex: bool,
    /// Run only these strategies (e.g. `--only agenda` under a profiler).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Skip the GEMM-only bound (its timing would swamp a profile).
    #[arg(long)]
    no_bound: bool,
    /// At more than one thread, also run each batch split into this many
    /// independent graphs side by side (`depth/split`, `agenda/split`).
    #[arg(long, default_value_t = 2)]
    split: usize,
    /// Build each step's graph only when the step starts, instead of
    /// while the previous step runs (`sheaf_sched::Pipeline`), to compare.
    #[arg(long)]
    no_pipeline: bool,
}

const BATCH: usize = 64;

fn main() {
    sheaf_examples::logging::init();
    let args = Args::parse();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sst/train.txt");
    let trees = read_trees(&path).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    // Vocabulary = all training tokens (plus the unknown-word row).
    let vocab = Vocab::from_trees(&trees);
    let ids: Vec<Vec<u32>> = trees.iter().map(|t| vocab.encode(t)).collect();
    let timed = if args.quick { 512 } else { 2048 };
    let (warm, warm_ids) = (&trees[0..128], &ids[0..128]);
    let (measured, measured_ids) = (&trees[128..128 + timed], &ids[128..128 + timed]);
    let flops: f64 = measured.iter().map(train_flops).sum();
    println!(
        "W1: {} training trees, vocabulary {}, timed trees 128..{} ({:.1} useful MFLOP/tree)",
        trees.len(),
        vocab.len(),
        128 + timed,
        flops / timed as f64 / 1e6
    );
    let budget = if args.quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    if args.blocks || args.layers || args.vertex {
        let phrases: Vec<Phrase> = trees
            .iter()
            .zip(&ids)
            .take(128 + timed)
            .map(|(t, i)| Phrase::from_tree(t, i))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| {
                eprintln!("{e}");
                std::process::exit(1)
            });
        let data = Data {
            vocab: vocab.len(),
            trees: &trees[..128 + timed],
            ids: &ids[..128 + timed],
            phrases: &phrases,
        };
        let (base, other) = match (args.blocks, args.vertex) {
            (true, true) => (Form::BlocksInline, Form::Blocks),
            (true, false) => (Form::Layers, Form::Blocks),
            (false, true) => (Form::Layers, Form::Vertex),
            (false, false) => (Form::Hand, Form::Layers),
        };
        compare(&data, &args.threads, timed, base, other);
        return;
    }
    let mut report = Report::new();
    println!(
        "{:>13} {:>8} {:>10} {:>9} {:>8} {:>8} {:>10} {:>8}",
        "impl", "threads", "trees/s", "GFLOP/s", "peak", "util", "bound", "of bound"
    );
    for &threads in &args.threads {
        let peak = sgemm_peak_gflops(threads, budget);
        let mut runs: Vec<(String, Option<Strategy>, usize)> = strategies()
            .into_iter()
            .map(|(name, s)| (name.to_string(), s, 1))
            .collect();
        if threads > 1 && args.split > 1 {
            for s in [Strategy::Depth, Strategy::Agenda] {
                runs.push((format!("{}/split", s.name()), Some(s), args.split));
            }
        }
        for (name, strategy, split) in runs {
            let base = name.split('/').next().unwrap_or(&name);
            if !args.only.is_empty() && !args.only.iter().any(|o| o == base || *o == name) {
                continue;
            }
            let data = (warm, warm_ids, measured, measured_ids);
            let result = with_threads(threads, || {
                time_run(vocab.len(), strategy, split, !args.no_pipeline, data)
            });
            let (secs, products, stats, host) = match result {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{name}: {e}");
                    std::process::exit(1)
                }
            };
            let rate = timed as f64 / secs;
            let gflops = flops / secs / 1e9;
            let bound = if args.no_bound {
                f64::NAN
            } else {
                timed as f64 / products.seconds(threads, budget)
            };
            println!(
                "{name:>13} {threads:>8} {rate:>10.1} {gflops:>9.2} {peak:>8.1} {:>7.1}% {bound:>10.1} {:>7.1}%",
                100.0 * gflops / peak,
                100.0 * rate / bound
            );
            if let (true, Some(stats)) = (args.stats, stats) {
                println!("last step of {name} at {threads} thread(s): {stats}");
            }
            let split_note = if split > 1 {
                format!(", each batch split into {split} graphs run side by side")
            } else {
                String::new()
            };
            report.add(
                "W1",
                base,
                threads,
                BATCH,
                "throughput",
                rate,
                "trees/s",
                peak,
                Some(gflops),
                &format!(
                    "{timed} trees, utilisation {:.3}, {:.3} of the GEMM-only bound ({} products, {} shapes){split_note}",
                    gflops / peak,
                    rate / bound,
                    products.calls(),
                    products.distinct()
                ),
            );
            if !args.no_bound {
                report.add_bound(bound);
            }
            if split > 1 {
                report.set_variant(&format!("split {split}"));
            }
            if let Some(h) = host {
                if args.stats {
                    println!("  host: {}", h.describe("tree"));
                }
                h.record(&mut report, "W1", base, threads, BATCH, peak, "tree");
            }
        }
    }
    let path = args.out.unwrap_or_else(default_results_path);
    if let Err(e) = report.append_jsonl(&path) {
        eprintln!("cannot write {}: {e}", path.display());
        std::process::exit(1);
    }
    println!(
        "appended {} results to {}",
        report.records().len(),
        path.display()
    );
}

/// Warm-up trees and ids, timed trees and ids.
type Split<'a> = (&'a [Tree], &'a [Vec<u32>], &'a [Tree], &'a [Vec<u32>]);

/// Trains from a fresh model on the warm-up trees, then times the timed
/// ones: (seconds, their products, the last step's plan statistics).
/// `split > 1` runs each batch as that many graphs side by side;
/// otherwise `pipelined` builds each step's graph during the previous step.
fn time_run(
    vocab: usize,
    strategy: Option<Strategy>,
    split: usize,
    pipelined: bool,
    (warm, warm_ids, timed, timed_ids): Split,
) -> Result<(f64, Products, Option<String>, Option<HostTime>), String> {
    let mut store = ParamStore::new();
    let model = model(&mut store, vocab, 1).map_err(|e| e.to_string())?;
    let mut opt = optimizer();
    let mut g = Graph::new();
    let mut exec = strategy.map(Executor::new);
    let mut parts = match strategy {
        Some(s) if split > 1 => Some(sheaf_sched::DataParallel::new(s, split)),
        _ => None,
    };
    let mut pipeline = (pipelined && parts.is_none()).then(Pipeline::new);
    // Every minibatch of `trees`, one step each.
    let mut steps = |store: &mut ParamStore, trees: &[Tree], ids: &[Vec<u32>]| {
        if let Some(p) = &mut pipeline {
            let exec = exec.as_mut();
            return train_steps_pipelined(&model, store, &mut opt, p, exec, trees, ids, BATCH);
        }
        for (chunk, ids) in trees.chunks(BATCH).zip(ids.chunks(BATCH)) {
            match &mut parts {
                None => train_step(&model, store, &mut opt, &mut g, exec.as_mut(), chunk, ids),
                Some(parts) => train_step_split(&model, store, &mut opt, parts, chunk, ids),
            }?;
        }
        Ok(())
    };
    steps(&mut store, warm, warm_ids)?;
    let start = Instant::now();
    let (run, products) = record_gemms(|| steps(&mut store, timed, timed_ids));
    let secs = start.elapsed().as_secs_f64();
    run?;
    // Host work: the last step's graph built again alone (timed), and the
    // executor's planning and bookkeeping of that step.
    let host = match (&exec, timed.len()) {
        (Some(e), n) if n > 0 => {
            let last = (n - 1) / BATCH * BATCH;
            let mut probe = Graph::new();
            let t0 = Instant::now();
            build_loss(&model, &mut probe, &timed[last..], &timed_ids[last..])?;
            let built = t0.elapsed().as_secs_f64();
            Some(HostTime::of_step(built, probe.len(), e.stats(), n - last))
        }
        _ => None,
    };
    let stats = exec.map(|e| e.stats().to_string());
    Ok((secs, products, stats, host))
}

/// The first 128 trees warm up, the rest are timed.
struct Data<'a> {
    vocab: usize,
    trees: &'a [Tree],
    ids: &'a [Vec<u32>],
    phrases: &'a [Phrase],
}

/// How a comparison run writes the model.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// By hand, every parameter read by hand ([`w1_hand`]).
    Hand,
    /// The SST example's model, from sheaf-nn layers.
    Layers,
    /// With blocks, compiled (cells as vertex functions).
    Blocks,
    /// With blocks, every `Function` run inline.
    BlocksInline,
    /// The SST example's model, its cells called as vertex functions.
    Vertex,
}

impl Form {
    fn name(self) -> &'static str {
        match self {
            Form::Hand => "hand-written",
            Form::Layers => "layers",
            Form::Blocks => "blocks",
            Form::BlocksInline => "blocks inline",
            Form::Vertex => "vertex",
        }
    }
}

/// Seconds to train on the timed trees (after the first 128) in `form`.
fn time_form(d: &Data, strategy: Strategy, form: Form) -> Result<f64, String> {
    let mut store = ParamStore::new();
    let mut model = model(&mut store, d.vocab, 1).map_err(|e| e.to_string())?;
    if let Form::Vertex = form {
        model = model.with_vertex_functions().map_err(|e| e.to_string())?;
    }
    let mut hand_store = ParamStore::new();
    let hand = HandTreeLstm::new(&mut hand_store, d.vocab, 1).map_err(|e| e.to_string())?;
    // Every form starts from the hand-written model's values.
    hand.copy_into(&hand_store, &model, &mut store);
    if let Form::Hand = form {
        store = hand_store;
    }
    let mut blocks = match form {
        Form::Blocks | Form::BlocksInline => Some(
            compile_training(&model)
                .map_err(|e| e.to_string())?
                .with_strategy(strategy)
                .inline_functions(matches!(form, Form::BlocksInline)),
        ),
        _ => None,
    };
    let (mut opt, mut g, mut exec) = (optimizer(), Graph::new(), Executor::new(strategy));
    let mut start = Instant::now();
    let batches = d.trees.chunks(BATCH).zip(d.ids.chunks(BATCH));
    for (k, ((chunk, ids), phrases)) in batches.zip(d.phrases.chunks(BATCH)).enumerate() {
        if k * BATCH == 128 {
            start = Instant::now();
        }
        let (st, op, ex) = (&mut store, &mut opt, Some(&mut exec));
        match (form, &mut blocks) {
            (Form::Hand, _) => w1_hand::train_step(&hand, st, op, &mut g, ex, chunk, ids),
            (Form::Blocks | Form::BlocksInline, Some(c)) => train_step_blocks(c, st, op, phrases),
            _ => train_step(&model, st, op, &mut g, ex, chunk, ids),
        }?;
    }
    Ok(start.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Alternating runs of `base` and `other` (three each), the median
/// throughputs and their ratio `other / base`.
fn compare(d: &Data, threads: &[usize], timed: usize, base: Form, other: Form) {
    println!(
        "{:>8} {:>8} {:>14} {:>14} {:>8}",
        "impl",
        "threads",
        format!("{} trees/s", base.name()),
        format!("{} trees/s", other.name()),
        "ratio"
    );
    for &t in threads {
        for strategy in [Strategy::Depth, Strategy::Agenda] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                let r = with_threads(t, || -> Result<(f64, f64), String> {
                    Ok((
                        time_form(d, strategy, base)?,
                        time_form(d, strategy, other)?,
                    ))
                });
                match r {
                    Ok((x, y)) => {
                        a.push(timed as f64 / x);
                        b.push(timed as f64 / y);
                    }
                    Err(e) => {
                        eprintln!("{}: {e}", strategy.name());
                        std::process::exit(1)
                    }
                }
            }
            let (x, y) = (median(a), median(b));
            println!(
                "{:>8} {t:>8} {x:>14.1} {y:>14.1} {:>8.3}",
                strategy.name(),
                y / x
            );
        }
    }
    // Host work per tree at a batch of 256 (the graph-written forms):
    // building, planning and the executor's bookkeeping of one step.
    if matches!((base, other), (Form::Layers, Form::Vertex)) {
        for strategy in [Strategy::Depth, Strategy::Agenda] {
            let probe = |form| with_threads(1, || host_at(d, strategy, form, HOST_BATCH));
            match (probe(base), probe(other)) {
                (Ok(a), Ok(b)) => println!(
                    "  host per tree at batch {HOST_BATCH}, {}: {} {:.1} µs ({}), {} {:.1} µs ({}): {:.2}x less ({:.2}x with the data movement)",
                    strategy.name(),
                    base.name(),
                    1e6 * a.total(),
                    a.describe("tree"),
                    other.name(),
                    1e6 * b.total(),
                    b.describe("tree"),
                    a.total() / b.total(),
                    (a.total() + a.moves) / (b.total() + b.moves)
                ),
                (Err(e), _) | (_, Err(e)) => eprintln!("host probe: {e}"),
            }
        }
    }
}

/// Trees per step of the host-time probe.
const HOST_BATCH: usize = 256;

/// One training step's host work per tree on `batch` trees in `form`
/// (after two warm-up steps): the graph built alone (timed), then the
/// step's planning and bookkeeping; the median of three.
fn host_at(d: &Data, strategy: Strategy, form: Form, batch: usize) -> Result<HostTime, String> {
    let mut store = ParamStore::new();
    let mut model = model(&mut store, d.vocab, 1).map_err(|e| e.to_string())?;
    if let Form::Vertex = form {
        model = model.with_vertex_functions().map_err(|e| e.to_string())?;
    }
    let n = batch.min(d.trees.len());
    let (trees, ids) = (&d.trees[..n], &d.ids[..n]);
    let mut exec = Executor::new(strategy);
    let mut runs = Vec::new();
    for _ in 0..5 {
        let mut g = Graph::new();
        let t0 = Instant::now();
        let loss = build_loss(&model, &mut g, trees, ids)?;
        let built = t0.elapsed().as_secs_f64();
        exec.forward(&mut g, &store, loss)
            .map_err(|e| e.to_string())?;
        exec.backward(&mut g, &store, loss)
            .map_err(|e| e.to_string())?;
        store.zero_grads().map_err(|e| e.to_string())?;
        runs.push(HostTime::of_step(built, g.len(), exec.stats(), n));
    }
    runs.drain(..2);
    runs.sort_by(|a, b| a.total().total_cmp(&b.total()));
    Ok(runs[runs.len() / 2])
}
