//! LSTM / GRU / Tree-LSTM cells: forward against a plain f64 reference;
//! backward against central finite differences of that reference and
//! against an analytic f64 backward; accumulation into pre-filled
//! gradients; every ISA, random b and H, unaligned slices; error cases.

use proptest::prelude::*;
use sheaf_kernels_cpu::{CpuKernels, Isa, KernelError};

fn fill(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
            scale * ((r >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

fn kernels() -> Vec<CpuKernels> {
    Isa::supported()
        .into_iter()
        .map(|isa| CpuKernels::with_isa(isa).expect("supported"))
        .collect()
}

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

type Vs = Vec<Vec<f64>>;

/// One cell as the tests see it: row-wise f64 reference forward (returns
/// the activated gates and the outputs) and analytic backward (gradients of
/// every input from the output gradients), the gate-block counts of the
/// inputs, and the kernels under test.
#[allow(clippy::type_complexity)]
struct Cell {
    name: &'static str,
    in_k: &'static [usize],
    act_k: usize,
    n_out: usize,
    fwd_ref: fn(&[&[f64]], usize) -> (Vec<f64>, Vs),
    bwd_ref: fn(&[&[f64]], &[&[f64]], usize) -> Vs,
    /// (k, ins, hidden, act, outs)
    fwd:
        fn(&CpuKernels, &[&[f32]], usize, &mut [f32], &mut [&mut [f32]]) -> Result<(), KernelError>,
    /// (k, act, ins, outs, douts, hidden, dins)
    bwd: fn(
        &CpuKernels,
        &[f32],
        &[&[f32]],
        &[&[f32]],
        &[&[f32]],
        usize,
        &mut [&mut [f32]],
    ) -> Result<(), KernelError>,
}

fn lstm_ref(x: &[&[f64]], hd: usize) -> (Vec<f64>, Vs) {
    let (g, cp) = (x[0], x[1]);
    let act: Vec<f64> = (0..4 * hd)
        .map(|j| if j < 3 * hd { sig(g[j]) } else { g[j].tanh() })
        .collect();
    let c: Vec<f64> = (0..hd)
        .map(|j| act[j] * act[3 * hd + j] + act[hd + j] * cp[j])
        .collect();
    let h = (0..hd).map(|j| act[2 * hd + j] * c[j].tanh()).collect();
    (act, vec![c, h])
}

fn lstm_bwd_ref(x: &[&[f64]], d: &[&[f64]], hd: usize) -> Vs {
    let (a, o) = lstm_ref(x, hd);
    let (mut dg, mut dcp) = (vec![0.0; 4 * hd], vec![0.0; hd]);
    for j in 0..hd {
        let (i, f, og, u, t) = (
            a[j],
            a[hd + j],
            a[2 * hd + j],
            a[3 * hd + j],
            o[0][j].tanh(),
        );
        let dct = d[0][j] + d[1][j] * og * (1.0 - t * t);
        dg[j] = dct * u * i * (1.0 - i);
        dg[hd + j] = dct * x[1][j] * f * (1.0 - f);
        dg[2 * hd + j] = d[1][j] * t * og * (1.0 - og);
        dg[3 * hd + j] = dct * i * (1.0 - u * u);
        dcp[j] = dct * f;
    }
    vec![dg, dcp]
}

fn gru_ref(x: &[&[f64]], hd: usize) -> (Vec<f64>, Vs) {
    let (xw, hu, hp) = (x[0], x[1], x[2]);
    let mut act: Vec<f64> = (0..2 * hd).map(|j| sig(xw[j] + hu[j])).collect();
    let n: Vec<f64> = (0..hd)
        .map(|j| (xw[2 * hd + j] + act[j] * hu[2 * hd + j]).tanh())
        .collect();
    act.extend(n);
    let h = (0..hd)
        .map(|j| (1.0 - act[hd + j]) * act[2 * hd + j] + act[hd + j] * hp[j])
        .collect();
    (act, vec![h])
}

fn gru_bwd_ref(x: &[&[f64]], d: &[&[f64]], hd: usize) -> Vs {
    let (a, _) = gru_ref(x, hd);
    let (mut dxw, mut dhu, mut dhp) = (vec![0.0; 3 * hd], vec![0.0; 3 * hd], vec![0.0; hd]);
    for j in 0..hd {
        let (r, z, n, dh) = (a[j], a[hd + j], a[2 * hd + j], d[0][j]);
        let dnp = dh * (1.0 - z) * (1.0 - n * n);
        let drp = dnp * x[1][2 * hd + j] * r * (1.0 - r);
        let dzp = dh * (x[2][j] - n) * z * (1.0 - z);
        (dxw[j], dhu[j]) = (drp, drp);
        (dxw[hd + j], dhu[hd + j]) = (dzp, dzp);
        (dxw[2 * hd + j], dhu[2 * hd + j]) = (dnp, dnp * r);
        dhp[j] = dh * z;
    }
    vec![dxw, dhu, dhp]
}

fn leaf_ref(x: &[&[f64]], hd: usize) -> (Vec<f64>, Vs) {
    let g = x[0];
    let act: Vec<f64> = (0..3 * hd)
        .map(|j| if j < 2 * hd { sig(g[j]) } else { g[j].tanh() })
        .collect();
    let c: Vec<f64> = (0..hd).map(|j| act[j] * act[2 * hd + j]).collect();
    let h = (0..hd).map(|j| act[hd + j] * c[j].tanh()).collect();
    (act, vec![c, h])
}

fn leaf_bwd_ref(x: &[&[f64]], d: &[&[f64]], hd: usize) -> Vs {
    let (a, o) = leaf_ref(x, hd);
    let mut dg = vec![0.0; 3 * hd];
    for j in 0..hd {
        let (i, og, u, t) = (a[j], a[hd + j], a[2 * hd + j], o[0][j].tanh());
        let dct = d[0][j] + d[1][j] * og * (1.0 - t * t);
        dg[j] = dct * u * i * (1.0 - i);
        dg[hd + j] = d[1][j] * t * og * (1.0 - og);
        dg[2 * hd + j] = dct * i * (1.0 - u * u);
    }
    vec![dg]
}

fn node_ref(x: &[&[f64]], hd: usize) -> (Vec<f64>, Vs) {
    let (g, cl, cr) = (x[0], x[1], x[2]);
    let act: Vec<f64> = (0..5 * hd)
        .map(|j| if j < 4 * hd { sig(g[j]) } else { g[j].tanh() })
        .collect();
    let c: Vec<f64> = (0..hd)
        .map(|j| act[j] * act[4 * hd + j] + act[hd + j] * cl[j] + act[2 * hd + j] * cr[j])
        .collect();
    let h = (0..hd).map(|j| act[3 * hd + j] * c[j].tanh()).collect();
    (act, vec![c, h])
}

fn node_bwd_ref(x: &[&[f64]], d: &[&[f64]], hd: usize) -> Vs {
    let (a, o) = node_ref(x, hd);
    let (mut dg, mut dcl, mut dcr) = (vec![0.0; 5 * hd], vec![0.0; hd], vec![0.0; hd]);
    for j in 0..hd {
        let (i, fl, fr, og, u) = (a[j], a[hd + j], a[2 * hd + j], a[3 * hd + j], a[4 * hd + j]);
        let t = o[0][j].tanh();
        let dct = d[0][j] + d[1][j] * og * (1.0 - t * t);
        dg[j] = dct * u * i * (1.0 - i);
        dg[hd + j] = dct * x[1][j] * fl * (1.0 - fl);
        dg[2 * hd + j] = dct * x[2][j] * fr * (1.0 - fr);
        dg[3 * hd + j] = d[1][j] * t * og * (1.0 - og);
        dg[4 * hd + j] = dct * i * (1.0 - u * u);
        (dcl[j], dcr[j]) = (dct * fl, dct * fr);
    }
    vec![dg, dcl, dcr]
}

const CELLS: [Cell; 4] = [
    Cell {
        name: "lstm",
        in_k: &[4, 1],
        act_k: 4,
        n_out: 2,
        fwd_ref: lstm_ref,
        bwd_ref: lstm_bwd_ref,
        fwd: |k, x, hd, a, o| {
            let [c, h] = o else { unreachable!() };
            k.lstm_fwd(x[0], x[1], hd, a, c, h)
        },
        bwd: |k, a, x, o, d, hd, dx| {
            let [dg, dcp] = dx else { unreachable!() };
            k.lstm_bwd(a, x[1], o[0], d[0], d[1], hd, dg, dcp)
        },
    },
    Cell {
        name: "gru",
        in_k: &[3, 3, 1],
        act_k: 3,
        n_out: 1,
        fwd_ref: gru_ref,
        bwd_ref: gru_bwd_ref,
        fwd: |k, x, hd, a, o| k.gru_fwd(x[0], x[1], x[2], hd, a, o[0]),
        bwd: |k, a, x, _, d, hd, dx| {
            let [dxw, dhu, dhp] = dx else { unreachable!() };
            k.gru_bwd(a, x[1], x[2], d[0], hd, dxw, dhu, dhp)
        },
    },
    Cell {
        name: "tree_lstm_leaf",
        in_k: &[3],
        act_k: 3,
        n_out: 2,
        fwd_ref: leaf_ref,
        bwd_ref: leaf_bwd_ref,
        fwd: |k, x, hd, a, o| {
            let [c, h] = o else { unreachable!() };
            k.tree_lstm_leaf_fwd(x[0], hd, a, c, h)
        },
        bwd: |k, a, _, o, d, hd, dx| k.tree_lstm_leaf_bwd(a, o[0], d[0], d[1], hd, dx[0]),
    },
    Cell {
        name: "tree_lstm_node",
        in_k: &[5, 1, 1],
        act_k: 5,
        n_out: 2,
        fwd_ref: node_ref,
        bwd_ref: node_bwd_ref,
        fwd: |k, x, hd, a, o| {
            let [c, h] = o else { unreachable!() };
            k.tree_lstm_node_fwd(x[0], x[1], x[2], hd, a, c, h)
        },
        bwd: |k, a, x, o, d, hd, dx| {
            let [dg, dcl, dcr] = dx else { unreachable!() };
            k.tree_lstm_node_bwd(a, x[1], x[2], o[0], d[0], d[1], hd, dg, dcl, dcr)
        },
    },
];

/// A buffer whose slice starts `off` floats into its allocation.
fn padded(v: &[f32], off: usize) -> Vec<f32> {
    let mut p = vec![f32::NAN; off];
    p.extend_from_slice(v);
    p
}

fn row(v: &[f32], r: usize, w: usize) -> Vec<f64> {
    v[r * w..(r + 1) * w]
        .iter()
        .map(|&x| f64::from(x))
        .collect()
}

#[track_caller]
fn close(got: f32, want: f64, tol: f64) -> bool {
    (f64::from(got) - want).abs() <= tol * (1.0 + want.abs())
}

/// Central finite differences of `sum_o <d_o, out_o>` over one row's inputs.
fn finite_diff(cell: &Cell, x: &[Vec<f64>], d: &[&[f64]], hd: usize) -> Vs {
    let loss = |x: &[Vec<f64>]| {
        let xs: Vec<&[f64]> = x.iter().map(|v| &v[..]).collect();
        let (_, outs) = (cell.fwd_ref)(&xs, hd);
        outs.iter()
            .zip(d)
            .map(|(o, d)| o.iter().zip(*d).map(|(a, b)| a * b).sum::<f64>())
            .sum::<f64>()
    };
    let eps = 1e-5;
    let mut x = x.to_vec();
    (0..x.len())
        .map(|t| {
            (0..x[t].len())
                .map(|e| {
                    let v = x[t][e];
                    x[t][e] = v + eps;
                    let up = loss(&x);
                    x[t][e] = v - eps;
                    let down = loss(&x);
                    x[t][e] = v;
                    (up - down) / (2.0 * eps)
                })
                .collect()
        })
        .collect()
}

/// Forward and backward of `cell` on b x H random data, every ISA.
fn check_cell(cell: &Cell, b: usize, hd: usize, off: usize, seed: u64) {
    let n = cell.name;
    let ins: Vec<Vec<f32>> = cell
        .in_k
        .iter()
        .enumerate()
        .map(|(t, &k)| fill(seed ^ t as u64, b * k * hd, 3.0))
        .collect();
    let douts: Vec<Vec<f32>> = (0..cell.n_out)
        .map(|t| fill(seed ^ (10 + t as u64), b * hd, 1.0))
        .collect();
    let pre: Vec<Vec<f32>> = cell
        .in_k
        .iter()
        .enumerate()
        .map(|(t, &k)| fill(seed ^ (20 + t as u64), b * k * hd, 1.0))
        .collect();
    // References, row by row.
    let (mut act_ref, mut out_ref, mut din_ref, mut din_fd) = (
        vec![],
        vec![vec![]; cell.n_out],
        vec![vec![]; ins.len()],
        vec![vec![]; ins.len()],
    );
    for r in 0..b {
        let x: Vec<Vec<f64>> = ins
            .iter()
            .zip(cell.in_k)
            .map(|(v, &k)| row(v, r, k * hd))
            .collect();
        let d: Vec<Vec<f64>> = douts.iter().map(|v| row(v, r, hd)).collect();
        let xs: Vec<&[f64]> = x.iter().map(|v| &v[..]).collect();
        let ds: Vec<&[f64]> = d.iter().map(|v| &v[..]).collect();
        let (a, o) = (cell.fwd_ref)(&xs, hd);
        act_ref.extend(a);
        o.into_iter()
            .zip(&mut out_ref)
            .for_each(|(o, dst)| dst.extend(o));
        let an = (cell.bwd_ref)(&xs, &ds, hd);
        let fd = finite_diff(cell, &x, &ds, hd);
        for t in 0..ins.len() {
            for (e, (&a, &f)) in an[t].iter().zip(&fd[t]).enumerate() {
                assert!(
                    (a - f).abs() <= 1e-6 * (1.0 + a.abs()),
                    "{n}: analytic ref vs fd, input {t} row {r} elem {e}: {a} vs {f}"
                );
            }
            din_ref[t].extend(&an[t]);
            din_fd[t].extend(&fd[t]);
        }
    }
    for k in kernels() {
        let isa = k.isa();
        let in_bufs: Vec<Vec<f32>> = ins.iter().map(|v| padded(v, off)).collect();
        let in_s: Vec<&[f32]> = in_bufs.iter().map(|v| &v[off..]).collect();
        let mut act = padded(&vec![f32::NAN; b * cell.act_k * hd], off);
        let mut outs: Vec<Vec<f32>> = (0..cell.n_out)
            .map(|_| padded(&vec![f32::NAN; b * hd], off))
            .collect();
        let mut out_s: Vec<&mut [f32]> = outs.iter_mut().map(|v| &mut v[off..]).collect();
        (cell.fwd)(&k, &in_s, hd, &mut act[off..], &mut out_s).unwrap();
        for (e, (&g, &w)) in act[off..].iter().zip(&act_ref).enumerate() {
            assert!(
                close(g, w, 1e-5),
                "{n} {isa:?} b={b} H={hd}: act[{e}] {g} vs {w}"
            );
        }
        for (t, (o, w)) in outs.iter().zip(&out_ref).enumerate() {
            for (e, (&g, &w)) in o[off..].iter().zip(w).enumerate() {
                assert!(
                    close(g, w, 1e-5),
                    "{n} {isa:?} b={b} H={hd}: out {t}[{e}] {g} vs {w}"
                );
            }
        }
        let d_bufs: Vec<Vec<f32>> = douts.iter().map(|v| padded(v, off)).collect();
        let d_s: Vec<&[f32]> = d_bufs.iter().map(|v| &v[off..]).collect();
        let out_s: Vec<&[f32]> = outs.iter().map(|v| &v[off..]).collect();
        let mut grads: Vec<Vec<f32>> = pre.iter().map(|v| padded(v, off)).collect();
        let mut g_s: Vec<&mut [f32]> = grads.iter_mut().map(|v| &mut v[off..]).collect();
        (cell.bwd)(&k, &act[off..], &in_s, &out_s, &d_s, hd, &mut g_s).unwrap();
        for t in 0..ins.len() {
            for (e, ((&g, &p), (&an, &fd))) in grads[t][off..]
                .iter()
                .zip(&pre[t])
                .zip(din_ref[t].iter().zip(&din_fd[t]))
                .enumerate()
            {
                let got = g - p; // backward accumulates onto the pre-filled gradient
                assert!(
                    close(got, an, 2e-5),
                    "{n} {isa:?} b={b} H={hd}: d input {t}[{e}] {got} vs analytic {an}"
                );
                assert!(
                    close(got, fd, 2e-5),
                    "{n} {isa:?} b={b} H={hd}: d input {t}[{e}] {got} vs finite diff {fd}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn cells_match_references(b in 0usize..=5, hd in 1usize..=40, off in 0usize..8, seed: u64) {
        for cell in &CELLS {
            check_cell(cell, b, hd, off, seed);
        }
    }
}

#[test]
fn wide_and_saturated() {
    for cell in &CELLS {
        check_cell(cell, 2, 67, 3, 11); // H not a multiple of 8 or 16, past 64
        check_cell(cell, 1, 1, 0, 12);
    }
}

#[test]
fn nan_stays_in_its_row() {
    for k in kernels() {
        let hd = 9;
        let mut gates = fill(1, 3 * 4 * hd, 2.0);
        gates[4 * hd + 5] = f32::NAN; // row 1, gate i, column 5
        let c_prev = fill(2, 3 * hd, 1.0);
        let (mut act, mut c, mut h) = (vec![0.0; 12 * hd], vec![0.0; 3 * hd], vec![0.0; 3 * hd]);
        k.lstm_fwd(&gates, &c_prev, hd, &mut act, &mut c, &mut h)
            .unwrap();
        for (j, (&c, &h)) in c.iter().zip(&h).enumerate() {
            assert_eq!(c.is_nan(), j == hd + 5, "c[{j}]");
            assert_eq!(h.is_nan(), j == hd + 5, "h[{j}]");
        }
        // Saturated gates: i = s(inf) = 1, o = s(0) = 1/2, u = tanh(inf) = 1, in every row.
        let (inf, zero) = (vec![f32::INFINITY; hd], vec![0.0; hd]);
        let gates = [&inf[..], &zero, &inf].concat().repeat(3);
        let (mut gc, mut gh) = (vec![0.0; 3 * hd], vec![0.0; 3 * hd]);
        k.tree_lstm_leaf_fwd(&gates, hd, &mut act[..9 * hd], &mut gc, &mut gh)
            .unwrap();
        assert!(
            gc.iter().all(|&c| c == 1.0)
                && gh.iter().all(|&h| (h - 0.5 * 1f32.tanh()).abs() < 1e-6),
            "{gc:?} {gh:?}"
        );
    }
}

/// Sizes that take the parallel path give the single-thread results bit for bit.
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
    let (b, hd) = (67, 150);
    for k in kernels() {
        for cell in &CELLS {
            let ins: Vec<Vec<f32>> = cell
                .in_k
                .iter()
                .enumerate()
                .map(|(t, &kk)| fill(t as u64, b * kk * hd, 3.0))
                .collect();
            let douts: Vec<Vec<f32>> = (0..cell.n_out)
                .map(|t| fill(10 + t as u64, b * hd, 1.0))
                .collect();
            let run = |pool: &rayon::ThreadPool| {
                pool.install(|| {
                    let in_s: Vec<&[f32]> = ins.iter().map(|v| &v[..]).collect();
                    let mut act = vec![0.0; b * cell.act_k * hd];
                    let mut outs = vec![vec![0.0; b * hd]; cell.n_out];
                    let mut out_s: Vec<&mut [f32]> = outs.iter_mut().map(|v| &mut v[..]).collect();
                    (cell.fwd)(&k, &in_s, hd, &mut act, &mut out_s).unwrap();
                    let mut grads: Vec<Vec<f32>> = ins.iter().map(|v| vec![0.5; v.len()]).collect();
                    let mut g_s: Vec<&mut [f32]> = grads.iter_mut().map(|v| &mut v[..]).collect();
                    let out_s: Vec<&[f32]> = outs.iter().map(|v| &v[..]).collect();
                    let d_s: Vec<&[f32]> = douts.iter().map(|v| &v[..]).collect();
                    (cell.bwd)(&k, &act, &in_s, &out_s, &d_s, hd, &mut g_s).unwrap();
                    (act, outs, grads)
                })
            };
            assert_eq!(run(&one), run(&four), "{}", cell.name);
        }
    }
}

#[test]
fn errors() {
    for k in kernels() {
        let hd = 3;
        let (g, cp) = (vec![0.0; 2 * 4 * hd], vec![0.0; 2 * hd]);
        let (mut a, mut c, mut h) = (vec![0.0; 8 * hd], vec![0.0; 2 * hd], vec![0.0; 2 * hd]);
        let e = k.lstm_fwd(&g, &cp, 0, &mut a, &mut c, &mut h).unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Invalid {
                    kernel: "lstm_fwd",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k
            .lstm_fwd(&g, &cp[..5], hd, &mut a, &mut c, &mut h)
            .unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
        let e = k
            .lstm_fwd(&g[1..], &cp, hd, &mut a, &mut c, &mut h)
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    arg: "gates",
                    expected: 24,
                    got: 23,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k
            .lstm_fwd(&g, &cp, hd, &mut a, &mut c, &mut h[..3])
            .unwrap_err();
        assert!(matches!(e, KernelError::Length { arg: "h", .. }), "{e:?}");
        let (mut dg, mut dcp) = (vec![0.0; 8 * hd], vec![0.0; 2 * hd]);
        let e = k
            .lstm_bwd(&a, &cp, &c, &c, &h[..3], hd, &mut dg, &mut dcp)
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    kernel: "lstm_bwd",
                    arg: "dh",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k
            .lstm_bwd(&a, &cp, &c, &c, &h, hd, &mut dg, &mut dcp[..1])
            .unwrap_err();
        assert!(
            matches!(e, KernelError::Length { arg: "dc_prev", .. }),
            "{e:?}"
        );

        let x3 = vec![0.0; 2 * 3 * hd];
        let e = k
            .gru_fwd(&x3, &x3[1..], &cp, hd, &mut a[..6 * hd], &mut h)
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    kernel: "gru_fwd",
                    arg: "hu",
                    ..
                }
            ),
            "{e:?}"
        );
        let (mut dx, mut du, mut dhp) = (vec![0.0; 6 * hd], vec![0.0; 6 * hd], vec![0.0; 2 * hd]);
        let e = k
            .gru_bwd(&x3, &x3, &cp, &h, hd, &mut dx, &mut du[..5], &mut dhp)
            .unwrap_err();
        assert!(matches!(e, KernelError::Length { arg: "dhu", .. }), "{e:?}");
        let e = k
            .tree_lstm_leaf_fwd(&x3, hd, &mut a[..6 * hd], &mut c, &mut h[..5])
            .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Length {
                    kernel: "tree_lstm_leaf_fwd",
                    arg: "h",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = k
            .tree_lstm_leaf_bwd(&x3, &c, &c, &h, 0, &mut dx)
            .unwrap_err();
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
        let g5 = vec![0.0; 2 * 5 * hd];
        let mut a5 = vec![0.0; 2 * 5 * hd];
        let e = k
            .tree_lstm_node_fwd(&g5, &cp, &cp[..3], hd, &mut a5, &mut c, &mut h)
            .unwrap_err();
        assert!(matches!(e, KernelError::Length { arg: "c_r", .. }), "{e:?}");
        let mut dg5 = vec![0.0; 2 * 5 * hd];
        let (mut dcl, mut dcr) = (vec![0.0; 2 * hd], vec![0.0; 2 * hd]);
        let e = k
            .tree_lstm_node_bwd(
                &a5,
                &cp,
                &cp,
                &c,
                &c,
                &h,
                hd,
                &mut dg5[1..],
                &mut dcl,
                &mut dcr,
            )
            .unwrap_err();
        assert!(
            matches!(e, KernelError::Length { arg: "dgates", .. }),
            "{e:?}"
        );
        k.tree_lstm_node_bwd(&[], &[], &[], &[], &[], &[], hd, &mut [], &mut [], &mut [])
            .unwrap();
        assert_eq!(
            (&dg5, &dcl, &dcr),
            (&vec![0.0; 30], &vec![0.0; 6], &vec![0.0; 6]),
            "nothing written on error"
        );
    }
}

/// Empty slices with a huge `hidden`: b = 0, so nothing to compute, but
/// `k x hidden` overflows and a per-row scratch of `hidden` floats cannot be
/// allocated. Must be an error or a no-op, never a panic.
#[test]
fn huge_hidden_with_no_rows_does_not_panic() {
    for k in kernels() {
        for hd in [usize::MAX / 2, usize::MAX / 4 + 1, 1 << 60] {
            let mut e: [Vec<f32>; 3] = Default::default();
            let [a, c, h] = &mut e;
            let _ = k.lstm_fwd(&[], &[], hd, a, c, h);
            let _ = k.lstm_bwd(&[], &[], &[], &[], &[], hd, a, c);
            let _ = k.gru_fwd(&[], &[], &[], hd, a, c);
            let _ = k.gru_bwd(&[], &[], &[], &[], hd, a, c, h);
            let _ = k.tree_lstm_leaf_fwd(&[], hd, a, c, h);
            let _ = k.tree_lstm_leaf_bwd(&[], &[], &[], &[], hd, a);
            let _ = k.tree_lstm_node_fwd(&[], &[], &[], hd, a, c, h);
            let _ = k.tree_lstm_node_bwd(&[], &[], &[], &[], &[], &[], hd, a, c, h);
        }
    }
}
