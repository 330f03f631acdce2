//! Fused recurrent cells (LSTM, GRU, Tree-LSTM leaf and node, with and
//! without recurrent dropout), one thread per (row, unit). Argument order
//! and gate layouts are those of `sheaf-kernels-cpu`'s cells.
#![allow(clippy::too_many_arguments)]

use cudarc::driver::{CudaView, CudaViewMut};

use crate::error::{CudaError, Result};
use crate::launch::launch;
use crate::CudaKernels;

type In<'a, 'b> = &'a CudaView<'b, f32>;
type Out<'a, 'b> = &'a mut CudaViewMut<'b, f32>;

/// Checks every `(name, len, k)` argument is `[b, k H]` with b from the
/// first, and returns b.
fn rows(kernel: &'static str, hidden: usize, args: &[(&'static str, usize, usize)]) -> Result<u64> {
    let invalid = |what: String| CudaError::Invalid { kernel, what };
    if hidden == 0 {
        return Err(invalid("hidden must be positive".into()));
    }
    let (arg0, len0, k0) = args[0];
    let width = k0 * hidden;
    if !len0.is_multiple_of(width) {
        return Err(invalid(format!(
            "`{arg0}` has length {len0}, not a multiple of {k0} x hidden = {width}"
        )));
    }
    let b = len0 / width;
    for &(arg, got, k) in args {
        CudaError::check_len(kernel, arg, got, b * k * hidden)?;
    }
    Ok(b as u64)
}

impl CudaKernels {
    /// LSTM forward, gates `[i, f, o, u]`.
    pub fn lstm_fwd(
        &self,
        gates: In,
        c_prev: In,
        hidden: usize,
        act: Out,
        c: Out,
        h: Out,
    ) -> Result<()> {
        let b = rows(
            "lstm_fwd",
            hidden,
            &[
                ("c_prev", c_prev.len(), 1),
                ("gates", gates.len(), 4),
                ("act", act.len(), 4),
                ("c", c.len(), 1),
                ("h", h.len(), 1),
            ],
        )?;
        let (hd, cfg) = (hidden as u64, self.elementwise_config(b as usize * hidden));
        if b == 0 {
            return Ok(());
        }
        launch!(self, "lstm_fwd", cfg, [gates, c_prev, act, c, h, &b, &hd])
    }

    /// LSTM backward (accumulates into `dgates`, `dc_prev`).
    pub fn lstm_bwd(
        &self,
        act: In,
        c_prev: In,
        c: In,
        dc: In,
        dh: In,
        hidden: usize,
        dgates: Out,
        dc_prev: Out,
    ) -> Result<()> {
        let b = rows(
            "lstm_bwd",
            hidden,
            &[
                ("c_prev", c_prev.len(), 1),
                ("act", act.len(), 4),
                ("c", c.len(), 1),
                ("dc", dc.len(), 1),
                ("dh", dh.len(), 1),
                ("dgates", dgates.len(), 4),
                ("dc_prev", dc_prev.len(), 1),
            ],
        )?;
        let (hd, cfg) = (hidden as u64, self.elementwise_config(b as usize * hidden));
        if b == 0 {
            return Ok(());
        }
        launch!(
            self,
            "lstm_bwd",
            cfg,
            [act, c_prev, c, dc, dh, dgates, dc_prev, &b, &hd]
        )
    }

    /// GRU forward, blocks `[r, z, n]`.
    pub fn gru_fwd(
        &self,
        xw: In,
        hu: In,
        h_prev: In,
        hidden: usize,
        act: Out,
        h: Out,
    ) -> Result<()> {
        let b = rows(
            "gru_fwd",
            hidden,
            &[
                ("h_prev", h_prev.len(), 1),
                ("xw", xw.len(), 3),
                ("hu", hu.len(), 3),
                ("act", act.len(), 3),
                ("h", h.len(), 1),
            ],
        )?;
        let (hd, cfg) = (hidden as u64, self.elementwise_config(b as usize * hidden));
        if b == 0 {
            return Ok(());
        }
        launch!(self, "gru_fwd", cfg, [xw, hu, h_prev, act, h, &b, &hd])
    }

    /// GRU backward (accumulates into `dxw`, `dhu`, `dh_prev`).
    pub fn gru_bwd(
        &self,
        act: In,
        hu: In,
        h_prev: In,
        dh: In,
        hidden: usize,
        dxw: Out,
        dhu: Out,
        dh_prev: Out,
    ) -> Result<()> {
        let b = rows(
            "gru_bwd",
            hidden,
            &[
                ("h_prev", h_prev.len(), 1),
                ("act", act.len(), 3),
                ("hu", hu.len(), 3),
                ("dh", dh.len(), 1),
                ("dxw", dxw.len(), 3),
                ("dhu", dhu.len(), 3),
                ("dh_prev", dh_prev.len(), 1),
            ],
        )?;
        let (hd, cfg) = (hidden as u64, self.elementwise_config(b as usize * hidden));
        if b == 0 {
            return Ok(());
        }
        launch!(
            self,
            "gru_bwd",
            cfg,
            [act, hu, h_prev, dh, dxw, dhu, dh_prev, &b, &hd]
        )
    }

    /// Tree-LSTM leaf forward, gates `[i, o, u]`; with `mask`, recurrent
    /// dropout (`act` then has a fourth block holding the mask).
    pub fn tree_lstm_leaf_fwd(
        &self,
        gates: In,
        mask: Option<In>,
        hidden: usize,
        act: Out,
        c: Out,
        h: Out,
    ) -> Result<()> {
        let k_act = if mask.is_some() { 4 } else { 3 };
        let mut args = vec![
            ("c", c.len(), 1),
            ("gates", gates.len(), 3),
            ("act", act.len(), k_act),
            ("h", h.len(), 1),
        ];
        if let Some(m) = mask {
            args.push(("mask", m.len(), 1));
        }
        let b = rows("tree_lstm_leaf_fwd", hidden, &args)?;
        let (hd, cfg) = (hidden as u64, self.elementwise_config(b as usize * hidden));
        if b == 0 {
            return Ok(());
        }
        match mask {
            None => launch!(self, "tree_lstm_leaf_fwd", cfg, [gates, act, c, h, &b, &hd]),
            Some(m) => launch!(
                self,
                "tree_lstm_leaf_rd_fwd",
                cfg,
                [gates, m, act, c, h, &b, &hd]
            ),
        }
    }

    /// Tree-LSTM leaf backward (accumulates into `dgates`); `dropout` says
    /// whether `act` came from the masked forward.
    pub fn tree_lstm_leaf_bwd(
        &self,
        act: In,
        dropout: bool,
        c: In,
        dc: In,
        dh: In,
        hidden: usize,
        dgates: Out,
    ) -> Result<()> {
        let k_act = if dropout { 4 } else { 3 };
        let b = rows(
            "tree_lstm_leaf_bwd",
            hidden,
            &[
                ("c", c.len(), 1),
                ("act", act.len(), k_act),
                ("dc", dc.len(), 1),
                ("dh", dh.len(), 1),
                ("dgates", dgates.len(), 3),
            ],
        )?;
        let (hd, cfg) = (hidden as u64, self.elementwise_config(b as usize * hidden));
        if b == 0 {
            return Ok(());
        }
        if dropout {
            launch!(
                self,
                "tree_lstm_leaf_rd_bwd",
                cfg,
                [act, c, dc, dh, dgates, &b, &hd]
            )
        } else {
            launch!(
                self,
                "tree_lstm_leaf_bwd",
                cfg,
                [act, c, dc, dh, dgates, &b, &hd]
            )
        }
    }

    /// Tree-LSTM node forward, gates `[i, f_l, f_r, o, u]`; with `mask`,
    /// recurrent dropout (`act` then has a sixth block holding the mask).
    pub fn tree_lstm_node_fwd(
        &self,
        gates: In,
        mask: Option<In>,
        c_l: In,
        c_r: In,
        hidden: usize,
        act: Out,
        c: Out,
        h: Out,
    ) -> Result<()> {
        let k_act = if mask.is_some() { 6 } else { 5 };
        let mut args = vec![
            ("c_l", c_l.len(), 1),
            ("gates", gates.len(), 5),
            ("c_r", c_r.len(), 1),
            ("act", act.len(), k_act),
            ("c", c.len(), 1),
            ("h", h.len(), 1),
        ];
        if let Some(m) = mask {
            args.push(("mask", m.len(), 1));
        }
        let b = rows("tree_lstm_node_fwd", hidden, &args)?;
        let (hd, cfg) = (hidden as u64, self.elementwise_config(b as usize * hidden));
        if b == 0 {
            return Ok(());
        }
        match mask {
            None => launch!(
                self,
                "tree_lstm_node_fwd",
                cfg,
                [gates, c_l, c_r, act, c, h, &b, &hd]
            ),
            Some(m) => launch!(
                self,
                "tree_lstm_node_rd_fwd",
                cfg,
                [gates, m, c_l, c_r, act, c, h, &b, &hd]
            ),
        }
    }

    /// Tree-LSTM node backward (accumulates into `dgates`, `dc_l`, `dc_r`).
    pub fn tree_lstm_node_bwd(
        &self,
        act: In,
        dropout: bool,
        c_l: In,
        c_r: In,
        c: In,
        dc: In,
        dh: In,
        hidden: usize,
        dgates: Out,
        dc_l: Out,
        dc_r: Out,
    ) -> Result<()> {
        let k_act = if dropout { 6 } else { 5 };
        let b = rows(
            "tree_lstm_node_bwd",
            hidden,
            &[
                ("c_l", c_l.len(), 1),
                ("act", act.len(), k_act),
                ("c_r", c_r.len(), 1),
                ("c", c.len(), 1),
                ("dc", dc.len(), 1),
                ("dh", dh.len(), 1),
                ("dgates", dgates.len(), 5),
                ("dc_l", dc_l.len(), 1),
                ("dc_r", dc_r.len(), 1),
            ],
        )?;
        let (hd, cfg) = (hidden as u64, self.elementwise_config(b as usize * hidden));
        if b == 0 {
            return Ok(());
        }
        if dropout {
            launch!(
                self,
                "tree_lstm_node_rd_bwd",
                cfg,
                [act, c_l, c_r, c, dc, dh, dgates, dc_l, dc_r, &b, &hd]
            )
        } else {
            launch!(
                self,
                "tree_lstm_node_bwd",
                cfg,
                [act, c_l, c_r, c, dc, dh, dgates, dc_l, dc_r, &b, &hd]
            )
        }
    }
}
