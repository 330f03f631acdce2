//! Elementwise maxima: `maximum` of two values and `max` over a list (the
//! max-pooling of Fold's `Max` block). Every argument is stacked; each
//! instance's rows are compared by the same backend kernels (a running
//! maximum, then the gradient routed to the winner), so a batch equals its
//! instances exactly, on any device. The gradient goes to the FIRST argument holding the
//! maximum at each position (ties are not split).

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Backend, DType, Shape, Tensor, TensorError, TensorMut};

use crate::error::Result;
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

static MAX: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(MaxList { pair: false }));
static MAXIMUM: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(MaxList { pair: true }));

fn bad_args(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "args",
        reason: "do not have the shapes the node was built with",
    }
}

/// The elementwise maximum of a list of values of one shape (`pair`: of
/// exactly two, the op `maximum`).
pub(crate) struct MaxList {
    pair: bool,
}

impl MaxList {
    /// The running maximum of `args` into `best` and the index of the
    /// argument holding it into `arg` (`u32`, the first of equal values).
    fn argmax(
        be: &dyn Backend,
        args: &[Tensor],
        mut best: TensorMut<'_>,
        arg: &mut Tensor,
    ) -> sheaf_tensor::Result<()> {
        let Some(first) = args.first() else {
            return Err(bad_args("max"));
        };
        let rows = first.num_rows();
        be.copy_rows(first, 0, best.reborrow(), 0, rows)?;
        for (k, a) in args.iter().enumerate().skip(1) {
            be.max_update(a, k as u32, best.reborrow(), arg.view_mut()?)?;
        }
        Ok(())
    }
}

impl Op for MaxList {
    fn name(&self) -> &'static str {
        if self.pair {
            "maximum"
        } else {
            "max"
        }
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [a, b] if self.pair && a == b => Ok(*a),
            _ if self.pair => Err(ShapeError::expected("two arguments of one shape")),
            [first, rest @ ..] if rest.iter().all(|s| s == first) => Ok(*first),
            _ => Err(ShapeError::expected(
                "at least one argument, all of one shape",
            )),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let be = cx.backend;
        let shape = cx.out.shape();
        let mut arg = Tensor::zeros(shape, DType::U32, be.device())?;
        Self::argmax(be, cx.args, cx.out, &mut arg)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let be = cx.backend;
        if cx.dargs.len() != cx.args.len() {
            return Err(bad_args(self.name()));
        }
        // The winners again (forward keeps no state), then each argument
        // receives the gradient where it won.
        let shape = cx.dout.shape();
        let mut best = Tensor::zeros(shape, DType::F32, be.device())?;
        let mut arg = Tensor::zeros(shape, DType::U32, be.device())?;
        Self::argmax(be, cx.args, best.view_mut()?, &mut arg)?;
        for (k, d) in cx.dargs.iter_mut().enumerate() {
            if let Some(d) = d {
                be.max_route(cx.dout, &arg, k as u32, d.reborrow())?;
            }
        }
        Ok(())
    }
}

/// Element-wise maxima. Each checks shapes when called and computes
/// nothing.
impl Graph {
    /// The elementwise maximum of `a` and `b` (one shape, any rank). The
    /// gradient of each element goes to the larger argument, to `a` on a
    /// tie.
    pub fn maximum(&mut self, a: Expr, b: Expr) -> Result<Expr> {
        self.apply_with_data(&MAXIMUM, &[a, b], 0, 0)
    }

    /// The elementwise maximum of `xs` (at least one value, all of one
    /// shape): max-pooling over a list. The gradient of each element goes
    /// to the first value holding the maximum. Nodes over lists of
    /// different lengths never share a batch.
    pub fn max(&mut self, xs: &[Expr]) -> Result<Expr> {
        self.apply_with_data(&MAX, xs, 0, 0)
    }
}
