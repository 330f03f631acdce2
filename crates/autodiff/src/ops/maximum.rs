//! Elementwise maxima: `maximum` of two values and `max` over a list (the
//! max-pooling of Fold's `Max` block). Every argument is stacked; each
//! instance's rows are compared by the same loop, so a batch equals its
//! instances exactly. The gradient goes to the FIRST argument holding the
//! maximum at each position (ties are not split).

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, TensorError};

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
    /// The argument holding the maximum of element `i` (the first on ties).
    fn argmax(args: &[&[f32]], i: usize) -> usize {
        let mut best = 0;
        for (k, a) in args.iter().enumerate().skip(1) {
            // `>` keeps the first of equal values; NaN never wins.
            if a[i] > args[best][i] {
                best = k;
            }
        }
        best
    }

    fn slices<'a>(
        &self,
        args: &'a [sheaf_tensor::Tensor],
        len: usize,
    ) -> sheaf_tensor::Result<Vec<&'a [f32]>> {
        let mut out = Vec::with_capacity(args.len());
        for a in args {
            let s = a.as_slice::<f32>()?;
            if s.len() != len {
                return Err(bad_args(self.name()));
            }
            out.push(s);
        }
        Ok(out)
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
        if super::host::needed(cx.backend) {
            return super::host::forward(self, cx);
        }
        let out = cx.out.into_mut_slice::<f32>()?;
        let args = self.slices(cx.args, out.len())?;
        if args.is_empty() {
            return Err(bad_args(self.name()));
        }
        for (i, o) in out.iter_mut().enumerate() {
            *o = args[Self::argmax(&args, i)][i];
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        if super::host::needed(cx.backend) {
            return super::host::backward(self, cx);
        }
        let dy = cx.dout.as_slice::<f32>()?;
        let args = self.slices(cx.args, dy.len())?;
        if cx.dargs.len() != args.len() {
            return Err(bad_args(self.name()));
        }
        for (i, &g) in dy.iter().enumerate() {
            let k = Self::argmax(&args, i);
            if let Some(d) = cx.dargs[k].as_mut() {
                let d = d.as_mut_slice::<f32>()?;
                match d.get_mut(i) {
                    Some(d) => *d += g,
                    None => return Err(bad_args(self.name())),
                }
            }
        }
        Ok(())
    }
}

/// Maxima. Each checks shapes when called and computes nothing.
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
