//! `gather_scatter_rows`: `dst[dst_idx[i]] = src[src_idx[i]]` (or `+=`)
//! against a plain reference loop, for every ISA.
//!
//! - Copy and accumulate, on random tables of several widths (1, 7, 300 and
//!   others), random index lists with and without duplicates, empty lists
//!   and empty tables, unaligned slices. Equality is exact: the reference
//!   does the same adds in the same order.
//! - Duplicate destinations: the last one wins when copying, they add up
//!   (in position order) when accumulating.
//! - Every error (`cols == 0`, tables not a whole number of rows, index
//!   lists of different lengths, an index out of range in either list)
//!   with its variant and fields, and the output unchanged afterwards.

use sheaf_kernels_cpu::{CpuKernels, Isa, KernelError};

/// Deterministic values in [-1, 1) from a seed (xorshift64*).
fn fill(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| (rng.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect()
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `n` indices below `rows` (duplicates likely when `n` is near `rows`).
fn random_indices(rng: &mut Rng, n: usize, rows: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(rows) as u32).collect()
}

/// `n <= rows` distinct indices below `rows`, in random order.
fn distinct_indices(rng: &mut Rng, n: usize, rows: usize) -> Vec<u32> {
    let mut all: Vec<u32> = (0..rows as u32).collect();
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i + 1));
    }
    all.truncate(n);
    all
}

fn kernels() -> Vec<CpuKernels> {
    Isa::supported()
        .into_iter()
        .map(|isa| CpuKernels::with_isa(isa).expect("supported"))
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The plain loop the kernel must match bit for bit.
fn reference(
    src: &[f32],
    cols: usize,
    src_idx: &[u32],
    dst: &mut [f32],
    dst_idx: &[u32],
    accumulate: bool,
) {
    for (&s, &d) in src_idx.iter().zip(dst_idx) {
        for c in 0..cols {
            let v = src[s as usize * cols + c];
            let o = &mut dst[d as usize * cols + c];
            if accumulate {
                *o += v;
            } else {
                *o = v;
            }
        }
    }
}

/// Runs the kernel and the reference on copies of `dst` (placed `off`
/// floats into its allocation, as is `src`) and compares the bits.
#[allow(clippy::too_many_arguments)]
fn check(
    k: &CpuKernels,
    src: &[f32],
    cols: usize,
    src_idx: &[u32],
    dst: &[f32],
    dst_idx: &[u32],
    accumulate: bool,
    off: usize,
    ctx: &str,
) {
    let mut want = dst.to_vec();
    reference(src, cols, src_idx, &mut want, dst_idx, accumulate);
    let mut src_buf = vec![f32::NAN; off];
    src_buf.extend_from_slice(src);
    let mut got = vec![f32::NAN; off];
    got.extend_from_slice(dst);
    k.gather_scatter_rows(
        &src_buf[off..],
        cols,
        src_idx,
        &mut got[off..],
        dst_idx,
        accumulate,
    )
    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert!(
        got[..off].iter().all(|v| v.is_nan()),
        "{ctx}: wrote before dst"
    );
    assert_eq!(bits(&got[off..]), bits(&want), "{ctx}");
}

const COLS: [usize; 7] = [1, 2, 3, 7, 16, 33, 300];

#[test]
fn random_tables_match_reference() {
    let mut rng = Rng::new(7);
    for k in kernels() {
        for &cols in &COLS {
            for trial in 0..6u64 {
                let src_rows = 1 + rng.below(40);
                let dst_rows = 1 + rng.below(40);
                let src = fill(trial * 31 + cols as u64, src_rows * cols);
                let dst = fill(trial * 37 + cols as u64 + 1000, dst_rows * cols);
                let off = rng.below(8);
                // Distinct destinations (a permutation's prefix), any sources.
                let n = rng.below(dst_rows + 1);
                let si = random_indices(&mut rng, n, src_rows);
                let di = distinct_indices(&mut rng, n, dst_rows);
                for acc in [false, true] {
                    let ctx = format!("{:?} cols {cols} trial {trial} distinct acc {acc}", k.isa());
                    check(&k, &src, cols, &si, &dst, &di, acc, off, &ctx);
                }
                // Duplicate destinations (and sources), more positions than rows.
                let n = rng.below(3 * dst_rows + 1);
                let si = random_indices(&mut rng, n, src_rows);
                let di = random_indices(&mut rng, n, dst_rows);
                for acc in [false, true] {
                    let ctx = format!("{:?} cols {cols} trial {trial} dup acc {acc}", k.isa());
                    check(&k, &src, cols, &si, &dst, &di, acc, off, &ctx);
                }
            }
        }
    }
}

#[test]
fn large_table() {
    let (cols, src_rows, dst_rows, n) = (300, 1500, 700, 2000);
    let src = fill(1, src_rows * cols);
    let dst = fill(2, dst_rows * cols);
    let mut rng = Rng::new(3);
    let si = random_indices(&mut rng, n, src_rows);
    let di = random_indices(&mut rng, n, dst_rows);
    for k in kernels() {
        for acc in [false, true] {
            let ctx = format!("{:?} large acc {acc}", k.isa());
            check(&k, &src, cols, &si, &dst, &di, acc, 3, &ctx);
        }
    }
}

#[test]
fn duplicates_last_wins_or_add_up() {
    let cols = 7;
    let src = fill(11, 5 * cols);
    let dst = fill(12, 4 * cols);
    // Row 2 of dst receives src rows 0, 3 and 1, in that order.
    let si = [0u32, 4, 3, 1, 2];
    let di = [2u32, 0, 2, 2, 3];
    for k in kernels() {
        let mut copied = dst.clone();
        k.gather_scatter_rows(&src, cols, &si, &mut copied, &di, false)
            .unwrap();
        let row = |v: &[f32], r: usize| v[r * cols..(r + 1) * cols].to_vec();
        assert_eq!(bits(&row(&copied, 2)), bits(&row(&src, 1)), "last wins");
        assert_eq!(bits(&row(&copied, 0)), bits(&row(&src, 4)));
        assert_eq!(bits(&row(&copied, 3)), bits(&row(&src, 2)));
        assert_eq!(bits(&row(&copied, 1)), bits(&row(&dst, 1)), "untouched");

        let mut added = dst.clone();
        k.gather_scatter_rows(&src, cols, &si, &mut added, &di, true)
            .unwrap();
        for c in 0..cols {
            let at = |v: &[f32], r: usize| v[r * cols + c];
            let want = ((at(&dst, 2) + at(&src, 0)) + at(&src, 3)) + at(&src, 1);
            assert_eq!(at(&added, 2).to_bits(), want.to_bits(), "column {c}");
            assert_eq!(
                at(&added, 0).to_bits(),
                (at(&dst, 0) + at(&src, 4)).to_bits()
            );
            assert_eq!(at(&added, 1).to_bits(), at(&dst, 1).to_bits());
        }
    }
}

#[test]
fn same_source_row_many_times() {
    let cols = 300;
    let src = fill(21, 3 * cols);
    let dst = vec![0.5; 6 * cols];
    let si = [1u32; 6];
    let di: Vec<u32> = (0..6).rev().collect();
    for k in kernels() {
        for acc in [false, true] {
            check(&k, &src, cols, &si, &dst, &di, acc, 0, "broadcast");
        }
    }
}

#[test]
fn empty_lists_and_tables() {
    for k in kernels() {
        for &cols in &COLS {
            for acc in [false, true] {
                // Empty lists leave dst as it was.
                let src = fill(5, 3 * cols);
                let mut dst = fill(6, 4 * cols);
                let before = bits(&dst);
                k.gather_scatter_rows(&src, cols, &[], &mut dst, &[], acc)
                    .unwrap();
                assert_eq!(bits(&dst), before, "cols {cols} acc {acc}");
                // Empty tables with empty lists are fine.
                k.gather_scatter_rows(&[], cols, &[], &mut [], &[], acc)
                    .unwrap();
                k.gather_scatter_rows(&src, cols, &[], &mut [], &[], acc)
                    .unwrap();
                k.gather_scatter_rows(&[], cols, &[], &mut dst, &[], acc)
                    .unwrap();
                assert_eq!(bits(&dst), before);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Errors: nothing written.
// ---------------------------------------------------------------------------

/// Runs the kernel on a copy of `dst`, expects an error, checks that `dst`
/// is unchanged and returns the error.
fn fails(
    k: &CpuKernels,
    src: &[f32],
    cols: usize,
    src_idx: &[u32],
    dst: &[f32],
    dst_idx: &[u32],
    accumulate: bool,
) -> KernelError {
    let mut out = dst.to_vec();
    let err = k
        .gather_scatter_rows(src, cols, src_idx, &mut out, dst_idx, accumulate)
        .expect_err("expected an error");
    assert_eq!(bits(&out), bits(dst), "dst changed on error: {err}");
    err
}

const K: &str = "gather_scatter_rows";

#[track_caller]
fn assert_invalid(err: KernelError, mentions: &str) {
    match err {
        KernelError::Invalid { kernel, what } => {
            assert_eq!(kernel, K);
            assert!(what.contains(mentions), "{what:?} lacks {mentions:?}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[track_caller]
fn assert_index(err: KernelError, index: usize, position: usize, rows: usize) {
    assert_eq!(
        err,
        KernelError::Index {
            kernel: K,
            index,
            position,
            rows
        }
    );
}

#[test]
fn zero_cols_is_invalid() {
    for k in kernels() {
        for acc in [false, true] {
            assert_invalid(fails(&k, &[], 0, &[], &[], &[], acc), "cols");
            let dst = fill(1, 6);
            assert_invalid(fails(&k, &[1.0; 4], 0, &[0], &dst, &[0], acc), "cols");
        }
    }
}

#[test]
fn tables_not_whole_rows_are_invalid() {
    for k in kernels() {
        for acc in [false, true] {
            for &cols in &[2usize, 7, 300] {
                let dst = fill(2, 3 * cols);
                let src = fill(3, 2 * cols + 1);
                assert_invalid(fails(&k, &src, cols, &[0], &dst, &[1], acc), "`src`");
                let src = fill(3, 2 * cols);
                let bad_dst = fill(4, 3 * cols - 1);
                let e = fails(&k, &src, cols, &[0], &bad_dst, &[1], acc);
                assert_invalid(e, "`dst`");
                // Even with empty index lists.
                let e = fails(&k, &src, cols, &[], &bad_dst, &[], acc);
                assert_invalid(e, "`dst`");
            }
        }
    }
}

#[test]
fn index_lists_of_different_lengths() {
    let cols = 7;
    let src = fill(5, 4 * cols);
    let dst = fill(6, 5 * cols);
    for k in kernels() {
        for acc in [false, true] {
            for (si, di) in [
                (&[0u32, 1, 2][..], &[0u32, 1][..]),
                (&[0, 1][..], &[0, 1, 2][..]),
                (&[3][..], &[][..]),
                (&[][..], &[4][..]),
            ] {
                let err = fails(&k, &src, cols, si, &dst, di, acc);
                assert_eq!(
                    err,
                    KernelError::Length {
                        kernel: K,
                        arg: "dst_idx",
                        expected: si.len(),
                        got: di.len()
                    },
                    "{si:?} / {di:?}"
                );
            }
        }
    }
}

#[test]
fn indices_out_of_range() {
    for k in kernels() {
        for acc in [false, true] {
            for &cols in &[1usize, 7, 300] {
                let (sr, dr) = (4, 6);
                let src = fill(7, sr * cols);
                let dst = fill(8, dr * cols);
                // A bad source index, last in the list (the valid ones before
                // it would have been written by a single-pass kernel).
                let e = fails(&k, &src, cols, &[0, 1, 3, 4], &dst, &[0, 1, 2, 3], acc);
                assert_index(e, 4, 3, sr);
                // The first bad position is named.
                let e = fails(&k, &src, cols, &[0, 9, 5], &dst, &[0, 1, 2], acc);
                assert_index(e, 9, 1, sr);
                let e = fails(&k, &src, cols, &[u32::MAX], &dst, &[0], acc);
                assert_index(e, u32::MAX as usize, 0, sr);
                // A bad destination index.
                let e = fails(&k, &src, cols, &[0, 1, 2], &dst, &[5, 0, 6], acc);
                assert_index(e, 6, 2, dr);
                let e = fails(&k, &src, cols, &[0, 1], &dst, &[0, u32::MAX], acc);
                assert_index(e, u32::MAX as usize, 1, dr);
                // Both bad: an Index error either way, nothing written.
                let e = fails(&k, &src, cols, &[0, 4], &dst, &[0, 6], acc);
                assert!(matches!(e, KernelError::Index { .. }), "{e:?}");
                // Empty tables: every index is out of range.
                let e = fails(&k, &[], cols, &[0], &dst, &[0], acc);
                assert_index(e, 0, 0, 0);
                let e = fails(&k, &src, cols, &[0], &[], &[0], acc);
                assert_index(e, 0, 0, 0);
            }
        }
    }
}

#[test]
fn errors_leave_large_output_unchanged() {
    // A bad index at the very end of a long list.
    let (cols, sr, dr, n) = (300, 200, 150, 1000);
    let src = fill(9, sr * cols);
    let dst = fill(10, dr * cols);
    let mut rng = Rng::new(11);
    let mut si = random_indices(&mut rng, n, sr);
    let mut di = random_indices(&mut rng, n, dr);
    for k in kernels() {
        for acc in [false, true] {
            si[n - 1] = sr as u32;
            assert_index(fails(&k, &src, cols, &si, &dst, &di, acc), sr, n - 1, sr);
            si[n - 1] = 0;
            di[n - 1] = dr as u32;
            assert_index(fails(&k, &src, cols, &si, &dst, &di, acc), dr, n - 1, dr);
            di[n - 1] = 0;
        }
    }
}
