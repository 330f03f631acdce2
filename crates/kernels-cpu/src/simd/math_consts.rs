//! Constants of the vector math (exp, log, tanh, sigmoid), shared by the
//! AVX2 (`avx2::math`) and AVX-512 (`avx512::math`) versions so that both
//! evaluate the same polynomials with the same operations: their results
//! are bit-for-bit equal (checked by `tests/isa_parity.rs`).

/// ln 2 split so that `n * LN2_HI` is exact for |n| < 2^15.
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;

/// 1.5 * 2^23: adding it rounds an f32 below 2^22 in magnitude to an
/// integer and leaves that integer in the low mantissa bits.
pub(crate) const ROUND_MAGIC: f32 = 12_582_912.0;

/// e^r ~ 1 + r + r^2 (c0 + c1 r + ... + c4 r^4) on |r| <= ln2 / 2, fitted
/// for minimal maximum relative error (3e-9, far below f32 rounding).
pub(crate) const EXP_C: [f32; 5] = [
    4.999_999_3e-1,
    1.666_652_1e-1,
    4.166_839e-2,
    8.368_71e-3,
    1.381_460_2e-3,
];

/// exp flushes to 0 below this, the smallest f32 with e^x >= f32::MIN_POSITIVE
/// (ln of it is -87.336544750...), and overflows to inf above about 88.72.
/// Clamping there keeps every intermediate normal: subnormal results cost
/// a microcode assist per vector on Zen 3 (3x slower), which softmax rows
/// with -inf entries or widely spread logits would hit all the time.
pub(crate) const EXP_LO: f32 = -87.336_54;
pub(crate) const EXP_HI: f32 = 89.0;

/// Smallest positive normal f32 (log rescales subnormal inputs).
pub(crate) const MIN_NORMAL: f32 = f32::MIN_POSITIVE;
/// 2^23, the scale log applies to subnormal inputs.
pub(crate) const TWO_POW_23: f32 = 8_388_608.0;

/// Cephes' `logf` polynomial: log(1 + f) = f - f^2/2 + f^3 P(f) for f in
/// [sqrt(1/2) - 1, sqrt(2) - 1]; coefficients of P, HIGHEST degree first
/// (the order of Horner's scheme).
pub(crate) const LOG_P: [f32; 9] = [
    7.037_683_6e-2,
    -1.151_461e-1,
    1.167_699_9e-1,
    -1.242_014_1e-1,
    1.424_932_3e-1,
    -1.666_805_8e-1,
    2.000_071_4e-1,
    -2.499_999_4e-1,
    3.333_333e-1,
];

/// tanh(|x|) rounds to 1.0 from about 9.01 on: the rational approximation
/// is fitted on [0, 9] and its argument clamped there.
pub(crate) const TANH_CLAMP: f32 = 9.0;
/// Numerator and denominator coefficients (in x^2, constant term first) of
/// tanh(x) ~ x P(x^2) / Q(x^2), fitted for minimal maximum relative error on
/// [0, 9] (iteratively reweighted least squares on the linearised error).
pub(crate) const TANH_P: [f32; 5] = [
    1.0,
    1.338_398e-1,
    3.498_995_6e-3,
    2.066_125_5e-5,
    1.341_981e-8,
];
pub(crate) const TANH_Q: [f32; 5] = [
    1.0,
    4.671_73e-1,
    2.589_020_5e-2,
    3.291_037_6e-4,
    7.804_725e-7,
];
