//! `bench-w5 [--quick]`: training throughput of the weave model on ESOL
//! (molecules/s, useful GFLOP/s, utilisation against the same-run sgemm
//! peak) for sequential, depth and agenda and for the hand-batched
//! baseline (`sheaf_benches::w5_hand`, DGL/PyG style), with the ratios
//! depth/hand and agenda/hand, and the GEMM-only bound: the molecules/s
//! the run's products alone would allow.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use sheaf_autodiff::ParamStore;
use sheaf_benches::bound::{record_gemms, Products};
use sheaf_benches::measure::{interleaved, median, with_threads, Budget};
use sheaf_benches::peak::sgemm_peak_gflops;
use sheaf_benches::report::{default_results_path, Report};
use sheaf_benches::w5::{
    model, optimizer, strategies, train_flops, train_step, train_step_vertex, training_set,
    vertex_model, BATCH,
};
use sheaf_benches::w5_hand;
use sheaf_examples::molecules::{default_path, Molecule};
use sheaf_sched::Strategy;

#[derive(Parser, Debug)]
#[command(about = "W5: weave modules on ESOL, training molecules/s per strategy")]
struct Args {
    /// 256 timed molecules instead of the whole training set (and a
    /// shorter peak measurement).
    #[arg(long)]
    quick: bool,
    /// Thread counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Where to append the JSON lines.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the plan statistics of each run's last update.
    #[arg(long)]
    stats: bool,
    /// Skip the GEMM-only bound (its timing would swamp a profile).
    #[arg(long)]
    no_bound: bool,
    /// The molecules [default: the repository's data/molecules/esol.jsonl].
    #[arg(long)]
    data: Option<PathBuf>,
}

/// Updates of warm-up before the timed ones.
const WARM_UPDATES: usize = 2;

fn main() {
    sheaf_examples::logging::init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("bench-w5: {e}");
        std::process::exit(1);
    }
}

/// Seconds `step` takes over the updates of `timed` after those of
/// `warm`, and the timed updates' products: what every row times.
fn time_updates(
    warm: &[Molecule],
    timed: &[Molecule],
    mut step: impl FnMut(&[Molecule]) -> Result<(), String>,
) -> Result<(f64, Products), String> {
    for chunk in warm.chunks(BATCH) {
        step(chunk)?;
    }
    let start = Instant::now();
    let (done, products) = record_gemms(|| timed.chunks(BATCH).try_for_each(&mut step));
    let secs = start.elapsed().as_secs_f64();
    done?;
    Ok((secs, products))
}

/// Seconds to train on `timed` after `warm`, the timed updates' products
/// and the last update's plan statistics.
fn time_run(
    strategy: Strategy,
    atom_in: usize,
    warm: &[Molecule],
    timed: &[Molecule],
) -> Result<(f64, Products, String), String> {
    let mut store = ParamStore::new();
    let mut c = model(&mut store, atom_in, strategy, 1)?;
    let mut opt = optimizer();
    let (secs, products) = time_updates(warm, timed, |chunk| {
        train_step(&mut c, &mut store, &mut opt, chunk).map(drop)
    })?;
    Ok((secs, products, c.stats().to_string()))
}

/// [`time_run`] for the model written with vertex functions.
fn time_vertex(
    strategy: Strategy,
    atom_in: usize,
    warm: &[Molecule],
    timed: &[Molecule],
) -> Result<(f64, Products, String), String> {
    let mut store = ParamStore::new();
    let mut m = vertex_model(&mut store, atom_in, strategy, 1)?;
    let mut opt = optimizer();
    let (secs, products) = time_updates(warm, timed, |chunk| {
        train_step_vertex(&mut m, &mut store, &mut opt, chunk).map(drop)
    })?;
    Ok((secs, products, m.stats().to_string()))
}

/// [`time_run`] for the hand-batched step (the same parameter values,
/// warm-up and timed molecules).
fn time_hand(
    atom_in: usize,
    warm: &[Molecule],
    timed: &[Molecule],
) -> Result<(f64, Products), String> {
    let mut store = ParamStore::new();
    let mut hand = w5_hand::model(&mut store, atom_in, 1)?;
    time_updates(warm, timed, |chunk| hand.step(&mut store, chunk).map(drop))
}

/// One vertex form's speed against the hand-batched step, per round of
/// [`paired_ratios`]: the median and the range.
struct Paired {
    median: f64,
    low: f64,
    high: f64,
}

impl std::fmt::Display for Paired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3} ({:.3}-{:.3})", self.median, self.low, self.high)
    }
}

/// The vertex forms' speed against the hand-batched step with the three
/// timed in turn ([`interleaved`]): per form (depth, agenda) the median
/// of the rounds' ratios, and their range.
fn paired_ratios(
    atom_in: usize,
    warm: &[Molecule],
    timed: &[Molecule],
    rounds: usize,
) -> Result<[Paired; 2], String> {
    let (mut hs, mut ds, mut as_) = (ParamStore::new(), ParamStore::new(), ParamStore::new());
    let mut hand = w5_hand::model(&mut hs, atom_in, 1)?;
    let mut depth = vertex_model(&mut ds, atom_in, Strategy::Depth, 1)?;
    let mut agenda = vertex_model(&mut as_, atom_in, Strategy::Agenda, 1)?;
    let (mut dopt, mut aopt) = (optimizer(), optimizer());
    let warm_steps = |run: &mut dyn FnMut(&[Molecule]) -> Result<(), String>| {
        warm.chunks(BATCH).try_for_each(run)
    };
    warm_steps(&mut |c| hand.step(&mut hs, c).map(drop))?;
    warm_steps(&mut |c| train_step_vertex(&mut depth, &mut ds, &mut dopt, c).map(drop))?;
    warm_steps(&mut |c| train_step_vertex(&mut agenda, &mut as_, &mut aopt, c).map(drop))?;
    let chunks: Vec<&[Molecule]> = timed.chunks(BATCH).collect();
    let secs = interleaved(
        rounds,
        chunks.len(),
        &mut [
            &mut |s| hand.step(&mut hs, chunks[s]).map(drop),
            &mut |s| train_step_vertex(&mut depth, &mut ds, &mut dopt, chunks[s]).map(drop),
            &mut |s| train_step_vertex(&mut agenda, &mut as_, &mut aopt, chunks[s]).map(drop),
        ],
    )?;
    let ratio = |form: usize| {
        let r: Vec<f64> = secs[0]
            .iter()
            .zip(&secs[form])
            .map(|(h, v)| h / v)
            .collect();
        let (low, high) = r
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        Paired {
            median: median(&r),
            low,
            high,
        }
    };
    Ok([ratio(1), ratio(2)])
}

/// What every row of a run shares.
struct Setup {
    timed_n: usize,
    /// Useful FLOPs of the timed molecules.
    flops: f64,
    budget: Budget,
    bound: bool,
}

/// Prints one row (`secs` for the timed molecules at `threads` threads,
/// their `products`) and adds its record; returns the molecules/s.
fn row(
    report: &mut Report,
    s: &Setup,
    (name, variant): (&str, &str),
    (threads, peak): (usize, f64),
    secs: f64,
    products: &Products,
) -> f64 {
    let timed_n = s.timed_n;
    let rate = timed_n as f64 / secs;
    let gflops = s.flops / secs / 1e9;
    let bound = s
        .bound
        .then(|| timed_n as f64 / products.seconds(threads, s.budget));
    let label = match variant {
        "vertex" => format!("{name}+vf"),
        _ => name.to_string(),
    };
    println!(
        "{label:>12} {threads:>8} {rate:>12.1} {gflops:>9.2} {peak:>8.1} {:>7.1}% {:>10} {:>8}",
        100.0 * gflops / peak,
        bound.map_or("-".into(), |b| format!("{b:.1}")),
        bound.map_or("-".into(), |b| format!("{:.1}%", 100.0 * rate / b)),
    );
    report.add(
        "W5",
        name,
        threads,
        BATCH,
        "throughput",
        rate,
        "molecules/s",
        peak,
        Some(gflops),
        &format!(
            "{timed_n} molecules, utilisation {:.3}{}",
            gflops / peak,
            bound.map_or(String::new(), |b| format!(
                ", {:.3} of the GEMM-only bound ({} products, {} shapes)",
                rate / b,
                products.calls(),
                products.distinct()
            ))
        ),
    );
    report.set_variant(variant);
    if let Some(b) = bound {
        report.add_bound(b);
    }
    rate
}

fn run(args: Args) -> Result<(), String> {
    if args.threads.contains(&0) {
        return Err("--threads takes positive numbers".into());
    }
    let path = args.data.clone().unwrap_or_else(default_path);
    let (train, atom_in) = training_set(&path)?;
    let warm_n = WARM_UPDATES * BATCH;
    let timed_n = if args.quick {
        8 * BATCH
    } else {
        (train.len() - warm_n.min(train.len())) / BATCH * BATCH
    };
    if timed_n == 0 || warm_n + timed_n > train.len() {
        return Err(format!(
            "{}: {} training molecules, too few for {warm_n} warm-up and {timed_n} timed",
            path.display(),
            train.len()
        ));
    }
    let (warm, timed) = (&train[..warm_n], &train[warm_n..warm_n + timed_n]);
    let flops: f64 = timed.iter().map(|m| train_flops(m, atom_in)).sum();
    println!(
        "W5: {} training molecules, {atom_in} atom features, {timed_n} timed after {warm_n} ({:.2} useful MFLOP/molecule)",
        train.len(),
        flops / timed_n as f64 / 1e6
    );
    let budget = if args.quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    let setup = Setup {
        timed_n,
        flops,
        budget,
        bound: !args.no_bound,
    };
    let mut report = Report::new();
    println!(
        "{:>12} {:>8} {:>12} {:>9} {:>8} {:>8} {:>10} {:>8}",
        "impl", "threads", "molecules/s", "GFLOP/s", "peak", "util", "bound", "of bound"
    );
    for &threads in &args.threads {
        let peak = sgemm_peak_gflops(threads, budget);
        let mut rates = Vec::new();
        for (name, strategy) in strategies() {
            let (secs, products, stats) =
                with_threads(threads, || time_run(strategy, atom_in, warm, timed))
                    .map_err(|e| format!("{name} at {threads} thread(s): {e}"))?;
            let rate = row(
                &mut report,
                &setup,
                (name, "inline"),
                (threads, peak),
                secs,
                &products,
            );
            rates.push((name.to_string(), rate));
            if args.stats {
                println!("  last update of {name} at {threads} thread(s): {stats}");
            }
        }
        // The same model with vertex functions (the blocks' products are
        // the bound of both forms: the same layers on the same rows).
        for (name, strategy) in strategies().into_iter().skip(1) {
            let (secs, products, stats) =
                with_threads(threads, || time_vertex(strategy, atom_in, warm, timed))
                    .map_err(|e| format!("{name} (vertex) at {threads} thread(s): {e}"))?;
            let rate = row(
                &mut report,
                &setup,
                (name, "vertex"),
                (threads, peak),
                secs,
                &products,
            );
            rates.push((format!("{name}+vf"), rate));
            if args.stats {
                println!("  last update of {name} (vertex) at {threads} thread(s): {stats}");
            }
        }
        let (secs, products) = with_threads(threads, || time_hand(atom_in, warm, timed))
            .map_err(|e| format!("hand-batched at {threads} thread(s): {e}"))?;
        let hand = row(
            &mut report,
            &setup,
            ("hand-batched", ""),
            (threads, peak),
            secs,
            &products,
        );
        let ratio = |name: &str| {
            rates
                .iter()
                .find(|(n, _)| n == name)
                .map_or("-".into(), |(_, r)| format!("{:.3}", r / hand))
        };
        let of = |a: &str, b: &str| {
            let get = |n: &str| rates.iter().find(|(x, _)| x == n).map(|(_, r)| *r);
            get(a)
                .zip(get(b))
                .map_or("-".into(), |(x, y)| format!("{:.2}", x / y))
        };
        println!(
            "  at {threads} thread(s): depth/hand {}, agenda/hand {}, depth+vf/hand {}, agenda+vf/hand {}; vertex/inline: depth {}, agenda {}",
            ratio("depth"),
            ratio("agenda"),
            ratio("depth+vf"),
            ratio("agenda+vf"),
            of("depth+vf", "depth"),
            of("agenda+vf", "agenda"),
        );
        let rounds = if args.quick { 3 } else { 7 };
        let [depth, agenda] = with_threads(threads, || paired_ratios(atom_in, warm, timed, rounds))
            .map_err(|e| format!("interleaved runs at {threads} thread(s): {e}"))?;
        println!(
            "  interleaved ({rounds} rounds, each update by each form in turn): depth+vf/hand {depth}, agenda+vf/hand {agenda}"
        );
        // The steadier figure of the two (forms a second apart differ by
        // this host's drift), recorded beside the throughputs.
        for (name, p) in [("depth", depth), ("agenda", agenda)] {
            report.add(
                "W5",
                name,
                threads,
                BATCH,
                "ratio_to_hand",
                p.median,
                "x",
                peak,
                None,
                &format!(
                    "vertex form's speed over the hand-batched step's, median of {rounds} interleaved rounds (range {:.3}-{:.3})",
                    p.low, p.high
                ),
            );
            report.set_variant("vertex");
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
