//! Fused recurrent cells: LSTM, GRU and the binary Tree-LSTM (leaf and
//! internal node), plus [`Graph::cell_c`] / [`Graph::cell_h`] to read the
//! two halves of a cell state.
//!
//! These ops are written only through the public [`Op`] trait and the
//! [`Backend`] kernels, exactly as a user's own fused op would be: they are
//! the proof of the extension point.
//!
//! A cell's STATE is one vector `[2H]` laid out `[c | h]` (the memory cell
//! first, then the hidden state), so one node carries both outputs and a
//! cell feeds the next with a single argument. A batch of states is
//! `[b, 2H]`, the halves side by side in each row, and the cells run on
//! that layout ([`sheaf_tensor::StateCellOps`], cells described in
//! [`sheaf_tensor::cell`]): the CPU kernels read and
//! write the halves where they lie; a backend whose kernels take separate
//! `[b, H]` blocks copies them out and back (one column copy each, none for
//! a batch of one). Every cell saves its activated gates (`[kH]`) as the
//! auxiliary buffer for backward.
//!
//! All cells are elementwise work, hence [`crate::Cost::Cheap`] (the
//! products that compute their gates are the heavy part).

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Backend, CellSpec, DType, Shape, Tensor, TensorError, TensorMut};

use crate::error::{GraphError, Result};
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::ops::dropout::uniform;
use crate::{Expr, Graph};

/// Result of the kernel side (forward / backward).
type KResult<T> = sheaf_tensor::Result<T>;

static LSTM: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(LstmCell));
static GRU: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(GruCell));
static TREE_LEAF: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(TreeLstmLeaf));
static TREE_NODE: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(TreeLstmNode));
static CELL_C: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(StateHalf(Half::C)));
static CELL_H: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(StateHalf(Half::H)));

// ----- shapes -----

/// Length of a rank-1 shape.
fn vec_len(s: &Shape) -> Option<usize> {
    match s.dims() {
        [n] => Some(*n),
        _ => None,
    }
}

/// `H` of a gate vector `[k H]` with `H >= 1`.
fn hidden_of(gates: &Shape, k: usize) -> Option<usize> {
    let n = vec_len(gates)?;
    (n > 0 && n % k == 0).then_some(n / k)
}

/// Whether `s` is a cell state `[2H]`.
fn is_state(s: &Shape, h: usize) -> bool {
    vec_len(s) == Some(2 * h)
}

// ----- errors of the kernel side -----

fn bad_args(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "args",
        reason: "do not match the op's arity",
    }
}

fn missing_aux(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "aux",
        reason: "must hold the activated gates declared by aux_shape",
    }
}

// ----- the [c | h] layout -----

/// Which half of a cell state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Half {
    C = 0,
    H = 1,
}

/// `dstates[:, half which] += g`, for `dstates` `[b, 2H]` and `g` `[b, H]`.
fn add_to_half(
    be: &dyn Backend,
    g: &Tensor,
    dstates: TensorMut<'_>,
    h: usize,
    which: Half,
) -> KResult<()> {
    let b = g.num_rows();
    let dstates = dstates.reshape([b, 2 * h])?;
    be.copy_cols(&g.reshape([b, h])?, 0, dstates, which as usize * h, h, true)
}

/// A gradient output the kernel must have: the argument's own gradient, or
/// a scratch buffer of `shape` when it needs none.
fn grad_or_scratch<'a>(
    be: &dyn Backend,
    d: &'a mut Option<TensorMut<'_>>,
    scratch: &'a mut Option<Tensor>,
    shape: Shape,
) -> KResult<TensorMut<'a>> {
    match d {
        Some(d) => Ok(d.reborrow()),
        None => scratch
            .insert(Tensor::zeros(shape, DType::F32, be.device())?)
            .view_mut(),
    }
}

/// Whether a cell's backward WRITES its gradient outputs (the `write` of
/// the `_states` kernels), from the executor's marks (`Backward::writes`):
/// yes when every output present is marked. Otherwise the marked ones are
/// zeroed here and the kernel adds into all of them.
fn settle_writes(be: &dyn Backend, outs: [(Option<&mut TensorMut<'_>>, bool); 3]) -> KResult<bool> {
    if outs.iter().all(|(d, marked)| d.is_none() || *marked) {
        return Ok(true);
    }
    for (d, marked) in outs {
        if let (Some(d), true) = (d, marked) {
            be.fill(0.0, d.reborrow())?;
        }
    }
    Ok(false)
}

/// The backward of a cell on states: `args` `[gates, children..]` (the
/// children's states), `aux` the activated gates, gradients in the same
/// order. The children's `h` enter only through the gates: their halves
/// get nothing.
fn states_bwd(cx: &mut Backward<'_>, cell: CellSpec, op: &'static str) -> KResult<()> {
    let (be, out, dout) = (cx.backend, cx.out, cx.dout);
    let act = cx.aux.ok_or_else(|| missing_aux(op))?;
    let n = cx.args.len();
    if !(1..=3).contains(&n) || cx.dargs.len() != n {
        return Err(bad_args(op));
    }
    let marks = [0, 1, 2].map(|i| i < n && cx.writes(i));
    let mut ins = [act; 5];
    for (i, t) in ins[1..n].iter_mut().zip(&cx.args[1..]) {
        *i = t;
    }
    (ins[n], ins[n + 1]) = (out, dout);
    let (dgates, rest) = cx.dargs.split_first_mut().ok_or_else(|| bad_args(op))?;
    if dgates.is_none() && rest.iter().all(Option::is_none) {
        return Ok(());
    }
    let mut it = rest.iter_mut().map(|d| d.as_mut());
    let (d1, d2) = (it.next().flatten(), it.next().flatten());
    let outs = [(dgates.as_mut(), marks[0]), (d1, marks[1]), (d2, marks[2])];
    let write = settle_writes(be, outs)?;
    let mut scratch = None;
    let dg = grad_or_scratch(be, dgates, &mut scratch, cx.args[0].shape())?;
    let mut dchildren: [Option<TensorMut<'_>>; 2] = Default::default();
    for (d, r) in dchildren.iter_mut().zip(rest.iter_mut()) {
        *d = r.as_mut().map(|t| t.reborrow());
    }
    be.cell_bwd_states(cell, &ins[..n + 2], dg, &mut dchildren[..n - 1], write)
}

// ----- LSTM -----

/// LSTM cell on precomputed gates `[4H]` (`i, f, o, u`) and the previous
/// state `[2H]`; output the new state `[2H]`.
struct LstmCell;

impl Op for LstmCell {
    fn name(&self) -> &'static str {
        "lstm_cell"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        if let [gates, prev] = args {
            if let Some(h) = hidden_of(gates, 4) {
                if is_state(prev, h) {
                    return Ok(Shape::from([2 * h]));
                }
            }
        }
        Err(ShapeError::expected(
            "gates [4H] (i, f, o, u) and prev_state [2H] (c | h), vectors with H >= 1",
        ))
    }
    fn aux_shape(&self, _out: &Shape, args: &[Shape], _attr: Attr) -> Option<Shape> {
        args.first().copied()
    }
    fn forward(&self, cx: Forward<'_>) -> KResult<()> {
        let be = cx.backend;
        let [gates, prev] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let act = cx.aux.ok_or_else(|| missing_aux(self.name()))?;
        be.cell_fwd_states(CellSpec::LSTM, &[gates, prev], act, cx.out)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> KResult<()> {
        states_bwd(cx, CellSpec::LSTM, self.name())
    }
    fn backward_writes(&self, i: usize, _n: usize, _attr: Attr) -> bool {
        i < 2
    }
}

// ----- GRU -----

/// GRU cell (PyTorch convention) on `xw = W x + b_w` and
/// `hu = U h_prev + b_u` (`[3H]` each, `r, z, n`) and `h_prev` `[H]`.
struct GruCell;

impl Op for GruCell {
    fn name(&self) -> &'static str {
        "gru_cell"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        if let [xw, hu, h_prev] = args {
            if let Some(h) = hidden_of(xw, 3) {
                if hu == xw && vec_len(h_prev) == Some(h) {
                    return Ok(Shape::from([h]));
                }
            }
        }
        Err(ShapeError::expected(
            "xw [3H] and hu [3H] (r, z, n) and h_prev [H], vectors with H >= 1",
        ))
    }
    fn aux_shape(&self, _out: &Shape, args: &[Shape], _attr: Attr) -> Option<Shape> {
        args.first().copied()
    }
    fn forward(&self, cx: Forward<'_>) -> KResult<()> {
        let [xw, hu, h_prev] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let act = cx.aux.ok_or_else(|| missing_aux(self.name()))?;
        cx.backend
            .cell_fwd(CellSpec::GRU, &[xw, hu, h_prev], &mut [act, cx.out])
    }
    fn backward(&self, cx: &mut Backward<'_>) -> KResult<()> {
        let be = cx.backend;
        let [xw, hu, h_prev] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let act = cx.aux.ok_or_else(|| missing_aux(self.name()))?;
        let [dxw, dhu, dh_prev] = cx.dargs.as_mut_slice() else {
            return Err(bad_args(self.name()));
        };
        if dxw.is_none() && dhu.is_none() && dh_prev.is_none() {
            return Ok(());
        }
        let (mut s1, mut s2, mut s3) = (None, None, None);
        let dxw = grad_or_scratch(be, dxw, &mut s1, xw.shape())?;
        let dhu = grad_or_scratch(be, dhu, &mut s2, hu.shape())?;
        let dh_prev = grad_or_scratch(be, dh_prev, &mut s3, h_prev.shape())?;
        let ins = [act, hu, h_prev, cx.dout];
        be.cell_bwd(CellSpec::GRU, &ins, &mut [dxw, dhu, dh_prev])
    }
}

// ----- Tree-LSTM -----

/// Tree-LSTM leaf on gates `[3H]` (`i, o, u`); output the state `[2H]`.
/// The attribute is the recurrent dropout rate's `f32` bits (0: none, the
/// plain cell); with a rate the auxiliary buffer also holds the mask.
struct TreeLstmLeaf;

impl Op for TreeLstmLeaf {
    fn name(&self) -> &'static str {
        "tree_lstm_leaf"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [gates] => hidden_of(gates, 3).map(|h| Shape::from([2 * h])),
            _ => None,
        }
        .ok_or_else(|| ShapeError::expected("gates [3H] (i, o, u), a vector with H >= 1"))
    }
    fn aux_shape(&self, out: &Shape, args: &[Shape], attr: Attr) -> Option<Shape> {
        aux_with_mask(out, args, attr)
    }
    fn forward(&self, cx: Forward<'_>) -> KResult<()> {
        let be = cx.backend;
        let [gates] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let act = cx.aux.ok_or_else(|| missing_aux(self.name()))?;
        let cell = CellSpec::TREE_LSTM_LEAF.with_dropout(cx.attr != 0);
        if cx.attr == 0 {
            return be.cell_fwd_states(cell, &[gates], act, cx.out);
        }
        let (b, h) = (cx.out.num_rows(), cx.out.row_len() / 2);
        let mask = rd_mask(self.name(), cx.attr, cx.train, cx.seeds, b, h)?;
        let mask = mask.to_device(be.device())?;
        be.cell_fwd_states(cell, &[gates, &mask], act, cx.out)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> KResult<()> {
        let cell = CellSpec::TREE_LSTM_LEAF.with_dropout(cx.attr != 0);
        states_bwd(cx, cell, self.name())
    }
    fn backward_writes(&self, i: usize, _n: usize, _attr: Attr) -> bool {
        i == 0
    }
}

/// The auxiliary buffer of a Tree-LSTM cell: the activated gates, plus one
/// `[H]` block for the recurrent dropout mask when the rate (attr) is not 0.
fn aux_with_mask(out: &Shape, args: &[Shape], attr: Attr) -> Option<Shape> {
    let gates = vec_len(args.first()?)?;
    let extra = if attr == 0 { 0 } else { vec_len(out)? / 2 };
    Some(Shape::from([gates + extra]))
}

/// The recurrent dropout factors of `b` instances `[b, H]`: in training each
/// element is `1 / (1 - p)` with probability `1 - p`, else 0, drawn from the
/// instance's seed exactly as [`Graph::dropout`] draws its mask (so a node
/// computes the same alone or in a batch); all 1 in evaluation.
fn rd_mask(
    op: &'static str,
    attr: Attr,
    train: bool,
    seeds: &[u64],
    b: usize,
    h: usize,
) -> KResult<Tensor> {
    let p = f32::from_bits(attr as u32);
    if !(p > 0.0 && p < 1.0) {
        return Err(TensorError::InvalidArgument {
            op,
            arg: "attr",
            reason: "is not a recurrent dropout rate in (0, 1)",
        });
    }
    if !train {
        return Tensor::from_vec(vec![1.0f32; b * h], [b, h]);
    }
    if seeds.len() < b {
        return Err(TensorError::InvalidArgument {
            op,
            arg: "seeds",
            reason: "has fewer entries than the batch has instances",
        });
    }
    let keep = 1.0 / (1.0 - p);
    let mut mask = Vec::with_capacity(b * h);
    for &seed in &seeds[..b] {
        mask.extend((0..h as u64).map(|i| if uniform(seed, i) >= p { keep } else { 0.0 }));
    }
    Tensor::from_vec(mask, [b, h])
}

/// Binary Tree-LSTM internal node on gates `[5H]` (`i, f_l, f_r, o, u`)
/// and the children's states `[2H]`; output the state `[2H]`.
struct TreeLstmNode;

impl Op for TreeLstmNode {
    fn name(&self) -> &'static str {
        "tree_lstm_node"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        if let [gates, left, right] = args {
            if let Some(h) = hidden_of(gates, 5) {
                if is_state(left, h) && is_state(right, h) {
                    return Ok(Shape::from([2 * h]));
                }
            }
        }
        Err(ShapeError::expected(
            "gates [5H] (i, f_l, f_r, o, u) and two child states [2H] (c | h), vectors with H >= 1",
        ))
    }
    fn aux_shape(&self, out: &Shape, args: &[Shape], attr: Attr) -> Option<Shape> {
        aux_with_mask(out, args, attr)
    }
    fn forward(&self, cx: Forward<'_>) -> KResult<()> {
        let be = cx.backend;
        let [gates, left, right] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let act = cx.aux.ok_or_else(|| missing_aux(self.name()))?;
        let cell = CellSpec::TREE_LSTM_NODE.with_dropout(cx.attr != 0);
        if cx.attr == 0 {
            return be.cell_fwd_states(cell, &[gates, left, right], act, cx.out);
        }
        let (b, h) = (cx.out.num_rows(), cx.out.row_len() / 2);
        let mask = rd_mask(self.name(), cx.attr, cx.train, cx.seeds, b, h)?;
        let mask = mask.to_device(be.device())?;
        be.cell_fwd_states(cell, &[gates, &mask, left, right], act, cx.out)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> KResult<()> {
        let cell = CellSpec::TREE_LSTM_NODE.with_dropout(cx.attr != 0);
        states_bwd(cx, cell, self.name())
    }
    fn backward_writes(&self, i: usize, _n: usize, _attr: Attr) -> bool {
        i < 3
    }
}

/// The attribute of a Tree-LSTM cell with recurrent dropout rate `p`: its
/// `f32` bits (0 for both zeros, the plain cell's signature).
fn rd_attr(op: &'static str, p: f32) -> Result<Attr> {
    if !(0.0..1.0).contains(&p) {
        return Err(GraphError::Data {
            op,
            what: format!("recurrent dropout rate {p} is outside [0, 1)"),
        });
    }
    Ok(if p == 0.0 { 0 } else { p.to_bits() as Attr })
}

// ----- halves of a state -----

/// A copy of one half of a cell state `[2H]`: `c` or `h`, `[H]`.
struct StateHalf(Half);

impl Op for StateHalf {
    fn name(&self) -> &'static str {
        match self.0 {
            Half::C => "cell_c",
            Half::H => "cell_h",
        }
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [s] => vec_len(s)
                .filter(|&n| n > 0 && n % 2 == 0)
                .map(|n| Shape::from([n / 2])),
            _ => None,
        }
        .ok_or_else(|| ShapeError::expected("a cell state [2H] (c | h), a vector with H >= 1"))
    }
    fn forward(&self, cx: Forward<'_>) -> KResult<()> {
        let be = cx.backend;
        let [states] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let (b, h) = (cx.out.num_rows(), cx.out.row_len());
        let states = states.reshape([b, 2 * h])?;
        be.copy_cols(&states, self.0 as usize * h, cx.out, 0, h, false)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> KResult<()> {
        let (be, dout) = (cx.backend, cx.dout);
        match cx.dargs.as_mut_slice() {
            [Some(d)] => add_to_half(be, dout, d.reborrow(), dout.row_len(), self.0),
            [None] => Ok(()),
            _ => Err(bad_args(self.name())),
        }
    }
}

/// Fused recurrent cells. A cell state is ONE vector `[2H]` laid out
/// `[c | h]`; read its halves with [`Graph::cell_c`] and [`Graph::cell_h`].
/// Each checks shapes when called and computes nothing.
impl Graph {
    /// LSTM step from precomputed gate pre-activations `gates` `[4H]`, in
    /// the order `i, f, o, u` (`W x + U h_prev + b`), and the previous state
    /// `prev_state` `[2H]` (`[c_prev | h_prev]`; only `c_prev` is read):
    /// `c = σ(i) tanh(u) + σ(f) c_prev`, `h = σ(o) tanh(c)`. Returns the new
    /// state `[c | h]` (`[2H]`). The first step takes a zero state.
    pub fn lstm_cell(&mut self, gates: Expr, prev_state: Expr) -> Result<Expr> {
        self.apply_with_data(&LSTM, &[gates, prev_state], 0, 0)
    }

    /// GRU step, PyTorch convention: `xw = W x + b_w` and
    /// `hu = U h_prev + b_u` (`[3H]` each, order `r, z, n`), `h_prev` `[H]`:
    /// `r = σ(xw_r + hu_r)`, `z = σ(xw_z + hu_z)`,
    /// `n = tanh(xw_n + r hu_n)`, `h = (1 - z) n + z h_prev`. Returns `h`
    /// (`[H]`; a GRU has no separate memory cell, so no `[c | h]` state).
    pub fn gru_cell(&mut self, xw: Expr, hu: Expr, h_prev: Expr) -> Result<Expr> {
        self.apply_with_data(&GRU, &[xw, hu, h_prev], 0, 0)
    }

    /// Binary Tree-LSTM leaf from gate pre-activations `gates` `[3H]`, in the
    /// order `i, o, u` (`W_leaf x + b_leaf`; a leaf has no forget gates):
    /// `c = σ(i) tanh(u)`, `h = σ(o) tanh(c)`. Returns the state `[c | h]`
    /// (`[2H]`).
    pub fn tree_lstm_leaf(&mut self, gates: Expr) -> Result<Expr> {
        self.apply_with_data(&TREE_LEAF, &[gates], 0, 0)
    }

    /// Binary Tree-LSTM internal node from gate pre-activations `gates`
    /// `[5H]`, in the order `i, f_l, f_r, o, u` (`U [h_l; h_r] + b`), and the
    /// children's states `left`, `right` (`[2H]` each; only their `c` halves
    /// are read): `c = σ(i) tanh(u) + σ(f_l) c_l + σ(f_r) c_r`,
    /// `h = σ(o) tanh(c)`. Returns the state `[c | h]` (`[2H]`).
    pub fn tree_lstm_node(&mut self, gates: Expr, left: Expr, right: Expr) -> Result<Expr> {
        self.apply_with_data(&TREE_NODE, &[gates, left, right], 0, 0)
    }

    /// [`Graph::tree_lstm_leaf`] with recurrent dropout (Semeniuta, Severyn
    /// & Barth 2016) of rate `p` in `[0, 1)` on the candidate:
    /// `c = σ(i) d(tanh(u))`, `d` inverted dropout in training mode (see
    /// [`Graph::dropout`]: the mask comes from the node's seed, so it is the
    /// same under every executor) and the identity in evaluation mode. The
    /// rate is part of the node's signature; `p = 0` is exactly
    /// [`Graph::tree_lstm_leaf`].
    ///
    /// Errors: `p` is not in `[0, 1)` ([`GraphError::Data`]).
    pub fn tree_lstm_leaf_rd(&mut self, gates: Expr, p: f32) -> Result<Expr> {
        let attr = rd_attr("tree_lstm_leaf", p)?;
        self.apply_with_data(&TREE_LEAF, &[gates], attr, 0)
    }

    /// [`Graph::tree_lstm_node`] with recurrent dropout of rate `p` on the
    /// candidate only (the children's memory is never dropped):
    /// `c = σ(i) d(tanh(u)) + σ(f_l) c_l + σ(f_r) c_r`; as
    /// [`Graph::tree_lstm_leaf_rd`].
    ///
    /// Errors: `p` is not in `[0, 1)` ([`GraphError::Data`]).
    pub fn tree_lstm_node_rd(
        &mut self,
        gates: Expr,
        left: Expr,
        right: Expr,
        p: f32,
    ) -> Result<Expr> {
        let attr = rd_attr("tree_lstm_node", p)?;
        self.apply_with_data(&TREE_NODE, &[gates, left, right], attr, 0)
    }

    /// The memory cell `c` (`[H]`, a copy of the first half) of a cell
    /// state `[2H]`.
    pub fn cell_c(&mut self, state: Expr) -> Result<Expr> {
        self.apply_with_data(&CELL_C, &[state], 0, 0)
    }

    /// The hidden state `h` (`[H]`, a copy of the second half) of a cell
    /// state `[2H]`.
    pub fn cell_h(&mut self, state: Expr) -> Result<Expr> {
        self.apply_with_data(&CELL_H, &[state], 0, 0)
    }
}
