//! Concatenation of vectors and slices of a vector. Every argument is
//! stacked; a batch copies each instance's row range by the same loop, so
//! it equals its instances exactly.

use std::ops::Range;
use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, Tensor, TensorError};

use crate::error::{GraphError, Result};
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

static CONCAT: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Concat));
static SLICE: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Slice));

fn bad_args(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "args",
        reason: "do not have the shapes the node was built with",
    }
}

/// Elements `r * n .. (r + 1) * n` of a stacked buffer: row `r`.
fn row(r: usize, n: usize) -> Range<usize> {
    r * n..(r + 1) * n
}

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
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let b = cx.out.num_rows();
        let total = cx.out.row_len();
        let out = cx.out.into_mut_slice::<f32>()?;
        let mut off = 0;
        for a in cx.args {
            let n = a.row_len();
            let src = a.as_slice::<f32>()?;
            if src.len() != b * n || off + n > total {
                return Err(bad_args("concat"));
            }
            for r in 0..b {
                out[r * total + off..r * total + off + n].copy_from_slice(&src[row(r, n)]);
            }
            off += n;
        }
        if off != total {
            return Err(bad_args("concat"));
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let (b, total) = (cx.dout.num_rows(), cx.dout.row_len());
        let dy = cx.dout.as_slice::<f32>()?;
        let mut off = 0;
        for (a, da) in cx.args.iter().zip(cx.dargs.iter_mut()) {
            let n = a.row_len();
            if off + n > total {
                return Err(bad_args("concat"));
            }
            if let Some(da) = da {
                let da = da.as_mut_slice::<f32>()?;
                if da.len() != b * n {
                    return Err(bad_args("concat"));
                }
                for r in 0..b {
                    let src = &dy[r * total + off..r * total + off + n];
                    da[row(r, n)].iter_mut().zip(src).for_each(|(d, g)| *d += g);
                }
            }
            off += n;
        }
        Ok(())
    }
}

/// Elements `start..end` of a vector; the range is the attribute
/// `start | end << 32` (part of the signature).
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
        let (b, n, len) = (cx.out.num_rows(), x.row_len(), cx.out.row_len());
        let src = x.as_slice::<f32>()?;
        let out = cx.out.into_mut_slice::<f32>()?;
        if end.checked_sub(start) != Some(len) || end > n || src.len() != b * n {
            return Err(bad_args("slice"));
        }
        for r in 0..b {
            out[row(r, len)].copy_from_slice(&src[r * n + start..r * n + end]);
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let Some(Some(dx)) = cx.dargs.first_mut() else {
            return Ok(());
        };
        let Range { start, end } = slice_range(cx.attr);
        let (b, n, len) = (cx.dout.num_rows(), dx.row_len(), cx.dout.row_len());
        let dy = cx.dout.as_slice::<f32>()?;
        let dx = dx.as_mut_slice::<f32>()?;
        if end.checked_sub(start) != Some(len) || end > n || dx.len() != b * n {
            return Err(bad_args("slice"));
        }
        for r in 0..b {
            dx[r * n + start..r * n + end]
                .iter_mut()
                .zip(&dy[row(r, len)])
                .for_each(|(d, g)| *d += g);
        }
        Ok(())
    }
}

/// Concatenation and slicing of vectors. Each checks shapes (and ranges)
/// when called and computes nothing.
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
