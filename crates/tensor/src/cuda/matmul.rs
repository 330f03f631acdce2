//! MatmulOps for the CUDA backend: cuBLAS sgemm. Degenerate products are
//! handled as on the CPU (k = 0: `out = beta out`).
#![allow(clippy::too_many_arguments)]

use sheaf_kernels_cuda::Operand;

use super::{cuda_err, CudaBackend};
use crate::backend::MatmulOps;
use crate::check;
use crate::error::Result;
use crate::{Tensor, TensorMut, Transpose};

impl MatmulOps for CudaBackend {
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
        let (a, b) = (self.f32_in(OP, "a", a)?, self.f32_in(OP, "b", b)?);
        let mut c = self.f32_out(OP, "out", out)?;
        if d.m == 0 || d.n == 0 {
            return Ok(());
        }
        if d.k == 0 {
            let k = &self.kernels;
            return if beta == 0.0 {
                k.fill(0.0, &mut c)
            } else {
                k.scale_inplace(beta, &mut c)
            }
            .map_err(cuda_err(OP));
        }
        let a = Operand {
            data: &a,
            transposed: ta == Transpose::Yes,
            ld: d.lda,
        };
        let b = Operand {
            data: &b,
            transposed: tb == Transpose::Yes,
            ld: d.ldb,
        };
        self.kernels
            .sgemm(d.m, d.n, d.k, alpha, a, b, beta, &mut c, d.ldc)
            .map_err(cuda_err(OP))
    }
}
