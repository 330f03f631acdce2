//! The fused cells on batches of cell STATES, the layout in which a graph
//! stores a cell's output: `[b, 2H]`, each row `[c | h]`.
//!
//! [`CellOps`] takes `c` and `h` as separate `[b, H]` blocks. Every method
//! here has a default built on them: it copies the halves it reads out of
//! the states (one `copy_cols` each, none for a batch of one, which is a
//! view) and the halves it writes back in. A backend whose kernels read
//! and write rows at a pitch overrides them and copies nothing (the CPU
//! backend does).
//!
//! Arities mirror the kernel contract, hence `clippy::too_many_arguments`.
#![allow(clippy::too_many_arguments)]

use super::{CellOps, RowOps};
use crate::error::Result;
use crate::{DType, Tensor, TensorMut};

/// Which half of a state row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Half {
    C = 0,
    H = 1,
}

/// `H` of a batch of states `[b, 2H]`.
fn hidden(states: &TensorMut<'_>) -> usize {
    states.row_len() / 2
}

/// Half `which` of the states `[b, 2H]`, as `[b, H]`: a view when
/// `b == 1`, else its column block copied out.
fn half<B: RowOps + ?Sized>(be: &B, states: &Tensor, h: usize, which: Half) -> Result<Tensor> {
    let b = states.num_rows();
    let w = which as usize;
    if b == 1 {
        return states.reshape([2, h])?.rows(w..w + 1);
    }
    let mut out = Tensor::zeros([b, h], DType::F32, states.device())?;
    be.copy_cols(
        &states.reshape([b, 2 * h])?,
        w * h,
        out.view_mut()?,
        0,
        h,
        false,
    )?;
    Ok(out)
}

/// Runs `f(c, h)` whose outputs are the halves of `states` `[b, 2H]`:
/// straight into `states` when `b == 1`, else into `[b, H]` buffers
/// copied in afterwards.
fn write_states<B: RowOps + ?Sized>(
    be: &B,
    states: TensorMut<'_>,
    h: usize,
    f: impl FnOnce(TensorMut<'_>, TensorMut<'_>) -> Result<()>,
) -> Result<()> {
    let b = states.num_rows();
    let device = states.device();
    let pairs = states.reshape([2 * b, h])?;
    if b == 1 {
        let (c, hh) = pairs.into_split_rows(1)?;
        return f(c, hh);
    }
    let mut c = Tensor::zeros([b, h], DType::F32, device)?;
    let mut hh = Tensor::zeros([b, h], DType::F32, device)?;
    f(c.view_mut()?, hh.view_mut()?)?;
    let mut states = pairs.reshape([b, 2 * h])?;
    be.copy_cols(&c, 0, states.reborrow(), 0, h, false)?;
    be.copy_cols(&hh, 0, states, h, h, false)
}

/// Where a backward kernel accumulates the `c` half of a state's gradient:
/// a view into it (`b == 1`), or a zeroed `[b, H]` buffer added into it
/// afterwards (also the stand-in for a state that needs no gradient).
enum Sink<'a> {
    View(TensorMut<'a>),
    Buffer(Tensor),
}

impl<'a> Sink<'a> {
    fn new(dstates: Option<&'a mut TensorMut<'_>>, like: &Tensor, h: usize) -> Result<Sink<'a>> {
        let b = like.num_rows();
        match dstates {
            Some(d) if b == 1 => Ok(Sink::View(
                d.reborrow().reshape([2, h])?.into_rows_mut(0..1)?,
            )),
            _ => Ok(Sink::Buffer(Tensor::zeros(
                [b, h],
                DType::F32,
                like.device(),
            )?)),
        }
    }

    fn view(&mut self) -> Result<TensorMut<'_>> {
        match self {
            Sink::View(v) => Ok(v.reborrow()),
            Sink::Buffer(t) => t.view_mut(),
        }
    }

    /// The buffer still to be added into the state's gradient, if any
    /// (ends the borrow of the gradient).
    fn into_buffer(self) -> Option<Tensor> {
        match self {
            Sink::View(_) => None,
            Sink::Buffer(t) => Some(t),
        }
    }
}

/// Finishes a [`Sink`]: a buffer is added into the `c` half of `dstates`.
fn drain<B: RowOps + ?Sized>(
    be: &B,
    buffer: Option<Tensor>,
    dstates: Option<&mut TensorMut<'_>>,
    h: usize,
) -> Result<()> {
    match (buffer, dstates) {
        (Some(t), Some(d)) => {
            let b = t.num_rows();
            let d = d.reborrow().reshape([b, 2 * h])?;
            be.copy_cols(&t, 0, d, 0, h, true)
        }
        _ => Ok(()),
    }
}

/// The cells of [`CellOps`] on batches of states `[b, 2H]` (rows
/// `[c | h]`): forward reads the previous `c` halves and writes the new
/// states; backward reads `c`, and `dc` / `dh` from the states' gradient
/// `dstates`, and ACCUMULATES into `dgates` and the `c` half of each
/// earlier state's gradient (its `h` half gets nothing: `h` reaches the
/// next cell only through the gates). A state gradient given as `None`
/// needs none. `H` is half the row length of `states`; `act` is as in the
/// [`CellOps`] method of the same name without `_states`.
///
/// Part of [`super::Backend`]; defaults copy the halves (see the module
/// documentation).
pub trait StateCellOps: CellOps + RowOps {
    /// [`CellOps::lstm_fwd`] on states ("lstm_fwd"): `prev`, `states`
    /// `[b, 2H]`.
    fn lstm_fwd_states(
        &self,
        gates: &Tensor,
        prev: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        let h = hidden(&states);
        let c_prev = half(self, prev, h, Half::C)?;
        write_states(self, states, h, |c, hh| {
            self.lstm_fwd(gates, &c_prev, act, c, hh)
        })
    }

    /// [`CellOps::lstm_bwd`] on states ("lstm_bwd").
    fn lstm_bwd_states(
        &self,
        act: &Tensor,
        prev: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        mut dprev: Option<TensorMut<'_>>,
    ) -> Result<()> {
        let h = states.row_len() / 2;
        let c_prev = half(self, prev, h, Half::C)?;
        let c = half(self, states, h, Half::C)?;
        let dc = half(self, dstates, h, Half::C)?;
        let dh = half(self, dstates, h, Half::H)?;
        let mut sink = Sink::new(dprev.as_mut(), prev, h)?;
        self.lstm_bwd(act, &c_prev, &c, &dc, &dh, dgates, sink.view()?)?;
        drain(self, sink.into_buffer(), dprev.as_mut(), h)
    }

    /// [`CellOps::tree_lstm_leaf_fwd`] writing `states` `[b, 2H]`
    /// ("tree_lstm_leaf_fwd").
    fn tree_lstm_leaf_fwd_states(
        &self,
        gates: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        let h = hidden(&states);
        write_states(self, states, h, |c, hh| {
            self.tree_lstm_leaf_fwd(gates, act, c, hh)
        })
    }

    /// [`CellOps::tree_lstm_leaf_bwd`] on states ("tree_lstm_leaf_bwd").
    fn tree_lstm_leaf_bwd_states(
        &self,
        act: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()> {
        let h = states.row_len() / 2;
        let c = half(self, states, h, Half::C)?;
        let dc = half(self, dstates, h, Half::C)?;
        let dh = half(self, dstates, h, Half::H)?;
        self.tree_lstm_leaf_bwd(act, &c, &dc, &dh, dgates)
    }

    /// [`CellOps::tree_lstm_node_fwd`] on states ("tree_lstm_node_fwd"):
    /// the children's `left`, `right` and `states` are `[b, 2H]`.
    fn tree_lstm_node_fwd_states(
        &self,
        gates: &Tensor,
        left: &Tensor,
        right: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        let h = hidden(&states);
        let c_l = half(self, left, h, Half::C)?;
        let c_r = half(self, right, h, Half::C)?;
        write_states(self, states, h, |c, hh| {
            self.tree_lstm_node_fwd(gates, &c_l, &c_r, act, c, hh)
        })
    }

    /// [`CellOps::tree_lstm_node_bwd`] on states ("tree_lstm_node_bwd").
    fn tree_lstm_node_bwd_states(
        &self,
        act: &Tensor,
        left: &Tensor,
        right: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        mut dleft: Option<TensorMut<'_>>,
        mut dright: Option<TensorMut<'_>>,
    ) -> Result<()> {
        let h = states.row_len() / 2;
        let c_l = half(self, left, h, Half::C)?;
        let c_r = half(self, right, h, Half::C)?;
        let c = half(self, states, h, Half::C)?;
        let dc = half(self, dstates, h, Half::C)?;
        let dh = half(self, dstates, h, Half::H)?;
        let mut sl = Sink::new(dleft.as_mut(), left, h)?;
        let mut sr = Sink::new(dright.as_mut(), right, h)?;
        self.tree_lstm_node_bwd(
            act,
            &c_l,
            &c_r,
            &c,
            &dc,
            &dh,
            dgates,
            sl.view()?,
            sr.view()?,
        )?;
        drain(self, sl.into_buffer(), dleft.as_mut(), h)?;
        drain(self, sr.into_buffer(), dright.as_mut(), h)
    }

    /// [`CellOps::tree_lstm_leaf_rd_fwd`] writing `states` `[b, 2H]`
    /// ("tree_lstm_leaf_rd_fwd").
    fn tree_lstm_leaf_rd_fwd_states(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        let h = hidden(&states);
        write_states(self, states, h, |c, hh| {
            self.tree_lstm_leaf_rd_fwd(gates, mask, act, c, hh)
        })
    }

    /// [`CellOps::tree_lstm_leaf_rd_bwd`] on states
    /// ("tree_lstm_leaf_rd_bwd").
    fn tree_lstm_leaf_rd_bwd_states(
        &self,
        act: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
    ) -> Result<()> {
        let h = states.row_len() / 2;
        let c = half(self, states, h, Half::C)?;
        let dc = half(self, dstates, h, Half::C)?;
        let dh = half(self, dstates, h, Half::H)?;
        self.tree_lstm_leaf_rd_bwd(act, &c, &dc, &dh, dgates)
    }

    /// [`CellOps::tree_lstm_node_rd_fwd`] on states
    /// ("tree_lstm_node_rd_fwd").
    fn tree_lstm_node_rd_fwd_states(
        &self,
        gates: &Tensor,
        mask: &Tensor,
        left: &Tensor,
        right: &Tensor,
        act: TensorMut<'_>,
        states: TensorMut<'_>,
    ) -> Result<()> {
        let h = hidden(&states);
        let c_l = half(self, left, h, Half::C)?;
        let c_r = half(self, right, h, Half::C)?;
        write_states(self, states, h, |c, hh| {
            self.tree_lstm_node_rd_fwd(gates, mask, &c_l, &c_r, act, c, hh)
        })
    }

    /// [`CellOps::tree_lstm_node_rd_bwd`] on states
    /// ("tree_lstm_node_rd_bwd").
    fn tree_lstm_node_rd_bwd_states(
        &self,
        act: &Tensor,
        left: &Tensor,
        right: &Tensor,
        states: &Tensor,
        dstates: &Tensor,
        dgates: TensorMut<'_>,
        mut dleft: Option<TensorMut<'_>>,
        mut dright: Option<TensorMut<'_>>,
    ) -> Result<()> {
        let h = states.row_len() / 2;
        let c_l = half(self, left, h, Half::C)?;
        let c_r = half(self, right, h, Half::C)?;
        let c = half(self, states, h, Half::C)?;
        let dc = half(self, dstates, h, Half::C)?;
        let dh = half(self, dstates, h, Half::H)?;
        let mut sl = Sink::new(dleft.as_mut(), left, h)?;
        let mut sr = Sink::new(dright.as_mut(), right, h)?;
        self.tree_lstm_node_rd_bwd(
            act,
            &c_l,
            &c_r,
            &c,
            &dc,
            &dh,
            dgates,
            sl.view()?,
            sr.view()?,
        )?;
        drain(self, sl.into_buffer(), dleft.as_mut(), h)?;
        drain(self, sr.into_buffer(), dright.as_mut(), h)
    }
}
