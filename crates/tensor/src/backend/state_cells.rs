//! The fused cells on batches of cell STATES, the layout in which a graph
//! stores a cell's output: `[b, 2H]`, each row `[c | h]`.
//!
//! [`CellOps`] takes `c` and `h` as separate `[b, H]` blocks. Every method
//! here has a default built on them: it copies the halves it reads out of
//! the states (one `copy_cols` each, none for a batch of one, which is a
//! view) and the halves it writes back in. A backend whose kernels read
//! and write rows at a pitch overrides them and copies nothing (the CPU
//! backend does).
//!
//! Arities mirror the kernel contract, hence `clippy::too_many_arguments`.
#![allow(clippy::too_many_arguments)]

use super::{CellOps, RowOps};
use crate::cell_shapes;
use crate::check::meta;
use crate::error::Result;
use crate::{DType, Device, Tensor, TensorMut};

/// An argument's name, dtype and device.
type Meta = (&'static str, DType, Device);

fn of(arg: &'static str, t: &Tensor) -> Meta {
    (arg, t.dtype(), t.device())
}

fn of_mut(arg: &'static str, t: &TensorMut<'_>) -> Meta {
    (arg, t.dtype(), t.device())
}

/// Every argument is f32 on the states' device. The defaults check this
/// with the shapes, before any kernel: the kernels' own checks come only
/// after earlier copies and kernels have written, and a rejected call
/// must leave its outputs alone.
fn f32_on(op: &'static str, device: Device, args: &[Meta]) -> Result<()> {
    args.iter()
        .try_for_each(|&(arg, dtype, dev)| meta::<f32>(op, arg, dtype, dev, device))
}

/// Which half of a state row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Half {
    C = 0,
    H = 1,
}

/// Half `which` of the states `[b, 2H]`, as `[b, H]`: a view when
/// `b == 1`, else its column block copied out.
fn half<B: RowOps + ?Sized>(be: &B, states: &Tensor, h: usize, which: Half) -> Result<Tensor> {
    let b = states.num_rows();
    let w = which as usize;
    if b == 1 {
        return states.reshape([2, h])?.rows(w..w + 1);
    }
    let mut out = Tensor::zeros([b, h], DType::F32, states.device())?;
    be.copy_cols(
        &states.reshape([b, 2 * h])?,
        w * h,
        out.view_mut()?,
        0,
        h,
        false,
    )?;
    Ok(out)
}

/// Runs `f(c, h)` whose outputs are the halves of `states` `[b, 2H]`:
/// straight into `states` when `b == 1`, else into `[b, H]` buffers
/// copied in afterwards.
fn write_states<B: RowOps + ?Sized>(
    be: &B,
    states: TensorMut<'_>,
    h: usize,
    f: impl FnOnce(TensorMut<'_>, TensorMut<'_>) -> Result<()>,
) -> Result<()> {
    let b = states.num_rows();
    let device = states.device();
    let pairs = states.reshape([2 * b, h])?;
    if b == 1 {
        let (c, hh) = pairs.into_split_rows(1)?;
        return f(c, hh);
    }
    let mut c = Tensor::zeros([b, h], DType::F32, device)?;
    let mut hh = Tensor::zeros([b, h], DType::F32, device)?;
    f(c.view_mut()?, hh.view_mut()?)?;
    let mut states = pairs.reshape([b, 2 * h])?;
    be.copy_cols(&c, 0, states.reborrow(), 0, h, false)?;
    be.copy_cols(&hh, 0, states, h, h, false)
}

/// Where a backward kernel accumulates the `c` half of a state's gradient:
/// a view into it (`b == 1`), or a zeroed `[b, H]` buffer added into it
/// afterwards (also the stand-in for a state that needs no gradient).
enum Sink<'a> {
    View(TensorMut<'a>),
    Buffer(Tensor),
}

impl<'a> Sink<'a> {
    fn new(dstates: Option<&'a mut TensorMut<'_>>, like: &Tensor, h: usize) -> Result<Sink<'a>> {
        let b = like.num_rows();
        match dstates {
            Some(d) if b == 1 => Ok(Sink::View(
                d.reborrow().reshape([2, h])?.into_rows_mut(0..1)?,
            )),
            _ => Ok(Sink::Buffer(Tensor::zeros(
                [b, h],
                DType::F32,
                like.device(),
            )?)),
        }
    }

    fn view(&mut self) -> Result<TensorMut<'_>> {
        match self {
            Sink::View(v) => Ok(v.reborrow()),
            Sink::Buffer(t) => t.view_mut(),
        }
    }

    /// The buffer still to be added into the state's gradient, if any
    /// (ends the borrow of the gradient).
    fn into_buffer(self) -> Option<Tensor> {
        match self {
            Sink::View(_) => None,
            Sink::Buffer(t) => Some(t),
        }
    }
}

/// Finishes a [`Sink`]: a buffer is added into the `c` half of `dstates`.
fn drain<B: RowOps + ?Sized>(
    be: &B,
    buffer: Option<Tensor>,
    dstates: Option<&mut TensorMut<'_>>,
    h: usize,
) -> Result<()> {
    match (buffer, dstates) {
        (Some(t), Some(d)) => {
            let b = t.num_rows();
            let d = d.reborrow().reshape([b, 2 * h])?;
            be.copy_cols(&t, 0, d, 0, h, true)
        }
        _ => Ok(()),
    }
}

/// Zeroes `t` `[b, w]` (a gradient to be written, not added to) with the
/// row operations every backend has: one zero row broadcast.
fn zero<B: RowOps + ?Sized>(be: &B, t: TensorMut<'_>) -> Result<()> {
    let row = Tensor::zeros(t.shape().row_shape(), DType::F32, t.device())?;
    be.broadcast_row(&row, t)
}

/// Zeroes the given outputs of a backward that is to write them (`write`),
/// after its checks, before its accumulating kernels.
fn zero_if<B: RowOps + ?Sized>(
    be: &B,
    write: bool,
    outputs: [Option<TensorMut<'_>>; 3],
) -> Result<()> {
    if write {
        for t in outputs.into_iter().flatten() {
            zero(be, t)?;
        }
    }
    Ok(())
}

/// The node backward's checks (plain or with recurrent dropout): shapes,
/// then dtypes and devices, as the CPU override makes them.
fn check_node_bwd(
    op: &'static str,
    rd: bool,
    [act, left, right, states, dstates]: [&Tensor; 5],
    dgates: &TensorMut<'_>,
    dleft: &Option<TensorMut<'_>>,
    dright: &Option<TensorMut<'_>>,
) -> Result<()> {
    let shapes = [act, left, right, states, dstates].map(|t| t.shape());
    cell_shapes::node_bwd_states(
        op,
        rd,
        shapes,
        dgates.shape(),
        dleft.as_ref().map(|d| d.shape()),
        dright.as_ref().map(|d| d.shape()),
    )?;
    let args = [
        of("act", act),
        of("left", left),
        of("right", right),
        of("states", states),
        of("dstates", dstates),
        of_mut("dgates", dgates),
    ];
    f32_on(op, states.device(), &args)?;
    for (arg, d) in [("dleft", dleft), ("dright", dright)] {
        if let Some(d) = d {
            f32_on(op, states.device(), &[of_mut(arg, d)])?;
        }
    }
    Ok(())
}

/// The leaf backward's default (plain, or with recurrent dropout when
/// `rd`): checks, the halves copied out, the `[b, H]` kernel.
fn leaf_bwd_default<B: CellOps + RowOps + ?Sized>(
    be: &B,
    op: &'static str,
    rd: bool,
    [act, states, dstates]: [&Tensor; 3],
    mut dgates: TensorMut<'_>,
    write: bool,
) -> Result<()> {
    let (act_s, d_s) = (act.shape(), dstates.shape());
    let cell = cell_shapes::leaf_bwd_states(op, rd, act_s, states.shape(), d_s, dgates.shape())?;
    let args = [
        of("act", act),
        of("states", states),
        of("dstates", dstates),
        of_mut("dgates", &dgates),
    ];
    f32_on(op, states.device(), &args)?;
    if cell.is_empty() {
        return Ok(());
    }
    zero_if(be, write, [Some(dgates.reborrow()), None, None])?;
    let h = cell.h;
    let c = half(be, states, h, Half::C)?;
    let dc = half(be, dstates, h, Half::C)?;
    let dh = half(be, dstates, h, Half::H)?;
    if rd {
        be.tree_lstm_leaf_rd_bwd(act, &c, &dc, &dh, dgates)
    } else {
        be.tree_lstm_leaf_bwd(act, &c, &dc, &dh, dgates)
    }
}

/// The node backward's default (plain, or with recurrent dropout when
/// `rd`): checks, the halves copied out, the `[b, H]` kernel, the
/// children's `c` gradients added back.
fn node_bwd_default<B: CellOps + RowOps + ?Sized>(
    be: &B,
    op: &'static str,
    rd: bool,
    [act, left, right, states, dstates]: [&Tensor; 5],
    mut dgates: TensorMut<'_>,
    mut dleft: Option<TensorMut<'_>>,
    mut dright: Option<TensorMut<'_>>,
    write: bool,
) -> Result<()> {
    check_node_bwd(
        op,
        rd,
        [act, left, right, states, dstates],
        &dgates,
        &dleft,
        &dright,
    )?;
    if states.num_rows() == 0 || states.row_len() == 0 {
        return Ok(());
    }
    let (l, r) = (dleft.as_mut(), dright.as_mut());
    let (l, r) = (l.map(|d| d.reborrow()), r.map(|d| d.reborrow()));
    zero_if(be, write, [Some(dgates.reborrow()), l, r])?;
    let h = states.row_len() / 2;
    let c_l = half(be, left, h, Half::C)?;
    let c_r = half(be, right, h, Half::C)?;
    let c = half(be, states, h, Half::C)?;
    let dc = half(be, dstates, h, Half::C)?;
    let dh = half(be, dstates, h, Half::H)?;
    let mut sl = Sink::new(dleft.as_mut(), left, h)?;
    let mut sr = Sink::new(dright.as_mut(), right, h)?;
    let (vl, vr) = (sl.view()?, sr.view()?);
    if rd {
        be.tree_lstm_node_rd_bwd(act, &c_l, &c_r, &c, &dc, &dh, dgates, vl, vr)?;
    } else {
        be.tree_lstm_node_bwd(act, &c_l, &c_r, &c, &dc, &dh, dgates, vl, vr)?;
    }
    drain(be, sl.into_buffer(), dleft.as_mut(), h)?;
    drain(be, sr.into_buffer(), dright.as_mut(), h)
}

/// The cells of [`CellOps`] on batches of states `[b, 2H]` (rows
/// `[c | h]`): forward reads the previous `c` halves and writes the new
/// states; backward reads `c`, and `dc` / `dh` from the states' gradient
/// `dstates`, and ACCUMULATES into `dgates` and the `c` half of each
/// earlier state's gradient (its `h` half gets nothing: `h` reaches the
/// next cell only through the gates), or with `write` WRITES them: they
/// hold unspecified values on entry (fresh buffers an executor did not
/// zero), and come out as if added into zeros, `h` halves zero. A state
/// gradient given as `None` needs none. `H` is half the row length of `states`; `act` is as in the
/// [`CellOps`] method of the same name without `_states`.
///
/// Part of [`super::Backend`]; defaults copy the halves (see the module
/// documentation).
pub trait StateCellOps: CellOps + RowOps {
    /// [`CellOps::lstm_fwd`] on states ("lstm_fwd"): `prev`, `states`
    /// `[b, 2H]`.
    fn lstm_fwd_states(
        &self,
        gates: &Tensor,
        prev: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "lstm_fwd";
        let cell =
            cell_shapes::lstm_fwd_states(gates.shape(), prev.shape(), act.shape(), states.shape())?;
        let args = [of("gates", gates), of("prev", prev), of_mut("act", &act)];
        f32_on(OP, states.device(), &args)?;
        f32_on(OP, states.device(), &[of_mut("states", &states)])?;
        if cell.is_empty() {
            return Ok(());
        }
        let h = cell.h;
        let c_prev = half(self, prev, h, Half::C)?;
        write_states(self, states, h, |c, hh| {
            self.lstm_fwd(gates, &c_prev, act, c, hh)
        })
    }

    /// [`CellOps::lstm_bwd`] on states ("lstm_bwd").
    fn lstm_bwd_states(
        &self,
        act: &Tensor,
        prev: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        mut dgates: TensorMut<'_>,
        mut dprev: Option<TensorMut<'_>>,
        write: bool,
    ) -> Result<()> {
        const OP: &str = "lstm_bwd";
        let cell = cell_shapes::lstm_bwd_states(
            act.shape(),
            prev.shape(),
            states.shape(),
            dstates.shape(),
            dgates.shape(),
            dprev.as_ref().map(|d| d.shape()),
        )?;
        let args = [
            of("act", act),
            of("prev", prev),
            of("states", states),
            of("dstates", dstates),
            of_mut("dgates", &dgates),
        ];
        f32_on(OP, states.device(), &args)?;
        if let Some(d) = &dprev {
            f32_on(OP, states.device(), &[of_mut("dprev", d)])?;
        }
        if cell.is_empty() {
            return Ok(());
        }
        let prev_grad = dprev.as_mut().map(|d| d.reborrow());
        zero_if(self, write, [Some(dgates.reborrow()), prev_grad, None])?;
        let h = cell.h;
        let c_prev = half(self, prev, h, Half::C)?;
        let c = half(self, states, h, Half::C)?;
        let dc = half(self, dstates, h, Half::C)?;
        let dh = half(self, dstates, h, Half::H)?;
        let mut sink = Sink::new(dprev.as_mut(), prev, h)?;
        self.lstm_bwd(act, &c_prev, &c, &dc, &dh, dgates, sink.view()?)?;
        drain(self, sink.into_buffer(), dprev.as_mut(), h)
    }

    /// [`CellOps::tree_lstm_leaf_fwd`] writing `states` `[b, 2H]`
    /// ("tree_lstm_leaf_fwd").
    fn tree_lstm_leaf_fwd_states(
        &self,
        gates: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_leaf_fwd";
        let cell =
            cell_shapes::leaf_fwd_states(OP, gates.shape(), None, act.shape(), states.shape())?;
        let args = [
            of("gates", gates),
            of_mut("act", &act),
            of_mut("states", &states),
        ];
        f32_on(OP, states.device(), &args)?;
        if cell.is_empty() {
            return Ok(());
        }
        write_states(self, states, cell.h, |c, hh| {
            self.tree_lstm_leaf_fwd(gates, act, c, hh)
        })
    }

    /// [`CellOps::tree_lstm_leaf_bwd`] on states ("tree_lstm_leaf_bwd").
    fn tree_lstm_leaf_bwd_states(
        &self,
        act: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        write: bool,
    ) -> Result<()> {
        leaf_bwd_default(
            self,
            "tree_lstm_leaf_bwd",
            false,
            [act, states, dstates],
            dgates,
            write,
        )
    }

    /// [`CellOps::tree_lstm_node_fwd`] on states ("tree_lstm_node_fwd"):
    /// the children's `left`, `right` and `states` are `[b, 2H]`.
    fn tree_lstm_node_fwd_states(
        &self,
        gates: &Tensor,
        left: &Tensor,
        right: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_node_fwd";
        let children = [left.shape(), right.shape()];
        let cell = cell_shapes::node_fwd_states(
            OP,
            gates.shape(),
            None,
            children,
            act.shape(),
            states.shape(),
        )?;
        let args = [
            of("gates", gates),
            of("left", left),
            of("right", right),
            of_mut("act", &act),
            of_mut("states", &states),
        ];
        f32_on(OP, states.device(), &args)?;
        if cell.is_empty() {
            return Ok(());
        }
        let h = cell.h;
        let c_l = half(self, left, h, Half::C)?;
        let c_r = half(self, right, h, Half::C)?;
        write_states(self, states, h, |c, hh| {
            self.tree_lstm_node_fwd(gates, &c_l, &c_r, act, c, hh)
        })
    }

    /// [`CellOps::tree_lstm_node_bwd`] on states ("tree_lstm_node_bwd").
    fn tree_lstm_node_bwd_states(
        &self,
        act: &Tensor,
        left: &Tensor,
        right: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        dleft: Option<TensorMut<'_>>,
        dright: Option<TensorMut<'_>>,
        write: bool,
    ) -> Result<()> {
        node_bwd_default(
            self,
            "tree_lstm_node_bwd",
            false,
            [act, left, right, states, dstates],
            dgates,
            dleft,
            dright,
            write,
        )
    }

    /// [`CellOps::tree_lstm_leaf_rd_fwd`] writing `states` `[b, 2H]`
    /// ("tree_lstm_leaf_rd_fwd").
    fn tree_lstm_leaf_rd_fwd_states(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_leaf_rd_fwd";
        let mask_s = Some(mask.shape());
        let cell =
            cell_shapes::leaf_fwd_states(OP, gates.shape(), mask_s, act.shape(), states.shape())?;
        let args = [
            of("gates", gates),
            of("mask", mask),
            of_mut("act", &act),
            of_mut("states", &states),
        ];
        f32_on(OP, states.device(), &args)?;
        if cell.is_empty() {
            return Ok(());
        }
        write_states(self, states, cell.h, |c, hh| {
            self.tree_lstm_leaf_rd_fwd(gates, mask, act, c, hh)
        })
    }

    /// [`CellOps::tree_lstm_leaf_rd_bwd`] on states
    /// ("tree_lstm_leaf_rd_bwd").
    fn tree_lstm_leaf_rd_bwd_states(
        &self,
        act: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        write: bool,
    ) -> Result<()> {
        leaf_bwd_default(
            self,
            "tree_lstm_leaf_rd_bwd",
            true,
            [act, states, dstates],
            dgates,
            write,
        )
    }

    /// [`CellOps::tree_lstm_node_rd_fwd`] on states
    /// ("tree_lstm_node_rd_fwd").
    fn tree_lstm_node_rd_fwd_states(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        left: &Tensor,
        right: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_node_rd_fwd";
        let children = [left.shape(), right.shape()];
        let cell = cell_shapes::node_fwd_states(
            OP,
            gates.shape(),
            Some(mask.shape()),
            children,
            act.shape(),
            states.shape(),
        )?;
        let args = [
            of("gates", gates),
            of("mask", mask),
            of("left", left),
            of("right", right),
            of_mut("act", &act),
            of_mut("states", &states),
        ];
        f32_on(OP, states.device(), &args)?;
        if cell.is_empty() {
            return Ok(());
        }
        let h = cell.h;
        let c_l = half(self, left, h, Half::C)?;
        let c_r = half(self, right, h, Half::C)?;
        write_states(self, states, h, |c, hh| {
            self.tree_lstm_node_rd_fwd(gates, mask, &c_l, &c_r, act, c, hh)
        })
    }

    /// [`CellOps::tree_lstm_node_rd_bwd`] on states
    /// ("tree_lstm_node_rd_bwd").
    fn tree_lstm_node_rd_bwd_states(
        &self,
        act: &Tensor,
        left: &Tensor,
        right: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        dleft: Option<TensorMut<'_>>,
        dright: Option<TensorMut<'_>>,
        write: bool,
    ) -> Result<()> {
        node_bwd_default(
            self,
            "tree_lstm_node_rd_bwd",
            true,
            [act, left, right, states, dstates],
            dgates,
            dleft,
            dright,
            write,
        )
    }
}
