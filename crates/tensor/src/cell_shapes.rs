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
