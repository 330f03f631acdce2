//! Fused recurrent cells: one entry point per direction and layout, each
//! taking the cell's description ([`crate::cell`]).
//!
//! [`StateCellOps`] runs the cells on batches of cell STATES, the layout
//! in which a graph stores a cell's output: `[b, 2H]`, each row `[c | h]`.
//! Its defaults are built on [`CellOps`], which takes `c` and `h` as
//! separate `[b, H]` blocks: they copy the halves they read out of the
//! states (one `copy_cols` each, none for a batch of one, which is a view)
//! and the halves they write back in. A backend whose kernels read and
//! write rows at a pitch overrides them and copies nothing (the CPU and
//! CUDA backends both do).

use super::RowOps;
use crate::cell::{Arg, CellSpec, Form, Role, MAX_INS};
use crate::check::meta;
use crate::error::Result;
use crate::{DType, Device, Tensor, TensorMut};

/// Fused recurrent cells (LSTM, GRU, Tree-LSTM leaf and node, with or
/// without recurrent dropout), each one kernel over a batch of rows.
///
/// Rank-2 tensors, `b` rows, in the order of the cell's [`crate::cell::Form`]
/// (`cell.desc.fwd` / `cell.desc.bwd`; the mask only with dropout). Gate
/// tensors are `[b, k * H]`, the k gate blocks side by side; `act` holds
/// the ACTIVATED gates (then the mask, with dropout), written by forward
/// and read by backward; backward ACCUMULATES into its outputs. Errors
/// name the variant's op (e.g. `"lstm_fwd"`, `"tree_lstm_leaf_rd_bwd"`).
///
/// Part of [`super::Backend`], whose documentation states the contracts
/// shared by every method.
pub trait CellOps {
    /// The cell's forward: e.g. LSTM `ins` `[gates, c_prev]`, `outs`
    /// `[act, c, h]`.
    fn cell_fwd(&self, cell: CellSpec, ins: &[&Tensor], outs: &mut [TensorMut<'_>]) -> Result<()>;

    /// The cell's backward: e.g. LSTM `ins` `[act, c_prev, c, dc, dh]`
    /// (`dc`, `dh` the gradients at the outputs), `outs` `[dgates,
    /// dc_prev]`.
    fn cell_bwd(&self, cell: CellSpec, ins: &[&Tensor], outs: &mut [TensorMut<'_>]) -> Result<()>;
}

/// The cells of [`CellOps`] on batches of states `[b, 2H]` (rows
/// `[c | h]`), arguments in the order of `cell.desc.fwd_states` /
/// `bwd_states`: forward reads the previous states' `c` halves and writes
/// `act` and the new `states`; backward reads `c`, and `dc` / `dh` from
/// the states' gradient `dstates`, and ACCUMULATES into `dgates` and the
/// `c` half of each earlier state's gradient `dchildren` (its `h` half
/// gets nothing: `h` reaches the next cell only through the gates), or
/// with `write` WRITES them: they hold unspecified values on entry (fresh
/// buffers an executor did not zero), and come out as if added into
/// zeros, `h` halves zero. A state gradient given as `None` needs none.
/// `H` is half the row length of `states`. A cell without a memory cell
/// (GRU) has no states form: an error.
///
/// Part of [`super::Backend`]; defaults copy the halves (see the module
/// documentation).
pub trait StateCellOps: CellOps + RowOps {
    /// The cell's forward on states: e.g. LSTM `ins` `[gates, prev]`.
    fn cell_fwd_states(
        &self,
        cell: CellSpec,
        ins: &[&Tensor],
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        let form = cell.desc.fwd_states.as_ref();
        let outs = [act.shape(), states.shape()];
        let (kernel, dims) = cell.check(form, true, ins, 2, |i| Some(outs[i]))?;
        let (op, device) = (kernel.op, states.device());
        f32_on(op, device, cell.args(form_of(form).ins).zip(ins))?;
        meta::<f32>(op, "act", act.dtype(), act.device(), device)?;
        meta::<f32>(op, "states", states.dtype(), device, device)?;
        if dims.is_empty() {
            return Ok(());
        }
        let h = dims.h;
        let mut halves: [Option<Tensor>; MAX_INS] = Default::default();
        for ((a, t), slot) in cell.args(form_of(form).ins).zip(ins).zip(&mut halves) {
            if a.role == Role::Child {
                *slot = Some(half(self, t, h, Half::C)?);
            }
        }
        let mut refs = [ins[0]; MAX_INS];
        for ((r, t), slot) in refs.iter_mut().zip(ins).zip(&halves) {
            *r = slot.as_ref().unwrap_or(t);
        }
        write_states(self, states, h, |c, hh| {
            self.cell_fwd(cell, &refs[..ins.len()], &mut [act, c, hh])
        })
    }

    /// The cell's backward on states: e.g. LSTM `ins` `[act, prev, states,
    /// dstates]`, `dchildren` `[dprev]`.
    fn cell_bwd_states(
        &self,
        cell: CellSpec,
        ins: &[&Tensor],
        mut dgates: TensorMut<'_>,
        dchildren: &mut [Option<TensorMut<'_>>],
        write: bool,
    ) -> Result<()> {
        let form = cell.desc.bwd_states.as_ref();
        let n_outs = 1 + dchildren.len();
        let shape = |i: usize| match i {
            0 => Some(dgates.shape()),
            i => dchildren[i - 1].as_ref().map(|d| d.shape()),
        };
        let (kernel, dims) = cell.check(form, true, ins, n_outs, shape)?;
        let op = kernel.op;
        let args = || cell.args(form_of(form).ins).zip(ins);
        let states = args().find(|(a, _)| a.role == Role::States);
        let device = states.map_or(Device::Cpu, |(_, t)| t.device());
        f32_on(op, device, args())?;
        meta::<f32>(op, "dgates", dgates.dtype(), dgates.device(), device)?;
        let outs = cell.args(form_of(form).outs).skip(1);
        for (a, d) in outs.zip(dchildren.iter()) {
            if let Some(d) = d {
                meta::<f32>(op, a.name, d.dtype(), d.device(), device)?;
            }
        }
        if dims.is_empty() {
            return Ok(());
        }
        if write {
            zero(self, dgates.reborrow())?;
            for d in dchildren.iter_mut().flatten() {
                zero(self, d.reborrow())?;
            }
        }
        let h = dims.h;
        // The `[b, H]` form's inputs, one slot each: the `c` half of a
        // child or of the states, both halves of `dstates` (`dc`, `dh`).
        let slots = |role| if role == Role::Grad { 2 } else { 1 };
        let mut halves: [Option<Tensor>; MAX_INS + 1] = Default::default();
        let mut n = 0;
        for (a, t) in args() {
            if matches!(a.role, Role::Child | Role::States | Role::Grad) {
                halves[n] = Some(half(self, t, h, Half::C)?);
            }
            if a.role == Role::Grad {
                halves[n + 1] = Some(half(self, t, h, Half::H)?);
            }
            n += slots(a.role);
        }
        let mut refs = [ins[0]; MAX_INS + 1];
        let mut slot = 0;
        for (a, t) in args() {
            for j in slot..slot + slots(a.role) {
                refs[j] = halves[j].as_ref().unwrap_or(t);
            }
            slot += slots(a.role);
        }
        let mut sinks: [Option<Sink<'_>>; 2] = Default::default();
        for (s, d) in sinks.iter_mut().zip(dchildren.iter_mut()) {
            *s = Some(Sink::new(d.as_mut(), dims.b, h, device)?);
        }
        let ins = &refs[..n];
        match &mut sinks {
            [None, _] => self.cell_bwd(cell, ins, &mut [dgates])?,
            [Some(l), None] => self.cell_bwd(cell, ins, &mut [dgates, l.view()?])?,
            [Some(l), Some(r)] => self.cell_bwd(cell, ins, &mut [dgates, l.view()?, r.view()?])?,
        }
        let buffers = sinks.map(|s| s.and_then(Sink::into_buffer));
        for (buffer, d) in buffers.into_iter().zip(dchildren.iter_mut()) {
            drain(self, buffer, d.as_mut(), h)?;
        }
        Ok(())
    }
}

/// The form a checked call ran (`check` rejects a cell without one).
fn form_of(form: Option<&'static Form>) -> &'static Form {
    form.expect("checked: the cell has this form")
}

/// Every argument is f32 on the states' device. The defaults check this
/// with the shapes, before any kernel: the kernels' own checks come only
/// after earlier copies and kernels have written, and a rejected call
/// must leave its outputs alone.
fn f32_on<'a, 'b: 'a>(
    op: &'static str,
    device: Device,
    args: impl Iterator<Item = (&'static Arg, &'a &'b Tensor)>,
) -> Result<()> {
    args.into_iter()
        .try_for_each(|(a, t)| meta::<f32>(op, a.name, t.dtype(), t.device(), device))
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
    let states = states.reshape([b, 2 * h])?;
    be.copy_cols(&states, w * h, out.view_mut()?, 0, h, false)?;
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
    fn new(d: Option<&'a mut TensorMut<'_>>, b: usize, h: usize, device: Device) -> Result<Self> {
        match d {
            Some(d) if b == 1 => Ok(Sink::View(
                d.reborrow().reshape([2, h])?.into_rows_mut(0..1)?,
            )),
            _ => Ok(Sink::Buffer(Tensor::zeros([b, h], DType::F32, device)?)),
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
