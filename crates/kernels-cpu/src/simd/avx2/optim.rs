//! The optimizer updates (`crate::optim`) compiled with AVX2 + FMA.

/// AVX2 build of `crate::optim::apply`, the optimizer updates (measured:
/// Adam ~2x the SSE2 build on in-cache data).
///
/// # Safety
/// The CPU must support AVX2 and FMA (the caller holds a `CpuKernels` with
/// isa `Avx2`). The body is safe slice code: it places no requirement on
/// the arguments.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn optim_apply(
    u: &crate::optim::Update,
    p: &mut [f32],
    g: &[f32],
    a: &mut [f32],
    b: &mut [f32],
) {
    crate::optim::apply(u, p, g, a, b)
}
