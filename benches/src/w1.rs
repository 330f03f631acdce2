//! W1 of `shared/BENCHMARKS.md`: Tree-LSTM training on SST. E = 300,
//! H = 150, C = 5, softmax cross-entropy at every node summed over the
//! tree, 64 trees per update, plain SGD lr 0.05.

use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{Expr, Graph, Init, Optimizer, Param, ParamStore, Sequential, Sgd};
use sheaf_sched::{Executor, Strategy};

use crate::sst::{Node, Tree};

/// Embedding size.
pub const E: usize = 300;
/// State size.
pub const H: usize = 150;
/// Classes.
pub const C: usize = 5;

/// The parameters of the model.
pub struct Model {
    emb: Param,
    w_leaf: Param,
    b_leaf: Param,
    u: Param,
    b_int: Param,
    w_out: Param,
    b_out: Param,
}

impl Model {
    /// Random initialisation (seeded): embeddings uniform in ±0.05,
    /// matrices Glorot uniform, biases zero.
    pub fn new(store: &mut ParamStore, vocab: usize, seed: u64) -> sheaf_autodiff::Result<Model> {
        let mut rng = StdRng::seed_from_u64(seed);
        let u = Init::Uniform {
            low: -0.05,
            high: 0.05,
        };
        Ok(Model {
            emb: store.add_lookup("emb", vocab, E, u, &mut rng)?,
            w_leaf: store.add_param("w_leaf", [3 * H, E], Init::GlorotUniform, &mut rng)?,
            b_leaf: store.add_param("b_leaf", [3 * H], Init::Zeros, &mut rng)?,
            u: store.add_param("u", [5 * H, 2 * H], Init::GlorotUniform, &mut rng)?,
            b_int: store.add_param("b_int", [5 * H], Init::Zeros, &mut rng)?,
            w_out: store.add_param("w_out", [C, H], Init::GlorotUniform, &mut rng)?,
            b_out: store.add_param("b_out", [C], Init::Zeros, &mut rng)?,
        })
    }

    /// Adds one tree's summed loss to `g` (post-order loop, no recursion).
    pub fn tree_loss(&self, g: &mut Graph, tree: &Tree) -> sheaf_autodiff::Result<Expr> {
        let mut states: Vec<Expr> = Vec::with_capacity(tree.nodes.len());
        let mut losses = Vec::with_capacity(tree.nodes.len());
        let (wo, bo) = (g.param(&self.w_out), g.param(&self.b_out));
        for node in &tree.nodes {
            let (state, label) = match *node {
                Node::Leaf { word, label } => {
                    let (emb, wl, bl) = (
                        g.param(&self.emb),
                        g.param(&self.w_leaf),
                        g.param(&self.b_leaf),
                    );
                    let x = g.lookup(emb, word)?;
                    let gates = g.affine(bl, &[(wl, x)])?;
                    (g.tree_lstm_leaf(gates)?, label)
                }
                Node::Inner { left, right, label } => {
                    let (sl, sr) = (states[left], states[right]);
                    let (hl, hr) = (g.cell_h(sl)?, g.cell_h(sr)?);
                    let hh = g.concat(&[hl, hr])?;
                    let (u, bi) = (g.param(&self.u), g.param(&self.b_int));
                    let gates = g.affine(bi, &[(u, hh)])?;
                    (g.tree_lstm_node(gates, sl, sr)?, label)
                }
            };
            states.push(state);
            let h = g.cell_h(state)?;
            let logits = g.affine(bo, &[(wo, h)])?;
            losses.push(g.pick_neg_log_softmax(logits, label)?);
        }
        g.sum(&losses)
    }
}

/// Useful model FLOPs of training on one tree (BENCHMARKS.md): leaf
/// 2·E·3H, internal 2·2H·5H, output 2·H·C per node, times 3.
pub fn train_flops(tree: &Tree) -> f64 {
    let per_node: f64 = tree
        .nodes
        .iter()
        .map(|n| match n {
            Node::Leaf { .. } => 2.0 * (E * 3 * H) as f64,
            Node::Inner { .. } => 2.0 * (2 * H * 5 * H) as f64,
        } + 2.0 * (H * C) as f64)
        .sum();
    3.0 * per_node
}

/// One training step on `trees` with `strategy` (None = Sequential).
pub fn train_step(
    model: &Model,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    g: &mut Graph,
    exec: Option<&mut Executor>,
    trees: &[Tree],
) -> Result<f32, String> {
    g.clear();
    let mut losses = Vec::with_capacity(trees.len());
    for t in trees {
        losses.push(model.tree_loss(g, t).map_err(|e| e.to_string())?);
    }
    let loss = g.sum(&losses).map_err(|e| e.to_string())?;
    match exec {
        None => Sequential::new()
            .backward(g, store, loss)
            .map_err(|e| e.to_string())?,
        Some(e) => {
            e.forward(g, store, loss).map_err(|e| e.to_string())?;
            e.backward(g, store, loss).map_err(|e| e.to_string())?
        }
    }
    let value = g
        .value(loss)
        .map_err(|e| e.to_string())?
        .to_vec::<f32>()
        .map_err(|e| e.to_string())?[0];
    g.clear();
    opt.step(store).map_err(|e| e.to_string())?;
    Ok(value)
}

/// SGD with lr 0.05, as W1 prescribes.
pub fn optimizer() -> Optimizer {
    Optimizer::sgd(Sgd {
        lr: 0.05,
        momentum: 0.0,
        weight_decay: 0.0,
    })
}

/// The strategies W1 reports.
pub fn strategies() -> [(&'static str, Option<Strategy>); 3] {
    [
        ("sequential", None),
        ("depth", Some(Strategy::Depth)),
        ("agenda", Some(Strategy::Agenda)),
    ]
}
