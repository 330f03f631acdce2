//! `cargo xtask bench W6 [--quick]`: the "sum of a string" 2-layer GRU
//! (hidden 32, batch 32 or `--batch`, Adam), training strings/s for length bucketing
//! (spacing 1.5, `--spacing`) and agenda batching over three length mixes, with the
//! padding fraction and a check that the bucketed (padded, masked) loss
//! equals the unpadded sequential one; each again with the GRU steps as
//! vertex functions (variant `<mix>, vertex`), and agenda with each GRU
//! layer one scan per string (variant `<mix>, scan`), and the ratios.

use std::time::Instant;

use clap::Parser;
use sheaf_autodiff::{Adam, Optimizer, ParamStore};
use sheaf_benches::bound::{record_gemms, Products};
use sheaf_benches::measure::{with_threads, Budget};
use sheaf_benches::peak::sgemm_peak_gflops;
use sheaf_benches::report::{default_results_path, Report};
use sheaf_benches::w6::{train_flops, MIXES};
use sheaf_examples::sumstr::{generate, Example, Mode, Model, Runner};
use sheaf_sched::Strategy;

#[derive(Parser, Debug)]
#[command(about = "W6: sum of a string, bucketing vs. agenda")]
struct Args {
    /// 512 timed strings per run instead of 2048.
    #[arg(long)]
    quick: bool,
    /// Strings per update.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Bucket spacing.
    #[arg(long, default_value_t = 1.5)]
    spacing: f64,
    /// Where to append the JSON lines.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Thread counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    threads: Vec<usize>,
    /// Skip the GEMM-only bound (its timing would swamp a profile).
    #[arg(long)]
    no_bound: bool,
}

const HIDDEN: usize = 32;
const WARM: usize = 128;

/// Seconds to train on `timed` after `warm`, the padding fraction, and the
/// timed run's products.
/// How the model is written.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    Inline,
    /// Each GRU step one call of a vertex function.
    Vertex,
    /// Each GRU layer one scan per string.
    Scan,
}

fn time(
    mode: Mode,
    form: Form,
    batch: usize,
    warm: &[Example],
    timed: &[Example],
) -> Result<(f64, f64, Products), String> {
    let mut store = ParamStore::new();
    let mut model = Model::new(&mut store, HIDDEN, 1).map_err(|e| e.to_string())?;
    model = match form {
        Form::Inline => model,
        Form::Vertex => model.with_vertex_functions().map_err(|e| e.to_string())?,
        Form::Scan => model.with_scans().map_err(|e| e.to_string())?,
    };
    let mut opt = Optimizer::adam(Adam {
        lr: 0.01,
        ..Adam::default()
    });
    let mut runner = Runner::new(mode).map_err(|e| e.to_string())?;
    let mut go = |data: &[Example], runner: &mut Runner| -> Result<(), String> {
        for chunk in data.chunks(batch) {
            let batch: Vec<&Example> = chunk.iter().collect();
            runner
                .run(&model, &store, &batch)
                .map_err(|e| e.to_string())?;
            opt.step(&mut store).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    go(warm, &mut runner)?;
    runner.steps = (0, 0);
    let start = Instant::now();
    let (run, products) = record_gemms(|| go(timed, &mut runner));
    let secs = start.elapsed().as_secs_f64();
    run?;
    Ok((
        secs,
        runner.steps.0 as f64 / runner.steps.1.max(1) as f64,
        products,
    ))
}

/// Relative difference of the bucketed and the unpadded sequential loss
/// of one batch (same initial parameters).
fn loss_gap(spacing: f64, batch: &[Example]) -> Result<f64, String> {
    let mut losses = Vec::new();
    for mode in [Mode::Bucket(spacing), Mode::Dynamic(Strategy::Sequential)] {
        let mut store = ParamStore::new();
        let model = Model::new(&mut store, HIDDEN, 1).map_err(|e| e.to_string())?;
        let refs: Vec<&Example> = batch.iter().collect();
        let mut r = Runner::new(mode).map_err(|e| e.to_string())?;
        losses.push(f64::from(
            r.run(&model, &store, &refs).map_err(|e| e.to_string())?,
        ));
    }
    Ok((losses[0] - losses[1]).abs() / losses[1].abs().max(1e-12))
}

fn main() {
    sheaf_examples::logging::init();
    let args = Args::parse();
    if args.batch == 0 {
        eprintln!("--batch must be at least 1");
        std::process::exit(2);
    }
    let n = if args.quick { 512 } else { 2048 };
    let budget = if args.quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    let mut report = Report::new();
    for &threads in &args.threads {
        run_threads(&args, threads, n, budget, &mut report);
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

fn run_threads(args: &Args, threads: usize, n: usize, budget: Budget, report: &mut Report) {
    let peak = sgemm_peak_gflops(threads, budget);
    println!("W6: sum of a string, 2-layer GRU H {HIDDEN}, batch {}, {n} timed strings, {threads} thread(s), sgemm peak {peak:.1} GFLOP/s", args.batch);
    println!(
        "{:>11} {:>8} {:>10} {:>9} {:>8} {:>10} {:>10} {:>9}",
        "mix", "impl", "strings/s", "GFLOP/s", "padding", "loss gap", "bound", "of bound"
    );
    for (mix, lo, hi) in MIXES {
        let data = generate(WARM + n, 7, lo, hi);
        let (warm, timed) = data.split_at(WARM);
        let flops: f64 = timed.iter().map(|e| train_flops(e, HIDDEN)).sum();
        let gap =
            loss_gap(args.spacing, &timed[..args.batch.min(timed.len())]).unwrap_or_else(|e| {
                eprintln!("{e}");
                std::process::exit(1)
            });
        let mut rates = Vec::new();
        for (name, mode, form) in [
            ("bucket", Mode::Bucket(args.spacing), Form::Inline),
            ("agenda", Mode::Dynamic(Strategy::Agenda), Form::Inline),
            ("bucket", Mode::Bucket(args.spacing), Form::Vertex),
            ("agenda", Mode::Dynamic(Strategy::Agenda), Form::Vertex),
            ("agenda", Mode::Dynamic(Strategy::Agenda), Form::Scan),
        ] {
            let variant = match form {
                Form::Inline => mix.to_string(),
                Form::Vertex => format!("{mix}, vertex"),
                Form::Scan => format!("{mix}, scan"),
            };
            let (secs, pad, products) =
                with_threads(threads, || time(mode, form, args.batch, warm, timed)).unwrap_or_else(
                    |e| {
                        eprintln!("{name}: {e}");
                        std::process::exit(1)
                    },
                );
            let rate = n as f64 / secs;
            let bound = (!args.no_bound).then(|| n as f64 / products.seconds(threads, budget));
            let gflops = flops / secs / 1e9;
            let gap_note = if name == "bucket" {
                format!("{gap:.1e}")
            } else {
                "-".into()
            };
            let shown = match form {
                Form::Inline => name.to_string(),
                Form::Vertex => format!("{name}/v"),
                Form::Scan => format!("{name}/s"),
            };
            rates.push((name, form, rate));
            println!(
                "{mix:>11} {shown:>8} {rate:>10.1} {gflops:>9.2} {:>7.1}% {gap_note:>10} {:>10} {:>9}",
                100.0 * pad,
                bound.map_or("-".into(), |b| format!("{b:.1}")),
                bound.map_or("-".into(), |b| format!("{:.1}%", 100.0 * rate / b)),
            );
            let notes = format!(
                "lengths {lo}-{hi}, spacing {}, padding fraction {pad:.4}, bucketed vs unpadded loss rel. diff {gap:.2e}",
                args.spacing
            );
            report.add(
                "W6",
                name,
                threads,
                args.batch,
                "throughput",
                rate,
                "strings/s",
                peak,
                Some(gflops),
                &notes,
            );
            if let Some(bound) = bound {
                report.add_bound(bound);
            }
            report.set_variant(&variant);
            if name == "bucket" {
                report.add(
                    "W6",
                    name,
                    threads,
                    args.batch,
                    "padding_fraction",
                    pad,
                    "fraction",
                    peak,
                    None,
                    &notes,
                );
                report.set_variant(&variant);
            }
        }
        for name in ["bucket", "agenda"] {
            let of = |f: Form| rates.iter().find(|r| r.0 == name && r.1 == f).map(|r| r.2);
            if let (Some(v), Some(i)) = (of(Form::Vertex), of(Form::Inline)) {
                println!("{mix:>11} {name:>8} vertex / inline: {:.3}", v / i);
            }
            if let (Some(v), Some(i)) = (of(Form::Scan), of(Form::Inline)) {
                println!("{mix:>11} {name:>8} scan / inline: {:.3}", v / i);
            }
        }
    }
}
