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
        match self.recurrent_dropout {
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
        match self.recurrent_dropout {
            0.0 => g.tree_lstm_node(gates, left, right),
            p => g.tree_lstm_node_rd(gates, left, right, p),
        }
    }

    /// The hidden state `h` `[H]` of a state.
    pub fn h(&self, g: &mut Graph, state: Expr) -> Result<Expr> {
        g.cell_h(state)
    }
}
