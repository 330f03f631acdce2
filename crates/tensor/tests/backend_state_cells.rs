//! `StateCellOps`: the fused cells on batches of cell STATES `[b, 2H]`
//! (rows `[c | h]`).
//!
//! - Every method, on the CPU override (every ISA) and on the trait's
//!   default methods (the path of a backend without overrides, such as
//!   CUDA, run here on the CPU's `[b, H]` cells through a wrapper), equals
//!   the `CellOps` method of the same name run on halves cut out by hand,
//!   bit for bit; backward leaves the `h` halves of the earlier states'
//!   gradients alone and gives `dgates` the same bits whichever state
//!   gradients are `None`. Arguments are also passed as row ranges of
//!   larger buffers, whose other rows must not change.
//! - The CPU override rejects bad shapes and dtypes with the error a model
//!   of its checks predicts (naming the op, and the argument where the
//!   variant has one), changes nothing then, and never panics.
//! - The default methods never panic on bad arguments, and check as
//!   strictly and as early as the override: the same errors, nothing
//!   written.

// Arities mirror the trait's; `TensorError` is large by design (see the
// crate root).
#![allow(clippy::too_many_arguments, clippy::result_large_err)]

mod common;

use common::{backends, get, vals};
use sheaf_tensor::prelude::*;
use sheaf_tensor::{CpuBackend, DType, Device, Result, Shape, Tensor, TensorError, TensorMut};

// ---------------------------------------------------------------------------
// The trait's default methods, over the CPU's `[b, H]` cells.
// ---------------------------------------------------------------------------

/// Forwards `CellOps` and `RowOps` to the CPU backend and keeps every
/// default method of `StateCellOps` (which copy the halves).
#[derive(Debug, Clone, Copy)]
struct Defaults(CpuBackend);

impl CellOps for Defaults {
    fn lstm_fwd(
        &self,
        gates: &Tensor,
        c_prev: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        self.0.lstm_fwd(gates, c_prev, act, c, h)
    }

    fn lstm_bwd(
        &self,
        act: &Tensor,
        c_prev: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
        dc_prev: TensorMut<'_>,
    ) -> Result<()> {
        self.0.lstm_bwd(act, c_prev, c, dc, dh, dgates, dc_prev)
    }

    fn gru_fwd(
        &self,
        xw: &Tensor,
        hu: &Tensor,
        h_prev: &Tensor,
        act: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        self.0.gru_fwd(xw, hu, h_prev, act, h)
    }

    fn gru_bwd(
        &self,
        act: &Tensor,
        hu: &Tensor,
        h_prev: &Tensor,
        dh: &Tensor,
        dxw: TensorMut<'_>,
        dhu: TensorMut<'_>,
        dh_prev: TensorMut<'_>,
    ) -> Result<()> {
        self.0.gru_bwd(act, hu, h_prev, dh, dxw, dhu, dh_prev)
    }

    fn tree_lstm_leaf_fwd(
        &self,
        gates: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        self.0.tree_lstm_leaf_fwd(gates, act, c, h)
    }

    fn tree_lstm_leaf_bwd(
        &self,
        act: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()> {
        self.0.tree_lstm_leaf_bwd(act, c, dc, dh, dgates)
    }

    fn tree_lstm_node_fwd(
        &self,
        gates: &Tensor,
        c_l: &Tensor,
        c_r: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        self.0.tree_lstm_node_fwd(gates, c_l, c_r, act, c, h)
    }

    fn tree_lstm_node_bwd(
        &self,
        act: &Tensor,
        c_l: &Tensor,
        c_r: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
        dc_l: TensorMut<'_>,
        dc_r: TensorMut<'_>,
    ) -> Result<()> {
        self.0
            .tree_lstm_node_bwd(act, c_l, c_r, c, dc, dh, dgates, dc_l, dc_r)
    }

    fn tree_lstm_leaf_rd_fwd(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        self.0.tree_lstm_leaf_rd_fwd(gates, mask, act, c, h)
    }

    fn tree_lstm_leaf_rd_bwd(
        &self,
        act: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()> {
        self.0.tree_lstm_leaf_rd_bwd(act, c, dc, dh, dgates)
    }

    fn tree_lstm_node_rd_fwd(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        c_l: &Tensor,
        c_r: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        self.0
            .tree_lstm_node_rd_fwd(gates, mask, c_l, c_r, act, c, h)
    }

    fn tree_lstm_node_rd_bwd(
        &self,
        act: &Tensor,
        c_l: &Tensor,
        c_r: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
        dc_l: TensorMut<'_>,
        dc_r: TensorMut<'_>,
    ) -> Result<()> {
        self.0
            .tree_lstm_node_rd_bwd(act, c_l, c_r, c, dc, dh, dgates, dc_l, dc_r)
    }
}

impl RowOps for Defaults {
    fn gather_rows(&self, src: &Tensor, idx: &Tensor, dst: TensorMut<'_>) -> Result<()> {
        self.0.gather_rows(src, idx, dst)
    }

    fn scatter_add_rows(&self, src: &Tensor, idx: &Tensor, dst: TensorMut<'_>) -> Result<()> {
        self.0.scatter_add_rows(src, idx, dst)
    }

    fn copy_rows(
        &self,
        src: &Tensor,
        src_row: usize,
        dst: TensorMut<'_>,
        dst_row: usize,
        n: usize,
    ) -> Result<()> {
        self.0.copy_rows(src, src_row, dst, dst_row, n)
    }

    fn broadcast_row(&self, row: &Tensor, dst: TensorMut<'_>) -> Result<()> {
        self.0.broadcast_row(row, dst)
    }

    fn copy_cols(
        &self,
        src: &Tensor,
        src_col: usize,
        dst: TensorMut<'_>,
        dst_col: usize,
        width: usize,
        accumulate: bool,
    ) -> Result<()> {
        self.0
            .copy_cols(src, src_col, dst, dst_col, width, accumulate)
    }
}

/// Every method is the trait's default.
impl StateCellOps for Defaults {}

// ---------------------------------------------------------------------------
// Data.
// ---------------------------------------------------------------------------

/// Deterministic values in about `[-scale, scale]`.
fn rnd(shape: impl Into<Shape>, seed: u32, scale: f32) -> Tensor {
    let shape = shape.into();
    let data = vals(shape.numel().unwrap(), seed)
        .into_iter()
        .map(|v| v * scale)
        .collect::<Vec<f32>>();
    Tensor::from_vec(data, shape).unwrap()
}

/// The bits of every element (f32 as `to_bits`, u32 as is).
fn bits(x: &Tensor) -> Vec<u32> {
    match x.dtype() {
        DType::F32 => get(x).into_iter().map(f32::to_bits).collect(),
        DType::U32 => x.to_vec::<u32>().unwrap(),
        DType::I32 => x
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(|v| v as u32)
            .collect(),
        other => panic!("unexpected dtype {other}"),
    }
}

/// Half `which` (0: `c`, 1: `h`) of states `[b, 2H]`, as a fresh `[b, H]`,
/// cut out element by element.
fn half_of(states: &Tensor, which: usize) -> Tensor {
    let (b, w) = (states.num_rows(), states.row_len());
    let h = w / 2;
    let v = get(states);
    let out = (0..b)
        .flat_map(|r| v[r * w + which * h..r * w + (which + 1) * h].to_vec())
        .collect::<Vec<f32>>();
    Tensor::from_vec(out, [b, h]).unwrap()
}

/// A `[rows, width]` argument stored as rows `pad..pad + rows` of a
/// `[rows + 2 pad, width]` buffer, so kernels see it at an offset; the
/// padding rows must never change.
struct Buf {
    t: Tensor,
    pad: usize,
    rows: usize,
    width: usize,
}

impl Buf {
    fn new(rows: usize, width: usize, pad: usize, seed: u32, scale: f32) -> Buf {
        Buf {
            t: rnd([rows + 2 * pad, width], seed, scale),
            pad,
            rows,
            width,
        }
    }

    /// Recurrent-dropout mask `[rows, H]`: 0 or `1 / (1 - 0.25)`.
    fn mask(rows: usize, h: usize, pad: usize, seed: u32) -> Buf {
        let n = (rows + 2 * pad) * h;
        let data = vals(n, seed)
            .into_iter()
            .map(|v| if v < -0.5 { 0.0 } else { 4.0 / 3.0 })
            .collect::<Vec<f32>>();
        Buf {
            t: Tensor::from_vec(data, [rows + 2 * pad, h]).unwrap(),
            pad,
            rows,
            width: h,
        }
    }

    fn view(&self) -> Tensor {
        self.t.rows(self.pad..self.pad + self.rows).unwrap()
    }

    fn view_mut(&mut self) -> TensorMut<'_> {
        let range = self.pad..self.pad + self.rows;
        self.t.view_mut().unwrap().into_rows_mut(range).unwrap()
    }

    /// A fresh, unpadded copy of the argument.
    fn copy(&self) -> Tensor {
        Tensor::from_vec(get(&self.view()), [self.rows, self.width]).unwrap()
    }

    /// The same buffer, padding included, in fresh storage.
    fn deep(&self) -> Buf {
        Buf {
            t: self.t.deep_clone().unwrap(),
            ..*self
        }
    }

    /// The bits of the padding rows.
    fn padding(&self) -> Vec<u32> {
        let all = bits(&self.t);
        let (lo, hi) = (self.pad * self.width, (self.pad + self.rows) * self.width);
        all[..lo].iter().chain(&all[hi..]).copied().collect()
    }
}

// ---------------------------------------------------------------------------
// The five cells, on states and on `[b, H]` halves.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lstm,
    Leaf,
    Node,
    LeafRd,
    NodeRd,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Lstm,
        Kind::Leaf,
        Kind::Node,
        Kind::LeafRd,
        Kind::NodeRd,
    ];

    /// Gate blocks of `gates` and `dgates`.
    fn gates(self) -> usize {
        match self {
            Kind::Lstm => 4,
            Kind::Leaf | Kind::LeafRd => 3,
            Kind::Node | Kind::NodeRd => 5,
        }
    }

    /// Blocks of `act` (the rd cells append the mask).
    fn act(self) -> usize {
        match self {
            Kind::Lstm | Kind::LeafRd => 4,
            Kind::Leaf => 3,
            Kind::Node => 5,
            Kind::NodeRd => 6,
        }
    }

    /// Earlier states read: `prev`, or `left` and `right`.
    fn children(self) -> usize {
        match self {
            Kind::Lstm => 1,
            Kind::Leaf | Kind::LeafRd => 0,
            Kind::Node | Kind::NodeRd => 2,
        }
    }
}

fn fwd_states<B: StateCellOps + ?Sized>(
    be: &B,
    kind: Kind,
    gates: &Tensor,
    mask: &Tensor,
    kids: &[Tensor],
    act: TensorMut<'_>,
    states: TensorMut<'_>,
) -> Result<()> {
    match kind {
        Kind::Lstm => be.lstm_fwd_states(gates, &kids[0], act, states),
        Kind::Leaf => be.tree_lstm_leaf_fwd_states(gates, act, states),
        Kind::Node => be.tree_lstm_node_fwd_states(gates, &kids[0], &kids[1], act, states),
        Kind::LeafRd => be.tree_lstm_leaf_rd_fwd_states(gates, mask, act, states),
        Kind::NodeRd => {
            be.tree_lstm_node_rd_fwd_states(gates, mask, &kids[0], &kids[1], act, states)
        }
    }
}

fn fwd_dense(
    be: &CpuBackend,
    kind: Kind,
    gates: &Tensor,
    mask: &Tensor,
    ckids: &[Tensor],
    act: TensorMut<'_>,
    c: TensorMut<'_>,
    h: TensorMut<'_>,
) -> Result<()> {
    match kind {
        Kind::Lstm => be.lstm_fwd(gates, &ckids[0], act, c, h),
        Kind::Leaf => be.tree_lstm_leaf_fwd(gates, act, c, h),
        Kind::Node => be.tree_lstm_node_fwd(gates, &ckids[0], &ckids[1], act, c, h),
        Kind::LeafRd => be.tree_lstm_leaf_rd_fwd(gates, mask, act, c, h),
        Kind::NodeRd => be.tree_lstm_node_rd_fwd(gates, mask, &ckids[0], &ckids[1], act, c, h),
    }
}

fn bwd_states<B: StateCellOps + ?Sized>(
    be: &B,
    kind: Kind,
    act: &Tensor,
    kids: &[Tensor],
    states: &Tensor,
    dstates: &Tensor,
    dgates: TensorMut<'_>,
    dkids: Vec<Option<TensorMut<'_>>>,
) -> Result<()> {
    let mut d = dkids.into_iter();
    let mut next = || d.next().expect("one gradient per earlier state");
    match kind {
        Kind::Lstm => be.lstm_bwd_states(act, &kids[0], states, dstates, dgates, next()),
        Kind::Leaf => be.tree_lstm_leaf_bwd_states(act, states, dstates, dgates),
        Kind::Node => be.tree_lstm_node_bwd_states(
            act,
            &kids[0],
            &kids[1],
            states,
            dstates,
            dgates,
            next(),
            next(),
        ),
        Kind::LeafRd => be.tree_lstm_leaf_rd_bwd_states(act, states, dstates, dgates),
        Kind::NodeRd => be.tree_lstm_node_rd_bwd_states(
            act,
            &kids[0],
            &kids[1],
            states,
            dstates,
            dgates,
            next(),
            next(),
        ),
    }
}

fn bwd_dense(
    be: &CpuBackend,
    kind: Kind,
    act: &Tensor,
    ckids: &[Tensor],
    c: &Tensor,
    dc: &Tensor,
    dh: &Tensor,
    dgates: TensorMut<'_>,
    dckids: Vec<TensorMut<'_>>,
) -> Result<()> {
    let mut d = dckids.into_iter();
    let mut next = || d.next().expect("one gradient per child");
    match kind {
        Kind::Lstm => be.lstm_bwd(act, &ckids[0], c, dc, dh, dgates, next()),
        Kind::Leaf => be.tree_lstm_leaf_bwd(act, c, dc, dh, dgates),
        Kind::Node => {
            be.tree_lstm_node_bwd(act, &ckids[0], &ckids[1], c, dc, dh, dgates, next(), next())
        }
        Kind::LeafRd => be.tree_lstm_leaf_rd_bwd(act, c, dc, dh, dgates),
        Kind::NodeRd => {
            be.tree_lstm_node_rd_bwd(act, &ckids[0], &ckids[1], c, dc, dh, dgates, next(), next())
        }
    }
}

/// One cell, forward then backward, on `be`'s states methods against
/// `dense`'s `[b, H]` methods on halves cut out by hand: equal bits.
/// `pad` 1 passes every states-side argument as rows of a larger buffer.
fn check_cell<B: StateCellOps + ?Sized>(
    be: &B,
    dense: &CpuBackend,
    who: &str,
    kind: Kind,
    b: usize,
    h: usize,
    pad: usize,
) {
    let ctx = format!("{who}, {kind:?}, b = {b}, H = {h}, pad = {pad}");
    let seed = (b * 1000 + h * 10 + pad) as u32;
    let n = kind.children();

    // Forward: `act` and `states` start as garbage that must be overwritten.
    let gates = Buf::new(b, kind.gates() * h, pad, seed + 1, 3.0);
    let mask = Buf::mask(b, h, pad, seed + 2);
    let kids = (0..n)
        .map(|i| Buf::new(b, 2 * h, pad, seed + 3 + i as u32, 2.0))
        .collect::<Vec<_>>();
    let kid_views = kids.iter().map(Buf::view).collect::<Vec<_>>();
    let ckids = kids
        .iter()
        .map(|k| half_of(&k.copy(), 0))
        .collect::<Vec<_>>();
    let mut act = Buf::new(b, kind.act() * h, pad, seed + 5, 1.0);
    let mut states = Buf::new(b, 2 * h, pad, seed + 6, 1.0);
    let (act_pad, states_pad) = (act.padding(), states.padding());
    let mut act_d = act.copy();
    let (mut c_d, mut h_d) = (half_of(&states.copy(), 0), half_of(&states.copy(), 1));

    fwd_states(
        be,
        kind,
        &gates.view(),
        &mask.view(),
        &kid_views,
        act.view_mut(),
        states.view_mut(),
    )
    .unwrap_or_else(|e| panic!("{ctx}: forward on states: {e}"));
    fwd_dense(
        dense,
        kind,
        &gates.copy(),
        &mask.copy(),
        &ckids,
        act_d.view_mut().unwrap(),
        c_d.view_mut().unwrap(),
        h_d.view_mut().unwrap(),
    )
    .unwrap_or_else(|e| panic!("{ctx}: dense forward: {e}"));
    assert_eq!(bits(&act.view()), bits(&act_d), "{ctx}: forward act");
    assert_eq!(
        bits(&half_of(&states.view(), 0)),
        bits(&c_d),
        "{ctx}: forward c"
    );
    assert_eq!(
        bits(&half_of(&states.view(), 1)),
        bits(&h_d),
        "{ctx}: forward h"
    );
    assert_eq!(act.padding(), act_pad, "{ctx}: forward act padding");
    assert_eq!(
        states.padding(),
        states_pad,
        "{ctx}: forward states padding"
    );

    // Backward, from the forward's `act` and `states`; every gradient output
    // starts as garbage that the cell adds into.
    let dstates = Buf::new(b, 2 * h, pad, seed + 7, 1.0);
    let dgates0 = Buf::new(b, kind.gates() * h, pad, seed + 8, 1.0);
    let dkids0 = (0..n)
        .map(|i| Buf::new(b, 2 * h, pad, seed + 9 + i as u32, 1.0))
        .collect::<Vec<_>>();

    let mut dg_d = dgates0.copy();
    let mut dck_d = dkids0
        .iter()
        .map(|d| half_of(&d.copy(), 0))
        .collect::<Vec<_>>();
    let (st, ds) = (states.copy(), dstates.copy());
    bwd_dense(
        dense,
        kind,
        &act.copy(),
        &ckids,
        &half_of(&st, 0),
        &half_of(&ds, 0),
        &half_of(&ds, 1),
        dg_d.view_mut().unwrap(),
        dck_d.iter_mut().map(|t| t.view_mut().unwrap()).collect(),
    )
    .unwrap_or_else(|e| panic!("{ctx}: dense backward: {e}"));

    // Every combination of given (bit set) and absent earlier-state
    // gradients: `dgates` is the dense one in all of them.
    for given in 0..1usize << n {
        let ctx = format!("{ctx}, given = {given:#b}");
        let mut dg = dgates0.deep();
        let mut dk = dkids0
            .iter()
            .enumerate()
            .map(|(i, d)| ((given >> i) & 1 == 1).then(|| d.deep()))
            .collect::<Vec<_>>();
        let views = dk
            .iter_mut()
            .map(|d| d.as_mut().map(Buf::view_mut))
            .collect::<Vec<_>>();
        bwd_states(
            be,
            kind,
            &act.view(),
            &kid_views,
            &states.view(),
            &dstates.view(),
            dg.view_mut(),
            views,
        )
        .unwrap_or_else(|e| panic!("{ctx}: backward on states: {e}"));
        assert_eq!(bits(&dg.view()), bits(&dg_d), "{ctx}: dgates");
        assert_eq!(dg.padding(), dgates0.padding(), "{ctx}: dgates padding");
        for (i, d) in dk.iter().enumerate() {
            let Some(d) = d else { continue };
            let before = &dkids0[i];
            assert_eq!(
                bits(&half_of(&d.view(), 0)),
                bits(&dck_d[i]),
                "{ctx}: c half of the gradient of earlier state {i}"
            );
            assert_eq!(
                bits(&half_of(&d.view(), 1)),
                bits(&half_of(&before.view(), 1)),
                "{ctx}: h half of the gradient of earlier state {i} changed"
            );
            assert_eq!(d.padding(), before.padding(), "{ctx}: padding of {i}");
        }
    }
}

const BATCHES: [usize; 3] = [1, 2, 5];
/// 1 and 7 are all tail; 8, 16 and 19 reach the vector loops of every ISA.
const HIDDEN: [usize; 5] = [1, 7, 8, 16, 19];

#[test]
fn cpu_states_cells_equal_the_dense_cells_bit_for_bit() {
    for be in backends() {
        for kind in Kind::ALL {
            for b in BATCHES {
                for h in HIDDEN {
                    for pad in [0, 1] {
                        check_cell(&be, &be, &be.name(), kind, b, h, pad);
                    }
                }
            }
        }
    }
}

#[test]
fn default_states_cells_equal_the_dense_cells_bit_for_bit() {
    for be in backends() {
        let who = format!("defaults over {}", be.name());
        for kind in Kind::ALL {
            for b in BATCHES {
                for h in HIDDEN {
                    for pad in [0, 1] {
                        check_cell(&Defaults(be), &be, &who, kind, b, h, pad);
                    }
                }
            }
        }
    }
}

/// The same through the shared `&dyn Backend` of `Device::Cpu`.
#[test]
fn device_backend_states_cells() {
    let be = Device::Cpu.backend().unwrap();
    let dense = CpuBackend::new();
    assert_eq!(be.name(), dense.name());
    for kind in Kind::ALL {
        check_cell(be, &dense, "Device::Cpu", kind, 5, 19, 1);
    }
}

// ---------------------------------------------------------------------------
// Checks.
// ---------------------------------------------------------------------------

/// How the CPU override checks an argument against the states `[b, 2H]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The states themselves: rank 2, even row length.
    States,
    /// The first input of gate blocks (`Cell::gates_in`): a wrong shape is a
    /// `ShapeMismatch` between it and the states.
    In,
    /// Any other argument (`Cell::gates`): `ArgShape` naming it.
    Arg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    LstmFwd,
    LstmBwd,
    LeafFwd,
    LeafBwd,
    NodeFwd,
    NodeBwd,
    LeafRdFwd,
    LeafRdBwd,
    NodeRdFwd,
    NodeRdBwd,
}

/// (name, blocks of H, role), in the order the CPU override checks them.
type Spec = &'static [(&'static str, usize, Role)];

impl Op {
    const ALL: [Op; 10] = [
        Op::LstmFwd,
        Op::LstmBwd,
        Op::LeafFwd,
        Op::LeafBwd,
        Op::NodeFwd,
        Op::NodeBwd,
        Op::LeafRdFwd,
        Op::LeafRdBwd,
        Op::NodeRdFwd,
        Op::NodeRdBwd,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::LstmFwd => "lstm_fwd",
            Op::LstmBwd => "lstm_bwd",
            Op::LeafFwd => "tree_lstm_leaf_fwd",
            Op::LeafBwd => "tree_lstm_leaf_bwd",
            Op::NodeFwd => "tree_lstm_node_fwd",
            Op::NodeBwd => "tree_lstm_node_bwd",
            Op::LeafRdFwd => "tree_lstm_leaf_rd_fwd",
            Op::LeafRdBwd => "tree_lstm_leaf_rd_bwd",
            Op::NodeRdFwd => "tree_lstm_node_rd_fwd",
            Op::NodeRdBwd => "tree_lstm_node_rd_bwd",
        }
    }

    /// The arguments; `call` takes the tensors in this order.
    fn spec(self) -> Spec {
        use Role::*;
        const S: (&str, usize, Role) = ("states", 2, States);
        match self {
            Op::LstmFwd => &[S, ("gates", 4, In), ("prev", 2, Arg), ("act", 4, Arg)],
            Op::LstmBwd => &[
                S,
                ("act", 4, In),
                ("prev", 2, Arg),
                ("dstates", 2, Arg),
                ("dgates", 4, Arg),
                ("dprev", 2, Arg),
            ],
            Op::LeafFwd => &[S, ("gates", 3, In), ("act", 3, Arg)],
            Op::LeafBwd => &[S, ("act", 3, In), ("dstates", 2, Arg), ("dgates", 3, Arg)],
            Op::NodeFwd => &[
                S,
                ("gates", 5, In),
                ("left", 2, Arg),
                ("right", 2, Arg),
                ("act", 5, Arg),
            ],
            Op::NodeBwd => &[
                S,
                ("act", 5, Arg),
                ("left", 2, Arg),
                ("right", 2, Arg),
                ("dstates", 2, Arg),
                ("dgates", 5, Arg),
                ("dleft", 2, Arg),
                ("dright", 2, Arg),
            ],
            Op::LeafRdFwd => &[S, ("gates", 3, In), ("mask", 1, Arg), ("act", 4, Arg)],
            Op::LeafRdBwd => &[S, ("act", 4, Arg), ("dstates", 2, Arg), ("dgates", 3, Arg)],
            Op::NodeRdFwd => &[
                S,
                ("gates", 5, In),
                ("mask", 1, Arg),
                ("left", 2, Arg),
                ("right", 2, Arg),
                ("act", 6, Arg),
            ],
            Op::NodeRdBwd => &[
                S,
                ("act", 6, Arg),
                ("left", 2, Arg),
                ("right", 2, Arg),
                ("dstates", 2, Arg),
                ("dgates", 5, Arg),
                ("dleft", 2, Arg),
                ("dright", 2, Arg),
            ],
        }
    }
}

/// Runs `op` on tensors in the order of `op.spec()`, every state gradient
/// given (`Some`) unless `none`.
fn call<B: StateCellOps + ?Sized>(be: &B, op: Op, t: &mut [Tensor], none: bool) -> Result<()> {
    fn m(t: &mut Tensor) -> TensorMut<'_> {
        t.view_mut().unwrap()
    }
    fn give(none: bool, t: &mut Tensor) -> Option<TensorMut<'_>> {
        (!none).then(|| t.view_mut().unwrap())
    }
    match (op, t) {
        (Op::LstmFwd, [states, gates, prev, act]) => {
            be.lstm_fwd_states(gates, prev, m(act), m(states))
        }
        (Op::LstmBwd, [states, act, prev, dstates, dgates, dprev]) => {
            be.lstm_bwd_states(act, prev, states, dstates, m(dgates), give(none, dprev))
        }
        (Op::LeafFwd, [states, gates, act]) => {
            be.tree_lstm_leaf_fwd_states(gates, m(act), m(states))
        }
        (Op::LeafBwd, [states, act, dstates, dgates]) => {
            be.tree_lstm_leaf_bwd_states(act, states, dstates, m(dgates))
        }
        (Op::NodeFwd, [states, gates, left, right, act]) => {
            be.tree_lstm_node_fwd_states(gates, left, right, m(act), m(states))
        }
        (Op::NodeBwd, [states, act, left, right, dstates, dgates, dleft, dright]) => be
            .tree_lstm_node_bwd_states(
                act,
                left,
                right,
                states,
                dstates,
                m(dgates),
                give(none, dleft),
                give(none, dright),
            ),
        (Op::LeafRdFwd, [states, gates, mask, act]) => {
            be.tree_lstm_leaf_rd_fwd_states(gates, mask, m(act), m(states))
        }
        (Op::LeafRdBwd, [states, act, dstates, dgates]) => {
            be.tree_lstm_leaf_rd_bwd_states(act, states, dstates, m(dgates))
        }
        (Op::NodeRdFwd, [states, gates, mask, left, right, act]) => {
            be.tree_lstm_node_rd_fwd_states(gates, mask, left, right, m(act), m(states))
        }
        (Op::NodeRdBwd, [states, act, left, right, dstates, dgates, dleft, dright]) => be
            .tree_lstm_node_rd_bwd_states(
                act,
                left,
                right,
                states,
                dstates,
                m(dgates),
                give(none, dleft),
                give(none, dright),
            ),
        (op, t) => panic!("{op:?} takes {} tensors, got {}", op.spec().len(), t.len()),
    }
}

/// Well-formed arguments of `op` for `b` states of hidden size `h`.
fn args(op: Op, b: usize, h: usize) -> Vec<Tensor> {
    op.spec()
        .iter()
        .enumerate()
        .map(|(i, &(_, k, _))| rnd([b, k * h], 50 + i as u32, 1.0))
        .collect()
}

/// Well-formed arguments but for argument `i`, of `shape` and `dtype`.
fn case_args(op: Op, b: usize, h: usize, i: usize, shape: &[usize], dtype: DType) -> Vec<Tensor> {
    let mut t = args(op, b, h);
    t[i] = tensor(shape, dtype, 99);
    t
}

/// An argument of `shape` and `dtype` (f32 values random, u32 zero).
fn tensor(shape: &[usize], dtype: DType, seed: u32) -> Tensor {
    let shape = Shape::new(shape).unwrap();
    match dtype {
        DType::F32 => rnd(shape, seed, 1.0),
        _ => Tensor::zeros(shape, dtype, Device::Cpu).unwrap(),
    }
}

/// The error the CPU override's checks give for arguments of these shapes
/// and dtypes (in `op.spec()` order), `None` if it accepts them.
/// `InvalidArgument` comes with an empty `reason` (compared apart).
fn model(op: Op, shapes: &[Shape], dtypes: &[DType]) -> Option<TensorError> {
    let name = op.name();
    let spec = op.spec();
    let states = shapes[0];
    if states.rank() != 2 {
        return Some(TensorError::RankMismatch {
            op: name,
            arg: "states",
            expected: "2",
            shape: states,
        });
    }
    let (b, w) = (states.dims()[0], states.dims()[1]);
    if !w.is_multiple_of(2) {
        return Some(TensorError::InvalidArgument {
            op: name,
            arg: "states",
            reason: "",
        });
    }
    let h = w / 2;
    for (&(arg, k, role), &got) in spec.iter().zip(shapes).skip(1) {
        let expected = Shape::from([b, k * h]);
        if got != expected {
            return Some(match role {
                Role::In => TensorError::ShapeMismatch {
                    op: name,
                    lhs: got,
                    rhs: states,
                },
                _ => TensorError::ArgShape {
                    op: name,
                    arg,
                    expected,
                    got,
                },
            });
        }
    }
    // At most one argument has another dtype in these tests, so the order
    // in which the override fetches the data does not matter.
    spec.iter()
        .zip(dtypes)
        .find(|&(_, &d)| d != DType::F32)
        .map(|(&(arg, ..), &got)| TensorError::DTypeMismatch {
            op: name,
            arg,
            expected: DType::F32,
            got,
        })
}

fn same_error(got: &TensorError, want: &TensorError) -> bool {
    match (got, want) {
        (
            TensorError::InvalidArgument { op, arg, reason },
            TensorError::InvalidArgument {
                op: op2, arg: arg2, ..
            },
        ) => op == op2 && arg == arg2 && !reason.is_empty(),
        _ => got == want,
    }
}

/// The op and (where the variant has one) the argument named by an error.
fn named(e: &TensorError) -> (&'static str, Option<&'static str>) {
    match *e {
        TensorError::ShapeMismatch { op, .. } => (op, None),
        TensorError::ArgShape { op, arg, .. }
        | TensorError::DTypeMismatch { op, arg, .. }
        | TensorError::RankMismatch { op, arg, .. }
        | TensorError::InvalidArgument { op, arg, .. } => (op, Some(arg)),
        ref other => panic!("unexpected error variant: {other:?}"),
    }
}

/// Runs `op` with argument `i` replaced by one of `shape` and `dtype` and
/// checks the outcome against the model; a rejected call changes nothing.
/// Returns the error, if any.
fn run_case(
    be: &dyn Backend,
    op: Op,
    b: usize,
    h: usize,
    i: usize,
    shape: &[usize],
    dtype: DType,
) -> Option<TensorError> {
    let (arg, ..) = op.spec()[i];
    let ctx = format!(
        "{} with `{arg}` {shape:?} {dtype} (b = {b}, H = {h})",
        op.name()
    );
    let mut t = case_args(op, b, h, i, shape, dtype);
    let shapes = t.iter().map(Tensor::shape).collect::<Vec<_>>();
    let dtypes = t.iter().map(Tensor::dtype).collect::<Vec<_>>();
    let before = t.iter().map(bits).collect::<Vec<_>>();
    let want = model(op, &shapes, &dtypes);
    let got = call(be, op, &mut t, false).err();
    match (&got, &want) {
        (None, None) => {}
        (Some(g), Some(w)) => {
            assert!(same_error(g, w), "{ctx}: got {g:?}, want {w:?}");
            let (gop, garg) = named(g);
            assert_eq!(gop, op.name(), "{ctx}: {g}");
            let text = g.to_string();
            assert!(text.starts_with(op.name()), "{ctx}: message {text:?}");
            if let Some(a) = garg {
                assert!(text.contains(&format!("`{a}`")), "{ctx}: message {text:?}");
            }
            let after = t.iter().map(bits).collect::<Vec<_>>();
            assert_eq!(after, before, "{ctx}: a rejected call changed an argument");
        }
        _ => panic!("{ctx}: got {got:?}, want {want:?}"),
    }
    got
}

/// Wrong shapes for an argument of `k` blocks, the cell being `[b, 2H]`.
fn bad_shapes(role: Role, k: usize, b: usize, h: usize) -> Vec<Vec<usize>> {
    let w = k * h;
    let mut out = vec![
        vec![w],
        vec![b * w],
        vec![b, 1, w],
        vec![1, b, w],
        vec![],
        vec![b + 1, w],
        vec![b - 1, w],
        vec![0, w],
    ];
    match role {
        Role::States => out.extend([
            vec![b, w + 1],
            vec![b, w - 1],
            vec![b, 1],
            vec![b, w + 2],
            vec![b, w - 2],
            vec![b, 0],
        ]),
        _ => {
            out.extend([vec![b, w + 1], vec![b, w - 1], vec![b, w + h], vec![b, 0]]);
            if k == 2 {
                // A bare `[b, H]` half where a state is expected.
                out.push(vec![b, h]);
            }
        }
    }
    out
}

#[test]
fn cpu_override_rejects_bad_shapes_and_dtypes() {
    let be = Device::Cpu.backend().unwrap();
    let (b, h) = (2, 3);
    for op in Op::ALL {
        // Well-formed arguments pass.
        assert_eq!(run_case(be, op, b, h, 0, &[b, 2 * h], DType::F32), None);
        for (i, &(arg, k, role)) in op.spec().iter().enumerate() {
            for shape in bad_shapes(role, k, b, h) {
                let e = run_case(be, op, b, h, i, &shape, DType::F32);
                assert!(e.is_some(), "{} accepted `{arg}` {shape:?}", op.name());
            }
            let e = run_case(be, op, b, h, i, &[b, k * h], DType::U32);
            assert!(
                matches!(e, Some(TensorError::DTypeMismatch { arg: a, .. }) if a == arg),
                "{}: u32 `{arg}`: {e:?}",
                op.name()
            );
            let e = run_case(be, op, b, h, i, &[b, k * h], DType::I32);
            assert!(
                matches!(e, Some(TensorError::DTypeMismatch { arg: a, .. }) if a == arg),
                "{}: i32 `{arg}`: {e:?}",
                op.name()
            );
        }
    }
}

/// The cases the brief names, spelled out.
#[test]
fn cpu_override_named_errors() {
    let be = Device::Cpu.backend().unwrap();
    let (b, h) = (2, 3);

    // Odd row length of the states.
    for op in Op::ALL {
        let e = run_case(be, op, b, h, 0, &[b, 7], DType::F32).unwrap();
        assert!(
            matches!(e, TensorError::InvalidArgument { op: o, arg: "states", .. } if o == op.name()),
            "{e:?}"
        );
        // Rank 1 states.
        let e = run_case(be, op, b, h, 0, &[2 * h], DType::F32).unwrap();
        assert_eq!(
            e,
            TensorError::RankMismatch {
                op: op.name(),
                arg: "states",
                expected: "2",
                shape: Shape::from([2 * h]),
            }
        );
    }

    // `prev` / `left` with another row count or a width other than 2H.
    let e = run_case(be, Op::LstmFwd, b, h, 2, &[b + 1, 2 * h], DType::F32).unwrap();
    assert_eq!(
        e,
        TensorError::ArgShape {
            op: "lstm_fwd",
            arg: "prev",
            expected: Shape::from([b, 2 * h]),
            got: Shape::from([b + 1, 2 * h]),
        }
    );
    let e = run_case(be, Op::NodeFwd, b, h, 2, &[b, h], DType::F32).unwrap();
    assert_eq!(
        e,
        TensorError::ArgShape {
            op: "tree_lstm_node_fwd",
            arg: "left",
            expected: Shape::from([b, 2 * h]),
            got: Shape::from([b, h]),
        }
    );
    assert_eq!(
        e.to_string(),
        "tree_lstm_node_fwd: argument `left` has shape [2, 3], expected [2, 6]"
    );

    // `gates` of the wrong width: the first gate input is matched against
    // the states (`ShapeMismatch`, as in the `[b, H]` cells).
    let e = run_case(be, Op::LstmFwd, b, h, 1, &[b, 4 * h + 1], DType::F32).unwrap();
    assert_eq!(
        e.to_string(),
        "lstm_fwd: shapes [2, 13] and [2, 6] do not match"
    );

    // `act` of the wrong width, as an output and as the rd input.
    let e = run_case(be, Op::LstmFwd, b, h, 3, &[b, 3 * h], DType::F32).unwrap();
    assert_eq!(
        e.to_string(),
        "lstm_fwd: argument `act` has shape [2, 9], expected [2, 12]"
    );
    let e = run_case(be, Op::NodeRdBwd, b, h, 1, &[b, 5 * h], DType::F32).unwrap();
    assert_eq!(
        e.to_string(),
        "tree_lstm_node_rd_bwd: argument `act` has shape [2, 15], expected [2, 18]"
    );

    // u32 where f32 is expected.
    let e = run_case(be, Op::LeafRdFwd, b, h, 2, &[b, h], DType::U32).unwrap();
    assert_eq!(
        e.to_string(),
        "tree_lstm_leaf_rd_fwd: argument `mask` has dtype u32, expected f32"
    );
}

/// Shape checks of the optional state gradients happen only when given: a
/// `None` needs none, and well-formed calls pass with every gradient absent.
#[test]
fn absent_state_gradients_are_not_checked() {
    let be = Device::Cpu.backend().unwrap();
    let (b, h) = (2, 3);
    for op in [Op::LstmBwd, Op::NodeBwd, Op::NodeRdBwd] {
        for (i, &(arg, ..)) in op.spec().iter().enumerate() {
            if !matches!(arg, "dprev" | "dleft" | "dright") {
                continue;
            }
            let mut t = args(op, b, h);
            t[i] = tensor(&[b + 1, 7], DType::U32, 1);
            call(be, op, &mut t, true)
                .unwrap_or_else(|e| panic!("{}: `{arg}` absent: {e}", op.name()));
        }
    }
}

/// Empty cells (`b = 0` or `H = 0`) are fine on both paths.
#[test]
fn empty_cells() {
    let cpu = backends().into_iter().last().unwrap();
    let defaults = Defaults(cpu);
    for op in Op::ALL {
        for (b, h) in [(0, 3), (3, 0), (0, 0), (1, 0)] {
            for none in [false, true] {
                let mut t = args(op, b, h);
                call(&cpu, op, &mut t, none)
                    .unwrap_or_else(|e| panic!("cpu {} b = {b} H = {h}: {e}", op.name()));
                let mut t = args(op, b, h);
                call(&defaults, op, &mut t, none)
                    .unwrap_or_else(|e| panic!("defaults {} b = {b} H = {h}: {e}", op.name()));
            }
        }
    }
}

/// Every bad argument of the checks above, for `b` states of size `h`:
/// (argument index, shape, dtype).
fn bad_cases(op: Op, b: usize, h: usize) -> Vec<(usize, Vec<usize>, DType)> {
    let mut out = Vec::new();
    for (i, &(_, k, role)) in op.spec().iter().enumerate() {
        for shape in bad_shapes(role, k, b, h) {
            out.push((i, shape, DType::F32));
        }
        out.push((i, vec![b, k * h], DType::U32));
    }
    out
}

/// The default methods (the path of a backend without overrides, such as
/// CUDA) never panic on bad arguments, and reject every argument of the
/// wrong dtype or element count. (Some of the wrong shapes with the right
/// element count they accept: see the next test.)
#[test]
fn default_methods_never_panic_and_reject_wrong_sizes() {
    let be = Defaults(CpuBackend::new());
    for (b, h) in [(1, 3), (2, 3)] {
        for op in Op::ALL {
            for (i, shape, dtype) in bad_cases(op, b, h) {
                let (arg, k, _) = op.spec()[i];
                let mut t = case_args(op, b, h, i, &shape, dtype);
                let r = call(&be, op, &mut t, false);
                let same_size = shape.iter().product::<usize>() == b * k * h;
                if dtype != DType::F32 || !same_size {
                    assert!(
                        r.is_err(),
                        "defaults: {} accepted `{arg}` {shape:?} {dtype} (b = {b}, H = {h})",
                        op.name()
                    );
                }
            }
        }
    }
}

/// What the override guarantees, asked of the default methods (the CUDA
/// path): reject whatever the override rejects, with the same error, and
/// before writing anything (they once checked only as they went, through
/// `reshape` and the `[b, H]` cells: a bad `dleft` failed after `dgates`
/// had been added into, and wrong ranks of the right size went through).
#[test]
fn default_methods_check_like_the_override() {
    let be = Defaults(CpuBackend::new());
    let mut failures = Vec::new();
    for (b, h) in [(1, 3), (2, 3)] {
        for op in Op::ALL {
            for (i, shape, dtype) in bad_cases(op, b, h) {
                let (arg, ..) = op.spec()[i];
                let ctx = format!("{} `{arg}` {shape:?} {dtype} (b = {b})", op.name());
                let mut t = case_args(op, b, h, i, &shape, dtype);
                let shapes = t.iter().map(Tensor::shape).collect::<Vec<_>>();
                let dtypes = t.iter().map(Tensor::dtype).collect::<Vec<_>>();
                let want = model(op, &shapes, &dtypes);
                let before = t.iter().map(bits).collect::<Vec<_>>();
                match (call(&be, op, &mut t, false), want) {
                    (Ok(()), Some(w)) => failures.push(format!("{ctx}: accepted (cpu: {w})")),
                    (Err(e), Some(_)) => {
                        let changed = op
                            .spec()
                            .iter()
                            .zip(&before)
                            .zip(&t)
                            .filter(|&((_, old), x)| bits(x) != *old)
                            .map(|((&(a, ..), _), _)| a)
                            .collect::<Vec<_>>();
                        if !changed.is_empty() {
                            failures.push(format!("{ctx}: {e}, after writing {changed:?}"));
                        }
                    }
                    (r, None) => failures.push(format!("{ctx}: {r:?}, the model accepts it")),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
