//! The cell entry points of the CUDA backend: the shared shape contract,
//! then the description's kernel, one launch. The states form runs the
//! same kernels on the halves of the states in place, at a row pitch of
//! 2H (`CudaKernels::cell_on_states`): no halves copied out and back, no
//! buffers for them.

use sheaf_kernels_cuda::{CudaView, CudaViewMut};

use super::{cuda_err, CudaBackend};
use crate::backend::{Backend, CellOps, StateCellOps};
use crate::cell::{CellSpec, Form, Role};
use crate::error::Result;
use crate::{DType, Tensor, TensorMut};

impl StateCellOps for CudaBackend {
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
        let (op, form) = (kernel.op, form.expect("checked: the cell has this form"));
        let xs = (cell.args(form.ins).zip(ins))
            .map(|(a, t)| self.f32_in(op, a.name, t))
            .collect::<Result<Vec<_>>>()?;
        let act = self.f32_out(op, "act", act)?;
        let mut states = self.f32_out(op, "states", states)?;
        if dims.is_empty() {
            return Ok(());
        }
        // `c` the whole states, `h` empty: written into c's rows at +H.
        let n = states.len();
        let (c, h) = states.split_at_mut(n);
        self.kernels
            .cell_on_states(kernel.cuda, dims.h, &xs, &mut [act, c, h])
            .map_err(cuda_err(op))
    }

    fn cell_bwd_states(
        &self,
        cell: CellSpec,
        ins: &[&Tensor],
        mut dgates: TensorMut<'_>,
        dchildren: &mut [Option<TensorMut<'_>>],
        write: bool,
    ) -> Result<()> {
        let form = cell.desc.bwd_states.as_ref();
        let shape = |i: usize| match i {
            0 => Some(dgates.shape()),
            i => dchildren[i - 1].as_ref().map(|d| d.shape()),
        };
        let (kernel, dims) = cell.check(form, true, ins, 1 + dchildren.len(), shape)?;
        let (op, form) = (kernel.op, form.expect("checked: the cell has this form"));
        let args = cell.args(form.ins).zip(ins);
        let given = args
            .map(|(a, t)| Ok((a.role, self.f32_in(op, a.name, t)?)))
            .collect::<Result<Vec<_>>>()?;
        if dims.is_empty() {
            return Ok(());
        }
        let h = dims.h;
        if write {
            self.fill(0.0, dgates.reborrow())?;
            for d in dchildren.iter_mut().flatten() {
                self.fill(0.0, d.reborrow())?;
            }
        }
        // The `[b, H]` form's inputs: a child's or the states' `c` half
        // (the whole states, read at pitch 2H), both halves of the
        // gradient at the states.
        let mut xs: Vec<CudaView<'_, f32>> = Vec::with_capacity(given.len() + 1);
        for (role, v) in &given {
            xs.push(v.slice(..));
            if *role == Role::Grad {
                xs.push(v.slice(h..));
            }
        }
        // A child that needs no gradient still takes the kernel's adds.
        let mut spare: Vec<Tensor> = Vec::new();
        for d in dchildren.iter() {
            if d.is_none() {
                spare.push(Tensor::zeros([dims.b, 2 * h], DType::F32, self.device())?);
            }
        }
        let mut ys: Vec<CudaViewMut<'_, f32>> = vec![self.f32_out(op, "dgates", dgates)?];
        let mut spares = spare.iter_mut();
        for d in dchildren.iter_mut() {
            let t = match d {
                Some(d) => d.reborrow(),
                None => match spares.next() {
                    Some(t) => t.view_mut()?,
                    None => unreachable!("one spare per missing gradient"),
                },
            };
            ys.push(self.f32_out(op, "dchild", t)?);
        }
        self.kernels
            .cell_on_states(kernel.cuda, h, &xs, &mut ys)
            .map_err(cuda_err(op))
    }
}

impl CellOps for CudaBackend {
    fn cell_fwd(&self, cell: CellSpec, ins: &[&Tensor], outs: &mut [TensorMut<'_>]) -> Result<()> {
        self.run_cell(cell, &cell.desc.fwd, ins, outs)
    }

    fn cell_bwd(&self, cell: CellSpec, ins: &[&Tensor], outs: &mut [TensorMut<'_>]) -> Result<()> {
        self.run_cell(cell, &cell.desc.bwd, ins, outs)
    }
}

impl CudaBackend {
    fn run_cell(
        &self,
        cell: CellSpec,
        form: &'static Form,
        ins: &[&Tensor],
        outs: &mut [TensorMut<'_>],
    ) -> Result<()> {
        let shape = |i: usize| Some(outs[i].shape());
        let (kernel, dims) = cell.check(Some(form), false, ins, outs.len(), shape)?;
        let op = kernel.op;
        // Small host vectors, next to the launch's own argument list.
        let xs = (cell.args(form.ins).zip(ins))
            .map(|(a, t)| self.f32_in(op, a.name, t))
            .collect::<Result<Vec<_>>>()?;
        let mut ys = (cell.args(form.outs).zip(outs.iter_mut()))
            .map(|(a, t)| self.f32_out(op, a.name, t.reborrow()))
            .collect::<Result<Vec<_>>>()?;
        if dims.is_empty() {
            return Ok(());
        }
        self.kernels
            .cell(kernel.cuda, dims.h, &xs, &mut ys)
            .map_err(cuda_err(op))
    }
}
