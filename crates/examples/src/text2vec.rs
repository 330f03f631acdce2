//! §3.3 of the TensorFlow Fold paper: `text2vec` and its label loss,
//! written with blocks ([`Text2Vec::blocks`]) and, for comparison,
//! directly on the graph with `sheaf-nn` layers
//! ([`Text2VecNn::direct_loss`]); both give the same numbers (tested).
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
use sheaf_nn::{Linear, RecurrentConfig, Rnn, Scope};
use sheaf_tensor::{DType, Device, Tensor};

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
}

/// The same model from `sheaf-nn` layers, written directly on the graph:
/// an `Embedding`, the RNN cell as an Elman `Rnn` (`tanh(W x + U s + b)`
/// is the blocks cell `tanh(W_cell [s; x] + b)` with `W_cell = [U | W]`),
/// and a `Linear` output.
#[derive(Debug, Clone)]
pub struct Text2VecNn {
    words: Arc<HashMap<String, u32>>,
    embed: sheaf_nn::Embedding,
    rnn: Rnn,
    out: Linear,
}

impl Text2VecNn {
    /// A model over the word index `words`, embeddings of `embed_dim`,
    /// state of `state`, initialised from `seed`: parameters `emb.table`,
    /// `rnn.l0.fwd.{w,u,b}`, `out.{w,b}`.
    pub fn new(
        store: &mut ParamStore,
        words: HashMap<String, u32>,
        embed_dim: usize,
        state: usize,
        seed: u64,
    ) -> Result<Self, GraphError> {
        let mut root = Scope::new(store, seed);
        let vocab = words.len().max(1);
        Ok(Text2VecNn {
            words: Arc::new(words),
            embed: sheaf_nn::Embedding::new(&mut root.sub("emb")?, vocab, embed_dim)?,
            rnn: Rnn::new(
                &mut root.sub("rnn")?,
                embed_dim,
                RecurrentConfig::new(state),
            )?,
            out: Linear::new(&mut root.sub("out")?, state, CLASSES, true)?,
        })
    }

    /// Every parameter: the table, the RNN's `w`, `u`, `b`, the output's
    /// weight and bias.
    pub fn params(&self) -> Vec<Param> {
        let mut ps = vec![self.embed.table()];
        ps.extend(self.rnn.params());
        ps.push(self.out.weight());
        ps.extend(self.out.bias());
        ps
    }

    /// Copies every value of the blocks model `m` (in `from`) into this
    /// model (in `to`), the cell's weight split into `U` (its first
    /// `state` columns) and `W`. Errors: a parameter missing from its
    /// store, models of other sizes.
    pub fn copy_from(
        &self,
        to: &mut ParamStore,
        m: &Text2Vec,
        from: &ParamStore,
    ) -> Result<(), GraphError> {
        let err = |e: sheaf_tensor::TensorError| GraphError::Tensor {
            context: "Text2VecNn::copy_from".into(),
            source: Box::new(e),
        };
        let mismatch =
            |what: String| Err(GraphError::Params(format!("Text2VecNn::copy_from: {what}")));
        let (mine, theirs) = (self.params(), m.params());
        let ([table, w, u, b, ow, ob], [t_table, cw, cb, t_ow, t_ob]) = (&mine[..], &theirs[..])
        else {
            return mismatch(format!("{} and {} parameters", mine.len(), theirs.len()));
        };
        let (state, inp) = (u.shape().dims()[0], w.shape().dims()[1]);
        if cw.shape().dims() != [state, state + inp] {
            return mismatch(format!(
                "a cell weight {}, this model's is [{state}, {}]",
                cw.shape(),
                state + inp
            ));
        }
        let cell = from.value(cw)?.to_vec::<f32>().map_err(err)?;
        let rows = cell.chunks(state + inp);
        let u_vals = rows.clone().flat_map(|r| &r[..state]).copied().collect();
        let w_vals = rows.flat_map(|r| &r[state..]).copied().collect();
        *to.value_mut(u)? = Tensor::from_vec(u_vals, [state, state]).map_err(err)?;
        *to.value_mut(w)? = Tensor::from_vec(w_vals, [state, inp]).map_err(err)?;
        for (mine, theirs) in [(table, t_table), (b, cb), (ow, t_ow), (ob, t_ob)] {
            if mine.shape() != theirs.shape() {
                return mismatch(format!(
                    "shapes {} and {} differ",
                    mine.shape(),
                    theirs.shape()
                ));
            }
            // A copy of its own: a shared buffer would be copied on every
            // update of either model.
            *to.value_mut(mine)? = from.value(theirs)?.deep_clone().map_err(err)?;
        }
        Ok(())
    }

    /// The sentence's loss (and class scores), built node by node.
    pub fn direct_loss(&self, g: &mut Graph, s: &Sentence) -> Result<(Expr, Expr), GraphError> {
        let xs = s
            .text
            .split(' ')
            .map(|w| match self.words.get(w) {
                Some(&id) => self.embed.forward(g, id),
                // Unknown words embed as zeros (the blocks form's Optional).
                None => {
                    let dim = [self.embed.dim()];
                    let z = Tensor::zeros(dim, DType::F32, Device::Cpu);
                    Ok(g.input(z.map_err(|e| GraphError::Tensor {
                        context: "unknown word".into(),
                        source: Box::new(e),
                    })?))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        // `split` yields at least one word, so there is a last state.
        let states = self.rnn.transduce(g, &xs)?;
        let logits = self.out.forward(g, states[states.len() - 1])?;
        Ok((g.pick_neg_log_softmax(logits, s.label)?, logits))
    }
}
