//! The GPU benchmarks of `shared/BENCHMARKS.md` ("GPU"): the same-run
//! cuBLAS sgemm peak (fp32, 4096³), W1 (Tree-LSTM training on SST, batch
//! 64 and 256, agenda and depth, cells inlined and as vertex functions) and W3 (Tree-LSTM inference on random
//! 128-leaf trees, state 256 and 1024, batch 1 / 32 / 256 / 1024). Per
//! step it reports the host time (building the graph, planning) apart from
//! the rest (launching and waiting for the device), and the kernel launches.
//! Figures are absolute for the named GPU.
//!
//! Needs `--features cuda` and a CUDA device: `cargo xtask bench-gpu`.
//! Reads `data/sst/train.txt` under the working directory (or the
//! repository the binary was built in).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use sheaf_autodiff::{Graph, ParamStore, Sequential};
use sheaf_benches::report::{default_results_path, Report};
use sheaf_benches::w1::{model, optimizer, train_flops, train_step};
use sheaf_benches::w3;
use sheaf_examples::sst::{read_trees, Vocab};
use sheaf_kernels_cuda::{CudaKernels, Operand};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::{CudaBackend, Device};

#[derive(Parser)]
#[command(about = "GPU benchmarks: sgemm peak, W1 and W3 on a CUDA device")]
struct Args {
    /// The CUDA device.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Fewer trees per figure.
    #[arg(long)]
    quick: bool,
    /// Results file [default: target/bench/results.jsonl].
    #[arg(long)]
    out: Option<PathBuf>,
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("bench-gpu: {e}");
    std::process::exit(1)
}

fn main() {
    sheaf_examples::logging::init();
    let args = Args::parse();
    let device = Device::Cuda(args.device);
    let backend = CudaBackend::global(args.device).unwrap_or_else(|e| fail(e));
    let k = backend.kernels();
    let name = k.device_name();
    let peak = sgemm_peak(k).unwrap_or_else(|e| fail(e));
    println!("{name}: cuBLAS sgemm fp32 4096^3 {:.1} TFLOP/s", peak / 1e3);
    let mut report = Report::new();
    report.add(
        "peak",
        "cublas",
        1,
        1,
        "sgemm",
        peak,
        "GFLOP/s",
        peak,
        Some(peak),
        "fp32 4096^3, same run",
    );
    report.set_device(&name);
    // A failing workload still leaves the other's figures (and fails the
    // run at the end).
    let mut failed = false;
    if let Err(e) = w1(&mut report, device, k, peak, &name, args.quick) {
        eprintln!("bench-gpu: W1: {e}");
        failed = true;
    }
    if let Err(e) = w3_infer(&mut report, device, k, peak, &name, args.quick) {
        eprintln!("bench-gpu: W3: {e}");
        failed = true;
    }
    let path = args.out.unwrap_or_else(default_results_path);
    report
        .append_jsonl(&path)
        .unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
    println!(
        "appended {} results to {}",
        report.records().len(),
        path.display()
    );
    if failed {
        std::process::exit(1);
    }
}

/// GFLOP/s of one 4096³ fp32 product, best of a few.
fn sgemm_peak(k: &CudaKernels) -> Result<f64, String> {
    const N: usize = 4096;
    let err = |e: sheaf_kernels_cuda::CudaError| e.to_string();
    let a = k.upload(&vec![0.5f32; N * N]).map_err(err)?;
    let b = k.upload(&vec![0.25f32; N * N]).map_err(err)?;
    let mut c = k.alloc_zeros::<f32>(N * N).map_err(err)?;
    let mut best = f64::INFINITY;
    for rep in 0..6 {
        let t = Instant::now();
        let (av, bv) = (a.as_view(), b.as_view());
        let op = |data| Operand {
            data,
            transposed: false,
            ld: N,
        };
        k.sgemm(N, N, N, 1.0, op(&av), op(&bv), 0.0, &mut c.as_view_mut(), N)
            .map_err(err)?;
        k.check().map_err(err)?;
        if rep > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    Ok(2.0 * (N as f64).powi(3) / best / 1e9)
}

fn sst_path() -> PathBuf {
    let local = Path::new("data/sst/train.txt");
    if local.exists() {
        return local.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sst/train.txt")
}

/// W1 training on the device: trees/s, and per step the host time (graph
/// building and planning), the rest, and the kernel launches.
fn w1(
    report: &mut Report,
    device: Device,
    k: &CudaKernels,
    peak: f64,
    name: &str,
    quick: bool,
) -> Result<(), String> {
    let trees = read_trees(&sst_path()).map_err(|e| e.to_string())?;
    let vocab = Vocab::from_trees(&trees);
    let ids: Vec<Vec<u32>> = trees.iter().map(|t| vocab.encode(t)).collect();
    let timed = if quick { 1024 } else { 4096 };
    let warm = 256;
    println!(
        "{:>9} {:>6} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "W1", "batch", "trees/s", "build ms", "plan ms", "rest ms", "launches"
    );
    // Inlined cells, then the cells called as vertex functions (two calls
    // per tree node, no loss sum per tree: fewer nodes and launches).
    for (batch, vertex) in [(64, false), (256, false), (64, true), (256, true)] {
        for strategy in [Strategy::Agenda, Strategy::Depth] {
            let mut store = ParamStore::new();
            let mut m = model(&mut store, vocab.len(), 1).map_err(|e| e.to_string())?;
            if vertex {
                m = m.with_vertex_functions().map_err(|e| e.to_string())?;
            }
            let form = match vertex {
                false => strategy.name().to_string(),
                true => format!("{}+vf", strategy.name()),
            };
            store.to_device(device).map_err(|e| e.to_string())?;
            let mut opt = optimizer();
            let mut g = Graph::new();
            let mut exec = Executor::on(strategy, device).map_err(|e| e.to_string())?;
            let (mut build, mut plan, mut launches, mut steps) = (0.0, 0.0, 0u64, 0usize);
            let mut last_kernels = String::new();
            let mut start = Instant::now();
            let (mut done, mut flops) = (0usize, 0.0);
            for (i, (chunk, cids)) in trees.chunks(batch).zip(ids.chunks(batch)).enumerate() {
                if i * batch == warm {
                    k.check().map_err(|e| e.to_string())?;
                    start = Instant::now();
                }
                if i * batch >= warm + timed {
                    break;
                }
                let (l0, names0) = (k.launches(), k.launches_by_name());
                // Graph building alone, timed on a throwaway graph of the
                // same trees (train_step builds its own).
                let tb = Instant::now();
                let mut probe = Graph::new();
                for (t, tid) in chunk.iter().zip(cids) {
                    m.tree_loss(&mut probe, t, tid).map_err(|e| e.to_string())?;
                }
                let built = tb.elapsed().as_secs_f64();
                drop(probe);
                train_step(
                    &m,
                    &mut store,
                    &mut opt,
                    &mut g,
                    Some(&mut exec),
                    chunk,
                    cids,
                )?;
                if i * batch >= warm {
                    build += built;
                    plan += exec.stats().planning.as_secs_f64();
                    launches += k.launches() - l0;
                    let st = exec.stats();
                    last_kernels = format!(
                        "executor: ops {:.2} ms, moving data {:.2} ms, bookkeeping {:.2} ms; {}",
                        1e3 * st.op_calls.as_secs_f64(),
                        1e3 * st.moves.as_secs_f64(),
                        1e3 * st.bookkeeping().as_secs_f64(),
                        launch_diff(&names0, &k.launches_by_name())
                    );
                    steps += 1;
                    done += chunk.len();
                    flops += chunk.iter().map(train_flops).sum::<f64>();
                }
            }
            k.check().map_err(|e| e.to_string())?;
            // The probe graphs (timing the build alone) are extra work:
            // their time comes off the wall clock, and stands for the
            // step's own build.
            let secs = start.elapsed().as_secs_f64() - build;
            let rate = done as f64 / secs;
            let per = |x: f64| 1e3 * x / steps.max(1) as f64;
            let rest = secs - build - plan;
            println!(
                "{form:>9} {batch:>6} {rate:>10.1} {:>10.2} {:>10.2} {:>10.2} {:>9}   {}",
                per(build),
                per(plan),
                per(rest),
                launches / steps.max(1) as u64,
                top_launches(&exec)
            );
            println!("{:>9} kernels of the last step: {last_kernels}", "");
            let gflops = flops / secs / 1e9;
            report.add(
                "W1",
                strategy.name(),
                1,
                batch,
                "throughput",
                rate,
                "trees/s",
                peak,
                Some(gflops),
                &format!(
                    "{done} trees on {name}; per step: build {:.2} ms, plan {:.2} ms, rest {:.2} ms, {} launches",
                    per(build),
                    per(plan),
                    per(rest),
                    launches / steps.max(1) as u64
                ),
            );
            if vertex {
                report.set_variant("vertex");
            }
            report.set_device(name);
        }
    }
    Ok(())
}

/// The launches between two [`CudaKernels::launches_by_name`] snapshots,
/// most first, as `kernel n (µs per call), ...`, after the host time all
/// their driver calls took.
fn launch_diff(
    before: &[(&'static str, u64, Duration)],
    after: &[(&'static str, u64, Duration)],
) -> String {
    let mut d: Vec<(&str, u64, Duration)> = after
        .iter()
        .map(|&(name, n, t)| {
            let (n0, t0) = before
                .iter()
                .find(|b| b.0 == name)
                .map_or((0, Duration::ZERO), |b| (b.1, b.2));
            (name, n - n0, t.saturating_sub(t0))
        })
        .filter(|&(_, n, _)| n > 0)
        .collect();
    d.sort_by_key(|&(_, n, _)| std::cmp::Reverse(n));
    let total: Duration = d.iter().map(|e| e.2).sum();
    let each = d
        .iter()
        .map(|(name, n, t)| format!("{name} {n} ({:.1})", 1e6 * t.as_secs_f64() / *n as f64))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "driver calls {:.2} ms on the host; {each}",
        1e3 * total.as_secs_f64()
    )
}

/// The ops with the most launches in the executor's last step, as
/// `op n, op n, ...` (where a launch-bound step goes).
fn top_launches(exec: &Executor) -> String {
    let mut ops: Vec<_> = exec.stats().launches_per_op.iter().collect();
    ops.sort_by(|a, b| b.1.cmp(a.1));
    ops.iter()
        .take(6)
        .map(|(op, n)| format!("{op} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// W3 inference on the device: ms/tree at state 256 and 1024 and batch 1,
/// 32, 256, 1024, random shapes.
fn w3_infer(
    report: &mut Report,
    device: Device,
    k: &CudaKernels,
    peak: f64,
    name: &str,
    quick: bool,
) -> Result<(), String> {
    println!(
        "{:>10} {:>6} {:>6} {:>10} {:>9}",
        "W3", "state", "batch", "ms/tree", "launches"
    );
    for hidden in [256, 1024] {
        let mut store = ParamStore::new();
        let m = w3::Model::new(&mut store, hidden, 1)?;
        store.to_device(device).map_err(|e| e.to_string())?;
        let mut exec = Executor::on(Strategy::Agenda, device).map_err(|e| e.to_string())?;
        // Inference: nothing kept for a backward, as bench-w3.
        exec.set_inference(true);
        let mut g = Graph::new();
        let cells = w3::VertexCells::new(&m)?;
        // Fold's speedup ratio needs one tree at a time, node by node, on
        // the device: the sequential executor at batch 1.
        let sequential = {
            let seq = Sequential::on(device).map_err(|e| e.to_string())?;
            let trees = w3::trees(if quick { 4 } else { 16 } + 1, false, 7);
            let mut run = |t: &w3::RandomTree| -> Result<(), String> {
                g.clear();
                let root = w3::build_tree(&mut g, &m, t)?;
                seq.forward(&mut g, &store, root)
                    .map(drop)
                    .map_err(|e| format!("W3 sequential: {e}"))
            };
            run(&trees[0])?;
            k.check().map_err(|e| e.to_string())?;
            let (l0, t0) = (k.launches(), Instant::now());
            for t in &trees[1..] {
                run(t)?;
            }
            k.check().map_err(|e| e.to_string())?;
            let n = trees.len() - 1;
            let ms = 1e3 * t0.elapsed().as_secs_f64() / n as f64;
            let calls = (k.launches() - l0) / n as u64;
            println!(
                "{:>10} {hidden:>6} {:>6} {ms:>10.3} {calls:>9}",
                "sequential", 1
            );
            report.add(
                "W3",
                "sequential",
                1,
                1,
                "latency",
                ms,
                "ms/tree",
                peak,
                None,
                &format!(
                    "{n} random 128-leaf trees one at a time on {name}, {calls} launches per tree"
                ),
            );
            report.set_variant(&format!("state {hidden}"));
            report.set_device(name);
            ms
        };
        // Inlined cells, then the cells as vertex functions (fewer graph
        // nodes: less host time per tree).
        for (form, vf) in [("agenda", None), ("agenda+vf", Some(&cells))] {
            for batch in [1, 32, 256, 1024] {
                let total = if quick {
                    batch.max(64)
                } else {
                    (4 * batch).max(256)
                };
                let trees = w3::trees(total + batch, false, 7);
                let (warm, timed) = trees.split_at(batch);
                w3::infer_graph_with(&mut g, Some(&mut exec), &store, &m, vf, warm)?;
                k.check().map_err(|e| e.to_string())?;
                let (l0, names0) = (k.launches(), k.launches_by_name());
                let t = Instant::now();
                for chunk in timed.chunks(batch) {
                    w3::infer_graph_with(&mut g, Some(&mut exec), &store, &m, vf, chunk)?;
                }
                k.check().map_err(|e| e.to_string())?;
                let secs = t.elapsed().as_secs_f64();
                let ms = 1e3 * secs / timed.len() as f64;
                let calls = (k.launches() - l0) / timed.len().div_ceil(batch) as u64;
                let flops: f64 = timed.iter().map(|t| w3::infer_flops(t, hidden)).sum();
                println!(
                    "{form:>10} {hidden:>6} {batch:>6} {ms:>10.3} {calls:>9}   {}",
                    top_launches(&exec)
                );
                if vf.is_some() && (batch == 1 || batch == 256) && hidden == 256 {
                    let runs = timed.len().div_ceil(batch);
                    println!(
                        "{:>10} kernels of {runs} batches: {}",
                        "",
                        launch_diff(&names0, &k.launches_by_name())
                    );
                }
                report.add(
                    "W3",
                    "agenda",
                    1,
                    batch,
                    "latency",
                    ms,
                    "ms/tree",
                    peak,
                    Some(flops / secs / 1e9),
                    &format!(
                        "{} random 128-leaf trees on {name}, {calls} launches per batch",
                        timed.len()
                    ),
                );
                if batch == 256 && vf.is_none() {
                    println!(
                        "{:>10} speedup ratio (sequential batch 1 / agenda batch 256): {:.1}",
                        "",
                        sequential / ms
                    );
                }
                let variant = match vf {
                    None => format!("state {hidden}"),
                    Some(_) => format!("state {hidden}, vertex"),
                };
                report.set_variant(&variant);
                report.set_device(name);
            }
        }
    }
    Ok(())
}
