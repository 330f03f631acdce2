//! Inputs and parameters: leaves whose values the executor sets directly.

use sheaf_tensor::{Shape, TensorError};

use crate::op::{Attr, Backward, Forward, Op, ShapeError};

/// A leaf op (`input`, `parameter`). It never runs: executors read leaf
/// values from the graph's inputs or the parameter store.
pub(crate) struct Leaf(pub(crate) &'static str);

impl Op for Leaf {
    fn name(&self) -> &'static str {
        self.0
    }
    fn infer_shape(&self, _args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        Err(ShapeError::expected(
            "no arguments: leaves are added with Graph::input / Graph::param",
        ))
    }
    fn batchable(&self) -> bool {
        false
    }
    fn forward(&self, _cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        Err(TensorError::InvalidArgument {
            op: self.0,
            arg: "node",
            reason: "is a leaf: executors set its value, no kernel computes it",
        })
    }
    fn backward(&self, _cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        Err(TensorError::InvalidArgument {
            op: self.0,
            arg: "node",
            reason: "is a leaf: executors set its value, no kernel computes it",
        })
    }
}
