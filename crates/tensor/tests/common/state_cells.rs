//! Shared by the `backend_state_cells*` tests: a backend that keeps every
//! default method of `StateCellOps` (the path of a backend without
//! overrides, such as CUDA) over the CPU's `[b, H]` cells, and data
//! helpers.

use super::{get, vals};
use sheaf_tensor::prelude::*;
use sheaf_tensor::{CellSpec, CpuBackend, DType, Result, Shape, Tensor, TensorMut};

// ---------------------------------------------------------------------------
// The trait's default methods, over the CPU's `[b, H]` cells.
// ---------------------------------------------------------------------------

/// Forwards `CellOps` and `RowOps` to the CPU backend and keeps every
/// default method of `StateCellOps` (which copy the halves).
#[derive(Debug, Clone, Copy)]
pub struct Defaults(pub CpuBackend);

impl CellOps for Defaults {
    fn cell_fwd(&self, cell: CellSpec, ins: &[&Tensor], outs: &mut [TensorMut<'_>]) -> Result<()> {
        self.0.cell_fwd(cell, ins, outs)
    }

    fn cell_bwd(&self, cell: CellSpec, ins: &[&Tensor], outs: &mut [TensorMut<'_>]) -> Result<()> {
        self.0.cell_bwd(cell, ins, outs)
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
pub fn rnd(shape: impl Into<Shape>, seed: u32, scale: f32) -> Tensor {
    let shape = shape.into();
    let data = vals(shape.numel().unwrap(), seed)
        .into_iter()
        .map(|v| v * scale)
        .collect::<Vec<f32>>();
    Tensor::from_vec(data, shape).unwrap()
}

/// The bits of every element (f32 as `to_bits`, u32 as is).
pub fn bits(x: &Tensor) -> Vec<u32> {
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
