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
    pub fn params(&self) -> [Param; 4] {
        [self.w_leaf, self.b_leaf, self.u, self.b]
    }

    /// The hidden size.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// A leaf's state from its input `x` `[in]`.
    pub fn leaf(&self, g: &mut Graph, x: Expr) -> Result<Expr> {
        let (w, b) = (g.param(&self.w_leaf), g.param(&self.b_leaf));
        let gates = g.affine(b, &[(w, x)])?;
        match self.rate(g) {
            0.0 => g.tree_lstm_leaf(gates),
            p => g.tree_lstm_leaf_rd(gates, p),
        }
    }

    /// An internal node's state from its children's states.
    pub fn node(&self, g: &mut Graph, left: Expr, right: Expr) -> Result<Expr> {
        let (hl, hr) = (g.cell_h(left)?, g.cell_h(right)?);
        self.node_with(g, left, right, hl, hr)
    }

    /// [`BinaryTreeLstm::node`] given the children's hidden states too
    /// (when the caller already took them with [`Graph::cell_h`]: one copy
    /// less per child).
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
    pub fn params(&self) -> [Param; 6] {
        [
            self.w_iou, self.u_iou, self.b_iou, self.w_f, self.u_f, self.b_f,
        ]
    }

    /// The state of a node with input `x` `[in]` and the states of its
    /// `children` (none at a leaf).
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
    pub fn params(&self) -> Vec<Param> {
        self.w.into_iter().chain([self.u, self.b]).collect()
    }

    /// The state of a node from its input (required exactly when the cell
    /// was made with `inp > 0`) and its children in slots (`None`: no
    /// child there; at most `n`).
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
    pub fn h(&self, g: &mut Graph, state: Expr) -> Result<Expr> {
        g.slice(state, self.hidden, 2 * self.hidden)
    }
}
