//! Helpers of the GPU-vs-CPU parity tests: the device (or why not), a
//! deterministic random generator, device round trips and the comparisons.
//!
//! Tolerances. Every comparison checks `|gpu - cpu| <= bound` element by
//! element, with `bound = atol + rtol * |cpu|` unless a test documents
//! another bound:
//! - [`ARITH`] (`atol = rtol = 1e-5`): kernels doing only +, -, *, / and
//!   sqrt. Both sides round every operation correctly, but nvcc contracts
//!   `a * b + c` into FMAs where the CPU may not (and the AVX2 build uses
//!   FMA where the scalar one does not), so results may differ in the last
//!   bits; 1e-5 is about 80 ulp near 1.
//! - [`TRANSC`] (`atol = rtol = 2e-5`): kernels with exp / log / tanh /
//!   sigmoid. The CPU evaluates them with its own vectorised polynomial
//!   approximations (`simd::avx2::math`), the GPU with CUDA's `expf`,
//!   `logf`, `tanhf`; both are within a few ulp of the true value, and the
//!   errors propagate through a few more operations in the fused kernels.
//! - Reductions (row / column sums, GEMM) are bounded relative to the sum
//!   of the MAGNITUDES of their terms, not of the result, since the two
//!   sides add in different orders and a cancelling sum may be tiny.

#![allow(dead_code)]

use sheaf_kernels_cuda::{CudaKernels, CudaSlice};

/// The device under test, or `None` (with the reason printed) on a machine
/// without CUDA: every parity test returns early then. Under
/// `SHEAF_REQUIRE_GPU=1` (the GPU bundle sets it) a device that fails to
/// open fails the test instead.
pub fn gpu() -> Option<CudaKernels> {
    match CudaKernels::new(0) {
        Ok(k) => Some(k),
        Err(e) if sheaf_kernels_cuda::gpu_required() => {
            panic!(
                "{}=1, but cuda:0 did not open: {e}",
                sheaf_kernels_cuda::REQUIRE_GPU_VAR
            )
        }
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

/// What every test returns: kernel errors propagate with `?`.
pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// xorshift64*: small, deterministic, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Any nonzero state works; spread small seeds over the bits.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`, 24 random bits.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// `n` values of magnitude in `[0.5, 1.5)` and random sign: the initial
    /// contents of accumulated gradients, far enough from zero that an
    /// overwrite instead of an accumulation cannot pass.
    pub fn away_from_zero(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let v = self.uniform(0.5, 1.5);
                if self.next_u64() & 1 == 0 {
                    v
                } else {
                    -v
                }
            })
            .collect()
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % u64::from(n)) as u32
    }

    /// `len` indices below `n`.
    pub fn indices(&mut self, len: usize, n: u32) -> Vec<u32> {
        (0..len).map(|_| self.below(n)).collect()
    }
}

/// An absolute plus relative tolerance: `|gpu - cpu| <= atol + rtol |cpu|`.
#[derive(Debug, Clone, Copy)]
pub struct Tol {
    pub atol: f32,
    pub rtol: f32,
}

/// Arithmetic-only kernels (see the module docs).
pub const ARITH: Tol = Tol {
    atol: 1e-5,
    rtol: 1e-5,
};

/// Kernels with transcendental functions: the CPU uses its own vectorised
/// exp / tanh approximations, the GPU CUDA's `expf` / `tanhf`; both are
/// within a few ulp of the true value (see the module docs).
pub const TRANSC: Tol = Tol {
    atol: 2e-5,
    rtol: 2e-5,
};

/// Relative bound of a float sum against the sum of its terms' magnitudes:
/// any summation order of n terms errs by at most about `n eps sum|x|`, in
/// practice (random rounding) by `sqrt(n) eps sum|x|`; 1e-5 is ~80 eps.
pub const SUM_RTOL: f32 = 1e-5;

impl Tol {
    pub fn bound(self, cpu: f32) -> f32 {
        self.atol + self.rtol * cpu.abs()
    }
}

/// Every element within `tol` of the CPU's.
pub fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], tol: Tol) {
    assert_within(what, gpu, cpu, |_, c| tol.bound(c));
}

/// Every element `i` within `bound(i, cpu[i])` of the CPU's. Equal values
/// (infinities included) always pass; a NaN passes only against a NaN.
pub fn assert_within(what: &str, gpu: &[f32], cpu: &[f32], bound: impl Fn(usize, f32) -> f32) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths differ");
    let mut bad = Vec::new();
    let mut n_bad = 0usize;
    for (i, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        let ok = g == c || (c.is_nan() && g.is_nan()) || (g - c).abs() <= bound(i, c);
        if !ok {
            n_bad += 1;
            if bad.len() < 8 {
                bad.push(format!(
                    "  [{i}] gpu {g:e} cpu {c:e} diff {:e} bound {:e}",
                    (g - c).abs(),
                    bound(i, c)
                ));
            }
        }
    }
    assert!(
        n_bad == 0,
        "{what}: {n_bad} of {} elements out of tolerance, first ones:\n{}",
        cpu.len(),
        bad.join("\n")
    );
}

/// Bit-for-bit equality.
pub fn assert_bits_eq(what: &str, gpu: &[f32], cpu: &[f32]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths differ");
    if let Some(i) = (0..cpu.len()).find(|&i| gpu[i].to_bits() != cpu[i].to_bits()) {
        panic!(
            "{what}: element {i} differs: gpu {:e} ({:#010x}) cpu {:e} ({:#010x})",
            gpu[i],
            gpu[i].to_bits(),
            cpu[i],
            cpu[i].to_bits()
        );
    }
}

/// A device copy of `data`.
pub fn up(k: &CudaKernels, data: &[f32]) -> Result<CudaSlice<f32>, sheaf_kernels_cuda::CudaError> {
    k.upload(data)
}

/// The device slice's contents (synchronises; reports device index errors).
pub fn down(
    k: &CudaKernels,
    s: &CudaSlice<f32>,
) -> Result<Vec<f32>, sheaf_kernels_cuda::CudaError> {
    let mut v = vec![0.0f32; s.len()];
    k.download(&s.as_view(), &mut v)?;
    Ok(v)
}

/// Lengths of the elementwise tests: one element, a few blocks, and more
/// than the grid of `elementwise_config` (at most 32 blocks of 256 threads
/// per SM, about 1.1M threads on an H100), so the grid-stride loop turns.
pub const LENS: [usize; 3] = [1, 1000, 2_100_003];

/// What the parity files use, in one import (each file uses part of it).
#[allow(unused_imports)]
pub mod prelude {
    pub use super::{
        assert_bits_eq, assert_close, assert_within, down, gpu, up, Rng, TestResult, Tol, ARITH,
        LENS, SUM_RTOL, TRANSC,
    };
    pub use sheaf_kernels_cpu::optim::{Adagrad, Adam, Sgd};
    pub use sheaf_kernels_cpu::{CpuKernels, Transpose};
    pub use sheaf_kernels_cuda::{
        as_u32, AdamArgs, CudaError, CudaKernels, Map, Operand, PushKernelArg, RowSet, UserKernel,
        Zip,
    };
}
