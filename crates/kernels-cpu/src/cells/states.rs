//! The cells on batches of STATES: `[b, 2H]` with rows `[c | h]`, the
//! layout in which a graph stores a cell's output. Forward reads the
//! previous cells `c` where they lie and writes `c` and `h` straight into
//! the new states; backward reads `c`, `dc`, `dh` from the states and
//! their gradient and adds the children's `dc` into the `c` half of their
//! gradients (the `h` half gets nothing: `h` enters the next cell only
//! through the gates). With `write`, backward WRITES its outputs instead
//! (the gradients hold unspecified values, as an executor hands out fresh
//! buffers): each output row is zeroed, whole `[c | h]` rows for states,
//! just before the row kernel adds into it. Same row kernels, hence the same arithmetic, as the
//! `[b, H]` entry points in the parent module: only the row pitches
//! differ, so no halves are copied out and back.

#![allow(clippy::too_many_arguments)]

use super::strided::{c_half_mut, dense, dense_mut, half, ArgMut};
use super::{
    leaf_bwd_rows, leaf_fwd_rows, leaf_rd_bwd_rows, leaf_rd_fwd_rows, lstm_bwd_rows, lstm_fwd_rows,
    node_bwd_rows, node_fwd_rows, node_rd_bwd_rows, node_rd_fwd_rows, run_cell, BWD, FWD,
};
use crate::{CpuKernels, Isa, Result};

/// A forward cell's outputs `c` and `h` as one batch of states: the
/// whole rows, and an empty `h` argument that tells the row kernel to split
/// each row (see `strided::cell_outputs`).
fn states_out<'a>(name: &'static str, states: &'a mut [f32]) -> [ArgMut<'a>; 2] {
    [
        ArgMut {
            name,
            data: states,
            k: 2,
            p: 2,
            zero: false,
        },
        ArgMut {
            name,
            data: &mut [],
            k: 0,
            p: 0,
            zero: false,
        },
    ]
}

impl CpuKernels {
    /// [`CpuKernels::lstm_fwd`] on states: `prev` and `states` are
    /// `[b, 2H]` (only `prev`'s `c` half is read); b = `gates.len() / 4H`.
    pub fn lstm_fwd_states(
        &self,
        gates: &[f32],
        prev: &[f32],
        hidden: usize,
        act: &mut [f32],
        states: &mut [f32],
    ) -> Result<()> {
        let ins = [dense("gates", gates, 4), half("prev", prev, hidden, 0)];
        let [s, h] = states_out("states", states);
        let outs = [dense_mut("act", act, 4), s, h];
        run_cell("lstm_fwd_states", FWD, hidden, ins, outs, |i, o| {
            dispatch!(self, lstm_fwd_rows, hidden, i, o)
        })
    }

    /// [`CpuKernels::lstm_bwd`] on states: `dstates` is the gradient at
    /// `states`; accumulates into `dgates` and the `c` half of `dprev`
    /// (writes them, with `write`: see the module documentation).
    pub fn lstm_bwd_states(
        &self,
        act: &[f32],
        prev: &[f32],
        states: &[f32],
        dstates: &[f32],
        hidden: usize,
        dgates: &mut [f32],
        dprev: &mut [f32],
        write: bool,
    ) -> Result<()> {
        let ins = [
            dense("act", act, 4),
            half("prev", prev, hidden, 0),
            half("states", states, hidden, 0),
            half("dstates", dstates, hidden, 0),
            half("dstates", dstates, hidden, 1),
        ];
        let outs = [
            dense_mut("dgates", dgates, 4).zeroed(write),
            c_half_mut("dprev", dprev).zeroed(write),
        ];
        run_cell("lstm_bwd_states", BWD, hidden, ins, outs, |i, o| {
            dispatch!(self, lstm_bwd_rows, hidden, i, o)
        })
    }

    /// [`CpuKernels::tree_lstm_leaf_fwd`] writing `states` `[b, 2H]`.
    pub fn tree_lstm_leaf_fwd_states(
        &self,
        gates: &[f32],
        hidden: usize,
        act: &mut [f32],
        states: &mut [f32],
    ) -> Result<()> {
        let [s, h] = states_out("states", states);
        let outs = [dense_mut("act", act, 3), s, h];
        run_cell(
            "tree_lstm_leaf_fwd_states",
            FWD,
            hidden,
            [dense("gates", gates, 3)],
            outs,
            |i, o| dispatch!(self, leaf_fwd_rows, hidden, i, o),
        )
    }

    /// [`CpuKernels::tree_lstm_leaf_bwd`] on states: accumulates (with `write`: writes) into
    /// `dgates` (`[b, 3H]`).
    pub fn tree_lstm_leaf_bwd_states(
        &self,
        act: &[f32],
        states: &[f32],
        dstates: &[f32],
        hidden: usize,
        dgates: &mut [f32],
        write: bool,
    ) -> Result<()> {
        let ins = [
            dense("act", act, 3),
            half("states", states, hidden, 0),
            half("dstates", dstates, hidden, 0),
            half("dstates", dstates, hidden, 1),
        ];
        run_cell(
            "tree_lstm_leaf_bwd_states",
            BWD,
            hidden,
            ins,
            [dense_mut("dgates", dgates, 3).zeroed(write)],
            |i, o| dispatch!(self, leaf_bwd_rows, hidden, i, o),
        )
    }

    /// [`CpuKernels::tree_lstm_node_fwd`] on states: the children's
    /// `left`, `right` and the output `states` are `[b, 2H]`.
    pub fn tree_lstm_node_fwd_states(
        &self,
        gates: &[f32],
        left: &[f32],
        right: &[f32],
        hidden: usize,
        act: &mut [f32],
        states: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("gates", gates, 5),
            half("left", left, hidden, 0),
            half("right", right, hidden, 0),
        ];
        let [s, h] = states_out("states", states);
        let outs = [dense_mut("act", act, 5), s, h];
        run_cell(
            "tree_lstm_node_fwd_states",
            FWD,
            hidden,
            ins,
            outs,
            |i, o| dispatch!(self, node_fwd_rows, hidden, i, o),
        )
    }

    /// [`CpuKernels::tree_lstm_node_bwd`] on states: accumulates (with `write`: writes) into
    /// `dgates` (`[b, 5H]`) and the `c` halves of `dleft` and `dright`.
    pub fn tree_lstm_node_bwd_states(
        &self,
        act: &[f32],
        left: &[f32],
        right: &[f32],
        states: &[f32],
        dstates: &[f32],
        hidden: usize,
        dgates: &mut [f32],
        dleft: &mut [f32],
        dright: &mut [f32],
        write: bool,
    ) -> Result<()> {
        let ins = [
            dense("act", act, 5),
            half("left", left, hidden, 0),
            half("right", right, hidden, 0),
            half("states", states, hidden, 0),
            half("dstates", dstates, hidden, 0),
            half("dstates", dstates, hidden, 1),
        ];
        let outs = [
            dense_mut("dgates", dgates, 5).zeroed(write),
            c_half_mut("dleft", dleft).zeroed(write),
            c_half_mut("dright", dright).zeroed(write),
        ];
        run_cell(
            "tree_lstm_node_bwd_states",
            BWD,
            hidden,
            ins,
            outs,
            |i, o| dispatch!(self, node_bwd_rows, hidden, i, o),
        )
    }

    /// [`CpuKernels::tree_lstm_leaf_rd_fwd`] writing `states` `[b, 2H]`.
    pub fn tree_lstm_leaf_rd_fwd_states(
        &self,
        gates: &[f32],
        mask: &[f32],
        hidden: usize,
        act: &mut [f32],
        states: &mut [f32],
    ) -> Result<()> {
        let ins = [dense("gates", gates, 3), dense("mask", mask, 1)];
        let [s, h] = states_out("states", states);
        let outs = [dense_mut("act", act, 4), s, h];
        run_cell(
            "tree_lstm_leaf_rd_fwd_states",
            FWD,
            hidden,
            ins,
            outs,
            |i, o| dispatch!(self, leaf_rd_fwd_rows, hidden, i, o),
        )
    }

    /// [`CpuKernels::tree_lstm_leaf_rd_bwd`] on states (`act` `[b, 4H]`):
    /// accumulates (with `write`: writes) into `dgates` (`[b, 3H]`).
    pub fn tree_lstm_leaf_rd_bwd_states(
        &self,
        act: &[f32],
        states: &[f32],
        dstates: &[f32],
        hidden: usize,
        dgates: &mut [f32],
        write: bool,
    ) -> Result<()> {
        let ins = [
            dense("act", act, 4),
            half("states", states, hidden, 0),
            half("dstates", dstates, hidden, 0),
            half("dstates", dstates, hidden, 1),
        ];
        run_cell(
            "tree_lstm_leaf_rd_bwd_states",
            BWD,
            hidden,
            ins,
            [dense_mut("dgates", dgates, 3).zeroed(write)],
            |i, o| dispatch!(self, leaf_rd_bwd_rows, hidden, i, o),
        )
    }

    /// [`CpuKernels::tree_lstm_node_rd_fwd`] on states (`act` `[b, 6H]`).
    pub fn tree_lstm_node_rd_fwd_states(
        &self,
        gates: &[f32],
        mask: &[f32],
        left: &[f32],
        right: &[f32],
        hidden: usize,
        act: &mut [f32],
        states: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("gates", gates, 5),
            dense("mask", mask, 1),
            half("left", left, hidden, 0),
            half("right", right, hidden, 0),
        ];
        let [s, h] = states_out("states", states);
        let outs = [dense_mut("act", act, 6), s, h];
        run_cell(
            "tree_lstm_node_rd_fwd_states",
            FWD,
            hidden,
            ins,
            outs,
            |i, o| dispatch!(self, node_rd_fwd_rows, hidden, i, o),
        )
    }

    /// [`CpuKernels::tree_lstm_node_rd_bwd`] on states (`act` `[b, 6H]`):
    /// accumulates (with `write`: writes) into `dgates` (`[b, 5H]`) and the `c` halves of `dleft`
    /// and `dright`.
    pub fn tree_lstm_node_rd_bwd_states(
        &self,
        act: &[f32],
        left: &[f32],
        right: &[f32],
        states: &[f32],
        dstates: &[f32],
        hidden: usize,
        dgates: &mut [f32],
        dleft: &mut [f32],
        dright: &mut [f32],
        write: bool,
    ) -> Result<()> {
        let ins = [
            dense("act", act, 6),
            half("left", left, hidden, 0),
            half("right", right, hidden, 0),
            half("states", states, hidden, 0),
            half("dstates", dstates, hidden, 0),
            half("dstates", dstates, hidden, 1),
        ];
        let outs = [
            dense_mut("dgates", dgates, 5).zeroed(write),
            c_half_mut("dleft", dleft).zeroed(write),
            c_half_mut("dright", dright).zeroed(write),
        ];
        run_cell(
            "tree_lstm_node_rd_bwd_states",
            BWD,
            hidden,
            ins,
            outs,
            |i, o| dispatch!(self, node_rd_bwd_rows, hidden, i, o),
        )
    }
}
