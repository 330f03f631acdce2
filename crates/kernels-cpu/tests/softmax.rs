//! Softmax family and row / column sums against f64 references, for every
//! supported ISA; gradients also against central finite differences.

use proptest::prelude::*;
use sheaf_kernels_cpu::{CpuKernels, Isa, KernelError};

fn all_kernels() -> Vec<CpuKernels> {
    Isa::supported()
        .into_iter()
        .map(|isa| CpuKernels::with_isa(isa).expect("supported ISA"))
        .collect()
}

struct Rng(u64);

impl Rng {
    fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }
    fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n)
            .map(|_| lo + (hi - lo) * (self.next_u32() >> 8) as f32 / (1u32 << 24) as f32)
            .collect()
    }
}

/// f64 (max, logsumexp) of a row.
fn lse(x: &[f32]) -> f64 {
    let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()
}

fn assert_close(got: &[f32], want: &[f64], rel: f64, abs: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g as f64 == w
        } else {
            (g as f64 - w).abs() <= abs + rel * w.abs()
        };
        assert!(ok, "{what}[{i}]: got {g}, want {w}");
    }
}

/// Probabilities: `x - max` is rounded to f32 (error up to |x - max| * 6e-8
/// absolute), which exp turns into that much relative error, on top of the
/// few ulp of exp and the sum.
fn assert_probs(got: &[f32], want: &[f64], what: &str) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let rel = 2e-6 + 1.2e-7 * w.ln().abs();
        assert!(
            (g as f64 - w).abs() <= 1e-37 + rel * w,
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

/// Forward kernels on `rows x cols` with the matrix starting at `off`.
fn check_forward(rows: usize, cols: usize, off: usize, seed: u64) {
    let mut rng = Rng(seed | 1);
    let n = rows * cols;
    let buf = rng.vec(n + off, -30.0, 30.0);
    let x = &buf[off..];
    let labels: Vec<u32> = (0..rows).map(|_| rng.next_u32() % cols as u32).collect();
    let mut p64 = vec![0.0; n];
    let mut lp64 = vec![0.0; n];
    let mut loss64 = vec![0.0; rows];
    let mut rs64 = vec![0.0; rows];
    let mut cs64 = vec![0.25; cols];
    for r in 0..rows {
        let row = &x[r * cols..][..cols];
        let l = lse(row);
        for c in 0..cols {
            lp64[r * cols + c] = row[c] as f64 - l;
            p64[r * cols + c] = (row[c] as f64 - l).exp();
            cs64[c] += row[c] as f64;
        }
        loss64[r] = l - row[labels[r] as usize] as f64;
        rs64[r] = row.iter().map(|&v| v as f64).sum();
    }
    for k in all_kernels() {
        let isa = format!("{:?} {rows}x{cols}+{off}", k.isa());
        let mut ybuf = vec![f32::NAN; n + off + 1];
        let y = &mut ybuf[off..off + n];
        k.softmax_rows(x, cols, y).unwrap();
        assert_probs(y, &p64, &format!("softmax {isa}"));
        k.log_softmax_rows(x, cols, y).unwrap();
        assert_close(y, &lp64, 1e-6, 1e-5, &format!("log_softmax {isa}"));
        let mut loss = vec![f32::NAN; rows];
        k.nll_log_softmax(x, cols, &labels, y, &mut loss).unwrap();
        assert_probs(y, &p64, &format!("nll probs {isa}"));
        assert_close(&loss, &loss64, 1e-6, 1e-5, &format!("nll loss {isa}"));
        assert!(ybuf[off + n].is_nan(), "wrote past the end");
        let mut rs = vec![f32::NAN; rows];
        k.row_sums(x, cols, &mut rs).unwrap();
        assert_close(&rs, &rs64, 1e-5, 1e-4, &format!("row_sums {isa}"));
        let mut cs = vec![0.25; cols];
        k.col_sums_acc(x, cols, &mut cs).unwrap();
        assert_close(&cs, &cs64, 1e-5, 1e-4, &format!("col_sums_acc {isa}"));
    }
}

/// Backward kernels against their formulas in f64.
fn check_backward(rows: usize, cols: usize, off: usize, seed: u64) {
    let mut rng = Rng(seed | 1);
    let n = rows * cols;
    let x = rng.vec(n + off, -4.0, 4.0);
    let dy = rng.vec(n + off, -1.0, 1.0);
    let dx0 = rng.vec(n + off, -1.0, 1.0);
    let dloss = rng.vec(rows, -2.0, 2.0);
    let labels: Vec<u32> = (0..rows).map(|_| rng.next_u32() % cols as u32).collect();
    let (x, dy, dx0) = (&x[off..], &dy[off..], &dx0[off..]);
    for k in all_kernels() {
        let isa = format!("{:?} {rows}x{cols}+{off}", k.isa());
        let (mut p, mut lp) = (vec![0.0; n], vec![0.0; n]);
        k.softmax_rows(x, cols, &mut p).unwrap();
        k.log_softmax_rows(x, cols, &mut lp).unwrap();
        let (mut w_sm, mut w_lsm, mut w_nll) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for r in 0..rows {
            let i = r * cols..(r + 1) * cols;
            let d: f64 = i.clone().map(|j| p[j] as f64 * dy[j] as f64).sum();
            let s: f64 = i.clone().map(|j| dy[j] as f64).sum();
            for j in i {
                let onehot = if j - r * cols == labels[r] as usize {
                    1.0
                } else {
                    0.0
                };
                w_sm[j] = dx0[j] as f64 + p[j] as f64 * (dy[j] as f64 - d);
                w_lsm[j] = dx0[j] as f64 + dy[j] as f64 - (lp[j] as f64).exp() * s;
                w_nll[j] = dx0[j] as f64 + dloss[r] as f64 * (p[j] as f64 - onehot);
            }
        }
        let mut dx = dx0.to_vec();
        k.softmax_rows_bwd(&p, dy, cols, &mut dx).unwrap();
        assert_close(&dx, &w_sm, 1e-6, 1e-6, &format!("softmax_bwd {isa}"));
        dx.copy_from_slice(dx0);
        k.log_softmax_rows_bwd(&lp, dy, cols, &mut dx).unwrap();
        assert_close(&dx, &w_lsm, 1e-6, 1e-5, &format!("log_softmax_bwd {isa}"));
        dx.copy_from_slice(dx0);
        k.nll_log_softmax_bwd(&p, cols, &labels, &dloss, &mut dx)
            .unwrap();
        assert_close(&dx, &w_nll, 1e-6, 1e-6, &format!("nll_bwd {isa}"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn forward_matches_reference(
        rows in prop_oneof![0usize..6, 0usize..30],
        cols in prop_oneof![1usize..20, 1usize..80],
        off in 0usize..8,
        seed: u64,
    ) {
        check_forward(rows, cols, off, seed);
    }

    #[test]
    fn backward_matches_formulas(
        rows in prop_oneof![0usize..6, 0usize..30],
        cols in prop_oneof![1usize..20, 1usize..80],
        off in 0usize..8,
        seed: u64,
    ) {
        check_backward(rows, cols, off, seed);
    }
}

/// The softmax, log-softmax and cross-entropy gradients agree with central
/// finite differences of f64 forwards: L = <dy, softmax(x)>, <dy, log_softmax(x)>,
/// sum_r dloss[r] * loss[r].
#[test]
fn gradients_vs_finite_differences() {
    let (rows, cols) = (3, 11);
    let mut rng = Rng(99);
    let x = rng.vec(rows * cols, -3.0, 3.0);
    let dy = rng.vec(rows * cols, -1.0, 1.0);
    let dloss = rng.vec(rows, 0.5, 2.0);
    let labels = [4u32, 0, 10];
    let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let row_lse = |x: &[f64], r: usize| {
        let row = &x[r * cols..][..cols];
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
        m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
    };
    type Loss<'a> = Box<dyn Fn(&[f64]) -> f64 + 'a>;
    let losses: [(&str, Loss); 3] = [
        (
            "softmax",
            Box::new(|x| {
                (0..x.len())
                    .map(|j| dy[j] as f64 * (x[j] - row_lse(x, j / cols)).exp())
                    .sum()
            }),
        ),
        (
            "log_softmax",
            Box::new(|x| {
                (0..x.len())
                    .map(|j| dy[j] as f64 * (x[j] - row_lse(x, j / cols)))
                    .sum()
            }),
        ),
        (
            "nll",
            Box::new(|x| {
                (0..rows)
                    .map(|r| dloss[r] as f64 * (row_lse(x, r) - x[r * cols + labels[r] as usize]))
                    .sum()
            }),
        ),
    ];
    for k in all_kernels() {
        let (mut p, mut lp, mut loss) = (vec![0.0; x.len()], vec![0.0; x.len()], vec![0.0; rows]);
        k.softmax_rows(&x, cols, &mut p).unwrap();
        k.log_softmax_rows(&x, cols, &mut lp).unwrap();
        for (name, f) in &losses {
            let mut dx = vec![0.0f32; x.len()];
            match *name {
                "softmax" => k.softmax_rows_bwd(&p, &dy, cols, &mut dx),
                "log_softmax" => k.log_softmax_rows_bwd(&lp, &dy, cols, &mut dx),
                _ => k
                    .nll_log_softmax(&x, cols, &labels, &mut p, &mut loss)
                    .and_then(|_| k.nll_log_softmax_bwd(&p, cols, &labels, &dloss, &mut dx)),
            }
            .unwrap();
            for j in 0..x.len() {
                let h = 1e-6;
                let (mut a, mut b) = (x64.clone(), x64.clone());
                a[j] += h;
                b[j] -= h;
                let fd = (f(&a) - f(&b)) / (2.0 * h);
                assert!(
                    (dx[j] as f64 - fd).abs() <= 1e-5 * (1.0 + fd.abs()),
                    "{name} dx[{j}] {:?}: {} vs {fd}",
                    k.isa(),
                    dx[j]
                );
            }
        }
    }
}

#[test]
fn special_rows() {
    let inf = f32::INFINITY;
    let nan = f32::NAN;
    for k in all_kernels() {
        for cols in [4usize, 13] {
            // -inf entries get probability 0 and log-probability -inf.
            let mut x: Vec<f32> = (0..cols).map(|c| c as f32 * 0.1).collect();
            x[1] = -inf;
            let (mut y, mut ly) = (vec![0.0; cols], vec![0.0; cols]);
            k.softmax_rows(&x, cols, &mut y).unwrap();
            k.log_softmax_rows(&x, cols, &mut ly).unwrap();
            assert_eq!((y[1], ly[1]), (0.0, -inf), "{:?}", k.isa());
            assert!(y.iter().all(|v| v.is_finite()) && ly[0].is_finite());
            assert!((y.iter().sum::<f32>() - 1.0).abs() < 1e-6);
            // Huge finite values: the max shift keeps everything finite.
            let big: Vec<f32> = (0..cols).map(|c| 1e30 * (c % 3) as f32 - 3e38).collect();
            k.softmax_rows(&big, cols, &mut y).unwrap();
            assert!(y.iter().all(|v| v.is_finite()));
            // NaN anywhere, +inf, or only -inf: NaN throughout (0 / 0).
            for poison in [&[nan][..], &[inf], &[-inf; 13][..cols]] {
                let mut x = x.clone();
                x[..poison.len()].copy_from_slice(poison);
                let labels = [0u32];
                let mut loss = [0.0f32];
                k.softmax_rows(&x, cols, &mut y).unwrap();
                k.log_softmax_rows(&x, cols, &mut ly).unwrap();
                assert!(
                    y.iter().chain(&ly).all(|v| v.is_nan()),
                    "{:?} {poison:?}",
                    k.isa()
                );
                k.nll_log_softmax(&x, cols, &labels, &mut y, &mut loss)
                    .unwrap();
                assert!(loss[0].is_nan());
            }
        }
        // Width 1: probability 1, log-probability 0, loss 0.
        let x = [3.0f32, -7.0, 1e30];
        let (mut y, mut loss) = ([0.0f32; 3], [9.0f32; 3]);
        k.log_softmax_rows(&x, 1, &mut y).unwrap();
        assert_eq!(y, [0.0; 3]);
        k.nll_log_softmax(&x, 1, &[0, 0, 0], &mut y, &mut loss)
            .unwrap();
        assert_eq!((y, loss), ([1.0; 3], [0.0; 3]));
        // A confidently wrong row: loss = 100 exactly, not -ln(p) = inf
        // (p = e^-100 is subnormal; AVX2 flushes it to 0).
        let (mut p, mut loss) = ([0.0f32; 2], [0.0f32]);
        k.nll_log_softmax(&[0.0, 100.0], 2, &[0], &mut p, &mut loss)
            .unwrap();
        assert!(p[0] == 0.0 || p[0] == (-100.0f64).exp() as f32);
        assert_eq!((p[1], loss[0]), (1.0, 100.0));
    }
}

#[test]
fn errors_and_empty_shapes() {
    let x = [0.0f32; 12];
    let mut y = [0.0f32; 12];
    let invalid = |e: KernelError| matches!(e, KernelError::Invalid { .. });
    for k in all_kernels() {
        assert!(invalid(k.softmax_rows(&x, 5, &mut y).unwrap_err()));
        assert!(invalid(k.row_sums(&x, 0, &mut [0.0; 2]).unwrap_err()));
        let e = k.log_softmax_rows(&x, 4, &mut y[..8]).unwrap_err();
        assert_eq!(
            e,
            KernelError::Length {
                kernel: "log_softmax_rows",
                arg: "y",
                expected: 12,
                got: 8
            }
        );
        let e = k.softmax_rows_bwd(&x, &x[..8], 4, &mut y).unwrap_err();
        assert_eq!(
            e,
            KernelError::Length {
                kernel: "softmax_rows_bwd",
                arg: "dy",
                expected: 12,
                got: 8
            }
        );
        let e = k.col_sums_acc(&x, 4, &mut [0.0; 3]).unwrap_err();
        assert_eq!(
            e,
            KernelError::Length {
                kernel: "col_sums_acc",
                arg: "out",
                expected: 4,
                got: 3
            }
        );
        // Labels: count checked, then range (row 2 holds class 4 of 4).
        let (mut p, mut loss) = ([7.0f32; 12], [7.0f32; 3]);
        let e = k
            .nll_log_softmax(&x, 4, &[0, 1], &mut p, &mut loss)
            .unwrap_err();
        assert_eq!(
            e,
            KernelError::Length {
                kernel: "nll_log_softmax",
                arg: "labels",
                expected: 3,
                got: 2
            }
        );
        let e = k
            .nll_log_softmax(&x, 4, &[0, 3, 4], &mut p, &mut loss)
            .unwrap_err();
        assert_eq!(
            e,
            KernelError::Index {
                kernel: "nll_log_softmax",
                index: 4,
                position: 2,
                rows: 4
            }
        );
        assert_eq!((p, loss), ([7.0; 12], [7.0; 3]), "nothing written on error");
        let e = k
            .nll_log_softmax_bwd(&x, 4, &[9, 0, 0], &[1.0; 3], &mut y)
            .unwrap_err();
        assert_eq!(
            e,
            KernelError::Index {
                kernel: "nll_log_softmax_bwd",
                index: 9,
                position: 0,
                rows: 4
            }
        );
        let e = k
            .nll_log_softmax_bwd(&x, 4, &[0, 0, 0], &[1.0; 2], &mut y)
            .unwrap_err();
        assert_eq!(
            e,
            KernelError::Length {
                kernel: "nll_log_softmax_bwd",
                arg: "dloss",
                expected: 3,
                got: 2
            }
        );
        // cols == 0: empty matrices; rows come from the per-row arguments.
        assert_eq!(k.softmax_rows(&[], 0, &mut []), Ok(()));
        let mut out = [5.0f32; 3];
        assert_eq!(k.row_sums(&[], 0, &mut out), Ok(()));
        assert_eq!(out, [0.0; 3]);
        assert_eq!(k.col_sums_acc(&[], 0, &mut []), Ok(()));
        let e = k
            .nll_log_softmax(&[], 0, &[0], &mut [], &mut [0.0])
            .unwrap_err();
        assert!(matches!(e, KernelError::Index { position: 0, .. }));
        // zero rows
        assert_eq!(k.nll_log_softmax(&[], 7, &[], &mut [], &mut []), Ok(()));
        assert_eq!(k.col_sums_acc(&[], 7, &mut [1.0; 7]), Ok(()));
    }
    let msg = CpuKernels::new()
        .softmax_rows(&x, 5, &mut y)
        .unwrap_err()
        .to_string();
    assert_eq!(
        msg,
        "softmax_rows: `x` has length 12, not a multiple of cols = 5"
    );
}

/// Above the threshold rows (or columns, for col_sums_acc) are split over
/// the pool: the bits do not change.
#[test]
fn parallel_split_matches_serial() {
    let pool = |t| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build()
            .unwrap()
    };
    let mut rng = Rng(5);
    for (rows, cols) in [(3000usize, 37usize), (200, 1000)] {
        let n = rows * cols;
        let x = rng.vec(n, -5.0, 5.0);
        let dy = rng.vec(n, -1.0, 1.0);
        let labels: Vec<u32> = (0..rows as u32).map(|r| r * 7 % cols as u32).collect();
        for k in all_kernels() {
            let run = |t: usize| {
                pool(t).install(|| {
                    let mut v = vec![vec![0.0f32; n]; 6];
                    let (mut loss, mut rs, mut cs) =
                        (vec![0.0; rows], vec![0.0; rows], vec![1.0; cols]);
                    k.softmax_rows(&x, cols, &mut v[0]).unwrap();
                    k.log_softmax_rows(&x, cols, &mut v[1]).unwrap();
                    let (a, b) = v.split_at_mut(2);
                    k.softmax_rows_bwd(&a[0], &dy, cols, &mut b[0]).unwrap();
                    k.nll_log_softmax(&x, cols, &labels, &mut b[1], &mut loss)
                        .unwrap();
                    k.log_softmax_rows_bwd(&a[1], &dy, cols, &mut b[2]).unwrap();
                    let (b, c) = b.split_at_mut(2);
                    k.nll_log_softmax_bwd(&b[1], cols, &labels, &dy[..rows], &mut c[1])
                        .unwrap();
                    k.row_sums(&x, cols, &mut rs).unwrap();
                    k.col_sums_acc(&x, cols, &mut cs).unwrap();
                    (v, loss, rs, cs)
                })
            };
            assert!(run(1) == run(3), "{:?} {rows}x{cols}", k.isa());
        }
    }
}
