//! Fused recurrent cells: LSTM, GRU and Tree-LSTM (leaf and binary node),
//! forward and backward, each one kernel over a batch of rows.
//!
//! Arities mirror the kernel contract one to one, hence
//! `clippy::too_many_arguments` is allowed.
#![allow(clippy::too_many_arguments)]

use crate::error::Result;
use crate::{Tensor, TensorMut};

/// Fused recurrent cells: LSTM, GRU and Tree-LSTM (leaf and binary node),
/// forward and backward, each one kernel over a batch of rows.
///
/// Rank-2 tensors, `b` rows. Gate tensors are `[b, k * H]`, the k gate
/// blocks side by side in the order given; `act` holds the ACTIVATED gates,
/// written by forward and read by backward; gradient outputs accumulate.
///
/// Part of [`super::Backend`], whose documentation states the contracts
/// shared by every method.
pub trait CellOps {
    /// LSTM step ("lstm_fwd"), gates `[i, f, o, u]` (`[b, 4H]`), `c_prev`
    /// `[b, H]`: `c = s(i) t(u) + s(f) c_prev`, `h = s(o) tanh(c)`;
    /// `act` `[b, 4H]`, `c` and `h` `[b, H]`.
    fn lstm_fwd(
        &self,
        gates: &Tensor,
        c_prev: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()>;

    /// LSTM backward ("lstm_bwd"): from `dc`, `dh` (gradients at the outputs
    /// `c`, `h`) into `dgates` `[b, 4H]` and `dc_prev` `[b, H]`.
    fn lstm_bwd(
        &self,
        act: &Tensor,
        c_prev: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
        dc_prev: TensorMut<'_>,
    ) -> Result<()>;

    /// GRU step, PyTorch convention ("gru_fwd"): `xw = W x + b_w` and
    /// `hu = U h_prev + b_u`, both `[b, 3H]` in order `[r, z, n]`;
    /// `r = s(xw_r + hu_r)`, `z = s(xw_z + hu_z)`, `n = tanh(xw_n + r hu_n)`,
    /// `h = (1 - z) n + z h_prev`; `act` `[b, 3H]`, `h` `[b, H]`.
    fn gru_fwd(
        &self,
        xw: &Tensor,
        hu: &Tensor,
        h_prev: &Tensor,
        act: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()>;

    /// GRU backward ("gru_bwd"): from `dh` into `dxw`, `dhu` `[b, 3H]` and
    /// `dh_prev` `[b, H]`.
    fn gru_bwd(
        &self,
        act: &Tensor,
        hu: &Tensor,
        h_prev: &Tensor,
        dh: &Tensor,
        dxw: TensorMut<'_>,
        dhu: TensorMut<'_>,
        dh_prev: TensorMut<'_>,
    ) -> Result<()>;

    /// Tree-LSTM leaf ("tree_lstm_leaf_fwd"), gates `[i, o, u]` (`[b, 3H]`):
    /// `c = s(i) t(u)`, `h = s(o) tanh(c)`; `act` `[b, 3H]`, `c`, `h` `[b, H]`
    /// (`H` is read from `c`).
    fn tree_lstm_leaf_fwd(
        &self,
        gates: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()>;

    /// Tree-LSTM leaf backward ("tree_lstm_leaf_bwd") into `dgates` `[b, 3H]`.
    fn tree_lstm_leaf_bwd(
        &self,
        act: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()>;

    /// Tree-LSTM internal node ("tree_lstm_node_fwd"), gates
    /// `[i, f_l, f_r, o, u]` (`[b, 5H]`), children's cells `c_l`, `c_r`
    /// `[b, H]`: `c = s(i) t(u) + s(f_l) c_l + s(f_r) c_r`, `h = s(o) tanh(c)`;
    /// `act` `[b, 5H]`, `c`, `h` `[b, H]`.
    fn tree_lstm_node_fwd(
        &self,
        gates: &Tensor,
        c_l: &Tensor,
        c_r: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()>;

    /// Tree-LSTM internal node backward ("tree_lstm_node_bwd") into `dgates`
    /// `[b, 5H]`, `dc_l` and `dc_r` `[b, H]`.
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
    ) -> Result<()>;

    /// Tree-LSTM leaf with recurrent dropout ("tree_lstm_leaf_rd_fwd"):
    /// `c = s(i) t(u) mask`, `h = s(o) tanh(c)`, `mask` `[b, H]` (0 or
    /// `1 / (1 - p)` in training, 1 in evaluation); `act` `[b, 4H]` receives
    /// the activated gates, then `mask` (backward reads it there).
    fn tree_lstm_leaf_rd_fwd(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()>;

    /// Backward of [`CellOps::tree_lstm_leaf_rd_fwd`]
    /// ("tree_lstm_leaf_rd_bwd"), `act` `[b, 4H]`, into `dgates` `[b, 3H]`.
    fn tree_lstm_leaf_rd_bwd(
        &self,
        act: &Tensor,
        c: &Tensor,
        dc: &Tensor,
        dh: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()>;

    /// Tree-LSTM internal node with recurrent dropout
    /// ("tree_lstm_node_rd_fwd"): `c = s(i) t(u) mask + s(f_l) c_l +
    /// s(f_r) c_r`, `h = s(o) tanh(c)`; `mask` as in
    /// [`CellOps::tree_lstm_leaf_rd_fwd`], `act` `[b, 6H]`.
    #[allow(clippy::too_many_arguments)]
    fn tree_lstm_node_rd_fwd(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        c_l: &Tensor,
        c_r: &Tensor,
        act: TensorMut<'_>,
        c: TensorMut<'_>,
        h: TensorMut<'_>,
    ) -> Result<()>;

    /// Backward of [`CellOps::tree_lstm_node_rd_fwd`]
    /// ("tree_lstm_node_rd_bwd"), `act` `[b, 6H]`, into `dgates` `[b, 5H]`,
    /// `dc_l` and `dc_r`.
    #[allow(clippy::too_many_arguments)]
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
    ) -> Result<()>;
}
