//! MatmulOps for the CPU backend: `sgemm`.
//!
//! Degenerate products never reach the kernel: with `m` or `n` zero there
//! is nothing to write, and with `k` zero the product is zero, so
//! `out = beta * out` (BLAS semantics: `beta == 0` overwrites with zeros).
//! This keeps leading-dimension rules for empty operands out of the
//! contract between the two crates.
#![allow(clippy::too_many_arguments)]

use std::sync::Arc;

use sheaf_kernels_cpu::gemm::PackedB;

use super::packed::PackKey;
use super::{f32_in, f32_out, CpuBackend};
use crate::backend::{MatmulOps, RowOps};
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
        let b_t = b;
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
        if let Some(packed) = self.packed_weight(b_t, b, tb, &d) {
            return self
                .kernels
                .sgemm_packed(ta, d.m, alpha, a, d.lda, &packed, beta, c, d.ldc, None)
                .map_err(TensorError::kernel(OP));
        }
        self.kernels
            .sgemm(
                ta, tb, d.m, d.n, d.k, alpha, a, d.lda, b, d.ldb, beta, c, d.ldc,
            )
            .map_err(TensorError::kernel(OP))
    }

    /// The bias is added by the packed product's tiles where the weight is
    /// packed, else broadcast first.
    fn matmul_bias(
        &self,
        a_t: &Tensor,
        ta: Transpose,
        b_t: &Tensor,
        tb: Transpose,
        bias_t: &Tensor,
        mut out: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "matmul_bias";
        let d = check::matmul(a_t.shape(), ta, b_t.shape(), tb, out.shape())?;
        check::broadcast_row(bias_t.shape(), out.shape())?;
        if d.m > 0 && d.n > 0 && d.k > 0 {
            let b = f32_in(OP, "b", b_t)?;
            if let Some(packed) = self.packed_weight(b_t, b, tb, &d) {
                let (a, bias) = (f32_in(OP, "a", a_t)?, f32_in(OP, "bias", bias_t)?);
                let c = f32_out(OP, "out", out)?;
                return self
                    .kernels
                    .sgemm_packed(ta, d.m, 1.0, a, d.lda, &packed, 0.0, c, d.ldc, Some(bias))
                    .map_err(TensorError::kernel(OP));
            }
        }
        self.broadcast_row(bias_t, out.reborrow())?;
        self.matmul(a_t, ta, b_t, tb, 1.0, 1.0, out)
    }
}

impl CpuBackend {
    /// B packed once (`cpu/packed.rs`) when it is a weight and the product
    /// gains from it; `b` is `b_t`'s elements.
    fn packed_weight(
        &self,
        b_t: &Tensor,
        b: &[f32],
        tb: Transpose,
        d: &check::MatmulDims,
    ) -> Option<Arc<PackedB>> {
        let cache = b_t.pack_cache()?;
        if !cache.is_weight() || !self.kernels.packs_b(d.m, d.n, d.k) {
            return None;
        }
        let key = PackKey {
            offset: b_t.offset(),
            tb,
            k: d.k,
            n: d.n,
            ldb: d.ldb,
            isa: self.kernels.isa(),
        };
        let packed = cache.get_or_pack(key, |spare| match spare {
            Some(mut p) => self
                .kernels
                .repack_b(&mut p, tb, d.k, d.n, b, d.ldb)
                .map(|()| p),
            None => self.kernels.pack_b(tb, d.k, d.n, b, d.ldb),
        });
        // Packing fails only where its memory cannot be had: the product
        // then runs unpacked, as it would without the mark.
        packed.ok()
    }
}
