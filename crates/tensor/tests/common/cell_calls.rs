//! The tests' names for each cell and variant, as one-line calls into the
//! backends' four cell entry points (`cell_fwd`, `cell_bwd`,
//! `cell_fwd_states`, `cell_bwd_states`), so that each test reads as the
//! cell it checks.
#![allow(clippy::too_many_arguments, clippy::result_large_err)]

use sheaf_tensor::prelude::*;
use sheaf_tensor::{CellSpec, Result, Tensor, TensorMut};

const LSTM: CellSpec = CellSpec::LSTM;
const GRU: CellSpec = CellSpec::GRU;
const LEAF: CellSpec = CellSpec::TREE_LSTM_LEAF;
const NODE: CellSpec = CellSpec::TREE_LSTM_NODE;
const LEAF_RD: CellSpec = LEAF.with_dropout(true);
const NODE_RD: CellSpec = NODE.with_dropout(true);

type T<'a> = &'a Tensor;
type M<'a> = TensorMut<'a>;
type D<'a> = Option<TensorMut<'a>>;

pub trait CellCalls: StateCellOps {
    fn lstm_fwd(&self, g: T, cp: T, act: M, c: M, h: M) -> Result<()> {
        self.cell_fwd(LSTM, &[g, cp], &mut [act, c, h])
    }
    fn lstm_bwd(&self, a: T, cp: T, c: T, dc: T, dh: T, dg: M, dcp: M) -> Result<()> {
        self.cell_bwd(LSTM, &[a, cp, c, dc, dh], &mut [dg, dcp])
    }
    fn gru_fwd(&self, xw: T, hu: T, hp: T, act: M, h: M) -> Result<()> {
        self.cell_fwd(GRU, &[xw, hu, hp], &mut [act, h])
    }
    fn gru_bwd(&self, a: T, hu: T, hp: T, dh: T, dxw: M, dhu: M, dhp: M) -> Result<()> {
        self.cell_bwd(GRU, &[a, hu, hp, dh], &mut [dxw, dhu, dhp])
    }
    fn tree_lstm_leaf_fwd(&self, g: T, act: M, c: M, h: M) -> Result<()> {
        self.cell_fwd(LEAF, &[g], &mut [act, c, h])
    }
    fn tree_lstm_leaf_bwd(&self, a: T, c: T, dc: T, dh: T, dg: M) -> Result<()> {
        self.cell_bwd(LEAF, &[a, c, dc, dh], &mut [dg])
    }
    fn tree_lstm_node_fwd(&self, g: T, cl: T, cr: T, act: M, c: M, h: M) -> Result<()> {
        self.cell_fwd(NODE, &[g, cl, cr], &mut [act, c, h])
    }
    fn tree_lstm_node_bwd(
        &self,
        a: T,
        cl: T,
        cr: T,
        c: T,
        dc: T,
        dh: T,
        dg: M,
        dcl: M,
        dcr: M,
    ) -> Result<()> {
        self.cell_bwd(NODE, &[a, cl, cr, c, dc, dh], &mut [dg, dcl, dcr])
    }
    fn tree_lstm_leaf_rd_fwd(&self, g: T, m: T, act: M, c: M, h: M) -> Result<()> {
        self.cell_fwd(LEAF_RD, &[g, m], &mut [act, c, h])
    }
    fn tree_lstm_leaf_rd_bwd(&self, a: T, c: T, dc: T, dh: T, dg: M) -> Result<()> {
        self.cell_bwd(LEAF_RD, &[a, c, dc, dh], &mut [dg])
    }
    fn tree_lstm_node_rd_fwd(&self, g: T, m: T, cl: T, cr: T, act: M, c: M, h: M) -> Result<()> {
        self.cell_fwd(NODE_RD, &[g, m, cl, cr], &mut [act, c, h])
    }
    fn tree_lstm_node_rd_bwd(
        &self,
        a: T,
        cl: T,
        cr: T,
        c: T,
        dc: T,
        dh: T,
        dg: M,
        dcl: M,
        dcr: M,
    ) -> Result<()> {
        self.cell_bwd(NODE_RD, &[a, cl, cr, c, dc, dh], &mut [dg, dcl, dcr])
    }

    fn lstm_fwd_states(&self, g: T, prev: T, act: M, states: M) -> Result<()> {
        self.cell_fwd_states(LSTM, &[g, prev], act, states)
    }
    fn lstm_bwd_states(
        &self,
        a: T,
        prev: T,
        s: T,
        ds: T,
        dg: M,
        dprev: D,
        write: bool,
    ) -> Result<()> {
        self.cell_bwd_states(LSTM, &[a, prev, s, ds], dg, &mut [dprev], write)
    }
    fn tree_lstm_leaf_fwd_states(&self, g: T, act: M, states: M) -> Result<()> {
        self.cell_fwd_states(LEAF, &[g], act, states)
    }
    fn tree_lstm_leaf_bwd_states(&self, a: T, s: T, ds: T, dg: M, write: bool) -> Result<()> {
        self.cell_bwd_states(LEAF, &[a, s, ds], dg, &mut [], write)
    }
    fn tree_lstm_node_fwd_states(&self, g: T, l: T, r: T, act: M, states: M) -> Result<()> {
        self.cell_fwd_states(NODE, &[g, l, r], act, states)
    }
    fn tree_lstm_node_bwd_states(
        &self,
        a: T,
        l: T,
        r: T,
        s: T,
        ds: T,
        dg: M,
        dl: D,
        dr: D,
        write: bool,
    ) -> Result<()> {
        self.cell_bwd_states(NODE, &[a, l, r, s, ds], dg, &mut [dl, dr], write)
    }
    fn tree_lstm_leaf_rd_fwd_states(&self, g: T, m: T, act: M, states: M) -> Result<()> {
        self.cell_fwd_states(LEAF_RD, &[g, m], act, states)
    }
    fn tree_lstm_leaf_rd_bwd_states(&self, a: T, s: T, ds: T, dg: M, write: bool) -> Result<()> {
        self.cell_bwd_states(LEAF_RD, &[a, s, ds], dg, &mut [], write)
    }
    fn tree_lstm_node_rd_fwd_states(
        &self,
        g: T,
        m: T,
        l: T,
        r: T,
        act: M,
        states: M,
    ) -> Result<()> {
        self.cell_fwd_states(NODE_RD, &[g, m, l, r], act, states)
    }
    fn tree_lstm_node_rd_bwd_states(
        &self,
        a: T,
        l: T,
        r: T,
        s: T,
        ds: T,
        dg: M,
        dl: D,
        dr: D,
        write: bool,
    ) -> Result<()> {
        self.cell_bwd_states(NODE_RD, &[a, l, r, s, ds], dg, &mut [dl, dr], write)
    }
}

impl<B: StateCellOps + ?Sized> CellCalls for B {}
