//! W2 written with `sheaf-nn` layers (an `Embedding`, a 2-layer
//! bidirectional `Lstm`, a `Linear` output): the same model as
//! [`crate::w2`]'s hand-written one, in a few lines. [`NnModel::copy_from`]
//! gives it the hand-written model's values, so the two can be compared
//! loss for loss and gradient for gradient, and timed side by side.

use sheaf_autodiff::{Expr, Graph, Optimizer, Param, ParamStore};
use sheaf_nn::prelude::*;
use sheaf_sched::Executor;

use crate::w2::{Config, Model, Sentence};

/// The tagger from layers.
#[derive(Debug, Clone)]
pub struct NnModel {
    pub emb: Embedding,
    pub enc: Lstm,
    pub out: Linear,
}

impl NnModel {
    /// Parameters `emb.table`, `enc.l{0,1}.{fwd,bwd}.{w,u,b}`, `out.{w,b}`.
    pub fn new(store: &mut ParamStore, cfg: Config, seed: u64) -> sheaf_autodiff::Result<Self> {
        let mut root = Scope::new(store, seed);
        let emb = Embedding::new(&mut root.sub("emb")?, cfg.vocab, cfg.embed)?;
        let rc = RecurrentConfig {
            layers: 2,
            bidirectional: true,
            ..RecurrentConfig::new(cfg.hidden)
        };
        let enc = Lstm::new(&mut root.sub("enc")?, cfg.embed, rc)?;
        let out = Linear::new(&mut root.sub("out")?, 2 * cfg.hidden, cfg.classes, true)?;
        Ok(NnModel { emb, enc, out })
    }

    /// Pairs of (this model's parameter, the hand-written model's).
    pub fn pairs(&self, hand: &Model) -> Vec<(Param, Param)> {
        let mut pairs = vec![(self.emb.table(), hand.emb)];
        for (layer, units) in self.enc.units().iter().enumerate() {
            for (d, unit) in units.iter().enumerate() {
                let h = &hand.layers[layer][d];
                pairs.extend(unit.params().into_iter().zip([h.w, h.u, h.b]));
            }
        }
        pairs.push((self.out.weight(), hand.w_out));
        if let Some(b) = self.out.bias() {
            pairs.push((b, hand.b_out));
        }
        pairs
    }

    /// Copies every value of the hand-written model `hand` (in `from`)
    /// into this model (in `to`).
    pub fn copy_from(&self, to: &mut ParamStore, hand: &Model, from: &ParamStore) {
        for (mine, theirs) in self.pairs(hand) {
            // A copy of its own: a shared buffer would make every update
            // of either model copy the parameter.
            let v = from.value(&theirs).expect("hand-written parameter");
            let v = v.deep_clone().expect("a host copy");
            *to.value_mut(&mine).expect("layer parameter") = v;
        }
    }

    /// The summed tag loss of one sentence; `zero` the zero states of the
    /// graph, shared by its sentences ([`Lstm::zero_state`]).
    pub fn sentence_loss(
        &self,
        g: &mut Graph,
        s: &Sentence,
        zero: &State,
    ) -> sheaf_autodiff::Result<Expr> {
        let xs = s
            .words
            .iter()
            .map(|&w| self.emb.forward(g, w))
            .collect::<sheaf_autodiff::Result<Vec<_>>>()?;
        let hs = self.enc.transduce_from(g, &xs, zero)?;
        let losses = hs
            .iter()
            .zip(&s.tags)
            .map(|(&h, &tag)| {
                let logits = self.out.forward(g, h)?;
                g.pick_neg_log_softmax(logits, tag)
            })
            .collect::<sheaf_autodiff::Result<Vec<_>>>()?;
        g.sum(&losses)
    }
}

/// [`crate::w2::train_step`] with the layers' model.
pub fn train_step(
    m: &NnModel,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    g: &mut Graph,
    exec: Option<&mut Executor>,
    batch: &[Sentence],
) -> Result<f32, String> {
    let e = |e: sheaf_autodiff::GraphError| e.to_string();
    g.clear();
    let zero = m.enc.zero_state(g).map_err(e)?;
    let losses = batch
        .iter()
        .map(|s| m.sentence_loss(g, s, &zero))
        .collect::<sheaf_autodiff::Result<Vec<_>>>()
        .map_err(e)?;
    let loss = g.sum(&losses).map_err(e)?;
    crate::step::backward_and_step(g, store, opt, exec, loss)
}
