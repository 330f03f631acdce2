//! Reductions: `sum` / `mean` of a list of equal shapes, `sum_elems` /
//! `mean_elems` of one value, `dot` and `squared_distance` of two. Every
//! argument is stacked; each instance's row is reduced on its own by the
//! same backend kernel (row sums, row scaling), so a batch equals its
//! instances exactly, on any backend. The ops reduce over
//! all elements (or elementwise across the list), so any rank is accepted.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Binary, DType, Shape, Tensor, TensorError, Transpose};

use crate::error::Result;
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

static SUM: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(SumList { mean: false }));
static MEAN: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(SumList { mean: true }));
static SUM_ELEMS: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(SumElems { mean: false }));
static MEAN_ELEMS: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(SumElems { mean: true }));
static DOT: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Pair::Dot));
static SQUARED_DISTANCE: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Pair::SquaredDistance));

fn bad_args(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "args",
        reason: "do not have the shapes the node was built with",
    }
}

/// The elementwise sum (or mean) of a list of values of one shape.
pub(crate) struct SumList {
    mean: bool,
}

impl Op for SumList {
    fn name(&self) -> &'static str {
        if self.mean {
            "mean"
        } else {
            "sum"
        }
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [first, rest @ ..] if rest.iter().all(|s| s == first) => Ok(*first),
            _ => Err(ShapeError::expected(
                "at least one argument, all of one shape",
            )),
        }
    }
    fn forward(&self, mut cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let alpha = if self.mean {
            1.0 / cx.args.len() as f32
        } else {
            1.0
        };
        cx.backend.fill(0.0, cx.out.reborrow())?;
        if let (Some(block), false) = (cx.block, self.mean) {
            // All terms stacked as one block [n·b, ...]: its column sums
            // over the n terms, one kernel.
            let len = cx.out.numel();
            let terms = block.reshape([cx.args.len(), len])?;
            return cx.backend.col_sums_acc(&terms, cx.out.reshape([len])?);
        }
        for a in cx.args {
            cx.backend.axpy(alpha, a, cx.out.reborrow())?;
        }
        Ok(())
    }
    fn grads_as_block(&self) -> bool {
        !self.mean
    }
    fn sums_args(&self) -> bool {
        !self.mean
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        if let Some(block) = cx.take_grad_block() {
            // Every term's gradient is dout: each row of the (unzeroed)
            // [n, b·...] block becomes it, one kernel.
            let len = cx.dout.numel();
            let rows = block.reshape([cx.args.len(), len])?;
            return cx.backend.broadcast_row(&cx.dout.reshape([len])?, rows);
        }
        let alpha = if self.mean {
            1.0 / cx.args.len() as f32
        } else {
            1.0
        };
        for da in cx.dargs.iter_mut().flatten() {
            cx.backend.axpy(alpha, cx.dout, da.reborrow())?;
        }
        Ok(())
    }
}

/// The sum (or mean) of all elements of one value, `[1]`.
pub(crate) struct SumElems {
    mean: bool,
}

impl Op for SumElems {
    fn name(&self) -> &'static str {
        if self.mean {
            "mean_elems"
        } else {
            "sum_elems"
        }
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [x] if !self.mean || x.numel().is_ok_and(|n| n > 0) => Ok(Shape::from([1])),
            _ if self.mean => Err(ShapeError::expected(
                "one argument with at least one element",
            )),
            _ => Err(ShapeError::expected("one argument")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let [x] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let (b, n) = (x.num_rows(), x.row_len());
        let sums = cx.out.reshape([b])?;
        let be = cx.backend;
        if !self.mean || n == 0 {
            return be.row_sums(&flat(x)?, sums);
        }
        let mut total = Tensor::zeros([b], DType::F32, be.device())?;
        be.row_sums(&flat(x)?, total.view_mut()?)?;
        be.scale(1.0 / n as f32, &total, sums)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let Some(Some(dx)) = cx.dargs.first_mut() else {
            return Ok(());
        };
        let (b, n) = (dx.num_rows(), dx.row_len());
        if n == 0 {
            return Ok(());
        }
        let scale = if self.mean { 1.0 / n as f32 } else { 1.0 };
        // dx[r, :] += scale dy[r]: the outer product of dy and a row of ones.
        let be = cx.backend;
        let ones = Tensor::full_f32(1.0, [1, n], be.device())?;
        let dy = cx.dout.reshape([b, 1])?;
        let dx = dx.reborrow().reshape([b, n])?;
        be.matmul(&dy, Transpose::No, &ones, Transpose::No, scale, 1.0, dx)
    }
}

/// A reduction of two values of one shape to `[1]`.
pub(crate) enum Pair {
    /// `sum a * b`.
    Dot,
    /// `sum (a - b)^2`.
    SquaredDistance,
}

impl Op for Pair {
    fn name(&self) -> &'static str {
        match self {
            Pair::Dot => "dot",
            Pair::SquaredDistance => "squared_distance",
        }
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [a, b] if a == b => Ok(Shape::from([1])),
            _ => Err(ShapeError::expected("two arguments of equal shape")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let [a, b] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let be = cx.backend;
        let (a, b) = (flat(a)?, flat(b)?);
        let mut prod = Tensor::zeros(a.shape(), DType::F32, be.device())?;
        match self {
            Pair::Dot => be.binary(Binary::Mul, &a, &b, prod.view_mut()?)?,
            Pair::SquaredDistance => {
                let mut d = Tensor::zeros(a.shape(), DType::F32, be.device())?;
                be.binary(Binary::Sub, &a, &b, d.view_mut()?)?;
                be.binary(Binary::Mul, &d, &d, prod.view_mut()?)?;
            }
        }
        be.row_sums(&prod, cx.out.reshape([a.num_rows()])?)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let [a, b] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let be = cx.backend;
        let (a, b) = (flat(a)?, flat(b)?);
        let g = cx.dout.reshape([a.num_rows()])?;
        let (da, db) = match cx.dargs.as_mut_slice() {
            [da, db] => (da, db),
            _ => return Err(bad_args(self.name())),
        };
        let shape = a.shape();
        match self {
            // d/da = g b, d/db = g a.
            Pair::Dot => {
                if let Some(da) = da {
                    be.scale_rows(&b, &g, da.reborrow().reshape(shape)?, true)?;
                }
                if let Some(db) = db {
                    be.scale_rows(&a, &g, db.reborrow().reshape(shape)?, true)?;
                }
            }
            // d/da = 2 g (a - b) = -d/db.
            Pair::SquaredDistance => {
                let mut d = Tensor::zeros(shape, DType::F32, be.device())?;
                be.binary(Binary::Sub, &a, &b, d.view_mut()?)?;
                let mut gd = Tensor::zeros(shape, DType::F32, be.device())?;
                be.scale_rows(&d, &g, gd.view_mut()?, false)?;
                if let Some(da) = da {
                    be.axpy(2.0, &gd, da.reborrow().reshape(shape)?)?;
                }
                if let Some(db) = db {
                    be.axpy(-2.0, &gd, db.reborrow().reshape(shape)?)?;
                }
            }
        }
        Ok(())
    }
}

/// A stacked value as a `[b, n]` matrix, one instance per row (the
/// backend's row reductions work over the last dimension only).
fn flat(t: &Tensor) -> sheaf_tensor::Result<Tensor> {
    t.reshape([t.num_rows(), t.row_len()])
}

/// Reductions. Each checks shapes when called and computes nothing.
impl Graph {
    /// The elementwise sum of `xs` (at least one value, all of one shape).
    /// Nodes summing lists of different lengths never share a batch.
    pub fn sum(&mut self, xs: &[Expr]) -> Result<Expr> {
        self.apply_with_data(&SUM, xs, 0, 0)
    }

    /// The elementwise mean of `xs` (at least one value, all of one shape).
    pub fn mean(&mut self, xs: &[Expr]) -> Result<Expr> {
        self.apply_with_data(&MEAN, xs, 0, 0)
    }

    /// The sum of all elements of `x`, shape `[1]`.
    pub fn sum_elems(&mut self, x: Expr) -> Result<Expr> {
        self.apply_with_data(&SUM_ELEMS, &[x], 0, 0)
    }

    /// The mean of all elements of `x` (at least one), shape `[1]`.
    pub fn mean_elems(&mut self, x: Expr) -> Result<Expr> {
        self.apply_with_data(&MEAN_ELEMS, &[x], 0, 0)
    }

    /// The dot product `sum a * b` of two values of one shape, `[1]`.
    pub fn dot(&mut self, a: Expr, b: Expr) -> Result<Expr> {
        self.apply_with_data(&DOT, &[a, b], 0, 0)
    }

    /// The squared Euclidean distance `sum (a - b)^2` of two values of one
    /// shape, `[1]`.
    pub fn squared_distance(&mut self, a: Expr, b: Expr) -> Result<Expr> {
        self.apply_with_data(&SQUARED_DISTANCE, &[a, b], 0, 0)
    }
}
