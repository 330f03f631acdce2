//! GPU-vs-CPU parity of the fused cells: LSTM, GRU, Tree-LSTM leaf and
//! node, with and without recurrent dropout, forward and backward.
//!
//! Each test opens the device first and returns early (printing why) when
//! there is none. Tolerances are documented in `common`.

#![allow(clippy::too_many_arguments, clippy::needless_range_loop)]

mod common;

use common::prelude::*;

// ---------------------------------------------------------------- cells
//
// Forward outputs pass through sigmoid / tanh: [`TRANSC`]. Backward is fed
// the CPU forward's `act` and `c` (so it is tested on its own) but
// recomputes tanh(c): [`TRANSC`] as well. Every gradient starts nonzero
// (`away_from_zero`), so an overwrite instead of an accumulation fails.

const HIDDEN: [usize; 3] = [1, 7, 150];
const BATCH: [usize; 3] = [1, 3, 64];

/// A recurrent-dropout mask: 0 with probability 1/4, else 1 / (1 - 1/4).
fn dropout_mask(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| if rng.below(4) == 0 { 0.0 } else { 1.0 / 0.75 })
        .collect()
}

#[test]
fn lstm_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(21);
    for hd in HIDDEN {
        for b in BATCH {
            let what = format!("lstm H={hd} b={b}");
            let gates = rng.vec(b * 4 * hd, -3.0, 3.0);
            let c_prev = rng.vec(b * hd, -2.0, 2.0);
            let (mut act, mut c, mut h) =
                (vec![0.0; b * 4 * hd], vec![0.0; b * hd], vec![0.0; b * hd]);
            cpu.lstm_fwd(&gates, &c_prev, hd, &mut act, &mut c, &mut h)?;
            let (gd, cpd) = (up(&k, &gates)?, up(&k, &c_prev)?);
            let mut actd = k.alloc_zeros::<f32>(act.len())?;
            let mut cd = k.alloc_zeros::<f32>(c.len())?;
            let mut hdv = k.alloc_zeros::<f32>(h.len())?;
            k.cell(
                "lstm_fwd",
                hd,
                &[gd.as_view(), cpd.as_view()],
                &mut [actd.as_view_mut(), cd.as_view_mut(), hdv.as_view_mut()],
            )?;
            assert_close(&format!("{what} act"), &down(&k, &actd)?, &act, TRANSC);
            assert_close(&format!("{what} c"), &down(&k, &cd)?, &c, TRANSC);
            assert_close(&format!("{what} h"), &down(&k, &hdv)?, &h, TRANSC);

            let (dc, dh) = (rng.vec(b * hd, -1.0, 1.0), rng.vec(b * hd, -1.0, 1.0));
            let (dg0, dcp0) = (rng.away_from_zero(act.len()), rng.away_from_zero(b * hd));
            let (mut dg, mut dcp) = (dg0.clone(), dcp0.clone());
            cpu.lstm_bwd(&act, &c_prev, &c, &dc, &dh, hd, &mut dg, &mut dcp)?;
            let (actd, cd) = (up(&k, &act)?, up(&k, &c)?);
            let (dcd, dhd) = (up(&k, &dc)?, up(&k, &dh)?);
            let (mut dgd, mut dcpd) = (up(&k, &dg0)?, up(&k, &dcp0)?);
            k.cell(
                "lstm_bwd",
                hd,
                &[
                    actd.as_view(),
                    cpd.as_view(),
                    cd.as_view(),
                    dcd.as_view(),
                    dhd.as_view(),
                ],
                &mut [dgd.as_view_mut(), dcpd.as_view_mut()],
            )?;
            assert_close(&format!("{what} dgates"), &down(&k, &dgd)?, &dg, TRANSC);
            assert_close(&format!("{what} dc_prev"), &down(&k, &dcpd)?, &dcp, TRANSC);
        }
    }
    Ok(())
}

#[test]
fn gru_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(22);
    for hd in HIDDEN {
        for b in BATCH {
            let what = format!("gru H={hd} b={b}");
            let xw = rng.vec(b * 3 * hd, -2.0, 2.0);
            let hu = rng.vec(b * 3 * hd, -2.0, 2.0);
            let h_prev = rng.vec(b * hd, -1.0, 1.0);
            let (mut act, mut h) = (vec![0.0; b * 3 * hd], vec![0.0; b * hd]);
            cpu.gru_fwd(&xw, &hu, &h_prev, hd, &mut act, &mut h)?;
            let (xwd, hud, hpd) = (up(&k, &xw)?, up(&k, &hu)?, up(&k, &h_prev)?);
            let mut actd = k.alloc_zeros::<f32>(act.len())?;
            let mut hdv = k.alloc_zeros::<f32>(h.len())?;
            k.cell(
                "gru_fwd",
                hd,
                &[xwd.as_view(), hud.as_view(), hpd.as_view()],
                &mut [actd.as_view_mut(), hdv.as_view_mut()],
            )?;
            assert_close(&format!("{what} act"), &down(&k, &actd)?, &act, TRANSC);
            assert_close(&format!("{what} h"), &down(&k, &hdv)?, &h, TRANSC);

            let dh = rng.vec(b * hd, -1.0, 1.0);
            let dxw0 = rng.away_from_zero(act.len());
            let dhu0 = rng.away_from_zero(act.len());
            let dhp0 = rng.away_from_zero(b * hd);
            let (mut dxw, mut dhu, mut dhp) = (dxw0.clone(), dhu0.clone(), dhp0.clone());
            cpu.gru_bwd(&act, &hu, &h_prev, &dh, hd, &mut dxw, &mut dhu, &mut dhp)?;
            let (actd, dhd) = (up(&k, &act)?, up(&k, &dh)?);
            let (mut dxwd, mut dhud, mut dhpd) = (up(&k, &dxw0)?, up(&k, &dhu0)?, up(&k, &dhp0)?);
            k.cell(
                "gru_bwd",
                hd,
                &[actd.as_view(), hud.as_view(), hpd.as_view(), dhd.as_view()],
                &mut [dxwd.as_view_mut(), dhud.as_view_mut(), dhpd.as_view_mut()],
            )?;
            // No transcendental in GRU backward, but it multiplies up to
            // four activations: ARITH would do; TRANSC keeps one bound for
            // every cell.
            assert_close(&format!("{what} dxw"), &down(&k, &dxwd)?, &dxw, TRANSC);
            assert_close(&format!("{what} dhu"), &down(&k, &dhud)?, &dhu, TRANSC);
            assert_close(&format!("{what} dh_prev"), &down(&k, &dhpd)?, &dhp, TRANSC);
        }
    }
    Ok(())
}

/// Tree-LSTM leaf, plain (`dropout == false`: CPU `tree_lstm_leaf_*`) or
/// with recurrent dropout (CPU `tree_lstm_leaf_rd_*`, CUDA `mask: Some`).
fn leaf_case(k: &CudaKernels, cpu: &CpuKernels, rng: &mut Rng, dropout: bool) -> TestResult {
    let ka = if dropout { 4 } else { 3 };
    for hd in HIDDEN {
        for b in BATCH {
            let what = format!("tree_lstm_leaf dropout={dropout} H={hd} b={b}");
            let gates = rng.vec(b * 3 * hd, -3.0, 3.0);
            let mask = dropout_mask(rng, b * hd);
            let (mut act, mut c, mut h) =
                (vec![0.0; b * ka * hd], vec![0.0; b * hd], vec![0.0; b * hd]);
            if dropout {
                cpu.tree_lstm_leaf_rd_fwd(&gates, &mask, hd, &mut act, &mut c, &mut h)?;
            } else {
                cpu.tree_lstm_leaf_fwd(&gates, hd, &mut act, &mut c, &mut h)?;
            }
            let (gd, md) = (up(k, &gates)?, up(k, &mask)?);
            let mut actd = k.alloc_zeros::<f32>(act.len())?;
            let mut cd = k.alloc_zeros::<f32>(c.len())?;
            let mut hdv = k.alloc_zeros::<f32>(h.len())?;
            k.cell(
                if dropout {
                    "tree_lstm_leaf_rd_fwd"
                } else {
                    "tree_lstm_leaf_fwd"
                },
                hd,
                &[gd.as_view(), md.as_view()][..1 + dropout as usize],
                &mut [actd.as_view_mut(), cd.as_view_mut(), hdv.as_view_mut()],
            )?;
            assert_close(&format!("{what} act"), &down(k, &actd)?, &act, TRANSC);
            assert_close(&format!("{what} c"), &down(k, &cd)?, &c, TRANSC);
            assert_close(&format!("{what} h"), &down(k, &hdv)?, &h, TRANSC);

            let (dc, dh) = (rng.vec(b * hd, -1.0, 1.0), rng.vec(b * hd, -1.0, 1.0));
            let dg0 = rng.away_from_zero(b * 3 * hd);
            let mut dg = dg0.clone();
            if dropout {
                cpu.tree_lstm_leaf_rd_bwd(&act, &c, &dc, &dh, hd, &mut dg)?;
            } else {
                cpu.tree_lstm_leaf_bwd(&act, &c, &dc, &dh, hd, &mut dg)?;
            }
            let (actd, cd) = (up(k, &act)?, up(k, &c)?);
            let (dcd, dhd) = (up(k, &dc)?, up(k, &dh)?);
            let mut dgd = up(k, &dg0)?;
            k.cell(
                if dropout {
                    "tree_lstm_leaf_rd_bwd"
                } else {
                    "tree_lstm_leaf_bwd"
                },
                hd,
                &[actd.as_view(), cd.as_view(), dcd.as_view(), dhd.as_view()],
                &mut [dgd.as_view_mut()],
            )?;
            assert_close(&format!("{what} dgates"), &down(k, &dgd)?, &dg, TRANSC);
        }
    }
    Ok(())
}

#[test]
fn tree_lstm_leaf_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    leaf_case(&k, &CpuKernels::new(), &mut Rng::new(23), false)
}

#[test]
fn tree_lstm_leaf_dropout_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    leaf_case(&k, &CpuKernels::new(), &mut Rng::new(24), true)
}

/// Tree-LSTM internal node, plain or with recurrent dropout (as
/// [`leaf_case`]).
fn node_case(k: &CudaKernels, cpu: &CpuKernels, rng: &mut Rng, dropout: bool) -> TestResult {
    let ka = if dropout { 6 } else { 5 };
    for hd in HIDDEN {
        for b in BATCH {
            let what = format!("tree_lstm_node dropout={dropout} H={hd} b={b}");
            let gates = rng.vec(b * 5 * hd, -3.0, 3.0);
            let mask = dropout_mask(rng, b * hd);
            let (c_l, c_r) = (rng.vec(b * hd, -2.0, 2.0), rng.vec(b * hd, -2.0, 2.0));
            let (mut act, mut c, mut h) =
                (vec![0.0; b * ka * hd], vec![0.0; b * hd], vec![0.0; b * hd]);
            if dropout {
                cpu.tree_lstm_node_rd_fwd(&gates, &mask, &c_l, &c_r, hd, &mut act, &mut c, &mut h)?;
            } else {
                cpu.tree_lstm_node_fwd(&gates, &c_l, &c_r, hd, &mut act, &mut c, &mut h)?;
            }
            let (gd, md) = (up(k, &gates)?, up(k, &mask)?);
            let (cld, crd) = (up(k, &c_l)?, up(k, &c_r)?);
            let mut actd = k.alloc_zeros::<f32>(act.len())?;
            let mut cd = k.alloc_zeros::<f32>(c.len())?;
            let mut hdv = k.alloc_zeros::<f32>(h.len())?;
            k.cell(
                if dropout {
                    "tree_lstm_node_rd_fwd"
                } else {
                    "tree_lstm_node_fwd"
                },
                hd,
                &if dropout {
                    vec![gd.as_view(), md.as_view(), cld.as_view(), crd.as_view()]
                } else {
                    vec![gd.as_view(), cld.as_view(), crd.as_view()]
                },
                &mut [actd.as_view_mut(), cd.as_view_mut(), hdv.as_view_mut()],
            )?;
            assert_close(&format!("{what} act"), &down(k, &actd)?, &act, TRANSC);
            assert_close(&format!("{what} c"), &down(k, &cd)?, &c, TRANSC);
            assert_close(&format!("{what} h"), &down(k, &hdv)?, &h, TRANSC);

            let (dc, dh) = (rng.vec(b * hd, -1.0, 1.0), rng.vec(b * hd, -1.0, 1.0));
            let dg0 = rng.away_from_zero(b * 5 * hd);
            let (dcl0, dcr0) = (rng.away_from_zero(b * hd), rng.away_from_zero(b * hd));
            let (mut dg, mut dcl, mut dcr) = (dg0.clone(), dcl0.clone(), dcr0.clone());
            if dropout {
                cpu.tree_lstm_node_rd_bwd(
                    &act, &c_l, &c_r, &c, &dc, &dh, hd, &mut dg, &mut dcl, &mut dcr,
                )?;
            } else {
                cpu.tree_lstm_node_bwd(
                    &act, &c_l, &c_r, &c, &dc, &dh, hd, &mut dg, &mut dcl, &mut dcr,
                )?;
            }
            let (actd, cd) = (up(k, &act)?, up(k, &c)?);
            let (dcd, dhd) = (up(k, &dc)?, up(k, &dh)?);
            let mut dgd = up(k, &dg0)?;
            let (mut dcld, mut dcrd) = (up(k, &dcl0)?, up(k, &dcr0)?);
            k.cell(
                if dropout {
                    "tree_lstm_node_rd_bwd"
                } else {
                    "tree_lstm_node_bwd"
                },
                hd,
                &[
                    actd.as_view(),
                    cld.as_view(),
                    crd.as_view(),
                    cd.as_view(),
                    dcd.as_view(),
                    dhd.as_view(),
                ],
                &mut [dgd.as_view_mut(), dcld.as_view_mut(), dcrd.as_view_mut()],
            )?;
            assert_close(&format!("{what} dgates"), &down(k, &dgd)?, &dg, TRANSC);
            assert_close(&format!("{what} dc_l"), &down(k, &dcld)?, &dcl, TRANSC);
            assert_close(&format!("{what} dc_r"), &down(k, &dcrd)?, &dcr, TRANSC);
        }
    }
    Ok(())
}

#[test]
fn tree_lstm_node_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    node_case(&k, &CpuKernels::new(), &mut Rng::new(25), false)
}

#[test]
fn tree_lstm_node_dropout_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    node_case(&k, &CpuKernels::new(), &mut Rng::new(26), true)
}
