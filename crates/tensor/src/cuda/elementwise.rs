//! ElementwiseOps for the CUDA backend.

use sheaf_kernels_cuda::{Map, Zip};

use super::{cuda_err, CudaBackend};
use crate::backend::{Binary, ElementwiseOps, Unary};
use crate::check::Check;
use crate::error::Result;
use crate::{Tensor, TensorMut};

fn map(op: Unary) -> Map {
    match op {
        Unary::Tanh => Map::Tanh,
        Unary::Sigmoid => Map::Sigmoid,
        Unary::Relu => Map::Relu,
        Unary::Exp => Map::Exp,
        Unary::Log => Map::Log,
    }
}

impl ElementwiseOps for CudaBackend {
    fn unary(&self, op: Unary, x: &Tensor, y: TensorMut<'_>) -> Result<()> {
        let name = op.name();
        Check(name).expect("y", x.shape(), y.shape())?;
        let (x, mut y) = (self.f32_in(name, "x", x)?, self.f32_out(name, "y", y)?);
        self.kernels
            .map(map(op), &x, &mut y)
            .map_err(cuda_err(name))
    }

    fn unary_inplace(&self, op: Unary, x: TensorMut<'_>) -> Result<()> {
        let name = op.inplace_name();
        let mut x = self.f32_out(name, "x", x)?;
        self.kernels
            .map_inplace(map(op), &mut x)
            .map_err(cuda_err(name))
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
        // The derivative reads the output where it can (as on the CPU).
        let v = if op.bwd_uses_output() {
            self.f32_in(name, "y", y)?
        } else {
            self.f32_in(name, "x", x)?
        };
        let dy = self.f32_in(name, "dy", dy)?;
        let mut dx = self.f32_out(name, "dx", dx)?;
        self.kernels
            .map_bwd(map(op), &v, &dy, &mut dx)
            .map_err(cuda_err(name))
    }

    fn binary(&self, op: Binary, a: &Tensor, b: &Tensor, y: TensorMut<'_>) -> Result<()> {
        let name = op.name();
        let ck = Check(name);
        ck.same(a.shape(), b.shape())?;
        ck.expect("y", a.shape(), y.shape())?;
        let (a, b) = (self.f32_in(name, "a", a)?, self.f32_in(name, "b", b)?);
        let mut y = self.f32_out(name, "y", y)?;
        let f = match op {
            Binary::Add => Zip::Add,
            Binary::Sub => Zip::Sub,
            Binary::Mul => Zip::Mul,
            Binary::Div => Zip::Div,
        };
        self.kernels.zip(f, &a, &b, &mut y).map_err(cuda_err(name))
    }

    fn scale(&self, alpha: f32, x: &Tensor, y: TensorMut<'_>) -> Result<()> {
        const OP: &str = "scale";
        Check(OP).expect("y", x.shape(), y.shape())?;
        let (x, mut y) = (self.f32_in(OP, "x", x)?, self.f32_out(OP, "y", y)?);
        self.kernels.scale(alpha, &x, &mut y).map_err(cuda_err(OP))
    }

    fn axpy(&self, alpha: f32, x: &Tensor, y: TensorMut<'_>) -> Result<()> {
        const OP: &str = "axpy";
        Check(OP).expect("y", x.shape(), y.shape())?;
        let (x, mut y) = (self.f32_in(OP, "x", x)?, self.f32_out(OP, "y", y)?);
        self.kernels.axpy(alpha, &x, &mut y).map_err(cuda_err(OP))
    }

    fn mul_acc(&self, a: &Tensor, b: &Tensor, y: TensorMut<'_>) -> Result<()> {
        const OP: &str = "mul_acc";
        let ck = Check(OP);
        ck.same(a.shape(), b.shape())?;
        ck.expect("y", a.shape(), y.shape())?;
        let (a, b) = (self.f32_in(OP, "a", a)?, self.f32_in(OP, "b", b)?);
        let mut y = self.f32_out(OP, "y", y)?;
        self.kernels.mul_acc(&a, &b, &mut y).map_err(cuda_err(OP))
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
            self.f32_in(OP, "a", a)?,
            self.f32_in(OP, "b", b)?,
            self.f32_in(OP, "dy", dy)?,
        );
        let (mut da, mut db) = (self.f32_out(OP, "da", da)?, self.f32_out(OP, "db", db)?);
        self.kernels
            .div_bwd(&a, &b, &dy, &mut da, &mut db)
            .map_err(cuda_err(OP))
    }

    fn scale_rows(&self, x: &Tensor, s: &Tensor, y: TensorMut<'_>, accumulate: bool) -> Result<()> {
        const OP: &str = "scale_rows";
        let cols = crate::check::scale_rows(x.shape(), s.shape(), y.shape())?;
        let (x, s) = (self.f32_in(OP, "x", x)?, self.f32_in(OP, "s", s)?);
        let mut y = self.f32_out(OP, "y", y)?;
        self.kernels
            .scale_rows(&x, cols, &s, &mut y, accumulate)
            .map_err(cuda_err(OP))
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
        let (x, mut best) = (self.f32_in(OP, "x", x)?, self.f32_out(OP, "best", best)?);
        let mut arg = self.u32_out(OP, "arg", arg)?;
        self.kernels
            .max_update(&x, k, &mut best, &mut arg)
            .map_err(cuda_err(OP))
    }

    fn max_route(&self, dy: &Tensor, arg: &Tensor, k: u32, dx: TensorMut<'_>) -> Result<()> {
        const OP: &str = "max_route";
        let ck = Check(OP);
        ck.expect("arg", dy.shape(), arg.shape())?;
        ck.expect("dx", dy.shape(), dx.shape())?;
        let (dy, arg) = (self.f32_in(OP, "dy", dy)?, self.u32_in(OP, "arg", arg)?);
        let mut dx = self.f32_out(OP, "dx", dx)?;
        self.kernels
            .max_route(&dy, &arg, k, &mut dx)
            .map_err(cuda_err(OP))
    }
}
