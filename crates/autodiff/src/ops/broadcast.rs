//! Scalars against vectors: `broadcast` (a scalar `[1]` repeated `n`
//! times) and `scale_by` (a value times a per-instance scalar `[1]`, e.g.
//! an attention weight times a state). Every argument is stacked; each
//! instance's row is computed by the same loop, so a batch equals its
//! instances exactly.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, TensorError};

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
        let x = cx
            .args
            .first()
            .ok_or(bad_args("broadcast"))?
            .as_slice::<f32>()?;
        let out = cx.out.into_mut_slice::<f32>()?;
        let n = cx.attr as usize;
        if out.len() != x.len() * n {
            return Err(bad_args("broadcast"));
        }
        for (row, &v) in out.chunks_exact_mut(n).zip(x) {
            row.fill(v);
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let n = cx.attr as usize;
        let dy = cx.dout.as_slice::<f32>()?;
        let Some(Some(dx)) = cx.dargs.first_mut() else {
            return Ok(());
        };
        let dx = dx.as_mut_slice::<f32>()?;
        if dy.len() != dx.len() * n {
            return Err(bad_args("broadcast"));
        }
        for (d, row) in dx.iter_mut().zip(dy.chunks_exact(n)) {
            *d += row.iter().sum::<f32>();
        }
        Ok(())
    }
}

/// `x * s` for a value `x` and a scalar `s` `[1]`, both per instance.
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
        let (x, s, n) = (x.as_slice::<f32>()?, s.as_slice::<f32>()?, x.row_len());
        let out = cx.out.into_mut_slice::<f32>()?;
        if n == 0 || x.len() != out.len() || x.len() != s.len() * n {
            return Err(bad_args("scale_by"));
        }
        for ((o, x), &s) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)).zip(s) {
            o.iter_mut().zip(x).for_each(|(o, x)| *o = x * s);
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let [x, s] = cx.args else {
            return Err(bad_args("scale_by"));
        };
        let (xv, sv, n) = (x.as_slice::<f32>()?, s.as_slice::<f32>()?, x.row_len());
        let dy = cx.dout.as_slice::<f32>()?;
        if n == 0 || xv.len() != dy.len() || xv.len() != sv.len() * n {
            return Err(bad_args("scale_by"));
        }
        let (dx, ds) = match cx.dargs.as_mut_slice() {
            [dx, ds] => (dx, ds),
            _ => return Err(bad_args("scale_by")),
        };
        if let Some(dx) = dx {
            let dx = dx.as_mut_slice::<f32>()?;
            for ((d, g), &s) in dx.chunks_exact_mut(n).zip(dy.chunks_exact(n)).zip(sv) {
                d.iter_mut().zip(g).for_each(|(d, g)| *d += s * g);
            }
        }
        if let Some(ds) = ds {
            let ds = ds.as_mut_slice::<f32>()?;
            for ((d, g), x) in ds
                .iter_mut()
                .zip(dy.chunks_exact(n))
                .zip(xv.chunks_exact(n))
            {
                *d += g.iter().zip(x).map(|(g, x)| g * x).sum::<f32>();
            }
        }
        Ok(())
    }
}

/// Scalar-vector ops. Each checks shapes when called and computes nothing.
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
