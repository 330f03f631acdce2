//! AVX2 + FMA elementwise kernels, all built on [`zip_map`].
//!
//! Each kernel is an `unsafe fn` only because it is compiled for AVX2 + FMA;
//! it is bounds-safe on any slices (it processes the first `min(len)`
//! elements of all of them; the safe entry points in `crate::elementwise`
//! have already checked that the lengths are equal).

use core::arch::x86_64::*;

use super::math::{exp_ps, log_ps, sigmoid_ps, tanh_ps};

/// Lanes per vector.
pub(crate) const W: usize = 8;

/// `MASK[8 - k..][..8]` has its first `k` lanes set (k in 0..=8).
const MASK: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

/// Lane mask (all-ones lanes) with the first `min(k, 8)` lanes set.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn first_lanes(k: usize) -> __m256i {
    let m = &MASK[W - k.min(W)..];
    // SAFETY: `m` has at least 8 elements (k <= 8); loadu needs no alignment.
    unsafe { _mm256_loadu_si256(m.as_ptr().cast()) }
}

/// The first `min(len, 8)` elements of `s` in the low lanes, `pad` above.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn load_partial(s: &[f32], pad: f32) -> __m256 {
    let mask = first_lanes(s.len());
    // SAFETY: maskload reads only the enabled lanes, the first
    // min(len, 8) elements of `s`; disabled lanes never touch memory.
    let v = unsafe { _mm256_maskload_ps(s.as_ptr(), mask) };
    _mm256_blendv_ps(_mm256_set1_ps(pad), v, _mm256_castsi256_ps(mask))
}

/// Stores the low `min(len, 8)` lanes of `v` into `s`, in 4 / 2 / 1-lane
/// pieces (AMD's masked stores are slow).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn store_partial(s: &mut [f32], v: __m256) {
    let k = s.len().min(W);
    let p = s.as_mut_ptr();
    let mut lo = _mm256_castps256_ps128(v);
    let mut at = 0;
    // SAFETY: the pieces written cover exactly s[..k], within `s`; the
    // 2-lane store is an unaligned 8-byte store, the others unaligned f32s.
    unsafe {
        if k == W {
            return _mm256_storeu_ps(p, v);
        }
        if k & 4 != 0 {
            _mm_storeu_ps(p, lo);
            lo = _mm256_extractf128_ps::<1>(v);
            at = 4;
        }
        if k & 2 != 0 {
            _mm_storeu_si64(p.add(at).cast(), _mm_castps_si128(lo));
            lo = _mm_movehl_ps(lo, lo);
            at += 2;
        }
        if k & 1 != 0 {
            _mm_store_ss(p.add(at), lo);
        }
    }
}

/// Walks `ins` and `outs` (read-modify-write) together, 8 lanes at a time:
/// `outs[.., i..i+8] = f(ins[.., i..i+8], outs[.., i..i+8])`.
///
/// Lengths that are not multiples of 8 end with one overlapping vector over
/// the LAST 8 elements. It is computed from the original data before the
/// main loop writes anything and stored after it, so in-place and
/// accumulating `f` stay correct (the overlap gets the same value twice).
/// Fewer than 8 elements use zero-padded partial loads and stores. `f` must be
/// lane-wise (lane k of the result depends only on lane k of the inputs).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn zip_map<const NI: usize, const NO: usize>(
    ins: [&[f32]; NI],
    mut outs: [&mut [f32]; NO],
    f: impl Fn([__m256; NI], [__m256; NO]) -> [__m256; NO],
) {
    let n = ins
        .iter()
        .map(|s| s.len())
        .chain(outs.iter().map(|s| s.len()))
        .min()
        .unwrap_or(0);
    if n < W {
        let r = f(
            ins.map(|s| load_partial(&s[..n], 0.0)),
            core::array::from_fn(|k| load_partial(&outs[k][..n], 0.0)),
        );
        for (s, v) in outs.iter_mut().zip(r) {
            store_partial(&mut s[..n], v);
        }
        return;
    }
    // Only called below with i + 8 <= n, and every slice has at least n
    // elements (n is the minimum length).
    let at = |s: &[f32], i: usize| {
        debug_assert!(i + W <= s.len());
        // SAFETY: i + 8 <= n <= s.len() (see above): 8 readable f32s.
        unsafe { _mm256_loadu_ps(s.as_ptr().add(i)) }
    };
    let step = |i: usize, outs: &[&mut [f32]; NO]| {
        f(
            core::array::from_fn(|k| at(ins[k], i)),
            core::array::from_fn(|k| at(outs[k], i)),
        )
    };
    let tail = (n % W != 0).then(|| step(n - W, &outs));
    let put = |outs: &mut [&mut [f32]; NO], i: usize, r: [__m256; NO]| {
        for (s, v) in outs.iter_mut().zip(r) {
            debug_assert!(i + W <= s.len());
            // SAFETY: i + 8 <= n <= s.len() (as for `at`): 8 writable f32s.
            unsafe { _mm256_storeu_ps(s.as_mut_ptr().add(i), v) };
        }
    };
    let mut i = 0;
    // Two vectors per iteration: independent work for the out-of-order core
    // (the transcendental kernels are bound by their dependency chains).
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
    }
    if let Some(r) = tail {
        put(&mut outs, n - W, r);
    }
}

/// Declares AVX2 kernels that share one safety contract.
macro_rules! kernels {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $body:block)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// The CPU must support AVX2 and FMA (a `CpuKernels` with ISA `Avx2`
        /// proves it). Any slice lengths are memory-safe.
        #[target_feature(enable = "avx2,fma")]
        pub(crate) unsafe fn $name($($arg: $ty),*) $body
    )*};
}
pub(crate) use kernels;

kernels! {
    /// y = a + b
    fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
        zip_map([a, b], [y], |[a, b], _| [_mm256_add_ps(a, b)])
    }
    /// y = a - b
    fn sub(a: &[f32], b: &[f32], y: &mut [f32]) {
        zip_map([a, b], [y], |[a, b], _| [_mm256_sub_ps(a, b)])
    }
    /// y = a * b
    fn mul(a: &[f32], b: &[f32], y: &mut [f32]) {
        zip_map([a, b], [y], |[a, b], _| [_mm256_mul_ps(a, b)])
    }
    /// y = a / b
    fn div(a: &[f32], b: &[f32], y: &mut [f32]) {
        zip_map([a, b], [y], |[a, b], _| [_mm256_div_ps(a, b)])
    }
    /// y = alpha x
    fn scale(alpha: f32, x: &[f32], y: &mut [f32]) {
        let al = _mm256_set1_ps(alpha);
        zip_map([x], [y], |[x], _| [_mm256_mul_ps(al, x)])
    }
    /// y += alpha x
    fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        let al = _mm256_set1_ps(alpha);
        zip_map([x], [y], |[x], [y]| [_mm256_fmadd_ps(al, x, y)])
    }
    /// y += a b
    fn mul_acc(a: &[f32], b: &[f32], y: &mut [f32]) {
        zip_map([a, b], [y], |[a, b], [y]| [_mm256_fmadd_ps(a, b, y)])
    }
    /// y = tanh x
    fn tanh(x: &[f32], y: &mut [f32]) {
        zip_map([x], [y], |[x], _| [tanh_ps(x)])
    }
    /// y = sigmoid x
    fn sigmoid(x: &[f32], y: &mut [f32]) {
        zip_map([x], [y], |[x], _| [sigmoid_ps(x)])
    }
    /// y = max(x, 0), NaN kept
    fn relu(x: &[f32], y: &mut [f32]) {
        // max returns its second operand when either is NaN.
        zip_map([x], [y], |[x], _| [_mm256_max_ps(_mm256_setzero_ps(), x)])
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
    /// x = max(x, 0), NaN kept
    fn relu_inplace(x: &mut [f32]) {
        zip_map([], [x], |[], [x]| [_mm256_max_ps(_mm256_setzero_ps(), x)])
    }
    /// x = e^x
    fn exp_inplace(x: &mut [f32]) {
        zip_map([], [x], |[], [x]| [exp_ps(x)])
    }
    /// x = ln x
    fn log_inplace(x: &mut [f32]) {
        zip_map([], [x], |[], [x]| [log_ps(x)])
    }
    /// dx += dy (1 - y^2)
    fn tanh_bwd(y: &[f32], dy: &[f32], dx: &mut [f32]) {
        let one = _mm256_set1_ps(1.0);
        zip_map([y, dy], [dx], |[y, dy], [dx]| {
            [_mm256_fmadd_ps(dy, _mm256_fnmadd_ps(y, y, one), dx)]
        })
    }
    /// dx += dy y (1 - y)
    fn sigmoid_bwd(y: &[f32], dy: &[f32], dx: &mut [f32]) {
        let one = _mm256_set1_ps(1.0);
        zip_map([y, dy], [dx], |[y, dy], [dx]| {
            let d = _mm256_mul_ps(y, _mm256_sub_ps(one, y));
            [_mm256_fmadd_ps(dy, d, dx)]
        })
    }
    /// dx += dy [x > 0] (a select: dy is not multiplied by 0)
    fn relu_bwd(x: &[f32], dy: &[f32], dx: &mut [f32]) {
        zip_map([x, dy], [dx], |[x, dy], [dx]| {
            let pos = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_setzero_ps());
            [_mm256_add_ps(dx, _mm256_and_ps(pos, dy))]
        })
    }
    /// dx += dy y
    fn exp_bwd(y: &[f32], dy: &[f32], dx: &mut [f32]) {
        zip_map([y, dy], [dx], |[y, dy], [dx]| [_mm256_fmadd_ps(dy, y, dx)])
    }
    /// dx += dy / x
    fn log_bwd(x: &[f32], dy: &[f32], dx: &mut [f32]) {
        zip_map([x, dy], [dx], |[x, dy], [dx]| [_mm256_add_ps(dx, _mm256_div_ps(dy, x))])
    }
    /// da += dy / b ; db -= (dy / b) (a / b)
    fn div_bwd(a: &[f32], b: &[f32], dy: &[f32], da: &mut [f32], db: &mut [f32]) {
        zip_map([a, b, dy], [da, db], |[a, b, dy], [da, db]| {
            let q = _mm256_div_ps(dy, b);
            [_mm256_add_ps(da, q), _mm256_fnmadd_ps(q, _mm256_div_ps(a, b), db)]
        })
    }
}
