//! `StateCellOps`: the fused cells on batches of cell STATES `[b, 2H]`
//! (rows `[c | h]`), bit for bit against the `[b, H]` cells.
//!
//! Every method, on the CPU override (every ISA) and on the trait's default
//! methods (the path of a backend without overrides, such as CUDA, run here
//! on the CPU's `[b, H]` cells through a wrapper), equals the `CellOps`
//! method of the same name run on halves cut out by hand, bit for bit;
//! backward leaves the `h` halves of the earlier states' gradients alone and
//! gives `dgates` the same bits whichever state gradients are `None`.
//! With `write`, outputs handed over NaN-filled come out as the dense
//! backward added into zeros, `h` halves zero. Arguments are also passed
//! as row ranges of larger buffers, whose other rows must not change.
//!
//! The checks and errors of the same methods are in
//! `backend_state_cells_errors.rs`.

// Arities mirror the trait's; `TensorError` is large by design (see the
// crate root).
#![allow(clippy::too_many_arguments, clippy::result_large_err)]

mod common;

use common::state_cells::{bits, rnd, Defaults};
use common::{backends, get, vals, CellCalls};
use sheaf_tensor::prelude::*;
use sheaf_tensor::{CpuBackend, DType, Device, Result, Tensor, TensorMut};

// ---------------------------------------------------------------------------
// Data.
// ---------------------------------------------------------------------------

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
    write: bool,
) -> Result<()> {
    let mut d = dkids.into_iter();
    let mut next = || d.next().expect("one gradient per earlier state");
    match kind {
        Kind::Lstm => be.lstm_bwd_states(act, &kids[0], states, dstates, dgates, next(), write),
        Kind::Leaf => be.tree_lstm_leaf_bwd_states(act, states, dstates, dgates, write),
        Kind::Node => be.tree_lstm_node_bwd_states(
            act,
            &kids[0],
            &kids[1],
            states,
            dstates,
            dgates,
            next(),
            next(),
            write,
        ),
        Kind::LeafRd => be.tree_lstm_leaf_rd_bwd_states(act, states, dstates, dgates, write),
        Kind::NodeRd => be.tree_lstm_node_rd_bwd_states(
            act,
            &kids[0],
            &kids[1],
            states,
            dstates,
            dgates,
            next(),
            next(),
            write,
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

    let (st, ds) = (states.copy(), dstates.copy());
    // The dense backward adding into `dg` and the children's `dck`.
    let dense_bwd = |dg: &mut Tensor, dck: &mut [Tensor], what: &str| {
        bwd_dense(
            dense,
            kind,
            &act.copy(),
            &ckids,
            &half_of(&st, 0),
            &half_of(&ds, 0),
            &half_of(&ds, 1),
            dg.view_mut().unwrap(),
            dck.iter_mut().map(|t| t.view_mut().unwrap()).collect(),
        )
        .unwrap_or_else(|e| panic!("{ctx}: {what}: {e}"));
    };
    let mut dg_d = dgates0.copy();
    let mut dck_d = dkids0
        .iter()
        .map(|d| half_of(&d.copy(), 0))
        .collect::<Vec<_>>();
    dense_bwd(&mut dg_d, &mut dck_d, "dense backward");

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
            false,
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

    // Written (`write`): outputs handed over NaN-filled come out as the
    // dense backward added into zeros, the `h` halves zero, padding kept.
    let mut dg_z = Tensor::zeros([b, kind.gates() * h], DType::F32, Device::Cpu).unwrap();
    let mut dck_z = (0..n)
        .map(|_| Tensor::zeros([b, h], DType::F32, Device::Cpu).unwrap())
        .collect::<Vec<_>>();
    dense_bwd(&mut dg_z, &mut dck_z, "dense backward onto zeros");
    let ctx = format!("{ctx}, written");
    let mut dg = dgates0.deep();
    let mut dk = dkids0.iter().map(Buf::deep).collect::<Vec<_>>();
    for t in std::iter::once(&mut dg).chain(dk.iter_mut()) {
        dense.fill(f32::NAN, t.view_mut()).unwrap();
    }
    bwd_states(
        be,
        kind,
        &act.view(),
        &kid_views,
        &states.view(),
        &dstates.view(),
        dg.view_mut(),
        dk.iter_mut().map(|d| Some(d.view_mut())).collect(),
        true,
    )
    .unwrap_or_else(|e| panic!("{ctx}: backward on states: {e}"));
    assert_eq!(bits(&dg.view()), bits(&dg_z), "{ctx}: dgates");
    assert_eq!(dg.padding(), dgates0.padding(), "{ctx}: dgates padding");
    for (i, d) in dk.iter().enumerate() {
        assert_eq!(
            bits(&half_of(&d.view(), 0)),
            bits(&dck_z[i]),
            "{ctx}: c half of the gradient of earlier state {i}"
        );
        assert!(
            get(&half_of(&d.view(), 1)).iter().all(|x| x.to_bits() == 0),
            "{ctx}: h half of the gradient of earlier state {i} is not zero"
        );
        assert_eq!(d.padding(), dkids0[i].padding(), "{ctx}: padding of {i}");
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
