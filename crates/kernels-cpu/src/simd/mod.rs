//! ISA-specific kernels. The only place in the crate with `unsafe`: each
//! function is a `#[target_feature]` function called from a safe entry point
//! in the family module (`crate::gemm`, `crate::elementwise`, ...) after
//! that entry point has checked every length the function relies on.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
