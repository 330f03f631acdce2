//! Predictions and the SST metrics.
//!
//! A sentence's prediction is the softmax of its ROOT's logits (evaluation
//! mode: no dropout). Fine-grained accuracy compares the argmax over the
//! five classes with the gold root label, on every sentence. Binary
//! accuracy counts only sentences whose gold label is not neutral (2): the
//! prediction is positive when `p(3) + p(4) > p(0) + p(1)`, and it is right
//! when the gold label is 3 or 4 exactly then (the usual protocol, e.g.
//! Tai et al. 2015 evaluate the 5-class model this way; 872 of the 1101 dev
//! and 1821 of the 2210 test sentences count).

use std::path::Path;

use sheaf_autodiff::{Graph, ParamStore};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::TreeLstm;
use crate::sst::{Tree, Vocab, CLASSES};
use crate::state::{read_vocab, RunState, BEST, LAST};

/// Class probabilities of one sentence.
pub type Probs = [f32; CLASSES];

/// Trees per evaluation graph (as many as fit comfortably; the result does
/// not depend on it beyond float rounding of batched products).
pub const EVAL_BATCH: usize = 256;

/// The fine-grained (argmax) label of a prediction; ties go to the lower
/// class.
pub fn fine_label(p: &Probs) -> u8 {
    let mut best = 0;
    for k in 1..CLASSES {
        if p[k] > p[best] {
            best = k;
        }
    }
    best as u8
}

/// Whether a prediction counts as positive in the binary task:
/// `p(3) + p(4) > p(0) + p(1)`.
pub fn binary_positive(p: &Probs) -> bool {
    p[3] + p[4] > p[0] + p[1]
}

/// Correct counts of the fine-grained and binary tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scores {
    /// Sentences whose argmax equals the gold root label.
    pub fine_correct: usize,
    /// Sentences scored in the fine-grained task (all).
    pub fine_total: usize,
    /// Non-neutral sentences whose polarity was predicted right.
    pub binary_correct: usize,
    /// Non-neutral sentences (gold root label != 2).
    pub binary_total: usize,
}

impl Scores {
    /// Scores predictions `probs[i]` of `trees[i]` by their gold root labels.
    pub fn of(trees: &[Tree], probs: &[Probs]) -> Scores {
        let mut s = Scores::default();
        for (tree, p) in trees.iter().zip(probs) {
            let Some(gold) = tree.root_label() else {
                continue;
            };
            s.fine_total += 1;
            s.fine_correct += usize::from(fine_label(p) == gold);
            if gold != 2 {
                s.binary_total += 1;
                s.binary_correct += usize::from(binary_positive(p) == (gold > 2));
            }
        }
        s
    }

    /// Fine-grained accuracy in `[0, 1]` (0 when nothing was scored).
    pub fn fine(&self) -> f64 {
        ratio(self.fine_correct, self.fine_total)
    }

    /// Binary accuracy in `[0, 1]` (0 when nothing was scored).
    pub fn binary(&self) -> f64 {
        ratio(self.binary_correct, self.binary_total)
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Root class probabilities of `trees` (`ids[i]` maps the words of
/// `trees[i]` to vocabulary ids), computed in evaluation mode in graphs of
/// [`EVAL_BATCH`] trees. Deterministic: the same inputs, parameters and
/// executor kind give the same bits.
pub fn predict(
    model: &TreeLstm,
    store: &ParamStore,
    engine: &mut Engine,
    trees: &[Tree],
    ids: &[Vec<u32>],
) -> Result<Vec<Probs>> {
    if trees.len() != ids.len() {
        return Err(Error::Config(format!(
            "predict: {} trees but {} word-id lists",
            trees.len(),
            ids.len()
        )));
    }
    let mut g = Graph::new();
    let mut out = Vec::with_capacity(trees.len());
    for (chunk, chunk_ids) in trees.chunks(EVAL_BATCH).zip(ids.chunks(EVAL_BATCH)) {
        g.clear();
        g.set_train(false);
        let mut probs = Vec::with_capacity(chunk.len());
        for (tree, ids) in chunk.iter().zip(chunk_ids) {
            let logits = model.root_logits(&mut g, tree, ids)?;
            probs.push(g.softmax(logits)?);
        }
        let Some(&last) = probs.last() else { continue };
        engine.forward_only(&mut g, store, last)?;
        for p in probs {
            let v = g
                .value(p)?
                .to_vec::<f32>()
                .map_err(|e| Error::Config(format!("predict: reading a prediction failed: {e}")))?;
            let mut row = [0.0f32; CLASSES];
            row.copy_from_slice(&v[..CLASSES]);
            out.push(row);
        }
    }
    Ok(out)
}

/// Predicts `trees` and scores them against their gold root labels.
pub fn evaluate(
    model: &TreeLstm,
    store: &ParamStore,
    engine: &mut Engine,
    trees: &[Tree],
    ids: &[Vec<u32>],
) -> Result<Scores> {
    let probs = predict(model, store, engine, trees, ids)?;
    Ok(Scores::of(trees, &probs))
}

/// Which parameters of a checkpoint directory to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Which {
    /// `best.safetensors`: the epoch with the best dev accuracy.
    #[default]
    Best,
    /// `last.safetensors`: the last finished epoch.
    Last,
}

impl Which {
    /// The file name in the checkpoint directory.
    pub fn file(self) -> &'static str {
        match self {
            Which::Best => BEST,
            Which::Last => LAST,
        }
    }
}

/// A trained model loaded from a checkpoint directory of `sst train`.
#[derive(Debug)]
pub struct Trained {
    /// The run's state (settings and history).
    pub state: RunState,
    /// The vocabulary the model was trained with.
    pub vocab: Vocab,
    /// The model.
    pub model: TreeLstm,
    /// Its parameters.
    pub store: ParamStore,
}

impl Trained {
    /// Loads `dir`'s state, vocabulary and the parameters `which` names.
    /// Errors name the missing or corrupt file.
    pub fn load(dir: &Path, which: Which) -> Result<Trained> {
        let state = RunState::load(dir)?;
        let vocab = read_vocab(dir)?;
        if vocab.len() != state.model.vocab {
            return Err(Error::checkpoint(
                dir.join(crate::state::VOCAB),
                format!(
                    "holds {} words, but the model was built for {}",
                    vocab.len(),
                    state.model.vocab
                ),
            ));
        }
        let mut store = ParamStore::new();
        let model = TreeLstm::new(&mut store, &state.model, 0)?;
        let path = dir.join(which.file());
        if !path.exists() && which == Which::Best {
            return Err(Error::checkpoint(
                &path,
                "missing (no epoch has finished yet? `--which last` loads the last state)",
            ));
        }
        store
            .load(&path)
            .map_err(|e| Error::checkpoint(&path, e.to_string()))?;
        Ok(Trained {
            state,
            vocab,
            model,
            store,
        })
    }

    /// Moves the parameters to `device` (run with an engine on it:
    /// `Engine::on`).
    pub fn to_device(&mut self, device: sheaf_tensor::Device) -> Result<()> {
        self.store.to_device(device)?;
        Ok(())
    }

    /// Root class probabilities of `trees` (words mapped with the run's
    /// vocabulary; unknown words share the `<unk>` row).
    pub fn predict(&self, engine: &mut Engine, trees: &[Tree]) -> Result<Vec<Probs>> {
        let ids: Vec<Vec<u32>> = trees.iter().map(|t| self.vocab.encode(t)).collect();
        predict(&self.model, &self.store, engine, trees, &ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sst::Node;

    fn tree(label: u8) -> Tree {
        Tree {
            nodes: vec![Node::Leaf { word: 0, label }],
            words: vec!["w".into()],
        }
    }

    #[test]
    fn metrics_follow_the_protocol() {
        let trees: Vec<Tree> = [0, 2, 3, 4].into_iter().map(tree).collect();
        let probs = [
            [0.5, 0.1, 0.1, 0.2, 0.1],   // gold 0: fine right, negative: right
            [0.1, 0.1, 0.3, 0.4, 0.1],   // gold 2: fine wrong, not binary
            [0.3, 0.1, 0.35, 0.1, 0.15], // gold 3: fine wrong (2), 0.25 < 0.4: wrong
            [0.0, 0.1, 0.2, 0.3, 0.4],   // gold 4: fine right, binary right
        ];
        let s = Scores::of(&trees, &probs);
        assert_eq!(
            s,
            Scores {
                fine_correct: 2,
                fine_total: 4,
                binary_correct: 2,
                binary_total: 3
            }
        );
        assert_eq!(fine_label(&[0.2; 5]), 0);
    }
}
