//! Elementwise ops: tanh, sigmoid, relu, exp, log, add, sub, cmult, cdiv,
//! scale. Signature: (op, shape); every argument is stacked. Like every
//! other op family (and users' ops) they are process-wide `Arc<dyn Op>`s
//! applied through [`Graph::apply_with_data`]: one registration path.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Binary, DType, Shape, Tensor, TensorError, Unary};

use crate::error::Result;
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

static TANH: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(UnaryOp(Unary::Tanh)));
static SIGMOID: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(UnaryOp(Unary::Sigmoid)));
static RELU: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(UnaryOp(Unary::Relu)));
static EXP: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(UnaryOp(Unary::Exp)));
static LOG: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(UnaryOp(Unary::Log)));
static ADD: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(BinaryOp(Binary::Add)));
static SUB: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(BinaryOp(Binary::Sub)));
static CMULT: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(BinaryOp(Binary::Mul)));
static CDIV: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(BinaryOp(Binary::Div)));
static SCALE: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(ScaleOp));

fn one_arg(args: &[Shape]) -> Result<Shape, ShapeError> {
    match args {
        [x] => Ok(*x),
        _ => Err(ShapeError::expected("one argument")),
    }
}

fn equal_pair(args: &[Shape]) -> Result<Shape, ShapeError> {
    match args {
        [a, b] if a == b => Ok(*a),
        _ => Err(ShapeError::expected("two arguments of equal shape")),
    }
}

/// A unary activation.
pub(crate) struct UnaryOp(pub(crate) Unary);

impl Op for UnaryOp {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        one_arg(args)
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        cx.backend.unary(self.0, &cx.args[0], cx.out)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        if let Some(dx) = cx.dargs[0].as_mut() {
            cx.backend
                .unary_bwd(self.0, &cx.args[0], cx.out, cx.dout, dx.reborrow())?;
        }
        Ok(())
    }
}

/// An elementwise binary op on two equal shapes.
pub(crate) struct BinaryOp(pub(crate) Binary);

impl Op for BinaryOp {
    fn name(&self) -> &'static str {
        match self.0 {
            Binary::Add => "add",
            Binary::Sub => "sub",
            Binary::Mul => "cmult",
            Binary::Div => "cdiv",
        }
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        equal_pair(args)
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        cx.backend.binary(self.0, &cx.args[0], &cx.args[1], cx.out)
    }
    fn backward_writes(&self, i: usize, _n: usize, _attr: Attr) -> bool {
        // A sum's gradients are `dy` as it is (a difference's first): a
        // copy needs no zeroed buffer to add into.
        matches!((self.0, i), (Binary::Add, 0 | 1) | (Binary::Sub, 0))
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let writes = [cx.writes(0), cx.writes(1)];
        let (a, b, dy, be) = (&cx.args[0], &cx.args[1], cx.dout, cx.backend);
        let (da, db) = match cx.dargs.as_mut_slice() {
            [da, db] => (da, db),
            _ => {
                return Err(TensorError::InvalidArgument {
                    op: self.name(),
                    arg: "args",
                    reason: "must be two tensors",
                })
            }
        };
        match self.0 {
            Binary::Add | Binary::Sub => {
                if let Some(da) = da {
                    match writes[0] {
                        true => be.copy_cols(dy, 0, da.reborrow(), 0, dy.row_len(), false)?,
                        false => be.axpy(1.0, dy, da.reborrow())?,
                    }
                }
                if let Some(db) = db {
                    if writes[1] {
                        // Only an addition declares its second gradient
                        // written (see `backward_writes`).
                        be.copy_cols(dy, 0, db.reborrow(), 0, dy.row_len(), false)?;
                        return Ok(());
                    }
                    let sign = if self.0 == Binary::Add { 1.0 } else { -1.0 };
                    be.axpy(sign, dy, db.reborrow())?;
                }
            }
            Binary::Mul => {
                if let Some(da) = da {
                    be.mul_acc(dy, b, da.reborrow())?;
                }
                if let Some(db) = db {
                    be.mul_acc(dy, a, db.reborrow())?;
                }
            }
            Binary::Div => {
                // div_bwd writes both; a scratch buffer stands in for one
                // that needs no gradient.
                let mut scratch_a;
                let mut scratch_b;
                let da = match da {
                    Some(d) => d.reborrow(),
                    None => {
                        scratch_a = Tensor::zeros(a.shape(), DType::F32, be.device())?;
                        scratch_a.view_mut()?
                    }
                };
                let db = match db {
                    Some(d) => d.reborrow(),
                    None => {
                        scratch_b = Tensor::zeros(b.shape(), DType::F32, be.device())?;
                        scratch_b.view_mut()?
                    }
                };
                be.div_bwd(a, b, dy, da, db)?;
            }
        }
        Ok(())
    }
}

/// `alpha * x`, alpha in the attribute bits (part of the signature).
pub(crate) struct ScaleOp;

impl Op for ScaleOp {
    fn name(&self) -> &'static str {
        "scale"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        one_arg(args)
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        cx.backend
            .scale(f32::from_bits(cx.attr as u32), &cx.args[0], cx.out)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        if let Some(dx) = cx.dargs[0].as_mut() {
            cx.backend
                .axpy(f32::from_bits(cx.attr as u32), cx.dout, dx.reborrow())?;
        }
        Ok(())
    }
}

/// Elementwise ops. Each checks shapes when called and computes nothing.
impl Graph {
    /// Hyperbolic tangent.
    pub fn tanh(&mut self, x: Expr) -> Result<Expr> {
        self.apply_with_data(&TANH, &[x], 0, 0)
    }
    /// Logistic sigmoid.
    pub fn sigmoid(&mut self, x: Expr) -> Result<Expr> {
        self.apply_with_data(&SIGMOID, &[x], 0, 0)
    }
    /// max(x, 0).
    pub fn relu(&mut self, x: Expr) -> Result<Expr> {
        self.apply_with_data(&RELU, &[x], 0, 0)
    }
    /// e^x.
    pub fn exp(&mut self, x: Expr) -> Result<Expr> {
        self.apply_with_data(&EXP, &[x], 0, 0)
    }
    /// Natural logarithm.
    pub fn log(&mut self, x: Expr) -> Result<Expr> {
        self.apply_with_data(&LOG, &[x], 0, 0)
    }
    /// a + b (equal shapes).
    pub fn add(&mut self, a: Expr, b: Expr) -> Result<Expr> {
        self.apply_with_data(&ADD, &[a, b], 0, 0)
    }
    /// a - b (equal shapes).
    pub fn sub(&mut self, a: Expr, b: Expr) -> Result<Expr> {
        self.apply_with_data(&SUB, &[a, b], 0, 0)
    }
    /// Elementwise product (equal shapes).
    pub fn cmult(&mut self, a: Expr, b: Expr) -> Result<Expr> {
        self.apply_with_data(&CMULT, &[a, b], 0, 0)
    }
    /// Elementwise quotient (equal shapes).
    pub fn cdiv(&mut self, a: Expr, b: Expr) -> Result<Expr> {
        self.apply_with_data(&CDIV, &[a, b], 0, 0)
    }
    /// alpha * x; nodes with different alphas never share a batch.
    pub fn scale(&mut self, x: Expr, alpha: f32) -> Result<Expr> {
        self.apply_with_data(&SCALE, &[x], alpha.to_bits() as u64, 0)
    }
}
