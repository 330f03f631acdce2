//! Shared by the `backend_state_cells*` tests: a backend that keeps every
//! default method of `StateCellOps` (the path of a backend without
//! overrides, such as CUDA) over the CPU's `[b, H]` cells, and data
//! helpers.

use super::{get, vals};
use sheaf_tensor::prelude::*;
use sheaf_tensor::{CpuBackend, DType, Result, Shape, Tensor, TensorMut};

// ---------------------------------------------------------------------------
// The trait's default methods, over the CPU's `[b, H]` cells.
// ---------------------------------------------------------------------------

/// Forwards `CellOps` and `RowOps` to the CPU backend and keeps every
/// default method of `StateCellOps` (which copy the halves).
#[derive(Debug, Clone, Copy)]
pub struct Defaults(pub CpuBackend);

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
