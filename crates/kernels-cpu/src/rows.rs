//! Row gather / scatter / copy: the embedding lookups, their gradients and
//! the batching copies of a dynamic graph.
//!
//! These kernels move memory and do (almost) no arithmetic, so they are
//! written in plain Rust for every ISA: copies are `memcpy`s (in 2 KiB
//! pieces, see the `copy` function) and the scatter's row add is a zip loop that the
//! compiler vectorises. Indices are validated in a first pass, so a bad
//! index leaves the output untouched.

use rayon::prelude::*;

use crate::parallel::should_split;
use crate::{CpuKernels, KernelError, Result};

/// Gather / copy / broadcast split over rows above this many elements moved.
/// Measured on the 2-core Zen 3 (gather from a 20000-row table): 1.7x at
/// 128 x 300, 2x from 256 x 300 on; at 128 x 150 and below, no gain.
pub const ROWS_COPY_MIN_LEN: usize = 1 << 15;

/// `scatter_add_rows` splits above this many elements of `src`: 1.8x at
/// 512 x 150 and 256 x 300, none at 256 x 150 (measured as above).
pub const ROWS_SCATTER_MIN_LEN: usize = 1 << 16;

/// `dst = src` (equal lengths) in pieces of 2 KiB.
///
/// glibc's `memcpy` switches to `rep movsb` from 4 KiB on, which on Zen 3
/// runs at ~5 GB/s instead of ~90 when `dst` lies 1..31 bytes past `src`
/// modulo 4 KiB (measured; e.g. two large buffers shifted by a few floats).
/// Pieces below that size keep to its vector loop, at the same speed
/// otherwise.
#[inline]
pub(crate) fn copy(dst: &mut [f32], src: &[f32]) {
    const PIECE: usize = 512;
    for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
        d.copy_from_slice(s);
    }
}

/// Rows of a `cols`-wide table stored in `len` floats, or an error when
/// `len` is not a whole number of rows.
fn table_rows(kernel: &'static str, arg: &str, len: usize, cols: usize) -> Result<usize> {
    if cols == 0 {
        return Err(KernelError::Invalid {
            kernel,
            what: "cols must be positive".into(),
        });
    }
    if !len.is_multiple_of(cols) {
        return Err(KernelError::Invalid {
            kernel,
            what: format!("`{arg}` has length {len}, not a multiple of cols = {cols}"),
        });
    }
    Ok(len / cols)
}

/// Checks every index against `rows`; the error names the first bad position.
pub(crate) fn check_indices(kernel: &'static str, idx: &[u32], rows: usize) -> Result<()> {
    match idx.iter().position(|&r| r as usize >= rows) {
        None => Ok(()),
        Some(position) => Err(KernelError::Index {
            kernel,
            index: idx[position] as usize,
            position,
            rows,
        }),
    }
}

/// `a * b`, or an `Invalid` error if it overflows `usize`.
fn mul_len(kernel: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| KernelError::Invalid {
        kernel,
        what: format!("{a} x {b} elements overflow usize"),
    })
}

/// `dst += src`, elementwise over equal lengths; vectorises.
#[inline]
fn add_row(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += *s;
    }
}

/// Gathers `idx` rows of `src` into consecutive rows of `dst` (indices checked).
fn gather_seq(src: &[f32], cols: usize, idx: &[u32], dst: &mut [f32]) {
    for (d, &r) in dst.chunks_exact_mut(cols).zip(idx) {
        let start = r as usize * cols;
        copy(d, &src[start..start + cols]);
    }
}

/// Parallel scatter-add. Each task owns a contiguous range of `dst` rows
/// and walks all positions in order, adding those that land in its range:
/// every destination row is written by one task, in the sequential order,
/// so duplicates are safe and the result is bit-identical to the sequential
/// loop. The range boundaries are quantiles of `idx`, which balances the
/// tasks unless a single row receives most of the positions.
fn scatter_par(src: &[f32], cols: usize, idx: &[u32], dst: &mut [f32], tasks: usize) {
    let mut sorted = idx.to_vec();
    let mut bounds = vec![0usize];
    for t in 1..tasks {
        let q = t * sorted.len() / tasks;
        let (_, &mut row, _) = sorted.select_nth_unstable(q);
        bounds.push(row as usize);
    }
    let mut parts: Vec<(usize, &mut [f32])> = Vec::with_capacity(tasks);
    let mut rest = dst;
    for w in bounds.windows(2) {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut((w[1] - w[0]) * cols);
        parts.push((w[0], head));
        rest = tail;
    }
    parts.push((bounds[bounds.len() - 1], rest));
    parts.into_par_iter().for_each(|(first, part)| {
        let end = first + part.len() / cols;
        for (s, &r) in src.chunks_exact(cols).zip(idx) {
            let r = r as usize;
            if (first..end).contains(&r) {
                let start = (r - first) * cols;
                add_row(&mut part[start..start + cols], s);
            }
        }
    });
}

impl CpuKernels {
    /// `dst[i, :] = src[idx[i], :]` — embedding lookup.
    ///
    /// `src` is a `? x cols` table (its length a multiple of `cols`), `dst`
    /// is `idx.len() x cols`. An index past the table is
    /// [`KernelError::Index`] with the index's position; `cols == 0` is
    /// [`KernelError::Invalid`].
    pub fn gather_rows(
        &self,
        src: &[f32],
        cols: usize,
        idx: &[u32],
        dst: &mut [f32],
    ) -> Result<()> {
        const K: &str = "gather_rows";
        let rows = table_rows(K, "src", src.len(), cols)?;
        KernelError::check_len(K, "dst", dst.len(), mul_len(K, idx.len(), cols)?)?;
        check_indices(K, idx, rows)?;
        if should_split(dst.len(), ROWS_COPY_MIN_LEN) {
            let per_task = (ROWS_COPY_MIN_LEN / 2 / cols).max(1);
            dst.par_chunks_mut(per_task * cols)
                .zip(idx.par_chunks(per_task))
                .for_each(|(d, i)| gather_seq(src, cols, i, d));
        } else {
            gather_seq(src, cols, idx, dst);
        }
        Ok(())
    }

    /// `dst[idx[i], :] += src[i, :]` — embedding gradient. Duplicate indices
    /// accumulate, in order of position (so the result does not depend on
    /// the thread count).
    ///
    /// `src` is `idx.len() x cols`, `dst` a `? x cols` table. Errors as in
    /// [`CpuKernels::gather_rows`]; nothing is written on error.
    pub fn scatter_add_rows(
        &self,
        src: &[f32],
        cols: usize,
        idx: &[u32],
        dst: &mut [f32],
    ) -> Result<()> {
        const K: &str = "scatter_add_rows";
        let rows = table_rows(K, "dst", dst.len(), cols)?;
        KernelError::check_len(K, "src", src.len(), mul_len(K, idx.len(), cols)?)?;
        check_indices(K, idx, rows)?;
        if should_split(src.len(), ROWS_SCATTER_MIN_LEN) {
            scatter_par(src, cols, idx, dst, rayon::current_num_threads());
        } else {
            for (s, &r) in src.chunks_exact(cols).zip(idx) {
                let start = r as usize * cols;
                add_row(&mut dst[start..start + cols], s);
            }
        }
        Ok(())
    }

    /// `dst[dst_idx[i], :] = src[src_idx[i], :]` for every `i` (ADDS with
    /// `accumulate`): a gather and a scatter in one pass, for rows of
    /// several batches placed into one (and their gradients sent back).
    /// Both tables hold `cols` columns; both index lists have the same
    /// length; duplicates in `dst_idx` accumulate when adding (the last
    /// wins otherwise). Indices are checked before anything is written.
    pub fn gather_scatter_rows(
        &self,
        src: &[f32],
        cols: usize,
        src_idx: &[u32],
        dst: &mut [f32],
        dst_idx: &[u32],
        accumulate: bool,
    ) -> Result<()> {
        const K: &str = "gather_scatter_rows";
        let src_rows = table_rows(K, "src", src.len(), cols)?;
        let dst_rows = table_rows(K, "dst", dst.len(), cols)?;
        KernelError::check_len(K, "dst_idx", dst_idx.len(), src_idx.len())?;
        check_indices(K, src_idx, src_rows)?;
        check_indices(K, dst_idx, dst_rows)?;
        for (&s, &d) in src_idx.iter().zip(dst_idx) {
            let (s, d) = (s as usize * cols, d as usize * cols);
            let (to, from) = (&mut dst[d..d + cols], &src[s..s + cols]);
            if accumulate {
                add_row(to, from);
            } else {
                copy(to, from);
            }
        }
        Ok(())
    }

    /// `dst[dst_idx[i], :] = srcs[t][r, :]` for `(t, r) = pairs[i]`: rows
    /// of several tables (`cols` columns each) into one in one pass.
    /// Indices are checked before anything is written.
    pub fn gather_rows_from(
        &self,
        srcs: &[&[f32]],
        cols: usize,
        pairs: &[(u32, u32)],
        dst: &mut [f32],
        dst_idx: &[u32],
    ) -> Result<()> {
        const K: &str = "gather_rows_from";
        let dst_rows = table_rows(K, "dst", dst.len(), cols)?;
        KernelError::check_len(K, "dst_idx", dst_idx.len(), pairs.len())?;
        check_pairs(K, srcs.iter().map(|s| s.len()), cols, pairs)?;
        check_indices(K, dst_idx, dst_rows)?;
        for (&(t, r), &d) in pairs.iter().zip(dst_idx) {
            let (r, d) = (r as usize * cols, d as usize * cols);
            copy(&mut dst[d..d + cols], &srcs[t as usize][r..r + cols]);
        }
        Ok(())
    }

    /// `dsts[t][r, :] += src[src_idx[i], :]` for `(t, r) = pairs[i]`: one
    /// table's rows added into several in one pass, in position order
    /// (duplicates add up). Indices are checked before anything is
    /// written.
    pub fn scatter_add_rows_to(
        &self,
        src: &[f32],
        cols: usize,
        src_idx: &[u32],
        dsts: &mut [&mut [f32]],
        pairs: &[(u32, u32)],
    ) -> Result<()> {
        const K: &str = "scatter_add_rows_to";
        let src_rows = table_rows(K, "src", src.len(), cols)?;
        KernelError::check_len(K, "src_idx", src_idx.len(), pairs.len())?;
        check_pairs(K, dsts.iter().map(|d| d.len()), cols, pairs)?;
        check_indices(K, src_idx, src_rows)?;
        for (&(t, r), &s) in pairs.iter().zip(src_idx) {
            let (r, s) = (r as usize * cols, s as usize * cols);
            add_row(&mut dsts[t as usize][r..r + cols], &src[s..s + cols]);
        }
        Ok(())
    }

    /// `dst[dst_row + i, :] = src[src_row + i, :]` for `i < n`.
    ///
    /// Both slices are row-major with `cols` columns and must hold the rows
    /// addressed ([`KernelError::TooShort`] otherwise); extra trailing
    /// elements are allowed.
    pub fn copy_rows(
        &self,
        src: &[f32],
        src_row: usize,
        dst: &mut [f32],
        dst_row: usize,
        n: usize,
        cols: usize,
    ) -> Result<()> {
        const K: &str = "copy_rows";
        let len = mul_len(K, n, cols)?;
        let src_start = mul_len(K, src_row, cols)?;
        let dst_start = mul_len(K, dst_row, cols)?;
        let overflow = || KernelError::Invalid {
            kernel: K,
            what: "row range overflows usize".into(),
        };
        let src_end = src_start.checked_add(len).ok_or_else(overflow)?;
        let dst_end = dst_start.checked_add(len).ok_or_else(overflow)?;
        KernelError::check_min_len(K, "src", src.len(), src_end)?;
        KernelError::check_min_len(K, "dst", dst.len(), dst_end)?;
        let (s, d) = (&src[src_start..src_end], &mut dst[dst_start..dst_end]);
        if should_split(len, ROWS_COPY_MIN_LEN) {
            let chunk = ROWS_COPY_MIN_LEN / 2;
            d.par_chunks_mut(chunk)
                .zip(s.par_chunks(chunk))
                .for_each(|(d, s)| copy(d, s));
        } else {
            copy(d, s);
        }
        Ok(())
    }

    /// Column blocks: `dst[r, dst_col..dst_col + width] (+)= src[r,
    /// src_col..src_col + width]` for every row `r` (`rows` of them), `src`
    /// being `rows x src_cols` and `dst` `rows x dst_cols`: concatenating
    /// values side by side, slicing one back out, and their gradients.
    /// `accumulate` adds instead of copying.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_cols(
        &self,
        src: &[f32],
        src_cols: usize,
        src_col: usize,
        dst: &mut [f32],
        dst_cols: usize,
        dst_col: usize,
        width: usize,
        accumulate: bool,
    ) -> Result<()> {
        const K: &str = "copy_cols";
        let invalid = |what: String| Err(KernelError::Invalid { kernel: K, what });
        if src_col.checked_add(width).is_none_or(|e| e > src_cols) {
            return invalid(format!(
                "columns {src_col}..+{width} of a {src_cols}-wide `src`"
            ));
        }
        if dst_col.checked_add(width).is_none_or(|e| e > dst_cols) {
            return invalid(format!(
                "columns {dst_col}..+{width} of a {dst_cols}-wide `dst`"
            ));
        }
        if width == 0 {
            return Ok(());
        }
        let rows = table_rows(K, "src", src.len(), src_cols)?;
        KernelError::check_len(K, "dst", dst.len(), mul_len(K, rows, dst_cols)?)?;
        let pairs = src
            .chunks_exact(src_cols)
            .zip(dst.chunks_exact_mut(dst_cols));
        for (s, d) in pairs {
            let (s, d) = (
                &s[src_col..src_col + width],
                &mut d[dst_col..dst_col + width],
            );
            if accumulate {
                d.iter_mut().zip(s).for_each(|(d, s)| *d += s);
            } else {
                copy(d, s);
            }
        }
        Ok(())
    }

    /// Every row of `dst` (`dst.len() / row.len()` rows) becomes `row`: the
    /// bias broadcast before an affine `sgemm` with `beta = 1`.
    ///
    /// `dst.len()` must be a multiple of `row.len()` ([`KernelError::Invalid`]
    /// otherwise); an empty `row` is accepted only with an empty `dst`.
    pub fn broadcast_row(&self, row: &[f32], dst: &mut [f32]) -> Result<()> {
        const K: &str = "broadcast_row";
        if row.is_empty() {
            return KernelError::check_len(K, "dst", dst.len(), 0);
        }
        table_rows(K, "dst", dst.len(), row.len())?;
        let cols = row.len();
        if should_split(dst.len(), ROWS_COPY_MIN_LEN) {
            let per_task = (ROWS_COPY_MIN_LEN / 2 / cols).max(1);
            dst.par_chunks_mut(per_task * cols).for_each(|d| {
                d.chunks_exact_mut(cols).for_each(|r| copy(r, row));
            });
        } else {
            dst.chunks_exact_mut(cols).for_each(|r| copy(r, row));
        }
        Ok(())
    }
}

/// Every `(t, r)` names a table of the list and a row of it.
fn check_pairs(
    kernel: &'static str,
    lens: impl Iterator<Item = usize>,
    cols: usize,
    pairs: &[(u32, u32)],
) -> Result<()> {
    let rows = lens
        .map(|len| table_rows(kernel, "tables", len, cols))
        .collect::<Result<Vec<_>>>()?;
    for (position, &(t, r)) in pairs.iter().enumerate() {
        let Some(&n) = rows.get(t as usize) else {
            return Err(KernelError::Index {
                kernel,
                index: t as usize,
                position,
                rows: rows.len(),
            });
        };
        if r as usize >= n {
            return Err(KernelError::Index {
                kernel,
                index: r as usize,
                position,
                rows: n,
            });
        }
    }
    Ok(())
}
