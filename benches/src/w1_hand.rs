//! The SST Tree-LSTM as it was written by hand before `sheaf-nn` (every
//! parameter created and read by hand, names `emb`, `w_leaf`, `b_leaf`,
//! `u`, `b_int`, `w_out`, `b_out`), kept as the reference the layers model
//! ([`sheaf_examples::model::TreeLstm`]) is checked and timed against:
//! [`HandTreeLstm::copy_into`] gives the layers model its values.
//! W1's settings only (no dropout).

use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{Expr, Graph, GraphError, Init, Param, ParamStore, Result};
use sheaf_examples::model::TreeLstm;
use sheaf_examples::sst::{Node, Tree, CLASSES};

use crate::w1::{E, H};

/// The hand-written model's parameters.
#[derive(Debug, Clone, Copy)]
pub struct HandTreeLstm {
    pub emb: Param,
    pub w_leaf: Param,
    pub b_leaf: Param,
    pub u: Param,
    pub b_int: Param,
    pub w_out: Param,
    pub b_out: Param,
}

impl HandTreeLstm {
    /// W1's parameters drawn from one generator seeded with `seed`.
    pub fn new(store: &mut ParamStore, vocab: usize, seed: u64) -> Result<HandTreeLstm> {
        let mut rng = StdRng::seed_from_u64(seed);
        let small = Init::Uniform {
            low: -0.05,
            high: 0.05,
        };
        let glorot = Init::GlorotUniform;
        Ok(HandTreeLstm {
            emb: store.add_lookup("emb", vocab, E, small, &mut rng)?,
            w_leaf: store.add_param("w_leaf", [3 * H, E], glorot, &mut rng)?,
            b_leaf: store.add_param("b_leaf", [3 * H], Init::Zeros, &mut rng)?,
            u: store.add_param("u", [5 * H, 2 * H], glorot, &mut rng)?,
            b_int: store.add_param("b_int", [5 * H], Init::Zeros, &mut rng)?,
            w_out: store.add_param("w_out", [CLASSES, H], glorot, &mut rng)?,
            b_out: store.add_param("b_out", [CLASSES], Init::Zeros, &mut rng)?,
        })
    }

    /// Every parameter, in the order of [`TreeLstm::params`].
    pub fn params(&self) -> [Param; 7] {
        [
            self.emb,
            self.w_leaf,
            self.b_leaf,
            self.u,
            self.b_int,
            self.w_out,
            self.b_out,
        ]
    }

    /// Copies every value (from `from`) into the layers model `m` (in
    /// `to`), each into a buffer of its own.
    pub fn copy_into(&self, from: &ParamStore, m: &TreeLstm, to: &mut ParamStore) {
        for (theirs, mine) in self.params().into_iter().zip(m.params()) {
            let v = from.value(&theirs).expect("hand-written parameter");
            *to.value_mut(&mine).expect("layers parameter") = v.deep_clone().expect("a copy");
        }
    }

    /// One tree's loss, summed over its nodes, as the SST model's walk
    /// built it by hand.
    pub fn tree_loss(&self, g: &mut Graph, tree: &Tree, ids: &[u32]) -> Result<Expr> {
        let bad = |what: String| GraphError::Data {
            op: "tree_lstm",
            what,
        };
        let mut states: Vec<Expr> = Vec::with_capacity(tree.nodes.len());
        let mut hs: Vec<Expr> = Vec::with_capacity(tree.nodes.len());
        let mut losses = Vec::with_capacity(tree.nodes.len());
        let (wo, bo) = (g.param(&self.w_out), g.param(&self.b_out));
        for (pos, node) in tree.nodes.iter().enumerate() {
            let state = match *node {
                Node::Leaf { word, .. } => {
                    let id = *ids
                        .get(word as usize)
                        .ok_or_else(|| bad(format!("leaf {pos}: no id for word {word}")))?;
                    let emb = g.param(&self.emb);
                    let (wl, bl) = (g.param(&self.w_leaf), g.param(&self.b_leaf));
                    let x = g.lookup(emb, id)?;
                    let gates = g.affine(bl, &[(wl, x)])?;
                    g.tree_lstm_leaf(gates)?
                }
                Node::Inner { left, right, .. } => {
                    let child = |c: u32| match (states.get(c as usize), hs.get(c as usize)) {
                        (Some(&s), Some(&h)) => Ok((s, h)),
                        _ => Err(bad(format!("node {pos}: child {c} comes after it"))),
                    };
                    let ((sl, hl), (sr, hr)) = (child(left)?, child(right)?);
                    let hh = g.concat(&[hl, hr])?;
                    let (u, bi) = (g.param(&self.u), g.param(&self.b_int));
                    let gates = g.affine(bi, &[(u, hh)])?;
                    g.tree_lstm_node(gates, sl, sr)?
                }
            };
            let h = g.cell_h(state)?;
            states.push(state);
            hs.push(h);
            let logits = g.affine(bo, &[(wo, h)])?;
            losses.push(g.pick_neg_log_softmax(logits, node.label() as u32)?);
        }
        g.sum(&losses)
    }
}

/// [`crate::w1::train_step`] with the hand-written model.
pub fn train_step(
    model: &HandTreeLstm,
    store: &mut ParamStore,
    opt: &mut sheaf_autodiff::Optimizer,
    g: &mut Graph,
    exec: Option<&mut sheaf_sched::Executor>,
    trees: &[Tree],
    ids: &[Vec<u32>],
) -> std::result::Result<f32, String> {
    g.clear();
    let losses = trees
        .iter()
        .zip(ids)
        .map(|(t, ids)| model.tree_loss(g, t, ids))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let loss = g.sum(&losses).map_err(|e| e.to_string())?;
    crate::step::backward_and_step(g, store, opt, exec, loss)
}
