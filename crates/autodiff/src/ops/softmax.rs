//! Softmax family over a vector `[n]`: `softmax`, `log_softmax` and the
//! cross-entropy loss `pick_neg_log_softmax`. A batch is one row kernel
//! over `[b, n]`; the class of each loss node is node data, so losses with
//! different classes share a call.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, Tensor, TensorError};

use crate::error::{GraphError, Result};
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

/// The shape of a non-empty vector `[n]`.
fn vector(args: &[Shape]) -> Result<Shape, ShapeError> {
    match args {
        [x] if x.rank() == 1 && x.dims()[0] > 0 => Ok(*x),
        _ => Err(ShapeError::expected("one vector [n] with n >= 1")),
    }
}

/// `softmax(x)` (`log == false`) or `log softmax(x)` along the vector.
pub(crate) struct Softmax {
    log: bool,
}

impl Op for Softmax {
    fn name(&self) -> &'static str {
        if self.log {
            "log_softmax"
        } else {
            "softmax"
        }
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        vector(args)
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        if self.log {
            cx.backend.log_softmax_rows(&cx.args[0], cx.out)
        } else {
            cx.backend.softmax_rows(&cx.args[0], cx.out)
        }
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        if let Some(dx) = cx.dargs[0].as_mut() {
            if self.log {
                cx.backend
                    .log_softmax_rows_bwd(cx.out, cx.dout, dx.reborrow())?;
            } else {
                cx.backend
                    .softmax_rows_bwd(cx.out, cx.dout, dx.reborrow())?;
            }
        }
        Ok(())
    }
}

/// `-log softmax(x)[class]` as `[1]`, the class as node data; forward saves
/// the probabilities (`[n]` per instance) for backward.
pub(crate) struct PickNegLogSoftmax;

const PNLS: &str = "pick_neg_log_softmax";

fn labels(be: &dyn sheaf_tensor::Backend, data: &[u32]) -> sheaf_tensor::Result<Tensor> {
    Tensor::from_slice(data, [data.len()])?.to_device(be.device())
}

fn no_aux() -> TensorError {
    TensorError::MissingArgument {
        op: PNLS,
        arg: "aux",
        when: "computing the loss (the probabilities are saved there)",
    }
}

impl Op for PickNegLogSoftmax {
    fn name(&self) -> &'static str {
        PNLS
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        vector(args).map(|_| Shape::from([1]))
    }
    fn aux_shape(&self, _out: &Shape, args: &[Shape], _attr: Attr) -> Option<Shape> {
        args.first().copied()
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let b = cx.out.num_rows();
        let probs = cx.aux.ok_or_else(no_aux)?;
        let loss = cx.out.reshape([b])?;
        // The kernel checks every label against the class count.
        cx.backend
            .nll_log_softmax(&cx.args[0], &labels(cx.backend, cx.data)?, probs, loss)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let Some(dx) = cx.dargs[0].as_mut() else {
            return Ok(());
        };
        let probs = cx.aux.ok_or_else(no_aux)?;
        let dloss = cx.dout.reshape([cx.dout.num_rows()])?;
        cx.backend
            .nll_log_softmax_bwd(probs, &labels(cx.backend, cx.data)?, &dloss, dx.reborrow())
    }
}

static SOFTMAX: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Softmax { log: false }));
static LOG_SOFTMAX: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Softmax { log: true }));
static PICK_NEG_LOG_SOFTMAX: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(PickNegLogSoftmax));

/// Softmax ops. Each checks shapes (and classes) when called and computes
/// nothing.
impl Graph {
    /// `exp(x) / sum(exp(x))` of a vector `x` `[n]` (`n >= 1`).
    pub fn softmax(&mut self, x: Expr) -> Result<Expr> {
        self.apply_with_data(&SOFTMAX, &[x], 0, 0)
    }

    /// `log softmax(x)` of a vector `x` `[n]` (`n >= 1`), computed stably
    /// (not as the log of [`Graph::softmax`]).
    pub fn log_softmax(&mut self, x: Expr) -> Result<Expr> {
        self.apply_with_data(&LOG_SOFTMAX, &[x], 0, 0)
    }

    /// The cross-entropy loss `-log softmax(x)[class]` of class scores `x`
    /// `[n]`, as `[1]`. Losses over scores of one length share a batch
    /// whatever their classes.
    ///
    /// Errors: `x` is not a non-empty vector ([`GraphError::Shape`]);
    /// `class` is not below `n` ([`GraphError::Data`]).
    pub fn pick_neg_log_softmax(&mut self, x: Expr, class: u32) -> Result<Expr> {
        let node = self.check(x, PNLS)?;
        let shape = self.node(node).shape();
        let n = shape.dims().first().copied().unwrap_or(0);
        if shape.rank() == 1 && n > 0 && self.call_data_below(class, n) {
            return self.apply_with_data(&PICK_NEG_LOG_SOFTMAX, &[x], 0, class);
        }
        if shape.rank() == 1 && shape.dims()[0] > 0 && class as usize >= shape.dims()[0] {
            return Err(GraphError::Data {
                op: PNLS,
                what: format!(
                    "class {class} is out of range for {} classes",
                    shape.dims()[0]
                ),
            });
        }
        self.apply_with_data(&PICK_NEG_LOG_SOFTMAX, &[x], 0, class)
    }
}
