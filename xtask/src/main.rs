//! Project automation: `cargo xtask <command>` (alias in `.cargo/config.toml`).
//!
//! - `cargo xtask bench W1|W2|W3|W4|W5|W6 [--quick] [--threads 1,2]`: one
//!   workload of `shared/BENCHMARKS.md`, figures appended to
//!   `target/bench/results.jsonl`.
//! - `cargo xtask bench dist [--quick]`: W1 training on 1 and 2 MPI ranks
//!   (needs Open MPI; see sheaf-dist).
//! - `cargo xtask bench all [--quick] [--threads 1,2]`: W1 to W6, then the
//!   report.
//! - `cargo xtask bench report`: `target/bench/report.md` and its SVG plots
//!   from the recorded results.
//! - `cargo xtask bench kernels [--quick]`: CPU kernel figures next to the
//!   same-run sgemm peak.
//! - `cargo xtask bench criterion [FILTER]`: the criterion micro-benches.
//! - `cargo xtask bench-gpu [--quick]`: the GPU figures (sgemm peak, W1,
//!   W3) on a CUDA device.
//! - `cargo xtask gpu-bundle`: GPU tests and benchmarks packed for a GPU
//!   machine without a Rust toolchain (`gpu-bundle/run.sh`).
//! - `cargo xtask build-kernels [--check]`: the CUDA kernels' PTX (needs
//!   nvcc; see `kernels.rs`).

use clap::{Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod gpu;
mod kernels;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "sheaf project tasks")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Run a benchmark suite and record its figures.
    Bench {
        /// Which suite.
        suite: Suite,
        /// Shorter measurements (noisier figures), for a quick look.
        #[arg(long)]
        quick: bool,
        /// Thread counts, comma-separated (workloads only; default 1,2, or
        /// 1 with --quick).
        #[arg(long)]
        threads: Option<String>,
        /// Extra arguments passed to the suite (e.g. a criterion filter).
        #[arg(trailing_var_arg = true)]
        rest: Vec<String>,
    },
    /// GPU benchmarks (needs a CUDA device): the cuBLAS sgemm peak, W1 at
    /// batch 64 and 256, W3 at state 256 and 1024; figures appended to
    /// target/bench/results.jsonl with the GPU's name.
    BenchGpu {
        /// Fewer trees per figure.
        #[arg(long)]
        quick: bool,
        /// Extra arguments for bench-gpu (e.g. --device 1).
        #[arg(trailing_var_arg = true)]
        rest: Vec<String>,
    },
    /// Release builds of the GPU tests, bench-gpu and sst with a run
    /// script, in gpu-bundle/, for a GPU machine without a Rust toolchain.
    GpuBundle,
    /// Compile crates/kernels-cuda/kernels/*.cu to the committed PTX.
    BuildKernels {
        /// Also assemble each PTX with ptxas for sm_80 and sm_90.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Suite {
    /// CPU kernels: sgemm, small-row path, elementwise, gather.
    Kernels,
    /// Every criterion micro-bench in `benches/benches`.
    Criterion,
    /// W1: Tree-LSTM training on SST, trees/s per strategy.
    #[value(name = "W1", alias = "w1")]
    W1,
    /// W2: synthetic BiLSTM tagger, sentences/s per strategy and manual.
    #[value(name = "W2", alias = "w2")]
    W2,
    /// W3: Tree-LSTM inference, ms/tree per batch size (Fold's Table 1).
    #[value(name = "W3", alias = "w3")]
    W3,
    /// W4: BiLSTM tagger with character embeddings of rare words.
    #[value(name = "W4", alias = "w4")]
    W4,
    /// W5: weave graph convolutions on ESOL, molecules/s.
    #[value(name = "W5", alias = "w5")]
    W5,
    /// W6: variable-length sequences, bucketing vs. agenda.
    #[value(name = "W6", alias = "w6")]
    W6,
    /// W1 training across MPI ranks (1 and 2 ranks of one thread): needs
    /// Open MPI and mpirun (see sheaf-dist).
    Dist,
    /// W1 to W6, then the report.
    All,
    /// The report of the recorded results (target/bench/report.md, SVGs).
    Report,
}

impl Suite {
    /// The benchmark binary of a workload.
    fn binary(self) -> Option<&'static str> {
        Some(match self {
            Suite::W1 => "bench-w1",
            Suite::W2 => "bench-w2",
            Suite::W3 => "bench-w3",
            Suite::W4 => "bench-w4",
            Suite::W5 => "bench-w5",
            Suite::W6 => "bench-w6",
            _ => return None,
        })
    }
}

const WORKLOADS: [Suite; 6] = [
    Suite::W1,
    Suite::W2,
    Suite::W3,
    Suite::W4,
    Suite::W5,
    Suite::W6,
];

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = workspace_root();
    let result = match cli.command {
        Task::Bench {
            suite,
            quick,
            threads,
            rest,
        } => bench(&root, suite, quick, threads.as_deref(), &rest),
        Task::BuildKernels { check } => kernels::build(&root, check),
        Task::GpuBundle => gpu::bundle(&root),
        Task::BenchGpu { quick, rest } => {
            let mut args = vec![
                "--quiet",
                "--features",
                "cuda",
                "-p",
                "sheaf-benches",
                "--bin",
                "bench-gpu",
                "--",
            ];
            if quick {
                args.push("--quick");
            }
            cargo_run(&root, &args, &rest)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(
    root: &Path,
    suite: Suite,
    quick: bool,
    threads: Option<&str>,
    rest: &[String],
) -> Result<(), String> {
    match suite {
        Suite::Kernels => {
            let mut args = vec!["--quiet", "-p", "sheaf-benches", "--bin", "bench-kernels"];
            args.push("--");
            if quick {
                args.push("--quick");
            }
            cargo_run(root, &args, rest)
        }
        Suite::Criterion => {
            let mut cmd = Command::new(cargo());
            cmd.current_dir(root)
                .args(["bench", "-p", "sheaf-benches", "--"]);
            if quick {
                cmd.args(["--warm-up-time", "0.2", "--measurement-time", "0.5"]);
            }
            run(cmd.args(rest))
        }
        Suite::Report => report(root, quick, rest),
        Suite::Dist => dist(root, quick, rest),
        Suite::All => {
            build_benches(root)?;
            for w in WORKLOADS {
                workload(root, w, quick, threads, rest)?;
            }
            report(root, quick, &[])
        }
        w => {
            build_benches(root)?;
            workload(root, w, quick, threads, rest)
        }
    }
}

/// `bench dist`: bench-dist under `mpirun -n 1` and `-n 2`.
fn dist(root: &Path, quick: bool, rest: &[String]) -> Result<(), String> {
    let mut build = Command::new(cargo());
    build.current_dir(root).args([
        "build",
        "--release",
        "--quiet",
        "--features",
        "mpi",
        "-p",
        "sheaf-benches",
        "--bin",
        "bench-dist",
    ]);
    run(&mut build)?;
    for ranks in ["1", "2"] {
        let mut cmd = Command::new("mpirun");
        // Root (CI, the build machines) needs --allow-run-as-root; a
        // 2-core machine running 2 ranks beside mpirun, --oversubscribe.
        cmd.current_dir(root)
            .args(["--allow-run-as-root", "--oversubscribe", "-n", ranks])
            .arg(release_binary(root, "bench-dist"));
        if quick {
            cmd.arg("--quick");
        }
        run(cmd.args(rest)).map_err(|e| format!("mpirun -n {ranks} bench-dist: {e}"))?;
    }
    Ok(())
}

/// Builds every benchmark binary once, in release mode.
fn build_benches(root: &Path) -> Result<(), String> {
    let mut cmd = Command::new(cargo());
    cmd.current_dir(root).args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "sheaf-benches",
        "--bins",
    ]);
    run(&mut cmd)
}

fn release_binary(root: &Path, name: &str) -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    dir.join("release").join(name)
}

fn workload(
    root: &Path,
    w: Suite,
    quick: bool,
    threads: Option<&str>,
    rest: &[String],
) -> Result<(), String> {
    let Some(bin) = w.binary() else {
        return Err("not a workload".into());
    };
    let mut cmd = Command::new(release_binary(root, bin));
    cmd.current_dir(root);
    if quick {
        cmd.arg("--quick");
    }
    // A quick look at one thread keeps `all --quick` under 5 minutes on
    // two cores; a full run measures 1 and 2 threads (each binary's default).
    match (threads, quick) {
        (Some(t), _) => {
            cmd.args(["--threads", t]);
        }
        (None, true) => {
            cmd.args(["--threads", "1"]);
        }
        (None, false) => {}
    }
    println!("== {bin}");
    run(cmd.args(rest))
}

fn report(root: &Path, quick: bool, rest: &[String]) -> Result<(), String> {
    let command = format!(
        "cargo xtask bench all{}",
        if quick { " --quick" } else { "" }
    );
    let args = [
        "--quiet",
        "-p",
        "sheaf-benches",
        "--bin",
        "bench-report",
        "--",
        "--command",
        &command,
    ];
    cargo_run(root, &args, rest)
}

fn cargo_run(root: &Path, args: &[&str], rest: &[String]) -> Result<(), String> {
    let mut cmd = Command::new(cargo());
    cmd.current_dir(root).args(["run", "--release"]).args(args);
    run(cmd.args(rest))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{:?} failed ({s})", cmd.get_program())),
        Err(e) => Err(format!("cannot run {:?}: {e}", cmd.get_program())),
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}
