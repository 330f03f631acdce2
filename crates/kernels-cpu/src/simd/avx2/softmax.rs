//! AVX2 + FMA row-wise softmax family and row / column sums.
//!
//! Every kernel takes whole rows (`x.len()` a multiple of `cols`, checked by
//! the entry points in `crate::softmax`) and is memory-safe for any lengths:
//! rows are walked with `chunks_exact`, and extra elements are ignored.

use core::arch::x86_64::*;

use super::elementwise::{first_lanes, kernels, load_partial, store_partial, zip_map, W};
use super::math::{exp_ps, log_ps};

#[inline]
#[target_feature(enable = "avx2,fma")]
fn load(a: &[f32; W]) -> __m256 {
    // SAFETY: `a` is 8 readable f32s; loadu needs no alignment.
    unsafe { _mm256_loadu_ps(a.as_ptr()) }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hmax(v: __m256) -> f32 {
    let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
}

/// Largest element of a non-empty row. A NaN may or may not win; callers
/// do not care, since exp(NaN - m) then turns the whole row to NaN anyway.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn row_max(x: &[f32]) -> f32 {
    let (chunks, rest) = x.as_chunks::<W>();
    let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
    for c in chunks {
        m = _mm256_max_ps(m, load(c));
    }
    m = _mm256_max_ps(m, load_partial(rest, f32::NEG_INFINITY));
    hmax(m)
}

/// Stores y = e^(x - m) (rows of equal length) and returns its sum.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp_shift(x: &[f32], m: f32, y: &mut [f32]) -> f32 {
    let mv = _mm256_set1_ps(m);
    let (xc, xr) = x.as_chunks::<W>();
    let (yc, yr) = y.as_chunks_mut::<W>();
    let mut acc = _mm256_setzero_ps();
    for (x, y) in xc.iter().zip(yc) {
        let e = exp_ps(_mm256_sub_ps(load(x), mv));
        acc = _mm256_add_ps(acc, e);
        // SAFETY: `y` is 8 writable f32s.
        unsafe { _mm256_storeu_ps(y.as_mut_ptr(), e) };
    }
    if !xr.is_empty() {
        let e = exp_ps(_mm256_sub_ps(load_partial(xr, 0.0), mv));
        let e = _mm256_and_ps(e, _mm256_castsi256_ps(first_lanes(xr.len())));
        acc = _mm256_add_ps(acc, e);
        store_partial(yr, e);
    }
    hsum(acc)
}

/// Max over the 8 lanes, in every lane (butterfly: no scalar round trip).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn allmax(v: __m256) -> __m256 {
    let v = _mm256_max_ps(v, _mm256_permute2f128_ps::<1>(v, v));
    let v = _mm256_max_ps(v, _mm256_permute_ps::<0b0100_1110>(v));
    _mm256_max_ps(v, _mm256_permute_ps::<0b1011_0001>(v))
}

/// Sum over the 8 lanes, in every lane.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn allsum(v: __m256) -> __m256 {
    let v = _mm256_add_ps(v, _mm256_permute2f128_ps::<1>(v, v));
    let v = _mm256_add_ps(v, _mm256_permute_ps::<0b0100_1110>(v));
    _mm256_add_ps(v, _mm256_permute_ps::<0b1011_0001>(v))
}

/// A row of at most 8 elements in one register: (x padded with -inf, max,
/// e^(x - max) with padding lanes 0, their sum), max and sum in every lane.
/// Narrow rows are latency-bound, hence the all-lane reductions.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn narrow(x: &[f32]) -> (__m256, __m256, __m256, __m256) {
    let v = load_partial(x, f32::NEG_INFINITY);
    let m = allmax(v);
    let e = exp_ps(_mm256_sub_ps(v, m));
    let e = _mm256_and_ps(e, _mm256_castsi256_ps(first_lanes(x.len())));
    (v, m, e, allsum(e))
}

/// (max, sum of e^(x - max)) of a row; a row longer than 8 also leaves the
/// exponentials in `y`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn row_stats(x: &[f32], y: &mut [f32]) -> (f32, f32) {
    if x.len() <= W {
        let (_, m, _, s) = narrow(x);
        return (_mm256_cvtss_f32(m), _mm256_cvtss_f32(s));
    }
    let m = row_max(x);
    (m, exp_shift(x, m, y))
}

/// ln of 8 row sums in one vector (a libm call per row would cost more
/// than a narrow row itself).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn ln8(s: &[f32; W]) -> [f32; W] {
    let mut out = [0.0f32; W];
    let v = log_ps(load(s));
    // SAFETY: `out` is 8 writable f32s.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
    out
}

/// Softmax of one row of at most 8 into `y`; returns (max, sum of e^(x - max)).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn softmax_narrow(x: &[f32], y: &mut [f32]) -> (f32, f32) {
    let (_, m, e, s) = narrow(x);
    store_partial(y, _mm256_div_ps(e, s));
    (_mm256_cvtss_f32(m), _mm256_cvtss_f32(s))
}

/// Softmax of one row longer than 8 into `y`; returns (max, sum of e^(x - max)).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn softmax_wide(x: &[f32], y: &mut [f32]) -> (f32, f32) {
    let m = row_max(x);
    let s = exp_shift(x, m, y);
    let inv = _mm256_set1_ps(1.0 / s);
    zip_map([], [y], |[], [y]| [_mm256_mul_ps(y, inv)]);
    (m, s)
}

/// Sum of a * b over a row (the lengths are equal).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (ac, ar) = a.as_chunks::<W>();
    let (bc, br) = b.as_chunks::<W>();
    let mut acc = _mm256_setzero_ps();
    for (a, b) in ac.iter().zip(bc) {
        acc = _mm256_fmadd_ps(load(a), load(b), acc);
    }
    acc = _mm256_fmadd_ps(load_partial(ar, 0.0), load_partial(br, 0.0), acc);
    hsum(acc)
}

/// Sum of a row.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn sum(a: &[f32]) -> f32 {
    let (ac, ar) = a.as_chunks::<W>();
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut pairs = ac.chunks_exact(2);
    for p in &mut pairs {
        acc0 = _mm256_add_ps(acc0, load(&p[0]));
        acc1 = _mm256_add_ps(acc1, load(&p[1]));
    }
    for c in pairs.remainder() {
        acc0 = _mm256_add_ps(acc0, load(c));
    }
    acc1 = _mm256_add_ps(acc1, load_partial(ar, 0.0));
    hsum(_mm256_add_ps(acc0, acc1))
}

/// `out[j] += sum_r x[r * cols + c0 + j]` for the 8 * V columns from `c0`.
/// Needs `c0 + 8 V <= cols` and `x.len() == rows * cols`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn col_block<const V: usize>(x: &[f32], cols: usize, c0: usize, out: &mut [f32]) {
    let mut acc = [_mm256_setzero_ps(); V];
    for row in x.chunks_exact(cols) {
        let blk = &row[c0..c0 + V * W];
        for (a, c) in acc.iter_mut().zip(blk.as_chunks::<W>().0) {
            *a = _mm256_add_ps(*a, load(c));
        }
    }
    for (o, a) in out.as_chunks_mut::<W>().0.iter_mut().zip(acc) {
        let v = _mm256_add_ps(load(o), a);
        // SAFETY: `o` is 8 writable f32s.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
    }
}

kernels! {
    /// Each row of y = softmax of the row of x.
    fn softmax_rows(x: &[f32], cols: usize, y: &mut [f32]) {
        if cols == 0 {
            return;
        }
        let rows = x.chunks_exact(cols).zip(y.chunks_exact_mut(cols));
        if cols <= W {
            rows.for_each(|(x, y)| _ = softmax_narrow(x, y));
        } else {
            rows.for_each(|(x, y)| _ = softmax_wide(x, y));
        }
    }
    /// Each row of y = x - logsumexp(row of x).
    fn log_softmax_rows(x: &[f32], cols: usize, y: &mut [f32]) {
        if cols == 0 {
            return;
        }
        let rows = (x.len() / cols).min(y.len() / cols);
        // Blocks of 8 rows: (max, sum) per row, then one vector log of the
        // 8 sums, then y = (x - max) - ln(sum). Rows are sliced by index:
        // re-chunking every block would cost integer divisions per row.
        for r0 in (0..rows).step_by(W) {
            let k = (rows - r0).min(W);
            let (mut m, mut s) = ([0.0f32; W], [1.0f32; W]);
            for j in 0..k {
                let at = (r0 + j) * cols..(r0 + j + 1) * cols;
                // (a wide row's y holds its exponentials until pass two)
                (m[j], s[j]) = row_stats(&x[at.clone()], &mut y[at]);
            }
            let ls = ln8(&s);
            for j in 0..k {
                let at = (r0 + j) * cols..(r0 + j + 1) * cols;
                let (x, y) = (&x[at.clone()], &mut y[at]);
                let (mv, lv) = (_mm256_set1_ps(m[j]), _mm256_set1_ps(ls[j]));
                if cols <= W {
                    let v = load_partial(x, 0.0);
                    store_partial(y, _mm256_sub_ps(_mm256_sub_ps(v, mv), lv));
                } else {
                    zip_map([x], [y], |[x], _| [_mm256_sub_ps(_mm256_sub_ps(x, mv), lv)]);
                }
            }
        }
    }
    /// dx += y (dy - <dy, y>) row by row.
    fn softmax_rows_bwd(y: &[f32], dy: &[f32], cols: usize, dx: &mut [f32]) {
        if cols == 0 {
            return;
        }
        let rows = y.chunks_exact(cols).zip(dy.chunks_exact(cols));
        for ((y, dy), dx) in rows.zip(dx.chunks_exact_mut(cols)) {
            let d = _mm256_set1_ps(dot(y, dy));
            zip_map([y, dy], [dx], |[y, dy], [dx]| {
                [_mm256_fmadd_ps(y, _mm256_sub_ps(dy, d), dx)]
            });
        }
    }
    /// dx += dy - exp(y) sum(dy) row by row.
    fn log_softmax_rows_bwd(y: &[f32], dy: &[f32], cols: usize, dx: &mut [f32]) {
        if cols == 0 {
            return;
        }
        let rows = y.chunks_exact(cols).zip(dy.chunks_exact(cols));
        for ((y, dy), dx) in rows.zip(dx.chunks_exact_mut(cols)) {
            let s = _mm256_set1_ps(sum(dy));
            zip_map([y, dy], [dx], |[y, dy], [dx]| {
                [_mm256_add_ps(dx, _mm256_fnmadd_ps(exp_ps(y), s, dy))]
            });
        }
    }
    /// probs = softmax(x), loss[r] = logsumexp(x[r]) - x[r, labels[r]].
    /// Labels must be < cols (a row whose label is not gets a NaN loss).
    fn nll_log_softmax(
        x: &[f32],
        cols: usize,
        labels: &[u32],
        probs: &mut [f32],
        loss: &mut [f32]
    ) {
        if cols == 0 {
            return;
        }
        let mut rows = x.chunks_exact(cols).zip(probs.chunks_exact_mut(cols)).zip(labels);
        for lossb in loss.chunks_mut(W) {
            // loss = (max - x[label]) + ln(sum): the logs of 8 rows at once.
            let (mut d, mut s) = ([0.0f32; W], [1.0f32; W]);
            let block = (&mut rows).zip(d.iter_mut().zip(&mut s));
            for (((x, p), &l), (d, s)) in block.take(lossb.len()) {
                let (m, sum) = if cols <= W { softmax_narrow(x, p) } else { softmax_wide(x, p) };
                *d = m - x.get(l as usize).copied().unwrap_or(f32::NAN);
                *s = sum;
            }
            let ls = load(&ln8(&s));
            store_partial(lossb, _mm256_add_ps(load(&d), ls));
        }
    }
    /// dx[r] += dloss[r] (probs[r] - onehot(labels[r])).
    /// Labels must be < cols (rows whose label is not skip the one-hot term).
    fn nll_log_softmax_bwd(
        probs: &[f32],
        cols: usize,
        labels: &[u32],
        dloss: &[f32],
        dx: &mut [f32]
    ) {
        if cols == 0 {
            return;
        }
        let rows = probs.chunks_exact(cols).zip(dx.chunks_exact_mut(cols));
        for (((p, dx), &l), &g) in rows.zip(labels).zip(dloss) {
            let gv = _mm256_set1_ps(g);
            zip_map([p], [&mut *dx], |[p], [dx]| [_mm256_fmadd_ps(p, gv, dx)]);
            if let Some(d) = dx.get_mut(l as usize) {
                *d -= g;
            }
        }
    }
    /// out[r] = sum of row r.
    fn row_sums(x: &[f32], cols: usize, out: &mut [f32]) {
        if cols == 0 {
            return;
        }
        for (x, o) in x.chunks_exact(cols).zip(out) {
            *o = sum(x);
        }
    }
    /// out[j] += sum_r x[r, c0 + j] for j < out.len() (columns c0.. of x).
    fn col_sums_acc(x: &[f32], cols: usize, c0: usize, out: &mut [f32]) {
        if cols == 0 || c0 >= cols {
            return;
        }
        let n = out.len().min(cols - c0);
        let mut c = 0;
        while c + 4 * W <= n {
            col_block::<4>(x, cols, c0 + c, &mut out[c..c + 4 * W]);
            c += 4 * W;
        }
        while c + W <= n {
            col_block::<1>(x, cols, c0 + c, &mut out[c..c + W]);
            c += W;
        }
        if c < n {
            // The last n - c (< 8) columns: partial loads, same summation
            // order as the full blocks (so any column split gives the same bits).
            let mut acc = _mm256_setzero_ps();
            for row in x.chunks_exact(cols) {
                acc = _mm256_add_ps(acc, load_partial(&row[c0 + c..c0 + n], 0.0));
            }
            let o = &mut out[c..n];
            store_partial(o, _mm256_add_ps(load_partial(o, 0.0), acc));
        }
    }
}
