//! [`BinaryTreeLstm`]: Tai et al. (2015)'s binary (N-ary, N = 2)
//! constituency Tree-LSTM, the cell of the SST model and of W1 / W3.

use sheaf_autodiff::{Expr, Graph, GraphError, Param, Result};

use crate::scope::Scope;

/// The binary Tree-LSTM: a leaf reads an input `x` `[in]`
/// (`[i, o, u] = W_leaf x + b_leaf`, no forget gates), an internal node
/// its children's hidden states (`[i, f_l, f_r, o, u] = U [h_l; h_r] +
/// b`); states are `[c | h]` `[2H]`. Parameters `w_leaf` `[3H, in]`,
/// `b_leaf` `[3H]`, `u` `[5H, 2H]`, `b` `[5H]`. Recurrent dropout
/// (Semeniuta et al. 2016) of rate `recurrent_dropout` on the candidate.
///
/// ```
/// use sheaf_autodiff::{Graph, GraphError, ParamStore, Sequential};
/// use sheaf_nn::prelude::*;
///
/// let mut store = ParamStore::new();
/// let mut root = Scope::new(&mut store, 1);
/// let emb = Embedding::new(&mut root.sub("emb")?, 10, 4)?;
/// let cell = BinaryTreeLstm::new(&mut root.sub("tree")?, 4, 6, 0.0)?;
/// let mut g = Graph::new();
/// // ((1 2) 3): leaves from word vectors, nodes from their children.
/// let leaf = |g: &mut Graph, w: u32| -> Result<_, GraphError> {
///     let x = emb.forward(g, w)?;
///     cell.leaf(g, x)
/// };
/// let (a, b, c) = (leaf(&mut g, 1)?, leaf(&mut g, 2)?, leaf(&mut g, 3)?);
/// let ab = cell.node(&mut g, a, b)?;
/// let top = cell.node(&mut g, ab, c)?;
/// let h = cell.h(&mut g, top)?;
/// assert_eq!(Sequential::new().forward(&mut g, &store, h)?.dims(), &[6]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct BinaryTreeLstm {
    w_leaf: Param,
    b_leaf: Param,
    u: Param,
    b: Param,
    hidden: usize,
    recurrent_dropout: f32,
}

impl BinaryTreeLstm {
    /// The cell's parameters in `scope`. Errors: zero sizes, a dropout
    /// rate outside `[0, 1)`.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{BinaryTreeLstm, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// BinaryTreeLstm::new(&mut root.sub("tree")?, 8, 4, 0.25)?;
    /// let e = BinaryTreeLstm::new(&mut root.sub("bad")?, 8, 0, 0.0).unwrap_err();
    /// assert!(e.to_string().contains("input 8 and hidden 0 must be positive"));
    /// assert_eq!(store.get("tree.u").unwrap().shape().dims(), &[20, 8]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn new(
        scope: &mut Scope<'_>,
        inp: usize,
        hidden: usize,
        recurrent_dropout: f32,
    ) -> Result<BinaryTreeLstm> {
        if inp == 0 || hidden == 0 || !(0.0..1.0).contains(&recurrent_dropout) {
            return Err(GraphError::Params(format!(
                "BinaryTreeLstm: input {inp} and hidden {hidden} must be positive and the \
                 recurrent dropout in [0, 1), it is {recurrent_dropout}"
            )));
        }
        Ok(BinaryTreeLstm {
            w_leaf: scope.matrix("w_leaf", 3 * hidden, inp)?,
            b_leaf: scope.bias("b_leaf", 3 * hidden)?,
            u: scope.matrix("u", 5 * hidden, 2 * hidden)?,
            b: scope.bias("b", 5 * hidden)?,
            hidden,
            recurrent_dropout,
        })
    }

    /// `w_leaf`, `b_leaf`, `u`, `b`.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{BinaryTreeLstm, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let cell = BinaryTreeLstm::new(&mut Scope::new(&mut store, 1).sub("tree")?, 3, 4, 0.0)?;
    /// let shapes: Vec<Vec<usize>> =
    ///     cell.params().iter().map(|p| p.shape().dims().to_vec()).collect();
    /// assert_eq!(shapes, [vec![12, 3], vec![12], vec![20, 8], vec![20]]);
    /// assert_eq!(store.name(cell.params()[2].id())?, "tree.u");
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn params(&self) -> [Param; 4] {
        [self.w_leaf, self.b_leaf, self.u, self.b]
    }

    /// The hidden size.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{BinaryTreeLstm, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let cell = BinaryTreeLstm::new(&mut Scope::new(&mut store, 1), 3, 4, 0.0)?;
    /// assert_eq!(cell.hidden(), 4);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// A leaf's state from its input `x` `[in]`.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{BinaryTreeLstm, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let cell = BinaryTreeLstm::new(&mut Scope::new(&mut store, 1), 3, 4, 0.0)?;
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![0.0f32; 3], [3]).unwrap());
    /// let s = cell.leaf(&mut g, x)?;
    /// // [c | h]; a zero input (and the zero initial bias) gives c = h = 0.
    /// let s = Sequential::new().forward(&mut g, &store, s)?.to_vec::<f32>().unwrap();
    /// assert_eq!(s, vec![0.0; 8]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn leaf(&self, g: &mut Graph, x: Expr) -> Result<Expr> {
        let (w, b) = (g.param(&self.w_leaf), g.param(&self.b_leaf));
        let gates = g.affine(b, &[(w, x)])?;
        match self.rate(g) {
            0.0 => g.tree_lstm_leaf(gates),
            p => g.tree_lstm_leaf_rd(gates, p),
        }
    }

    /// An internal node's state from its children's states.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{BinaryTreeLstm, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let cell = BinaryTreeLstm::new(&mut Scope::new(&mut store, 1), 3, 4, 0.0)?;
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![1.0f32, 0.0, -1.0], [3]).unwrap());
    /// let (l, r) = (cell.leaf(&mut g, x)?, cell.leaf(&mut g, x)?);
    /// let s = cell.node(&mut g, l, r)?;
    /// assert_eq!(Sequential::new().forward(&mut g, &store, s)?.dims(), &[8]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn node(&self, g: &mut Graph, left: Expr, right: Expr) -> Result<Expr> {
        let (hl, hr) = (g.cell_h(left)?, g.cell_h(right)?);
        self.node_with(g, left, right, hl, hr)
    }

    /// [`BinaryTreeLstm::node`] given the children's hidden states too
    /// (when the caller already took them with [`Graph::cell_h`]: one copy
    /// less per child).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{BinaryTreeLstm, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let cell = BinaryTreeLstm::new(&mut Scope::new(&mut store, 1), 3, 4, 0.0)?;
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![1.0f32, 0.0, -1.0], [3]).unwrap());
    /// let (l, r) = (cell.leaf(&mut g, x)?, cell.leaf(&mut g, x)?);
    /// // The children's h, taken once (e.g. also read by an output layer).
    /// let (hl, hr) = (g.cell_h(l)?, g.cell_h(r)?);
    /// let a = cell.node_with(&mut g, l, r, hl, hr)?;
    /// let b = cell.node(&mut g, l, r)?;
    /// let seq = Sequential::new();
    /// let a = seq.forward(&mut g, &store, a)?.to_vec::<f32>().unwrap();
    /// assert_eq!(a, seq.forward(&mut g, &store, b)?.to_vec::<f32>().unwrap());
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn node_with(
        &self,
        g: &mut Graph,
        left: Expr,
        right: Expr,
        h_left: Expr,
        h_right: Expr,
    ) -> Result<Expr> {
        let hh = g.concat(&[h_left, h_right])?;
        let (u, b) = (g.param(&self.u), g.param(&self.b));
        let gates = g.affine(b, &[(u, hh)])?;
        match self.rate(g) {
            0.0 => g.tree_lstm_node(gates, left, right),
            p => g.tree_lstm_node_rd(gates, left, right, p),
        }
    }

    /// The hidden state `h` `[H]` of a state.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{BinaryTreeLstm, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let cell = BinaryTreeLstm::new(&mut Scope::new(&mut store, 1), 3, 4, 0.0)?;
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![1.0f32, 0.0, -1.0], [3]).unwrap());
    /// let s = cell.leaf(&mut g, x)?;
    /// let h = cell.h(&mut g, s)?;
    /// let seq = Sequential::new();
    /// let s = seq.forward(&mut g, &store, s)?.to_vec::<f32>().unwrap();
    /// // The second half of [c | h].
    /// assert_eq!(seq.forward(&mut g, &store, h)?.to_vec::<f32>().unwrap(), s[4..]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn h(&self, g: &mut Graph, state: Expr) -> Result<Expr> {
        g.cell_h(state)
    }

    /// The recurrent dropout rate of a graph: none outside training, so an
    /// evaluation graph has the plain fused cells (the `_rd` ops would be
    /// the identity there, under another signature and kernel).
    fn rate(&self, g: &Graph) -> f32 {
        match g.is_train() {
            true => self.recurrent_dropout,
            false => 0.0,
        }
    }
}

/// A child's state must be `[c | h]`, `[2H]`.
fn check_child(g: &Graph, cell: &str, k: usize, s: Expr, h: usize) -> Result<()> {
    let shape = g.shape(s)?;
    if shape.dims() != [2 * h] {
        return Err(GraphError::Params(format!(
            "{cell}: child {k} has shape {shape}, a state of this cell is [{}]",
            2 * h
        )));
    }
    Ok(())
}

/// The gates `i, o, u` of a composed Tree-LSTM cell from pre-activations
/// `iou` `[3H]`, and the new state `[c | h]` with `c = σ(i) tanh(u) +
/// sum_k σ(f_k) c_k` for the children's forget pre-activations `f_pre`
/// and memories `c_children`.
fn compose_state(
    g: &mut Graph,
    hidden: usize,
    iou: Expr,
    f_pre: &[Expr],
    c_children: &[Expr],
) -> Result<Expr> {
    let h = hidden;
    let i = g.slice(iou, 0, h)?;
    let i = g.sigmoid(i)?;
    let o = g.slice(iou, h, 2 * h)?;
    let o = g.sigmoid(o)?;
    let u = g.slice(iou, 2 * h, 3 * h)?;
    let u = g.tanh(u)?;
    let mut terms = vec![g.cmult(i, u)?];
    for (&f, &c) in f_pre.iter().zip(c_children) {
        let f = g.sigmoid(f)?;
        terms.push(g.cmult(f, c)?);
    }
    let c = match terms.len() {
        1 => terms[0],
        _ => g.sum(&terms)?,
    };
    let tc = g.tanh(c)?;
    let hn = g.cmult(o, tc)?;
    g.concat(&[c, hn])
}

/// Tai et al. (2015)'s child-sum Tree-LSTM, for trees of any branching
/// (dependency trees): `h~ = sum_k h_k`; `[i, o, u] = W_iou x + U_iou h~ +
/// b_iou`; one forget gate per child, `f_k = σ(W_f x + U_f h_k + b_f)`;
/// `c = σ(i) tanh(u) + sum_k f_k c_k`, `h = σ(o) tanh(c)`. States are
/// `[c | h]` `[2H]`. Parameters `w_iou` `[3H, in]`, `u_iou` `[3H, H]`,
/// `b_iou` `[3H]`, `w_f` `[H, in]`, `u_f` `[H, H]`, `b_f` `[H]`. Made of
/// elementwise ops (no fused kernel): children lists of one length batch
/// together.
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore, Sequential};
/// use sheaf_nn::prelude::*;
/// use sheaf_tensor::Tensor;
///
/// let mut store = ParamStore::new();
/// let cell = ChildSumTreeLstm::new(&mut Scope::new(&mut store, 1).sub("dep")?, 3, 4)?;
/// let mut g = Graph::new();
/// let xs: Vec<_> = (0..4)
///     .map(|t| g.input(Tensor::from_vec(vec![t as f32; 3], [3]).unwrap()))
///     .collect();
/// // A head (word 0) with three dependents, leaves.
/// let deps = xs[1..]
///     .iter()
///     .map(|&x| cell.node(&mut g, x, &[]))
///     .collect::<Result<Vec<_>, _>>()?;
/// let head = cell.node(&mut g, xs[0], &deps)?;
/// let h = cell.h(&mut g, head)?;
/// assert_eq!(Sequential::new().forward(&mut g, &store, h)?.dims(), &[4]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ChildSumTreeLstm {
    w_iou: Param,
    u_iou: Param,
    b_iou: Param,
    w_f: Param,
    u_f: Param,
    b_f: Param,
    hidden: usize,
}

impl ChildSumTreeLstm {
    /// The cell's parameters in `scope`. Errors: zero sizes.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{ChildSumTreeLstm, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// ChildSumTreeLstm::new(&mut root.sub("dep")?, 3, 4)?;
    /// let e = ChildSumTreeLstm::new(&mut root.sub("bad")?, 0, 4).unwrap_err();
    /// assert!(e.to_string().contains("ChildSumTreeLstm: input 0 and hidden 4 must be positive"));
    /// assert_eq!(store.get("dep.u_f").unwrap().shape().dims(), &[4, 4]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn new(scope: &mut Scope<'_>, inp: usize, hidden: usize) -> Result<ChildSumTreeLstm> {
        if inp == 0 || hidden == 0 {
            return Err(GraphError::Params(format!(
                "ChildSumTreeLstm: input {inp} and hidden {hidden} must be positive"
            )));
        }
        Ok(ChildSumTreeLstm {
            w_iou: scope.matrix("w_iou", 3 * hidden, inp)?,
            u_iou: scope.matrix("u_iou", 3 * hidden, hidden)?,
            b_iou: scope.bias("b_iou", 3 * hidden)?,
            w_f: scope.matrix("w_f", hidden, inp)?,
            u_f: scope.matrix("u_f", hidden, hidden)?,
            b_f: scope.bias("b_f", hidden)?,
            hidden,
        })
    }

    /// Every parameter.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{ChildSumTreeLstm, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let cell = ChildSumTreeLstm::new(&mut Scope::new(&mut store, 1).sub("dep")?, 3, 4)?;
    /// let names: Vec<_> = cell
    ///     .params()
    ///     .iter()
    ///     .map(|p| store.name(p.id()).map(str::to_string))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(names, ["dep.w_iou", "dep.u_iou", "dep.b_iou", "dep.w_f", "dep.u_f", "dep.b_f"]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn params(&self) -> [Param; 6] {
        [
            self.w_iou, self.u_iou, self.b_iou, self.w_f, self.u_f, self.b_f,
        ]
    }

    /// The state of a node with input `x` `[in]` and the states of its
    /// `children` (none at a leaf).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{ChildSumTreeLstm, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let cell = ChildSumTreeLstm::new(&mut Scope::new(&mut store, 1), 3, 4)?;
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![1.0f32, 0.0, -1.0], [3]).unwrap());
    /// let y = g.input(Tensor::from_vec(vec![0.5f32; 3], [3]).unwrap());
    /// let (a, b) = (cell.node(&mut g, x, &[])?, cell.node(&mut g, y, &[])?);
    /// // The children are summed: their order does not matter.
    /// let ab = cell.node(&mut g, x, &[a, b])?;
    /// let ba = cell.node(&mut g, x, &[b, a])?;
    /// let seq = Sequential::new();
    /// let p = seq.forward(&mut g, &store, ab)?.to_vec::<f32>().unwrap();
    /// let q = seq.forward(&mut g, &store, ba)?.to_vec::<f32>().unwrap();
    /// assert!(p.len() == 8 && p.iter().zip(&q).all(|(u, v)| (u - v).abs() < 1e-6));
    /// // A child must be a state [2H].
    /// let e = cell.node(&mut g, x, &[y]).unwrap_err();
    /// assert!(e.to_string().contains("child 0 has shape [3], a state of this cell is [8]"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn node(&self, g: &mut Graph, x: Expr, children: &[Expr]) -> Result<Expr> {
        let h = self.hidden;
        let (w_iou, b_iou) = (g.param(&self.w_iou), g.param(&self.b_iou));
        let mut cs = Vec::with_capacity(children.len());
        let mut hs = Vec::with_capacity(children.len());
        for (k, &s) in children.iter().enumerate() {
            check_child(g, "ChildSumTreeLstm", k, s, h)?;
            cs.push(g.slice(s, 0, h)?);
            hs.push(g.slice(s, h, 2 * h)?);
        }
        let iou = match hs.len() {
            0 => g.affine(b_iou, &[(w_iou, x)])?,
            _ => {
                let h_sum = if hs.len() == 1 { hs[0] } else { g.sum(&hs)? };
                let u_iou = g.param(&self.u_iou);
                g.affine(b_iou, &[(w_iou, x), (u_iou, h_sum)])?
            }
        };
        let mut f_pre = Vec::with_capacity(hs.len());
        if !hs.is_empty() {
            let (w_f, u_f, b_f) = (g.param(&self.w_f), g.param(&self.u_f), g.param(&self.b_f));
            // W_f x + b_f once, U_f h_k per child.
            let wx = g.affine(b_f, &[(w_f, x)])?;
            for &hk in &hs {
                let uh = g.linear(u_f, hk)?;
                f_pre.push(g.add(wx, uh)?);
            }
        }
        compose_state(g, h, iou, &f_pre, &cs)
    }

    /// The hidden state `h` `[H]` of a state.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{ChildSumTreeLstm, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let cell = ChildSumTreeLstm::new(&mut Scope::new(&mut store, 1), 3, 4)?;
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![1.0f32, 0.0, -1.0], [3]).unwrap());
    /// let s = cell.node(&mut g, x, &[])?;
    /// let h = cell.h(&mut g, s)?;
    /// let seq = Sequential::new();
    /// let s = seq.forward(&mut g, &store, s)?.to_vec::<f32>().unwrap();
    /// // The second half of [c | h].
    /// assert_eq!(seq.forward(&mut g, &store, h)?.to_vec::<f32>().unwrap(), s[4..]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn h(&self, g: &mut Graph, state: Expr) -> Result<Expr> {
        g.slice(state, self.hidden, 2 * self.hidden)
    }
}

/// Tai et al. (2015)'s N-ary Tree-LSTM: children in up to `n` ordered
/// slots (a missing child is a zero state), an optional input at every
/// node: `[i, o, u, f_1..f_n] = W x + U [h_1; ..; h_n] + b` (`W` only with
/// an input), `c = σ(i) tanh(u) + sum_l σ(f_l) c_l`, `h = σ(o) tanh(c)`.
/// Parameters `w` `[(3+n) H, in]` (when `inp > 0`), `u` `[(3+n) H, n H]`,
/// `b` `[(3+n) H]`, rows in that order. (The fused [`BinaryTreeLstm`]
/// computes the binary case with inputs at the leaves only and rows
/// `i, f_l, f_r, o, u`: the same equations, other weights.)
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore, Sequential};
/// use sheaf_nn::prelude::*;
/// use sheaf_tensor::Tensor;
///
/// let mut store = ParamStore::new();
/// let cell = NaryTreeLstm::new(&mut Scope::new(&mut store, 1).sub("tree")?, 3, 4, 2)?;
/// let mut g = Graph::new();
/// let xs: Vec<_> = (0..3)
///     .map(|t| g.input(Tensor::from_vec(vec![t as f32; 3], [3]).unwrap()))
///     .collect();
/// // Inputs at every node; children in ordered slots (left, right).
/// let l = cell.node(&mut g, Some(xs[0]), &[])?;
/// let r = cell.node(&mut g, Some(xs[1]), &[])?;
/// let top = cell.node(&mut g, Some(xs[2]), &[Some(l), Some(r)])?;
/// let h = cell.h(&mut g, top)?;
/// assert_eq!(Sequential::new().forward(&mut g, &store, h)?.dims(), &[4]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct NaryTreeLstm {
    w: Option<Param>,
    u: Param,
    b: Param,
    n: usize,
    hidden: usize,
}

impl NaryTreeLstm {
    /// The cell's parameters in `scope` for `n` child slots and inputs of
    /// width `inp` (0: nodes have no input). Errors: zero `n` or hidden.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{NaryTreeLstm, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// NaryTreeLstm::new(&mut root.sub("tree")?, 3, 4, 2)?;
    /// // (3 + n) H rows: i, o, u and a forget gate per slot.
    /// assert_eq!(store.get("tree.w").unwrap().shape().dims(), &[20, 3]);
    /// let e = NaryTreeLstm::new(&mut Scope::new(&mut store, 1).sub("bad")?, 3, 4, 0).unwrap_err();
    /// assert!(e.to_string().contains("0 child slots and hidden 4 must be positive"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn new(scope: &mut Scope<'_>, inp: usize, hidden: usize, n: usize) -> Result<NaryTreeLstm> {
        if n == 0 || hidden == 0 {
            return Err(GraphError::Params(format!(
                "NaryTreeLstm: {n} child slots and hidden {hidden} must be positive"
            )));
        }
        let rows = (3 + n) * hidden;
        Ok(NaryTreeLstm {
            w: (inp > 0)
                .then(|| scope.matrix("w", rows, inp))
                .transpose()?,
            u: scope.matrix("u", rows, n * hidden)?,
            b: scope.bias("b", rows)?,
            n,
            hidden,
        })
    }

    /// Every parameter.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{NaryTreeLstm, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let with_inputs = NaryTreeLstm::new(&mut root.sub("a")?, 3, 4, 2)?;
    /// // Without inputs (inp = 0) there is no `w`.
    /// let without = NaryTreeLstm::new(&mut root.sub("b")?, 0, 4, 2)?;
    /// assert_eq!((with_inputs.params().len(), without.params().len()), (3, 2));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn params(&self) -> Vec<Param> {
        self.w.into_iter().chain([self.u, self.b]).collect()
    }

    /// The state of a node from its input (required exactly when the cell
    /// was made with `inp > 0`) and its children in slots (`None`: no
    /// child there; at most `n`).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{NaryTreeLstm, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// // Three slots, no inputs: leaves read only the bias.
    /// let cell = NaryTreeLstm::new(&mut Scope::new(&mut store, 1), 0, 4, 3)?;
    /// let mut g = Graph::new();
    /// let leaf = cell.node(&mut g, None, &[])?;
    /// // Children in slots 0 and 2, none in slot 1.
    /// let s = cell.node(&mut g, None, &[Some(leaf), None, Some(leaf)])?;
    /// assert_eq!(Sequential::new().forward(&mut g, &store, s)?.dims(), &[8]);
    /// let e = cell.node(&mut g, None, &[None; 4]).unwrap_err();
    /// assert!(e.to_string().contains("NaryTreeLstm: 4 children for 3 slots"));
    /// let e = cell.node(&mut g, Some(leaf), &[]).unwrap_err();
    /// assert!(e.to_string().contains("made without inputs"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn node(&self, g: &mut Graph, x: Option<Expr>, children: &[Option<Expr>]) -> Result<Expr> {
        let (h, n) = (self.hidden, self.n);
        if children.len() > n {
            return Err(GraphError::Params(format!(
                "NaryTreeLstm: {} children for {n} slots",
                children.len()
            )));
        }
        let zero =
            sheaf_tensor::Tensor::zeros([h], sheaf_tensor::DType::F32, sheaf_tensor::Device::Cpu)
                .map_err(|source| GraphError::Tensor {
                context: "NaryTreeLstm zero child".into(),
                source: Box::new(source),
            })?;
        let mut cs = Vec::with_capacity(n);
        let mut hs = Vec::with_capacity(n);
        for slot in 0..n {
            match children.get(slot).copied().flatten() {
                Some(s) => {
                    check_child(g, "NaryTreeLstm", slot, s, h)?;
                    cs.push(Some(g.slice(s, 0, h)?));
                    hs.push(g.slice(s, h, 2 * h)?);
                }
                None => {
                    cs.push(None);
                    hs.push(g.input(zero.clone()));
                }
            }
        }
        let hh = if n == 1 { hs[0] } else { g.concat(&hs)? };
        let (u, b) = (g.param(&self.u), g.param(&self.b));
        let gates = match (self.w, x) {
            (Some(w), Some(x)) => {
                let w = g.param(&w);
                g.affine(b, &[(w, x), (u, hh)])?
            }
            (None, None) => g.affine(b, &[(u, hh)])?,
            (Some(_), None) => {
                return Err(GraphError::Params(
                    "NaryTreeLstm: this cell reads an input at every node".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(GraphError::Params(
                    "NaryTreeLstm: this cell was made without inputs (inp = 0)".into(),
                ))
            }
        };
        let iou = g.slice(gates, 0, 3 * h)?;
        let mut f_pre = Vec::new();
        let mut c_kids = Vec::new();
        for (l, c) in cs.into_iter().enumerate() {
            // A missing child's memory is zero: its forget term vanishes.
            if let Some(c) = c {
                f_pre.push(g.slice(gates, (3 + l) * h, (4 + l) * h)?);
                c_kids.push(c);
            }
        }
        compose_state(g, h, iou, &f_pre, &c_kids)
    }

    /// The hidden state `h` `[H]` of a state.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{NaryTreeLstm, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let cell = NaryTreeLstm::new(&mut Scope::new(&mut store, 1), 0, 4, 2)?;
    /// let mut g = Graph::new();
    /// let leaf = cell.node(&mut g, None, &[])?;
    /// let s = cell.node(&mut g, None, &[Some(leaf), Some(leaf)])?;
    /// let h = cell.h(&mut g, s)?;
    /// let seq = Sequential::new();
    /// let s = seq.forward(&mut g, &store, s)?.to_vec::<f32>().unwrap();
    /// // The second half of [c | h].
    /// assert_eq!(seq.forward(&mut g, &store, h)?.to_vec::<f32>().unwrap(), s[4..]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn h(&self, g: &mut Graph, state: Expr) -> Result<Expr> {
        g.slice(state, self.hidden, 2 * self.hidden)
    }
}
