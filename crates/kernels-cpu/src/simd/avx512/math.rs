//! Vector math on `__m512` (16 x f32) for AVX-512F: exp, log, tanh, sigmoid.
//!
//! The same polynomials, constants (`simd::math_consts`) and sequence of
//! IEEE operations as `simd::avx2::math`, with mask registers in place of
//! `blendv` / `and` selects: each lane's result is bit-for-bit the AVX2
//! one, so accuracy and special values are as documented there (exp 1 ulp,
//! tanh 4, sigmoid 2, log 1; NaN in gives NaN out, exp flushes below
//! f32::MIN_POSITIVE, log(0) = -inf, log(x < 0) = NaN, ...).
//!
//! Safe `#[target_feature]` functions reading no memory, as in
//! `avx2::math`: they inline into the kernels of `simd::avx512`.

use core::arch::x86_64::*;

use crate::simd::math_consts::{
    EXP_C, EXP_HI, EXP_LO, LN2_HI, LN2_LO, LOG_P, MIN_NORMAL, ROUND_MAGIC, TANH_CLAMP, TANH_P,
    TANH_Q, TWO_POW_23,
};

#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn splat(v: f32) -> __m512 {
    _mm512_set1_ps(v)
}

/// `(p, n)` with `exp(x) = p * 2^n`: `avx2::math::exp_reduced`, 16 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn exp_reduced(x: __m512) -> (__m512, __m512i) {
    let magic = splat(ROUND_MAGIC);
    let k = _mm512_fmadd_ps(x, splat(std::f32::consts::LOG2_E), magic);
    let n = _mm512_sub_ps(k, magic);
    let ni = _mm512_sub_epi32(_mm512_castps_si512(k), _mm512_castps_si512(magic));
    let r = _mm512_fnmadd_ps(n, splat(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, splat(LN2_LO), r);
    // Estrin, in the AVX2 order (the rounding must match).
    let c = |k: usize| splat(EXP_C[k]);
    let r2 = _mm512_mul_ps(r, r);
    let lo = _mm512_fmadd_ps(c(1), r, c(0));
    let hi = _mm512_fmadd_ps(c(3), r, c(2));
    let hi = _mm512_fmadd_ps(c(4), r2, hi);
    let poly = _mm512_fmadd_ps(hi, r2, lo);
    let p = _mm512_add_ps(_mm512_fmadd_ps(poly, r2, r), splat(1.0));
    (p, ni)
}

/// `2^n` for integer-valued `n` in [-126, 127].
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn pow2i(n: __m512i) -> __m512 {
    _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
        n,
        _mm512_set1_epi32(127),
    )))
}

/// e^x (see `avx2::math::exp_ps`).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) fn exp_ps(x: __m512) -> __m512 {
    // vmaxps / vminps return their second operand when either is NaN.
    let lo = splat(EXP_LO);
    let xc = _mm512_min_ps(splat(EXP_HI), _mm512_max_ps(lo, x));
    let (p, n) = exp_reduced(xc);
    let n1 = _mm512_srai_epi32::<1>(n);
    let n2 = _mm512_sub_epi32(n, n1);
    let r = _mm512_mul_ps(_mm512_mul_ps(p, pow2i(n1)), pow2i(n2));
    // Zero where x < EXP_LO (NOT-less-than, unordered: NaN lanes are kept).
    _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_NLT_UQ>(x, lo), r)
}

/// Natural logarithm (see `avx2::math::log_ps`).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) fn log_ps(x: __m512) -> __m512 {
    let one = splat(1.0);
    let sub = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, splat(MIN_NORMAL));
    let xs = _mm512_mask_mul_ps(x, sub, x, splat(TWO_POW_23));
    let bits = _mm512_castps_si512(xs);
    let e = _mm512_sub_epi32(_mm512_srli_epi32::<23>(bits), _mm512_set1_epi32(127));
    let m = _mm512_or_si512(
        _mm512_and_si512(bits, _mm512_set1_epi32(0x007f_ffff)),
        _mm512_castps_si512(one),
    );
    let m = _mm512_castsi512_ps(m);
    let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(m, splat(std::f32::consts::SQRT_2));
    let m = _mm512_mask_mul_ps(m, big, m, splat(0.5));
    // AVX2 adds 1.0 or 0.0 (and subtracts 23.0 or 0.0); adding 0.0 to
    // these integer-valued floats changes nothing, so the masked forms
    // give the same bits.
    let e = _mm512_mask_add_ps(_mm512_cvtepi32_ps(e), big, _mm512_cvtepi32_ps(e), one);
    let e = _mm512_mask_sub_ps(e, sub, e, splat(23.0));
    let f = _mm512_sub_ps(m, one);
    let mut p = splat(LOG_P[0]);
    for &c in &LOG_P[1..] {
        p = _mm512_fmadd_ps(p, f, splat(c));
    }
    let f2 = _mm512_mul_ps(f, f);
    let mut y = _mm512_mul_ps(_mm512_mul_ps(p, f), f2);
    y = _mm512_fmadd_ps(e, splat(LN2_LO), y);
    y = _mm512_fnmadd_ps(f2, splat(0.5), y);
    let mut r = _mm512_fmadd_ps(e, splat(LN2_HI), _mm512_add_ps(f, y));
    let zero = _mm512_setzero_ps();
    let inf = splat(f32::INFINITY);
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, inf), inf);
    r = _mm512_mask_mov_ps(
        r,
        _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, zero),
        splat(f32::NEG_INFINITY),
    );
    // x < 0 or NaN: the all-ones NaN that the AVX2 `or` with a compare
    // mask produces.
    let nan = _mm512_castsi512_ps(_mm512_set1_epi32(-1));
    _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_NGE_UQ>(x, zero), nan)
}

/// Hyperbolic tangent (see `avx2::math::tanh_ps`).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) fn tanh_ps(x: __m512) -> __m512 {
    let x = _mm512_min_ps(splat(TANH_CLAMP), _mm512_max_ps(splat(-TANH_CLAMP), x));
    let s = _mm512_mul_ps(x, x);
    let mut p = splat(TANH_P[4]);
    let mut q = splat(TANH_Q[4]);
    for k in (0..4).rev() {
        p = _mm512_fmadd_ps(p, s, splat(TANH_P[k]));
        q = _mm512_fmadd_ps(q, s, splat(TANH_Q[k]));
    }
    let r = _mm512_div_ps(_mm512_mul_ps(x, p), q);
    _mm512_min_ps(splat(1.0), _mm512_max_ps(splat(-1.0), r))
}

/// Logistic sigmoid (see `avx2::math::sigmoid_ps`).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) fn sigmoid_ps(x: __m512) -> __m512 {
    let lo = splat(EXP_LO);
    // a = -|x|: set the sign bit.
    let a = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(x),
        _mm512_set1_epi32(i32::MIN),
    ));
    let (p, n) = exp_reduced(_mm512_max_ps(lo, a));
    let t = _mm512_mul_ps(p, pow2i(n));
    let t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_NLT_UQ>(a, lo), t);
    let one = splat(1.0);
    let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
    _mm512_div_ps(_mm512_mask_blend_ps(neg, one, t), _mm512_add_ps(one, t))
}
