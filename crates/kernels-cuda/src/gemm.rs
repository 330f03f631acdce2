//! Row-major `sgemm`: small products on a tiled kernel of our own
//! ([`TILED_MAX_MNK`], [`TILED_MAX_KN`]), the rest through cuBLAS (column-major): `C = A B` in row-major
//! is `Cᵀ = Bᵀ Aᵀ` in column-major, so B goes first and m, n swap; the
//! transpose flags and leading dimensions carry over unchanged.
//!
//! Plain fp32 by default. [`CudaKernels::set_tf32`] lets cuBLAS use TF32
//! tensor cores: inputs rounded to a 10-bit mantissa, so products then
//! agree with fp32 to about 1e-3 relative instead of 1e-6.
#![allow(clippy::too_many_arguments)]

use cudarc::cublas::sys::{cublasMath_t, cublasOperation_t};
use cudarc::cublas::{Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaView, CudaViewMut};

use crate::error::{CudaError, Result};
use crate::launch::launch;
use crate::CudaKernels;

/// One operand of a product: row-major, `rows x cols` after the optional
/// transpose, stored with leading dimension `ld`.
#[derive(Debug, Clone, Copy)]
pub struct Operand<'a, 'b> {
    pub data: &'a CudaView<'b, f32>,
    pub transposed: bool,
    pub ld: usize,
}

fn op(t: bool) -> cublasOperation_t {
    if t {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

fn int(kernel: &'static str, what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| CudaError::Invalid {
        kernel,
        what: format!("{what} = {v} exceeds cuBLAS's 32-bit sizes"),
    })
}

/// Elements a row-major `rows x cols` matrix with leading dimension `ld`
/// spans, checking `ld >= cols`.
fn span(
    kernel: &'static str,
    arg: &'static str,
    rows: usize,
    cols: usize,
    ld: usize,
) -> Result<usize> {
    if ld < cols.max(1) {
        return Err(CudaError::Invalid {
            kernel,
            what: format!("`{arg}`: leading dimension {ld} < {cols} columns"),
        });
    }
    Ok(if rows == 0 { 0 } else { (rows - 1) * ld + cols })
}

/// Products of at most this many multiply-adds (`m n k`) run on the
/// tiled kernel (`kernels/gemm.cu`), larger ones on cuBLAS. A cuBLAS call
/// cost 22-47 us of host time on the GPU machines (H100 under gVisor,
/// `bench-gpu`'s per-kernel times) against 4-5 us for a launch of our own;
/// the tiled kernel runs at a few TFLOP/s, so up to 2^26 multiply-adds
/// (e.g. 256 x 750 x 300, W1's largest) its device time stays below what
/// cuBLAS's call alone costs the host, and tree models are host-bound.
pub const TILED_MAX_MNK: usize = 1 << 26;

/// ... and whose `op(B)` has at most this many elements: a product of few
/// rows with a large `B` (W3 at state 1024, batch 1: 1 x 2048 x 5120) is
/// a matrix-vector product bound by reading `B`, which the tiled kernel,
/// one 64-column block per thread block, does 2x slower than cuBLAS on
/// the device (measured: W3 state 1024 batch 1 1.41 -> 2.88 ms per tree
/// with it), and there the device, not the host, is the bound.
pub const TILED_MAX_KN: usize = 1 << 20;

impl CudaKernels {
    /// The tiled kernel for small products (see [`TILED_MAX_MNK`]); sizes
    /// already checked by `gemm_config`.
    fn sgemm_tiled(
        &self,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: Operand,
        b: Operand,
        beta: f32,
        c: &mut CudaViewMut<'_, f32>,
        ldc: usize,
    ) -> Result<()> {
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (n.div_ceil(64) as u32, m.div_ceil(64) as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (m, n, k) = (m as u64, n as u64, k as u64);
        let (lda, ldb, ldc) = (a.ld as u64, b.ld as u64, ldc as u64);
        let (ta, tb) = (u32::from(a.transposed), u32::from(b.transposed));
        launch!(
            self,
            "sgemm_tiled",
            cfg,
            [a.data, b.data, c, &m, &n, &k, &lda, &ldb, &ldc, &ta, &tb, &alpha, &beta]
        )
    }

    /// Lets cuBLAS use TF32 tensor cores for fp32 products (off by default).
    pub fn set_tf32(&self, on: bool) -> Result<()> {
        let mode = if on {
            cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        self.bind("set_tf32")?;
        // SAFETY: the handle is this struct's live cuBLAS handle; setting
        // its math mode touches no memory.
        unsafe { cudarc::cublas::sys::cublasSetMathMode(*self.blas.handle(), mode) }
            .result()
            .map_err(|source| CudaError::Blas {
                kernel: "set_tf32",
                source,
            })
    }

    /// `c = alpha op(a) op(b) + beta c`, row-major, `c` is `m x n` with
    /// leading dimension `ldc`, `op(a)` is `m x k`, `op(b)` is `k x n`.
    pub fn sgemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: Operand,
        b: Operand,
        beta: f32,
        c: &mut CudaViewMut<'_, f32>,
        ldc: usize,
    ) -> Result<()> {
        const K: &str = "sgemm";
        let lens = [a.data.len(), b.data.len(), c.len()];
        let cfg = self.gemm_config(m, n, k, alpha, &a, &b, beta, lens, ldc)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        // (A grid's y extent is at most 65,535 blocks of 64 rows.)
        let small = m.saturating_mul(n).saturating_mul(k) <= TILED_MAX_MNK
            && k.saturating_mul(n) <= TILED_MAX_KN
            && m.div_ceil(64) <= 65_535;
        if small {
            return self.sgemm_tiled(m, n, k, alpha, a, b, beta, c, ldc);
        }
        self.bind(K)?;
        let _api = self.count_launch(K);
        // SAFETY: `gemm_config` checked that a, b and c hold every element
        // the product addresses with these sizes and leading dimensions.
        unsafe { self.blas.gemm(cfg, b.data, a.data, c) }
            .map_err(|source| CudaError::Blas { kernel: K, source })
    }

    /// `batch` equal products, operand i starting `stride_*` elements after
    /// operand i - 1 (one cuBLAS call).
    pub fn sgemm_strided_batched(
        &self,
        batch: usize,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        (a, stride_a): (Operand, usize),
        (b, stride_b): (Operand, usize),
        beta: f32,
        (c, stride_c, ldc): (&mut CudaViewMut<'_, f32>, usize, usize),
    ) -> Result<()> {
        const K: &str = "sgemm_strided_batched";
        if batch == 0 || m == 0 || n == 0 {
            return Ok(());
        }
        // The last product lies farthest from each base: check it alone.
        let tail = |arg: &'static str, stride: usize, len: usize| {
            len.checked_sub(stride.saturating_mul(batch - 1))
                .ok_or(CudaError::Len {
                    kernel: K,
                    arg,
                    got: len,
                    expected: stride.saturating_mul(batch - 1),
                })
        };
        let lens = [
            tail("a", stride_a, a.data.len())?,
            tail("b", stride_b, b.data.len())?,
            tail("c", stride_c, c.len())?,
        ];
        let gemm = self.gemm_config(m, n, k, alpha, &a, &b, beta, lens, ldc)?;
        let cfg = StridedBatchedConfig {
            gemm,
            batch_size: int(K, "batch", batch)?,
            stride_a: stride_b as i64,
            stride_b: stride_a as i64,
            stride_c: stride_c as i64,
        };
        self.bind(K)?;
        let _api = self.count_launch(K);
        // SAFETY: the last of the `batch` products (the farthest from each
        // base) was checked to lie inside a, b and c, so every product does.
        unsafe { self.blas.gemm_strided_batched(cfg, b.data, a.data, c) }
            .map_err(|source| CudaError::Blas { kernel: K, source })
    }

    /// Checks sizes against the slices and builds cuBLAS's column-major
    /// configuration (operands swapped).
    fn gemm_config(
        &self,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: &Operand,
        b: &Operand,
        beta: f32,
        [a_len, b_len, c_len]: [usize; 3],
        ldc: usize,
    ) -> Result<GemmConfig<f32>> {
        const K: &str = "sgemm";
        let (ar, ac) = if a.transposed { (k, m) } else { (m, k) };
        let (br, bc) = if b.transposed { (n, k) } else { (k, n) };
        for (arg, rows, cols, ld, len) in [
            ("a", ar, ac, a.ld, a_len),
            ("b", br, bc, b.ld, b_len),
            ("c", m, n, ldc, c_len),
        ] {
            let need = span(K, arg, rows, cols, ld)?;
            if len < need {
                return Err(CudaError::Len {
                    kernel: K,
                    arg,
                    got: len,
                    expected: need,
                });
            }
        }
        Ok(GemmConfig {
            transa: op(b.transposed),
            transb: op(a.transposed),
            m: int(K, "n", n)?,
            n: int(K, "m", m)?,
            k: int(K, "k", k)?,
            alpha,
            lda: int(K, "ldb", b.ld)?,
            ldb: int(K, "lda", a.ld)?,
            beta,
            ldc: int(K, "ldc", ldc)?,
        })
    }
}
