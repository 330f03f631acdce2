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

use sheaf_tensor::{Backend, DType, Shape, Tensor, TensorError, Transpose};

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
        let name = self.name();
        let [x] = cx.args else {
            return Err(bad_args(name));
        };
        let (t_len, w) = steps(name, x)?;
        let b = cx.data.len();
        let be = cx.backend;
        if b * t_len * w == 0 {
            // No elements: only a sum has an output (of zeros).
            return match self {
                Seq::Sum => be.fill(0.0, cx.out),
                _ => Ok(()),
            };
        }
        let rows = x.reshape([b * t_len, w])?;
        let lens = lengths(cx.data, t_len);
        match self {
            Seq::Last => {
                let idx = index(
                    be,
                    lens.iter()
                        .enumerate()
                        .map(|(r, &l)| r * t_len + l.max(1) - 1),
                )?;
                be.gather_rows(&rows, &idx, cx.out.reshape([b, w])?)
            }
            Seq::Reverse => {
                let idx = index(be, self.sources(&lens, t_len).map(|s| s.unwrap_or(0)))?;
                be.gather_rows(&rows, &idx, cx.out.reshape([b * t_len, w])?)
            }
            Seq::Mask => {
                let fill = f32::from_bits(cx.attr as u32);
                let mut out = cx.out.reshape([b * t_len, w])?;
                be.copy_rows(&rows, 0, out.reborrow(), 0, b * t_len)?;
                // Each instance's padding is one run of rows.
                for (r, &l) in lens.iter().enumerate().filter(|(_, &l)| l < t_len) {
                    be.fill(fill, out.rows_mut(r * t_len + l..(r + 1) * t_len)?)?;
                }
                Ok(())
            }
            Seq::Sum => {
                // The valid rows only (padding may hold anything, inf and
                // NaN included): their sums, then added per instance.
                let (valid, owner) = valid_rows(be, &lens, t_len)?;
                let n = valid.num_rows();
                let mut picked = Tensor::zeros([n, w], DType::F32, be.device())?;
                be.gather_rows(&rows, &valid, picked.view_mut()?)?;
                let mut sums = Tensor::zeros([n, 1], DType::F32, be.device())?;
                be.row_sums(&picked, sums.view_mut()?.reshape([n])?)?;
                let mut out = cx.out.reshape([b, 1])?;
                be.fill(0.0, out.reborrow())?;
                be.scatter_add_rows(&sums, &owner, out)
            }
        }
    }

    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let name = self.name();
        let [x] = cx.args else {
            return Err(bad_args(name));
        };
        let (t_len, w) = steps(name, x)?;
        let b = cx.data.len();
        let be = cx.backend;
        let Some(Some(dx)) = cx.dargs.first_mut() else {
            return Ok(());
        };
        if b * t_len * w == 0 {
            return Ok(());
        }
        let dx = dx.reborrow().reshape([b * t_len, w])?;
        let lens = lengths(cx.data, t_len);
        match self {
            Seq::Last => {
                let idx = index(
                    be,
                    lens.iter()
                        .enumerate()
                        .map(|(r, &l)| r * t_len + l.max(1) - 1),
                )?;
                be.scatter_add_rows(&cx.dout.reshape([b, w])?, &idx, dx)
            }
            Seq::Reverse => {
                let idx = index(be, self.sources(&lens, t_len).map(|s| s.unwrap_or(0)))?;
                be.scatter_add_rows(&cx.dout.reshape([b * t_len, w])?, &idx, dx)
            }
            Seq::Mask => {
                // The valid rows' gradients, gathered and added back.
                let (valid, _) = valid_rows(be, &lens, t_len)?;
                let n = valid.num_rows();
                let mut g = Tensor::zeros([n, w], DType::F32, be.device())?;
                be.gather_rows(&cx.dout.reshape([b * t_len, w])?, &valid, g.view_mut()?)?;
                be.scatter_add_rows(&g, &valid, dx)
            }
            Seq::Sum => {
                // dx[r, t, :] += dy[r] for t < len: dy of each valid row's
                // instance, spread over the row by a rank-1 product.
                let (valid, owner) = valid_rows(be, &lens, t_len)?;
                let n = valid.num_rows();
                let mut g = Tensor::zeros([n, 1], DType::F32, be.device())?;
                be.gather_rows(&cx.dout.reshape([b, 1])?, &owner, g.view_mut()?)?;
                let ones = Tensor::full_f32(1.0, [1, w], be.device())?;
                let mut spread = Tensor::zeros([n, w], DType::F32, be.device())?;
                be.matmul(
                    &g,
                    Transpose::No,
                    &ones,
                    Transpose::No,
                    1.0,
                    0.0,
                    spread.view_mut()?,
                )?;
                be.scatter_add_rows(&spread, &valid, dx)
            }
        }
    }
}

impl Seq {
    /// Source row (within the batch) of every output row, `None` for a
    /// masked one.
    fn sources<'a>(
        &'a self,
        lens: &'a [usize],
        t_len: usize,
    ) -> impl Iterator<Item = Option<usize>> + 'a {
        lens.iter().enumerate().flat_map(move |(r, &l)| {
            (0..t_len).map(move |t| source(self, t, l).map(|s| r * t_len + s))
        })
    }
}

/// The instances' lengths, clamped to `T`.
fn lengths(data: &[u32], t_len: usize) -> Vec<usize> {
    data.iter().map(|&l| (l as usize).min(t_len)).collect()
}

/// A row index tensor on the backend's device.
fn index(be: &dyn Backend, rows: impl Iterator<Item = usize>) -> sheaf_tensor::Result<Tensor> {
    let idx = rows
        .map(|i| {
            u32::try_from(i).map_err(|_| TensorError::InvalidArgument {
                op: "sequence",
                arg: "batch",
                reason: "has more rows than u32 indices address",
            })
        })
        .collect::<sheaf_tensor::Result<Vec<u32>>>()?;
    let n = idx.len();
    Tensor::from_vec(idx, [n])?.to_device(be.device())
}

/// The rows within each instance's length (indices into the batch's
/// `[b T]` rows) and the instance of each.
fn valid_rows(
    be: &dyn Backend,
    lens: &[usize],
    t_len: usize,
) -> sheaf_tensor::Result<(Tensor, Tensor)> {
    let rows = lens
        .iter()
        .enumerate()
        .flat_map(|(r, &l)| (0..l).map(move |t| r * t_len + t));
    let owners = lens
        .iter()
        .enumerate()
        .flat_map(|(r, &l)| std::iter::repeat_n(r, l));
    Ok((index(be, rows)?, index(be, owners)?))
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
