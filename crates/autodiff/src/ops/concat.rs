//! Concatenation of vectors and slices of a vector. Every argument is
//! stacked; a batch moves each argument's column block with one
//! `copy_cols` (the same copy per row as for one instance), so it equals
//! its instances exactly, on any backend.

use std::ops::Range;
use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, Tensor, TensorError};

use crate::error::{GraphError, Result};
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

static CONCAT: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Concat));
static SLICE: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Slice));

/// Whether `op` is the concatenation (the one instance every
/// [`Graph::concat`] node shares).
pub(crate) fn is_concat(op: &Arc<dyn Op>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(op), Arc::as_ptr(&*CONCAT))
}

fn bad_args(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "args",
        reason: "do not have the shapes the node was built with",
    }
}

/// Elements `r * n .. (r + 1) * n` of a stacked buffer: row `r`.
/// `[a_1; a_2; ...]` for vectors `a_i` `[n_i]`: `[sum n_i]`.
pub(crate) struct Concat;

impl Op for Concat {
    fn name(&self) -> &'static str {
        "concat"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        let expected = || ShapeError::expected("at least one argument, all vectors [n]");
        if args.is_empty() {
            return Err(expected());
        }
        let mut total: usize = 0;
        for s in args {
            match s.dims() {
                [n] => {
                    total = total.checked_add(*n).ok_or_else(|| {
                        ShapeError::expected("vectors whose total length fits in usize")
                    })?
                }
                _ => return Err(expected()),
            }
        }
        Ok(Shape::from([total]))
    }
    fn forward(&self, mut cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let total = cx.out.row_len();
        let mut off = 0;
        for a in cx.args {
            let n = a.row_len();
            if off + n > total {
                return Err(bad_args("concat"));
            }
            cx.backend
                .copy_cols(a, 0, cx.out.reborrow(), off, n, false)?;
            off += n;
        }
        if off != total {
            return Err(bad_args("concat"));
        }
        Ok(())
    }
    fn backward_writes(&self, _i: usize, _n: usize, _attr: Attr) -> bool {
        // Each argument's gradient is one column block of dout, copied.
        true
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let total = cx.dout.row_len();
        let mut off = 0;
        // Which gradients to write, read before `dargs` is borrowed.
        let writes = (0..cx.args.len().min(64))
            .filter(|&j| cx.writes(j))
            .fold(0u64, |m, j| m | 1 << j);
        for (j, (a, da)) in cx.args.iter().zip(cx.dargs.iter_mut()).enumerate() {
            let n = a.row_len();
            if off + n > total {
                return Err(bad_args("concat"));
            }
            if let Some(da) = da {
                cx.backend.copy_cols(
                    cx.dout,
                    off,
                    da.reborrow(),
                    0,
                    n,
                    !(j < 64 && writes >> j & 1 == 1),
                )?;
            }
            off += n;
        }
        Ok(())
    }
}

pub(crate) struct Slice;

fn slice_range(attr: Attr) -> Range<usize> {
    (attr & 0xFFFF_FFFF) as usize..(attr >> 32) as usize
}

impl Op for Slice {
    fn name(&self) -> &'static str {
        "slice"
    }
    fn infer_shape(&self, args: &[Shape], attr: Attr) -> Result<Shape, ShapeError> {
        let Range { start, end } = slice_range(attr);
        match args {
            [s] => match s.dims() {
                [n] if start < end && end <= *n => Ok(Shape::from([end - start])),
                [_] => Err(ShapeError::expected(format!(
                    "a vector of at least {end} elements for the range {start}..{end}"
                ))),
                _ => Err(ShapeError::expected("a vector [n]")),
            },
            _ => Err(ShapeError::expected("one argument")),
        }
    }
    /// A slice of one vector is a contiguous range: a view, not a copy.
    fn view(&self, arg: &Tensor, out: &Shape, attr: Attr) -> Option<sheaf_tensor::Result<Tensor>> {
        let Range { start, end } = slice_range(attr);
        Some(
            arg.reshape([arg.numel(), 1])
                .and_then(|column| column.rows(start..end))
                .and_then(|part| part.reshape(*out)),
        )
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let [x] = cx.args else {
            return Err(bad_args("slice"));
        };
        let Range { start, end } = slice_range(cx.attr);
        if end.checked_sub(start) != Some(cx.out.row_len()) {
            return Err(bad_args("slice"));
        }
        cx.backend
            .copy_cols(x, start, cx.out, 0, end - start, false)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let Some(Some(dx)) = cx.dargs.first_mut() else {
            return Ok(());
        };
        let Range { start, end } = slice_range(cx.attr);
        if end.checked_sub(start) != Some(cx.dout.row_len()) {
            return Err(bad_args("slice"));
        }
        cx.backend
            .copy_cols(cx.dout, 0, dx.reborrow(), start, end - start, true)
    }
}

/// Joining and cutting vectors: concatenation and slices. Each checks
/// shapes when called and computes nothing.
impl Graph {
    /// The vectors `xs` (`[n_i]`, at least one) one after another:
    /// `[sum n_i]`. Nodes concatenating different lengths never share a
    /// batch.
    pub fn concat(&mut self, xs: &[Expr]) -> Result<Expr> {
        self.apply_with_data(&CONCAT, xs, 0, 0)
    }

    /// Elements `start..end` of a vector `x` `[n]`: `[end - start]`. The
    /// range must be non-empty and within `x` (a [`GraphError::Data`]
    /// otherwise); nodes with different ranges never share a batch.
    pub fn slice(&mut self, x: Expr, start: usize, end: usize) -> Result<Expr> {
        let node = self.check(x, "slice")?;
        if let [n] = self.node(node).shape().dims() {
            let what = if start >= end {
                Some(format!(
                    "range {start}..{end} is empty (start must be below end)"
                ))
            } else if end > *n {
                Some(format!(
                    "range {start}..{end} reaches past the end of a vector of length {n}"
                ))
            } else if u32::try_from(end).is_err() {
                Some(format!(
                    "range {start}..{end} does not fit in 32-bit bounds"
                ))
            } else {
                None
            };
            if let Some(what) = what {
                return Err(GraphError::Data { op: "slice", what });
            }
        }
        // In range (checked above) or rejected by shape inference below.
        let attr = (start as u64 & 0xFFFF_FFFF) | ((end as u64 & 0xFFFF_FFFF) << 32);
        self.apply_with_data(&SLICE, &[x], attr, 0)
    }
}
