//! `sst`: train, evaluate and use a binary Tree-LSTM sentiment classifier
//! on the Stanford Sentiment Treebank.
//!
//! ```text
//! sst train [--epochs N] [--strategy agenda] [--checkpoint-dir checkpoints/sst] ...
//! sst eval --checkpoint checkpoints/sst [--split dev|test]
//! sst predict --checkpoint checkpoints/sst [FILE]
//! ```
//!
//! Errors (missing or malformed files, bad settings) are one line on stderr
//! and exit code 1; usage errors exit with 2.

use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sheaf_dist::{Communicator, GradSync};
use sheaf_examples::engine::{Engine, Exec};
use sheaf_examples::error::{Error, Result};
use sheaf_examples::eval::{fine_label, Scores, Trained, Which};
use sheaf_examples::model::ModelConfig;
use sheaf_examples::plot::{write_history, write_plot};
use sheaf_examples::sst::{parse_trees, read_trees};
use sheaf_examples::state::{RunState, HISTORY, PLOT};
use sheaf_examples::train::{
    default_data_dir, with_threads, Event, OptimizerKind, Reduction, ResumeChanges, TrainConfig,
    Trainer, DEFAULT_CHECK_EVERY,
};
use sheaf_tensor::Device;

#[derive(Parser, Debug)]
#[command(
    name = "sst",
    version,
    about = "Tree-LSTM sentiment classification on the Stanford Sentiment Treebank, with sheaf"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Train a model; checkpoints, vocabulary, history and plot go to
    /// --checkpoint-dir after every epoch.
    Train(Box<TrainArgs>),
    /// Print the fine-grained and binary accuracy of a checkpoint on a split.
    Eval(EvalArgs),
    /// Predict the sentiment of PTB trees, one per line (FILE or stdin).
    ///
    /// The input must be in SST's labelled PTB format, e.g.
    /// `(3 (2 a) (3 (3 good) (2 film)))`; its labels are required by the
    /// format but ignored. Prints, per line: the predicted root label 0-4,
    /// a tab, and the five class probabilities.
    Predict(PredictArgs),
    /// Redraw a run's training.svg and history.csv from its state.json.
    Plot(PlotArgs),
}

#[derive(Args, Debug)]
struct PlotArgs {
    /// A checkpoint directory written by `sst train`.
    #[arg(long, value_name = "DIR")]
    checkpoint: PathBuf,
    /// Write the SVG here instead of DIR/training.svg (no CSV then).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct TrainArgs {
    /// Directory with train.txt, dev.txt, test.txt [default: the
    /// repository's data/sst].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Where to train: cpu, cuda or cuda:N (CUDA needs a build with
    /// `--features cuda`). Not saved with the run: `--resume` picks again.
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
    device: Device,
    /// How graphs are executed [default: agenda].
    #[arg(long, value_enum)]
    strategy: Option<Exec>,
    /// Epochs in all (with --resume: the new total) [default: 3].
    #[arg(long, value_name = "N")]
    epochs: Option<usize>,
    /// Trees per update [default: 25].
    #[arg(long, value_name = "N")]
    batch_size: Option<usize>,
    /// Learning rate [default: 0.05 for adagrad, 0.001 for adam].
    #[arg(long, value_name = "F")]
    lr: Option<f32>,
    /// Update rule [default: adagrad].
    #[arg(long, value_enum)]
    optimizer: Option<OptimizerKind>,
    /// L2 weight decay [default: 1e-4].
    #[arg(long, value_name = "F")]
    weight_decay: Option<f32>,
    /// Combine a batch's tree losses by mean or sum [default: mean].
    #[arg(long, value_enum)]
    reduction: Option<Reduction>,
    /// Clip the global gradient norm of each update to F [default: off].
    #[arg(long, value_name = "F")]
    clip_norm: Option<f32>,
    /// Update the embedding table by plain SGD with this learning rate
    /// and no weight decay, the other parameters by --optimizer [default:
    /// off: --optimizer updates the table too].
    #[arg(long, value_name = "F")]
    embed_lr: Option<f32>,
    /// Dropout rate on the embeddings and before the output layer
    /// [default: 0.5]; 0 adds no dropout at all.
    #[arg(long, value_name = "F")]
    dropout: Option<f32>,
    /// Dropout rate on the embeddings only [default: --dropout].
    #[arg(long, value_name = "F")]
    dropout_embed: Option<f32>,
    /// Dropout rate before the output layer only [default: --dropout].
    #[arg(long, value_name = "F")]
    dropout_output: Option<f32>,
    /// Recurrent dropout (Semeniuta et al. 2016) on the cells' candidate
    /// update [default: 0].
    #[arg(long, value_name = "F")]
    recurrent_dropout: Option<f32>,
    /// Start from a published recipe; other flags override its settings.
    /// `fold`: TensorFlow Fold's sentiment model (state 300, recurrent
    /// dropout 0.25, dropout 0.25 on the embeddings and the output, no L2,
    /// batches of 100, the embeddings learning slower: SGD lr 0.1).
    #[arg(long, value_enum)]
    recipe: Option<Recipe>,
    /// Build the graphs with the model written with blocks
    /// (sheaf-blocks) instead of the hand-written one.
    #[arg(long)]
    blocks: bool,
    /// Build each tree node's ops one by one instead of as vertex-function
    /// calls (the default), for comparison.
    #[arg(long)]
    inline: bool,
    /// Embedding size [default: 300].
    #[arg(long, value_name = "N")]
    embed_dim: Option<usize>,
    /// Tree-LSTM cell size [default: 150].
    #[arg(long, value_name = "N")]
    hidden: Option<usize>,
    /// Random embeddings are uniform in ±F [default: 0.05].
    #[arg(long, value_name = "F")]
    embed_init: Option<f32>,
    /// Worker threads; 0 = all cores.
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Run each batch's trees in N parts side by side, one graph and
    /// executor per part (data parallelism on the CPU; faster than
    /// splitting each kernel with a few cores; dropout masks then depend
    /// on N). 1 = one graph per batch.
    #[arg(long, value_name = "N", default_value_t = 1)]
    parallel: usize,
    /// Seed of initialisation, shuffling and dropout [default: 1].
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Where checkpoints, vocabulary, state, history.csv and training.svg
    /// go.
    #[arg(long, value_name = "DIR", default_value = "checkpoints/sst")]
    checkpoint_dir: PathBuf,
    /// Continue the run in --checkpoint-dir (or in DIR) from its last
    /// finished epoch, exactly as if it had not stopped. Only --epochs,
    /// --strategy, --threads, --parallel and --patience may be given with
    /// it.
    #[arg(long, value_name = "DIR", num_args = 0..=1)]
    resume: Option<Option<PathBuf>>,
    /// Delete a run already in --checkpoint-dir and start over.
    #[arg(long, conflicts_with = "resume")]
    overwrite: bool,
    /// Pretrained word vectors (GloVe or word2vec text format) copied into
    /// the embedding table; their size must equal --embed-dim.
    #[arg(long, value_name = "PATH")]
    embeddings: Option<PathBuf>,
    /// Train on the first N training trees only.
    #[arg(long, value_name = "N")]
    max_train_trees: Option<usize>,
    /// Stop after N epochs without a better dev accuracy [default: off].
    #[arg(long, value_name = "N")]
    patience: Option<usize>,
    /// Train as one rank of an MPI job: start with `mpirun -n N sst train
    /// --distributed ...`; each rank runs its share of every minibatch and
    /// the gradients are summed over the ranks (needs a build with
    /// `--features mpi`).
    #[arg(long)]
    distributed: bool,
    /// Gradient all-reduce buckets of at most this many MiB (with
    /// --distributed).
    #[arg(
        long,
        value_name = "MIB",
        default_value_t = 25.0,
        requires = "distributed"
    )]
    bucket_mib: f64,
    /// Compare the ranks' parameters every N steps; 0 = never (with
    /// --distributed).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CHECK_EVERY, requires = "distributed")]
    check_every: u64,
}

#[derive(Args, Debug)]
struct LoadArgs {
    /// A checkpoint directory written by `sst train`.
    #[arg(long, value_name = "DIR")]
    checkpoint: PathBuf,
    /// Which parameters to load.
    #[arg(long, value_enum, default_value_t = Which::Best)]
    which: Which,
    /// How graphs are executed.
    #[arg(long, value_enum, default_value_t = Exec::Agenda)]
    strategy: Exec,
    /// Worker threads; 0 = all cores.
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Where to run: cpu, cuda or cuda:N (CUDA needs a build with
    /// `--features cuda`).
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
    device: Device,
}

#[derive(Args, Debug)]
struct EvalArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// The split to score.
    #[arg(long, value_enum, default_value_t = SplitName::Dev)]
    split: SplitName,
    /// Directory with the split's file [default: the run's data directory].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct PredictArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// PTB trees, one per line; `-` or none reads stdin.
    file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum SplitName {
    Train,
    Dev,
    Test,
}

fn main() {
    sheaf_examples::logging::init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Train(a) => train(*a),
        Cmd::Eval(a) => eval(a),
        Cmd::Predict(a) => predict(a),
        Cmd::Plot(a) => plot(a),
    };
    if let Err(e) = result {
        // One line, whatever the error holds.
        eprintln!("error: {}", one_line(&e));
        std::process::exit(1);
    }
}

fn train(a: TrainArgs) -> Result<()> {
    // Before reading data or touching the checkpoint directory.
    a.device
        .check_available()
        .map_err(|e| Error::Config(format!("--device {}: {e}", a.device)))?;
    let threads = a.threads;
    let started = Instant::now();
    let done = with_threads(threads, || -> Result<_> {
        // MPI starts on this thread, which makes every MPI call.
        let world = open_world(&a)?;
        let result = train_in(&a, world.clone());
        match (result, &world) {
            (Err(e), Some(w)) if w.size() > 1 => {
                // Stop every rank, not only this one: the others would
                // wait for it in the next collective.
                eprintln!("error: rank {} of {}: {}", w.rank(), w.size(), one_line(&e));
                w.abort(1)
            }
            (r, _) => r,
        }
    })??;
    let Some((dir, state)) = done else {
        return Ok(());
    };
    let secs = started.elapsed().as_secs_f64();
    match &state.best {
        Some(b) => println!(
            "done in {secs:.0} s: best epoch {} (dev fine-grained {:.2}%, binary {:.2}%); \
             `sst eval --checkpoint {} --split test` scores it",
            b.epoch,
            100.0 * b.dev_fine,
            100.0 * b.dev_binary,
            dir.display()
        ),
        None => println!("done in {secs:.0} s: no epoch trained"),
    }
    Ok(())
}

/// The MPI world of `--distributed`, or why there is none.
fn open_world(a: &TrainArgs) -> Result<Option<Rc<dyn Communicator>>> {
    if !a.distributed {
        return Ok(None);
    }
    #[cfg(feature = "mpi")]
    {
        if !sheaf_dist::launched_by_mpirun() {
            return Err(Error::Config(
                "--distributed: this process was not started by mpirun; run \
                 `mpirun -n N sst train --distributed ...` (see the README's \
                 \"Training on several machines\")"
                    .into(),
            ));
        }
        let world: Rc<dyn Communicator> = Rc::new(sheaf_dist::Mpi::init()?);
        Ok(Some(world))
    }
    #[cfg(not(feature = "mpi"))]
    Err(Error::Config(
        "--distributed needs a build with `--features mpi` and Open MPI installed (see the \
         README's \"Training on several machines\")"
            .into(),
    ))
}

/// Trains (on this thread pool); `None` on the ranks other than 0, which
/// report nothing.
fn train_in(
    a: &TrainArgs,
    world: Option<Rc<dyn Communicator>>,
) -> Result<Option<(PathBuf, RunState)>> {
    let rank0 = world.as_ref().is_none_or(|w| w.rank() == 0);
    let mut bar: Option<ProgressBar> = None;
    let mut on = move |ev: Event<'_>| {
        if rank0 {
            report(&mut bar, ev)
        }
    };
    let dist = world.map(|w| {
        let bucket = (a.bucket_mib.max(0.0) * (1u64 << 20) as f64) as usize;
        (w, GradSync::with_bucket_bytes(bucket), a.check_every)
    });
    let mut trainer = match &a.resume {
        Some(dir) => {
            let dir = dir.clone().unwrap_or_else(|| a.checkpoint_dir.clone());
            refuse_changes_on_resume(a)?;
            let mut t = Trainer::resume(
                &dir,
                ResumeChanges {
                    epochs: a.epochs,
                    exec: a.strategy,
                    patience: a.patience,
                },
            )?;
            if let Some((w, sync, every)) = dist {
                t.set_distributed(w, sync, every)?;
            }
            let s = t.state();
            if rank0 {
                println!(
                    "resuming {} after epoch {} (step {}), {} epochs in all",
                    dir.display(),
                    s.epochs_done,
                    s.step,
                    s.train.epochs
                );
            }
            t
        }
        None => {
            let (model, cfg) = settings(a);
            let embed = match cfg.embed_lr {
                Some(lr) => format!(", embeddings by SGD lr {lr}"),
                None => String::new(),
            };
            if rank0 {
                println!(
                    "training: {} lr {} weight decay {}{embed}, batch {} ({}), dropout {}/{}, \
                     recurrent dropout {}, E {} H {}, epochs {}, seed {}, {} executor",
                    cfg.optimizer.name(),
                    cfg.lr,
                    cfg.weight_decay,
                    cfg.batch_size,
                    if cfg.reduction == Reduction::Mean {
                        "mean"
                    } else {
                        "sum"
                    },
                    model.dropout_embed,
                    model.dropout_output,
                    model.recurrent_dropout,
                    model.embed_dim,
                    model.hidden,
                    cfg.epochs,
                    cfg.seed,
                    cfg.exec
                );
            }
            let dir = &a.checkpoint_dir;
            match dist {
                Some(d) => Trainer::new_distributed(dir, model, cfg, a.overwrite, d, &mut on)?,
                None => Trainer::new(dir, model, cfg, a.overwrite, &mut on)?,
            }
        }
    };
    trainer.to_device(a.device)?;
    trainer.set_parallel(a.parallel)?;
    let parts = match (a.parallel, a.distributed) {
        (_, true) => " per rank".to_string(),
        (0 | 1, _) => String::new(),
        (n, _) => format!(" ({n} parts side by side)"),
    };
    if rank0 {
        println!(
            "{} threads{parts}, {}; checkpoints in {}",
            rayon::current_num_threads(),
            a.device,
            trainer.dir().display()
        );
    }
    trainer.run(&mut on)?;
    let sync = trainer.sync_stats();
    if a.distributed && rank0 {
        println!(
            "gradient exchange: {:.1} s in all, {:.1} MB dense in {} buckets, {:.1} MB of \
             embedding rows (rank 0)",
            sync.seconds,
            sync.dense_bytes as f64 / 1e6,
            sync.buckets,
            sync.sparse_bytes as f64 / 1e6
        );
    }
    Ok(rank0.then(|| (trainer.dir().to_path_buf(), trainer.state().clone())))
}

/// An error as one line.
fn one_line(e: &Error) -> String {
    e.to_string().replace("\n  - ", "; ").replace('\n', " ")
}

/// Published settings `sst train --recipe` starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Recipe {
    /// TensorFlow Fold's sentiment example (Looks et al. 2017): a binary
    /// Tree-LSTM with state 300, recurrent dropout (keep 0.75), input and
    /// output dropout (keep 0.75), Adagrad 0.05, no L2, batches of 100,
    /// the embeddings learning 10x slower than the rest (Fold scales their
    /// Adagrad rate by 0.1; here plain SGD at 0.1 on the table).
    Fold,
}

/// The model and training settings of a new run from the flags.
fn settings(a: &TrainArgs) -> (ModelConfig, TrainConfig) {
    let data_dir = a.data_dir.clone().unwrap_or_else(default_data_dir);
    let mut cfg = TrainConfig::new(data_dir);
    let optimizer = a.optimizer.unwrap_or(cfg.optimizer);
    cfg.optimizer = optimizer;
    cfg.lr = a.lr.unwrap_or(optimizer.default_lr());
    cfg.epochs = a.epochs.unwrap_or(cfg.epochs);
    cfg.batch_size = a.batch_size.unwrap_or(cfg.batch_size);
    cfg.weight_decay = a.weight_decay.unwrap_or(cfg.weight_decay);
    cfg.reduction = a.reduction.unwrap_or(cfg.reduction);
    cfg.clip_norm = a.clip_norm;
    cfg.embed_lr = a.embed_lr;
    cfg.seed = a.seed.unwrap_or(cfg.seed);
    cfg.exec = a.strategy.unwrap_or(cfg.exec);
    cfg.max_train_trees = a.max_train_trees;
    cfg.embeddings = a.embeddings.clone();
    cfg.patience = a.patience;
    cfg.blocks = a.blocks;
    cfg.inline = a.inline;
    let mut model = ModelConfig::new(0);
    let mut dropout = 0.5;
    if a.recipe == Some(Recipe::Fold) {
        model.hidden = 300;
        model.recurrent_dropout = 0.25;
        dropout = 0.25;
        cfg.weight_decay = a.weight_decay.unwrap_or(0.0);
        cfg.batch_size = a.batch_size.unwrap_or(100);
        cfg.embed_lr = a.embed_lr.or(Some(0.1));
    }
    let dropout = a.dropout.unwrap_or(dropout);
    model.recurrent_dropout = a.recurrent_dropout.unwrap_or(model.recurrent_dropout);
    model.dropout_embed = a.dropout_embed.unwrap_or(dropout);
    model.dropout_output = a.dropout_output.unwrap_or(dropout);
    model.embed_dim = a.embed_dim.unwrap_or(model.embed_dim);
    model.hidden = a.hidden.unwrap_or(model.hidden);
    model.embed_init = a.embed_init.unwrap_or(model.embed_init);
    (model, cfg)
}

/// With --resume, the run's own settings apply; flags that would change
/// them are refused (the run could not continue exactly).
fn refuse_changes_on_resume(a: &TrainArgs) -> Result<()> {
    let given: [(&str, bool); 22] = [
        ("--data-dir", a.data_dir.is_some()),
        ("--batch-size", a.batch_size.is_some()),
        ("--lr", a.lr.is_some()),
        ("--optimizer", a.optimizer.is_some()),
        ("--weight-decay", a.weight_decay.is_some()),
        ("--reduction", a.reduction.is_some()),
        ("--clip-norm", a.clip_norm.is_some()),
        ("--embed-lr", a.embed_lr.is_some()),
        ("--dropout", a.dropout.is_some()),
        ("--dropout-embed", a.dropout_embed.is_some()),
        ("--dropout-output", a.dropout_output.is_some()),
        ("--recurrent-dropout", a.recurrent_dropout.is_some()),
        ("--recipe", a.recipe.is_some()),
        ("--blocks", a.blocks),
        ("--inline", a.inline),
        ("--embed-dim", a.embed_dim.is_some()),
        ("--hidden", a.hidden.is_some()),
        ("--embed-init", a.embed_init.is_some()),
        ("--seed", a.seed.is_some()),
        ("--embeddings", a.embeddings.is_some()),
        ("--max-train-trees", a.max_train_trees.is_some()),
        ("--overwrite", a.overwrite),
    ];
    let bad: Vec<&str> = given.iter().filter(|g| g.1).map(|g| g.0).collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "{} cannot be given with --resume: a resumed run keeps its saved settings \
             (only --epochs, --strategy, --threads, --parallel and --patience may change)",
            bad.join(", ")
        )))
    }
}

/// Progress bar (stderr, only on a terminal) and per-epoch lines (stdout).
fn report(bar: &mut Option<ProgressBar>, ev: Event<'_>) {
    match ev {
        Event::Info(s) => println!("{s}"),
        Event::EpochStart {
            epoch,
            epochs,
            trees,
        } => {
            let pb = ProgressBar::with_draw_target(Some(trees as u64), stderr_target());
            let style = ProgressStyle::with_template(
                "epoch {prefix} [{wide_bar}] {pos}/{len} trees, {msg}, eta {eta}",
            )
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            pb.set_style(style);
            pb.set_prefix(format!("{epoch}/{epochs}"));
            pb.enable_steady_tick(Duration::from_millis(250));
            *bar = Some(pb);
        }
        Event::Step {
            trees_done,
            loss,
            trees_per_sec,
        } => {
            if let Some(pb) = bar {
                pb.set_position(trees_done as u64);
                pb.set_message(format!("loss {loss:.4}/node, {trees_per_sec:.0} trees/s"));
            }
        }
        Event::Evaluating => {
            if let Some(pb) = bar {
                pb.set_message("evaluating on dev");
            }
        }
        Event::EpochEnd { record: r, best } => {
            if let Some(pb) = bar.take() {
                pb.finish_and_clear();
            }
            println!(
                "epoch {:>3}  loss {:.4}/node  {:>6.0} trees/s ({:.1} s)  dev fine {:.2}%  binary {:.2}%{}",
                r.epoch,
                r.train_loss,
                r.trees_per_sec,
                r.train_seconds,
                100.0 * r.dev_fine,
                100.0 * r.dev_binary,
                if best { "  best" } else { "" }
            );
        }
        Event::EarlyStop { best_epoch } => {
            println!("early stop: no better dev accuracy since epoch {best_epoch}")
        }
    }
}

/// stderr when it is a terminal, else nothing (logs stay clean).
fn stderr_target() -> ProgressDrawTarget {
    if io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

fn eval(a: EvalArgs) -> Result<()> {
    with_threads(a.load.threads, || -> Result<()> {
        let trained = Trained::load(&a.load.checkpoint, a.load.which)?;
        let dir = a
            .data_dir
            .clone()
            .unwrap_or_else(|| trained.state.train.data_dir.clone());
        let name = match a.split {
            SplitName::Train => "train",
            SplitName::Dev => "dev",
            SplitName::Test => "test",
        };
        let path = dir.join(format!("{name}.txt"));
        let trees = read_trees(&path)?;
        let mut trained = trained;
        trained.to_device(a.load.device)?;
        let mut engine = Engine::on(a.load.strategy, a.load.device)?;
        let probs = trained.predict(&mut engine, &trees)?;
        let s = Scores::of(&trees, &probs);
        println!(
            "{name} ({}): fine-grained {:.2}% ({}/{}), binary {:.2}% ({}/{}) [{} of {}]",
            path.display(),
            100.0 * s.fine(),
            s.fine_correct,
            s.fine_total,
            100.0 * s.binary(),
            s.binary_correct,
            s.binary_total,
            a.load.which.file(),
            a.load.checkpoint.display()
        );
        Ok(())
    })?
}

fn predict(a: PredictArgs) -> Result<()> {
    let (text, name) = match &a.file {
        Some(p) if p != Path::new("-") => (
            std::fs::read_to_string(p).map_err(|e| Error::io(p, e))?,
            p.display().to_string(),
        ),
        _ => {
            let mut s = String::new();
            io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Error::io("<stdin>", e))?;
            (s, "<stdin>".to_string())
        }
    };
    let trees = parse_trees(&text, &name)?;
    let probs = with_threads(a.load.threads, || -> Result<_> {
        let mut trained = Trained::load(&a.load.checkpoint, a.load.which)?;
        trained.to_device(a.load.device)?;
        let mut engine = Engine::on(a.load.strategy, a.load.device)?;
        trained.predict(&mut engine, &trees)
    })??;
    let mut out = io::stdout().lock();
    for p in &probs {
        let line = format!(
            "{}\t{:.4} {:.4} {:.4} {:.4} {:.4}",
            fine_label(p),
            p[0],
            p[1],
            p[2],
            p[3],
            p[4]
        );
        if let Err(e) = writeln!(out, "{line}") {
            if e.kind() == io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(Error::io("<stdout>", e));
        }
    }
    Ok(())
}

fn plot(a: PlotArgs) -> Result<()> {
    let state = RunState::load(&a.checkpoint)?;
    let svg = match &a.out {
        Some(p) => p.clone(),
        None => {
            write_history(&a.checkpoint.join(HISTORY), &state.history)?;
            a.checkpoint.join(PLOT)
        }
    };
    write_plot(&svg, &state.history, &state.title())?;
    println!("wrote {} ({} epochs)", svg.display(), state.history.len());
    Ok(())
}
