//! sgemm against a plain f64 triple loop, for every supported ISA.
//!
//! Tolerance: recursive summation of k products in f32 errs by at most
//! about (k + 2) eps times the sum of the magnitudes of the terms (Higham,
//! gamma_k), whatever the order or FMA use. So each element must satisfy
//! |c - ref| <= 2 (k + 2) eps (|alpha| sum_p |a_ip| |b_pj| + |beta| |c_old|).

use proptest::prelude::*;
use sheaf_kernels_cpu::{CpuKernels, Isa, KernelError, Transpose};

const T: [Transpose; 2] = [Transpose::No, Transpose::Yes];

/// Deterministic values in [-1, 1).
fn fill(seed: u64, len: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// One product: shapes, strides and offsets into the buffers.
#[derive(Debug, Clone, Copy)]
struct Case {
    ta: Transpose,
    tb: Transpose,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    beta: f32,
    /// Extra elements per row beyond the width, for lda, ldb, ldc.
    pad: [usize; 3],
    /// Offsets of A, B, C in their buffers (unaligned starts).
    off: [usize; 3],
    seed: u64,
}

impl Case {
    fn stored(&self, t: Transpose, r: usize, c: usize) -> (usize, usize) {
        if t == Transpose::No {
            (r, c)
        } else {
            (c, r)
        }
    }

    /// (stored rows, ld) of A, B, C.
    fn layout(&self) -> [(usize, usize); 3] {
        let (ar, ac) = self.stored(self.ta, self.m, self.k);
        let (br, bc) = self.stored(self.tb, self.k, self.n);
        [
            (ar, ac + self.pad[0]),
            (br, bc + self.pad[1]),
            (self.m, self.n + self.pad[2]),
        ]
    }

    /// Buffers for A, B and C (C NaN-filled when beta is 0).
    fn buffers(&self) -> [Vec<f32>; 3] {
        let mut out = [0, 1, 2].map(|i| {
            let (rows, ld) = self.layout()[i];
            fill(self.seed + i as u64, self.off[i] + rows * ld)
        });
        if self.beta == 0.0 {
            out[2].iter_mut().for_each(|x| *x = f32::NAN);
        }
        out
    }

    /// Runs sgemm; returns the whole C buffer.
    fn run(&self, kern: &CpuKernels, bufs: &[Vec<f32>; 3]) -> Vec<f32> {
        let [(_, lda), (_, ldb), (_, ldc)] = self.layout();
        let mut c = bufs[2].clone();
        kern.sgemm(
            self.ta,
            self.tb,
            self.m,
            self.n,
            self.k,
            self.alpha,
            &bufs[0][self.off[0]..],
            lda,
            &bufs[1][self.off[1]..],
            ldb,
            self.beta,
            &mut c[self.off[2]..],
            ldc,
        )
        .unwrap();
        c
    }

    /// Checks `got` (the whole C buffer) against the f64 reference; elements
    /// outside C (padding, prefix) must be untouched.
    fn check(&self, bufs: &[Vec<f32>; 3], got: &[f32], what: &str) {
        self.check_with_bias(bufs, got, what, None);
    }

    /// [`Case::check`] with `bias[j]` added to every row.
    fn check_with_bias(&self, bufs: &[Vec<f32>; 3], got: &[f32], what: &str, bias: Option<&[f32]>) {
        let [(_, lda), (_, ldb), (_, ldc)] = self.layout();
        let a = |i: usize, p: usize| {
            let idx = if self.ta == Transpose::No {
                i * lda + p
            } else {
                p * lda + i
            };
            f64::from(bufs[0][self.off[0] + idx])
        };
        let b = |p: usize, j: usize| {
            let idx = if self.tb == Transpose::No {
                p * ldb + j
            } else {
                j * ldb + p
            };
            f64::from(bufs[1][self.off[1] + idx])
        };
        let mut inside = vec![false; got.len()];
        for i in 0..self.m {
            for j in 0..self.n {
                let ci = self.off[2] + i * ldc + j;
                inside[ci] = true;
                let (mut s, mut mag) = (0.0f64, 0.0f64);
                for p in 0..self.k {
                    s += a(i, p) * b(p, j);
                    mag += (a(i, p) * b(p, j)).abs();
                }
                let alpha = f64::from(self.alpha);
                let old = if self.beta == 0.0 {
                    0.0
                } else {
                    f64::from(bufs[2][ci])
                };
                let add = bias.map_or(0.0, |b| f64::from(b[j]));
                let want = alpha * s + f64::from(self.beta) * old + add;
                let scale = alpha.abs() * mag + (f64::from(self.beta) * old).abs() + add.abs();
                let tol = 2.0 * (self.k + 2) as f64 * f64::from(f32::EPSILON) * scale + 1e-30;
                let err = (f64::from(got[ci]) - want).abs();
                assert!(
                    err <= tol,
                    "{what} {self:?}: C[{i},{j}] = {} want {want} (err {err:e} > {tol:e})",
                    got[ci]
                );
            }
        }
        for (idx, (&g, &orig)) in got.iter().zip(&bufs[2]).enumerate() {
            if !inside[idx] {
                assert!(
                    g.to_bits() == orig.to_bits(),
                    "{what} {self:?}: wrote outside C at {idx}"
                );
            }
        }
    }

    fn check_all_isas(&self) {
        let bufs = self.buffers();
        for isa in Isa::supported() {
            let kern = CpuKernels::with_isa(isa).unwrap();
            let got = self.run(&kern, &bufs);
            self.check(&bufs, &got, isa.name());
        }
    }

    /// Runs `pack_b` then `sgemm_packed`; returns the whole C buffer.
    fn run_packed(
        &self,
        kern: &CpuKernels,
        bufs: &[Vec<f32>; 3],
        bias: Option<&[f32]>,
    ) -> Vec<f32> {
        let [(_, lda), (_, ldb), (_, ldc)] = self.layout();
        let packed = kern
            .pack_b(self.tb, self.k, self.n, &bufs[1][self.off[1]..], ldb)
            .unwrap();
        assert_eq!(
            (packed.k(), packed.n(), packed.isa()),
            (self.k, self.n, kern.isa())
        );
        let mut c = bufs[2].clone();
        kern.sgemm_packed(
            self.ta,
            self.m,
            self.alpha,
            &bufs[0][self.off[0]..],
            lda,
            &packed,
            self.beta,
            &mut c[self.off[2]..],
            ldc,
            bias,
        )
        .unwrap();
        c
    }

    /// The packed path, without and with a bias row, every ISA.
    fn check_packed_all_isas(&self) {
        let bufs = self.buffers();
        let bias = fill(self.seed + 7, self.n);
        for isa in Isa::supported() {
            let kern = CpuKernels::with_isa(isa).unwrap();
            let got = self.run_packed(&kern, &bufs, None);
            self.check(&bufs, &got, &format!("packed {}", isa.name()));
            let got = self.run_packed(&kern, &bufs, Some(&bias));
            let what = format!("packed {} with bias", isa.name());
            self.check_with_bias(&bufs, &got, &what, Some(&bias));
        }
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

fn case_strategy(max_m: usize, max_nk: usize) -> impl Strategy<Value = Case> {
    (
        (0usize..2, 0usize..2, 0..=max_m, 0..=max_nk, 0..=max_nk),
        prop::sample::select(vec![1.0f32, -0.5, 2.25, 0.0]),
        prop::sample::select(vec![0.0f32, 1.0, -1.5]),
        [0usize..4, 0usize..4, 0usize..4],
        [0usize..8, 0usize..8, 0usize..8],
        any::<u64>(),
    )
        .prop_map(|((ta, tb, m, n, k), alpha, beta, pad, off, seed)| Case {
            ta: T[ta],
            tb: T[tb],
            m,
            n,
            k,
            alpha,
            beta,
            pad,
            off,
            seed,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Mostly the hand-written small paths (m <= 16, or k <= 16), and
    /// matrixmultiply for the rest.
    #[test]
    fn matches_reference(case in case_strategy(40, 70)) {
        case.check_all_isas();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A packed B: partial panels (widths 16 and 48), every tile height.
    #[test]
    fn packed_matches_reference(case in case_strategy(40, 110)) {
        case.check_packed_all_isas();
    }
}

/// A packed B over several k blocks (256 rows each), rows split over two
/// threads, the panels' edges; both transposes of each operand.
#[test]
fn packed_large_shapes() {
    let shapes = [
        (130, 750, 300), // row split at 2 threads, partial AVX-512 panel
        (64, 450, 600),  // three k blocks
        (17, 47, 257),   // one row past the small path, one past a k block
        (300, 16, 20),   // a single AVX2 panel
        (1, 49, 3),      // one row, a 1-column last panel
        (5, 0, 7),       // nothing to compute
        (6, 9, 0),       // k = 0: C = beta C
    ];
    for threads in [1, 2] {
        pool(threads).install(|| {
            for (s, &(m, n, k)) in shapes.iter().enumerate() {
                for (t, (ta, tb)) in T.iter().flat_map(|&a| T.map(|b| (a, b))).enumerate() {
                    Case {
                        ta,
                        tb,
                        m,
                        n,
                        k,
                        alpha: [1.0, 0.75][t % 2],
                        beta: [0.0, 1.0, -0.5][(s + t) % 3],
                        pad: [2, 3, 1],
                        off: [3, 1, 2],
                        seed: 100 + (s * 4 + t) as u64,
                    }
                    .check_packed_all_isas();
                }
            }
        });
    }
}

/// Panels packed for one ISA are refused by a handle of another; short
/// slices are errors, not panics.
#[test]
fn packed_errors() {
    let scalar = CpuKernels::with_isa(Isa::Scalar).unwrap();
    let b = vec![1.0f32; 12];
    let short = scalar.pack_b(Transpose::No, 4, 4, &b, 4).unwrap_err();
    assert!(matches!(short, KernelError::TooShort { .. }), "{short}");
    let bad_ld = scalar.pack_b(Transpose::Yes, 3, 4, &b, 2).unwrap_err();
    assert!(matches!(bad_ld, KernelError::Invalid { .. }), "{bad_ld}");
    let packed = scalar.pack_b(Transpose::No, 3, 4, &b, 4).unwrap();
    let a = vec![1.0f32; 6];
    let mut c = vec![0.0f32; 8];
    scalar
        .sgemm_packed(Transpose::No, 2, 1.0, &a, 3, &packed, 0.0, &mut c, 4, None)
        .unwrap();
    assert_eq!(c, vec![3.0; 8]);
    let short_c = scalar
        .sgemm_packed(
            Transpose::No,
            2,
            1.0,
            &a,
            3,
            &packed,
            0.0,
            &mut c[..7],
            4,
            None,
        )
        .unwrap_err();
    assert!(matches!(short_c, KernelError::TooShort { .. }), "{short_c}");
    let short_a = scalar
        .sgemm_packed(Transpose::Yes, 3, 1.0, &a, 3, &packed, 0.0, &mut c, 4, None)
        .unwrap_err();
    assert!(matches!(short_a, KernelError::TooShort { .. }), "{short_a}");
    let short_bias = scalar
        .sgemm_packed(
            Transpose::No,
            2,
            1.0,
            &a,
            3,
            &packed,
            0.0,
            &mut c,
            4,
            Some(&b[..3]),
        )
        .unwrap_err();
    assert!(short_bias.to_string().contains("bias"), "{short_bias}");
    for isa in Isa::supported().into_iter().filter(|&i| i != Isa::Scalar) {
        let other = CpuKernels::with_isa(isa).unwrap();
        let err = other
            .sgemm_packed(Transpose::No, 2, 1.0, &a, 3, &packed, 0.0, &mut c, 4, None)
            .unwrap_err();
        assert!(err.to_string().contains("packed for Scalar"), "{err}");
    }
}

/// Shapes of the matrixmultiply path and of the parallel splits (bands of
/// rows, blocks of columns, the small-k path over many rows), at 1 and 2
/// threads.
#[test]
fn large_shapes_split_or_not() {
    // (m, n, k); the split happens at 2 threads from m n k >= 2^20.
    let shapes = [
        (130, 450, 300), // row split, matrixmultiply leaves
        (64, 450, 300),  // row split, wide register tiles (NN), else mm
        (40, 700, 500),  // column split; tiles for B transposed, else mm
        (8, 2000, 300),  // column split, small-row leaves
        (20, 1000, 200), // column split, matrixmultiply or tile leaves
        (600, 500, 4),   // row split, rank-k leaves
        (300, 500, 12),  // row split, short-k register tiles
        (1, 3000, 700),  // one row, column split, several k blocks
        (3, 70, 1100),   // no split; several k blocks, partial vectors
        (1100, 5, 150),  // many rows, 5 columns: B transposed stays hand-written
        (700, 16, 97),   // the widest narrow B-transposed product
    ];
    for threads in [1, 2] {
        pool(threads).install(|| {
            for (s, &(m, n, k)) in shapes.iter().enumerate() {
                for (t, (ta, tb)) in T.iter().flat_map(|&a| T.map(|b| (a, b))).enumerate() {
                    let case = Case {
                        ta,
                        tb,
                        m,
                        n,
                        k,
                        alpha: 0.75,
                        beta: [0.0, 1.0, -0.5][(s + t) % 3],
                        pad: [3, 1, 5],
                        off: [1, 3, 5],
                        seed: (s * 4 + t) as u64,
                    };
                    case.check_all_isas();
                }
            }
        });
    }
}

/// Every column count 1..=40 (partial vectors of 8 and of 16 lanes, one
/// to five vectors) for the row counts of each tile shape, and a few
/// column counts for the banded row counts of the wide tiles; inner
/// dimensions through the rank-k path, the masked k tail of the
/// B-transposed tiles and more than one step. All transposes, both betas.
#[test]
fn tile_edges() {
    let mut cases = Vec::new();
    for m in (1..=9).chain([12, 16]) {
        cases.extend((1..=40).map(|n| (m, n)));
    }
    for m in [17, 23, 33, 47, 64, 65, 97] {
        cases.extend([1, 7, 15, 16, 17, 31, 33, 40, 49].map(|n| (m, n)));
    }
    for (s, &(m, n)) in cases.iter().enumerate() {
        for (t, (ta, tb)) in T.iter().flat_map(|&a| T.map(|b| (a, b))).enumerate() {
            for (u, k) in [2, 5, 19, 37].into_iter().enumerate() {
                Case {
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    alpha: [1.0, -0.5][(s + u) % 2],
                    beta: [0.0, 1.0, -1.5][(s + t + u) % 3],
                    pad: [t % 3, (s + 1) % 3, u % 2],
                    off: [s % 5, (t + 1) % 4, u % 3],
                    seed: (s * 16 + t * 4 + u) as u64,
                }
                .check_all_isas();
            }
        }
    }
}

/// NaN in A poisons its row of C, infinity in B its column; NaN in C
/// propagates unless beta is 0. Small and large paths.
#[test]
fn nan_and_inf_propagate() {
    for isa in Isa::supported() {
        let kern = CpuKernels::with_isa(isa).unwrap();
        for (m, n, k) in [(3, 19, 11), (1, 40, 9), (70, 90, 80), (40, 50, 5)] {
            for (ta, tb) in T.iter().flat_map(|&a| T.map(|b| (a, b))) {
                let idx = |t: Transpose, r: usize, c: usize, rows: usize, cols: usize| {
                    if t == Transpose::No {
                        r * cols + c
                    } else {
                        c * rows + r
                    }
                };
                // Positive entries, so an infinite product cannot cancel.
                let mut a: Vec<f32> = fill(1, m * k).iter().map(|x| x.abs() + 0.1).collect();
                let mut b: Vec<f32> = fill(2, k * n).iter().map(|x| x.abs() + 0.1).collect();
                a[idx(ta, m - 1, k / 2, m, k)] = f32::NAN;
                b[idx(tb, k - 1, n / 2, k, n)] = f32::INFINITY;
                for beta in [0.0, 1.0] {
                    let mut c = vec![1.0f32; m * n];
                    c[n - 1] = f32::NAN;
                    let (lda, ldb) = (
                        if ta == Transpose::No { k } else { m },
                        if tb == Transpose::No { n } else { k },
                    );
                    kern.sgemm(ta, tb, m, n, k, 1.0, &a, lda, &b, ldb, beta, &mut c, n)
                        .unwrap();
                    for i in 0..m {
                        for j in 0..n {
                            let v = c[i * n + j];
                            let nan = i == m - 1 || (beta != 0.0 && i == 0 && j == n - 1);
                            let what = format!(
                                "{isa:?} {m}x{n}x{k} {ta:?}{tb:?} beta {beta} C[{i},{j}] = {v}"
                            );
                            if nan {
                                assert!(v.is_nan(), "{what}");
                            } else if j == n / 2 {
                                assert!(v == f32::INFINITY, "{what}");
                            } else {
                                assert!(v.is_finite(), "{what}");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn degenerate_shapes() {
    for isa in Isa::supported() {
        let kern = CpuKernels::with_isa(isa).unwrap();
        // k == 0: C = beta C, and beta == 0 clears NaN; padding untouched.
        let mut c = vec![2.0, f32::NAN, 9.0, 4.0, f32::NAN];
        kern.sgemm(
            Transpose::No,
            Transpose::No,
            2,
            2,
            0,
            1.0,
            &[],
            0,
            &[],
            2,
            0.5,
            &mut c,
            3,
        )
        .unwrap();
        assert!(c[0] == 1.0 && c[1].is_nan() && c[2] == 9.0 && c[3] == 2.0 && c[4].is_nan());
        kern.sgemm(
            Transpose::Yes,
            Transpose::Yes,
            2,
            2,
            0,
            1.0,
            &[],
            2,
            &[],
            0,
            0.0,
            &mut c,
            3,
        )
        .unwrap();
        assert_eq!(&c[..2], &[0.0, 0.0]);
        assert_eq!(&c[3..], &[0.0, 0.0]);
        // m == 0 or n == 0: nothing is touched, not even NaN.
        let mut c = vec![f32::NAN; 4];
        kern.sgemm(
            Transpose::No,
            Transpose::No,
            0,
            4,
            3,
            1.0,
            &[],
            3,
            &[0.0; 12],
            4,
            0.0,
            &mut c,
            4,
        )
        .unwrap();
        kern.sgemm(
            Transpose::No,
            Transpose::No,
            4,
            0,
            3,
            1.0,
            &[0.0; 12],
            3,
            &[],
            0,
            0.0,
            &mut [],
            0,
        )
        .unwrap();
        assert!(c.iter().all(|x| x.is_nan()));
        // alpha == 0 is not special: C = beta C for finite inputs.
        let mut c = vec![3.0; 4];
        kern.sgemm(
            Transpose::No,
            Transpose::No,
            2,
            2,
            2,
            0.0,
            &[1.0; 4],
            2,
            &[1.0; 4],
            2,
            2.0,
            &mut c,
            2,
        )
        .unwrap();
        assert_eq!(c, vec![6.0; 4]);
    }
}

#[test]
fn errors_not_panics() {
    let no = Transpose::No;
    let yes = Transpose::Yes;
    for isa in Isa::supported() {
        let kern = CpuKernels::with_isa(isa).unwrap();
        let (a, b) = (vec![1.0f32; 64], vec![1.0f32; 64]);
        let mut c = vec![0.0f32; 64];
        let too_short = |r: Result<(), KernelError>, arg: &str, needed: usize| match r {
            Err(KernelError::TooShort {
                kernel: "sgemm",
                arg: got,
                needed: n,
                ..
            }) => {
                assert_eq!((got, n), (arg, needed));
            }
            other => panic!("expected TooShort for {arg}, got {other:?}"),
        };
        let invalid = |r: Result<(), KernelError>| {
            assert!(
                matches!(
                    r,
                    Err(KernelError::Invalid {
                        kernel: "sgemm",
                        ..
                    })
                ),
                "{r:?}"
            );
        };
        // A 4x5 needs 3*6+5 = 23 with lda 6.
        too_short(
            kern.sgemm(no, no, 4, 3, 5, 1.0, &a[..22], 6, &b, 3, 0.0, &mut c, 3),
            "a",
            23,
        );
        // A stored 5x4 (transposed) with lda 4 needs 20.
        too_short(
            kern.sgemm(yes, no, 4, 3, 5, 1.0, &a[..19], 4, &b, 3, 0.0, &mut c, 3),
            "a",
            20,
        );
        // B stored 3x5 (transposed) needs 15.
        too_short(
            kern.sgemm(no, yes, 4, 3, 5, 1.0, &a, 5, &b[..14], 5, 0.0, &mut c, 3),
            "b",
            15,
        );
        too_short(
            kern.sgemm(no, no, 4, 3, 5, 1.0, &a, 5, &b, 3, 0.0, &mut c[..12], 4),
            "c",
            15,
        );
        // Even when m == 0 the other operands are checked.
        too_short(
            kern.sgemm(no, no, 0, 3, 5, 1.0, &a, 5, &b[..10], 3, 0.0, &mut c, 3),
            "b",
            15,
        );
        invalid(kern.sgemm(no, no, 4, 3, 5, 1.0, &a, 4, &b, 3, 0.0, &mut c, 3));
        invalid(kern.sgemm(yes, no, 4, 3, 5, 1.0, &a, 3, &b, 3, 0.0, &mut c, 3));
        invalid(kern.sgemm(no, yes, 4, 3, 5, 1.0, &a, 5, &b, 4, 0.0, &mut c, 3));
        invalid(kern.sgemm(no, no, 4, 3, 5, 1.0, &a, 5, &b, 3, 0.0, &mut c, 2));
        // A span that overflows usize is an error, not a panic.
        invalid(kern.sgemm(
            no,
            no,
            4,
            3,
            5,
            1.0,
            &a,
            usize::MAX / 2,
            &b,
            3,
            0.0,
            &mut c,
            3,
        ));
        // One stored row: its stride is never used, however large.
        let mut c1 = vec![0.0f32; 3];
        kern.sgemm(
            no,
            no,
            1,
            3,
            2,
            1.0,
            &a[..2],
            usize::MAX,
            &b[..6],
            3,
            0.0,
            &mut c1,
            usize::MAX,
        )
        .unwrap();
        assert_eq!(c1, vec![2.0; 3]);
    }
}

/// The measured crossovers are among the candidates, never below the
/// always-small limit; `fixed` gives the Zen 3 table.
#[test]
fn crossovers_are_measured_within_the_candidates() {
    let x = CpuKernels::new().gemm_crossovers();
    for limit in [x.nn, x.tn, x.bt] {
        assert!(
            [16, 24, 32, 48, 64, 96, 128, 192, 256].contains(&limit),
            "crossover {limit} of {x:?}"
        );
    }
    let fixed = sheaf_kernels_cpu::gemm::Crossovers::FIXED;
    assert_eq!((fixed.nn, fixed.tn, fixed.bt), (64, 24, 48));
}
