//! Padding-invariant sequence ops (MXNet's `SequenceLast` / `SequenceMask`
//! / `SequenceReverse`, Wolfram's masked sequence layers): each takes a
//! sequence `x` `[T, ...]` (time first) and the instance's TRUE length, and
//! gives the result the unpadded sequence would give, whatever the padded
//! rows `len..T` hold. Gradients never reach the padded rows.
//!
//! The length is per-instance *data* (the node's `data` field), not an
//! argument and not part of the signature: sequences of one padded length
//! `T` but different true lengths must share ONE kernel call (that is what
//! a bucket is), and an integer length as a float tensor would need a
//! gradient rule and a rounding convention it has no use for. Lengths are
//! checked against `T` when the node is added.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, Tensor, TensorError};

use crate::error::{GraphError, Result};
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

static LAST: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Seq::Last));
static MASK: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Seq::Mask));
static REVERSE: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Seq::Reverse));
static SUM: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Seq::Sum));

/// The four sequence ops; they share the `[b, T, w]` walk over the batch.
pub(crate) enum Seq {
    /// `x[len - 1]`, `[...]`.
    Last,
    /// `x` with rows `len..T` set to the attribute's `f32`.
    Mask,
    /// `x` with rows `0..len` reversed, padding left in place.
    Reverse,
    /// The sum of all elements of rows `0..len`, `[1]` (a masked loss).
    Sum,
}

fn bad_args(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "args",
        reason: "do not have the shapes the node was built with",
    }
}

/// `(T, w)`: steps and elements per step of a stacked `[b, T, ...]` input.
fn steps(op: &'static str, x: &Tensor) -> sheaf_tensor::Result<(usize, usize)> {
    let shape = x.shape();
    let t = shape.dim(1).ok_or_else(|| bad_args(op))?;
    let w = x.row_len().checked_div(t).unwrap_or(0);
    Ok((t, w))
}

/// Where row `t` of an instance reads its value from (reverse), or `None`
/// when it holds the mask value (mask, past the length).
fn source(op: &Seq, t: usize, len: usize) -> Option<usize> {
    match op {
        Seq::Reverse if t < len => Some(len - 1 - t),
        Seq::Mask if t >= len => None,
        _ => Some(t),
    }
}

impl Op for Seq {
    fn name(&self) -> &'static str {
        match self {
            Seq::Last => "sequence_last",
            Seq::Mask => "sequence_mask",
            Seq::Reverse => "sequence_reverse",
            Seq::Sum => "sequence_sum",
        }
    }

    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        let [x] = args else {
            return Err(ShapeError::expected("one sequence [T, ...]"));
        };
        match self {
            Seq::Last if x.rank() >= 2 && x.dims()[0] > 0 => Shape::new(&x.dims()[1..])
                .map_err(|_| ShapeError::expected("a sequence [T, ...] with T >= 1")),
            Seq::Last => Err(ShapeError::expected(
                "a sequence [T, ...] of rank >= 2 with T >= 1",
            )),
            Seq::Mask | Seq::Reverse if x.rank() >= 1 => Ok(*x),
            Seq::Sum if x.rank() >= 1 => Ok(Shape::from([1])),
            _ => Err(ShapeError::expected("a sequence [T, ...] of rank >= 1")),
        }
    }

    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        if super::host::needed(cx.backend) {
            return super::host::forward(self, cx);
        }
        let name = self.name();
        let [x] = cx.args else {
            return Err(bad_args(name));
        };
        let (t_len, w) = steps(name, x)?;
        let xs = x.as_slice::<f32>()?;
        let out = cx.out.into_mut_slice::<f32>()?;
        let b = cx.data.len();
        if xs.len() != b * t_len * w {
            return Err(bad_args(name));
        }
        let fill = f32::from_bits(cx.attr as u32);
        for (r, &len) in cx.data.iter().enumerate() {
            let len = (len as usize).min(t_len);
            let xr = &xs[r * t_len * w..(r + 1) * t_len * w];
            match self {
                Seq::Last => {
                    let dst = out
                        .get_mut(r * w..(r + 1) * w)
                        .ok_or_else(|| bad_args(name))?;
                    let start = len.saturating_sub(1) * w;
                    dst.copy_from_slice(&xr[start..start + w]);
                }
                Seq::Sum => {
                    let dst = out.get_mut(r).ok_or_else(|| bad_args(name))?;
                    *dst = xr[..len * w].iter().sum();
                }
                Seq::Mask | Seq::Reverse => {
                    let or = out
                        .get_mut(r * t_len * w..(r + 1) * t_len * w)
                        .ok_or_else(|| bad_args(name))?;
                    for (t, dst) in or.chunks_exact_mut(w.max(1)).enumerate() {
                        match source(self, t, len) {
                            Some(s) => dst.copy_from_slice(&xr[s * w..(s + 1) * w]),
                            None => dst.fill(fill),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        if super::host::needed(cx.backend) {
            return super::host::backward(self, cx);
        }
        let name = self.name();
        let [x] = cx.args else {
            return Err(bad_args(name));
        };
        let (t_len, w) = steps(name, x)?;
        let dy = cx.dout.as_slice::<f32>()?;
        let Some(Some(dx)) = cx.dargs.first_mut() else {
            return Ok(());
        };
        let dx = dx.as_mut_slice::<f32>()?;
        if dx.len() != cx.data.len() * t_len * w {
            return Err(bad_args(name));
        }
        for (r, &len) in cx.data.iter().enumerate() {
            let len = (len as usize).min(t_len);
            let dxr = &mut dx[r * t_len * w..(r + 1) * t_len * w];
            match self {
                Seq::Last => {
                    if len == 0 {
                        continue;
                    }
                    let g = dy.get(r * w..(r + 1) * w).ok_or_else(|| bad_args(name))?;
                    let dst = &mut dxr[(len - 1) * w..len * w];
                    dst.iter_mut().zip(g).for_each(|(d, v)| *d += v);
                }
                Seq::Sum => {
                    let g = *dy.get(r).ok_or_else(|| bad_args(name))?;
                    dxr[..len * w].iter_mut().for_each(|d| *d += g);
                }
                Seq::Mask | Seq::Reverse => {
                    let gr = dy
                        .get(r * t_len * w..(r + 1) * t_len * w)
                        .ok_or_else(|| bad_args(name))?;
                    for (t, g) in gr.chunks_exact(w.max(1)).enumerate() {
                        if let Some(s) = source(self, t, len) {
                            let dst = &mut dxr[s * w..(s + 1) * w];
                            dst.iter_mut().zip(g).for_each(|(d, v)| *d += v);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Sequence ops. Each checks the shape and the length when called and
/// computes nothing. `x` is `[T, ...]`, time first; `len` is the number of
/// valid leading rows. Nodes share a batch whatever their lengths.
impl Graph {
    /// Checks `len` against the sequence's `T` and adds the node.
    fn sequence_op(
        &mut self,
        op: &Arc<dyn Op>,
        x: Expr,
        len: usize,
        attr: Attr,
        min_len: usize,
    ) -> Result<Expr> {
        let name = op.name();
        let node = self.check(x, name)?;
        let shape = self.node(node).shape();
        let t = shape.dim(0).unwrap_or(0);
        if shape.rank() >= 1 && (len > t || len < min_len) {
            return Err(GraphError::Data {
                op: name,
                what: format!(
                    "length {len} is outside {min_len}..={t} for a sequence of shape {shape}"
                ),
            });
        }
        let data = u32::try_from(len).map_err(|_| GraphError::Data {
            op: name,
            what: format!("length {len} does not fit in u32"),
        })?;
        self.apply_with_data(op, &[x], attr, data)
    }

    /// The last valid row `x[len - 1]` of a sequence `[T, ...]`, shaped
    /// `[...]`: the final state of a recurrence run over padded steps.
    ///
    /// Errors: `x` is not of rank >= 2 or has `T = 0`
    /// ([`GraphError::Shape`]); `len` is 0 or above `T`
    /// ([`GraphError::Data`]: an empty sequence has no last element).
    pub fn sequence_last(&mut self, x: Expr, len: usize) -> Result<Expr> {
        self.sequence_op(&LAST, x, len, 0, 1)
    }

    /// `x` `[T, ...]` with the rows `len..T` replaced by `value` (0 for
    /// sums, a large negative number before a max or a softmax). `len = 0`
    /// masks every row.
    ///
    /// Errors: `x` is a scalar shape ([`GraphError::Shape`]); `len` is
    /// above `T` ([`GraphError::Data`]).
    pub fn sequence_mask(&mut self, x: Expr, len: usize, value: f32) -> Result<Expr> {
        self.sequence_op(&MASK, x, len, u64::from(value.to_bits()), 0)
    }

    /// `x` `[T, ...]` with its first `len` rows in reverse order and the
    /// padding rows left where they are, so a backward RNN direction reads
    /// the valid steps last-to-first and then the padding. `len = 0` is the
    /// identity.
    ///
    /// Errors: as [`Graph::sequence_mask`].
    pub fn sequence_reverse(&mut self, x: Expr, len: usize) -> Result<Expr> {
        self.sequence_op(&REVERSE, x, len, 0, 0)
    }

    /// The sum of all elements of the first `len` rows of `x` `[T, ...]`,
    /// `[1]`: a masked loss over per-step losses stacked as `[T]` or
    /// `[T, 1]`. `len = 0` gives 0.
    ///
    /// Errors: as [`Graph::sequence_mask`].
    pub fn sequence_sum(&mut self, x: Expr, len: usize) -> Result<Expr> {
        self.sequence_op(&SUM, x, len, 0, 0)
    }
}
