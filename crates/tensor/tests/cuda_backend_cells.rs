#![cfg(feature = "cuda")]
//! Parity of the CUDA backend with the CPU backend: the softmax family and
//! the fused cells.
//!
//! Every `Backend` method
//! runs on `Device::Cuda(0)` and on `Device::Cpu` with the same random
//! inputs (and the same initial outputs, nonzero where a method
//! accumulates), and the results are compared element by element:
//! `|gpu - cpu| <= atol + rtol * |cpu|`.
//!
//! Tolerances:
//! - pure arithmetic (add, scale, axpy, optimizer updates, ...): atol =
//!   rtol = 1e-5 ([`ARITH`]); the two sides may differ in FMA contraction
//!   and in the order of a few additions;
//! - where exp / tanh / log are involved: 2e-5 ([`TRANSC`]), since the CPU
//!   kernels use their own vectorised approximations and CUDA's `expf`,
//!   `tanhf`, `logf` are accurate to a couple of ulps;
//! - reductions over `n` terms (matmul with inner dimension `k`, row and
//!   column sums): the base tolerance times `sqrt(n)` ([`summed`]). The two
//!   backends add in different orders (cuBLAS's blocking vs the CPU's
//!   register tiles; a block tree vs SIMD lanes); for terms of size O(1)
//!   with random signs each partial sum is O(sqrt(i)) and the rounding
//!   errors add up like a random walk, so the difference grows like the
//!   size of the result, about `sqrt(n)`.
//!
//! Every test that needs a device starts with [`gpu`], which returns the
//! CUDA backend or prints `skipping: <reason>` and makes the test return
//! early, so the suite compiles and passes on machines without CUDA and
//! runs for real where there is a device. The GPU tests hold one lock
//! while they run: the device has one stream and one error word for bad
//! index values, so a test that provokes an index error must not have its
//! error picked up by another test's download.

// `TensorError` keeps its shapes inline (about 150 bytes), as the library
// explains at its `allow`; the parity closures return it.
#![allow(clippy::result_large_err)]

#[macro_use]
mod cuda_common;

use cuda_common::*;

// ---- Softmax family.

#[test]
fn softmax_family_rank_2_and_3() {
    let Some(gpu) = gpu() else { return };
    // cols: 1, fewer than a warp, more than a warp, more than one block of
    // 256 threads; rows: more than SMs x 64 blocks in [9000, 3].
    let shapes: [&[usize]; 7] = [
        &[5],
        &[4, 1],
        &[7, 5],
        &[6, 33],
        &[3, 4, 300],
        &[2, 1000],
        &[9000, 3],
    ];
    for (s, dims) in shapes.iter().enumerate() {
        let seed = 4000 + 100 * s as u64;
        let cols = *dims.last().unwrap();
        let rows: usize = dims[..dims.len() - 1].iter().product();
        let per_row = &dims[..dims.len() - 1];
        let x = uniform(sh(dims), -5.0, 5.0, seed);
        let garbage = rand(sh(dims), seed + 1);
        let tol = summed(TRANSC, cols);

        parity(
            &gpu,
            "softmax_rows",
            tol,
            from_ref(&x),
            from_ref(&garbage),
            |b, i, o| {
                outs!(o, [y]);
                b.softmax_rows(&i[0], y.view_mut()?)
            },
        );
        parity(
            &gpu,
            "log_softmax_rows",
            tol,
            from_ref(&x),
            from_ref(&garbage),
            |b, i, o| {
                outs!(o, [y]);
                b.log_softmax_rows(&i[0], y.view_mut()?)
            },
        );

        // Backward passes accumulate into a nonzero dx; y from the CPU.
        let mut y = garbage.clone();
        cpu().softmax_rows(&x, y.view_mut().unwrap()).unwrap();
        let mut ly = garbage.clone();
        cpu().log_softmax_rows(&x, ly.view_mut().unwrap()).unwrap();
        let dy = rand(sh(dims), seed + 2);
        let dx0 = rand(sh(dims), seed + 3);
        parity(
            &gpu,
            "softmax_rows_bwd",
            tol,
            &[y, dy.clone()],
            from_ref(&dx0),
            |b, i, o| {
                outs!(o, [dx]);
                b.softmax_rows_bwd(&i[0], &i[1], dx.view_mut()?)
            },
        );
        parity(
            &gpu,
            "log_softmax_rows_bwd",
            tol,
            &[ly, dy],
            from_ref(&dx0),
            |b, i, o| {
                outs!(o, [dx]);
                b.log_softmax_rows_bwd(&i[0], &i[1], dx.view_mut()?)
            },
        );

        // Cross-entropy, forward and backward.
        let labels = indices(rows, cols as u32, seed + 4)
            .reshape(sh(per_row))
            .unwrap();
        let (c, _) = parity(
            &gpu,
            "nll_log_softmax",
            tol,
            &[x.clone(), labels.clone()],
            &[garbage.clone(), rand(sh(per_row), seed + 5)],
            |b, i, o| {
                outs!(o, [probs, loss]);
                b.nll_log_softmax(&i[0], &i[1], probs.view_mut()?, loss.view_mut()?)
            },
        );
        let probs = c[0].clone();
        parity(
            &gpu,
            "nll_log_softmax_bwd",
            tol,
            &[probs, labels, rand(sh(per_row), seed + 6)],
            from_ref(&dx0),
            |b, i, o| {
                outs!(o, [dx]);
                b.nll_log_softmax_bwd(&i[0], &i[1], &i[2], dx.view_mut()?)
            },
        );

        // Sums: row_sums overwrites, col_sums_acc accumulates.
        parity(
            &gpu,
            "row_sums",
            summed(ARITH, cols),
            from_ref(&x),
            &[rand(sh(per_row), seed + 7)],
            |b, i, o| {
                outs!(o, [out]);
                b.row_sums(&i[0], out.view_mut()?)
            },
        );
        parity(
            &gpu,
            "col_sums_acc",
            summed(ARITH, rows),
            &[x],
            &[rand([cols], seed + 8)],
            |b, i, o| {
                outs!(o, [out]);
                b.col_sums_acc(&i[0], out.view_mut()?)
            },
        );
    }
}

// ---- Cells.

/// A dropout mask `[b, h]`: 0 or `1 / (1 - p)`, p = 0.3.
fn mask(b: usize, h: usize, seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let keep = 1.0 / 0.7;
    let v: Vec<f32> = (0..b * h)
        .map(|_| if rng.below(10) < 3 { 0.0 } else { keep })
        .collect();
    Tensor::from_vec(v, [b, h]).unwrap()
}

#[test]
fn lstm_and_gru_forward_and_backward() {
    let Some(gpu) = gpu() else { return };
    for (b, h) in [(1, 1), (37, 19), (300, 64)] {
        let seed = 5000 + (b * h) as u64;
        // LSTM.
        let (g, c_prev) = (gates(b, 4 * h, seed), rand([b, h], seed + 1));
        let (c, _) = parity(
            &gpu,
            "lstm_fwd",
            TRANSC,
            &[g, c_prev.clone()],
            &[
                rand([b, 4 * h], seed + 2),
                rand([b, h], seed + 3),
                rand([b, h], seed + 4),
            ],
            |be, i, o| {
                outs!(o, [act, c, hh]);
                be.lstm_fwd(&i[0], &i[1], act.view_mut()?, c.view_mut()?, hh.view_mut()?)
            },
        );
        let (act, cc) = (c[0].clone(), c[1].clone());
        parity(
            &gpu,
            "lstm_bwd",
            TRANSC,
            &[
                act,
                c_prev,
                cc,
                rand([b, h], seed + 5),
                rand([b, h], seed + 6),
            ],
            &[rand([b, 4 * h], seed + 7), rand([b, h], seed + 8)],
            |be, i, o| {
                outs!(o, [dg, dcp]);
                be.lstm_bwd(
                    &i[0],
                    &i[1],
                    &i[2],
                    &i[3],
                    &i[4],
                    dg.view_mut()?,
                    dcp.view_mut()?,
                )
            },
        );

        // GRU.
        let (xw, hu, hp) = (
            gates(b, 3 * h, seed + 10),
            gates(b, 3 * h, seed + 11),
            rand([b, h], seed + 12),
        );
        let (c, _) = parity(
            &gpu,
            "gru_fwd",
            TRANSC,
            &[xw, hu.clone(), hp.clone()],
            &[rand([b, 3 * h], seed + 13), rand([b, h], seed + 14)],
            |be, i, o| {
                outs!(o, [act, hh]);
                be.gru_fwd(&i[0], &i[1], &i[2], act.view_mut()?, hh.view_mut()?)
            },
        );
        parity(
            &gpu,
            "gru_bwd",
            TRANSC,
            &[c[0].clone(), hu, hp, rand([b, h], seed + 15)],
            &[
                rand([b, 3 * h], seed + 16),
                rand([b, 3 * h], seed + 17),
                rand([b, h], seed + 18),
            ],
            |be, i, o| {
                outs!(o, [dxw, dhu, dhp]);
                be.gru_bwd(
                    &i[0],
                    &i[1],
                    &i[2],
                    &i[3],
                    dxw.view_mut()?,
                    dhu.view_mut()?,
                    dhp.view_mut()?,
                )
            },
        );
    }
}

#[test]
fn tree_lstm_leaf_and_node_with_and_without_dropout() {
    let Some(gpu) = gpu() else { return };
    for (b, h) in [(1, 1), (37, 19), (300, 64)] {
        let seed = 6000 + (b * h) as u64;
        let m = mask(b, h, seed + 99);
        for rd in [false, true] {
            let name = |s: &str| format!("{s}{}", if rd { " (rd)" } else { "" });
            // Leaf: act [b, 3H], or [b, 4H] with the mask.
            let leaf_act = if rd { 4 * h } else { 3 * h };
            let g = gates(b, 3 * h, seed);
            let (c, _) = parity(
                &gpu,
                &name("tree_lstm_leaf_fwd"),
                TRANSC,
                &[g, m.clone()],
                &[
                    rand([b, leaf_act], seed + 1),
                    rand([b, h], seed + 2),
                    rand([b, h], seed + 3),
                ],
                |be, i, o| {
                    outs!(o, [act, c, hh]);
                    let (act, c, hh) = (act.view_mut()?, c.view_mut()?, hh.view_mut()?);
                    if rd {
                        be.tree_lstm_leaf_rd_fwd(&i[0], &i[1], act, c, hh)
                    } else {
                        be.tree_lstm_leaf_fwd(&i[0], act, c, hh)
                    }
                },
            );
            parity(
                &gpu,
                &name("tree_lstm_leaf_bwd"),
                TRANSC,
                &[
                    c[0].clone(),
                    c[1].clone(),
                    rand([b, h], seed + 4),
                    rand([b, h], seed + 5),
                ],
                &[rand([b, 3 * h], seed + 6)],
                |be, i, o| {
                    outs!(o, [dg]);
                    if rd {
                        be.tree_lstm_leaf_rd_bwd(&i[0], &i[1], &i[2], &i[3], dg.view_mut()?)
                    } else {
                        be.tree_lstm_leaf_bwd(&i[0], &i[1], &i[2], &i[3], dg.view_mut()?)
                    }
                },
            );

            // Node: act [b, 5H], or [b, 6H] with the mask.
            let node_act = if rd { 6 * h } else { 5 * h };
            let (g, cl, cr) = (
                gates(b, 5 * h, seed + 10),
                rand([b, h], seed + 11),
                rand([b, h], seed + 12),
            );
            let (c, _) = parity(
                &gpu,
                &name("tree_lstm_node_fwd"),
                TRANSC,
                &[g, m.clone(), cl.clone(), cr.clone()],
                &[
                    rand([b, node_act], seed + 13),
                    rand([b, h], seed + 14),
                    rand([b, h], seed + 15),
                ],
                |be, i, o| {
                    outs!(o, [act, c, hh]);
                    let (act, c, hh) = (act.view_mut()?, c.view_mut()?, hh.view_mut()?);
                    if rd {
                        be.tree_lstm_node_rd_fwd(&i[0], &i[1], &i[2], &i[3], act, c, hh)
                    } else {
                        be.tree_lstm_node_fwd(&i[0], &i[2], &i[3], act, c, hh)
                    }
                },
            );
            parity(
                &gpu,
                &name("tree_lstm_node_bwd"),
                TRANSC,
                &[
                    c[0].clone(),
                    cl,
                    cr,
                    c[1].clone(),
                    rand([b, h], seed + 16),
                    rand([b, h], seed + 17),
                ],
                &[
                    rand([b, 5 * h], seed + 18),
                    rand([b, h], seed + 19),
                    rand([b, h], seed + 20),
                ],
                |be, i, o| {
                    outs!(o, [dg, dcl, dcr]);
                    let (dg, dcl, dcr) = (dg.view_mut()?, dcl.view_mut()?, dcr.view_mut()?);
                    if rd {
                        be.tree_lstm_node_rd_bwd(
                            &i[0], &i[1], &i[2], &i[3], &i[4], &i[5], dg, dcl, dcr,
                        )
                    } else {
                        be.tree_lstm_node_bwd(
                            &i[0], &i[1], &i[2], &i[3], &i[4], &i[5], dg, dcl, dcr,
                        )
                    }
                },
            );
        }
    }
}
