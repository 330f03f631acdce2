//! The binary (constituency) Tree-LSTM of Tai, Socher and Manning (2015)
//! for sentiment, with sheaf's fused cells.
//!
//! Leaf, from the word's embedding `x` (dropout `dropout_embed` in
//! training): `[i, o, u] = W_leaf x + b_leaf`, `c = σ(i) tanh(u)`,
//! `h = σ(o) tanh(c)` ([`Graph::tree_lstm_leaf`]). Internal node, from its
//! children: `[i, f_l, f_r, o, u] = U [h_l; h_r] + b_int`,
//! `c = σ(i) tanh(u) + σ(f_l) c_l + σ(f_r) c_r`, `h = σ(o) tanh(c)`
//! ([`Graph::tree_lstm_node`]). Every node predicts its sentiment from
//! `W_out dropout(h) + b_out` (dropout `dropout_output` in training); the
//! loss of a tree is the softmax cross-entropy summed over ALL its nodes.
//!
//! A dropout rate of 0 adds no dropout node at all, and evaluation graphs
//! ([`Graph::set_train`] off) add none either (dropout is the identity
//! there), so the W1 benchmark runs this very model with both rates at 0.
//! Trees are walked as their post-order node lists with a loop: no
//! recursion, whatever the height.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sheaf_autodiff::{Expr, Graph, GraphError, Init, Param, ParamStore, Result, VertexFn};
use sheaf_nn::{BinaryTreeLstm, Embedding, Inits, Linear, Scope};
use sheaf_tensor::Shape;

use crate::sst::{Node, Pretrained, Tree, CLASSES};

/// Sizes, initialisation and dropout of a [`TreeLstm`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Rows of the embedding table (the vocabulary size, unknown-word row
    /// included).
    pub vocab: usize,
    /// Embedding size E (300 in the paper and in W1).
    pub embed_dim: usize,
    /// Cell size H (150).
    pub hidden: usize,
    /// Random embeddings are drawn uniformly from `±embed_init`.
    pub embed_init: f32,
    /// Dropout rate on the word embeddings (training only), in `[0, 1)`.
    pub dropout_embed: f32,
    /// Dropout rate on `h` before the output layer (training only).
    pub dropout_output: f32,
    /// Recurrent dropout (Semeniuta et al. 2016) on the cells' candidate
    /// `tanh(u)` (training only); 0 keeps the fused cells.
    #[serde(default)]
    pub recurrent_dropout: f32,
}

impl ModelConfig {
    /// W1's model for a vocabulary of `vocab` rows: E = 300, H = 150,
    /// embeddings uniform in ±0.05, no dropout.
    pub fn new(vocab: usize) -> Self {
        ModelConfig {
            vocab,
            embed_dim: 300,
            hidden: 150,
            embed_init: 0.05,
            dropout_embed: 0.0,
            dropout_output: 0.0,
            recurrent_dropout: 0.0,
        }
    }

    /// Checks the settings; the message names the offending field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.vocab == 0 || self.embed_dim == 0 || self.hidden == 0 {
            return Err(format!(
                "model: vocabulary ({}), embedding size ({}) and hidden size ({}) must be positive",
                self.vocab, self.embed_dim, self.hidden
            ));
        }
        for (name, p) in [
            ("embedding dropout", self.dropout_embed),
            ("output dropout", self.dropout_output),
            ("recurrent dropout", self.recurrent_dropout),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(format!("model: {name} must lie in [0, 1), it is {p}"));
            }
        }
        if !(self.embed_init.is_finite() && self.embed_init >= 0.0) {
            return Err(format!(
                "model: the embedding init scale must be finite and >= 0, it is {}",
                self.embed_init
            ));
        }
        Ok(())
    }
}

/// The Tree-LSTM sentiment model, from `sheaf-nn` layers: an
/// [`Embedding`] (`emb.table`), a [`BinaryTreeLstm`] (`cell.w_leaf`,
/// `cell.b_leaf`, `cell.u`, `cell.b`) and a [`Linear`] output layer
/// (`out.w`, `out.b`).
#[derive(Debug, Clone)]
pub struct TreeLstm {
    cfg: ModelConfig,
    emb: Embedding,
    cell: BinaryTreeLstm,
    out: Linear,
    params: [Param; 7],
    /// The cells as vertex functions (leaf, node), when on.
    vertex: Option<Arc<(VertexFn, VertexFn)>>,
    /// Whole tree nodes as ONE call each for the losses, traced for
    /// evaluation and for training (dropout differs).
    whole: Option<Arc<[WholeNodes; 2]>>,
}

/// See [`TreeLstm::with_vertex_functions`]. Each call's output is the
/// node's state with a loss after it, `[c | h | loss]` (`2H + 1`).
#[derive(Debug)]
struct WholeNodes {
    /// A leaf's lookup, cell, output layer and loss (its word and its
    /// label as two per-call fields).
    leaf: VertexFn,
    /// An inner node's cell from its children's outputs, its output layer
    /// and loss plus its children's subtree losses (the label as data):
    /// the root's is the tree's loss, with no sum node per tree.
    node: VertexFn,
    /// The same with the node's own loss only (for graphs where a node
    /// has two parents, whose subtree losses would count it twice).
    node_own: VertexFn,
}

impl TreeLstm {
    /// Adds the parameters to `store`, each drawn from a generator seeded
    /// with `seed` and its name ([`Scope`]): embeddings uniform in
    /// `±embed_init`, matrices Glorot uniform, biases zero.
    pub fn new(store: &mut ParamStore, cfg: &ModelConfig, seed: u64) -> Result<TreeLstm> {
        cfg.validate().map_err(GraphError::Params)?;
        let inits = Inits {
            table: Init::Uniform {
                low: -cfg.embed_init,
                high: cfg.embed_init,
            },
            ..Inits::default()
        };
        let mut root = Scope::new(store, seed).with_inits(inits);
        let (e, h) = (cfg.embed_dim, cfg.hidden);
        let emb = Embedding::new(&mut root.sub("emb")?, cfg.vocab, e)?;
        let cell = BinaryTreeLstm::new(&mut root.sub("cell")?, e, h, cfg.recurrent_dropout)?;
        let out = Linear::new(&mut root.sub("out")?, h, CLASSES, true)?;
        let [w_leaf, b_leaf, u, b] = cell.params();
        let (w_out, b_out) = match out.bias() {
            Some(b_out) => (out.weight(), b_out),
            None => {
                return Err(GraphError::Params(
                    "TreeLstm: an output without bias".into(),
                ))
            }
        };
        Ok(TreeLstm {
            cfg: cfg.clone(),
            emb,
            cell,
            out,
            params: [emb.table(), w_leaf, b_leaf, u, b, w_out, b_out],
            vertex: None,
            whole: None,
        })
    }

    /// Builds each leaf and internal cell as ONE call of a vertex function
    /// ([`VertexFn`]: the cell's ops traced once) instead of its ops one by
    /// one: the same values and gradients (dropout masks aside), fewer
    /// graph nodes per tree.
    pub fn with_vertex_functions(mut self) -> Result<TreeLstm> {
        let (cell, e, h) = (self.cell, self.cfg.embed_dim, self.cfg.hidden);
        let leaf = VertexFn::trace("tree_lstm_leaf_fn", &[Shape::from([e])], move |g, a| {
            Ok(vec![cell.leaf(g, a[0])?])
        })?;
        // The children's `h` come in as arguments: the walk takes them for
        // the output layer anyway.
        let (s, hs) = (Shape::from([2 * h]), Shape::from([h]));
        let node = VertexFn::trace("tree_lstm_node_fn", &[s, s, hs, hs], move |g, a| {
            Ok(vec![cell.node_with(g, a[0], a[1], a[2], a[3])?])
        })?;
        self.vertex = Some(Arc::new((leaf, node)));
        // The losses: one call per tree node, one set of functions per
        // mode (embedding and output dropout only while training; their
        // masks are drawn per call, not the inlined graph's).
        let (emb, out) = (self.emb, self.out);
        let (p_emb, p_out) = (self.cfg.dropout_embed, self.cfg.dropout_output);
        let whole = |train: bool| -> Result<WholeNodes> {
            let drop = move |g: &mut Graph, x: Expr, p: f32| match train && p > 0.0 {
                true => g.dropout(x, p),
                false => Ok(x),
            };
            let own_loss = move |g: &mut Graph, state: Expr, label: u32| {
                let h = cell.h(g, state)?;
                let h = drop(g, h, p_out)?;
                let logits = out.forward(g, h)?;
                g.pick_neg_log_softmax(logits, label)
            };
            let leaf = VertexFn::trace_with_fields("tree_lstm_word_fn", &[], 2, move |g, _, f| {
                g.set_train(train);
                let x = emb.forward(g, f[0])?;
                let x = drop(g, x, p_emb)?;
                let state = cell.leaf(g, x)?;
                let loss = own_loss(g, state, f[1])?;
                Ok(vec![g.concat(&[state, loss])?])
            })?;
            // A child's output `[c | h | loss]`: its state, `h` and loss.
            let split = move |g: &mut Graph, o: Expr| -> Result<[Expr; 3]> {
                Ok([
                    g.slice(o, 0, 2 * h)?,
                    g.slice(o, h, 2 * h)?,
                    g.slice(o, 2 * h, 2 * h + 1)?,
                ])
            };
            let o = Shape::from([2 * h + 1]);
            let node_fn = |name: &'static str, subtree: bool| {
                VertexFn::trace_with_data(name, &[o, o], move |g, a, label| {
                    g.set_train(train);
                    let ([sl, hl, ll], [sr, hr, lr]) = (split(g, a[0])?, split(g, a[1])?);
                    let state = cell.node_with(g, sl, sr, hl, hr)?;
                    let mut loss = own_loss(g, state, label)?;
                    if subtree {
                        let children = g.add(ll, lr)?;
                        loss = g.add(loss, children)?;
                    }
                    Ok(vec![g.concat(&[state, loss])?])
                })
            };
            Ok(WholeNodes {
                leaf,
                node: node_fn("tree_lstm_subtree_fn", true)?,
                node_own: node_fn("tree_lstm_node_fn", false)?,
            })
        };
        self.whole = Some(Arc::new([whole(false)?, whole(true)?]));
        Ok(self)
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The embedding table `[vocab, embed_dim]`.
    pub fn embeddings(&self) -> Param {
        self.emb.table()
    }

    /// Every parameter: the table, the cell's `w_leaf`, `b_leaf`, `u`,
    /// `b`, the output's `w`, `b`.
    pub fn params(&self) -> [Param; 7] {
        self.params
    }

    /// Copies pretrained vectors into their rows of the embedding table
    /// (other rows keep their random values). Returns how many rows were
    /// set. Errors: the vectors' size differs from the embedding size, or
    /// an id or the data length is out of range.
    pub fn load_pretrained(&self, store: &mut ParamStore, pre: &Pretrained) -> Result<usize> {
        let dim = self.cfg.embed_dim;
        if pre.dim != dim {
            return Err(GraphError::Params(format!(
                "pretrained vectors have {} dimensions but the model's embedding size is {dim} \
                 (pass --embed-dim {})",
                pre.dim, pre.dim
            )));
        }
        if pre.vectors.len() != pre.ids.len() * dim {
            return Err(GraphError::Params(format!(
                "pretrained vectors: {} values for {} words of {dim} dimensions",
                pre.vectors.len(),
                pre.ids.len()
            )));
        }
        let table = store.value_mut(&self.emb.table())?;
        let rows = table.num_rows();
        let data = table
            .as_mut_slice::<f32>()
            .map_err(|source| GraphError::Tensor {
                context: "loading pretrained embeddings".into(),
                source: Box::new(source),
            })?;
        for (k, &id) in pre.ids.iter().enumerate() {
            let id = id as usize;
            if id >= rows {
                return Err(GraphError::Params(format!(
                    "pretrained vectors: word id {id} is past the table's {rows} rows"
                )));
            }
            data[id * dim..(id + 1) * dim].copy_from_slice(&pre.vectors[k * dim..(k + 1) * dim]);
        }
        Ok(pre.ids.len())
    }

    /// Adds one tree's loss to `g`: softmax cross-entropy of every node's
    /// prediction against its gold label, summed over the nodes. `ids`
    /// maps the tree's words ([`Tree::words`]) to vocabulary ids (see
    /// `Vocab::encode`). Dropout nodes are added only in training mode.
    pub fn tree_loss(&self, g: &mut Graph, tree: &Tree, ids: &[u32]) -> Result<Expr> {
        if let Some(w) = &self.whole {
            let w = &w[usize::from(g.is_train())];
            return self.tree_loss_calls(g, w, tree, ids);
        }
        let mut losses = Vec::with_capacity(tree.nodes.len());
        self.walk(g, tree, ids, |g, node, logits| {
            losses.push(g.pick_neg_log_softmax(logits, node.label() as u32)?);
            Ok(())
        })?;
        g.sum(&losses)
    }

    /// Adds the unnormalised class scores `[5]` of the tree's root to `g`
    /// (no output layer at the other nodes). For predictions, build the
    /// graph in evaluation mode and apply [`Graph::softmax`].
    pub fn root_logits(&self, g: &mut Graph, tree: &Tree, ids: &[u32]) -> Result<Expr> {
        let mut root = None;
        let last = tree.nodes.len().checked_sub(1);
        self.walk_with(
            g,
            tree,
            ids,
            |i| Some(i) == last,
            |_, _, logits| {
                root = Some(logits);
                Ok(())
            },
        )?;
        root.ok_or_else(|| GraphError::Data {
            op: "tree_lstm",
            what: "the tree has no nodes".into(),
        })
    }

    /// [`TreeLstm::tree_loss`] with whole tree nodes as calls: one call per
    /// node, then the root's loss out of its output.
    fn tree_loss_calls(
        &self,
        g: &mut Graph,
        w: &WholeNodes,
        tree: &Tree,
        ids: &[u32],
    ) -> Result<Expr> {
        let bad = |what: String| GraphError::Data {
            op: "tree_lstm",
            what,
        };
        let h = self.cfg.hidden;
        // Each node's loss with its subtree's where every node has one
        // parent (a tree); nodes shared by two parents would count twice,
        // so such a graph sums every node's own loss instead.
        let mut parents = vec![0u8; tree.nodes.len()];
        for node in &tree.nodes {
            if let Node::Inner { left, right, .. } = *node {
                for c in [left, right] {
                    if let Some(p) = parents.get_mut(c as usize) {
                        *p = p.saturating_add(1);
                    }
                }
            }
        }
        let nested = parents.iter().all(|&p| p <= 1);
        let mut outs: Vec<Expr> = Vec::with_capacity(tree.nodes.len());
        for (pos, node) in tree.nodes.iter().enumerate() {
            let label = node.label() as u32;
            let o = match *node {
                Node::Leaf { word, .. } => {
                    let id = word_id(ids, word, pos)?;
                    g.call_with_fields(&w.leaf, &[], &[id, label])?
                }
                Node::Inner { left, right, .. } => {
                    let child = |c: u32| {
                        outs.get(c as usize).copied().ok_or_else(|| {
                            bad(format!(
                                "node {pos} has child {c}, which does not come before it"
                            ))
                        })
                    };
                    let args = [child(left)?, child(right)?];
                    let f = if nested { &w.node } else { &w.node_own };
                    g.call_with_data(f, &args, label)?
                }
            };
            outs.push(o);
        }
        // The roots' subtree losses (one root in a tree), or every node's
        // own.
        let losses = (0..outs.len())
            .filter(|&i| !nested || parents[i] == 0)
            .map(|i| g.slice(outs[i], 2 * h, 2 * h + 1))
            .collect::<Result<Vec<_>>>()?;
        match losses.as_slice() {
            [] => Err(bad("the tree has no nodes".into())),
            [root] => Ok(*root),
            _ => g.sum(&losses),
        }
    }

    /// Walks the nodes in post-order, calling `out` with each node's
    /// logits.
    fn walk(
        &self,
        g: &mut Graph,
        tree: &Tree,
        ids: &[u32],
        out: impl FnMut(&mut Graph, &Node, Expr) -> Result<()>,
    ) -> Result<()> {
        self.walk_with(g, tree, ids, |_| true, out)
    }

    /// Walks the nodes in post-order (a loop over the list), building each
    /// cell, and the output layer where `wanted(position)` holds.
    fn walk_with(
        &self,
        g: &mut Graph,
        tree: &Tree,
        ids: &[u32],
        wanted: impl Fn(usize) -> bool,
        mut out: impl FnMut(&mut Graph, &Node, Expr) -> Result<()>,
    ) -> Result<()> {
        let bad = |what: String| GraphError::Data {
            op: "tree_lstm",
            what,
        };
        let train = g.is_train();
        let p_emb = if train { self.cfg.dropout_embed } else { 0.0 };
        let p_out = if train { self.cfg.dropout_output } else { 0.0 };
        // Each node's state `[c | h]` and its `h`, built once: the output
        // layer and the parent read the same `h` node (asking for it twice
        // would double the `cell_h` copies and make their batches mix rows
        // of several producers). Recurrent dropout is the cell's.
        let mut states: Vec<Expr> = Vec::with_capacity(tree.nodes.len());
        let mut hs: Vec<Expr> = Vec::with_capacity(tree.nodes.len());
        for (pos, node) in tree.nodes.iter().enumerate() {
            let state = match *node {
                Node::Leaf { word, .. } => {
                    let id = word_id(ids, word, pos)?;
                    let mut x = self.emb.forward(g, id)?;
                    if p_emb > 0.0 {
                        x = g.dropout(x, p_emb)?;
                    }
                    match &self.vertex {
                        Some(f) => g.call_one(&f.0, &[x])?,
                        None => self.cell.leaf(g, x)?,
                    }
                }
                Node::Inner { left, right, .. } => {
                    let child = |c: u32| {
                        let c = c as usize;
                        match (states.get(c), hs.get(c)) {
                            (Some(&s), Some(&h)) => Ok((s, h)),
                            _ => Err(bad(format!(
                                "node {pos} has child {c}, which does not come before it"
                            ))),
                        }
                    };
                    let ((sl, hl), (sr, hr)) = (child(left)?, child(right)?);
                    match &self.vertex {
                        Some(f) => g.call_one(&f.1, &[sl, sr, hl, hr])?,
                        None => self.cell.node_with(g, sl, sr, hl, hr)?,
                    }
                }
            };
            let h = self.cell.h(g, state)?;
            states.push(state);
            hs.push(h);
            if wanted(pos) {
                let mut h = h;
                if p_out > 0.0 {
                    h = g.dropout(h, p_out)?;
                }
                let logits = self.out.forward(g, h)?;
                out(g, node, logits)?;
            }
        }
        Ok(())
    }
}

/// The leaf cell on gates `[3H]` (`i, o, u`) with recurrent dropout `p`
/// (Semeniuta et al. 2016: `c = σ(i) ⊙ dropout(tanh(u))`, only the
/// candidate is dropped): [`Graph::tree_lstm_leaf`] for `p = 0`,
/// [`Graph::tree_lstm_leaf_rd`] otherwise, both fused.
pub fn leaf_cell(g: &mut Graph, gates: Expr, p: f32) -> Result<Expr> {
    if p == 0.0 {
        g.tree_lstm_leaf(gates)
    } else {
        g.tree_lstm_leaf_rd(gates, p)
    }
}

/// The internal cell on gates `[5H]` (`i, f_l, f_r, o, u`) and the
/// children's states with recurrent dropout `p` on the candidate (the
/// children's memory is kept): [`Graph::tree_lstm_node`] for `p = 0`,
/// [`Graph::tree_lstm_node_rd`] otherwise.
pub fn node_cell(g: &mut Graph, gates: Expr, left: Expr, right: Expr, p: f32) -> Result<Expr> {
    if p == 0.0 {
        g.tree_lstm_node(gates, left, right)
    } else {
        g.tree_lstm_node_rd(gates, left, right, p)
    }
}

/// The vocabulary id of word `word` of a tree (`ids`, see `Vocab::encode`),
/// for its leaf at `pos`.
fn word_id(ids: &[u32], word: u32, pos: usize) -> Result<u32> {
    ids.get(word as usize)
        .copied()
        .ok_or_else(|| GraphError::Data {
            op: "tree_lstm",
            what: format!(
                "leaf {pos} names word {word}, but the tree has {} word ids",
                ids.len()
            ),
        })
}
