//! §3.3 of the TensorFlow Fold paper: `text2vec` and its label loss,
//! written with blocks ([`Text2Vec::blocks`]) and, for comparison,
//! directly on the graph ([`Text2Vec::direct_loss`]); both give the same
//! numbers (tested).
//!
//! ```text
//! word2vec = InputTransform(word -> id?) >> Optional(Embedding)
//! text2vec = InputTransform(split) >> Map(word2vec) >> Fold(Concat >> FC, Zeros)
//! loss     = Record(text2vec, label) >> Function(softmax cross-entropy)
//! ```
//!
//! Words seen fewer than `min_count` times in training are unknown and
//! embed as zeros (the paper's `Optional` for words without a vector).

use std::collections::HashMap;
use std::sync::Arc;

use rand::Rng;
use sheaf_autodiff::{Expr, Graph, GraphError, Init, Param, ParamStore};
use sheaf_blocks::{
    field, AllOf, Block, BlockError, BlockExt, Concat, Embedding, Fold, Function, Identity,
    InputTransform, Map, Metric, Optional, Record, Zeros, FC,
};

use crate::sst::{Tree, CLASSES};

/// A sentence and its sentiment (the SST root label).
#[derive(Debug, Clone, PartialEq)]
pub struct Sentence {
    /// The words, separated by spaces.
    pub text: String,
    /// Sentiment label, 0-4.
    pub label: u32,
}

impl Sentence {
    /// The sentence of a parsed tree, labelled with its root's label.
    pub fn from_tree(tree: &Tree) -> Option<Sentence> {
        Some(Sentence {
            text: tree.words.join(" "),
            label: tree.root_label()?.into(),
        })
    }
}

/// Words seen at least `min_count` times in `sentences`, ids by first
/// occurrence.
pub fn word_index(sentences: &[Sentence], min_count: usize) -> HashMap<String, u32> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    let mut order = Vec::new();
    for s in sentences {
        for w in s.text.split(' ') {
            let c = counts.entry(w).or_insert(0);
            if *c == 0 {
                order.push(w);
            }
            *c += 1;
        }
    }
    order
        .into_iter()
        .filter(|w| counts[w] >= min_count)
        .enumerate()
        .map(|(i, w)| (w.to_owned(), i as u32))
        .collect()
}

/// The parameters of text2vec and its classifier.
#[derive(Debug, Clone)]
pub struct Text2Vec {
    words: Arc<HashMap<String, u32>>,
    embed: Embedding,
    cell: FC,
    out: FC,
    state: usize,
}

impl Text2Vec {
    /// A model over the word index `words`, embeddings of `embed_dim`
    /// (uniform in ±0.05), state of `state` (a tanh RNN cell).
    pub fn new<R: Rng + ?Sized>(
        store: &mut ParamStore,
        words: HashMap<String, u32>,
        embed_dim: usize,
        state: usize,
        rng: &mut R,
    ) -> Result<Self, BlockError> {
        let init = Init::Uniform {
            low: -0.05,
            high: 0.05,
        };
        let embed = Embedding::new(store, "emb", words.len().max(1), embed_dim, init, rng)?;
        let act = sheaf_blocks::Activation::Tanh;
        let cell = FC::new(store, "cell", state + embed_dim, state, act, rng)?;
        let id = sheaf_blocks::Activation::Identity;
        let out = FC::new(store, "out", state, CLASSES, id, rng)?;
        Ok(Text2Vec {
            words: Arc::new(words),
            embed,
            cell,
            out,
            state,
        })
    }

    /// Every parameter.
    pub fn params(&self) -> Vec<Param> {
        let (cw, cb) = self.cell.params();
        let (ow, ob) = self.out.params();
        vec![self.embed.table(), cw, cb, ow, ob]
    }

    // ---- the model with blocks -----------------------------------------

    /// `text2vec` of the paper: a sentence to its final RNN state.
    pub fn text2vec(&self) -> impl Block<In = String, Out = Expr> + Clone {
        let words = Arc::clone(&self.words);
        let word2vec = InputTransform::new("word id", move |w: &String| words.get(w).copied())
            >> Optional::new(self.embed.clone());
        let split = InputTransform::new("split", |s: &String| {
            s.split(' ').map(str::to_owned).collect::<Vec<String>>()
        });
        let rnn_cell = Concat::<(Expr, Expr)>::new() >> self.cell.clone();
        split >> Map::new(word2vec) >> Fold::new(rnn_cell, Zeros::new([self.state]))
    }

    /// The training model: a sentence's loss under the metric `"loss"`,
    /// its class scores under `"logits"`.
    pub fn blocks(&self) -> impl Block<In = Sentence, Out = ((), ())> {
        let logits = self.out.clone();
        let xent = Function::new("xent", |g: &mut Graph, (logits, label): (Expr, u32)| {
            g.pick_neg_log_softmax(logits, label)
        });
        let first = Function::new("logits", |_: &mut Graph, (l, _): (Expr, u32)| Ok(l));
        Record::new((
            field("text", |s: &Sentence| &s.text, self.text2vec().then(logits)),
            field("label", |s: &Sentence| &s.label, Identity::<u32>::new()),
        )) >> AllOf::new((xent >> Metric::new("loss"), first >> Metric::new("logits")))
    }

    // ---- the same model directly on the graph ---------------------------

    /// The sentence's loss (and class scores), built node by node.
    pub fn direct_loss(&self, g: &mut Graph, s: &Sentence) -> Result<(Expr, Expr), GraphError> {
        let table = g.param(&self.embed.table());
        let (cw, cb) = self.cell.params();
        let (ow, ob) = self.out.params();
        let zeros = sheaf_tensor::Tensor::zeros(
            [self.state],
            sheaf_tensor::DType::F32,
            sheaf_tensor::Device::Cpu,
        )
        .map_err(|e| GraphError::Tensor {
            context: "initial state".into(),
            source: Box::new(e),
        })?;
        let mut state = g.input(zeros);
        for w in s.text.split(' ') {
            let x = match self.words.get(w) {
                Some(&id) => g.lookup(table, id)?,
                None => {
                    let dim = self.embed.table().shape().dim(1).unwrap_or(0);
                    let z = sheaf_tensor::Tensor::zeros(
                        [dim],
                        sheaf_tensor::DType::F32,
                        sheaf_tensor::Device::Cpu,
                    )
                    .map_err(|e| GraphError::Tensor {
                        context: "unknown word".into(),
                        source: Box::new(e),
                    })?;
                    g.input(z)
                }
            };
            let sx = g.concat(&[state, x])?;
            let (w, b) = (g.param(&cw), g.param(&cb));
            let y = g.affine(b, &[(w, sx)])?;
            state = g.tanh(y)?;
        }
        let (w, b) = (g.param(&ow), g.param(&ob));
        let logits = g.affine(b, &[(w, state)])?;
        Ok((g.pick_neg_log_softmax(logits, s.label)?, logits))
    }
}
