//! `cargo xtask bench dist`: W1 training across MPI ranks (one thread per
//! rank), run under `mpirun -n R`: trees/s of the whole job, and per step
//! the time spent in the gradient exchange against the rest. Rank 0
//! prints and records; every rank takes its shard of each minibatch of 64
//! (`sheaf_dist::balanced_shard` by node count, or `--contiguous`), runs it
//! as one graph, and the gradients are summed
//! by `sheaf_dist::GradSync` before the same SGD step on every rank.

use std::path::Path;
use std::time::Instant;

use clap::Parser;
use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::measure::with_threads;
use sheaf_benches::report::{default_results_path, Report};
use sheaf_benches::w1::{model, optimizer, train_flops};
use sheaf_dist::{balanced_shard, broadcast_params, shard, Communicator, GradSync, Mpi};
use sheaf_examples::sst::{read_trees, Vocab};
use sheaf_sched::{Executor, Strategy};

#[derive(Parser, Debug)]
#[command(about = "W1 training across MPI ranks: trees/s and the share of the gradient exchange")]
struct Args {
    /// 512 timed trees instead of 2048.
    #[arg(long)]
    quick: bool,
    /// depth or agenda.
    #[arg(long, default_value = "agenda")]
    strategy: String,
    /// Gradient all-reduce buckets of at most this many MiB.
    #[arg(long, default_value_t = 25.0)]
    bucket_mib: f64,
    /// The model with vertex functions (the `sst` trainer's default)
    /// instead of built op by op.
    #[arg(long)]
    vertex: bool,
    /// Contiguous shards (`sheaf_dist::shard`) instead of shards balanced
    /// by node count (`sheaf_dist::balanced_shard`), to compare.
    #[arg(long)]
    contiguous: bool,
    /// Trees per update (the global minibatch, split over the ranks).
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Where to append the JSON lines (rank 0).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn main() {
    sheaf_examples::logging::init();
    let args = Args::parse();
    if let Err(e) = with_threads(1, || run(&args)) {
        eprintln!("bench-dist: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let world = Mpi::init().map_err(|e| e.to_string())?;
    let (rank, ranks) = (world.rank(), world.size());
    let strategy = match args.strategy.as_str() {
        "depth" => Strategy::Depth,
        "agenda" => Strategy::Agenda,
        s => return Err(format!("--strategy {s}: depth or agenda")),
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sst/train.txt");
    let trees = read_trees(&path).map_err(|e| e.to_string())?;
    let vocab = Vocab::from_trees(&trees);
    let ids: Vec<Vec<u32>> = trees.iter().map(|t| vocab.encode(t)).collect();
    let timed = if args.quick { 512 } else { 2048 };
    let mut store = ParamStore::new();
    let mut net = model(&mut store, vocab.len(), 1).map_err(|e| e.to_string())?;
    if args.vertex {
        net = net.with_vertex_functions().map_err(|e| e.to_string())?;
    }
    broadcast_params(&world, &mut store).map_err(|e| e.to_string())?;
    let mut opt = optimizer();
    let sync = GradSync::with_bucket_bytes((args.bucket_mib * (1u64 << 20) as f64) as usize);
    let mut exec = Executor::new(strategy);
    let mut g = Graph::new();
    let batch_size = args.batch.max(1);
    // Warm-up: whole minibatches of at least 128 trees.
    let warm = 128usize.div_ceil(batch_size) * batch_size;
    if warm + timed > trees.len() {
        return Err(format!(
            "--batch {batch_size}: {warm} warm-up and {timed} timed trees, the treebank has {}",
            trees.len()
        ));
    }
    let positions: Vec<usize> = (0..warm + timed).collect();
    let (mut comm_s, mut wait_s, mut step_s) = (0.0f64, 0.0f64, 0.0f64);
    let mut start = Instant::now();
    for (k, batch) in positions.chunks(batch_size).enumerate() {
        if k * batch_size == warm {
            // Warm-up over: every rank starts the clock together.
            world.barrier().map_err(|e| e.to_string())?;
            (comm_s, wait_s, step_s, start) = (0.0, 0.0, 0.0, Instant::now());
        }
        let t0 = Instant::now();
        let part: Vec<usize> = match args.contiguous {
            true => shard(batch, rank, ranks).to_vec(),
            false => {
                let nodes: Vec<u64> = batch.iter().map(|&i| trees[i].nodes.len() as u64).collect();
                let mine = balanced_shard(&nodes, rank, ranks);
                mine.into_iter().map(|k| batch[k]).collect()
            }
        };
        let mut loss = [0.0f64];
        if !part.is_empty() {
            let losses = part
                .iter()
                .map(|&i| net.tree_loss(&mut g, &trees[i], &ids[i]))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let total = g.sum(&losses).map_err(|e| e.to_string())?;
            exec.forward(&mut g, &store, total)
                .map_err(|e| e.to_string())?;
            exec.backward(&mut g, &store, total)
                .map_err(|e| e.to_string())?;
            let v = g.value(total).map_err(|e| e.to_string())?;
            loss[0] = f64::from(v.to_vec::<f32>().map_err(|e| e.to_string())?[0]);
            g.clear();
        }
        let t1 = Instant::now();
        // Waiting for the slowest rank's shard (the ranks' shards differ
        // in nodes) is load imbalance, not communication: timed apart.
        world.barrier().map_err(|e| e.to_string())?;
        let tw = Instant::now();
        sync.sync(&world, &store).map_err(|e| e.to_string())?;
        world
            .all_reduce_sum_f64(&mut loss)
            .map_err(|e| e.to_string())?;
        let t2 = Instant::now();
        opt.step(&mut store).map_err(|e| e.to_string())?;
        if !loss[0].is_finite() {
            return Err(format!("the loss of step {k} is {}", loss[0]));
        }
        wait_s += (tw - t1).as_secs_f64();
        comm_s += (t2 - tw).as_secs_f64();
        step_s += t0.elapsed().as_secs_f64();
    }
    let secs = start.elapsed().as_secs_f64();
    // The largest share over the ranks, of the exchange and of the wait.
    let step_s = step_s.max(1e-12);
    let mine = [comm_s / step_s, wait_s / step_s];
    let all = sheaf_dist::CommunicatorExt::all_gather(&world, &mine).map_err(|e| e.to_string())?;
    let largest = |i: usize| all.iter().map(|s| s[i]).fold(0.0, f64::max);
    let shares = [largest(0), largest(1)];
    if rank != 0 {
        return Ok(());
    }
    let rate = timed as f64 / secs;
    let flops: f64 = trees[warm..warm + timed].iter().map(train_flops).sum();
    let variant = format!(
        "dist/{}{}{}",
        args.strategy,
        if args.vertex { "/vertex" } else { "" },
        if args.contiguous { "/contiguous" } else { "" }
    );
    println!(
        "W1 {variant} on {ranks} rank(s), 1 thread each: {rate:.1} trees/s, {:.2} GFLOP/s; of a step \
         (largest rank): gradient exchange {:.1}%, waiting for the slowest shard {:.1}%",
        flops / secs / 1e9,
        100.0 * shares[0],
        100.0 * shares[1]
    );
    let mut report = Report::new();
    report.add(
        "W1",
        &variant,
        1,
        batch_size,
        "throughput",
        rate,
        "trees/s",
        f64::NAN,
        Some(flops / secs / 1e9),
        &format!(
            "{timed} trees, {ranks} MPI rank(s) of 1 thread, gradient exchange {:.3} and wait for \
             the slowest shard {:.3} of a step, buckets of {} MiB",
            shares[0], shares[1], args.bucket_mib
        ),
    );
    report.set_ranks(ranks);
    report.add(
        "W1",
        &variant,
        1,
        batch_size,
        "exchange_share",
        shares[0],
        "fraction of a step",
        f64::NAN,
        None,
        "time in GradSync::sync and the loss all-reduce over the step's time, largest rank",
    );
    report.set_ranks(ranks);
    report.add(
        "W1",
        &variant,
        1,
        batch_size,
        "imbalance_share",
        shares[1],
        "fraction of a step",
        f64::NAN,
        None,
        "time waiting at a barrier for the slowest rank's shard over the step's time, largest rank",
    );
    report.set_ranks(ranks);
    let path = args.out.clone().unwrap_or_else(default_results_path);
    report
        .append_jsonl(&path)
        .map_err(|e| format!("{}: {e}", path.display()))
}
