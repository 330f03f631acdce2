//! The cell entry points of the CUDA backend: the shared shape contract,
//! then the description's kernel, one launch. The states form is the
//! default built on them (`c` and `h` are separate blocks here).

use super::{cuda_err, CudaBackend};
use crate::backend::{CellOps, StateCellOps};
use crate::cell::{CellSpec, Form};
use crate::error::Result;
use crate::{Tensor, TensorMut};

impl StateCellOps for CudaBackend {}

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
