//! ElementwiseOps for the CPU backend.

use super::{f32_in, f32_out, CpuBackend};
use crate::backend::{Binary, ElementwiseOps, Unary};
use crate::check::Check;
use crate::error::{Result, TensorError};
use crate::{Tensor, TensorMut};

impl ElementwiseOps for CpuBackend {
    fn unary(&self, op: Unary, x: &Tensor, y: TensorMut<'_>) -> Result<()> {
        let name = op.name();
        Check(name).expect("y", x.shape(), y.shape())?;
        let (x, y) = (f32_in(name, "x", x)?, f32_out(name, "y", y)?);
        let k = &self.kernels;
        match op {
            Unary::Tanh => k.tanh(x, y),
            Unary::Sigmoid => k.sigmoid(x, y),
            Unary::Relu => k.relu(x, y),
            Unary::Exp => k.exp(x, y),
            Unary::Log => k.log(x, y),
        }
        .map_err(TensorError::kernel(name))
    }

    fn unary_inplace(&self, op: Unary, x: TensorMut<'_>) -> Result<()> {
        let name = op.inplace_name();
        let x = f32_out(name, "x", x)?;
        let k = &self.kernels;
        match op {
            Unary::Tanh => k.tanh_inplace(x),
            Unary::Sigmoid => k.sigmoid_inplace(x),
            Unary::Relu => k.relu_inplace(x),
            Unary::Exp => k.exp_inplace(x),
            Unary::Log => k.log_inplace(x),
        }
        .map_err(TensorError::kernel(name))
    }

    fn unary_bwd(
        &self,
        op: Unary,
        x: &Tensor,
        y: &Tensor,
        dy: &Tensor,
        dx: TensorMut<'_>,
    ) -> Result<()> {
        let name = op.bwd_name();
        let ck = Check(name);
        ck.same(x.shape(), y.shape())?;
        ck.expect("dy", x.shape(), dy.shape())?;
        ck.expect("dx", x.shape(), dx.shape())?;
        let (x, y, dy) = (
            f32_in(name, "x", x)?,
            f32_in(name, "y", y)?,
            f32_in(name, "dy", dy)?,
        );
        let dx = f32_out(name, "dx", dx)?;
        let k = &self.kernels;
        match op {
            Unary::Tanh => k.tanh_bwd(y, dy, dx),
            Unary::Sigmoid => k.sigmoid_bwd(y, dy, dx),
            Unary::Relu => k.relu_bwd(x, dy, dx),
            Unary::Exp => k.exp_bwd(y, dy, dx),
            Unary::Log => k.log_bwd(x, dy, dx),
        }
        .map_err(TensorError::kernel(name))
    }

    fn binary(&self, op: Binary, a: &Tensor, b: &Tensor, y: TensorMut<'_>) -> Result<()> {
        let name = op.name();
        let ck = Check(name);
        ck.same(a.shape(), b.shape())?;
        ck.expect("y", a.shape(), y.shape())?;
        let (a, b, y) = (
            f32_in(name, "a", a)?,
            f32_in(name, "b", b)?,
            f32_out(name, "y", y)?,
        );
        let k = &self.kernels;
        match op {
            Binary::Add => k.add(a, b, y),
            Binary::Sub => k.sub(a, b, y),
            Binary::Mul => k.mul(a, b, y),
            Binary::Div => k.div(a, b, y),
        }
        .map_err(TensorError::kernel(name))
    }

    fn scale(&self, alpha: f32, x: &Tensor, y: TensorMut<'_>) -> Result<()> {
        const OP: &str = "scale";
        Check(OP).expect("y", x.shape(), y.shape())?;
        let (x, y) = (f32_in(OP, "x", x)?, f32_out(OP, "y", y)?);
        self.kernels
            .scale(alpha, x, y)
            .map_err(TensorError::kernel(OP))
    }

    fn axpy(&self, alpha: f32, x: &Tensor, y: TensorMut<'_>) -> Result<()> {
        const OP: &str = "axpy";
        Check(OP).expect("y", x.shape(), y.shape())?;
        let (x, y) = (f32_in(OP, "x", x)?, f32_out(OP, "y", y)?);
        self.kernels
            .axpy(alpha, x, y)
            .map_err(TensorError::kernel(OP))
    }

    fn mul_acc(&self, a: &Tensor, b: &Tensor, y: TensorMut<'_>) -> Result<()> {
        const OP: &str = "mul_acc";
        let ck = Check(OP);
        ck.same(a.shape(), b.shape())?;
        ck.expect("y", a.shape(), y.shape())?;
        let (a, b, y) = (
            f32_in(OP, "a", a)?,
            f32_in(OP, "b", b)?,
            f32_out(OP, "y", y)?,
        );
        self.kernels
            .mul_acc(a, b, y)
            .map_err(TensorError::kernel(OP))
    }

    fn div_bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        dy: &Tensor,
        da: TensorMut<'_>,
        db: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "div_bwd";
        let ck = Check(OP);
        ck.same(a.shape(), b.shape())?;
        ck.expect("dy", a.shape(), dy.shape())?;
        ck.expect("da", a.shape(), da.shape())?;
        ck.expect("db", a.shape(), db.shape())?;
        let (a, b, dy) = (
            f32_in(OP, "a", a)?,
            f32_in(OP, "b", b)?,
            f32_in(OP, "dy", dy)?,
        );
        let (da, db) = (f32_out(OP, "da", da)?, f32_out(OP, "db", db)?);
        self.kernels
            .div_bwd(a, b, dy, da, db)
            .map_err(TensorError::kernel(OP))
    }

    fn scale_rows(&self, x: &Tensor, s: &Tensor, y: TensorMut<'_>, accumulate: bool) -> Result<()> {
        const OP: &str = "scale_rows";
        let cols = crate::check::scale_rows(x.shape(), s.shape(), y.shape())?;
        let (x, s) = (f32_in(OP, "x", x)?, f32_in(OP, "s", s)?);
        let y = f32_out(OP, "y", y)?;
        self.kernels
            .scale_rows(x, cols, s, y, accumulate)
            .map_err(TensorError::kernel(OP))
    }

    fn max_update(
        &self,
        x: &Tensor,
        k: u32,
        best: TensorMut<'_>,
        arg: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "max_update";
        let ck = Check(OP);
        ck.expect("best", x.shape(), best.shape())?;
        ck.expect("arg", x.shape(), arg.shape())?;
        let (x, best) = (f32_in(OP, "x", x)?, f32_out(OP, "best", best)?);
        let arg = super::output::<u32>(OP, "arg", arg)?;
        self.kernels
            .max_update(x, k, best, arg)
            .map_err(TensorError::kernel(OP))
    }

    fn max_route(&self, dy: &Tensor, arg: &Tensor, k: u32, dx: TensorMut<'_>) -> Result<()> {
        const OP: &str = "max_route";
        let ck = Check(OP);
        ck.expect("arg", dy.shape(), arg.shape())?;
        ck.expect("dx", dy.shape(), dx.shape())?;
        let (dy, arg) = (f32_in(OP, "dy", dy)?, super::u32_in(OP, "arg", arg)?);
        let dx = f32_out(OP, "dx", dx)?;
        self.kernels
            .max_route(dy, arg, k, dx)
            .map_err(TensorError::kernel(OP))
    }
}
