//! W3 of `shared/BENCHMARKS.md`: Tree-LSTM inference on random binary
//! trees (the TensorFlow Fold paper's Table 1). Leaves are cells on
//! embedding lookups (vocabulary 1000, E = H = state size), internal nodes
//! the binary cell; no output layer, the output of a tree is its root
//! state `[c | h]`.
//!
//! Two implementations of the same model on the same parameters:
//! [`infer_graph`] builds a `sheaf_autodiff::Graph` and runs it with the
//! reference executor or a batching strategy, and [`Manual`] is the
//! hand-batched baseline written directly against the tensor backend (one
//! product and one fused cell per tree level), which is what dynamic
//! batching has to come close to.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sheaf_autodiff::{Expr, Graph, Init, Param, ParamStore, Sequential, VertexFn};
use sheaf_sched::Executor;
use sheaf_tensor::{Backend, CellSpec, DType, Device, Shape, Tensor, TensorMut, Transpose};

/// Leaves per tree.
pub const LEAVES: usize = 128;
/// Rows of the embedding table.
pub const VOCAB: usize = 1000;

/// A node of a random tree; children are positions earlier in the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeNode {
    /// A word id below [`VOCAB`].
    Leaf { word: u32 },
    /// Two children, both before this node in post-order.
    Inner { left: u32, right: u32 },
}

/// A binary tree as its post-order node list (the root last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RandomTree {
    pub nodes: Vec<TreeNode>,
}

impl RandomTree {
    /// A tree of `leaves` leaves: each span of leaves is split at a point
    /// drawn uniformly, so heights vary from tree to tree (about 4 ln n on
    /// average, n - 1 at worst). Words are uniform in the vocabulary.
    pub fn random(leaves: usize, rng: &mut StdRng) -> RandomTree {
        let mut nodes = Vec::with_capacity(2 * leaves);
        // Post-order without recursion: (span, expanded) frames; a span's
        // children are pushed after it is first seen, and the span itself
        // is emitted when it comes back expanded.
        let mut stack: Vec<(usize, bool)> = vec![(leaves.max(1), false)];
        let mut done: Vec<u32> = Vec::new();
        while let Some((n, expanded)) = stack.pop() {
            if n == 1 {
                done.push(nodes.len() as u32);
                nodes.push(TreeNode::Leaf {
                    word: rng.random_range(0..VOCAB as u32),
                });
            } else if expanded {
                let right = done.pop().unwrap_or_default();
                let left = done.pop().unwrap_or_default();
                done.push(nodes.len() as u32);
                nodes.push(TreeNode::Inner { left, right });
            } else {
                let k = rng.random_range(1..n);
                stack.push((n, true));
                stack.push((n - k, false));
                stack.push((k, false));
            }
        }
        RandomTree { nodes }
    }

    /// The same tree with new words (for "all trees one shape").
    pub fn with_new_words(&self, rng: &mut StdRng) -> RandomTree {
        let nodes = self
            .nodes
            .iter()
            .map(|n| match n {
                TreeNode::Leaf { .. } => TreeNode::Leaf {
                    word: rng.random_range(0..VOCAB as u32),
                },
                inner => *inner,
            })
            .collect();
        RandomTree { nodes }
    }

    /// Each node's level: 0 for leaves, else one more than its higher
    /// child; the root's level is the tree's height.
    pub fn levels(&self) -> Result<Vec<usize>, String> {
        let mut level: Vec<usize> = Vec::with_capacity(self.nodes.len());
        for (pos, n) in self.nodes.iter().enumerate() {
            level.push(match *n {
                TreeNode::Leaf { .. } => 0,
                TreeNode::Inner { left, right } => {
                    let get = |c: u32| {
                        ((c as usize) < pos)
                            .then(|| level[c as usize])
                            .ok_or_else(|| format!("node {pos}: child {c} does not precede it"))
                    };
                    1 + get(left)?.max(get(right)?)
                }
            });
        }
        Ok(level)
    }
}

/// `count` trees from `seed`: all of one random shape (`same`) or each of
/// its own; words are drawn afresh for every tree either way.
pub fn trees(count: usize, same: bool, seed: u64) -> Vec<RandomTree> {
    let mut rng = StdRng::seed_from_u64(seed);
    let shape = RandomTree::random(LEAVES, &mut rng);
    (0..count)
        .map(|_| {
            if same {
                shape.with_new_words(&mut rng)
            } else {
                RandomTree::random(LEAVES, &mut rng)
            }
        })
        .collect()
}

/// Useful inference FLOPs of one tree at state size `h` (E = H):
/// 2·E·3H per leaf, 2·2H·5H per internal node (216.8 M for 128 leaves at
/// H = 256).
pub fn infer_flops(tree: &RandomTree, h: usize) -> f64 {
    let (h, e) = (h as f64, h as f64);
    tree.nodes
        .iter()
        .map(|n| match n {
            TreeNode::Leaf { .. } => 2.0 * e * 3.0 * h,
            TreeNode::Inner { .. } => 2.0 * 2.0 * h * 5.0 * h,
        })
        .sum()
}

/// The parameters: `emb` `[VOCAB, H]`, `w_leaf` `[3H, H]`, `b_leaf`
/// `[3H]`, `u` `[5H, 2H]`, `b_int` `[5H]`.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    pub hidden: usize,
    pub emb: Param,
    pub w_leaf: Param,
    pub b_leaf: Param,
    pub u: Param,
    pub b_int: Param,
}

impl Model {
    /// Seeded parameters: matrices Glorot uniform, embeddings and biases
    /// uniform in ±0.1 (non-zero biases, so a misplaced bias shows in
    /// the comparison of the two implementations).
    pub fn new(store: &mut ParamStore, hidden: usize, seed: u64) -> Result<Model, String> {
        let mut rng = StdRng::seed_from_u64(seed);
        let small = Init::Uniform {
            low: -0.1,
            high: 0.1,
        };
        let h = hidden;
        let mut add = |name: &str, shape: Shape, init: Init| {
            store
                .add_param(name, shape, init, &mut rng)
                .map_err(|e| format!("W3 parameter {name}: {e}"))
        };
        Ok(Model {
            hidden,
            emb: add("emb", Shape::from([VOCAB, h]), small)?,
            w_leaf: add("w_leaf", Shape::from([3 * h, h]), Init::GlorotUniform)?,
            b_leaf: add("b_leaf", Shape::from([3 * h]), small)?,
            u: add("u", Shape::from([5 * h, 2 * h]), Init::GlorotUniform)?,
            b_int: add("b_int", Shape::from([5 * h]), small)?,
        })
    }
}

/// The leaf cell on the word vector `x`: `[2H]` state.
fn leaf_cell(g: &mut Graph, m: &Model, x: Expr) -> sheaf_autodiff::Result<Expr> {
    let (wl, bl) = (g.param(&m.w_leaf), g.param(&m.b_leaf));
    let gates = g.affine(bl, &[(wl, x)])?;
    g.tree_lstm_leaf(gates)
}

/// The binary cell on the children's states and `h`: `[2H]` state.
fn node_cell(g: &mut Graph, m: &Model, c: [Expr; 4]) -> sheaf_autodiff::Result<Expr> {
    let [sl, sr, hl, hr] = c;
    let hh = g.concat(&[hl, hr])?;
    let (u, bi) = (g.param(&m.u), g.param(&m.b_int));
    let gates = g.affine(bi, &[(u, hh)])?;
    g.tree_lstm_node(gates, sl, sr)
}

/// The cells of [`build_tree`] as vertex functions (Cavs): a leaf is the
/// lookup and ONE call of `F(x)` = leaf cell on `W_leaf x + b_leaf`, an
/// internal node ONE call of `F(s_l, s_r, h_l, h_r)` = binary cell on
/// `U [h_l; h_r] + b`, each followed by its `h` where a parent reads it:
/// 3 and 2 graph nodes instead of 4 and 4.
#[derive(Debug)]
pub struct VertexCells {
    leaf: VertexFn,
    node: VertexFn,
}

impl VertexCells {
    /// Traces both cells once over `m`'s parameters.
    pub fn new(m: &Model) -> Result<VertexCells, String> {
        let h = m.hidden;
        let m = *m;
        let err = |e: sheaf_autodiff::GraphError| format!("tracing a W3 vertex function: {e}");
        // A leaf is its word's lookup and cell (the word id as the call's
        // data); a node reads its children's states and takes their `h`
        // itself: one graph node per tree node.
        let leaf = VertexFn::trace_with_data("w3_leaf", &[], move |g, _, word| {
            let emb = g.param(&m.emb);
            let x = g.lookup(emb, word)?;
            Ok(vec![leaf_cell(g, &m, x)?])
        })
        .map_err(err)?;
        let s = Shape::from([2 * h]);
        let node = VertexFn::trace("w3_node", &[s, s], move |g, a| {
            let (hl, hr) = (g.cell_h(a[0])?, g.cell_h(a[1])?);
            Ok(vec![node_cell(g, &m, [a[0], a[1], hl, hr])?])
        })
        .map_err(err)?;
        Ok(VertexCells { leaf, node })
    }
}

/// Adds one tree to `g`; returns its root state `[2H]` (`[c | h]`).
pub fn build_tree(g: &mut Graph, m: &Model, tree: &RandomTree) -> Result<Expr, String> {
    build_tree_with(g, m, None, tree)
}

/// [`build_tree`] with the cells inlined (`cells` None) or called as
/// vertex functions: the same values, fewer graph nodes.
pub fn build_tree_with(
    g: &mut Graph,
    m: &Model,
    cells: Option<&VertexCells>,
    tree: &RandomTree,
) -> Result<Expr, String> {
    let err = |e: sheaf_autodiff::GraphError| format!("building a W3 tree: {e}");
    let mut states: Vec<Expr> = Vec::with_capacity(tree.nodes.len());
    let mut hs: Vec<Expr> = Vec::with_capacity(tree.nodes.len());
    for (pos, node) in tree.nodes.iter().enumerate() {
        let state = match *node {
            TreeNode::Leaf { word } => match cells {
                None => {
                    let emb = g.param(&m.emb);
                    let x = g.lookup(emb, word).map_err(err)?;
                    leaf_cell(g, m, x)
                }
                Some(c) => g.call_with_data(&c.leaf, &[], word),
            }
            .map_err(err)?,
            TreeNode::Inner { left, right } => {
                let child = |c: u32| {
                    let c = c as usize;
                    match (states.get(c), hs.get(c)) {
                        (Some(&s), Some(&h)) if c < pos => Ok((s, h)),
                        _ => Err(format!("node {pos}: child {c} does not precede it")),
                    }
                };
                let ((sl, hl), (sr, hr)) = (child(left)?, child(right)?);
                match cells {
                    None => node_cell(g, m, [sl, sr, hl, hr]),
                    Some(c) => g.call_one(&c.node, &[sl, sr]),
                }
                .map_err(err)?
            }
        };
        // Only an inlined parent reads `h` (a called one takes it itself);
        // the root's is never asked for.
        let h = if pos + 1 < tree.nodes.len() && cells.is_none() {
            g.cell_h(state).map_err(err)?
        } else {
            state
        };
        states.push(state);
        hs.push(h);
    }
    states
        .last()
        .copied()
        .ok_or_else(|| "a W3 tree has no nodes".to_string())
}

/// Runs `trees` as one graph (cleared first) with `exec` (None: the
/// reference `Sequential`); returns the root states, `[2H]` each.
pub fn infer_graph(
    g: &mut Graph,
    exec: Option<&mut Executor>,
    store: &ParamStore,
    m: &Model,
    trees: &[RandomTree],
) -> Result<Vec<Tensor>, String> {
    infer_graph_with(g, exec, store, m, None, trees)
}

/// [`infer_graph`], the cells inlined (`cells` None) or called as vertex
/// functions.
pub fn infer_graph_with(
    g: &mut Graph,
    exec: Option<&mut Executor>,
    store: &ParamStore,
    m: &Model,
    cells: Option<&VertexCells>,
    trees: &[RandomTree],
) -> Result<Vec<Tensor>, String> {
    g.clear();
    let roots = trees
        .iter()
        .map(|t| build_tree_with(g, m, cells, t))
        .collect::<Result<Vec<_>, _>>()?;
    // Forward computes every node up to the target: the last root is the
    // last node added.
    let Some(&last) = roots.last() else {
        return Ok(Vec::new());
    };
    match exec {
        None => drop(
            Sequential::new()
                .forward(g, store, last)
                .map_err(|e| format!("W3 forward (sequential): {e}"))?,
        ),
        Some(e) => drop(
            e.forward(g, store, last)
                .map_err(|e| format!("W3 forward: {e}"))?,
        ),
    }
    roots
        .iter()
        .map(|&r| {
            g.value(r)
                .cloned()
                .map_err(|e| format!("W3 root state: {e}"))
        })
        .collect()
}

/// The hand-batched baseline: all nodes of a batch of trees sorted by
/// level, every level one gather of the children's `h` into `[n, 2H]`, one
/// product with U and one fused cell, the leaves one gather from the
/// embedding table, one product and one leaf cell. Buffers are kept from
/// call to call while the batch's node count stays the same.
#[derive(Debug)]
pub struct Manual {
    be: &'static dyn Backend,
    /// Every node's `c` and `h`, `[nodes, H]` each, rows ordered by level.
    c: Option<Tensor>,
    h: Option<Tensor>,
}

/// The row layout of a batch: rows sorted by level, and per level the
/// children's rows of its nodes.
struct Layout {
    /// Word ids of the leaves (rows `0..leaves`).
    words: Vec<u32>,
    /// Per internal level: first row, left children's rows, right's.
    levels: Vec<(usize, Vec<u32>, Vec<u32>)>,
    /// Each tree's root row.
    roots: Vec<u32>,
    nodes: usize,
}

impl Layout {
    fn new(trees: &[RandomTree]) -> Result<Layout, String> {
        let levels: Vec<Vec<usize>> = trees
            .iter()
            .map(RandomTree::levels)
            .collect::<Result<_, _>>()?;
        let height = levels.iter().flatten().copied().max().unwrap_or(0);
        // Counting sort of (tree, node) by level gives each node its row.
        let mut count = vec![0usize; height + 2];
        levels.iter().flatten().for_each(|&l| count[l + 1] += 1);
        for l in 1..count.len() {
            count[l] += count[l - 1];
        }
        let first = count.clone();
        let mut next = count;
        let row_of: Vec<Vec<u32>> = levels
            .iter()
            .map(|ls| {
                ls.iter()
                    .map(|&l| {
                        next[l] += 1;
                        (next[l] - 1) as u32
                    })
                    .collect()
            })
            .collect();
        let nodes = first[height + 1];
        let mut words = vec![0u32; first[1]];
        let mut per_level: Vec<(usize, Vec<u32>, Vec<u32>)> = (1..=height)
            .map(|l| {
                let n = first[l + 1] - first[l];
                (first[l], vec![0; n], vec![0; n])
            })
            .collect();
        for ((tree, rows), ls) in trees.iter().zip(&row_of).zip(&levels) {
            for ((node, &row), &l) in tree.nodes.iter().zip(rows).zip(ls) {
                match *node {
                    TreeNode::Leaf { word } => words[row as usize] = word,
                    TreeNode::Inner { left, right } => {
                        let (start, lefts, rights) = &mut per_level[l - 1];
                        let k = row as usize - *start;
                        lefts[k] = rows[left as usize];
                        rights[k] = rows[right as usize];
                    }
                }
            }
        }
        let roots = row_of
            .iter()
            .map(|rows| rows.last().copied().ok_or("a W3 tree has no nodes"))
            .collect::<Result<_, _>>()?;
        Ok(Layout {
            words,
            levels: per_level,
            roots,
            nodes,
        })
    }
}

/// A zeroed f32 tensor.
fn zeros<const N: usize>(dims: [usize; N]) -> Result<Tensor, String> {
    Tensor::zeros(dims, DType::F32, Device::Cpu).map_err(|e| format!("W3 buffer {dims:?}: {e}"))
}

/// A `u32` index vector.
fn indices(idx: &[u32]) -> Result<Tensor, String> {
    Tensor::from_slice(idx, [idx.len()]).map_err(|e| format!("W3 indices: {e}"))
}

/// A mutable view of a whole tensor.
fn view(t: &mut Tensor) -> Result<TensorMut<'_>, String> {
    t.view_mut().map_err(|e| format!("W3 buffer: {e}"))
}

impl Manual {
    /// On the CPU backend.
    pub fn new() -> Result<Manual, String> {
        Ok(Manual {
            be: Device::Cpu
                .backend()
                .map_err(|e| format!("W3 manual: {e}"))?,
            c: None,
            h: None,
        })
    }

    /// The kept buffer if it is `[rows, cols]`, else a new one (taken out
    /// of the slot, so that writes to it stay in place).
    fn kept(slot: &mut Option<Tensor>, rows: usize, cols: usize) -> Result<Tensor, String> {
        match slot.take() {
            Some(t) if t.dims() == [rows, cols] => Ok(t),
            _ => zeros([rows, cols]),
        }
    }

    /// The root states of `trees`, `[trees, 2H]` (`[c | h]` per row).
    pub fn infer(
        &mut self,
        store: &ParamStore,
        m: &Model,
        trees: &[RandomTree],
    ) -> Result<Tensor, String> {
        // The same denormal policy as the executors apply.
        sheaf_tensor::denormals::prepare();
        let be = self.be;
        let k = |what: &'static str| {
            move |e: sheaf_tensor::TensorError| format!("W3 manual {what}: {e}")
        };
        let p = |p: &Param| store.value(p).map_err(|e| format!("W3 manual: {e}"));
        let (emb, w_leaf, b_leaf, u, b_int) = (
            p(&m.emb)?,
            p(&m.w_leaf)?,
            p(&m.b_leaf)?,
            p(&m.u)?,
            p(&m.b_int)?,
        );
        let h = m.hidden;
        let lay = Layout::new(trees)?;
        let mut c_all = Self::kept(&mut self.c, lay.nodes, h)?;
        let mut h_all = Self::kept(&mut self.h, lay.nodes, h)?;

        // Leaves: gather, one product, one cell, into rows 0..leaves.
        let n = lay.words.len();
        let mut x = zeros([n, h])?;
        be.gather_rows(emb, &indices(&lay.words)?, view(&mut x)?)
            .map_err(k("leaf gather"))?;
        let mut gates = zeros([n, 3 * h])?;
        be.broadcast_row(b_leaf, view(&mut gates)?)
            .map_err(k("leaf bias"))?;
        be.matmul(
            &x,
            Transpose::No,
            w_leaf,
            Transpose::Yes,
            1.0,
            1.0,
            view(&mut gates)?,
        )
        .map_err(k("leaf product"))?;
        let mut act = zeros([n, 3 * h])?;
        let mut outs = [
            view(&mut act)?,
            rows(&mut c_all, 0..n)?,
            rows(&mut h_all, 0..n)?,
        ];
        be.cell_fwd(CellSpec::TREE_LSTM_LEAF, &[&gates], &mut outs)
            .map_err(k("leaf cell"))?;

        // Internal levels, bottom up.
        for (start, lefts, rights) in &lay.levels {
            let n = lefts.len();
            let pairs: Vec<u32> = lefts
                .iter()
                .zip(rights)
                .flat_map(|(&l, &r)| [l, r])
                .collect();
            // [h_l; h_r] per row: the children's h rows side by side.
            let mut hh = zeros([2 * n, h])?;
            be.gather_rows(&h_all, &indices(&pairs)?, view(&mut hh)?)
                .map_err(k("child h gather"))?;
            let hh = hh.reshape([n, 2 * h]).map_err(k("child h"))?;
            let mut cc = zeros([2 * n, h])?;
            let sides: Vec<u32> = lefts.iter().chain(rights).copied().collect();
            be.gather_rows(&c_all, &indices(&sides)?, view(&mut cc)?)
                .map_err(k("child c gather"))?;
            let (c_l, c_r) = (
                cc.rows(0..n).map_err(k("c_l"))?,
                cc.rows(n..2 * n).map_err(k("c_r"))?,
            );
            let mut gates = zeros([n, 5 * h])?;
            be.broadcast_row(b_int, view(&mut gates)?)
                .map_err(k("node bias"))?;
            be.matmul(
                &hh,
                Transpose::No,
                u,
                Transpose::Yes,
                1.0,
                1.0,
                view(&mut gates)?,
            )
            .map_err(k("node product"))?;
            let mut act = zeros([n, 5 * h])?;
            let span = *start..start + n;
            be.cell_fwd(
                CellSpec::TREE_LSTM_NODE,
                &[&gates, &c_l, &c_r],
                &mut [
                    view(&mut act)?,
                    rows(&mut c_all, span.clone())?,
                    rows(&mut h_all, span)?,
                ],
            )
            .map_err(k("node cell"))?;
        }

        // Roots as [c | h] rows: gather each half, scatter into the
        // interleaved [2b, H] view.
        let b = lay.roots.len();
        let roots = indices(&lay.roots)?;
        let mut out = zeros([2 * b, h])?;
        for (half, all) in [(0u32, &c_all), (1, &h_all)] {
            let mut part = zeros([b, h])?;
            be.gather_rows(all, &roots, view(&mut part)?)
                .map_err(k("root gather"))?;
            let at: Vec<u32> = (0..b as u32).map(|r| 2 * r + half).collect();
            be.scatter_add_rows(&part, &indices(&at)?, view(&mut out)?)
                .map_err(k("root scatter"))?;
        }
        self.c = Some(c_all);
        self.h = Some(h_all);
        out.reshape([b, 2 * h]).map_err(k("roots"))
    }
}

/// Rows `range` of `t`, mutably.
fn rows(t: &mut Tensor, range: std::ops::Range<usize>) -> Result<TensorMut<'_>, String> {
    view(t)?
        .into_rows_mut(range)
        .map_err(|e| format!("W3 buffer rows: {e}"))
}
