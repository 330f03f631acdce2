//! SGD / Adagrad / Adam, dense and sparse-row, against plain f64 references
//! stepped several times, for every ISA.

use proptest::prelude::*;
use sheaf_kernels_cpu::optim::{Adagrad, Adam, Sgd};
use sheaf_kernels_cpu::{CpuKernels, Isa, KernelError};

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

fn kernels() -> Vec<CpuKernels> {
    Isa::supported()
        .into_iter()
        .map(|isa| CpuKernels::with_isa(isa).expect("supported"))
        .collect()
}

fn padded(v: &[f32], off: usize) -> Vec<f32> {
    let mut p = vec![f32::NAN; off];
    p.extend_from_slice(v);
    p
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[track_caller]
fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs();
        assert!(
            err <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

// ---- f64 references, one element at a time, straight from the formulas.

fn sgd_ref(c: &Sgd, p: &mut [f64], g: &[f64], v: &mut [f64]) {
    let (lr, mu, wd) = (c.lr as f64, c.momentum as f64, c.weight_decay as f64);
    for i in 0..p.len() {
        let g = g[i] + wd * p[i];
        if mu == 0.0 {
            p[i] -= lr * g;
        } else {
            v[i] = mu * v[i] + g;
            p[i] -= lr * v[i];
        }
    }
}

fn adagrad_ref(c: &Adagrad, p: &mut [f64], g: &[f64], a: &mut [f64]) {
    for i in 0..p.len() {
        let g = g[i] + c.weight_decay as f64 * p[i];
        a[i] += g * g;
        p[i] -= c.lr as f64 * g / (a[i].sqrt() + c.eps as f64);
    }
}

fn adam_ref(c: &Adam, t: u64, p: &mut [f64], g: &[f64], m: &mut [f64], v: &mut [f64]) {
    let (b1, b2) = (c.beta1 as f64, c.beta2 as f64);
    for i in 0..p.len() {
        let g = g[i] + c.weight_decay as f64 * p[i];
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        let mhat = m[i] / (1.0 - b1.powi(t as i32));
        let vhat = v[i] / (1.0 - b2.powi(t as i32));
        p[i] -= c.lr as f64 * mhat / (vhat.sqrt() + c.eps as f64);
    }
}

const SGD: Sgd = Sgd {
    lr: 0.1,
    momentum: 0.9,
    weight_decay: 0.01,
};
const ADAGRAD: Adagrad = Adagrad {
    lr: 0.1,
    eps: 1e-6,
    weight_decay: 0.01,
};
const ADAM: Adam = Adam {
    lr: 0.01,
    beta1: 0.8,
    beta2: 0.99,
    eps: 1e-6,
    weight_decay: 0.01,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Five dense steps of each optimizer against the f64 reference.
    #[test]
    fn dense_steps_match_reference(n in 0usize..70, off in 0usize..8, seed: u64) {
        for k in kernels() {
            for momentum in [0.0, 0.9] {
                let cfg = Sgd { momentum, ..SGD };
                let mut p = padded(&fill(seed, n), off);
                let mut v = padded(&vec![0.0; n], off);
                let (mut rp, mut rv) = (f64s(&p[off..]), vec![0.0; n]);
                for t in 0..5 {
                    let g = padded(&fill(seed ^ (t + 1), n), off);
                    // Without momentum no velocity is needed: pass an empty one.
                    let vel = if momentum == 0.0 { &mut [][..] } else { &mut v[off..] };
                    k.sgd_step(&cfg, &mut p[off..], &g[off..], vel).unwrap();
                    sgd_ref(&cfg, &mut rp, &f64s(&g[off..]), &mut rv);
                }
                assert_close(&p[off..], &rp, 1e-5, "sgd param");
                assert_close(&v[off..], &rv, 1e-5, "sgd velocity");
            }
            let mut p = padded(&fill(seed, n), off);
            let mut a = padded(&vec![0.0; n], off);
            let (mut rp, mut ra) = (f64s(&p[off..]), vec![0.0; n]);
            for t in 0..5 {
                let g = padded(&fill(seed ^ (t + 1), n), off);
                k.adagrad_step(&ADAGRAD, &mut p[off..], &g[off..], &mut a[off..]).unwrap();
                adagrad_ref(&ADAGRAD, &mut rp, &f64s(&g[off..]), &mut ra);
            }
            assert_close(&p[off..], &rp, 1e-5, "adagrad param");
            assert_close(&a[off..], &ra, 1e-5, "adagrad accum");
            let mut p = padded(&fill(seed, n), off);
            let (mut m, mut v) = (padded(&vec![0.0; n], off), padded(&vec![0.0; n], off));
            let (mut rp, mut rm, mut rv) = (f64s(&p[off..]), vec![0.0; n], vec![0.0; n]);
            for t in 1..=5 {
                let g = padded(&fill(seed ^ t, n), off);
                k.adam_step(&ADAM, t, &mut p[off..], &g[off..], &mut m[off..], &mut v[off..]).unwrap();
                adam_ref(&ADAM, t, &mut rp, &f64s(&g[off..]), &mut rm, &mut rv);
            }
            assert_close(&p[off..], &rp, 1e-5, "adam param");
            assert_close(&m[off..], &rm, 1e-5, "adam m");
            assert_close(&v[off..], &rv, 1e-5, "adam v");
        }
    }

    /// Lazy sparse steps: listed rows get the dense update (bit for bit, as
    /// computed by the dense kernel on a copy whose other rows have zero
    /// gradient); unlisted rows and their state stay bit-identical; several
    /// steps match an f64 lazy reference.
    #[test]
    fn sparse_steps_are_lazy(table in 1usize..12, cols in 1usize..20, seed: u64) {
        let k_all = kernels();
        for k in k_all {
            let mut p = [fill(seed, table * cols), fill(seed, table * cols), fill(seed, table * cols)];
            let mut s1 = [vec![0.0; table * cols], vec![0.0; table * cols], vec![0.0; table * cols]];
            let mut s2 = vec![0.0f32; table * cols];
            let mut rp: Vec<Vec<f64>> = p.iter().map(|x| f64s(x)).collect();
            let mut rs1 = vec![vec![0.0f64; table * cols]; 3];
            let mut rs2 = vec![0.0f64; table * cols];
            for t in 1..=4u64 {
                // A random distinct subset of rows, in random order.
                let mut rows: Vec<u32> = (0..table as u32).collect();
                let keys = fill(seed ^ (t * 77), table);
                rows.sort_by(|&a, &b| keys[a as usize].total_cmp(&keys[b as usize]));
                rows.truncate(1 + (seed as usize + t as usize) % table);
                let g = fill(seed ^ t, rows.len() * cols);
                let mut dense_g = vec![0.0; table * cols];
                for (i, &r) in rows.iter().enumerate() {
                    let r = r as usize;
                    dense_g[r * cols..(r + 1) * cols].copy_from_slice(&g[i * cols..(i + 1) * cols]);
                }
                let before = (p.clone(), s1.clone(), s2.clone());
                let (mut dp, mut ds1, mut ds2) = before.clone();
                k.sgd_step_rows(&SGD, &mut p[0], cols, &rows, &g, &mut s1[0]).unwrap();
                k.sgd_step(&SGD, &mut dp[0], &dense_g, &mut ds1[0]).unwrap();
                k.adagrad_step_rows(&ADAGRAD, &mut p[1], cols, &rows, &g, &mut s1[1]).unwrap();
                k.adagrad_step(&ADAGRAD, &mut dp[1], &dense_g, &mut ds1[1]).unwrap();
                k.adam_step_rows(&ADAM, t, &mut p[2], cols, &rows, &g, &mut s1[2], &mut s2).unwrap();
                k.adam_step(&ADAM, t, &mut dp[2], &dense_g, &mut ds1[2], &mut ds2).unwrap();
                for r in 0..table {
                    let span = r * cols..(r + 1) * cols;
                    let (after, dense, old) = if rows.contains(&(r as u32)) {
                        ((&p, &s1, &s2), (&dp, &ds1, &ds2), false)
                    } else {
                        ((&p, &s1, &s2), (&before.0, &before.1, &before.2), true)
                    };
                    for o in 0..3 {
                        prop_assert!(same_bits(&after.0[o][span.clone()], &dense.0[o][span.clone()]), "param o={o} r={r} untouched={old}");
                        prop_assert!(same_bits(&after.1[o][span.clone()], &dense.1[o][span.clone()]), "state o={o} r={r} untouched={old}");
                    }
                    prop_assert!(same_bits(&after.2[span.clone()], &dense.2[span.clone()]), "adam v r={r}");
                }
                for (i, &r) in rows.iter().enumerate() {
                    let span = r as usize * cols..(r as usize + 1) * cols;
                    let g = f64s(&g[i * cols..(i + 1) * cols]);
                    sgd_ref(&SGD, &mut rp[0][span.clone()], &g, &mut rs1[0][span.clone()]);
                    adagrad_ref(&ADAGRAD, &mut rp[1][span.clone()], &g, &mut rs1[1][span.clone()]);
                    let (pr, mr) = (&mut rp[2][span.clone()], &mut rs1[2][span.clone()]);
                    adam_ref(&ADAM, t, pr, &g, mr, &mut rs2[span]);
                }
            }
            for o in 0..3 {
                assert_close(&p[o], &rp[o], 1e-5, "lazy param");
                assert_close(&s1[o], &rs1[o], 1e-5, "lazy state");
            }
            assert_close(&s2, &rs2, 1e-5, "lazy adam v");
        }
    }
}

#[test]
fn defaults() {
    assert_eq!(
        Sgd::default(),
        Sgd {
            lr: 0.01,
            momentum: 0.0,
            weight_decay: 0.0
        }
    );
    assert_eq!(
        Adagrad::default(),
        Adagrad {
            lr: 0.01,
            eps: 1e-8,
            weight_decay: 0.0
        }
    );
    let adam = Adam {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    assert_eq!(Adam::default(), adam);
}

#[test]
fn nan_propagates_elementwise() {
    for k in kernels() {
        let mut p = vec![1.0, 2.0, 3.0];
        let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
        k.adam_step(&ADAM, 1, &mut p, &[0.5, f32::NAN, 0.5], &mut m, &mut v)
            .unwrap();
        assert!(p[1].is_nan() && m[1].is_nan() && v[1].is_nan());
        assert!(p[0].is_finite() && p[2].is_finite());
    }
}

/// Sizes that take the parallel paths give the single-thread results bit for bit.
#[test]
fn parallel_matches_single_thread() {
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let four = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    let (table, cols, n) = (700, 300, 250);
    let rows: Vec<u32> = (0..n as u32).map(|i| (i * 7919) % table as u32).collect();
    let g = fill(9, n * cols);
    let dense_g = fill(8, table * cols);
    for k in kernels() {
        let run = |pool: &rayon::ThreadPool| {
            pool.install(|| {
                let mut p = fill(1, table * cols);
                let mut st = [
                    vec![0.0; table * cols],
                    vec![0.0; table * cols],
                    vec![0.0; table * cols],
                ];
                for t in 1..=2 {
                    k.sgd_step(&SGD, &mut p, &dense_g, &mut st[0]).unwrap();
                    k.adagrad_step(&ADAGRAD, &mut p, &dense_g, &mut st[1])
                        .unwrap();
                    let [_, _, m] = &mut st;
                    let mut v = vec![0.0; table * cols];
                    k.adam_step(&ADAM, t, &mut p, &dense_g, m, &mut v).unwrap();
                    k.sgd_step_rows(&SGD, &mut p, cols, &rows, &g, &mut st[0])
                        .unwrap();
                    k.adagrad_step_rows(&ADAGRAD, &mut p, cols, &rows, &g, &mut st[1])
                        .unwrap();
                    let [a, _, m] = &mut st;
                    k.adam_step_rows(&ADAM, t, &mut p, cols, &rows, &g, m, a)
                        .unwrap();
                }
                (p, st)
            })
        };
        let (a, b) = (run(&one), run(&four));
        assert!(same_bits(&a.0, &b.0));
        for o in 0..3 {
            assert!(same_bits(&a.1[o], &b.1[o]));
        }
    }
}

/// Every ISA runs the same arithmetic (no FMA contraction): bit-identical.
#[test]
fn isas_agree_bitwise() {
    let n = 1003;
    let g = fill(5, n);
    let results: Vec<Vec<f32>> = kernels()
        .into_iter()
        .map(|k| {
            let mut p = fill(6, n);
            let (mut a, mut b, mut c) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
            for t in 1..=3 {
                k.sgd_step(&SGD, &mut p, &g, &mut a).unwrap();
                k.adagrad_step(&ADAGRAD, &mut p, &g, &mut b).unwrap();
                k.adam_step(&ADAM, t, &mut p, &g, &mut c, &mut a).unwrap();
            }
            [p, a, b, c].concat()
        })
        .collect();
    for r in &results[1..] {
        assert!(same_bits(r, &results[0]));
    }
}

#[test]
fn errors() {
    for k in kernels() {
        let mut p = vec![1.0f32; 6]; // 3 x 2
        let g4 = [0.5f32; 4];
        let (mut m, mut v) = (vec![0.0f32; 6], vec![0.0f32; 6]);
        let e = k.sgd_step(&SGD, &mut p, &g4, &mut v).unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    kernel: "sgd_step",
                    arg: "grad",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k.sgd_step(&SGD, &mut p, &[0.0; 6], &mut []).unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    arg: "velocity",
                    ..
                }
            ),
            "{e:?}"
        );
        let plain = Sgd {
            momentum: 0.0,
            ..SGD
        };
        k.sgd_step(&plain, &mut p, &[0.0; 6], &mut []).unwrap();
        let e = k
            .sgd_step(&plain, &mut p, &[0.0; 6], &mut v[..2])
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    arg: "velocity",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k
            .adagrad_step(&ADAGRAD, &mut p, &[0.0; 6], &mut m[..5])
            .unwrap_err();
        assert!(
            matches!(e, KernelError::Length { arg: "accum", .. }),
            "{e:?}"
        );
        let e = k
            .adam_step(&ADAM, 0, &mut p, &[0.0; 6], &mut m, &mut v)
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Invalid {
                    kernel: "adam_step",
                    ..
                }
            ),
            "{e:?}"
        );
        let bad = Adam { beta2: 1.0, ..ADAM };
        let e = k
            .adam_step(&bad, 1, &mut p, &[0.0; 6], &mut m, &mut v)
            .unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
        let e = k
            .adam_step(&ADAM, 1, &mut p, &[0.0; 6], &mut m, &mut v[..3])
            .unwrap_err();
        assert!(matches!(e, KernelError::Length { arg: "v", .. }), "{e:?}");

        let before = (p.clone(), m.clone(), v.clone());
        let e = k
            .adam_step_rows(&ADAM, 1, &mut p, 2, &[0, 3], &g4, &mut m, &mut v)
            .unwrap_err();
        assert_eq!(
            e,
            KernelError::Index {
                kernel: "adam_step_rows",
                index: 3,
                position: 1,
                rows: 3
            }
        );
        let e = k
            .adam_step_rows(&ADAM, 1, &mut p, 2, &[2, 2], &g4, &mut m, &mut v)
            .unwrap_err();
        match e {
            KernelError::Invalid {
                kernel: "adam_step_rows",
                what,
            } => assert!(what.contains("row 2"), "{what}"),
            e => panic!("{e:?}"),
        }
        let e = k
            .sgd_step_rows(&SGD, &mut p, 2, &[1, 0, 1], &[0.0; 6], &mut m)
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Invalid {
                    kernel: "sgd_step_rows",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k
            .adagrad_step_rows(&ADAGRAD, &mut p, 2, &[1], &g4, &mut m)
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    arg: "grad",
                    expected: 2,
                    got: 4,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k
            .adagrad_step_rows(&ADAGRAD, &mut p, 4, &[1], &g4, &mut m)
            .unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
        let e = k
            .adagrad_step_rows(&ADAGRAD, &mut p, 0, &[], &[], &mut m)
            .unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
        let e = k
            .adam_step_rows(&ADAM, 0, &mut p, 2, &[0], &g4[..2], &mut m, &mut v)
            .unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
        assert_eq!(
            before,
            (p.clone(), m.clone(), v.clone()),
            "nothing written on error"
        );
        k.sgd_step_rows(&plain, &mut p, 2, &[2], &g4[..2], &mut [])
            .unwrap();
        let e = k
            .sgd_step_rows(&SGD, &mut p, 2, &[2], &g4[..2], &mut [])
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    arg: "velocity",
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
