//! `reshape`: the same elements under another shape. A view when a node
//! runs alone (no copy); a row copy when batched.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, Tensor};

use crate::error::{GraphError, Result};
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

/// The target shape travels in the node's output shape; `infer_shape`
/// receives it packed in the attribute bits (rank <= 4, dims < 2^15).
struct Reshape;

const DIM_BITS: u32 = 15;

fn pack(shape: &Shape) -> Option<Attr> {
    if shape.rank() > 4 {
        return None;
    }
    let mut a: Attr = shape.rank() as Attr;
    for (i, &d) in shape.dims().iter().enumerate() {
        if d >= 1 << DIM_BITS {
            return None;
        }
        a |= (d as Attr) << (4 + DIM_BITS * i as u32);
    }
    Some(a)
}

fn unpack(a: Attr) -> Option<Shape> {
    let rank = (a & 0xF) as usize;
    let dims: Vec<usize> = (0..rank)
        .map(|i| ((a >> (4 + DIM_BITS * i as u32)) & ((1 << DIM_BITS) - 1)) as usize)
        .collect();
    Shape::new(&dims).ok()
}

impl Op for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }
    fn infer_shape(&self, args: &[Shape], attr: Attr) -> Result<Shape, ShapeError> {
        let target = unpack(attr).ok_or_else(|| ShapeError::expected("a valid target shape"))?;
        match args {
            [x] if x.numel().ok() == target.numel().ok() => Ok(target),
            [_] => Err(ShapeError::expected(format!(
                "an argument with as many elements as {target}"
            ))),
            _ => Err(ShapeError::expected("one argument")),
        }
    }
    fn view(&self, arg: &Tensor, out: &Shape, _attr: Attr) -> Option<sheaf_tensor::Result<Tensor>> {
        Some(arg.reshape(*out))
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let x = cx.args[0].reshape(cx.out.shape())?;
        let rows = x.num_rows();
        cx.backend.copy_rows(&x, 0, cx.out, 0, rows)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        if let Some(dx) = cx.dargs[0].as_mut() {
            let dy = cx.dout.reshape(dx.shape())?;
            cx.backend.axpy(1.0, &dy, dx.reborrow())?;
        }
        Ok(())
    }
}

static RESHAPE: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Reshape));

/// Reshaping. Checks the element count when called and computes nothing.
impl Graph {
    /// The same elements under `shape` (equal element count; rank <= 4,
    /// dimensions below 32768). A view, not a copy, when run alone.
    pub fn reshape(&mut self, x: Expr, shape: impl Into<Shape>) -> Result<Expr> {
        let shape = shape.into();
        let attr = pack(&shape).ok_or_else(|| GraphError::Data {
            op: "reshape",
            what: format!("target shape {shape} has rank above 4 or a dimension of 32768 or more"),
        })?;
        self.apply_with_data(&RESHAPE, &[x], attr, 0)
    }
}
