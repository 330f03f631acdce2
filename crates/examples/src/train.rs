//! Training the Tree-LSTM on SST: minibatches in one graph, a chosen
//! executor, Adagrad or Adam, dev evaluation, checkpoints and exact resume.
//!
//! One step takes `batch_size` trees of the epoch's permutation, adds all
//! their losses to ONE graph (each tree's loss is the cross-entropy summed
//! over its nodes), sums them, and — with [`Reduction::Mean`], the default —
//! divides by the number of trees, so the gradient is the mean per-tree
//! gradient as in Tai et al.'s code. Averaging keeps the balance between
//! the data term and the L2 term (`weight_decay`) independent of the batch
//! size; Adagrad and Adam normalise the step size themselves, so the
//! reduction matters mostly through that balance. One forward, one backward
//! and one optimizer update per step.
//!
//! Randomness is a pure function of the seed: the model's initial values
//! of `seed`, the permutation of epoch `e` of `(seed, e)`, and the dropout
//! masks of step `s` of `(seed, s)` (via
//! [`sheaf_autodiff::Graph::set_seed`]). Since the optimizer state is
//! checkpointed with the parameters, a run resumed from `last.safetensors`
//! continues exactly as the uninterrupted run would have, bit for bit,
//! given the same executor kind and thread count (the `auto` executor may
//! pick differently after a resume).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sheaf_autodiff::{Expr, Optimizer, ParamStore};
use sheaf_sched::{DataParallel, Pipeline};
use sheaf_tensor::Device;

pub use crate::config::{default_data_dir, OptimizerKind, Reduction, TrainConfig};
use sheaf_blocks::Loss;

use crate::engine::{Engine, Exec};
use crate::error::{Error, Result};
use crate::eval::{evaluate, Scores};
use crate::model::{ModelConfig, TreeLstm};
use crate::plot::{write_history, write_plot};
use crate::sst::{read_embeddings, read_trees, Tree, Vocab};
pub use crate::state::read_vocab;
use crate::state::{
    Best, EpochRecord, RunState, BEST, HISTORY, LAST, LAST_PENDING, PLOT, STATE, VOCAB,
};
use crate::tree_lstm_blocks::{compile_training, Phrase, TrainingModel};

mod dist;
mod step;
pub use dist::DEFAULT_CHECK_EVERY;
use step::{dropout_seed, finish_step, minibatch_loss};

/// Trees with their words mapped to vocabulary ids.
#[derive(Debug, Clone, Default)]
pub struct Split {
    /// The trees.
    pub trees: Vec<Tree>,
    /// `ids[i][k]`: the vocabulary id of word `k` of `trees[i]`.
    pub ids: Vec<Vec<u32>>,
}

impl Split {
    /// The node count of the trees at positions `batch`.
    pub fn nodes(&self, batch: &[usize]) -> usize {
        batch.iter().map(|&i| self.trees[i].nodes.len()).sum()
    }

    /// Encodes `trees` with `vocab` (unknown words get `Vocab::UNK`).
    pub fn new(trees: Vec<Tree>, vocab: &Vocab) -> Split {
        let ids = trees.iter().map(|t| vocab.encode(t)).collect();
        Split { trees, ids }
    }

    /// Reads and encodes a PTB file.
    pub fn read(path: &Path, vocab: &Vocab) -> Result<Split> {
        Ok(Split::new(read_trees(path)?, vocab))
    }

    /// Number of trees.
    pub fn len(&self) -> usize {
        self.trees.len()
    }

    /// Whether there are no trees.
    pub fn is_empty(&self) -> bool {
        self.trees.is_empty()
    }
}

/// Settings a resumed run may change; `None` keeps the saved value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResumeChanges {
    /// A new total number of epochs.
    pub epochs: Option<usize>,
    /// Another executor (may change results in the last bits).
    pub exec: Option<Exec>,
    /// A new early-stopping patience.
    pub patience: Option<usize>,
}

/// Progress reports of [`Trainer::run`].
#[derive(Debug)]
pub enum Event<'a> {
    /// Something worth a line (data loaded, resumed, ...).
    Info(String),
    /// An epoch begins: `steps` updates over `trees` trees.
    EpochStart {
        /// Its number, from 1.
        epoch: usize,
        /// The run's total epochs.
        epochs: usize,
        /// Training trees.
        trees: usize,
    },
    /// A step finished.
    Step {
        /// Trees done in this epoch.
        trees_done: usize,
        /// Mean training loss per node so far in this epoch.
        loss: f64,
        /// Training throughput so far in this epoch.
        trees_per_sec: f64,
    },
    /// The epoch's training is done; dev evaluation follows.
    Evaluating,
    /// An epoch finished and was checkpointed.
    EpochEnd {
        /// What it measured.
        record: &'a EpochRecord,
        /// Whether it is the new best (`best.safetensors` was written).
        best: bool,
    },
    /// Training stopped early (no dev improvement for `patience` epochs).
    EarlyStop {
        /// The best epoch.
        best_epoch: usize,
    },
}

/// A training run bound to its checkpoint directory.
pub struct Trainer {
    dir: PathBuf,
    state: RunState,
    vocab: Vocab,
    model: TreeLstm,
    store: ParamStore,
    opt: Optimizer,
    embed_opt: Option<Optimizer>,
    engine: Engine,
    /// The one-graph steps' graphs: the next step's is built while the
    /// current one runs.
    pipeline: Pipeline,
    /// Each step's trees in parts run side by side (`set_parallel`).
    parallel: Option<DataParallel>,
    /// The blocks-written model and the training trees as phrases, when
    /// the run builds its graphs with blocks.
    blocks: Option<(TrainingModel, Vec<Phrase>)>,
    train: Split,
    dev: Split,
    /// Training across ranks (`set_distributed`).
    dist: Option<dist::Distributed>,
}

/// The blocks-written model, compiled for `cfg`'s executor, and the
/// training trees as its input.
fn blocks_run(
    model: &TreeLstm,
    cfg: &TrainConfig,
    train: &Split,
) -> Result<Option<(TrainingModel, Vec<Phrase>)>> {
    if !cfg.blocks {
        return Ok(None);
    }
    let compiled = compile_training(model)?.with_strategy(cfg.exec.strategy());
    let phrases = train
        .trees
        .iter()
        .zip(&train.ids)
        .map(|(t, ids)| Phrase::from_tree(t, ids))
        .collect::<std::result::Result<_, _>>()?;
    Ok(Some((compiled, phrases)))
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("dir", &self.dir)
            .field("epochs_done", &self.state.epochs_done)
            .field("step", &self.state.step)
            .finish()
    }
}

/// The training trees of a run: `train.txt`, cut to `max_train_trees`.
fn training_trees(cfg: &TrainConfig) -> Result<Vec<Tree>> {
    let mut trees = read_trees(&cfg.data_dir.join("train.txt"))?;
    if let Some(n) = cfg.max_train_trees {
        trees.truncate(n);
    }
    if trees.is_empty() {
        return Err(Error::Config(format!(
            "{}: no training trees",
            cfg.data_dir.join("train.txt").display()
        )));
    }
    Ok(trees)
}

impl Trainer {
    /// Starts a new run in `dir` (created if needed): reads the data,
    /// builds the vocabulary from the training trees, initialises the
    /// model (`model.vocab` is set from the vocabulary), loads pretrained
    /// embeddings if configured, and writes the vocabulary, the state and
    /// the initial `last.safetensors`. A directory that already holds a run
    /// is an error unless `overwrite`, which deletes that run's files.
    pub fn new(
        dir: &Path,
        model: ModelConfig,
        cfg: TrainConfig,
        overwrite: bool,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<Trainer> {
        Trainer::create(dir, model, cfg, overwrite, true, on)
    }

    /// Prepares the directory of a new run (deleting an old run's files
    /// with `overwrite`) and writes its vocabulary, initial checkpoint and
    /// state.
    fn write_new_run(&self, overwrite: bool) -> Result<()> {
        let dir = &self.dir;
        prepare_dir(dir, overwrite)?;
        let vocab_path = dir.join(VOCAB);
        crate::state::write_atomic(&vocab_path, self.vocab.to_text().as_bytes())?;
        save_last(&self.opt, &self.store, dir)?;
        self.state.save(dir)
    }

    fn create(
        dir: &Path,
        mut model: ModelConfig,
        cfg: TrainConfig,
        overwrite: bool,
        writes: bool,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<Trainer> {
        cfg.validate()?;
        if writes && !overwrite && dir.join(STATE).exists() {
            // Checked again (and old files deleted) once the new run is set up.
            prepare_dir(dir, false)?;
        }
        let trees = training_trees(&cfg)?;
        let vocab = Vocab::from_trees(&trees);
        let train = Split::new(trees, &vocab);
        let dev = Split::read(&cfg.data_dir.join("dev.txt"), &vocab)?;
        model.vocab = vocab.len();
        model.validate().map_err(Error::Config)?;
        on(Event::Info(format!(
            "data: {} training trees, {} dev trees, vocabulary {} words",
            train.len(),
            dev.len(),
            vocab.len()
        )));
        let mut store = ParamStore::new();
        let net = vertex_or_inline(TreeLstm::new(&mut store, &model, cfg.seed)?, cfg.inline)?;
        if let Some(path) = &cfg.embeddings {
            let pre = read_embeddings(path, &vocab)?;
            let n = net
                .load_pretrained(&mut store, &pre)
                .map_err(|e| Error::Config(format!("embeddings {}: {e}", path.display())))?;
            on(Event::Info(format!(
                "embeddings: {n} of {} vocabulary words found in {}",
                vocab.len(),
                path.display()
            )));
        }
        let opt = cfg.optimizer();
        let state = RunState::new(model, cfg.clone());
        let blocks = blocks_run(&net, &cfg, &train)?;
        let t = Trainer {
            dir: dir.to_path_buf(),
            state,
            vocab,
            model: net,
            store,
            opt,
            embed_opt: cfg.embed_optimizer(),
            engine: Engine::new(cfg.exec),
            pipeline: Pipeline::new(),
            parallel: None,
            blocks,
            train,
            dev,
            dist: None,
        };
        if writes {
            t.write_new_run(overwrite)?;
        }
        Ok(t)
    }

    /// Reopens the run in `dir` after its last finished epoch: settings,
    /// vocabulary, parameters and optimizer state as saved, with `changes`
    /// applied.
    pub fn resume(dir: &Path, changes: ResumeChanges) -> Result<Trainer> {
        let mut state = RunState::load(dir)?;
        if let Some(e) = changes.epochs {
            state.train.epochs = e;
        }
        if let Some(x) = changes.exec {
            state.train.exec = x;
        }
        if let Some(p) = changes.patience {
            state.train.patience = Some(p);
        }
        let vocab = read_vocab(dir)?;
        if vocab.len() != state.model.vocab {
            return Err(Error::checkpoint(
                dir.join(VOCAB),
                format!(
                    "holds {} words, but the model was built for {}",
                    vocab.len(),
                    state.model.vocab
                ),
            ));
        }
        let trees = training_trees(&state.train)?;
        let dev = Split::read(&state.train.data_dir.join("dev.txt"), &vocab)?;
        let mut store = ParamStore::new();
        let model = TreeLstm::new(&mut store, &state.model, state.train.seed)?;
        let model = vertex_or_inline(model, state.train.inline)?;
        let last = dir.join(LAST);
        let load = |store: &mut ParamStore, path: &Path| {
            Optimizer::load(store, path).map_err(|e| Error::checkpoint(path, e.to_string()))
        };
        let mut opt = load(&mut store, &last)?;
        let pending = dir.join(LAST_PENDING);
        if opt.steps() != state.step && pending.exists() {
            // Killed after state.json, before the rename: the pending
            // checkpoint is the one the state records.
            let next = load(&mut store, &pending)?;
            if next.steps() == state.step {
                fs::rename(&pending, &last).map_err(|e| Error::io(&last, e))?;
                opt = next;
            }
        }
        if opt.steps() != state.step {
            return Err(Error::checkpoint(
                &last,
                format!(
                    "holds step {} but {} records step {} (interrupted while saving?)",
                    opt.steps(),
                    STATE,
                    state.step
                ),
            ));
        }
        let exec = state.train.exec;
        let embed_opt = state.train.embed_optimizer();
        let train = Split::new(trees, &vocab);
        let blocks = blocks_run(&model, &state.train, &train)?;
        Ok(Trainer {
            dir: dir.to_path_buf(),
            train,
            blocks,
            state,
            vocab,
            model,
            store,
            opt,
            embed_opt,
            engine: Engine::new(exec),
            pipeline: Pipeline::new(),
            parallel: None,
            dev,
            dist: None,
        })
    }

    /// Runs training and evaluation on `device` from now on: the parameters
    /// (and, at the next step, the optimizers' state) move there and the
    /// executor is rebuilt for it. A run's device is not part of its saved
    /// state: a run trained on a GPU resumes on the CPU and vice versa.
    pub fn to_device(&mut self, device: Device) -> Result<()> {
        if self.parallel.is_some() && device != Device::Cpu {
            return Err(Error::Config(
                "--parallel runs its parts on the CPU's threads, not on a GPU".into(),
            ));
        }
        let exec = self.state.train.exec;
        let engine = Engine::on(exec, device)?;
        let blocks_exec = match self.blocks {
            Some(_) => Some(
                sheaf_sched::Executor::on(exec.strategy(), device)
                    .map_err(|e| Error::Config(format!("device: {e}")))?,
            ),
            None => None,
        };
        self.store.to_device(device)?;
        self.engine = engine;
        // The blocks-written model runs its graphs with its own executor.
        if let (Some((compiled, phrases)), Some(x)) = (self.blocks.take(), blocks_exec) {
            self.blocks = Some((compiled.with_executor(x), phrases));
        }
        Ok(())
    }

    /// Runs each step's trees in `parts` parts side by side from now on, one
    /// graph and executor per part on the thread pool
    /// ([`DataParallel`]; 1 = one graph per step). Faster with several
    /// cores; losses and gradients equal the one-graph step's up to
    /// summation order, but dropout masks depend on the parts (each part's
    /// graph has its own seed). Not part of the saved state, like the
    /// thread count. Needs the hand-written model, a batching strategy
    /// and the CPU.
    pub fn set_parallel(&mut self, parts: usize) -> Result<()> {
        if parts <= 1 {
            self.parallel = None;
            return Ok(());
        }
        let exec = self.state.train.exec;
        let refuse = |why: &str| Err(Error::Config(format!("--parallel {parts}: {why}")));
        if self.dist.is_some() {
            return refuse("a distributed run's ranks take one graph each; run more ranks instead");
        }
        if self.blocks.is_some() {
            return refuse("the model written with blocks runs one graph per step");
        }
        if exec == Exec::Sequential {
            return refuse("the sequential executor does not batch; choose depth or agenda");
        }
        if self.engine.device() != Device::Cpu {
            return refuse("the parts run on the CPU's threads, not on a GPU");
        }
        self.parallel = Some(DataParallel::new(exec.strategy(), parts));
        Ok(())
    }

    /// The run's state (settings, progress, history).
    pub fn state(&self) -> &RunState {
        &self.state
    }

    /// The model.
    pub fn model(&self) -> &TreeLstm {
        &self.model
    }

    /// The parameters.
    pub fn store(&self) -> &ParamStore {
        &self.store
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Trains until the configured number of epochs is finished or early
    /// stopping triggers, evaluating on dev and checkpointing after each
    /// epoch.
    pub fn run(&mut self, on: &mut dyn FnMut(Event<'_>)) -> Result<()> {
        while self.state.epochs_done < self.state.train.epochs {
            if let (Some(p), Some(best)) = (self.state.train.patience, &self.state.best) {
                if self.state.stale_epochs >= p {
                    on(Event::EarlyStop {
                        best_epoch: best.epoch,
                    });
                    break;
                }
            }
            self.epoch(on)?;
        }
        Ok(())
    }

    /// Trains one epoch, evaluates on dev, and checkpoints.
    pub fn epoch(&mut self, on: &mut dyn FnMut(Event<'_>)) -> Result<EpochRecord> {
        let epoch = self.state.epochs_done + 1;
        let n = self.train.len();
        on(Event::EpochStart {
            epoch,
            epochs: self.state.train.epochs,
            trees: n,
        });
        let order = permutation(n, mix(self.state.train.seed, epoch as u64));
        let start = Instant::now();
        let (mut loss_sum, mut nodes, mut done) = (0.0f64, 0usize, 0usize);
        let mut stepped = |loss: f64, k: usize, trees: usize| {
            loss_sum += loss;
            nodes += k;
            done += trees;
            on(Event::Step {
                trees_done: done,
                loss: loss_sum / nodes.max(1) as f64,
                trees_per_sec: done as f64 / start.elapsed().as_secs_f64().max(1e-9),
            });
        };
        let chunks = order.chunks(self.state.train.batch_size);
        if self.dist.is_some() {
            for chunk in chunks {
                let (loss, k) = self.distributed_step(chunk)?;
                stepped(loss, k, chunk.len());
            }
        } else if self.blocks.is_none() && self.parallel.is_none() {
            self.one_graph_steps(chunks, &mut stepped)?;
        } else {
            for chunk in chunks {
                let (loss, k) = self.step(chunk)?;
                stepped(loss, k, chunk.len());
            }
        }
        let secs = start.elapsed().as_secs_f64();
        on(Event::Evaluating);
        let scores = self.evaluate_dev()?;
        let record = EpochRecord {
            epoch,
            step: self.state.step,
            train_loss: loss_sum / nodes.max(1) as f64,
            train_trees: n,
            train_seconds: secs,
            trees_per_sec: n as f64 / secs.max(1e-9),
            dev_fine: scores.fine(),
            dev_binary: scores.binary(),
        };
        let better = self
            .state
            .best
            .as_ref()
            .is_none_or(|b| record.dev_fine > b.dev_fine);
        let writes = self.writes();
        if better && writes {
            self.store
                .save(self.dir.join(BEST))
                .map_err(|e| Error::checkpoint(self.dir.join(BEST), e.to_string()))?;
        }
        if better {
            self.state.best = Some(Best {
                epoch,
                dev_fine: record.dev_fine,
                dev_binary: record.dev_binary,
            });
            self.state.stale_epochs = 0;
        } else {
            self.state.stale_epochs += 1;
        }
        self.state.epochs_done = epoch;
        self.state.history.push(record.clone());
        if writes {
            // The checkpoint and state.json must agree on the step even if
            // the process is killed between them: the checkpoint goes to a
            // pending file, state.json follows, then the rename (resume
            // takes the pending file where the state already records it).
            let (pending, last) = (self.dir.join(LAST_PENDING), self.dir.join(LAST));
            self.opt
                .save(&self.store, &pending)
                .map_err(|e| Error::checkpoint(&pending, e.to_string()))?;
            self.state.save(&self.dir)?;
            fs::rename(&pending, &last).map_err(|e| Error::io(&last, e))?;
            write_history(&self.dir.join(HISTORY), &self.state.history)?;
            write_plot(
                &self.dir.join(PLOT),
                &self.state.history,
                &self.state.title(),
            )?;
        }
        on(Event::EpochEnd {
            record: &record,
            best: better,
        });
        Ok(record)
    }

    /// The steps with one graph each, on the minibatches of positions
    /// `chunks` in turn, each minibatch's graph built while the previous
    /// one runs ([`Pipeline`]); `stepped(loss, nodes, trees)` after each.
    fn one_graph_steps<'a>(
        &mut self,
        chunks: impl Iterator<Item = &'a [usize]>,
        stepped: &mut dyn FnMut(f64, usize, usize),
    ) -> Result<()> {
        let Trainer {
            state,
            model,
            store,
            opt,
            embed_opt,
            engine,
            pipeline,
            train,
            ..
        } = self;
        let (seed, first) = (state.train.seed, state.step);
        let mean = state.train.reduction == Reduction::Mean;
        let (model, train) = (&*model, &*train);
        let batches = chunks
            .enumerate()
            .map(|(k, chunk)| (first + k as u64, chunk));
        pipeline.run(
            batches,
            |g, &(step, chunk)| {
                g.set_train(true);
                g.set_seed(dropout_seed(seed, step));
                minibatch_loss(model, train, g, chunk, mean, chunk.len())
            },
            |g, (total, loss), (_, chunk)| {
                engine.backward(g, store, loss)?;
                let value = g
                    .value(total)?
                    .to_vec::<f32>()
                    .map_err(|e| Error::Config(format!("reading the loss: {e}")))?[0];
                // The graph holds the parameters' values: cleared first, the
                // update writes them in place instead of copying them.
                g.clear();
                let step = &mut state.step;
                finish_step(value, step, model, store, opt, embed_opt.as_mut())?;
                stepped(value as f64, train.nodes(chunk), chunk.len());
                Ok(())
            },
        )
    }

    /// One update on the training trees at positions `batch` with the
    /// blocks-written model or in parts ([`DataParallel`]); returns the
    /// summed loss and the number of nodes.
    fn step(&mut self, batch: &[usize]) -> Result<(f64, usize)> {
        let seed = dropout_seed(self.state.train.seed, self.state.step);
        let mean = self.state.train.reduction == Reduction::Mean;
        let value = if let Some((compiled, phrases)) = &mut self.blocks {
            compiled.set_train(true);
            compiled.set_seed(seed);
            let loss = if mean {
                Loss::metric("loss").mean()
            } else {
                Loss::metric("loss")
            };
            let value =
                compiled.backward(&self.store, batch.iter().map(|&i| &phrases[i]), &loss)?;
            if mean {
                value * batch.len() as f32
            } else {
                value
            }
        } else {
            let dp = self.parallel.as_mut().ok_or_else(|| {
                Error::Config("a step with one graph runs through one_graph_steps".into())
            })?;
            let (model, train, n) = (&self.model, &self.train, batch.len());
            let total = dp.backward(&self.store, batch, |k, g, chunk| -> Result<Expr> {
                g.set_train(true);
                g.set_seed(mix(seed, k as u64));
                Ok(minibatch_loss(model, train, g, chunk, mean, n)?.1)
            })?;
            if mean {
                total * n as f32
            } else {
                total
            }
        };
        finish_step(
            value,
            &mut self.state.step,
            &self.model,
            &mut self.store,
            &mut self.opt,
            self.embed_opt.as_mut(),
        )?;
        Ok((value as f64, self.train.nodes(batch)))
    }

    /// Fine-grained and binary accuracy on the dev set (deterministic).
    /// In a distributed run each rank scores its part of the dev set and
    /// the counts are summed over the ranks: the same scores, N times
    /// sooner.
    pub fn evaluate_dev(&mut self) -> Result<Scores> {
        if self.dist.is_some() {
            return self.evaluate_dev_distributed();
        }
        evaluate(
            &self.model,
            &self.store,
            &mut self.engine,
            &self.dev.trees,
            &self.dev.ids,
        )
    }
}

/// Creates `dir`, refusing to overwrite a run unless `overwrite`.
fn prepare_dir(dir: &Path, overwrite: bool) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let state = dir.join(STATE);
    if state.exists() {
        if !overwrite {
            return Err(Error::checkpoint(
                dir,
                "already holds a training run (pass --resume to continue it, \
                 --overwrite to start over, or another --checkpoint-dir)",
            ));
        }
        for name in [STATE, LAST, LAST_PENDING, BEST, VOCAB, HISTORY, PLOT] {
            let p = dir.join(name);
            if p.exists() {
                fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
            }
        }
    }
    Ok(())
}

fn save_last(opt: &Optimizer, store: &ParamStore, dir: &Path) -> Result<()> {
    let path = dir.join(LAST);
    opt.save(store, &path)
        .map_err(|e| Error::checkpoint(&path, e.to_string()))
}

/// SplitMix64's output function: a well-mixed 64-bit hash of `x`.
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A seed derived from `seed` and `k` (epoch, step): different `k` give
/// unrelated streams.
pub fn mix(seed: u64, k: u64) -> u64 {
    splitmix(seed ^ splitmix(k))
}

/// A permutation of `0..n` drawn (Fisher–Yates) from a SplitMix64 stream
/// started at `seed`; depends on nothing else (no library version).
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = seed;
    for i in (1..n).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let r = splitmix(state);
        let j = ((r as u128 * (i as u128 + 1)) >> 64) as usize;
        order.swap(i, j);
    }
    order
}

/// Runs `f` in a rayon pool of `threads` threads (0 = all cores); sheaf's
/// kernels split large products over the current pool.
pub fn with_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> Result<T> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::Config(format!("cannot start {threads} threads: {e}")))?;
    Ok(pool.install(f))
}

/// The model with its vertex functions (the default), or inline.
fn vertex_or_inline(model: TreeLstm, inline: bool) -> Result<TreeLstm> {
    match inline {
        true => Ok(model),
        false => Ok(model.with_vertex_functions()?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_permutations_and_depend_on_the_seed() {
        let a = permutation(100, 1);
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
        assert_eq!(a, permutation(100, 1));
        assert_ne!(a, permutation(100, 2));
        assert!(permutation(0, 1).is_empty());
    }
}
