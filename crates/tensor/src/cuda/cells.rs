//! CellOps for the CUDA backend: the shared shape contract, then one fused
//! kernel per call.
#![allow(clippy::too_many_arguments)]

use super::{cuda_err, CudaBackend};
use crate::backend::CellOps;
use crate::cell_shapes;
use crate::error::Result;
use crate::{Tensor, TensorMut};

/// The defaults: the CUDA cells take `c` and `h` as separate blocks.
impl crate::backend::StateCellOps for CudaBackend {}

impl CellOps for CudaBackend {
    fn lstm_fwd(
        &self,
        gates: &Tensor,
        c_prev: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "lstm_fwd";
        let cell = cell_shapes::lstm_fwd(
            gates.shape(),
            c_prev.shape(),
            act.shape(),
            c.shape(),
            h.shape(),
        )?;
        let (gates, c_prev) = (
            self.f32_in(OP, "gates", gates)?,
            self.f32_in(OP, "c_prev", c_prev)?,
        );
        let (mut act, mut c, mut h) = (
            self.f32_out(OP, "act", act)?,
            self.f32_out(OP, "c", c)?,
            self.f32_out(OP, "h", h)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .lstm_fwd(&gates, &c_prev, cell.h, &mut act, &mut c, &mut h)
            .map_err(cuda_err(OP))
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
        const OP: &str = "lstm_bwd";
        let cell = cell_shapes::lstm_bwd(
            act.shape(),
            c_prev.shape(),
            c.shape(),
            dc.shape(),
            dh.shape(),
            dgates.shape(),
            dc_prev.shape(),
        )?;
        let (act, c_prev, c) = (
            self.f32_in(OP, "act", act)?,
            self.f32_in(OP, "c_prev", c_prev)?,
            self.f32_in(OP, "c", c)?,
        );
        let (dc, dh) = (self.f32_in(OP, "dc", dc)?, self.f32_in(OP, "dh", dh)?);
        let (mut dgates, mut dc_prev) = (
            self.f32_out(OP, "dgates", dgates)?,
            self.f32_out(OP, "dc_prev", dc_prev)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .lstm_bwd(
                &act,
                &c_prev,
                &c,
                &dc,
                &dh,
                cell.h,
                &mut dgates,
                &mut dc_prev,
            )
            .map_err(cuda_err(OP))
    }

    fn gru_fwd(
        &self,
        xw: &Tensor,
        hu: &Tensor,
        h_prev: &Tensor,
        act: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "gru_fwd";
        let cell = cell_shapes::gru_fwd(
            xw.shape(),
            hu.shape(),
            h_prev.shape(),
            act.shape(),
            h.shape(),
        )?;
        let (xw, hu, h_prev) = (
            self.f32_in(OP, "xw", xw)?,
            self.f32_in(OP, "hu", hu)?,
            self.f32_in(OP, "h_prev", h_prev)?,
        );
        let (mut act, mut h) = (self.f32_out(OP, "act", act)?, self.f32_out(OP, "h", h)?);
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .gru_fwd(&xw, &hu, &h_prev, cell.h, &mut act, &mut h)
            .map_err(cuda_err(OP))
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
        const OP: &str = "gru_bwd";
        let cell = cell_shapes::gru_bwd(
            act.shape(),
            hu.shape(),
            h_prev.shape(),
            dh.shape(),
            dxw.shape(),
            dhu.shape(),
            dh_prev.shape(),
        )?;
        let (act, hu) = (self.f32_in(OP, "act", act)?, self.f32_in(OP, "hu", hu)?);
        let (h_prev, dh) = (
            self.f32_in(OP, "h_prev", h_prev)?,
            self.f32_in(OP, "dh", dh)?,
        );
        let (mut dxw, mut dhu) = (self.f32_out(OP, "dxw", dxw)?, self.f32_out(OP, "dhu", dhu)?);
        let mut dh_prev = self.f32_out(OP, "dh_prev", dh_prev)?;
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .gru_bwd(
                &act,
                &hu,
                &h_prev,
                &dh,
                cell.h,
                &mut dxw,
                &mut dhu,
                &mut dh_prev,
            )
            .map_err(cuda_err(OP))
    }

    fn tree_lstm_leaf_fwd(
        &self,
        gates: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        self.leaf_fwd("tree_lstm_leaf_fwd", gates, None, act, c, h)
    }

    fn tree_lstm_leaf_bwd(
        &self,
        act: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()> {
        self.leaf_bwd("tree_lstm_leaf_bwd", false, act, c, dc, dh, dgates)
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
        self.node_fwd("tree_lstm_node_fwd", gates, None, c_l, c_r, act, c, h)
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
        self.node_bwd(
            "tree_lstm_node_bwd",
            false,
            act,
            [c_l, c_r, c, dc, dh],
            dgates,
            dc_l,
            dc_r,
        )
    }

    fn tree_lstm_leaf_rd_fwd(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        self.leaf_fwd("tree_lstm_leaf_rd_fwd", gates, Some(mask), act, c, h)
    }

    fn tree_lstm_leaf_rd_bwd(
        &self,
        act: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()> {
        self.leaf_bwd("tree_lstm_leaf_rd_bwd", true, act, c, dc, dh, dgates)
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
        self.node_fwd(
            "tree_lstm_node_rd_fwd",
            gates,
            Some(mask),
            c_l,
            c_r,
            act,
            c,
            h,
        )
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
        self.node_bwd(
            "tree_lstm_node_rd_bwd",
            true,
            act,
            [c_l, c_r, c, dc, dh],
            dgates,
            dc_l,
            dc_r,
        )
    }
}

/// The Tree-LSTM cells with and without recurrent dropout share a kernel
/// entry point each (the mask is optional there).
impl CudaBackend {
    fn leaf_fwd(
        &self,
        op: &'static str,
        gates: &Tensor,
        mask: Option<&Tensor>,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        let cell = cell_shapes::leaf_fwd(
            op,
            gates.shape(),
            mask.map(Tensor::shape),
            act.shape(),
            c.shape(),
            h.shape(),
        )?;
        let gates = self.f32_in(op, "gates", gates)?;
        let mask = mask.map(|m| self.f32_in(op, "mask", m)).transpose()?;
        let (mut act, mut c, mut h) = (
            self.f32_out(op, "act", act)?,
            self.f32_out(op, "c", c)?,
            self.f32_out(op, "h", h)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_leaf_fwd(&gates, mask.as_ref(), cell.h, &mut act, &mut c, &mut h)
            .map_err(cuda_err(op))
    }

    fn leaf_bwd(
        &self,
        op: &'static str,
        rd: bool,
        act: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()> {
        let cell = cell_shapes::leaf_bwd(
            op,
            rd,
            act.shape(),
            c.shape(),
            dc.shape(),
            dh.shape(),
            dgates.shape(),
        )?;
        let (act, c) = (self.f32_in(op, "act", act)?, self.f32_in(op, "c", c)?);
        let (dc, dh) = (self.f32_in(op, "dc", dc)?, self.f32_in(op, "dh", dh)?);
        let mut dgates = self.f32_out(op, "dgates", dgates)?;
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_leaf_bwd(&act, rd, &c, &dc, &dh, cell.h, &mut dgates)
            .map_err(cuda_err(op))
    }

    fn node_fwd(
        &self,
        op: &'static str,
        gates: &Tensor,
        mask: Option<&Tensor>,
        c_l: &Tensor,
        c_r: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        let shapes = (
            gates.shape(),
            mask.map(Tensor::shape),
            c_l.shape(),
            c_r.shape(),
        );
        let cell = cell_shapes::node_fwd(
            op,
            shapes.0,
            shapes.1,
            shapes.2,
            shapes.3,
            act.shape(),
            c.shape(),
            h.shape(),
        )?;
        let gates = self.f32_in(op, "gates", gates)?;
        let mask = mask.map(|m| self.f32_in(op, "mask", m)).transpose()?;
        let (c_l, c_r) = (self.f32_in(op, "c_l", c_l)?, self.f32_in(op, "c_r", c_r)?);
        let (mut act, mut c, mut h) = (
            self.f32_out(op, "act", act)?,
            self.f32_out(op, "c", c)?,
            self.f32_out(op, "h", h)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_node_fwd(
                &gates,
                mask.as_ref(),
                &c_l,
                &c_r,
                cell.h,
                &mut act,
                &mut c,
                &mut h,
            )
            .map_err(cuda_err(op))
    }

    fn node_bwd(
        &self,
        op: &'static str,
        rd: bool,
        act: &Tensor,
        [c_l, c_r, c, dc, dh]: [&Tensor; 5],
        dgates: TensorMut<'_>,
        dc_l: TensorMut<'_>,
        dc_r: TensorMut<'_>,
    ) -> Result<()> {
        let states = [c_l.shape(), c_r.shape(), c.shape(), dc.shape(), dh.shape()];
        let cell = cell_shapes::node_bwd(
            op,
            rd,
            act.shape(),
            states,
            dgates.shape(),
            dc_l.shape(),
            dc_r.shape(),
        )?;
        let act = self.f32_in(op, "act", act)?;
        let (c_l, c_r, c) = (
            self.f32_in(op, "c_l", c_l)?,
            self.f32_in(op, "c_r", c_r)?,
            self.f32_in(op, "c", c)?,
        );
        let (dc, dh) = (self.f32_in(op, "dc", dc)?, self.f32_in(op, "dh", dh)?);
        let mut dgates = self.f32_out(op, "dgates", dgates)?;
        let (mut dc_l, mut dc_r) = (
            self.f32_out(op, "dc_l", dc_l)?,
            self.f32_out(op, "dc_r", dc_r)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_node_bwd(
                &act,
                rd,
                &c_l,
                &c_r,
                &c,
                &dc,
                &dh,
                cell.h,
                &mut dgates,
                &mut dc_l,
                &mut dc_r,
            )
            .map_err(cuda_err(op))
    }
}
