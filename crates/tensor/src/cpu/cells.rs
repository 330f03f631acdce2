//! CellOps for the CPU backend.
#![allow(clippy::too_many_arguments)]

use super::{f32_in, f32_out, CpuBackend};
use crate::backend::CellOps;
use crate::cell_shapes;
use crate::error::{Result, TensorError};
use crate::{Tensor, TensorMut};

impl CellOps for CpuBackend {
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
        let (gates, c_prev) = (f32_in(OP, "gates", gates)?, f32_in(OP, "c_prev", c_prev)?);
        let (act, c, h) = (
            f32_out(OP, "act", act)?,
            f32_out(OP, "c", c)?,
            f32_out(OP, "h", h)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .lstm_fwd(gates, c_prev, cell.h, act, c, h)
            .map_err(TensorError::kernel(OP))
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
            f32_in(OP, "act", act)?,
            f32_in(OP, "c_prev", c_prev)?,
            f32_in(OP, "c", c)?,
        );
        let (dc, dh) = (f32_in(OP, "dc", dc)?, f32_in(OP, "dh", dh)?);
        let (dgates, dc_prev) = (
            f32_out(OP, "dgates", dgates)?,
            f32_out(OP, "dc_prev", dc_prev)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .lstm_bwd(act, c_prev, c, dc, dh, cell.h, dgates, dc_prev)
            .map_err(TensorError::kernel(OP))
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
            f32_in(OP, "xw", xw)?,
            f32_in(OP, "hu", hu)?,
            f32_in(OP, "h_prev", h_prev)?,
        );
        let (act, h) = (f32_out(OP, "act", act)?, f32_out(OP, "h", h)?);
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .gru_fwd(xw, hu, h_prev, cell.h, act, h)
            .map_err(TensorError::kernel(OP))
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
        let (act, hu, h_prev) = (
            f32_in(OP, "act", act)?,
            f32_in(OP, "hu", hu)?,
            f32_in(OP, "h_prev", h_prev)?,
        );
        let dh = f32_in(OP, "dh", dh)?;
        let (dxw, dhu) = (f32_out(OP, "dxw", dxw)?, f32_out(OP, "dhu", dhu)?);
        let dh_prev = f32_out(OP, "dh_prev", dh_prev)?;
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .gru_bwd(act, hu, h_prev, dh, cell.h, dxw, dhu, dh_prev)
            .map_err(TensorError::kernel(OP))
    }

    fn tree_lstm_leaf_fwd(
        &self,
        gates: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_leaf_fwd";
        let cell =
            cell_shapes::leaf_fwd(OP, gates.shape(), None, act.shape(), c.shape(), h.shape())?;
        let gates = f32_in(OP, "gates", gates)?;
        let (act, c, h) = (
            f32_out(OP, "act", act)?,
            f32_out(OP, "c", c)?,
            f32_out(OP, "h", h)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_leaf_fwd(gates, cell.h, act, c, h)
            .map_err(TensorError::kernel(OP))
    }

    fn tree_lstm_leaf_bwd(
        &self,
        act: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_leaf_bwd";
        let cell = cell_shapes::leaf_bwd(
            OP,
            false,
            act.shape(),
            c.shape(),
            dc.shape(),
            dh.shape(),
            dgates.shape(),
        )?;
        let (act, c) = (f32_in(OP, "act", act)?, f32_in(OP, "c", c)?);
        let (dc, dh) = (f32_in(OP, "dc", dc)?, f32_in(OP, "dh", dh)?);
        let dgates = f32_out(OP, "dgates", dgates)?;
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_leaf_bwd(act, c, dc, dh, cell.h, dgates)
            .map_err(TensorError::kernel(OP))
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
        const OP: &str = "tree_lstm_node_fwd";
        let cell = cell_shapes::node_fwd(
            OP,
            gates.shape(),
            None,
            c_l.shape(),
            c_r.shape(),
            act.shape(),
            c.shape(),
            h.shape(),
        )?;
        let gates = f32_in(OP, "gates", gates)?;
        let (c_l, c_r) = (f32_in(OP, "c_l", c_l)?, f32_in(OP, "c_r", c_r)?);
        let (act, c, h) = (
            f32_out(OP, "act", act)?,
            f32_out(OP, "c", c)?,
            f32_out(OP, "h", h)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_node_fwd(gates, c_l, c_r, cell.h, act, c, h)
            .map_err(TensorError::kernel(OP))
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
        const OP: &str = "tree_lstm_node_bwd";
        let cell = cell_shapes::node_bwd(
            OP,
            false,
            act.shape(),
            [c_l.shape(), c_r.shape(), c.shape(), dc.shape(), dh.shape()],
            dgates.shape(),
            dc_l.shape(),
            dc_r.shape(),
        )?;
        let (act, c_l, c_r) = (
            f32_in(OP, "act", act)?,
            f32_in(OP, "c_l", c_l)?,
            f32_in(OP, "c_r", c_r)?,
        );
        let (c, dc, dh) = (
            f32_in(OP, "c", c)?,
            f32_in(OP, "dc", dc)?,
            f32_in(OP, "dh", dh)?,
        );
        let dgates = f32_out(OP, "dgates", dgates)?;
        let (dc_l, dc_r) = (f32_out(OP, "dc_l", dc_l)?, f32_out(OP, "dc_r", dc_r)?);
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_node_bwd(act, c_l, c_r, c, dc, dh, cell.h, dgates, dc_l, dc_r)
            .map_err(TensorError::kernel(OP))
    }

    fn tree_lstm_leaf_rd_fwd(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_leaf_rd_fwd";
        let cell = cell_shapes::leaf_fwd(
            OP,
            gates.shape(),
            Some(mask.shape()),
            act.shape(),
            c.shape(),
            h.shape(),
        )?;
        let (gates, mask) = (f32_in(OP, "gates", gates)?, f32_in(OP, "mask", mask)?);
        let (act, c, h) = (
            f32_out(OP, "act", act)?,
            f32_out(OP, "c", c)?,
            f32_out(OP, "h", h)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_leaf_rd_fwd(gates, mask, cell.h, act, c, h)
            .map_err(TensorError::kernel(OP))
    }

    fn tree_lstm_leaf_rd_bwd(
        &self,
        act: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_leaf_rd_bwd";
        let cell = cell_shapes::leaf_bwd(
            OP,
            true,
            act.shape(),
            c.shape(),
            dc.shape(),
            dh.shape(),
            dgates.shape(),
        )?;
        let (act, c) = (f32_in(OP, "act", act)?, f32_in(OP, "c", c)?);
        let (dc, dh) = (f32_in(OP, "dc", dc)?, f32_in(OP, "dh", dh)?);
        let dgates = f32_out(OP, "dgates", dgates)?;
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_leaf_rd_bwd(act, c, dc, dh, cell.h, dgates)
            .map_err(TensorError::kernel(OP))
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
        const OP: &str = "tree_lstm_node_rd_fwd";
        let cell = cell_shapes::node_fwd(
            OP,
            gates.shape(),
            Some(mask.shape()),
            c_l.shape(),
            c_r.shape(),
            act.shape(),
            c.shape(),
            h.shape(),
        )?;
        let (gates, mask) = (f32_in(OP, "gates", gates)?, f32_in(OP, "mask", mask)?);
        let (c_l, c_r) = (f32_in(OP, "c_l", c_l)?, f32_in(OP, "c_r", c_r)?);
        let (act, c, h) = (
            f32_out(OP, "act", act)?,
            f32_out(OP, "c", c)?,
            f32_out(OP, "h", h)?,
        );
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_node_rd_fwd(gates, mask, c_l, c_r, cell.h, act, c, h)
            .map_err(TensorError::kernel(OP))
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
        const OP: &str = "tree_lstm_node_rd_bwd";
        let cell = cell_shapes::node_bwd(
            OP,
            true,
            act.shape(),
            [c_l.shape(), c_r.shape(), c.shape(), dc.shape(), dh.shape()],
            dgates.shape(),
            dc_l.shape(),
            dc_r.shape(),
        )?;
        let (act, c_l, c_r) = (
            f32_in(OP, "act", act)?,
            f32_in(OP, "c_l", c_l)?,
            f32_in(OP, "c_r", c_r)?,
        );
        let (c, dc, dh) = (
            f32_in(OP, "c", c)?,
            f32_in(OP, "dc", dc)?,
            f32_in(OP, "dh", dh)?,
        );
        let dgates = f32_out(OP, "dgates", dgates)?;
        let (dc_l, dc_r) = (f32_out(OP, "dc_l", dc_l)?, f32_out(OP, "dc_r", dc_r)?);
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_node_rd_bwd(act, c_l, c_r, c, dc, dh, cell.h, dgates, dc_l, dc_r)
            .map_err(TensorError::kernel(OP))
    }
}
