//! The checkpoint directory of a training run and its JSON state.
//!
//! Layout (file names are the constants below):
//!
//! | file | contents |
//! |---|---|
//! | `last.safetensors` | parameters and optimizer state after the last finished epoch ([`sheaf_autodiff::Optimizer::save`]) |
//! | `best.safetensors` | parameters of the epoch with the best dev fine-grained accuracy ([`sheaf_autodiff::ParamStore::save`]) |
//! | `vocab.txt` | the vocabulary (`Vocab::to_text`), so word ids mean the same at evaluation |
//! | `state.json` | [`RunState`]: model and training settings, progress, best epoch, per-epoch history |
//! | `history.csv` | the history as a table |
//! | `training.svg` | dev accuracy and training loss per epoch |
//!
//! Every file is written atomically (a temporary file beside it, synced,
//! then renamed over it), so an interrupted run leaves complete files. The
//! state records the optimizer's step count, and a resume checks it against
//! `last.safetensors`, so a crash between the two writes is detected rather
//! than silently resumed from a mismatched pair.

use std::fs;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::error::{Error, Result};
use crate::model::ModelConfig;
use crate::sst::Vocab;

/// Parameters and optimizer state after the last finished epoch.
pub const LAST: &str = "last.safetensors";
/// The next [`LAST`] while an epoch's checkpoint is being saved: written
/// before `state.json`, renamed to [`LAST`] after it, so that a run killed
/// mid-save leaves a checkpoint and a state that agree on the step.
pub const LAST_PENDING: &str = "last.next.safetensors";
/// Parameters of the best epoch by dev fine-grained accuracy.
pub const BEST: &str = "best.safetensors";
/// The vocabulary.
pub const VOCAB: &str = "vocab.txt";
/// The run's [`RunState`].
pub const STATE: &str = "state.json";
/// The per-epoch history as CSV.
pub const HISTORY: &str = "history.csv";
/// The training curves.
pub const PLOT: &str = "training.svg";

/// `format` field of `state.json`.
pub const FORMAT: &str = "sheaf-sst-run";
/// `version` field of `state.json`.
pub const VERSION: u32 = 1;

/// What one epoch measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// Epoch number, from 1.
    pub epoch: usize,
    /// Optimizer steps taken by the end of the epoch (all epochs).
    pub step: u64,
    /// Training loss per node (summed cross-entropy over the epoch's nodes
    /// divided by their number), measured with dropout as trained.
    pub train_loss: f64,
    /// Trees trained on in the epoch.
    pub train_trees: usize,
    /// Seconds spent training (graph building, forward, backward, updates;
    /// evaluation and checkpoints excluded).
    pub train_seconds: f64,
    /// Training throughput, trees per second.
    pub trees_per_sec: f64,
    /// Dev fine-grained accuracy (all roots), in `[0, 1]`.
    pub dev_fine: f64,
    /// Dev binary accuracy (non-neutral roots), in `[0, 1]`.
    pub dev_binary: f64,
}

/// The best epoch so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Best {
    /// Its number.
    pub epoch: usize,
    /// Its dev fine-grained accuracy.
    pub dev_fine: f64,
    /// Its dev binary accuracy.
    pub dev_binary: f64,
}

/// `state.json`: everything needed to evaluate the run's checkpoints and to
/// resume it exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The model's settings (the parameters' shapes follow from them).
    pub model: ModelConfig,
    /// The training settings.
    pub train: TrainConfig,
    /// Epochs finished.
    pub epochs_done: usize,
    /// Optimizer steps taken.
    pub step: u64,
    /// The best epoch by dev fine-grained accuracy, once there is one.
    pub best: Option<Best>,
    /// Epochs without improvement of the best dev accuracy, for early
    /// stopping.
    pub stale_epochs: usize,
    /// One record per finished epoch.
    pub history: Vec<EpochRecord>,
}

impl RunState {
    /// A run that has not trained yet.
    pub fn new(model: ModelConfig, train: TrainConfig) -> Self {
        RunState {
            format: FORMAT.into(),
            version: VERSION,
            model,
            train,
            epochs_done: 0,
            step: 0,
            best: None,
            stale_epochs: 0,
            history: Vec::new(),
        }
    }

    /// Reads `dir/state.json`. Errors name the file: missing, unreadable,
    /// not JSON of this layout, another format or version.
    pub fn load(dir: &Path) -> Result<RunState> {
        let path = dir.join(STATE);
        if !dir.is_dir() {
            return Err(Error::checkpoint(dir, "no such directory"));
        }
        let text = fs::read_to_string(&path).map_err(|e| {
            Error::checkpoint(
                &path,
                format!("{e} (not a checkpoint directory of `sst train`?)"),
            )
        })?;
        let state: RunState = serde_json::from_str(&text)
            .map_err(|e| Error::checkpoint(&path, format!("corrupt run state: {e}")))?;
        if state.format != FORMAT || state.version != VERSION {
            return Err(Error::checkpoint(
                &path,
                format!(
                    "format {:?} version {} is not {FORMAT:?} version {VERSION}",
                    state.format, state.version
                ),
            ));
        }
        state
            .model
            .validate()
            .map_err(|e| Error::checkpoint(&path, e))?;
        Ok(state)
    }

    /// A one-line description of the run, for plots: optimizer, learning
    /// rate, batch size, dropout, seed.
    pub fn title(&self) -> String {
        let embed = match self.train.embed_lr {
            Some(lr) => format!(", embeddings SGD {lr}"),
            None => String::new(),
        };
        format!(
            "Tree-LSTM on SST ({} lr {}{embed}, batch {}, dropout {}/{}, seed {})",
            self.train.optimizer.name(),
            self.train.lr,
            self.train.batch_size,
            self.model.dropout_embed,
            self.model.dropout_output,
            self.train.seed
        )
    }

    /// Writes `dir/state.json` atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Config(format!("encoding the run state: {e}")))?;
        write_atomic(&dir.join(STATE), text.as_bytes())
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, written and synced, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(|e| Error::io(path, e))
}

/// Reads `dir/vocab.txt`.
pub fn read_vocab(dir: &Path) -> Result<Vocab> {
    let path = dir.join(VOCAB);
    let text = fs::read_to_string(&path).map_err(|e| Error::checkpoint(&path, e.to_string()))?;
    Ok(Vocab::from_text(&text, &path.display().to_string())?)
}
