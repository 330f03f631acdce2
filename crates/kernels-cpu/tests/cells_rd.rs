//! Tree-LSTM cells with recurrent dropout (`tree_lstm_*_rd_*`): with a
//! mask of ones they are the plain cells bit for bit; with a dropout mask
//! forward matches an f64 reference and backward its analytic gradient and
//! central finite differences (the mask fixed); `act` carries the mask;
//! every ISA, unaligned-free random b and H; length errors name `mask`.

use sheaf_kernels_cpu::{CpuKernels, Isa};

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

/// A dropout mask of rate 0.4: 0 or 1 / 0.6.
fn mask(seed: u64, n: usize) -> Vec<f32> {
    fill(seed, n, 1.0)
        .into_iter()
        .map(|u| if u < -0.2 { 0.0 } else { 1.0 / 0.6 })
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

/// f64 reference of one node row (leaf: `cl`, `cr` empty and gates
/// `[i, o, u]`): returns `(c, h)`.
fn reference(g: &[f64], m: &[f64], cl: &[f64], cr: &[f64], hd: usize) -> (Vec<f64>, Vec<f64>) {
    let leaf = cl.is_empty();
    let (o_at, u_at) = if leaf { (hd, 2 * hd) } else { (3 * hd, 4 * hd) };
    let mut c = vec![0.0; hd];
    let mut h = vec![0.0; hd];
    for j in 0..hd {
        let mut cj = sig(g[j]) * g[u_at + j].tanh() * m[j];
        if !leaf {
            cj += sig(g[hd + j]) * cl[j] + sig(g[2 * hd + j]) * cr[j];
        }
        c[j] = cj;
        h[j] = sig(g[o_at + j]) * cj.tanh();
    }
    (c, h)
}

/// `<dc, c> + <dh, h>` of the reference.
fn loss(g: &[f64], m: &[f64], cl: &[f64], cr: &[f64], dc: &[f64], dh: &[f64], hd: usize) -> f64 {
    let (c, h) = reference(g, m, cl, cr, hd);
    c.iter().zip(dc).map(|(a, b)| a * b).sum::<f64>()
        + h.iter().zip(dh).map(|(a, b)| a * b).sum::<f64>()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

fn close(got: f32, want: f64, tol: f64) -> bool {
    (f64::from(got) - want).abs() <= tol * (1.0 + want.abs())
}

/// Runs the rd kernels (leaf if `leaf`) on b x H data with mask `m`:
/// returns `(act, c, h, dgates, dc_l, dc_r)` (backward on top of zeros).
#[allow(clippy::type_complexity)]
#[allow(clippy::too_many_arguments)]
fn run_rd(
    k: &CpuKernels,
    leaf: bool,
    hd: usize,
    gates: &[f32],
    m: &[f32],
    cl: &[f32],
    cr: &[f32],
    dc: &[f32],
    dh: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let b = m.len() / hd;
    let kg = if leaf { 3 } else { 5 };
    let mut act = vec![f32::NAN; b * (kg + 1) * hd];
    let (mut c, mut h) = (vec![f32::NAN; b * hd], vec![f32::NAN; b * hd]);
    let mut dg = vec![0.0; b * kg * hd];
    let (mut dcl, mut dcr) = (vec![0.0; b * hd], vec![0.0; b * hd]);
    if leaf {
        k.tree_lstm_leaf_rd_fwd(gates, m, hd, &mut act, &mut c, &mut h)
            .unwrap();
        k.tree_lstm_leaf_rd_bwd(&act, &c, dc, dh, hd, &mut dg)
            .unwrap();
    } else {
        k.tree_lstm_node_rd_fwd(gates, m, cl, cr, hd, &mut act, &mut c, &mut h)
            .unwrap();
        k.tree_lstm_node_rd_bwd(&act, cl, cr, &c, dc, dh, hd, &mut dg, &mut dcl, &mut dcr)
            .unwrap();
    }
    (act, c, h, dg, dcl, dcr)
}

#[test]
fn mask_of_ones_is_the_plain_cell_bit_for_bit() {
    for k in kernels() {
        for (b, hd) in [(1, 1), (3, 7), (5, 33), (40, 150)] {
            let n = b * hd;
            let ones = vec![1.0f32; n];
            let (cl, cr) = (fill(2, n, 2.0), fill(3, n, 2.0));
            let (dc, dh) = (fill(4, n, 1.0), fill(5, n, 1.0));
            for leaf in [true, false] {
                let kg = if leaf { 3 } else { 5 };
                let gates = fill(1, b * kg * hd, 3.0);
                let (act, c, h, dg, dcl, dcr) =
                    run_rd(&k, leaf, hd, &gates, &ones, &cl, &cr, &dc, &dh);
                let mut pact = vec![0.0; b * kg * hd];
                let (mut pc, mut ph) = (vec![0.0; n], vec![0.0; n]);
                let mut pdg = vec![0.0; b * kg * hd];
                let (mut pdcl, mut pdcr) = (vec![0.0; n], vec![0.0; n]);
                if leaf {
                    k.tree_lstm_leaf_fwd(&gates, hd, &mut pact, &mut pc, &mut ph)
                        .unwrap();
                    k.tree_lstm_leaf_bwd(&pact, &pc, &dc, &dh, hd, &mut pdg)
                        .unwrap();
                } else {
                    k.tree_lstm_node_fwd(&gates, &cl, &cr, hd, &mut pact, &mut pc, &mut ph)
                        .unwrap();
                    k.tree_lstm_node_bwd(
                        &pact, &cl, &cr, &pc, &dc, &dh, hd, &mut pdg, &mut pdcl, &mut pdcr,
                    )
                    .unwrap();
                }
                let what = format!("{:?} leaf={leaf} b={b} H={hd}", k.isa());
                assert_eq!(c, pc, "{what}: c");
                assert_eq!(h, ph, "{what}: h");
                assert_eq!(dg, pdg, "{what}: dgates");
                assert_eq!((dcl, dcr), (pdcl, pdcr), "{what}: dc_l, dc_r");
                for r in 0..b {
                    let w = (kg + 1) * hd;
                    assert_eq!(
                        &act[r * w..r * w + kg * hd],
                        &pact[r * kg * hd..(r + 1) * kg * hd]
                    );
                    assert_eq!(
                        &act[r * w + kg * hd..(r + 1) * w],
                        &ones[r * hd..(r + 1) * hd]
                    );
                }
            }
        }
    }
}

#[test]
fn dropout_mask_matches_reference_and_finite_differences() {
    for k in kernels() {
        for (b, hd, seed) in [(1, 3, 1u64), (4, 9, 2), (3, 40, 3)] {
            let n = b * hd;
            let m = mask(seed, n);
            assert!(m.contains(&0.0) && m.iter().any(|&v| v > 1.0));
            let (cl, cr) = (fill(seed + 2, n, 2.0), fill(seed + 3, n, 2.0));
            let (dc, dh) = (fill(seed + 4, n, 1.0), fill(seed + 5, n, 1.0));
            for leaf in [true, false] {
                let kg = if leaf { 3 } else { 5 };
                let gates = fill(seed + 1, b * kg * hd, 3.0);
                let (act, c, h, dg, dcl, dcr) =
                    run_rd(&k, leaf, hd, &gates, &m, &cl, &cr, &dc, &dh);
                let what = format!("{:?} leaf={leaf} b={b} H={hd}", k.isa());
                for r in 0..b {
                    let rows = |v: &[f32], w: usize| f64s(&v[r * w * hd..(r + 1) * w * hd]);
                    let mut g = rows(&gates, kg);
                    let mr = rows(&m, 1);
                    let (l, rr) = if leaf {
                        (vec![], vec![])
                    } else {
                        (rows(&cl, 1), rows(&cr, 1))
                    };
                    let (dcr_, dhr) = (rows(&dc, 1), rows(&dh, 1));
                    let (wc, wh) = reference(&g, &mr, &l, &rr, hd);
                    for j in 0..hd {
                        assert!(close(c[r * hd + j], wc[j], 1e-5), "{what}: c[{r},{j}]");
                        assert!(close(h[r * hd + j], wh[j], 1e-5), "{what}: h[{r},{j}]");
                        assert_eq!(
                            act[r * (kg + 1) * hd + kg * hd + j],
                            m[r * hd + j],
                            "{what}: mask in act"
                        );
                    }
                    // Finite differences of the gates (and the children's c).
                    let eps = 1e-6;
                    for e in 0..kg * hd {
                        let v = g[e];
                        g[e] = v + eps;
                        let up = loss(&g, &mr, &l, &rr, &dcr_, &dhr, hd);
                        g[e] = v - eps;
                        let down = loss(&g, &mr, &l, &rr, &dcr_, &dhr, hd);
                        g[e] = v;
                        let fd = (up - down) / (2.0 * eps);
                        let got = dg[r * kg * hd + e];
                        assert!(
                            close(got, fd, 1e-4),
                            "{what}: dgates[{r},{e}] {got} vs {fd}"
                        );
                    }
                    if !leaf {
                        for (child, grad) in [(0, &dcl), (1, &dcr)] {
                            for j in 0..hd {
                                let mut cs = [l.clone(), rr.clone()];
                                let v = cs[child][j];
                                cs[child][j] = v + eps;
                                let up = loss(&g, &mr, &cs[0], &cs[1], &dcr_, &dhr, hd);
                                cs[child][j] = v - eps;
                                let down = loss(&g, &mr, &cs[0], &cs[1], &dcr_, &dhr, hd);
                                let fd = (up - down) / (2.0 * eps);
                                let got = grad[r * hd + j];
                                assert!(close(got, fd, 1e-4), "{what}: dc child {child}[{r},{j}]");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn length_errors_name_the_mask() {
    let k = CpuKernels::new();
    let hd = 4;
    let (mut act, mut c, mut h) = (vec![0.0; 16], vec![0.0; 4], vec![0.0; 4]);
    let err = k
        .tree_lstm_leaf_rd_fwd(&[0.0; 12], &[1.0; 3], hd, &mut act, &mut c, &mut h)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tree_lstm_leaf_rd_fwd") && err.contains("mask"),
        "{err}"
    );
    let mut act = vec![0.0; 24];
    let err = k
        .tree_lstm_node_rd_fwd(
            &[0.0; 20], &[1.0; 5], &[0.0; 4], &[0.0; 4], hd, &mut act, &mut c, &mut h,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tree_lstm_node_rd_fwd") && err.contains("mask"),
        "{err}"
    );
    // `act` must have room for the mask block.
    let mut short = vec![0.0; 12];
    let err = k
        .tree_lstm_leaf_rd_fwd(&[0.0; 12], &[1.0; 4], hd, &mut short, &mut c, &mut h)
        .unwrap_err()
        .to_string();
    assert!(err.contains("act"), "{err}");
}
