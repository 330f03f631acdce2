//! AVX-512 elementwise kernels, built on [`zip_map`]; each is the AVX2
//! kernel of the same name (`simd::avx2::elementwise`) on 16 lanes, with the
//! same per-lane arithmetic, hence the same results bit for bit.
//!
//! Only the kernels that measured faster than their AVX2 version are here;
//! the others are the AVX2 ones, re-exported (see the figures below), so
//! that `crate::elementwise` dispatches every name for an `Avx512` handle.
//!
//! Kernels are `unsafe fn` only because they are compiled for AVX-512F (and
//! AVX2 + FMA); they are bounds-safe on any slices (they process the first
//! `min(len)` elements; the safe entry points in `crate::elementwise` have
//! checked that the lengths are equal).

use core::arch::x86_64::*;

use super::math::{exp_ps, log_ps, sigmoid_ps, tanh_ps};

/// Lanes per vector.
const W: usize = 16;

/// Walks `ins` and `outs` (read-modify-write) together, 16 lanes at a time:
/// `outs[.., i..i+16] = f(ins[.., i..i+16], outs[.., i..i+16])`. The last
/// `len % 16` elements go through masked loads and stores (masked-off lanes
/// read as 0.0 and are never written), so there is no scalar tail and no
/// overlap. `f` must be lane-wise.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn zip_map<const NI: usize, const NO: usize>(
    ins: [&[f32]; NI],
    mut outs: [&mut [f32]; NO],
    f: impl Fn([__m512; NI], [__m512; NO]) -> [__m512; NO],
) {
    let n = ins
        .iter()
        .map(|s| s.len())
        .chain(outs.iter().map(|s| s.len()))
        .min()
        .unwrap_or(0);
    // Every call below has i + 16 <= n, or i < n and a mask of the first
    // n - i lanes; every slice has at least n elements.
    let at = |s: &[f32], i: usize| {
        debug_assert!(i + W <= s.len());
        // SAFETY: i + 16 <= n <= s.len(): 16 readable f32s.
        unsafe { _mm512_loadu_ps(s.as_ptr().add(i)) }
    };
    let step = |i: usize, outs: &[&mut [f32]; NO]| {
        f(
            core::array::from_fn(|k| at(ins[k], i)),
            core::array::from_fn(|k| at(outs[k], i)),
        )
    };
    let put = |outs: &mut [&mut [f32]; NO], i: usize, r: [__m512; NO]| {
        for (s, v) in outs.iter_mut().zip(r) {
            debug_assert!(i + W <= s.len());
            // SAFETY: i + 16 <= n <= s.len(): 16 writable f32s.
            unsafe { _mm512_storeu_ps(s.as_mut_ptr().add(i), v) };
        }
    };
    let mut i = 0;
    // Two vectors per iteration, as in the AVX2 loop.
    while i + 2 * W <= n {
        let r0 = step(i, &outs);
        let r1 = step(i + W, &outs);
        put(&mut outs, i, r0);
        put(&mut outs, i + W, r1);
        i += 2 * W;
    }
    if i + W <= n {
        let r = step(i, &outs);
        put(&mut outs, i, r);
        i += W;
    }
    if i < n {
        let m: __mmask16 = (1u16 << (n - i)) - 1; // n - i in 1..16
        let load = |s: &[f32]| {
            debug_assert!(i < n && n <= s.len());
            // SAFETY: the mask enables lanes i..n, within `s`; masked-off
            // lanes are not accessed (no fault, no read).
            unsafe { _mm512_maskz_loadu_ps(m, s.as_ptr().add(i)) }
        };
        let r = f(ins.map(load), core::array::from_fn(|k| load(outs[k])));
        for (s, v) in outs.iter_mut().zip(r) {
            // SAFETY: as for `load`: only lanes i..n, within `s`, are written.
            unsafe { _mm512_mask_storeu_ps(s.as_mut_ptr().add(i), m, v) };
        }
    }
}

/// Declares AVX-512 kernels that share one safety contract.
macro_rules! kernels {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $body:block)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// The CPU must support AVX-512F, AVX2 and FMA (a `CpuKernels` with
        /// ISA `Avx512` proves it). Any slice lengths are memory-safe.
        #[target_feature(enable = "avx512f,avx2,fma")]
        pub(crate) unsafe fn $name($($arg: $ty),*) $body
    )*};
}

// Measured on a 2-core Intel Xeon VM with AVX-512 (family 6 model 167),
// one thread, an `Avx2` and an `Avx512` handle timed in alternation (median
// of 21-41 runs each, the slices at 4 alignments): AVX2 time / AVX-512 time
// at 150 / 450 / 600 / 1200 / 4800 / 65536 elements.
//   tanh 1.21 1.34 1.33 1.35 1.36 1.35     tanh_inplace    1.46 1.49 1.49 1.43 1.38 1.18
//   sigmoid 1.34 1.36 1.25 1.34 1.35 1.35  sigmoid_inplace 1.49 1.42 1.42 1.36 1.36 1.19
//   exp 1.32 1.36 1.44 1.49 1.52 1.48      exp_inplace     1.66 1.53 1.50 1.49 1.45 1.28
//   log 2.11 2.20 2.38 2.43 2.42 2.41      log_inplace     2.07 2.41 2.33 2.35 2.36 1.98
//   axpy 1.00 1.20 1.09 1.18 1.18 0.98     relu_bwd        0.97 1.11 1.17 1.16 1.19 1.20
kernels! {
    /// y += alpha x
    fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        let al = _mm512_set1_ps(alpha);
        zip_map([x], [y], |[x], [y]| [_mm512_fmadd_ps(al, x, y)])
    }
    /// y = tanh x
    fn tanh(x: &[f32], y: &mut [f32]) {
        zip_map([x], [y], |[x], _| [tanh_ps(x)])
    }
    /// y = sigmoid x
    fn sigmoid(x: &[f32], y: &mut [f32]) {
        zip_map([x], [y], |[x], _| [sigmoid_ps(x)])
    }
    /// y = e^x
    fn exp(x: &[f32], y: &mut [f32]) {
        zip_map([x], [y], |[x], _| [exp_ps(x)])
    }
    /// y = ln x
    fn log(x: &[f32], y: &mut [f32]) {
        zip_map([x], [y], |[x], _| [log_ps(x)])
    }
    /// x = tanh x
    fn tanh_inplace(x: &mut [f32]) {
        zip_map([], [x], |[], [x]| [tanh_ps(x)])
    }
    /// x = sigmoid x
    fn sigmoid_inplace(x: &mut [f32]) {
        zip_map([], [x], |[], [x]| [sigmoid_ps(x)])
    }
    /// x = e^x
    fn exp_inplace(x: &mut [f32]) {
        zip_map([], [x], |[], [x]| [exp_ps(x)])
    }
    /// x = ln x
    fn log_inplace(x: &mut [f32]) {
        zip_map([], [x], |[], [x]| [log_ps(x)])
    }
    /// dx += dy where x > 0 (a select: dy is not multiplied by 0)
    fn relu_bwd(x: &[f32], dy: &[f32], dx: &mut [f32]) {
        zip_map([x, dy], [dx], |[x, dy], [dx]| {
            let pos = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_setzero_ps());
            // dx + 0.0 where x <= 0, as in AVX2 (turns -0.0 into +0.0).
            [_mm512_add_ps(dx, _mm512_maskz_mov_ps(pos, dy))]
        })
    }
}

// Not faster with AVX-512 here: the AVX2 kernels. Same measurements, AVX2
// time / AVX-512 time at 150 / 450 / 600 / 1200 / 4800 / 65536 elements
// (two runs where they differed). The memory-bound ones gain 5-30% while
// their slices stay in L1 and lose 5-20% beyond it (4800 elements of three
// or four slices, and L2-sized 64k); the divisions lose everywhere.
//   add     1.04 1.30 1.09 1.19 0.98 0.92-0.94   mul_acc     1.01 1.03 1.03 1.07 0.82 0.80
//   sub     1.02 1.28 1.07 1.14 0.98 0.90-0.96   tanh_bwd    0.99 1.05 1.07 1.05 0.86 0.85
//   mul     1.02 1.13 1.05 1.14 0.97 0.91-0.94   sigmoid_bwd 1.09 1.12 1.15 1.17 0.89 0.89-0.94
//   scale   1.04 1.11 1.06 1.16 1.20 0.86-0.89   exp_bwd     1.04 1.02 1.05 1.04 0.80 0.82-0.84
//   relu    1.03 1.09 1.02 1.19 1.20 0.86-0.87   div         0.88 0.91 0.92 0.91 0.91 0.92
//   log_bwd 0.88 0.91 0.94 0.91 0.93 0.93        div_bwd     0.87 0.91 0.93 0.93 0.93 0.92
//   relu_inplace 1.01 1.03 1.05 1.14 1.07 1.01 with slices at 4 alignments,
//                but 0.63-0.92 at 150 and 450 in runs on single allocations.
pub(crate) use crate::simd::avx2::elementwise::{
    add, div, div_bwd, exp_bwd, log_bwd, mul, mul_acc, relu, relu_inplace, scale, sigmoid_bwd, sub,
    tanh_bwd,
};
