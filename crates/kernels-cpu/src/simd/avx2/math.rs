//! Vector math on `__m256` (8 x f32) for AVX2 + FMA: exp, log, tanh, sigmoid.
//!
//! These are *safe* `#[target_feature(enable = "avx2,fma")]` functions: they
//! read no memory, so any other function compiled with `avx2,fma` (every
//! kernel in `simd::avx2`, `unsafe fn` or not) calls them directly, without an
//! `unsafe` block, and they inline there. Only a caller WITHOUT those target
//! features would need `unsafe` (and would lose the inlining).
//!
//! Accuracy (max relative error against f64 over dense sweeps and random
//! bit patterns, see `tests/elementwise.rs`): exp 8.0e-8 (1 ulp), tanh
//! 2.4e-7 (4 ulp near +-1), sigmoid 1.7e-7 (2 ulp), log 7.9e-8 (1 ulp).
//! Special values follow IEEE / libm: NaN in gives NaN out, exp(+inf) = inf,
//! exp(-inf) = 0, exp overflows to inf above ln(f32::MAX) and flushes
//! results below f32::MIN_POSITIVE to 0 (x < -87.34; subnormal arithmetic
//! is slow on Zen), log(0) = -inf, log(x < 0) = NaN,
//! log(inf) = inf, tanh(+-inf) = +-1, sigmoid(-inf) = 0, sigmoid(inf) = 1.
//!
//! log uses Cephes' `logf` polynomial; exp and tanh use minimax fits
//! made for this file (see [`EXP_C`], [`TANH_P`]). All evaluated with FMA.
//! The constants live in `simd::math_consts`, shared with the AVX-512
//! version (`simd::avx512::math`), which performs the same operations.

use core::arch::x86_64::*;

use crate::simd::math_consts::{
    EXP_C, EXP_HI, EXP_LO, LN2_HI, LN2_LO, LOG_P, MIN_NORMAL, ROUND_MAGIC, TANH_CLAMP, TANH_P,
    TANH_Q, TWO_POW_23,
};

/// Lanes set where the sign bit is set.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn sign_mask() -> __m256 {
    _mm256_set1_ps(-0.0)
}

/// Polynomial part of exp on the reduced argument: returns `(p, n)` with
/// `exp(x) = p * 2^n`, `p` in [0.7, 1.42], `n` an integer. `|x|` must be
/// below 2^20 (or x NaN, which yields a NaN `p`).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp_reduced(x: __m256) -> (__m256, __m256i) {
    // Adding 1.5 * 2^23 rounds x log2(e) to the nearest integer in one FMA
    // and leaves that integer in the low mantissa bits.
    let magic = _mm256_set1_ps(ROUND_MAGIC);
    let k = _mm256_fmadd_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E), magic);
    let n = _mm256_sub_ps(k, magic);
    let ni = _mm256_sub_epi32(_mm256_castps_si256(k), _mm256_castps_si256(magic));
    // Cody-Waite reduction: r = x - n ln2, |r| <= ln2 / 2.
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    // e^r = 1 + r + r^2 c(r), c of degree 4 evaluated Estrin-style (shorter
    // dependency chain than Horner: these kernels are latency-bound).
    let c = |k: usize| _mm256_set1_ps(EXP_C[k]);
    let r2 = _mm256_mul_ps(r, r);
    let lo = _mm256_fmadd_ps(c(1), r, c(0));
    let hi = _mm256_fmadd_ps(c(3), r, c(2));
    let hi = _mm256_fmadd_ps(c(4), r2, hi);
    let poly = _mm256_fmadd_ps(hi, r2, lo);
    let p = _mm256_add_ps(_mm256_fmadd_ps(poly, r2, r), _mm256_set1_ps(1.0));
    (p, ni)
}

/// `2^n` for integer-valued `n` in [-126, 127].
#[inline]
#[target_feature(enable = "avx2,fma")]
fn pow2i(n: __m256i) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        n,
        _mm256_set1_epi32(127),
    )))
}

/// e^x for every x: overflow gives inf, NaN stays NaN, and results below
/// f32::MIN_POSITIVE (x < -87.3365) are flushed to 0 instead of being
/// rounded to subnormals (see [`EXP_LO`]).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn exp_ps(x: __m256) -> __m256 {
    // max/min return their SECOND operand when either is NaN: NaN survives.
    let lo = _mm256_set1_ps(EXP_LO);
    let xc = _mm256_min_ps(_mm256_set1_ps(EXP_HI), _mm256_max_ps(lo, x));
    let (p, n) = exp_reduced(xc);
    // n lies in [-126, 128]: scale in two halves, each a normal power of
    // two, so that 2^128 (x > ln f32::MAX) can overflow to inf.
    let n1 = _mm256_srai_epi32::<1>(n);
    let n2 = _mm256_sub_epi32(n, n1);
    let r = _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(n2));
    _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, lo), r)
}

/// Natural logarithm: log(0) = -inf, log(x < 0) = NaN, log(inf) = inf,
/// subnormal inputs exact to the same accuracy as normal ones.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn log_ps(x: __m256) -> __m256 {
    let one = _mm256_set1_ps(1.0);
    // Subnormals: scale by 2^23 first and take 23 off the exponent.
    let sub = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(MIN_NORMAL));
    let xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(TWO_POW_23)), sub);
    let bits = _mm256_castps_si256(xs);
    let e = _mm256_sub_epi32(_mm256_srli_epi32::<23>(bits), _mm256_set1_epi32(127));
    // Mantissa in [1, 2), then folded into [sqrt(1/2), sqrt(2)).
    let m = _mm256_or_ps(
        _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(0x007f_ffff))),
        one,
    );
    let big = _mm256_cmp_ps::<_CMP_GT_OQ>(m, _mm256_set1_ps(std::f32::consts::SQRT_2));
    let m = _mm256_blendv_ps(m, _mm256_mul_ps(m, _mm256_set1_ps(0.5)), big);
    let e = _mm256_add_ps(_mm256_cvtepi32_ps(e), _mm256_and_ps(big, one));
    let e = _mm256_sub_ps(e, _mm256_and_ps(sub, _mm256_set1_ps(23.0)));
    let f = _mm256_sub_ps(m, one);
    // log(1 + f) = f - f^2/2 + f^3 P(f), f in [-0.293, 0.415].
    let mut p = _mm256_set1_ps(LOG_P[0]);
    for &c in &LOG_P[1..] {
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c));
    }
    let f2 = _mm256_mul_ps(f, f);
    let mut y = _mm256_mul_ps(_mm256_mul_ps(p, f), f2);
    y = _mm256_fmadd_ps(e, _mm256_set1_ps(LN2_LO), y);
    y = _mm256_fnmadd_ps(f2, _mm256_set1_ps(0.5), y);
    let mut r = _mm256_fmadd_ps(e, _mm256_set1_ps(LN2_HI), _mm256_add_ps(f, y));
    // Special values. x < 0 or NaN: an all-ones lane is a (quiet) NaN.
    let zero = _mm256_setzero_ps();
    let inf = _mm256_set1_ps(f32::INFINITY);
    r = _mm256_blendv_ps(r, inf, _mm256_cmp_ps::<_CMP_EQ_OQ>(x, inf));
    r = _mm256_blendv_ps(
        r,
        _mm256_set1_ps(f32::NEG_INFINITY),
        _mm256_cmp_ps::<_CMP_EQ_OQ>(x, zero),
    );
    _mm256_or_ps(r, _mm256_cmp_ps::<_CMP_NGE_UQ>(x, zero))
}

/// Hyperbolic tangent: a [9/8] odd rational minimax approximation
/// `x P(x^2) / Q(x^2)` on [-9, 9] (relative error 2e-8 in exact arithmetic,
/// 2.4e-7 measured after f32 rounding), P(0) = Q(0) = 1 so that tanh(x) = x
/// near 0 to full relative accuracy. Beyond |x| = 9, tanh rounds to +-1 in
/// f32: x is clamped there and the result to [-1, 1]. About 15 vector
/// operations and no exp, so it runs at several elements per cycle.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn tanh_ps(x: __m256) -> __m256 {
    // max/min return their second operand when either is NaN: NaN survives.
    let x = _mm256_min_ps(
        _mm256_set1_ps(TANH_CLAMP),
        _mm256_max_ps(_mm256_set1_ps(-TANH_CLAMP), x),
    );
    let s = _mm256_mul_ps(x, x);
    let mut p = _mm256_set1_ps(TANH_P[4]);
    let mut q = _mm256_set1_ps(TANH_Q[4]);
    for k in (0..4).rev() {
        p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(TANH_P[k]));
        q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(TANH_Q[k]));
    }
    let r = _mm256_div_ps(_mm256_mul_ps(x, p), q);
    let one = _mm256_set1_ps(1.0);
    _mm256_min_ps(one, _mm256_max_ps(_mm256_set1_ps(-1.0), r))
}

/// Logistic sigmoid 1 / (1 + e^-x), accurate in relative terms on both
/// sides: with t = exp(-|x|) in (0, 1], it is 1 / (1 + t) for x >= 0 and
/// t / (1 + t) for x < 0 (so sigmoid(-80) ~ 1.8e-35, not a rounding of 0;
/// below -87.34 it is 0, as exp flushes there).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn sigmoid_ps(x: __m256) -> __m256 {
    // t = exp(-|x|) as in exp_ps, cheaper for an argument known <= 0: no
    // upper clamp, and n in [-126, 0] needs only one scaling.
    let lo = _mm256_set1_ps(EXP_LO);
    let a = _mm256_or_ps(x, sign_mask());
    let (p, n) = exp_reduced(_mm256_max_ps(lo, a));
    let t = _mm256_mul_ps(p, pow2i(n));
    let t = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(a, lo), t);
    let one = _mm256_set1_ps(1.0);
    let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
    _mm256_div_ps(_mm256_blendv_ps(one, t, neg), _mm256_add_ps(one, t))
}
