//! Reductions: `sum` / `mean` of a list of equal shapes, `sum_elems` /
//! `mean_elems` of one value, `dot` and `squared_distance` of two. Every
//! argument is stacked; each instance's row is reduced on its own by the
//! same loop, so a batch equals its instances exactly. The ops reduce over
//! all elements (or elementwise across the list), so any rank is accepted.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, TensorError};

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

/// Checks that a stacked argument holds `len` elements.
fn same_len(op: &'static str, t: &[f32], len: usize) -> sheaf_tensor::Result<()> {
    if t.len() == len {
        Ok(())
    } else {
        Err(bad_args(op))
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
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let name = self.name();
        let out = cx.out.into_mut_slice::<f32>()?;
        out.fill(0.0);
        for a in cx.args {
            let a = a.as_slice::<f32>()?;
            same_len(name, a, out.len())?;
            out.iter_mut().zip(a).for_each(|(o, v)| *o += v);
        }
        if self.mean {
            let inv = 1.0 / cx.args.len() as f32;
            out.iter_mut().for_each(|o| *o *= inv);
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
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
        let (x, n) = (x.as_slice::<f32>()?, x.row_len());
        let out = cx.out.into_mut_slice::<f32>()?;
        same_len(self.name(), x, out.len() * n)?;
        if n == 0 {
            out.fill(0.0);
            return Ok(());
        }
        let scale = if self.mean { 1.0 / n as f32 } else { 1.0 };
        for (o, row) in out.iter_mut().zip(x.chunks_exact(n.max(1))) {
            *o = row.iter().sum::<f32>() * scale;
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let Some(Some(dx)) = cx.dargs.first_mut() else {
            return Ok(());
        };
        let n = dx.row_len();
        let scale = if self.mean { 1.0 / n as f32 } else { 1.0 };
        let dy = cx.dout.as_slice::<f32>()?;
        let dx = dx.as_mut_slice::<f32>()?;
        same_len(self.name(), dx, dy.len() * n)?;
        for (d, row) in dy.iter().zip(dx.chunks_exact_mut(n.max(1))) {
            let g = d * scale;
            row.iter_mut().for_each(|v| *v += g);
        }
        Ok(())
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
        let n = a.row_len();
        let (a, b) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
        let out = cx.out.into_mut_slice::<f32>()?;
        same_len(self.name(), a, out.len() * n)?;
        same_len(self.name(), b, out.len() * n)?;
        if n == 0 {
            out.fill(0.0);
            return Ok(());
        }
        let rows = a.chunks_exact(n.max(1)).zip(b.chunks_exact(n.max(1)));
        for (o, (ra, rb)) in out.iter_mut().zip(rows) {
            *o = match self {
                Pair::Dot => ra.iter().zip(rb).map(|(x, y)| x * y).sum(),
                Pair::SquaredDistance => ra.iter().zip(rb).map(|(x, y)| (x - y) * (x - y)).sum(),
            };
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let [a, b] = cx.args else {
            return Err(bad_args(self.name()));
        };
        let n = a.row_len();
        let dy = cx.dout.as_slice::<f32>()?;
        let (av, bv) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
        same_len(self.name(), av, dy.len() * n)?;
        same_len(self.name(), bv, dy.len() * n)?;
        let (da, db) = match cx.dargs.as_mut_slice() {
            [da, db] => (da, db),
            _ => return Err(bad_args(self.name())),
        };
        // d/da and d/db per element, given the row's upstream gradient g.
        let grads = |g: f32, x: f32, y: f32| match self {
            Pair::Dot => (g * y, g * x),
            Pair::SquaredDistance => {
                let d = 2.0 * g * (x - y);
                (d, -d)
            }
        };
        for (which, slot) in [(0, da), (1, db)] {
            let Some(dst) = slot else { continue };
            let dst = dst.as_mut_slice::<f32>()?;
            same_len(self.name(), dst, dy.len() * n)?;
            for (r, &g) in dy.iter().enumerate() {
                let span = r * n..(r + 1) * n;
                for ((d, &x), &y) in dst[span.clone()]
                    .iter_mut()
                    .zip(&av[span.clone()])
                    .zip(&bv[span])
                {
                    let (ga, gb) = grads(g, x, y);
                    *d += if which == 0 { ga } else { gb };
                }
            }
        }
        Ok(())
    }
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
