//! The cell entry points of the CPU backend: the shared shape contract,
//! then the description's kernel on slices. The states form reads and
//! writes the states' halves at their row pitch, so nothing is copied.

use super::{f32_in, f32_out, CpuBackend};
use crate::backend::{CellOps, StateCellOps};
use crate::cell::{CellSpec, Form, MAX_INS, MAX_OUTS};
use crate::error::{Result, TensorError};
use crate::{Tensor, TensorMut};

impl CpuBackend {
    /// Runs `form` of `cell` (`states`: the states form) on `outs`, where a
    /// `None` output is a state that needs no gradient: the kernel adds
    /// into a scratch buffer instead.
    fn run_cell(
        &self,
        cell: CellSpec,
        (form, states): (Option<&'static Form>, bool),
        ins: &[&Tensor],
        outs: &mut [Option<TensorMut<'_>>],
        write: bool,
    ) -> Result<()> {
        let (n_ins, n_outs) = (ins.len(), outs.len());
        let shape = |i: usize| outs[i].as_ref().map(|t| t.shape());
        let (kernel, dims) = cell.check(form, states, ins, outs.len(), shape)?;
        let (op, form) = (kernel.op, form.expect("checked"));
        let mut xs: [&[f32]; MAX_INS] = [&[]; MAX_INS];
        for ((x, t), a) in xs.iter_mut().zip(ins).zip(cell.args(form.ins)) {
            *x = f32_in(op, a.name, t)?;
        }
        // A scratch `Vec` allocates only when resized, for a missing output.
        let mut scratch: [Vec<f32>; MAX_OUTS] = Default::default();
        let mut ys: [&mut [f32]; MAX_OUTS] = Default::default();
        let outs_args = outs.iter_mut().zip(cell.args(form.outs));
        for ((y, (t, a)), s) in ys.iter_mut().zip(outs_args).zip(&mut scratch) {
            *y = match t {
                Some(t) => f32_out(op, a.name, t.reborrow())?,
                None => {
                    s.resize(dims.b * 2 * dims.h, 0.0);
                    s
                }
            };
        }
        if dims.is_empty() {
            return Ok(());
        }
        let (xs, ys) = (&xs[..n_ins], &mut ys[..n_outs]);
        (kernel.cpu)(&self.kernels, dims.h, xs, ys, write).map_err(TensorError::kernel(op))
    }

    /// [`CpuBackend::run_cell`] on the `[b, H]` form: every output given.
    fn run_split(
        &self,
        cell: CellSpec,
        form: &'static Form,
        ins: &[&Tensor],
        outs: &mut [TensorMut<'_>],
    ) -> Result<()> {
        if outs.len() > MAX_OUTS {
            // More outputs than any cell has: the count check reports it.
            cell.check(Some(form), false, ins, outs.len(), |_| None)?;
        }
        let n = outs.len();
        let mut given: [Option<TensorMut<'_>>; MAX_OUTS] = Default::default();
        for (g, t) in given.iter_mut().zip(outs.iter_mut()) {
            *g = Some(t.reborrow());
        }
        self.run_cell(cell, (Some(form), false), ins, &mut given[..n], false)
    }
}

impl CellOps for CpuBackend {
    fn cell_fwd(&self, cell: CellSpec, ins: &[&Tensor], outs: &mut [TensorMut<'_>]) -> Result<()> {
        self.run_split(cell, &cell.desc.fwd, ins, outs)
    }

    fn cell_bwd(&self, cell: CellSpec, ins: &[&Tensor], outs: &mut [TensorMut<'_>]) -> Result<()> {
        self.run_split(cell, &cell.desc.bwd, ins, outs)
    }
}

impl StateCellOps for CpuBackend {
    fn cell_fwd_states(
        &self,
        cell: CellSpec,
        ins: &[&Tensor],
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        let form = (cell.desc.fwd_states.as_ref(), true);
        self.run_cell(cell, form, ins, &mut [Some(act), Some(states)], false)
    }

    fn cell_bwd_states(
        &self,
        cell: CellSpec,
        ins: &[&Tensor],
        dgates: TensorMut<'_>,
        dchildren: &mut [Option<TensorMut<'_>>],
        write: bool,
    ) -> Result<()> {
        let form = (cell.desc.bwd_states.as_ref(), true);
        if dchildren.len() >= MAX_OUTS {
            cell.check(form.0, true, ins, 1 + dchildren.len(), |_| None)?;
        }
        let mut outs: [Option<TensorMut<'_>>; MAX_OUTS] = Default::default();
        outs[0] = Some(dgates);
        let n = 1 + dchildren.len();
        for (o, d) in outs[1..].iter_mut().zip(dchildren.iter_mut()) {
            *o = d.as_mut().map(|d| d.reborrow());
        }
        self.run_cell(cell, form, ins, &mut outs[..n], write)
    }
}
