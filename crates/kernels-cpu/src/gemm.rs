//! Single-precision matrix product, `C = alpha op(A) op(B) + beta C`.
//!
//! Each call (or each block of a parallel split) takes one of these paths:
//! - the small path, hand-written, when C has few rows (at most
//!   [`SMALL_M`]: one instance, the top of a tree; more with AVX2 or
//!   AVX-512 while B is small) or, with B not transposed, the inner
//!   dimension is at most [`SMALL_K`] (the weight gradient `x^T dy` of a
//!   few instances). It
//!   reads A and B in place: matrixmultiply packs both first, which for few
//!   rows costs more than the product (1 x 300 x 600: 6 GFLOP/s there, 30
//!   here; 64 rows: 80 there);
//! - matrixmultiply otherwise, with transposes expressed as strides.
//!
//! Above [`PAR_MIN_WORK`] multiply-adds the product splits over the current
//! rayon pool: into bands of rows of C when there are enough rows, else into
//! blocks of columns (computed into scratch and added into C afterwards,
//! which keeps every write through a safe, disjoint borrow).
//!
//! `alpha == 0` is not special-cased: NaN and infinity in A or B still
//! propagate, as IEEE arithmetic says. `beta == 0` ignores C's old contents.
//! The paths sum in different orders (and some fold alpha into A), so
//! results agree to rounding, not bit for bit.

use rayon::prelude::*;

mod crossover;
mod packed;
#[cfg(test)]
mod tile_bench;
pub use crossover::Crossovers;
pub use packed::PackedB;

#[cfg(target_arch = "x86_64")]
use crate::simd::avx2::gemm as avx2;
#[cfg(target_arch = "x86_64")]
use crate::simd::avx512::gemm as avx512;
use crate::{CpuKernels, Isa, KernelError, Result};

/// Whether a matrix operand is used as stored or transposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transpose {
    /// op(X) = X.
    No,
    /// op(X) = X^T.
    Yes,
}

/// Products with at most this many rows take the hand-written small path.
pub const SMALL_M: usize = 16;

/// Products whose inner dimension is at most this (B not transposed) take
/// the hand-written small path whatever their rows.
pub const SMALL_K: usize = 16;

/// Products with B transposed and at most this many columns of C take the
/// hand-written path whatever their rows: its dot products of rows of A
/// and B stay fast for any width, while matrixmultiply's register tiles are
/// mostly empty (an output layer over 5 classes: 1000 x 5 x 150 at 11
/// GFLOP/s there, 48 x 5 x 150 at 60 here, AVX-512 Zen 4).
pub const SMALL_N_BT: usize = 16;

/// With AVX2 the register tiles beat matrixmultiply well past 16 rows
/// while B stays within about L2 (at most this many elements, 1 MiB); the
/// AVX-512 tiles further (to 128-192 rows as B is, 64-128 with A
/// transposed, on the Xeon of `simd/avx512/gemm.rs`). How far is measured
/// per machine and per ISA ([`Crossovers`], `gemm/crossover.rs`);
/// the constants are the Zen 3's figures, used with
/// `SHEAF_GEMM_CROSSOVER=fixed` (x 300 x 450): B as stored up to 64 rows (NN
/// 17 rows: 86 GFLOP/s against 48, 64 rows: 87 against 79), A transposed up
/// to 24 (TN 17: 75 against 48; 32: 70 against 74). With B transposed the
/// kernel reads whole rows of B, so its limit (48 rows: 72 against 68)
/// holds for any B. Beyond these the extra passes over B lose.
const WIDE_B_MAX: usize = 1 << 18;
const WIDE_ROWS_NN: usize = 64;
const WIDE_ROWS_TN: usize = 24;
const WIDE_ROWS_BT: usize = 48;

/// Products of at least this many multiply-adds (m n k) split over the
/// current rayon pool: about 25 us of work on one core. Measured with 2
/// threads against 1 (x 300 x 450 and similar shapes, 2-core Zen 3, the
/// second core often busy): below 2^19 the split is as often slower as
/// faster (16 x 100 x 200: 0.82-0.95x); from 2^20 it gains when the
/// second core is free (16 x 200 x 300: 1.4-1.8x, 64 x 200 x 200: 1.8x,
/// 128^3: 1.1-1.8x) and costs little when it is not.
pub const PAR_MIN_WORK: usize = 1 << 20;

/// A row split needs at least this many rows per part; with fewer rows the
/// product splits by columns.
const MIN_ROWS_PER_PART: usize = 32;
/// Columns per part of a column split, at least (a multiple of 8, so only
/// the last part has a partial vector).
const MIN_COLS_PER_PART: usize = 32;

/// Geometry of a small-path product: `op(A)[i, p]` at `a[i * rsa + p * csa]`,
/// B and C row-major with strides `ldb` and `ldc`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SmallGeom {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub beta: f32,
    pub rsa: usize,
    pub csa: usize,
    pub ldb: usize,
    pub ldc: usize,
}

/// One sgemm call's scalar arguments.
#[derive(Debug, Clone, Copy)]
struct Gemm {
    ta: Transpose,
    tb: Transpose,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    beta: f32,
    lda: usize,
    ldb: usize,
    ldc: usize,
}

/// Elements a `rows x cols` matrix with row stride `ld` spans.
fn extent(rows: usize, cols: usize, ld: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        Some(0)
    } else {
        (rows - 1).checked_mul(ld)?.checked_add(cols)
    }
}

fn check_operand(
    kernel: &'static str,
    arg: &'static str,
    ld_name: &'static str,
    (rows, cols): (usize, usize),
    ld: usize,
    len: usize,
) -> Result<()> {
    let invalid = |what: String| KernelError::Invalid { kernel, what };
    if ld < cols {
        return Err(invalid(format!(
            "{ld_name} = {ld} is less than the {cols} columns of `{arg}` as stored"
        )));
    }
    let needed = extent(rows, cols, ld).ok_or_else(|| {
        invalid(format!(
            "`{arg}`: {rows} rows of stride {ld} overflow usize"
        ))
    })?;
    KernelError::check_min_len(kernel, arg, len, needed)
}

impl Gemm {
    /// A as stored: rows x cols.
    fn a_shape(&self) -> (usize, usize) {
        match self.ta {
            Transpose::No => (self.m, self.k),
            Transpose::Yes => (self.k, self.m),
        }
    }

    /// B as stored: rows x cols.
    fn b_shape(&self) -> (usize, usize) {
        match self.tb {
            Transpose::No => (self.k, self.n),
            Transpose::Yes => (self.n, self.k),
        }
    }

    fn check(&self, a: &[f32], b: &[f32], c: &[f32]) -> Result<()> {
        check_operand("sgemm", "a", "lda", self.a_shape(), self.lda, a.len())?;
        check_operand("sgemm", "b", "ldb", self.b_shape(), self.ldb, b.len())?;
        check_operand("sgemm", "c", "ldc", (self.m, self.n), self.ldc, c.len())
    }

    /// Offset in A of row `i` of op(A).
    fn a_row(&self, i: usize) -> usize {
        match self.ta {
            Transpose::No => i * self.lda,
            Transpose::Yes => i,
        }
    }

    /// Offset in B of column `j` of op(B).
    fn b_col(&self, j: usize) -> usize {
        match self.tb {
            Transpose::No => j,
            Transpose::Yes => j * self.ldb,
        }
    }

    /// (row stride, column stride) of op(A).
    fn a_strides(&self) -> (usize, usize) {
        match self.ta {
            Transpose::No => (self.lda, 1),
            Transpose::Yes => (1, self.lda),
        }
    }
}

/// `x` from offset `off`, or empty (the callee's length check then fails).
fn tail(x: &[f32], off: usize) -> &[f32] {
    x.get(off..).unwrap_or(&[])
}

impl CpuKernels {
    /// C = alpha * op(A) * op(B) + beta * C.  op(A): m x k, op(B): k x n,
    /// C: m x n, all row-major.
    ///
    /// A is stored m x k (`ta == No`) or k x m (`Yes`) with row stride `lda`;
    /// likewise B (k x n or n x k, `ldb`); C is m x n with row stride `ldc`.
    /// `beta == 0` means C is overwritten (its old contents, NaN included, are
    /// ignored), as in BLAS; `k == 0` gives C = beta C; `m == 0` or `n == 0`
    /// does nothing.
    ///
    /// # Errors
    /// [`KernelError::Invalid`] if a leading dimension is less than the row
    /// width of its matrix as stored, [`KernelError::TooShort`] if a slice
    /// is shorter than its matrix's span `(rows - 1) * ld + cols`.
    #[allow(clippy::too_many_arguments)]
    pub fn sgemm(
        &self,
        ta: Transpose,
        tb: Transpose,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: &[f32],
        lda: usize,
        b: &[f32],
        ldb: usize,
        beta: f32,
        c: &mut [f32],
        ldc: usize,
    ) -> Result<()> {
        let g = Gemm {
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            beta,
            lda,
            ldb,
            ldc,
        };
        g.check(a, b, c)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        crate::gemm_log::note(ta, tb, m, n, k);
        if k == 0 {
            scale_rows(c, m, n, ldc, beta, None);
            return Ok(());
        }
        if !crate::parallel::should_split(m.saturating_mul(n).saturating_mul(k), PAR_MIN_WORK) {
            return self.leaf(&g, a, b, c);
        }
        let threads = rayon::current_num_threads();
        let row_parts = threads.min(m / MIN_ROWS_PER_PART);
        let col_parts = threads.min(n / MIN_COLS_PER_PART);
        if row_parts >= 2 {
            self.split_rows(&g, a, b, c, row_parts)
        } else if col_parts >= 2 {
            self.split_cols(&g, a, b, c, col_parts)
        } else {
            self.leaf(&g, a, b, c)
        }
    }

    /// Bands of rows of C, one per part.
    fn split_rows(
        &self,
        g: &Gemm,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        parts: usize,
    ) -> Result<()> {
        let rows_per = g.m.div_ceil(parts);
        c.par_chunks_mut((rows_per * g.ldc).max(1))
            .enumerate()
            .try_for_each(|(t, c)| {
                let i0 = t * rows_per;
                if i0 >= g.m {
                    return Ok(()); // slack past the last row of C
                }
                let sub = Gemm {
                    m: rows_per.min(g.m - i0),
                    ..*g
                };
                self.leaf(&sub, tail(a, g.a_row(i0)), b, c)
            })
    }

    /// Blocks of columns of C: the first written in place, the others into
    /// scratch (C's column blocks are not disjoint slices), then added in.
    fn split_cols(
        &self,
        g: &Gemm,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        parts: usize,
    ) -> Result<()> {
        let bound = |t: usize| {
            if t == parts {
                g.n
            } else {
                g.n * t / parts / 8 * 8
            }
        };
        let mut scratch: Vec<(usize, usize, Vec<f32>)> = (1..parts)
            .map(|t| {
                let (j0, j1) = (bound(t), bound(t + 1));
                (j0, j1 - j0, vec![0.0; g.m * (j1 - j0)])
            })
            .collect();
        let first = Gemm { n: bound(1), ..*g };
        let (r0, r1) = rayon::join(
            || self.leaf(&first, a, b, c),
            || {
                scratch.par_iter_mut().try_for_each(|(j0, w, s)| {
                    let sub = Gemm {
                        n: *w,
                        beta: 0.0,
                        ldc: *w,
                        ..*g
                    };
                    self.leaf(&sub, a, tail(b, g.b_col(*j0)), s)
                })
            },
        );
        r0?;
        r1?;
        for (j0, w, s) in &scratch {
            for (i, src) in s.chunks_exact((*w).max(1)).enumerate() {
                let dst = &mut c[i * g.ldc + j0..i * g.ldc + j0 + w];
                if g.beta == 0.0 {
                    dst.copy_from_slice(src);
                } else {
                    dst.iter_mut()
                        .zip(src)
                        .for_each(|(d, &s)| *d = s + g.beta * *d);
                }
            }
        }
        Ok(())
    }

    /// One block on the calling thread.
    fn leaf(&self, g: &Gemm, a: &[f32], b: &[f32], c: &mut [f32]) -> Result<()> {
        g.check(a, b, c)?;
        if g.m == 0 || g.n == 0 {
            return Ok(());
        }
        let avx2 = matches!(self.isa(), Isa::Avx2 | Isa::Avx512);
        // The crossovers are measured only when a product could take either
        // path (more than SMALL_M rows), for the tiles this handle runs.
        let wide = || crossover::get(self.isa());
        let rows_limit = match (g.ta, g.tb) {
            _ if !avx2 || g.m <= SMALL_M => SMALL_M,
            (_, Transpose::Yes) => wide().bt,
            (Transpose::No, Transpose::No) if g.k.saturating_mul(g.n) <= WIDE_B_MAX => wide().nn,
            (Transpose::Yes, Transpose::No) if g.k.saturating_mul(g.n) <= WIDE_B_MAX => wide().tn,
            _ => SMALL_M,
        };
        let narrow_bt = g.tb == Transpose::Yes && g.n <= SMALL_N_BT;
        if g.m <= rows_limit || (g.k <= SMALL_K && g.tb == Transpose::No) || narrow_bt {
            self.small(g, a, b, c);
            Ok(())
        } else {
            matrixmultiply_leaf(g, a, b, c)
        }
    }

    /// The row limits of the hand-written path this handle runs (the AVX2
    /// or the AVX-512 tiles) on this machine (measured on first use, once
    /// per ISA; see [`Crossovers`]).
    pub fn gemm_crossovers(&self) -> Crossovers {
        crossover::get(self.isa())
    }

    /// The hand-written path; `g` has been checked against the slices.
    fn small(&self, g: &Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
        let (rsa, csa) = g.a_strides();
        let mut geom = SmallGeom {
            m: g.m,
            n: g.n,
            k: g.k,
            alpha: g.alpha,
            beta: g.beta,
            rsa,
            csa,
            ldb: g.ldb,
            ldc: g.ldc,
        };
        // The B-transposed kernels want A rows contiguous along k: copy A^T
        // (m x k, small here) when A is transposed too.
        let packed: Vec<f32>;
        let a = if g.tb == Transpose::Yes && g.ta == Transpose::Yes {
            packed = (0..g.m)
                .flat_map(|i| (0..g.k).map(move |p| (i, p)))
                .map(|(i, p)| a[p * g.lda + i])
                .collect();
            (geom.rsa, geom.csa) = (g.k, 1);
            &packed[..]
        } else {
            a
        };
        match (self.isa(), g.tb) {
            (Isa::Scalar, Transpose::No) => scalar_bn(&geom, a, b, c),
            (Isa::Scalar, Transpose::Yes) => scalar_bt(&geom, a, b, c),
            // An Avx512 handle runs the AVX-512 tiles (16 columns a vector,
            // `simd/avx512/gemm.rs`; on the Xeon 1.2-1.8x the AVX2 tiles,
            // e.g. 16 x 300 x 750 at 148-158 GFLOP/s against 87-92) except
            // where the AVX2 ones measured faster: one row, B transposed
            // with at most two rows, and rank-k updates with k <= 2
            // (figures there).
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx512, Transpose::No) if g.k <= avx512::RANK_K_MAX && g.k > 2 => {
                // SAFETY: isa Avx512 proves AVX-512F+AVX2+FMA; `g.check`
                // proved a, b, c span op(A) (rsa, csa strides), B (k x n,
                // ldb) and C; and k <= RANK_K_MAX.
                unsafe { avx512::rank_k(&geom, a, b, c) }
            }
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx512, Transpose::No) if g.m > 1 && g.k > avx512::RANK_K_MAX => {
                // SAFETY: isa Avx512 proves AVX-512F+AVX2+FMA; `g.check`
                // proved a, b, c span op(A) (rsa, csa strides), B (k x n,
                // ldb) and C.
                unsafe { avx512::sgemm_bn(&geom, a, b, c, g.k <= SMALL_K, None) }
            }
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx512, Transpose::Yes) if g.m > 2 => {
                // SAFETY: isa Avx512 proves AVX-512F+AVX2+FMA; `g.check`
                // proved b spans n x k (ldb) and c spans m x n (ldc); a is
                // either A (m x k, lda, checked) or `packed`, exactly m x k.
                unsafe { avx512::sgemm_bt(&geom, a, b, c) }
            }
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx2 | Isa::Avx512, Transpose::No) if g.k <= avx2::RANK_K_MAX => {
                // SAFETY: isa Avx2 or Avx512 proves AVX2+FMA; `g.check`
                // proved a, b, c span op(A) (rsa, csa strides), B (k x n,
                // ldb) and C; and k <= RANK_K_MAX.
                unsafe { avx2::rank_k(&geom, a, b, c) }
            }
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx2 | Isa::Avx512, Transpose::No) => {
                // SAFETY: isa Avx2 or Avx512 proves AVX2+FMA; `g.check`
                // proved a, b, c span op(A) (rsa, csa strides), B (k x n,
                // ldb) and C.
                unsafe { avx2::sgemm_bn(&geom, a, b, c, g.k <= SMALL_K, None) }
            }
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx2 | Isa::Avx512, Transpose::Yes) => {
                // SAFETY: isa Avx2 or Avx512 proves AVX2+FMA; `g.check`
                // proved b spans n x k (ldb) and c spans m x n (ldc); a is
                // either A (m x k, lda, checked) or `packed`, exactly m x k.
                unsafe { avx2::sgemm_bt(&geom, a, b, c) }
            }
            #[cfg(not(target_arch = "x86_64"))]
            (Isa::Avx2 | Isa::Avx512, Transpose::No) => scalar_bn(&geom, a, b, c),
            #[cfg(not(target_arch = "x86_64"))]
            (Isa::Avx2 | Isa::Avx512, Transpose::Yes) => scalar_bt(&geom, a, b, c),
        }
    }
}

/// C = beta C (+ `bias` on every row): a product with k = 0. With beta 0,
/// C's old contents (NaN included) are ignored.
fn scale_rows(c: &mut [f32], m: usize, n: usize, ldc: usize, beta: f32, bias: Option<&[f32]>) {
    for row in c.chunks_mut(ldc.max(1)).take(m) {
        let row = &mut row[..n];
        if beta == 0.0 {
            row.fill(0.0);
        } else {
            row.iter_mut().for_each(|x| *x *= beta);
        }
        if let Some(bias) = bias {
            row.iter_mut().zip(bias).for_each(|(x, &b)| *x += b);
        }
    }
}

/// Scalar small path, B not transposed: each row of C accumulates scaled
/// rows of B (inner loop contiguous, auto-vectorised).
fn scalar_bn(g: &SmallGeom, a: &[f32], b: &[f32], c: &mut [f32]) {
    for i in 0..g.m {
        let crow = &mut c[i * g.ldc..i * g.ldc + g.n];
        if g.beta == 0.0 {
            crow.fill(0.0);
        } else {
            crow.iter_mut().for_each(|x| *x *= g.beta);
        }
        for p in 0..g.k {
            let s = g.alpha * a[i * g.rsa + p * g.csa];
            let brow = &b[p * g.ldb..p * g.ldb + g.n];
            crow.iter_mut().zip(brow).for_each(|(x, &y)| *x += s * y);
        }
    }
}

/// Scalar small path, B transposed: dot products of rows of A (contiguous,
/// `rsa` apart) with rows of B.
fn scalar_bt(g: &SmallGeom, a: &[f32], b: &[f32], c: &mut [f32]) {
    for i in 0..g.m {
        let arow = &a[i * g.rsa..i * g.rsa + g.k];
        for j in 0..g.n {
            let s = dot(arow, &b[j * g.ldb..j * g.ldb + g.k]);
            let cij = &mut c[i * g.ldc + j];
            *cij = if g.beta == 0.0 {
                g.alpha * s
            } else {
                g.alpha * s + g.beta * *cij
            };
        }
    }
}

/// Dot product with eight running sums, so that it vectorises.
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (xs, ys) in xc.zip(yc) {
        for l in 0..8 {
            acc[l] += xs[l] * ys[l];
        }
    }
    let tail: f32 = xr.iter().zip(yr).map(|(a, b)| a * b).sum();
    acc.iter().sum::<f32>() + tail
}

/// matrixmultiply on one thread.
fn matrixmultiply_leaf(g: &Gemm, a: &[f32], b: &[f32], c: &mut [f32]) -> Result<()> {
    g.check(a, b, c)?;
    // A row stride only multiplies row indices below the stored row count,
    // so with one row it is never used (and may exceed isize::MAX). With two
    // or more rows the checked span (rows - 1) * ld + cols <= len bounds it
    // by the slice length, which fits isize.
    let ld = |ld: usize, rows: usize| if rows <= 1 { 0 } else { ld as isize };
    let lda = ld(g.lda, g.a_shape().0);
    let ldb = ld(g.ldb, g.b_shape().0);
    let (rsa, csa) = match g.ta {
        Transpose::No => (lda, 1),
        Transpose::Yes => (1, lda),
    };
    let (rsb, csb) = match g.tb {
        Transpose::No => (ldb, 1),
        Transpose::Yes => (1, ldb),
    };
    // SAFETY: `g.check` just proved that each slice holds its matrix as
    // stored, (rows - 1) * ld + cols elements, so op(A)[i, p] at
    // a[i * rsa + p * csa] (i < m, p < k), op(B)[p, j] (p < k, j < n) and
    // C[i, j] at c[i * ldc + j] (i < m, j < n) all lie in their slices; the
    // strides above are exact and fit isize. `c` is a unique borrow, so C
    // does not alias A or B. matrixmultiply reads only A and B, writes only
    // those elements of C, and with beta == 0 does not read C.
    unsafe {
        matrixmultiply::sgemm(
            g.m,
            g.k,
            g.n,
            g.alpha,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            g.beta,
            c.as_mut_ptr(),
            ld(g.ldc, g.m),
            1,
        );
    }
    Ok(())
}
