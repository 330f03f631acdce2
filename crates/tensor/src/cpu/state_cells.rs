//! StateCellOps for the CPU backend: the kernels read and write the
//! states' halves at their row pitch, so nothing is copied.
#![allow(clippy::too_many_arguments)]

use super::{f32_in, f32_out, CpuBackend};
use crate::backend::StateCellOps;
use crate::cell_shapes;
use crate::check::Cell;
use crate::error::{Result, TensorError};
use crate::{Tensor, TensorMut};

/// A state gradient the kernel adds into: the argument's own, or a scratch
/// `[b, 2H]` for a state that needs none.
fn grad_or_scratch<'a>(
    op: &'static str,
    arg: &'static str,
    d: Option<TensorMut<'a>>,
    scratch: &'a mut Vec<f32>,
    cell: &Cell,
) -> Result<&'a mut [f32]> {
    match d {
        Some(d) => f32_out(op, arg, d),
        None => {
            scratch.resize(cell.b * 2 * cell.h, 0.0);
            Ok(scratch)
        }
    }
}

impl StateCellOps for CpuBackend {
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
        let (gates, prev) = (f32_in(OP, "gates", gates)?, f32_in(OP, "prev", prev)?);
        let (act, states) = (f32_out(OP, "act", act)?, f32_out(OP, "states", states)?);
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .lstm_fwd_states(gates, prev, cell.h, act, states)
            .map_err(TensorError::kernel(OP))
    }

    fn lstm_bwd_states(
        &self,
        act: &Tensor,
        prev: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        dprev: Option<TensorMut<'_>>,
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
        let (act, prev) = (f32_in(OP, "act", act)?, f32_in(OP, "prev", prev)?);
        let (states, dstates) = (
            f32_in(OP, "states", states)?,
            f32_in(OP, "dstates", dstates)?,
        );
        let dgates = f32_out(OP, "dgates", dgates)?;
        let mut scratch = Vec::new();
        let dprev = grad_or_scratch(OP, "dprev", dprev, &mut scratch, &cell)?;
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .lstm_bwd_states(act, prev, states, dstates, cell.h, dgates, dprev, write)
            .map_err(TensorError::kernel(OP))
    }

    fn tree_lstm_leaf_fwd_states(
        &self,
        gates: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_leaf_fwd";
        let cell =
            cell_shapes::leaf_fwd_states(OP, gates.shape(), None, act.shape(), states.shape())?;
        let gates = f32_in(OP, "gates", gates)?;
        let (act, states) = (f32_out(OP, "act", act)?, f32_out(OP, "states", states)?);
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_leaf_fwd_states(gates, cell.h, act, states)
            .map_err(TensorError::kernel(OP))
    }

    fn tree_lstm_leaf_bwd_states(
        &self,
        act: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        write: bool,
    ) -> Result<()> {
        leaf_bwd(
            self,
            "tree_lstm_leaf_bwd",
            false,
            [act, states, dstates],
            dgates,
            write,
        )
    }

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
        let gates = f32_in(OP, "gates", gates)?;
        let (left, right) = (f32_in(OP, "left", left)?, f32_in(OP, "right", right)?);
        let (act, states) = (f32_out(OP, "act", act)?, f32_out(OP, "states", states)?);
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_node_fwd_states(gates, left, right, cell.h, act, states)
            .map_err(TensorError::kernel(OP))
    }

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
        node_bwd(
            self,
            "tree_lstm_node_bwd",
            5,
            [act, left, right, states, dstates],
            dgates,
            dleft,
            dright,
            write,
        )
    }

    fn tree_lstm_leaf_rd_fwd_states(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "tree_lstm_leaf_rd_fwd";
        let cell = cell_shapes::leaf_fwd_states(
            OP,
            gates.shape(),
            Some(mask.shape()),
            act.shape(),
            states.shape(),
        )?;
        let (gates, mask) = (f32_in(OP, "gates", gates)?, f32_in(OP, "mask", mask)?);
        let (act, states) = (f32_out(OP, "act", act)?, f32_out(OP, "states", states)?);
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_leaf_rd_fwd_states(gates, mask, cell.h, act, states)
            .map_err(TensorError::kernel(OP))
    }

    fn tree_lstm_leaf_rd_bwd_states(
        &self,
        act: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        write: bool,
    ) -> Result<()> {
        leaf_bwd(
            self,
            "tree_lstm_leaf_rd_bwd",
            true,
            [act, states, dstates],
            dgates,
            write,
        )
    }

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
        let (gates, mask) = (f32_in(OP, "gates", gates)?, f32_in(OP, "mask", mask)?);
        let (left, right) = (f32_in(OP, "left", left)?, f32_in(OP, "right", right)?);
        let (act, states) = (f32_out(OP, "act", act)?, f32_out(OP, "states", states)?);
        if cell.is_empty() {
            return Ok(());
        }
        self.kernels
            .tree_lstm_node_rd_fwd_states(gates, mask, left, right, cell.h, act, states)
            .map_err(TensorError::kernel(OP))
    }

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
        node_bwd(
            self,
            "tree_lstm_node_rd_bwd",
            6,
            [act, left, right, states, dstates],
            dgates,
            dleft,
            dright,
            write,
        )
    }
}

/// The leaf's backward, plain or with recurrent dropout (`rd`: `act`
/// holds the mask as a fourth block).
fn leaf_bwd(
    be: &CpuBackend,
    op: &'static str,
    rd: bool,
    [act, states, dstates]: [&Tensor; 3],
    dgates: TensorMut<'_>,
    write: bool,
) -> Result<()> {
    let (act_s, d_s) = (act.shape(), dstates.shape());
    let cell = cell_shapes::leaf_bwd_states(op, rd, act_s, states.shape(), d_s, dgates.shape())?;
    let act = f32_in(op, "act", act)?;
    let (states, dstates) = (
        f32_in(op, "states", states)?,
        f32_in(op, "dstates", dstates)?,
    );
    let dgates = f32_out(op, "dgates", dgates)?;
    if cell.is_empty() {
        return Ok(());
    }
    let k = &be.kernels;
    let result = if rd {
        k.tree_lstm_leaf_rd_bwd_states(act, states, dstates, cell.h, dgates, write)
    } else {
        k.tree_lstm_leaf_bwd_states(act, states, dstates, cell.h, dgates, write)
    };
    result.map_err(TensorError::kernel(op))
}

/// The internal node's backward, plain (`act` of 5 blocks) or with
/// recurrent dropout (6: the mask appended).
fn node_bwd(
    be: &CpuBackend,
    op: &'static str,
    act_blocks: usize,
    [act, left, right, states, dstates]: [&Tensor; 5],
    dgates: TensorMut<'_>,
    dleft: Option<TensorMut<'_>>,
    dright: Option<TensorMut<'_>>,
    write: bool,
) -> Result<()> {
    let shapes = [act, left, right, states, dstates].map(|t| t.shape());
    let cell = cell_shapes::node_bwd_states(
        op,
        act_blocks == 6,
        shapes,
        dgates.shape(),
        dleft.as_ref().map(|d| d.shape()),
        dright.as_ref().map(|d| d.shape()),
    )?;
    let act = f32_in(op, "act", act)?;
    let (left, right) = (f32_in(op, "left", left)?, f32_in(op, "right", right)?);
    let (states, dstates) = (
        f32_in(op, "states", states)?,
        f32_in(op, "dstates", dstates)?,
    );
    let dgates = f32_out(op, "dgates", dgates)?;
    let (mut s1, mut s2) = (Vec::new(), Vec::new());
    let dleft = grad_or_scratch(op, "dleft", dleft, &mut s1, &cell)?;
    let dright = grad_or_scratch(op, "dright", dright, &mut s2, &cell)?;
    if cell.is_empty() {
        return Ok(());
    }
    let k = &be.kernels;
    let result = if act_blocks == 6 {
        k.tree_lstm_node_rd_bwd_states(
            act, left, right, states, dstates, cell.h, dgates, dleft, dright, write,
        )
    } else {
        k.tree_lstm_node_bwd_states(
            act, left, right, states, dstates, cell.h, dgates, dleft, dright, write,
        )
    };
    result.map_err(TensorError::kernel(op))
}
