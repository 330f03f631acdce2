//! gather_rows / scatter_add_rows / copy_rows / broadcast_row against plain
//! references, for every ISA, on random shapes and unaligned slices.

use proptest::prelude::*;
use sheaf_kernels_cpu::{CpuKernels, Isa, KernelError};

/// Deterministic values in [-1, 1) from a seed (xorshift64*).
fn fill(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
            (r >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn indices(seed: u64, n: usize, rows: usize) -> Vec<u32> {
    fill(seed, n)
        .iter()
        .map(|v| (((v + 1.0) * 0.5 * rows as f32) as usize).min(rows - 1) as u32)
        .collect()
}

fn kernels() -> Vec<CpuKernels> {
    Isa::supported()
        .into_iter()
        .map(|isa| CpuKernels::with_isa(isa).expect("supported"))
        .collect()
}

/// `v[off..]`: a slice starting `off` floats past the allocation's start.
fn padded(v: &[f32], off: usize) -> Vec<f32> {
    let mut p = vec![f32::NAN; off];
    p.extend_from_slice(v);
    p
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn scatter_ref(src: &[f32], cols: usize, idx: &[u32], dst: &mut [f32]) {
    for (i, &r) in idx.iter().enumerate() {
        for c in 0..cols {
            dst[r as usize * cols + c] += src[i * cols + c];
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn gather_matches_reference(rows in 1usize..20, cols in 1usize..40, n in 0usize..12,
                                off in 0usize..8, seed: u64) {
        let mut src = fill(seed, rows * cols);
        if !src.is_empty() { src[0] = f32::NAN; }
        let idx = indices(seed ^ 1, n, rows);
        let src_buf = padded(&src, off);
        for k in kernels() {
            let mut dst_buf = padded(&fill(seed ^ 2, n * cols), off);
            k.gather_rows(&src_buf[off..], cols, &idx, &mut dst_buf[off..]).unwrap();
            let expected: Vec<f32> = idx.iter()
                .flat_map(|&r| src[r as usize * cols..(r as usize + 1) * cols].to_vec())
                .collect();
            prop_assert!(same_bits(&dst_buf[off..], &expected), "{:?}", k.isa());
        }
    }

    #[test]
    fn scatter_add_matches_reference(rows in 1usize..20, cols in 1usize..40, n in 0usize..24,
                                     off in 0usize..8, seed: u64) {
        let src = fill(seed, n * cols);
        let idx = indices(seed ^ 1, n, rows); // n > rows forces duplicates
        let dst0 = fill(seed ^ 2, rows * cols);
        let mut expected = dst0.clone();
        scatter_ref(&src, cols, &idx, &mut expected);
        let src_buf = padded(&src, off);
        for k in kernels() {
            let mut dst_buf = padded(&dst0, off);
            k.scatter_add_rows(&src_buf[off..], cols, &idx, &mut dst_buf[off..]).unwrap();
            prop_assert!(same_bits(&dst_buf[off..], &expected), "{:?}", k.isa());
        }
    }

    #[test]
    fn copy_rows_matches_reference(src_rows in 0usize..10, dst_rows in 0usize..10, cols in 1usize..40,
                                   a in 0usize..10, b in 0usize..10, n in 0usize..10,
                                   off in 0usize..8, seed: u64) {
        let src = fill(seed, src_rows * cols);
        let dst0 = fill(seed ^ 2, dst_rows * cols);
        let src_buf = padded(&src, off);
        for k in kernels() {
            let mut dst_buf = padded(&dst0, off);
            let res = k.copy_rows(&src_buf[off..], a, &mut dst_buf[off..], b, n, cols);
            if a + n > src_rows {
                prop_assert!(matches!(res, Err(KernelError::TooShort { arg: "src", .. })), "{res:?}");
                prop_assert!(same_bits(&dst_buf[off..], &dst0));
            } else if b + n > dst_rows {
                prop_assert!(matches!(res, Err(KernelError::TooShort { arg: "dst", .. })), "{res:?}");
                prop_assert!(same_bits(&dst_buf[off..], &dst0));
            } else {
                res.unwrap();
                let mut expected = dst0.clone();
                expected[b * cols..(b + n) * cols].copy_from_slice(&src[a * cols..(a + n) * cols]);
                prop_assert!(same_bits(&dst_buf[off..], &expected), "{:?}", k.isa());
            }
        }
    }

    #[test]
    fn broadcast_matches_reference(rows in 0usize..10, cols in 1usize..40, off in 0usize..8, seed: u64) {
        let row = fill(seed, cols);
        let row_buf = padded(&row, off);
        for k in kernels() {
            let mut dst_buf = padded(&fill(seed ^ 2, rows * cols), off);
            k.broadcast_row(&row_buf[off..], &mut dst_buf[off..]).unwrap();
            prop_assert!(dst_buf[off..].chunks(cols).all(|r| same_bits(r, &row)));
        }
    }
}

/// Big enough to take the parallel paths (with 4 threads, even on a 1-core
/// machine); heavy duplicates, including one hot row. Results must equal the
/// sequential order bit for bit.
#[test]
fn parallel_paths_match_sequential() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    for (rows, cols, n) in [
        (300, 300, 1000),
        (50, 37, 4000),
        (7, 129, 1000),
        (1, 64, 2000),
    ] {
        let table = fill(1, rows * cols);
        let mut idx = indices(2, n, rows);
        idx[n / 2..].iter_mut().for_each(|r| *r = 0); // a hot row
        let src = fill(3, n * cols);
        let mut expected = table.clone();
        scatter_ref(&src, cols, &idx, &mut expected);
        let gathered: Vec<f32> = idx
            .iter()
            .flat_map(|&r| table[r as usize * cols..(r as usize + 1) * cols].to_vec())
            .collect();
        for k in kernels() {
            pool.install(|| {
                let mut dst = table.clone();
                k.scatter_add_rows(&src, cols, &idx, &mut dst).unwrap();
                assert!(same_bits(&dst, &expected), "scatter {rows}x{cols} n={n}");
                let mut g = vec![0.0; n * cols];
                k.gather_rows(&table, cols, &idx, &mut g).unwrap();
                assert!(same_bits(&g, &gathered), "gather {rows}x{cols} n={n}");
                let mut c = vec![0.0; n * cols];
                k.copy_rows(&src, 0, &mut c, 0, n, cols).unwrap();
                assert!(same_bits(&c, &src));
                let mut bc = vec![0.0; n * cols];
                k.broadcast_row(&table[..cols], &mut bc).unwrap();
                assert!(bc.chunks(cols).all(|r| same_bits(r, &table[..cols])));
            });
        }
    }
}

#[test]
fn errors() {
    for k in kernels() {
        let src = fill(1, 12); // 4 x 3
        let mut dst = vec![7.0; 6];
        let e = k.gather_rows(&src, 3, &[1, 4], &mut dst).unwrap_err();
        assert_eq!(
            e,
            KernelError::Index {
                kernel: "gather_rows",
                index: 4,
                position: 1,
                rows: 4
            }
        );
        assert!(dst.iter().all(|&v| v == 7.0), "nothing written on error");
        let e = k.gather_rows(&src, 3, &[1], &mut dst).unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    arg: "dst",
                    expected: 3,
                    got: 6,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k.gather_rows(&src, 5, &[0], &mut dst[..5]).unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Invalid {
                    kernel: "gather_rows",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k.gather_rows(&src, 0, &[], &mut []).unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");

        let mut table = vec![7.0; 12];
        let e = k
            .scatter_add_rows(&src[..6], 3, &[0, 9], &mut table)
            .unwrap_err();
        assert_eq!(
            e,
            KernelError::Index {
                kernel: "scatter_add_rows",
                index: 9,
                position: 1,
                rows: 4
            }
        );
        assert!(table.iter().all(|&v| v == 7.0), "nothing written on error");
        let e = k
            .scatter_add_rows(&src, 3, &[0, 1], &mut table)
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    arg: "src",
                    expected: 6,
                    got: 12,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k
            .scatter_add_rows(&src, 3, &[0], &mut table[..11])
            .unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");

        let e = k.copy_rows(&src, 0, &mut table, 3, 2, 3).unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::TooShort {
                    arg: "dst",
                    needed: 15,
                    got: 12,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k
            .copy_rows(&src, usize::MAX, &mut table, 0, 1, 3)
            .unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
        k.copy_rows(&src, 0, &mut table, 0, 0, 0).unwrap();

        let e = k.broadcast_row(&src[..5], &mut table).unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
        let e = k.broadcast_row(&[], &mut table).unwrap_err();
        assert!(matches!(e, KernelError::Length { .. }), "{e:?}");
        k.broadcast_row(&[], &mut []).unwrap();
    }
}
