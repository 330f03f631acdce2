//! AVX2 + FMA kernels for the small sgemm paths: few rows of C (one instance,
//! the top of a tree) or a short inner dimension (a rank-k update). There,
//! packing A and B as matrixmultiply does costs more than the product, so
//! these kernels read both operands in place.
//!
//! - [`sgemm_bn`] (B not transposed, `B[p, j]` at `b[p * ldb + j]`): tiles of
//!   R rows x V vectors of 8 columns held in registers; each step of k
//!   broadcasts R elements of A and loads V vectors of a B row.
//! - [`sgemm_bt`] (B transposed, `B[p, j]` at `b[j * ldb + p]`): every output
//!   is a dot product along k; tiles of R rows of A x C rows of B keep R x C
//!   vector partial sums, reduced horizontally at the end.

use std::arch::x86_64::*;

use crate::gemm::SmallGeom;
use crate::simd::tiles::{self, tile_table, Tile, TileFn, TileSet};

/// Most rows per B-not-transposed tile.
const BN_RMAX: usize = 6;
/// Vectors of 8 columns per tile, by tile rows. Eight or more independent
/// accumulators hide the FMA latency (4 cycles, 2 per cycle); more than
/// that, with the live operands and the tail mask, made LLVM spill (seen
/// for 4 x 3 and 3 x 4).
const BN_VMAX: [usize; BN_RMAX + 1] = [0, 8, 4, 3, 2, 2, 2];
/// Rows of B a B-not-transposed tile prefetches ahead: B rarely fits L2
/// and a tile reads only 32 to 256 bytes of each row, a pattern the
/// hardware prefetchers follow poorly. Measured (1..16 x 300 x 450):
/// none 24-57 GFLOP/s, 8 rows 31-69, 16 rows 31-73, 24 and 32 no better.
const PF_ROWS: usize = 16;
/// Rows of B per pass of the B-not-transposed kernel (later passes add to
/// C): a column block then spans BN_KC rows (pages), which the TLB still
/// holds when the next column block reads the same rows (16 x 4096 x 2048, A transposed: 16 GFLOP/s
/// unblocked, 27-30 with 128-256).
const BN_KC: usize = 256;
/// Most rows per B-transposed tile.
const BT_RMAX: usize = 3;
/// Rows of B per B-transposed tile, by tile rows (R x C accumulators plus R
/// A vectors and one B vector in registers).
const BT_CMAX: [usize; BT_RMAX + 1] = [0, 8, 4, 3];

/// Lanes `0..lanes` set (lanes in 1..=8).
#[target_feature(enable = "avx2,fma")]
fn lane_mask(lanes: usize) -> __m256i {
    let lanes = i32::try_from(lanes).unwrap_or(8);
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(lanes),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// R x V tile, B not transposed. With `MASK`, the last vector holds only the
/// lanes of `mask`; the others are neither read nor written.
///
/// # Safety
/// AVX2 and FMA are available; `t.a` is readable at `r * rsa + p * csa`,
/// `t.b` at `p * ldb + j`, `t.c` readable and writable at `r * ldc + j` and
/// `t.bias` (unless null) readable at `j` for r < R, p < k and every column
/// j of the tile (`8 * V`, or fewer for the masked lanes of the last
/// vector).
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_bn<const R: usize, const V: usize, const MASK: bool>(t: &Tile) {
    let mask = lane_mask(t.lanes);
    let mut acc = [[_mm256_setzero_ps(); V]; R];
    for p in 0..t.k {
        let brow = t.b.wrapping_add(p * t.ldb);
        if p + PF_ROWS < t.k {
            let ahead = brow.wrapping_add(PF_ROWS * t.ldb);
            for v in (0..V).step_by(2) {
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(8 * v).cast());
            }
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(8 * V - 1).cast());
        }
        let arow = t.a.wrapping_add(p * t.csa);
        // SAFETY: columns 8v..8v+8 of B row p (only the lanes of `mask`
        // in the last vector when MASK) and A[r, p] are in the tile (the
        // caller's contract).
        unsafe {
            macro_rules! load_b {
                ($v:expr) => {
                    if MASK && $v == V - 1 {
                        _mm256_maskload_ps(brow.add(8 * $v), mask)
                    } else {
                        _mm256_loadu_ps(brow.add(8 * $v))
                    }
                };
            }
            // Keep the smaller operand set in registers and stream the
            // other, so accumulators and live operands fit 16 registers.
            if R <= V {
                let mut x = [_mm256_setzero_ps(); R];
                for (r, x) in x.iter_mut().enumerate() {
                    *x = _mm256_set1_ps(*arow.add(r * t.rsa));
                }
                for v in 0..V {
                    let y = load_b!(v);
                    for (accr, &x) in acc.iter_mut().zip(&x) {
                        accr[v] = _mm256_fmadd_ps(x, y, accr[v]);
                    }
                }
            } else {
                let mut y = [_mm256_setzero_ps(); V];
                for (v, y) in y.iter_mut().enumerate() {
                    *y = load_b!(v);
                }
                for (r, accr) in acc.iter_mut().enumerate() {
                    let x = _mm256_set1_ps(*arow.add(r * t.rsa));
                    for (acc, &y) in accr.iter_mut().zip(&y) {
                        *acc = _mm256_fmadd_ps(x, y, *acc);
                    }
                }
            }
        }
    }
    let (alpha, beta) = (_mm256_set1_ps(t.alpha), _mm256_set1_ps(t.beta));
    for (r, accr) in acc.iter().enumerate() {
        for (v, &s) in accr.iter().enumerate() {
            let cp = t.c.wrapping_add(r * t.ldc + 8 * v);
            let last = MASK && v == V - 1;
            let mut out = _mm256_mul_ps(alpha, s);
            // SAFETY: C[r, 8v..8v+8] (or its masked lanes) is in the tile.
            unsafe {
                if t.beta != 0.0 {
                    let old = if last {
                        _mm256_maskload_ps(cp, mask)
                    } else {
                        _mm256_loadu_ps(cp)
                    };
                    out = _mm256_fmadd_ps(beta, old, out);
                }
                if !t.bias.is_null() {
                    // SAFETY: bias[8v..8v+8] (or its masked lanes) is
                    // readable for the tile's columns (the caller's contract).
                    let bp = t.bias.add(8 * v);
                    let row = if last {
                        _mm256_maskload_ps(bp, mask)
                    } else {
                        _mm256_loadu_ps(bp)
                    };
                    out = _mm256_add_ps(out, row);
                }
                if last {
                    _mm256_maskstore_ps(cp, mask, out);
                } else {
                    _mm256_storeu_ps(cp, out);
                }
            }
        }
    }
}

/// Sums of four vectors' lanes, in order.
#[target_feature(enable = "avx2,fma")]
fn hsum4(x0: __m256, x1: __m256, x2: __m256, x3: __m256) -> __m128 {
    let t = _mm256_hadd_ps(_mm256_hadd_ps(x0, x1), _mm256_hadd_ps(x2, x3));
    _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps::<1>(t))
}

/// R rows of A x C rows of B (B transposed): C[r, j] = dot(A row r, B row j).
/// A rows are contiguous along k (`csa` is 1); the last, partial step of k
/// loads only the lanes of `mask`.
///
/// # Safety
/// AVX2 and FMA are available; `t.a` is readable at `r * rsa + p`, `t.b` at
/// `j * ldb + p`, and `t.c` readable and writable at `r * ldc + j` for
/// r < R, j < C, p < k.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_bt<const R: usize, const C: usize>(t: &Tile) {
    let mask = lane_mask(t.lanes);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    macro_rules! step {
        ($p:expr, $load:ident $(, $mask:expr)?) => {{
            let mut av = [_mm256_setzero_ps(); R];
            for (r, x) in av.iter_mut().enumerate() {
                *x = $load(t.a.wrapping_add(r * t.rsa + $p) $(, $mask)?);
            }
            for j in 0..C {
                let y = $load(t.b.wrapping_add(j * t.ldb + $p) $(, $mask)?);
                for (accr, &x) in acc.iter_mut().zip(&av) {
                    accr[j] = _mm256_fmadd_ps(x, y, accr[j]);
                }
            }
        }};
    }
    let full = t.k / 8 * 8;
    // SAFETY: lanes p..p+8 of A rows r < R and B rows j < C are in the tile
    // for p + 8 <= k; the last, partial step loads only the lanes of
    // `mask`, those below k (the caller's contract).
    unsafe {
        for p in (0..full).step_by(8) {
            step!(p, _mm256_loadu_ps);
        }
        if full < t.k {
            step!(full, _mm256_maskload_ps, mask);
        }
    }
    let zero = _mm256_setzero_ps();
    for (r, accr) in acc.iter().enumerate() {
        let mut sums = [0.0f32; C];
        for (j0, chunk) in (0..C).step_by(4).zip(sums.chunks_mut(4)) {
            let mut x = [zero; 4];
            for (j, x) in x.iter_mut().enumerate().take(C.saturating_sub(j0)) {
                *x = accr[j0 + j];
            }
            let mut four = [0.0f32; 4];
            // SAFETY: `four` is a local array of 4 floats.
            unsafe { _mm_storeu_ps(four.as_mut_ptr(), hsum4(x[0], x[1], x[2], x[3])) };
            chunk.copy_from_slice(&four[..chunk.len()]);
        }
        for (j, s) in sums.into_iter().enumerate() {
            let cp = t.c.wrapping_add(r * t.ldc + j);
            // SAFETY: C[r, j] is in the tile (the caller's contract).
            unsafe {
                *cp = if t.beta != 0.0 {
                    t.alpha * s + t.beta * *cp
                } else {
                    t.alpha * s
                };
            }
        }
    }
}

tile_table!(masked bn_tile, tile_bn,
    1: [1 2 3 4 5 6 7 8], 2: [1 2 3 4], 3: [1 2 3], 4: [1 2], 5: [1 2], 6: [1 2]);
tile_table!(plain bt_tile, tile_bt, 1: [1 2 3 4 5 6 7 8], 2: [1 2 3 4], 3: [1 2 3]);

/// These tiles for the shared drivers (`simd/tiles.rs`).
pub(crate) struct Avx2Tiles;

impl TileSet for Avx2Tiles {
    const W: usize = 8;
    const BN_RMAX: usize = BN_RMAX;
    const BN_VMAX: &'static [usize] = &BN_VMAX;
    const BN_KC: usize = BN_KC;
    const BT_RMAX: usize = BT_RMAX;
    const BT_CMAX: &'static [usize] = &BT_CMAX;
    const BN_ONE: TileFn = tile_bn::<1, 1, true>;
    const BT_ONE: TileFn = tile_bt::<1, 1>;
    fn bn_tile(r: usize, v: usize, masked: bool) -> Option<TileFn> {
        bn_tile(r, v, masked)
    }
    fn bt_tile(r: usize, c: usize) -> Option<TileFn> {
        bt_tile(r, c)
    }
}

/// C = alpha op(A) B + beta C with B not transposed, on these tiles (see
/// [`tiles::sgemm_bn`]).
///
/// # Safety
/// As [`tiles::sgemm_bn`], with the CPU supporting AVX2, FMA.
pub(crate) unsafe fn sgemm_bn(
    g: &SmallGeom,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    rows_outer: bool,
    bias: Option<&[f32]>,
) {
    // SAFETY: the caller's contract.
    unsafe { tiles::sgemm_bn::<Avx2Tiles>(g, a, b, c, rows_outer, bias) }
}

/// C = alpha A B^T + beta C, on these tiles (see [`tiles::sgemm_bt`]).
///
/// # Safety
/// As [`tiles::sgemm_bt`], with the CPU supporting AVX2, FMA.
pub(crate) unsafe fn sgemm_bt(g: &SmallGeom, a: &[f32], b: &[f32], c: &mut [f32]) {
    // SAFETY: the caller's contract.
    unsafe { tiles::sgemm_bt::<Avx2Tiles>(g, a, b, c) }
}

/// Most inner dimension for [`rank_k`].
pub(crate) const RANK_K_MAX: usize = 8;

/// C = alpha op(A) B + beta C for a tiny inner dimension (k <= RANK_K_MAX,
/// e.g. the weight gradient x^T dy of one instance, k = 1), B not
/// transposed: each row of C is written once, front to back, as a sum of k
/// scaled rows of B (which stay in L1). With so little arithmetic per
/// output the tiles' set-up dominates: 300 x k x 600, A transposed, runs at
/// 24 / 36 / 64 / 78 GFLOP/s for k = 1 / 2 / 4 / 8 against 11 / 22 / 37 /
/// 57 with tiles (matrixmultiply: 12 / 23 / 38 / 50); from k = 12 the
/// tiles win.
///
/// # Safety
/// As [`sgemm_bn`].
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rank_k(g: &SmallGeom, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (ap, bp, cp) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // SAFETY: the caller's contract, and K == k.
    unsafe {
        match g.k {
            0 => rank_k_fixed::<0>(g, ap, bp, cp),
            1 => rank_k_fixed::<1>(g, ap, bp, cp),
            2 => rank_k_fixed::<2>(g, ap, bp, cp),
            3 => rank_k_fixed::<3>(g, ap, bp, cp),
            4 => rank_k_fixed::<4>(g, ap, bp, cp),
            5 => rank_k_fixed::<5>(g, ap, bp, cp),
            6 => rank_k_fixed::<6>(g, ap, bp, cp),
            7 => rank_k_fixed::<7>(g, ap, bp, cp),
            8 => rank_k_fixed::<8>(g, ap, bp, cp),
            _ => sgemm_bn(g, a, b, c, true, None),
        }
    }
}

/// [`rank_k`] for k = K.
///
/// # Safety
/// As [`sgemm_bn`], for the slices' pointers, and k == K.
#[target_feature(enable = "avx2,fma")]
unsafe fn rank_k_fixed<const K: usize>(g: &SmallGeom, a: *const f32, b: *const f32, c: *mut f32) {
    let vbeta = _mm256_set1_ps(g.beta);
    let tail = g.n % 8;
    let mask = lane_mask(if tail == 0 { 8 } else { tail });
    for i in 0..g.m {
        let mut w = [_mm256_setzero_ps(); K];
        for (p, w) in w.iter_mut().enumerate() {
            // SAFETY: A[i, p] with i < m, p < k is in `a` (the contract).
            *w = _mm256_set1_ps(g.alpha * unsafe { *a.add(i * g.rsa + p * g.csa) });
        }
        let crow = c.wrapping_add(i * g.ldc);
        macro_rules! vector {
            ($j:expr, $load:ident, $store:ident $(, $mask:expr)?) => {{
                let j = $j;
                let mut acc = if g.beta == 0.0 {
                    _mm256_setzero_ps()
                } else {
                    _mm256_mul_ps(vbeta, $load(crow.add(j) $(, $mask)?))
                };
                for (p, &w) in w.iter().enumerate() {
                    acc = _mm256_fmadd_ps(w, $load(b.add(p * g.ldb + j) $(, $mask)?), acc);
                }
                $store(crow.add(j) $(, $mask)?, acc);
            }};
        }
        // SAFETY: C[i, j..j+8] and B[p, j..j+8] for p < k lie in the slices
        // for j + 8 <= n; the last, partial vector touches only the lanes
        // of `mask`, those below n.
        unsafe {
            for j in (0..g.n - tail).step_by(8) {
                vector!(j, _mm256_loadu_ps, _mm256_storeu_ps);
            }
            if tail != 0 {
                vector!(g.n - tail, _mm256_maskload_ps, _mm256_maskstore_ps, mask);
            }
        }
    }
}
