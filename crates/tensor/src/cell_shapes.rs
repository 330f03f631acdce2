//! The shape contract of every fused cell (`CellOps`), shared by the
//! backends: each function checks one method's arguments and returns the
//! cell's `b x H`. Argument names match the trait's.
#![allow(clippy::too_many_arguments)]

use crate::check::{Cell, Check};
use crate::error::Result;
use crate::Shape;

pub(crate) fn lstm_fwd(
    gates: Shape,
    c_prev: Shape,
    act: Shape,
    c: Shape,
    h: Shape,
) -> Result<Cell> {
    let cell = Cell::new("lstm_fwd", "c_prev", c_prev)?;
    cell.gates_in(4, gates)?;
    cell.gates("act", 4, act)?;
    cell.state("c", c)?;
    cell.state("h", h)?;
    Ok(cell)
}

pub(crate) fn lstm_bwd(
    act: Shape,
    c_prev: Shape,
    c: Shape,
    dc: Shape,
    dh: Shape,
    dgates: Shape,
    dc_prev: Shape,
) -> Result<Cell> {
    let cell = Cell::new("lstm_bwd", "c_prev", c_prev)?;
    cell.gates_in(4, act)?;
    cell.state("c", c)?;
    cell.state("dc", dc)?;
    cell.state("dh", dh)?;
    cell.gates("dgates", 4, dgates)?;
    cell.state("dc_prev", dc_prev)?;
    Ok(cell)
}

pub(crate) fn gru_fwd(xw: Shape, hu: Shape, h_prev: Shape, act: Shape, h: Shape) -> Result<Cell> {
    let cell = Cell::new("gru_fwd", "h_prev", h_prev)?;
    cell.gates_in(3, xw)?;
    cell.gates("hu", 3, hu)?;
    cell.gates("act", 3, act)?;
    cell.state("h", h)?;
    Ok(cell)
}

pub(crate) fn gru_bwd(
    act: Shape,
    hu: Shape,
    h_prev: Shape,
    dh: Shape,
    dxw: Shape,
    dhu: Shape,
    dh_prev: Shape,
) -> Result<Cell> {
    let cell = Cell::new("gru_bwd", "h_prev", h_prev)?;
    cell.gates_in(3, act)?;
    cell.gates("hu", 3, hu)?;
    cell.state("dh", dh)?;
    cell.gates("dxw", 3, dxw)?;
    cell.gates("dhu", 3, dhu)?;
    cell.state("dh_prev", dh_prev)?;
    Ok(cell)
}

/// The leaf forward, plain (`mask` None) or with recurrent dropout.
pub(crate) fn leaf_fwd(
    op: &'static str,
    gates: Shape,
    mask: Option<Shape>,
    act: Shape,
    c: Shape,
    h: Shape,
) -> Result<Cell> {
    let cell = Cell::new(op, "c", c)?;
    match mask {
        None => {
            cell.gates_in(3, gates)?;
            cell.gates("act", 3, act)?;
        }
        Some(mask) => {
            cell.gates("gates", 3, gates)?;
            cell.state("mask", mask)?;
            cell.gates("act", 4, act)?;
        }
    }
    cell.state("h", h)?;
    Ok(cell)
}

/// The leaf backward; `rd` if `act` holds the dropout mask.
pub(crate) fn leaf_bwd(
    op: &'static str,
    rd: bool,
    act: Shape,
    c: Shape,
    dc: Shape,
    dh: Shape,
    dgates: Shape,
) -> Result<Cell> {
    let cell = Cell::new(op, "c", c)?;
    if rd {
        cell.gates("act", 4, act)?;
    } else {
        cell.gates_in(3, act)?;
    }
    cell.state("dc", dc)?;
    cell.state("dh", dh)?;
    cell.gates("dgates", 3, dgates)?;
    Ok(cell)
}

/// The node forward, plain (`mask` None) or with recurrent dropout.
pub(crate) fn node_fwd(
    op: &'static str,
    gates: Shape,
    mask: Option<Shape>,
    c_l: Shape,
    c_r: Shape,
    act: Shape,
    c: Shape,
    h: Shape,
) -> Result<Cell> {
    let cell = Cell::new(op, "c_l", c_l)?;
    Check(op).same(c_l, c_r)?;
    match mask {
        None => {
            cell.gates_in(5, gates)?;
            cell.gates("act", 5, act)?;
        }
        Some(mask) => {
            cell.gates("gates", 5, gates)?;
            cell.state("mask", mask)?;
            cell.gates("act", 6, act)?;
        }
    }
    cell.state("c", c)?;
    cell.state("h", h)?;
    Ok(cell)
}

/// The node backward; `rd` if `act` holds the dropout mask.
pub(crate) fn node_bwd(
    op: &'static str,
    rd: bool,
    act: Shape,
    [c_l, c_r, c, dc, dh]: [Shape; 5],
    dgates: Shape,
    dc_l: Shape,
    dc_r: Shape,
) -> Result<Cell> {
    let cell = Cell::new(op, "c_l", c_l)?;
    Check(op).same(c_l, c_r)?;
    if rd {
        cell.gates("act", 6, act)?;
    } else {
        cell.gates_in(5, act)?;
    }
    cell.state("c", c)?;
    cell.state("dc", dc)?;
    cell.state("dh", dh)?;
    cell.gates("dgates", 5, dgates)?;
    cell.state("dc_l", dc_l)?;
    cell.state("dc_r", dc_r)?;
    Ok(cell)
}

// ----- the same cells on batches of states `[b, 2H]` (`StateCellOps`) -----
// Checked in the CPU override's order, by both the override and the
// defaults, before any kernel runs. `None` gradients are not checked.

/// Argument `arg`, `k` blocks of H wide, if given.
fn opt_gates(cell: &Cell, arg: &'static str, k: usize, got: Option<Shape>) -> Result<()> {
    got.map_or(Ok(()), |s| cell.gates(arg, k, s))
}

pub(crate) fn lstm_fwd_states(
    gates: Shape,
    prev: Shape,
    act: Shape,
    states: Shape,
) -> Result<Cell> {
    let cell = Cell::states("lstm_fwd", "states", states)?;
    cell.gates_in(4, gates)?;
    cell.gates("prev", 2, prev)?;
    cell.gates("act", 4, act)?;
    Ok(cell)
}

pub(crate) fn lstm_bwd_states(
    act: Shape,
    prev: Shape,
    states: Shape,
    dstates: Shape,
    dgates: Shape,
    dprev: Option<Shape>,
) -> Result<Cell> {
    let cell = Cell::states("lstm_bwd", "states", states)?;
    cell.gates_in(4, act)?;
    cell.gates("prev", 2, prev)?;
    cell.gates("dstates", 2, dstates)?;
    cell.gates("dgates", 4, dgates)?;
    opt_gates(&cell, "dprev", 2, dprev)?;
    Ok(cell)
}

/// The leaf forward on states, plain (`mask` None) or with recurrent
/// dropout.
pub(crate) fn leaf_fwd_states(
    op: &'static str,
    gates: Shape,
    mask: Option<Shape>,
    act: Shape,
    states: Shape,
) -> Result<Cell> {
    let cell = Cell::states(op, "states", states)?;
    cell.gates_in(3, gates)?;
    opt_gates(&cell, "mask", 1, mask)?;
    cell.gates("act", if mask.is_some() { 4 } else { 3 }, act)?;
    Ok(cell)
}

pub(crate) fn leaf_bwd_states(
    op: &'static str,
    rd: bool,
    act: Shape,
    states: Shape,
    dstates: Shape,
    dgates: Shape,
) -> Result<Cell> {
    let cell = Cell::states(op, "states", states)?;
    if rd {
        cell.gates("act", 4, act)?;
    } else {
        cell.gates_in(3, act)?;
    }
    cell.gates("dstates", 2, dstates)?;
    cell.gates("dgates", 3, dgates)?;
    Ok(cell)
}

pub(crate) fn node_fwd_states(
    op: &'static str,
    gates: Shape,
    mask: Option<Shape>,
    [left, right]: [Shape; 2],
    act: Shape,
    states: Shape,
) -> Result<Cell> {
    let cell = Cell::states(op, "states", states)?;
    cell.gates_in(5, gates)?;
    opt_gates(&cell, "mask", 1, mask)?;
    cell.gates("left", 2, left)?;
    cell.gates("right", 2, right)?;
    cell.gates("act", if mask.is_some() { 6 } else { 5 }, act)?;
    Ok(cell)
}

pub(crate) fn node_bwd_states(
    op: &'static str,
    rd: bool,
    [act, left, right, states, dstates]: [Shape; 5],
    dgates: Shape,
    dleft: Option<Shape>,
    dright: Option<Shape>,
) -> Result<Cell> {
    let cell = Cell::states(op, "states", states)?;
    cell.gates("act", if rd { 6 } else { 5 }, act)?;
    cell.gates("left", 2, left)?;
    cell.gates("right", 2, right)?;
    cell.gates("dstates", 2, dstates)?;
    cell.gates("dgates", 5, dgates)?;
    opt_gates(&cell, "dleft", 2, dleft)?;
    opt_gates(&cell, "dright", 2, dright)?;
    Ok(cell)
}
