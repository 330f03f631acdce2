//! Elementwise maps, their derivatives, and the BLAS-1 style updates
//! (`scale`, `axpy`, `mul_acc`) that backward passes are made of.

use std::fmt;

use crate::error::Result;
use crate::{Tensor, TensorMut};

/// Elementwise functions of one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unary {
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `max(x, 0)`.
    Relu,
    /// `exp(x)`.
    Exp,
    /// Natural logarithm.
    Log,
}

impl Unary {
    /// Every unary op.
    pub const ALL: [Unary; 5] = [
        Unary::Tanh,
        Unary::Sigmoid,
        Unary::Relu,
        Unary::Exp,
        Unary::Log,
    ];

    /// The op's name, as in errors and kernel names: `"tanh"`, ...
    pub const fn name(self) -> &'static str {
        match self {
            Unary::Tanh => "tanh",
            Unary::Sigmoid => "sigmoid",
            Unary::Relu => "relu",
            Unary::Exp => "exp",
            Unary::Log => "log",
        }
    }

    /// The name of the in-place form: `"tanh_inplace"`, ...
    pub const fn inplace_name(self) -> &'static str {
        match self {
            Unary::Tanh => "tanh_inplace",
            Unary::Sigmoid => "sigmoid_inplace",
            Unary::Relu => "relu_inplace",
            Unary::Exp => "exp_inplace",
            Unary::Log => "log_inplace",
        }
    }

    /// The name of the derivative: `"tanh_bwd"`, ...
    pub const fn bwd_name(self) -> &'static str {
        match self {
            Unary::Tanh => "tanh_bwd",
            Unary::Sigmoid => "sigmoid_bwd",
            Unary::Relu => "relu_bwd",
            Unary::Exp => "exp_bwd",
            Unary::Log => "log_bwd",
        }
    }

    /// Whether the derivative reads the forward output `y` (tanh, sigmoid,
    /// exp) rather than the input `x` (relu, log): what autodiff must keep.
    pub const fn bwd_uses_output(self) -> bool {
        matches!(self, Unary::Tanh | Unary::Sigmoid | Unary::Exp)
    }
}

impl fmt::Display for Unary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Elementwise functions of two arguments of equal shape (no broadcasting:
/// a bias is added with [`RowOps::broadcast_row`](crate::RowOps::broadcast_row) or [`ElementwiseOps::axpy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binary {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

impl Binary {
    /// Every binary op.
    pub const ALL: [Binary; 4] = [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div];

    /// The op's name, as in errors and kernel names: `"add"`, ...
    pub const fn name(self) -> &'static str {
        match self {
            Binary::Add => "add",
            Binary::Sub => "sub",
            Binary::Mul => "mul",
            Binary::Div => "div",
        }
    }
}

impl fmt::Display for Binary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Elementwise maps, their derivatives, and the BLAS-1 style updates
/// (`scale`, `axpy`, `mul_acc`) that backward passes are made of.
///
/// Part of [`super::Backend`], whose documentation states the contracts
/// shared by every method.
pub trait ElementwiseOps {
    /// `y = op(x)`; `y` has the shape of `x`.
    fn unary(&self, op: Unary, x: &Tensor, y: TensorMut<'_>) -> Result<()>;

    /// `x = op(x)` in place.
    fn unary_inplace(&self, op: Unary, x: TensorMut<'_>) -> Result<()>;

    /// `dx += dy * op'(x)`, where `y = op(x)` is the forward output; the
    /// derivative reads `y` or `x` as [`Unary::bwd_uses_output`] says. All
    /// four tensors have one shape.
    fn unary_bwd(
        &self,
        op: Unary,
        x: &Tensor,
        y: &Tensor,
        dy: &Tensor,
        dx: TensorMut<'_>,
    ) -> Result<()>;

    /// `y = a op b`; all of one shape. (Backward: `add`/`sub` are
    /// [`ElementwiseOps::axpy`] with `±1`, `mul` is [`ElementwiseOps::mul_acc`], `div` is
    /// [`ElementwiseOps::div_bwd`].)
    fn binary(&self, op: Binary, a: &Tensor, b: &Tensor, y: TensorMut<'_>) -> Result<()>;

    /// `y = alpha * x` ("scale").
    fn scale(&self, alpha: f32, x: &Tensor, y: TensorMut<'_>) -> Result<()>;

    /// `y += alpha * x` ("axpy").
    fn axpy(&self, alpha: f32, x: &Tensor, y: TensorMut<'_>) -> Result<()>;

    /// `y += a * b` ("mul_acc").
    fn mul_acc(&self, a: &Tensor, b: &Tensor, y: TensorMut<'_>) -> Result<()>;

    /// Gradients of `y = a / b` ("div_bwd"): `da += dy / b`,
    /// `db -= dy * a / b^2`.
    fn div_bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        dy: &Tensor,
        da: TensorMut<'_>,
        db: TensorMut<'_>,
    ) -> Result<()>;

    /// Row scaling: `y[r, :] = s[r] * x[r, :]` (ADDS instead with
    /// `accumulate`), `s` holding one factor per row of the matrix `x`
    /// (shape `x.shape().without_last()`), `y` shaped like `x`.
    fn scale_rows(&self, x: &Tensor, s: &Tensor, y: TensorMut<'_>, accumulate: bool) -> Result<()>;

    /// One step of a running maximum over a list (max-pooling): where
    /// `x > best`, `best = x` and `arg = k` (`arg` a `u32` tensor; strictly
    /// greater, so the first of equal values stays and NaN never wins). All
    /// three of one shape.
    fn max_update(&self, x: &Tensor, k: u32, best: TensorMut<'_>, arg: TensorMut<'_>)
        -> Result<()>;

    /// The gradient of a maximum to its `k`-th argument: `dx += dy` where
    /// `arg == k` (`arg` a `u32` tensor). All three of one shape.
    fn max_route(&self, dy: &Tensor, arg: &Tensor, k: u32, dx: TensorMut<'_>) -> Result<()>;
}
