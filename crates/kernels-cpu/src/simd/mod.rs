//! ISA-specific kernels. The only place in the crate with `unsafe`: each
//! function is a `#[target_feature]` function called from a safe entry point
//! in the family module (`crate::gemm`, `crate::elementwise`, ...) after
//! that entry point has checked every length the function relies on, plus
//! the two instructions that read and write the SSE control register
//! (`mxcsr`, used by [`crate::denormals`]).

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod math_consts;
#[cfg(target_arch = "x86_64")]
pub(crate) mod mxcsr;
#[cfg(target_arch = "x86_64")]
pub(crate) mod tiles;
