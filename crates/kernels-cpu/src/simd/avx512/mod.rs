//! AVX-512 kernels (x86-64). Callers must hold a `CpuKernels` whose ISA is
//! `Avx512`, which proves the CPU supports AVX-512F, AVX2 and FMA.

pub(crate) mod cells;
pub(crate) mod elementwise;
pub(crate) mod gemm;
pub(crate) mod math;
