//! MatmulOps for the CPU backend: `sgemm`.
//!
//! Degenerate products never reach the kernel: with `m` or `n` zero there
//! is nothing to write, and with `k` zero the product is zero, so
//! `out = beta * out` (BLAS semantics: `beta == 0` overwrites with zeros).
//! This keeps leading-dimension rules for empty operands out of the
//! contract between the two crates.
#![allow(clippy::too_many_arguments)]

use super::{f32_in, f32_out, CpuBackend};
use crate::backend::MatmulOps;
use crate::check;
use crate::error::{Result, TensorError};
use crate::{Tensor, TensorMut, Transpose};

impl MatmulOps for CpuBackend {
    fn matmul(
        &self,
        a: &Tensor,
        ta: Transpose,
        b: &Tensor,
        tb: Transpose,
        alpha: f32,
        beta: f32,
        out: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "matmul";
        let d = check::matmul(a.shape(), ta, b.shape(), tb, out.shape())?;
        let (a, b) = (f32_in(OP, "a", a)?, f32_in(OP, "b", b)?);
        let c = f32_out(OP, "out", out)?;
        if d.m == 0 || d.n == 0 {
            return Ok(());
        }
        if d.k == 0 {
            if beta == 0.0 {
                c.fill(0.0);
            } else {
                c.iter_mut().for_each(|v| *v *= beta);
            }
            return Ok(());
        }
        self.kernels
            .sgemm(
                ta, tb, d.m, d.n, d.k, alpha, a, d.lda, b, d.ldb, beta, c, d.ldc,
            )
            .map_err(TensorError::kernel(OP))
    }
}
