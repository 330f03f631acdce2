//! Scalars against vectors: `broadcast` (a scalar `[1]` repeated `n`
//! times) and `scale_by` (a value times a per-instance scalar `[1]`, e.g.
//! an attention weight times a state). Every argument is stacked; each
//! instance's row is computed by the same loop, so a batch equals its
//! instances exactly.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Binary, DType, Shape, Tensor, TensorError, Transpose};

use crate::error::{GraphError, Result};
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

static BROADCAST: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Broadcast));
static SCALE_BY: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(ScaleBy));

fn bad_args(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "args",
        reason: "do not have the shapes the node was built with",
    }
}

fn is_scalar(s: &Shape) -> bool {
    s.dims() == [1]
}

/// `[1]` to `[n]`, `n` in the attribute.
pub(crate) struct Broadcast;

impl Op for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }
    fn infer_shape(&self, args: &[Shape], attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [x] if is_scalar(x) && attr > 0 => Ok(Shape::from([attr as usize])),
            _ => Err(ShapeError::expected("one argument of shape [1]")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let [x] = cx.args else {
            return Err(bad_args("broadcast"));
        };
        // out[r, :] = x[r]: the outer product of x and a row of ones.
        let be = cx.backend;
        let ones = Tensor::full_f32(1.0, [1, cx.attr as usize], be.device())?;
        let x = x.reshape([x.num_rows(), 1])?;
        be.matmul(&x, Transpose::No, &ones, Transpose::No, 1.0, 0.0, cx.out)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let Some(Some(dx)) = cx.dargs.first_mut() else {
            return Ok(());
        };
        // dx[r] += sum(dy[r, :]): dy times a column of ones.
        let be = cx.backend;
        let ones = Tensor::full_f32(1.0, [1, cx.attr as usize], be.device())?;
        let dx = dx.reborrow().reshape([cx.dout.num_rows(), 1])?;
        be.matmul(cx.dout, Transpose::No, &ones, Transpose::Yes, 1.0, 1.0, dx)
    }
}

pub(crate) struct ScaleBy;

impl Op for ScaleBy {
    fn name(&self) -> &'static str {
        "scale_by"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [x, s] if is_scalar(s) => Ok(*x),
            _ => Err(ShapeError::expected("a value and a scalar of shape [1]")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let [x, s] = cx.args else {
            return Err(bad_args("scale_by"));
        };
        let (x, s) = (flat(x)?, s.reshape([s.num_rows()])?);
        let out = cx.out.reshape(x.shape())?;
        cx.backend.scale_rows(&x, &s, out, false)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let [x, s] = cx.args else {
            return Err(bad_args("scale_by"));
        };
        let be = cx.backend;
        let (x, s, dy) = (flat(x)?, s.reshape([s.num_rows()])?, flat(cx.dout)?);
        let (dx, ds) = match cx.dargs.as_mut_slice() {
            [dx, ds] => (dx, ds),
            _ => return Err(bad_args("scale_by")),
        };
        if let Some(dx) = dx {
            be.scale_rows(&dy, &s, dx.reborrow().reshape(x.shape())?, true)?;
        }
        if let Some(ds) = ds {
            // ds[r] += <dy[r, :], x[r, :]>.
            let mut prod = Tensor::zeros(x.shape(), DType::F32, be.device())?;
            be.binary(Binary::Mul, &dy, &x, prod.view_mut()?)?;
            let mut sums = Tensor::zeros([x.num_rows()], DType::F32, be.device())?;
            be.row_sums(&prod, sums.view_mut()?)?;
            be.axpy(1.0, &sums, ds.reborrow().reshape([x.num_rows()])?)?;
        }
        Ok(())
    }
}

/// A stacked value as a `[b, n]` matrix, one instance per row.
fn flat(t: &Tensor) -> sheaf_tensor::Result<Tensor> {
    t.reshape([t.num_rows(), t.row_len()])
}

/// Broadcasting: one vector repeated, or scaled by a one-element node.
/// Each checks shapes when called and computes nothing.
impl Graph {
    /// The scalar `x` (`[1]`) repeated `n` times: `[n]`. Nodes with
    /// different `n` never share a batch.
    ///
    /// Errors: `x` is not `[1]` ([`GraphError::Shape`]); `n` is 0
    /// ([`GraphError::Data`]).
    pub fn broadcast(&mut self, x: Expr, n: usize) -> Result<Expr> {
        if n == 0 {
            return Err(GraphError::Data {
                op: "broadcast",
                what: "cannot broadcast to 0 elements".into(),
            });
        }
        self.apply_with_data(&BROADCAST, &[x], n as Attr, 0)
    }

    /// `x * s`: every element of `x` (any shape) times the scalar `s`
    /// (`[1]`), both per-instance values (an attention weight times a
    /// state).
    pub fn scale_by(&mut self, x: Expr, s: Expr) -> Result<Expr> {
        self.apply_with_data(&SCALE_BY, &[x, s], 0, 0)
    }
}
