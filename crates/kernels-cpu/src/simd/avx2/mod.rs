//! AVX2 + FMA kernels (x86-64). Callers must hold a `CpuKernels` whose ISA
//! is `Avx2`, which proves the CPU supports both features.

pub(crate) mod cells;
pub(crate) mod elementwise;
pub(crate) mod gemm;
pub(crate) mod math;
pub(crate) mod optim;
pub(crate) mod softmax;
