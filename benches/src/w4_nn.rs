//! W4 written with `sheaf-nn` layers: W2's layers tagger
//! ([`crate::w2_nn::NnModel`], 128-wide word table) and, for rare words, a
//! character `Embedding` read by two one-layer `Lstm`s, the forward one
//! over the characters and the backward one over them reversed; the word
//! is the concatenation of both last outputs. The same model as
//! [`crate::w4`]'s hand-written one: [`NnCharModel::copy_from`] gives it
//! the hand-written values, so the two compare loss for loss and are timed
//! side by side.

use sheaf_autodiff::{Expr, Graph, Optimizer, Param, ParamStore};
use sheaf_nn::prelude::*;
use sheaf_sched::Executor;

use crate::w2_nn::NnModel;
use crate::w4::{config, CharModel, Data, Sentence, Word, CHAR_EMBED, CHAR_HIDDEN};

/// The character-aware tagger from layers.
#[derive(Debug, Clone)]
pub struct NnCharModel {
    pub tagger: NnModel,
    pub chars: Embedding,
    pub fwd: Lstm,
    pub bwd: Lstm,
}

impl NnCharModel {
    /// The tagger's parameters as [`NnModel::new`] names them, and
    /// `chars.table`, `chars.{fwd,bwd}.l0.fwd.{w,u,b}`.
    pub fn new(store: &mut ParamStore, data: &Data, seed: u64) -> sheaf_autodiff::Result<Self> {
        let tagger = NnModel::new(store, config(data.words), seed)?;
        let mut root = Scope::new(store, seed);
        let mut scope = root.sub("chars")?;
        let chars = Embedding::new(&mut scope, data.chars, CHAR_EMBED)?;
        let rc = RecurrentConfig::new(CHAR_HIDDEN);
        let fwd = Lstm::new(&mut scope.sub("fwd")?, CHAR_EMBED, rc)?;
        let bwd = Lstm::new(&mut scope.sub("bwd")?, CHAR_EMBED, rc)?;
        Ok(NnCharModel {
            tagger,
            chars,
            fwd,
            bwd,
        })
    }

    /// Pairs of (this model's parameter, the hand-written model's).
    pub fn pairs(&self, hand: &CharModel) -> Vec<(Param, Param)> {
        let mut pairs = self.tagger.pairs(&hand.tagger);
        pairs.push((self.chars.table(), hand.chars));
        for (mine, theirs) in [(&self.fwd, &hand.fwd), (&self.bwd, &hand.bwd)] {
            pairs.extend(
                mine.params()
                    .into_iter()
                    .zip([theirs.w, theirs.u, theirs.b]),
            );
        }
        pairs
    }

    /// Copies every value of the hand-written model `hand` (in `from`)
    /// into this model (in `to`).
    pub fn copy_from(&self, to: &mut ParamStore, hand: &CharModel, from: &ParamStore) {
        for (mine, theirs) in self.pairs(hand) {
            // A copy of its own: a shared buffer would make every update
            // of either model copy the parameter.
            let v = from.value(&theirs).expect("hand-written parameter");
            let v = v.deep_clone().expect("a host copy");
            *to.value_mut(&mine).expect("layer parameter") = v;
        }
    }

    /// A rare word's vector: both directions' last outputs over its
    /// characters (the lookup table's row 0 for a word without any).
    fn spell(&self, g: &mut Graph, cs: &[u32], zero: &State) -> sheaf_autodiff::Result<Expr> {
        if cs.is_empty() {
            return self.tagger.emb.forward(g, 0);
        }
        let xs = cs
            .iter()
            .map(|&c| self.chars.forward(g, c))
            .collect::<sheaf_autodiff::Result<Vec<_>>>()?;
        let f = self.fwd.transduce_from(g, &xs, zero)?;
        let rev: Vec<Expr> = xs.into_iter().rev().collect();
        let b = self.bwd.transduce_from(g, &rev, zero)?;
        match (f.last(), b.last()) {
            (Some(&f), Some(&b)) => g.concat(&[f, b]),
            _ => self.tagger.emb.forward(g, 0),
        }
    }

    /// The summed tag loss of one sentence; `zeros` the graph's zero
    /// states (tagger, characters), shared by its sentences.
    pub fn sentence_loss(
        &self,
        g: &mut Graph,
        s: &Sentence,
        zeros: &(State, State),
    ) -> sheaf_autodiff::Result<Expr> {
        let xs = s
            .words
            .iter()
            .map(|w| match w {
                Word::Frequent(id) => self.tagger.emb.forward(g, *id),
                Word::Rare(cs) => self.spell(g, cs, &zeros.1),
            })
            .collect::<sheaf_autodiff::Result<Vec<_>>>()?;
        let hs = self.tagger.enc.transduce_from(g, &xs, &zeros.0)?;
        let losses = hs
            .iter()
            .zip(&s.tags)
            .map(|(&h, &tag)| {
                let logits = self.tagger.out.forward(g, h)?;
                g.pick_neg_log_softmax(logits, tag)
            })
            .collect::<sheaf_autodiff::Result<Vec<_>>>()?;
        g.sum(&losses)
    }
}

/// [`crate::w4::train_step`] with the layers' model.
pub fn train_step(
    m: &NnCharModel,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    g: &mut Graph,
    exec: Option<&mut Executor>,
    batch: &[Sentence],
) -> Result<f32, String> {
    let e = |e: sheaf_autodiff::GraphError| e.to_string();
    g.clear();
    // Both character directions share one zero state.
    let zeros = (
        m.tagger.enc.zero_state(g).map_err(e)?,
        m.fwd.zero_state(g).map_err(e)?,
    );
    let losses = batch
        .iter()
        .map(|s| m.sentence_loss(g, s, &zeros))
        .collect::<sheaf_autodiff::Result<Vec<_>>>()
        .map_err(e)?;
    let loss = g.sum(&losses).map_err(e)?;
    crate::step::backward_and_step(g, store, opt, exec, loss)
}
