//! AVX-512F kernels for the small sgemm paths: the AVX2 ones
//! (`simd::avx2::gemm`, which see for the design) on vectors of 16 columns,
//! with 32 registers for larger tiles and `__mmask16` masks for the last,
//! partial vector.
//!
//! - [`sgemm_bn`] (B not transposed): tiles of R rows x V vectors of 16
//!   columns; each step of k broadcasts R elements of A and loads V vectors
//!   of a B row.
//! - [`sgemm_bt`] (B transposed): R rows of A x C rows of B, R x C vector
//!   partial sums of dot products along k, reduced at the end.
//! - [`rank_k`]: a tiny inner dimension, each row of C written once.
//!
//! Only AVX-512F intrinsics (what `Isa::Avx512` checks for).
//!
//! Measured on a 2-core Intel Xeon VM (AVX-512, Sapphire Rapids class), one
//! thread, the AVX2 tiles, these and matrixmultiply in alternation (median
//! of 8 runs each, range over 3 sessions; `gemm/tile_bench.rs`), GFLOP/s:
//!
//! | m x k x n                  | AVX2    | AVX-512 | matrixmultiply |
//! |----------------------------|---------|---------|----------------|
//! | NN 2 x 300 x 750           | 67-72   | 80-86   | 11-12          |
//! | NN 4 x 300 x 750           | 81-86   | 125-133 | 22-24          |
//! | NN 16 x 300 x 750          | 87-92   | 148-158 | 92-100         |
//! | NN 64 x 300 x 750          | 89-94   | 147-157 | 128-139        |
//! | NN 128 x 300 x 750         | 90-95   | 146-157 | 136-149        |
//! | NN 16 x 150 x 750          | 72-94   | 123-160 | 79-106         |
//! | NN 16 x 750 x 300          | 93-96   | 158-164 | 98-99          |
//! | NN 128 x 750 x 300         | 95-98   | 157-163 | 141-147        |
//! | TN 16 x 300 x 750          | 84-88   | 147-156 | 92-97          |
//! | TN 128 x 300 x 750         | 76-81   | 139-154 | 138-150        |
//! | TN 300 x 4 x 750 (rank k)  | 67-68   | 76-79   | 44-46          |
//! | TN 300 x 16 x 750          | 72-77   | 113-124 | 116-126        |
//! | BT 4 x 750 x 300           | 76-78   | 82-86   | 20-21          |
//! | BT 8 x 750 x 300           | 80-83   | 86-92   | 40-42          |
//! | BT 16 x 750 x 300          | 75-78   | 77-85   | 83-88          |
//! | BT 48 x 150 x 5            | 65-67   | 71-73   | 21             |
//!
//! Where they lose, `gemm.rs` keeps the AVX2 tiles for an `Avx512` handle:
//! one row of C (NN 1 x 300 x 750: 41 against 45; the unaligned 64-byte
//! loads of B split cache lines and one row is load-bound), B transposed
//! with one or two rows (1 x 750 x 300: 39 against 47; 2 rows: 67 against
//! 69) and rank-k updates with k <= 2 (300 x 1 x 750: 22 against 25; k = 2:
//! 35 against 44). Wider B-transposed tiles (4 x 5, 3 x 6, 5 or 6 rows) and
//! blocking k for them measured slower (50-70).

use std::arch::x86_64::*;

use crate::gemm::SmallGeom;
use crate::simd::tiles::{self, tile_table, Tile, TileFn, TileSet};

/// Lanes per vector.
const W: usize = 16;
/// Most rows per B-not-transposed tile.
const BN_RMAX: usize = 8;
/// Vectors of 16 columns per tile, by tile rows: at most 24 accumulators,
/// which with the B vectors of one step fit the 32 registers.
const BN_VMAX: [usize; BN_RMAX + 1] = [0, 8, 8, 6, 5, 4, 4, 3, 3];
/// Rows of B prefetched ahead (as the AVX2 kernel).
const PF_ROWS: usize = 16;
/// Rows of B per pass (as the AVX2 kernel).
const BN_KC: usize = 256;
/// Most rows per B-transposed tile.
const BT_RMAX: usize = 4;
/// Rows of B per B-transposed tile, by tile rows (R x C accumulators plus
/// R A vectors and C B vectors).
const BT_CMAX: [usize; BT_RMAX + 1] = [0, 8, 6, 5, 4];

/// Lanes `0..lanes` set (lanes in 1..=16).
fn lane_mask(lanes: usize) -> __mmask16 {
    if lanes >= W {
        0xffff
    } else {
        (1u16 << lanes) - 1
    }
}

/// R x V tile, B not transposed. With `MASK`, the last vector holds only the
/// lanes of `mask`; the others are neither read nor written.
///
/// # Safety
/// AVX-512F, AVX2 and FMA are available; `t.a` is readable at
/// `r * rsa + p * csa`, `t.b` at `p * ldb + j`, `t.c` readable and
/// writable at `r * ldc + j` and `t.bias` (unless null) readable at `j` for
/// r < R, p < k and every column j of the tile (`16 * V`, or fewer for the
/// masked lanes of the last vector).
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tile_bn<const R: usize, const V: usize, const MASK: bool>(t: &Tile) {
    let mask = lane_mask(t.lanes);
    let mut acc = [[_mm512_setzero_ps(); V]; R];
    for p in 0..t.k {
        let brow = t.b.wrapping_add(p * t.ldb);
        if p + PF_ROWS < t.k {
            let ahead = brow.wrapping_add(PF_ROWS * t.ldb);
            for v in 0..V {
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(W * v).cast());
            }
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(W * V - 1).cast());
        }
        let arow = t.a.wrapping_add(p * t.csa);
        // SAFETY: columns 16v..16v+16 of B row p (only the lanes of
        // `mask` in the last vector when MASK) and A[r, p] are in the
        // tile (the caller's contract); masked-off lanes are not accessed.
        unsafe {
            let mut y = [_mm512_setzero_ps(); V];
            for (v, y) in y.iter_mut().enumerate() {
                *y = if MASK && v == V - 1 {
                    _mm512_maskz_loadu_ps(mask, brow.add(W * v))
                } else {
                    _mm512_loadu_ps(brow.add(W * v))
                };
            }
            for (r, accr) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*arow.add(r * t.rsa));
                for (acc, &y) in accr.iter_mut().zip(&y) {
                    *acc = _mm512_fmadd_ps(x, y, *acc);
                }
            }
        }
    }
    let (alpha, beta) = (_mm512_set1_ps(t.alpha), _mm512_set1_ps(t.beta));
    for (r, accr) in acc.iter().enumerate() {
        for (v, &s) in accr.iter().enumerate() {
            let cp = t.c.wrapping_add(r * t.ldc + W * v);
            let last = MASK && v == V - 1;
            let mut out = _mm512_mul_ps(alpha, s);
            // SAFETY: C[r, 16v..16v+16] (or its masked lanes) is in the tile.
            unsafe {
                if t.beta != 0.0 {
                    let old = if last {
                        _mm512_maskz_loadu_ps(mask, cp)
                    } else {
                        _mm512_loadu_ps(cp)
                    };
                    out = _mm512_fmadd_ps(beta, old, out);
                }
                if !t.bias.is_null() {
                    // SAFETY: bias[16v..16v+16] (or its masked lanes) is
                    // readable for the tile's columns (the caller's contract).
                    let bp = t.bias.add(W * v);
                    let row = if last {
                        _mm512_maskz_loadu_ps(mask, bp)
                    } else {
                        _mm512_loadu_ps(bp)
                    };
                    out = _mm512_add_ps(out, row);
                }
                if last {
                    _mm512_mask_storeu_ps(cp, mask, out);
                } else {
                    _mm512_storeu_ps(cp, out);
                }
            }
        }
    }
}

/// R rows of A x C rows of B (B transposed): C[r, j] = dot(A row r, B row j).
/// A rows are contiguous along k (`csa` is 1); the last, partial step of k
/// loads only the lanes of `mask` (the others read as 0).
///
/// # Safety
/// AVX-512F, AVX2 and FMA are available; `t.a` is readable at `r * rsa + p`,
/// `t.b` at `j * ldb + p`, and `t.c` readable and writable at `r * ldc + j`
/// for r < R, j < C, p < k.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tile_bt<const R: usize, const C: usize>(t: &Tile) {
    let mask = lane_mask(t.lanes);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    macro_rules! step {
        ($p:expr, $load:expr) => {{
            // All R + C operands loaded first, then the products by
            // iterators: indexing the accumulators by a loop variable left
            // some of the 4 x 4 tile's in memory (the speed was the same,
            // so the tile is bound by its loads, not by those).
            let mut av = [_mm512_setzero_ps(); R];
            for (r, x) in av.iter_mut().enumerate() {
                *x = $load(t.a.wrapping_add(r * t.rsa + $p));
            }
            let mut bv = [_mm512_setzero_ps(); C];
            for (j, y) in bv.iter_mut().enumerate() {
                *y = $load(t.b.wrapping_add(j * t.ldb + $p));
            }
            for (accr, &x) in acc.iter_mut().zip(&av) {
                for (acc, &y) in accr.iter_mut().zip(&bv) {
                    *acc = _mm512_fmadd_ps(x, y, *acc);
                }
            }
        }};
    }
    let full = t.k / W * W;
    // SAFETY: lanes p..p+16 of A rows r < R and B rows j < C are in the
    // tile for p + 16 <= k; the last, partial step loads only the lanes of
    // `mask`, those below k (the caller's contract).
    unsafe {
        for p in (0..full).step_by(W) {
            step!(p, |x: *const f32| _mm512_loadu_ps(x));
        }
        if full < t.k {
            step!(full, |x: *const f32| _mm512_maskz_loadu_ps(mask, x));
        }
    }
    for (r, accr) in acc.iter().enumerate() {
        for (j, &s) in accr.iter().enumerate() {
            let s = _mm512_reduce_add_ps(s);
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
    1: [1 2 3 4 5 6 7 8], 2: [1 2 3 4 5 6 7 8], 3: [1 2 3 4 5 6], 4: [1 2 3 4 5],
    5: [1 2 3 4], 6: [1 2 3 4], 7: [1 2 3], 8: [1 2 3]);
tile_table!(plain bt_tile, tile_bt,
    1: [1 2 3 4 5 6 7 8], 2: [1 2 3 4 5 6], 3: [1 2 3 4 5], 4: [1 2 3 4]);

/// These tiles for the shared drivers (`simd/tiles.rs`).
pub(crate) struct Avx512Tiles;

impl TileSet for Avx512Tiles {
    const W: usize = W;
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
/// As [`tiles::sgemm_bn`], with the CPU supporting AVX512F, AVX2, FMA.
pub(crate) unsafe fn sgemm_bn(
    g: &SmallGeom,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    rows_outer: bool,
    bias: Option<&[f32]>,
) {
    // SAFETY: the caller's contract.
    unsafe { tiles::sgemm_bn::<Avx512Tiles>(g, a, b, c, rows_outer, bias) }
}

/// C = alpha A B^T + beta C, on these tiles (see [`tiles::sgemm_bt`]).
///
/// # Safety
/// As [`tiles::sgemm_bt`], with the CPU supporting AVX512F, AVX2, FMA.
pub(crate) unsafe fn sgemm_bt(g: &SmallGeom, a: &[f32], b: &[f32], c: &mut [f32]) {
    // SAFETY: the caller's contract.
    unsafe { tiles::sgemm_bt::<Avx512Tiles>(g, a, b, c) }
}

/// Most inner dimension for [`rank_k`].
pub(crate) const RANK_K_MAX: usize = 8;

/// C = alpha op(A) B + beta C for a tiny inner dimension (k <= RANK_K_MAX),
/// B not transposed: each row of C is written once, front to back, as a
/// sum of k scaled rows of B.
///
/// # Safety
/// As [`sgemm_bn`].
#[target_feature(enable = "avx512f,avx2,fma")]
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
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn rank_k_fixed<const K: usize>(g: &SmallGeom, a: *const f32, b: *const f32, c: *mut f32) {
    let vbeta = _mm512_set1_ps(g.beta);
    let tail = g.n % W;
    let mask = lane_mask(tail);
    for i in 0..g.m {
        let mut w = [_mm512_setzero_ps(); K];
        for (p, w) in w.iter_mut().enumerate() {
            // SAFETY: A[i, p] with i < m, p < k is in `a` (the contract).
            *w = _mm512_set1_ps(g.alpha * unsafe { *a.add(i * g.rsa + p * g.csa) });
        }
        let crow = c.wrapping_add(i * g.ldc);
        macro_rules! vector {
            ($j:expr, $load:expr, $store:expr) => {{
                let j = $j;
                let mut acc = if g.beta == 0.0 {
                    _mm512_setzero_ps()
                } else {
                    _mm512_mul_ps(vbeta, $load(crow.add(j)))
                };
                for (p, &w) in w.iter().enumerate() {
                    acc = _mm512_fmadd_ps(w, $load(b.add(p * g.ldb + j)), acc);
                }
                $store(crow.add(j), acc);
            }};
        }
        // SAFETY: C[i, j..j+16] and B[p, j..j+16] for p < k lie in the
        // slices for j + 16 <= n; the last, partial vector touches only the
        // lanes of `mask`, those below n.
        unsafe {
            for j in (0..g.n - tail).step_by(W) {
                vector!(j, |x: *const f32| _mm512_loadu_ps(x), |x: *mut f32, v| {
                    _mm512_storeu_ps(x, v)
                });
            }
            if tail != 0 {
                vector!(
                    g.n - tail,
                    |x: *const f32| _mm512_maskz_loadu_ps(mask, x),
                    |x: *mut f32, v| _mm512_mask_storeu_ps(x, mask, v)
                );
            }
        }
    }
}
