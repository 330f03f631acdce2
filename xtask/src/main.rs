//! Project automation: `cargo xtask <command>` (alias in `.cargo/config.toml`).
//!
//! - `cargo xtask bench kernels [--quick]`: CPU kernel figures next to the
//!   same-run sgemm peak, appended to `target/bench/results.jsonl`.
//! - `cargo xtask bench W1 [--quick]`: Tree-LSTM training on SST per strategy.
//! - `cargo xtask bench W3 [--quick]`: Tree-LSTM inference on random trees.
//! - `cargo xtask bench W5 [--quick]`: weave modules on ESOL (training).
//! - `cargo xtask bench W6 [--quick]`: sum-of-a-string GRU, bucketing vs. agenda.
//! - `cargo xtask bench criterion [FILTER]`: the criterion micro-benches.

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

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
        /// Extra arguments passed to the suite (e.g. a criterion filter).
        #[arg(trailing_var_arg = true)]
        rest: Vec<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Suite {
    /// CPU kernels: sgemm, small-row path, elementwise, gather.
    Kernels,
    /// Every criterion micro-bench in `benches/benches`.
    Criterion,
    /// W1: Tree-LSTM training on SST, trees/s per strategy.
    #[value(name = "W1", alias = "w1")]
    W1,
    /// W3: Tree-LSTM inference on random trees, ms/tree (Fold's Table 1).
    #[value(name = "W3", alias = "w3")]
    W3,
    /// W5: weave modules on ESOL, training molecules/s per strategy.
    #[value(name = "W5", alias = "w5")]
    W5,
    /// W6: variable-length sequences, bucketing vs. agenda.
    #[value(name = "W6", alias = "w6")]
    W6,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = workspace_root();
    let status = match cli.command {
        Task::Bench { suite, quick, rest } => {
            let mut cmd = Command::new(cargo());
            cmd.current_dir(&root);
            match suite {
                Suite::Kernels => {
                    cmd.args([
                        "run",
                        "--release",
                        "--quiet",
                        "-p",
                        "sheaf-benches",
                        "--bin",
                        "bench-kernels",
                        "--",
                    ]);
                    if quick {
                        cmd.arg("--quick");
                    }
                }
                Suite::W1 | Suite::W3 | Suite::W5 | Suite::W6 => {
                    let bin = match suite {
                        Suite::W1 => "bench-w1",
                        Suite::W3 => "bench-w3",
                        Suite::W5 => "bench-w5",
                        _ => "bench-w6",
                    };
                    cmd.args([
                        "run",
                        "--release",
                        "--quiet",
                        "-p",
                        "sheaf-benches",
                        "--bin",
                        bin,
                        "--",
                    ]);
                    if quick {
                        cmd.arg("--quick");
                    }
                }
                Suite::Criterion => {
                    cmd.args(["bench", "-p", "sheaf-benches", "--"]);
                    if quick {
                        cmd.args(["--warm-up-time", "0.2", "--measurement-time", "0.5"]);
                    }
                }
            }
            cmd.args(rest);
            cmd.status()
        }
    };
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!("xtask: the command failed ({s})");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("xtask: cannot run cargo: {e}");
            ExitCode::FAILURE
        }
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
