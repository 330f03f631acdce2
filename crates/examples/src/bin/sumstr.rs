//! `sumstr`: W6, the "sum of a string" task (`4+3+9` -> 16), a 2-layer GRU
//! over characters trained with length bucketing or dynamic batching.
//!
//! ```text
//! sumstr [--strategy bucket|agenda|depth|sequential] [--form scan|vertex|inline] [--spacing 1.5] [--epochs 8] ...
//! ```
//!
//! Prints the held-out mean absolute error after every epoch, then the
//! throughput and padding fraction. Bad settings are one line on stderr
//! and exit code 1; usage errors exit with 2.

use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use sheaf_examples::error::{Error, Result};
use sheaf_examples::sumstr::{train, Config, Form, Mode};
use sheaf_sched::Strategy;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Bucket,
    Agenda,
    Depth,
    Sequential,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Written {
    /// Each GRU layer an input product and a scan per string.
    Scan,
    /// Each GRU step one vertex-function call.
    Vertex,
    /// Every GRU step's ops one by one.
    Inline,
}

#[derive(Parser, Debug)]
#[command(
    name = "sumstr",
    version,
    about = "W6: sum of a string (4+3+9 -> 16) with a 2-layer GRU, bucketed or dynamically batched"
)]
struct Cli {
    /// How minibatches run.
    #[arg(long, value_enum, default_value = "bucket")]
    strategy: Which,
    /// How the model is written (the same values each).
    #[arg(long, value_enum, default_value = "scan")]
    form: Written,
    /// Bucket boundaries are ceil(spacing^k) (bucket only).
    #[arg(long, default_value_t = 1.5)]
    spacing: f64,
    /// Passes over the training set.
    #[arg(long, default_value_t = 8)]
    epochs: usize,
    /// Training strings.
    #[arg(long, default_value_t = 4000)]
    train: usize,
    /// Held-out strings.
    #[arg(long, default_value_t = 500)]
    test: usize,
    /// Strings per update.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Hidden size of both GRU layers.
    #[arg(long, default_value_t = 32)]
    hidden: usize,
    /// Initial Adam learning rate (decays linearly to a tenth).
    #[arg(long, default_value_t = 0.01)]
    lr: f32,
    /// Seed of the data and the initialisation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Shortest string (at least 3).
    #[arg(long, default_value_t = 3)]
    min_len: usize,
    /// Longest string (at most 41).
    #[arg(long, default_value_t = 41)]
    max_len: usize,
}

fn run(cli: &Cli) -> Result<()> {
    if !(3..=41).contains(&cli.min_len) || !(3..=41).contains(&cli.max_len) {
        return Err(Error::Config(
            "--min-len and --max-len must lie in 3..=41".into(),
        ));
    }
    let mode = match cli.strategy {
        Which::Bucket => Mode::Bucket(cli.spacing),
        Which::Agenda => Mode::Dynamic(Strategy::Agenda),
        Which::Depth => Mode::Dynamic(Strategy::Depth),
        Which::Sequential => Mode::Dynamic(Strategy::Sequential),
    };
    let cfg = Config {
        hidden: cli.hidden,
        batch: cli.batch,
        train: cli.train,
        test: cli.test,
        epochs: cli.epochs,
        lr: cli.lr,
        seed: cli.seed,
        min_len: cli.min_len,
        max_len: cli.max_len,
        mode,
        form: match cli.form {
            Written::Scan => Form::Scan,
            Written::Vertex => Form::Vertex,
            Written::Inline => Form::Inline,
        },
    };
    let report = train(&cfg, |epoch, mae| {
        println!("epoch {epoch:>3}  held-out MAE {mae:.3}");
    })?;
    println!(
        "throughput {:.1} strings/s (training), padding {:.1}% of steps",
        report.throughput,
        100.0 * report.padding_fraction
    );
    if let Some(m) = report.mae.last() {
        println!("final held-out MAE {m:.3}");
    }
    Ok(())
}

fn main() -> ExitCode {
    sheaf_examples::logging::init();
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sumstr: {e}");
            ExitCode::FAILURE
        }
    }
}
