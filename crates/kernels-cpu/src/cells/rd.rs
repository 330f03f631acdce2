//! Recurrent dropout in the Tree-LSTM cells (Semeniuta, Severyn & Barth
//! 2016): the candidate `s(i) t(u)` is multiplied by a per-element mask `m`
//! (`[b, H]`, drawn by the caller: 0 or `1 / (1 - p)` in training, 1 in
//! evaluation), which forward appends to `act` as one more block so that
//! backward reads it from there: `act` is `[i, o, u, m]` (leaf) or
//! `[i, f_l, f_r, o, u, m]` (node). Same row structure, checks and AVX2
//! builds as the plain cells in the parent module.

use super::strided::{cell_outputs, dense, dense_mut, Rows, RowsMut};
use super::{
    activate, blocks, blocks_mut, out_gate, rows, rows_mut, run_cell, tanh_into, BWD, FWD,
};
use crate::{CpuKernels, Isa, Result};

elementwise! {
    fn leaf_c_rd(i, u, m; c) { *c = i * u * m; }
    fn node_c_rd(i, u, m, fl, cl, fr, cr; c) { *c = i * u * m + fl * cl + fr * cr; }
    // The candidate `i u` is scaled by `m`: both factors' gradients carry it.
    fn leaf_bwd_elems_rd(i, o, u, m, t, dc, dh; di, d_o, du) {
        let dct = dc + dh * o * (1.0 - t * t);
        let dcm = dct * m;
        *di += dcm * u * (i * (1.0 - i));
        *d_o += dh * t * (o * (1.0 - o));
        *du += dcm * i * (1.0 - u * u);
    }
    fn node_bwd_elems_rd(i, fl, fr, o, u, m, t, cl, cr, dc, dh; di, dfl, dfr, d_o, du, dcl, dcr) {
        let dct = dc + dh * o * (1.0 - t * t);
        let dcm = dct * m;
        *di += dcm * u * (i * (1.0 - i));
        *dfl += dct * cl * (fl * (1.0 - fl));
        *dfr += dct * cr * (fr * (1.0 - fr));
        *d_o += dh * t * (o * (1.0 - o));
        *du += dcm * i * (1.0 - u * u);
        *dcl += dct * fl;
        *dcr += dct * fr;
    }
}

#[inline(always)]
pub(crate) fn leaf_rd_fwd_rows(
    k: &CpuKernels,
    hd: usize,
    [gates, mask]: [Rows<'_>; 2],
    [act, c, h]: [RowsMut<'_>; 3],
) {
    let ins = rows(gates, 3, hd).zip(rows(mask, 1, hd));
    let outs = rows_mut(act, 4, hd).zip(cell_outputs(c, h, hd));
    for ((g, m), (a, (c, h))) in ins.zip(outs) {
        let (a, am) = a.split_at_mut(3 * hd);
        activate(k, g, hd, 2, a);
        crate::rows::copy(am, m);
        let [i, o, u] = blocks(a, hd);
        leaf_c_rd(i, u, m, c);
        out_gate(k, o, c, h);
    }
}

#[inline(always)]
pub(crate) fn leaf_rd_bwd_rows(
    k: &CpuKernels,
    hd: usize,
    [act, c, dc, dh]: [Rows<'_>; 4],
    [dgates]: [RowsMut<'_>; 1],
) {
    let mut tc = vec![0.0f32; hd];
    let ins = rows(act, 4, hd)
        .zip(rows(c, 1, hd))
        .zip(rows(dc, 1, hd).zip(rows(dh, 1, hd)));
    for (((a, c), (dc, dh)), dg) in ins.zip(rows_mut(dgates, 3, hd)) {
        crate::rows::copy(&mut tc, c);
        tanh_into(k, &mut tc);
        let [i, o, u, m] = blocks(a, hd);
        let [di, d_o, du] = blocks_mut(dg, hd);
        leaf_bwd_elems_rd(i, o, u, m, &tc, dc, dh, di, d_o, du);
    }
}

#[inline(always)]
pub(crate) fn node_rd_fwd_rows(
    k: &CpuKernels,
    hd: usize,
    [gates, mask, c_l, c_r]: [Rows<'_>; 4],
    [act, c, h]: [RowsMut<'_>; 3],
) {
    let ins = rows(gates, 5, hd)
        .zip(rows(mask, 1, hd))
        .zip(rows(c_l, 1, hd).zip(rows(c_r, 1, hd)));
    let outs = rows_mut(act, 6, hd).zip(cell_outputs(c, h, hd));
    for (((g, m), (cl, cr)), (a, (c, h))) in ins.zip(outs) {
        let (a, am) = a.split_at_mut(5 * hd);
        activate(k, g, hd, 4, a);
        crate::rows::copy(am, m);
        let [i, fl, fr, o, u] = blocks(a, hd);
        node_c_rd(i, u, m, fl, cl, fr, cr, c);
        out_gate(k, o, c, h);
    }
}

#[inline(always)]
pub(crate) fn node_rd_bwd_rows(
    k: &CpuKernels,
    hd: usize,
    ins: [Rows<'_>; 6],
    outs: [RowsMut<'_>; 3],
) {
    let ([act, c_l, c_r, c, dc, dh], [dgates, dc_l, dc_r]) = (ins, outs);
    let mut tc = vec![0.0f32; hd];
    let state = rows(act, 6, hd)
        .zip(rows(c_l, 1, hd).zip(rows(c_r, 1, hd)))
        .zip(rows(c, 1, hd));
    let grads = rows(dc, 1, hd).zip(rows(dh, 1, hd));
    let outs = rows_mut(dgates, 5, hd).zip(rows_mut(dc_l, 1, hd).zip(rows_mut(dc_r, 1, hd)));
    for (((a, (cl, cr)), c), ((dc, dh), (dg, (dcl, dcr)))) in state.zip(grads.zip(outs)) {
        crate::rows::copy(&mut tc, c);
        tanh_into(k, &mut tc);
        let [i, fl, fr, o, u, m] = blocks(a, hd);
        let [di, dfl, dfr, d_o, du] = blocks_mut(dg, hd);
        node_bwd_elems_rd(
            i, fl, fr, o, u, m, &tc, cl, cr, dc, dh, di, dfl, dfr, d_o, du, dcl, dcr,
        );
    }
}

impl CpuKernels {
    /// Tree-LSTM leaf forward with recurrent dropout: `c = s(i) t(u) m`,
    /// `h = s(o) tanh(c)`, for gates `[i, o, u]` (`[b, 3H]`) and the
    /// per-element factors `mask` (`[b, H]`: 0 or `1 / (1 - p)` in training,
    /// 1 in evaluation). `act` is `[b, 4H]`: the activated gates, then `mask`.
    pub fn tree_lstm_leaf_rd_fwd(
        &self,
        gates: &[f32],
        mask: &[f32],
        hidden: usize,
        act: &mut [f32],
        c: &mut [f32],
        h: &mut [f32],
    ) -> Result<()> {
        let ins = [dense("mask", mask, 1), dense("gates", gates, 3)];
        let outs = [
            dense_mut("act", act, 4),
            dense_mut("c", c, 1),
            dense_mut("h", h, 1),
        ];
        run_cell(
            "tree_lstm_leaf_rd_fwd",
            FWD,
            hidden,
            ins,
            outs,
            |[m, g], o| dispatch!(self, leaf_rd_fwd_rows, hidden, [g, m], o),
        )
    }

    /// Backward of [`CpuKernels::tree_lstm_leaf_rd_fwd`] (`act` `[b, 4H]`
    /// as it wrote it): accumulates into `dgates` (`[b, 3H]`).
    pub fn tree_lstm_leaf_rd_bwd(
        &self,
        act: &[f32],
        c: &[f32],
        dc: &[f32],
        dh: &[f32],
        hidden: usize,
        dgates: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("c", c, 1),
            dense("act", act, 4),
            dense("dc", dc, 1),
            dense("dh", dh, 1),
        ];
        run_cell(
            "tree_lstm_leaf_rd_bwd",
            BWD,
            hidden,
            ins,
            [dense_mut("dgates", dgates, 3)],
            |[c, a, dc, dh], o| dispatch!(self, leaf_rd_bwd_rows, hidden, [a, c, dc, dh], o),
        )
    }

    /// Tree-LSTM internal node forward with recurrent dropout:
    /// `c = s(i) t(u) m + s(f_l) c_l + s(f_r) c_r`, `h = s(o) tanh(c)`, for
    /// gates `[i, f_l, f_r, o, u]` (`[b, 5H]`) and `mask` (`[b, H]`, as in
    /// [`CpuKernels::tree_lstm_leaf_rd_fwd`]). `act` is `[b, 6H]`: the
    /// activated gates, then `mask`.
    #[allow(clippy::too_many_arguments)]
    pub fn tree_lstm_node_rd_fwd(
        &self,
        gates: &[f32],
        mask: &[f32],
        c_l: &[f32],
        c_r: &[f32],
        hidden: usize,
        act: &mut [f32],
        c: &mut [f32],
        h: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("c_l", c_l, 1),
            dense("gates", gates, 5),
            dense("mask", mask, 1),
            dense("c_r", c_r, 1),
        ];
        let outs = [
            dense_mut("act", act, 6),
            dense_mut("c", c, 1),
            dense_mut("h", h, 1),
        ];
        run_cell(
            "tree_lstm_node_rd_fwd",
            FWD,
            hidden,
            ins,
            outs,
            |[cl, g, m, cr], o| dispatch!(self, node_rd_fwd_rows, hidden, [g, m, cl, cr], o),
        )
    }

    /// Backward of [`CpuKernels::tree_lstm_node_rd_fwd`] (`act` `[b, 6H]`):
    /// accumulates into `dgates` (`[b, 5H]`), `dc_l` and `dc_r`.
    #[allow(clippy::too_many_arguments)]
    pub fn tree_lstm_node_rd_bwd(
        &self,
        act: &[f32],
        c_l: &[f32],
        c_r: &[f32],
        c: &[f32],
        dc: &[f32],
        dh: &[f32],
        hidden: usize,
        dgates: &mut [f32],
        dc_l: &mut [f32],
        dc_r: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("c_l", c_l, 1),
            dense("act", act, 6),
            dense("c_r", c_r, 1),
            dense("c", c, 1),
            dense("dc", dc, 1),
            dense("dh", dh, 1),
        ];
        let outs = [
            dense_mut("dgates", dgates, 5),
            dense_mut("dc_l", dc_l, 1),
            dense_mut("dc_r", dc_r, 1),
        ];
        run_cell(
            "tree_lstm_node_rd_bwd",
            BWD,
            hidden,
            ins,
            outs,
            |[cl, a, cr, c, dc, dh], o| {
                dispatch!(self, node_rd_bwd_rows, hidden, [a, cl, cr, c, dc, dh], o)
            },
        )
    }
}
