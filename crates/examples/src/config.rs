//! The settings of a training run ([`TrainConfig`]): data, optimizer,
//! reduction, seed, executor. Kept apart from the training loop so that the
//! run state ([`crate::state`]) can record them without depending on it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sheaf_autodiff::{Adagrad, Adam, Optimizer, Sgd};

use crate::engine::Exec;
use crate::error::{Error, Result};

/// The repository's SST directory (`data/sst`), found from this crate's
/// location at compile time (`CARGO_MANIFEST_DIR`); `--data-dir`
/// overrides it.
pub fn default_data_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().and_then(Path::parent).unwrap_or(manifest);
    root.join("data").join("sst")
}

/// The update rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Adagrad (Tai et al. 2015: lr 0.05), lazy rows for the embeddings.
    #[default]
    Adagrad,
    /// Adam (lr 1e-3 usually), lazy rows for the embeddings.
    Adam,
}

impl OptimizerKind {
    /// `"adagrad"` or `"adam"`.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Adagrad => "adagrad",
            OptimizerKind::Adam => "adam",
        }
    }

    /// The usual learning rate of the rule: 0.05 for Adagrad, 0.001 for
    /// Adam.
    pub fn default_lr(self) -> f32 {
        match self {
            OptimizerKind::Adagrad => 0.05,
            OptimizerKind::Adam => 0.001,
        }
    }
}

/// How the losses of a minibatch's trees are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Reduction {
    /// Mean over the batch's trees of each tree's summed node losses.
    #[default]
    Mean,
    /// Sum over the batch's trees.
    Sum,
}

/// The settings of a training run (saved in `state.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Directory of `train.txt`, `dev.txt` and `test.txt`.
    pub data_dir: PathBuf,
    /// Epochs to train in all (a resumed run counts the finished ones).
    pub epochs: usize,
    /// Trees per update (at least 1).
    pub batch_size: usize,
    /// The update rule.
    pub optimizer: OptimizerKind,
    /// Learning rate.
    pub lr: f32,
    /// L2 weight decay (added to the gradient as `weight_decay * w`; for
    /// the embedding table only on the rows a step touches).
    pub weight_decay: f32,
    /// How a batch's tree losses are combined.
    pub reduction: Reduction,
    /// Clips the global gradient norm of a step to this value, if set.
    pub clip_norm: Option<f32>,
    /// When set, the embedding table is updated by plain SGD with this
    /// learning rate and no weight decay (Tai et al.'s recipe), and the
    /// optimizer above updates (and decays) only the other parameters.
    /// When unset, the optimizer updates the table like every parameter
    /// (lazily: only the rows a step touched).
    #[serde(default)]
    pub embed_lr: Option<f32>,
    /// Seed of initialisation, shuffling and dropout.
    pub seed: u64,
    /// How graphs are executed.
    pub exec: Exec,
    /// Train on the first N training trees only.
    pub max_train_trees: Option<usize>,
    /// Pretrained word vectors copied into the embedding table at the start.
    pub embeddings: Option<PathBuf>,
    /// Stop after this many epochs without a better dev accuracy.
    pub patience: Option<usize>,
    /// Build the training graphs with the model written with blocks
    /// ([`crate::tree_lstm_blocks`]) instead of the hand-written one: the
    /// same model and parameters (with dropout the masks differ: they are
    /// drawn per node position).
    #[serde(default)]
    pub blocks: bool,
    /// Build every tree node's ops one by one instead of as calls of the
    /// model's vertex functions (`TreeLstm::with_vertex_functions`, the
    /// default: the same values, a third of the graph nodes; W1's step
    /// 1.05-1.10x faster on one thread, the default 3-epoch run equal on
    /// 2 cores); for comparison. Dropout masks differ between the two
    /// (drawn per call, not per node).
    #[serde(default)]
    pub inline: bool,
}

impl TrainConfig {
    /// Tai et al.'s settings on `data_dir`: Adagrad lr 0.05, L2 1e-4,
    /// batches of 25 trees (mean loss), 3 epochs, seed 1, agenda batching.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        TrainConfig {
            data_dir: data_dir.into(),
            epochs: 3,
            batch_size: 25,
            optimizer: OptimizerKind::Adagrad,
            lr: 0.05,
            weight_decay: 1e-4,
            reduction: Reduction::Mean,
            clip_norm: None,
            embed_lr: None,
            seed: 1,
            exec: Exec::Agenda,
            max_train_trees: None,
            embeddings: None,
            patience: None,
            blocks: false,
            inline: false,
        }
    }

    /// Checks the settings; the message names the offending one.
    pub fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(Error::Config(s));
        if self.batch_size == 0 {
            return bad("the batch size must be at least 1".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!(
                "the learning rate must be positive, it is {}",
                self.lr
            ));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad(format!(
                "the weight decay must be >= 0, it is {}",
                self.weight_decay
            ));
        }
        if let Some(c) = self.clip_norm {
            if !(c.is_finite() && c > 0.0) {
                return bad(format!("the clipping norm must be positive, it is {c}"));
            }
        }
        if let Some(lr) = self.embed_lr {
            if !(lr.is_finite() && lr >= 0.0) {
                return bad(format!(
                    "the embedding learning rate must be >= 0, it is {lr}"
                ));
            }
        }
        if self.max_train_trees == Some(0) {
            return bad("--max-train-trees must be at least 1".into());
        }
        Ok(())
    }

    /// The optimizer these settings describe (no state).
    pub fn optimizer(&self) -> Optimizer {
        let opt = match self.optimizer {
            OptimizerKind::Adagrad => Optimizer::adagrad(Adagrad {
                lr: self.lr,
                eps: 1e-8,
                weight_decay: self.weight_decay,
            }),
            OptimizerKind::Adam => Optimizer::adam(Adam {
                lr: self.lr,
                weight_decay: self.weight_decay,
                ..Adam::default()
            }),
        };
        match self.clip_norm {
            Some(c) => opt.with_clip_norm(c),
            None => opt,
        }
    }

    /// The embedding table's own optimizer, if `embed_lr` is set: SGD
    /// without momentum, so it keeps no state to checkpoint.
    pub fn embed_optimizer(&self) -> Option<Optimizer> {
        self.embed_lr.map(|lr| {
            Optimizer::sgd(Sgd {
                lr,
                momentum: 0.0,
                weight_decay: 0.0,
            })
        })
    }
}
