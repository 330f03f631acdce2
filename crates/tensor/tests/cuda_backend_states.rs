#![cfg(feature = "cuda")]
//! Parity of the CUDA backend with the CPU backend: the fused cells on
//! batches of cell STATES (`StateCellOps`, rows `[c | h]` of `[b, 2H]`)
//! and `RowOps::copy_rows_at`.
//!
//! Both backends override the cells on states: their kernels read and
//! write the halves of the states in place, at a row pitch of 2H (the
//! CUDA backend's `[b, H]` kernels with a pitch argument, one launch per
//! call, tested below). These tests cover batches of one and larger,
//! backward passes into nonzero gradients (they accumulate) and with
//! state gradients left out (`None`), row copies into a row range of a
//! larger tensor.
//!
//! Every `Backend` method
//! runs on `Device::Cuda(0)` and on `Device::Cpu` with the same random
//! inputs (and the same initial outputs, nonzero where a method
//! accumulates), and the results are compared element by element:
//! `|gpu - cpu| <= atol + rtol * |cpu|`.
//!
//! Tolerances:
//! - the cells: 2e-5 ([`TRANSC`]), as for the `[b, H]` cells in
//!   `cuda_backend_cells.rs`: sigmoid and tanh are involved, the CPU
//!   kernels use their own vectorised approximations and CUDA's `expf`,
//!   `tanhf` are accurate to a couple of ulps; the state halves the
//!   defaults move with `copy_cols` are copied exactly, or added once;
//! - `copy_rows_at` copying: exact ([`EXACT`]), rows are moved, not
//!   computed, and a repeated destination row is the last one's on both;
//! - `copy_rows_at` accumulating: pure arithmetic (atol = rtol = 1e-5,
//!   [`ARITH`]) times `sqrt(n)` ([`summed`]) for a destination row that
//!   receives `n` rows: the GPU's scatter-add adds them in no fixed order,
//!   and the rounding errors of a sum in a different order add up like a
//!   random walk.
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

use std::mem::discriminant;
use std::ops::Range;

use cuda_common::*;

/// Batch sizes: one (the defaults' view path), a few, more than a warp.
const BATCHES: [usize; 3] = [1, 3, 70];
/// `H`: one, odd, more than a block of 128 threads.
const WIDTHS: [usize; 3] = [1, 13, 150];

/// Moved values: no difference at all.
const EXACT: Tol = Tol {
    atol: 0.0,
    rtol: 0.0,
};

/// A dropout mask `[b, h]`: 0 or `1 / (1 - p)`, p = 0.3.
fn mask(b: usize, h: usize, seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let keep = 1.0 / 0.7;
    let v: Vec<f32> = (0..b * h)
        .map(|_| if rng.below(10) < 3 { 0.0 } else { keep })
        .collect();
    Tensor::from_vec(v, [b, h]).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    host(t).into_iter().map(f32::to_bits).collect()
}

/// The `h` halves (columns `h..2h`) of the state gradient `after`
/// `[b, 2h]` are bit for bit those of `before`: backward adds only into
/// the `c` halves; and all of it with `untouched` (a gradient given as
/// `None`).
#[track_caller]
fn assert_h_halves_kept(what: &str, after: &Tensor, before: &Tensor, h: usize, untouched: bool) {
    let (a, b) = (bits(after), bits(before));
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if untouched || i % (2 * h) >= h {
            assert_eq!(x, y, "{what}: element {i} changed");
        }
    }
}

// ---- Cells on states.

#[test]
fn lstm_states_forward_and_backward() {
    let Some(gpu) = gpu() else { return };
    for b in BATCHES {
        for h in WIDTHS {
            let seed = 7000 + (1000 * b + h) as u64;
            let at = format!("b = {b}, H = {h}");
            let prev = rand([b, 2 * h], seed + 1);
            let (c, _) = parity(
                &gpu,
                &format!("lstm_fwd_states ({at})"),
                TRANSC,
                &[gates(b, 4 * h, seed), prev.clone()],
                &[rand([b, 4 * h], seed + 2), rand([b, 2 * h], seed + 3)],
                |be, i, o| {
                    outs!(o, [act, st]);
                    be.lstm_fwd_states(&i[0], &i[1], act.view_mut()?, st.view_mut()?)
                },
            );
            let dprev0 = rand([b, 2 * h], seed + 6);
            for with_dprev in [true, false] {
                let name = format!("lstm_bwd_states ({at}, dprev given: {with_dprev})");
                let (_, g) = parity(
                    &gpu,
                    &name,
                    TRANSC,
                    &[
                        c[0].clone(),
                        prev.clone(),
                        c[1].clone(),
                        rand([b, 2 * h], seed + 4),
                    ],
                    &[rand([b, 4 * h], seed + 5), dprev0.clone()],
                    |be, i, o| {
                        outs!(o, [dg, dp]);
                        let dp = if with_dprev {
                            Some(dp.view_mut()?)
                        } else {
                            None
                        };
                        be.lstm_bwd_states(&i[0], &i[1], &i[2], &i[3], dg.view_mut()?, dp, false)
                    },
                );
                assert_h_halves_kept(&name, &g[1], &dprev0, h, !with_dprev);
            }
        }
    }
}

#[test]
fn tree_lstm_leaf_states_with_and_without_dropout() {
    let Some(gpu) = gpu() else { return };
    for b in BATCHES {
        for h in WIDTHS {
            let seed = 8000 + (1000 * b + h) as u64;
            let m = mask(b, h, seed + 99);
            for rd in [false, true] {
                let at = format!("b = {b}, H = {h}, rd: {rd}");
                // act [b, 3H], or [b, 4H] with the mask.
                let leaf_act = if rd { 4 * h } else { 3 * h };
                let (c, _) = parity(
                    &gpu,
                    &format!("tree_lstm_leaf_fwd_states ({at})"),
                    TRANSC,
                    &[gates(b, 3 * h, seed), m.clone()],
                    &[rand([b, leaf_act], seed + 1), rand([b, 2 * h], seed + 2)],
                    |be, i, o| {
                        outs!(o, [act, st]);
                        let (act, st) = (act.view_mut()?, st.view_mut()?);
                        if rd {
                            be.tree_lstm_leaf_rd_fwd_states(&i[0], &i[1], act, st)
                        } else {
                            be.tree_lstm_leaf_fwd_states(&i[0], act, st)
                        }
                    },
                );
                parity(
                    &gpu,
                    &format!("tree_lstm_leaf_bwd_states ({at})"),
                    TRANSC,
                    &[c[0].clone(), c[1].clone(), rand([b, 2 * h], seed + 3)],
                    &[rand([b, 3 * h], seed + 4)],
                    |be, i, o| {
                        outs!(o, [dg]);
                        if rd {
                            be.tree_lstm_leaf_rd_bwd_states(
                                &i[0],
                                &i[1],
                                &i[2],
                                dg.view_mut()?,
                                false,
                            )
                        } else {
                            be.tree_lstm_leaf_bwd_states(&i[0], &i[1], &i[2], dg.view_mut()?, false)
                        }
                    },
                );
            }
        }
    }
}

#[test]
fn tree_lstm_node_states_with_and_without_dropout() {
    let Some(gpu) = gpu() else { return };
    for b in BATCHES {
        for h in WIDTHS {
            let seed = 9000 + (1000 * b + h) as u64;
            let m = mask(b, h, seed + 99);
            let (left, right) = (rand([b, 2 * h], seed + 1), rand([b, 2 * h], seed + 2));
            let (dl0, dr0) = (rand([b, 2 * h], seed + 3), rand([b, 2 * h], seed + 4));
            for rd in [false, true] {
                let at = format!("b = {b}, H = {h}, rd: {rd}");
                // act [b, 5H], or [b, 6H] with the mask.
                let node_act = if rd { 6 * h } else { 5 * h };
                let (c, _) = parity(
                    &gpu,
                    &format!("tree_lstm_node_fwd_states ({at})"),
                    TRANSC,
                    &[
                        gates(b, 5 * h, seed),
                        m.clone(),
                        left.clone(),
                        right.clone(),
                    ],
                    &[rand([b, node_act], seed + 5), rand([b, 2 * h], seed + 6)],
                    |be, i, o| {
                        outs!(o, [act, st]);
                        let (act, st) = (act.view_mut()?, st.view_mut()?);
                        if rd {
                            be.tree_lstm_node_rd_fwd_states(&i[0], &i[1], &i[2], &i[3], act, st)
                        } else {
                            be.tree_lstm_node_fwd_states(&i[0], &i[2], &i[3], act, st)
                        }
                    },
                );
                let inputs = [
                    c[0].clone(),
                    left.clone(),
                    right.clone(),
                    c[1].clone(),
                    rand([b, 2 * h], seed + 7),
                ];
                // Both children's gradients, neither, the left one only.
                for (wl, wr) in [(true, true), (false, false), (true, false)] {
                    let name = format!("tree_lstm_node_bwd_states ({at}, given: {wl}, {wr})");
                    let (_, g) = parity(
                        &gpu,
                        &name,
                        TRANSC,
                        &inputs,
                        &[rand([b, 5 * h], seed + 8), dl0.clone(), dr0.clone()],
                        |be, i, o| {
                            outs!(o, [dg, dl, dr]);
                            let dg = dg.view_mut()?;
                            let dl = if wl { Some(dl.view_mut()?) } else { None };
                            let dr = if wr { Some(dr.view_mut()?) } else { None };
                            let [act, l, r, st, ds] = i else {
                                unreachable!("input count")
                            };
                            if rd {
                                be.tree_lstm_node_rd_bwd_states(
                                    act, l, r, st, ds, dg, dl, dr, false,
                                )
                            } else {
                                be.tree_lstm_node_bwd_states(act, l, r, st, ds, dg, dl, dr, false)
                            }
                        },
                    );
                    assert_h_halves_kept(&format!("{name}: dleft"), &g[1], &dl0, h, !wl);
                    assert_h_halves_kept(&format!("{name}: dright"), &g[2], &dr0, h, !wr);
                }
            }
        }
    }
}

// ---- copy_rows_at.

/// One `copy_rows_at` call: rows `src_rows` of `src` `[src_n, row...]`
/// into rows `dst_rows` of rows `view` of `[big_n, row...]`.
struct RowsCase {
    name: &'static str,
    src_n: usize,
    big_n: usize,
    view: Range<usize>,
    src_rows: Vec<u32>,
    dst_rows: Vec<u32>,
}

impl RowsCase {
    /// Copies and accumulates on both backends; everything outside the
    /// written rows is compared too (it must be left alone on both).
    #[track_caller]
    fn check(&self, gpu: &Gpu, row: &[usize], seed: u64) {
        let dims = |n: usize| sh(&[&[n], row].concat());
        let (src, big) = (
            rand(dims(self.src_n), seed),
            rand(dims(self.big_n), seed + 1),
        );
        // The most rows added into one destination row.
        let most = self
            .dst_rows
            .iter()
            .map(|d| self.dst_rows.iter().filter(|&e| e == d).count())
            .max()
            .unwrap_or(0);
        for accumulate in [false, true] {
            let tol = if accumulate {
                summed(ARITH, most + 1)
            } else {
                EXACT
            };
            let (cpu_out, gpu_out) = parity(
                gpu,
                &format!(
                    "copy_rows_at ({}, row {row:?}, accumulate: {accumulate})",
                    self.name
                ),
                tol,
                from_ref(&src),
                from_ref(&big),
                |be, i, o| {
                    outs!(o, [big]);
                    let dst = big.view_mut()?.into_rows_mut(self.view.clone())?;
                    be.copy_rows_at(&i[0], &self.src_rows, dst, &self.dst_rows, accumulate)
                },
            );
            if !accumulate {
                assert_eq!(bits(&gpu_out[0]), bits(&cpu_out[0]), "{}", self.name);
            }
        }
    }
}

/// A cell on states is ONE launch each way: no halves copied out of the
/// states and back, no buffers for them.
#[test]
fn cells_on_states_are_one_launch() {
    let Some(gpu) = gpu() else { return };
    let (b, h) = (70, 150);
    let (left, right) = (up(&rand([b, 2 * h], 1)), up(&rand([b, 2 * h], 2)));
    let g = up(&gates(b, 5 * h, 3));
    let mut act = up(&rand([b, 5 * h], 4));
    let mut st = up(&rand([b, 2 * h], 5));
    let ds = up(&rand([b, 2 * h], 6));
    let (mut dg, mut dl, mut dr) = (
        up(&rand([b, 5 * h], 7)),
        up(&rand([b, 2 * h], 8)),
        up(&rand([b, 2 * h], 9)),
    );
    for round in 0..2 {
        let l0 = gpu.launches();
        gpu.tree_lstm_node_fwd_states(
            &g,
            &left,
            &right,
            act.view_mut().unwrap(),
            st.view_mut().unwrap(),
        )
        .unwrap();
        let forward = gpu.launches() - l0;
        let l0 = gpu.launches();
        gpu.tree_lstm_node_bwd_states(
            &act,
            &left,
            &right,
            &st,
            &ds,
            dg.view_mut().unwrap(),
            Some(dl.view_mut().unwrap()),
            Some(dr.view_mut().unwrap()),
            false,
        )
        .unwrap();
        let backward = gpu.launches() - l0;
        // The first round may set up per-device state once.
        if round == 1 {
            assert_eq!(
                (forward, backward),
                (1, 1),
                "launches of a node cell on states"
            );
        }
    }
}

#[test]
fn copy_rows_at_copies_and_accumulates() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rng::new(11);
    let many = 500;
    let cases = [
        RowsCase {
            name: "distinct rows into a view",
            src_n: 9,
            big_n: 12,
            view: 2..10,
            src_rows: vec![4, 0, 8, 3],
            dst_rows: vec![7, 1, 0, 5],
        },
        RowsCase {
            name: "repeated destinations",
            src_n: 9,
            big_n: 12,
            view: 2..10,
            src_rows: vec![1, 2, 3, 4, 5, 0, 6, 2],
            dst_rows: vec![3, 3, 0, 3, 7, 0, 3, 6],
        },
        RowsCase {
            name: "repeated sources, the last rows of the tensor",
            src_n: 5,
            big_n: 12,
            view: 4..12,
            src_rows: vec![2, 2, 2, 4],
            dst_rows: vec![0, 7, 3, 6],
        },
        RowsCase {
            name: "empty lists",
            src_n: 5,
            big_n: 6,
            view: 1..4,
            src_rows: Vec::new(),
            dst_rows: Vec::new(),
        },
        RowsCase {
            name: "empty lists, empty view",
            src_n: 5,
            big_n: 6,
            view: 3..3,
            src_rows: Vec::new(),
            dst_rows: Vec::new(),
        },
        RowsCase {
            name: "many positions, whole tensor",
            src_n: 40,
            big_n: 30,
            view: 0..30,
            src_rows: (0..many).map(|_| rng.below(40)).collect(),
            dst_rows: (0..many).map(|_| rng.below(30)).collect(),
        },
        RowsCase {
            name: "many positions, a view",
            src_n: 40,
            big_n: 300,
            view: 100..260,
            src_rows: (0..many).map(|_| rng.below(40)).collect(),
            dst_rows: (0..many).map(|_| rng.below(160)).collect(),
        },
    ];
    let rows: [&[usize]; 2] = [&[7], &[2, 3]];
    for (r, row) in rows.into_iter().enumerate() {
        for (k, case) in cases.iter().enumerate() {
            case.check(&gpu, row, 10_000 + 100 * r as u64 + 10 * k as u64);
        }
    }
}

/// Placing rows of one batch into another is one upload (both id lists)
/// and one kernel however many rows move: a copy per row made the GPU's
/// launch count grow with every tree of a batch.
#[test]
fn copy_rows_at_is_one_upload_and_one_launch() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rng::new(5);
    let n = 300;
    let src = up(&rand([40, 16], 1));
    let mut dst = up(&rand([320, 16], 2));
    let from: Vec<u32> = (0..n).map(|_| rng.below(40)).collect();
    let to: Vec<u32> = (0..n as u32).collect();
    for accumulate in [false, true] {
        // A first call may set up per-device state once (the first run on
        // an H200 counted one launch more); the steady cost is what counts.
        gpu.copy_rows_at(&src, &from, dst.view_mut().unwrap(), &to, accumulate)
            .unwrap();
        let l0 = gpu.launches();
        gpu.copy_rows_at(&src, &from, dst.view_mut().unwrap(), &to, accumulate)
            .unwrap();
        let launches = gpu.launches() - l0;
        assert_eq!(launches, 2, "{n} rows, accumulate: {accumulate}");
    }
}

/// Rows of several tensors into one (`gather_rows_from`, exact) and back
/// (`scatter_add_rows_to`, duplicates summed), against the CPU; each is one
/// upload and one launch however many tensors take part.
#[test]
fn rows_of_many_tensors_in_one_launch() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rng::new(21);
    let sizes = [6usize, 1, 9, 3];
    for row in [&[5][..], &[2, 3][..]] {
        let dims = |n: usize| sh(&[&[n], row].concat());
        let srcs: Vec<Tensor> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| rand(dims(n), 40 + i as u64))
            .collect();
        let pick = |rng: &mut Rng| {
            let t = rng.below(sizes.len() as u32);
            (t, rng.below(sizes[t as usize] as u32))
        };
        // Gather: 14 distinct rows of a 20-row destination.
        let from: Vec<(u32, u32)> = (0..14).map(|_| pick(&mut rng)).collect();
        let mut to: Vec<u32> = (0..20).collect();
        for i in (1..to.len()).rev() {
            to.swap(i, rng.below(i as u32 + 1) as usize);
        }
        to.truncate(14);
        let (cpu_out, gpu_out) = parity(
            &gpu,
            &format!("gather_rows_from (row {row:?})"),
            EXACT,
            &srcs,
            &[rand(dims(20), 50)],
            |be, i, o| {
                outs!(o, [dst]);
                let refs: Vec<&Tensor> = i.iter().collect();
                be.gather_rows_from(&refs, &from, dst.view_mut()?, &to)
            },
        );
        assert_eq!(bits(&gpu_out[0]), bits(&cpu_out[0]), "gather, row {row:?}");
        // Scatter: 30 adds, repeated destinations.
        let to: Vec<(u32, u32)> = (0..30).map(|_| pick(&mut rng)).collect();
        let src_rows: Vec<u32> = (0..30).map(|_| rng.below(8)).collect();
        let most = to
            .iter()
            .map(|d| to.iter().filter(|&e| e == d).count())
            .max()
            .unwrap();
        parity(
            &gpu,
            &format!("scatter_add_rows_to (row {row:?})"),
            summed(ARITH, most + 1),
            &[rand(dims(8), 60)],
            &srcs,
            |be, i, o| {
                let mut views = o
                    .iter_mut()
                    .map(|t| t.view_mut())
                    .collect::<Result<Vec<_>>>()?;
                be.scatter_add_rows_to(&i[0], &src_rows, &mut views, &to)
            },
        );
    }
    // The launches: a warm-up call, then one upload and one kernel each.
    let srcs: Vec<Tensor> = sizes.iter().map(|&n| up(&rand([n, 4], 70))).collect();
    let refs: Vec<&Tensor> = srcs.iter().collect();
    let from: Vec<(u32, u32)> = (0..4).map(|t| (t, 0)).collect();
    let mut dst = up(&rand([4, 4], 71));
    let mut dsts: Vec<Tensor> = sizes.iter().map(|&n| up(&rand([n, 4], 72))).collect();
    for _ in 0..2 {
        let l0 = gpu.launches();
        gpu.gather_rows_from(&refs, &from, dst.view_mut().unwrap(), &[0, 1, 2, 3])
            .unwrap();
        let gathered = gpu.launches() - l0;
        let l0 = gpu.launches();
        let mut views: Vec<_> = dsts.iter_mut().map(|t| t.view_mut().unwrap()).collect();
        gpu.scatter_add_rows_to(&dst, &[0, 1, 2, 3], &mut views, &from)
            .unwrap();
        let scattered = gpu.launches() - l0;
        assert_eq!((gathered, scattered), (2, 2), "launches of 4 tensors' rows");
    }
}

// ---- Errors.

/// Shape errors: the same variant on both backends (the CUDA backend runs
/// the defaults, which check shapes first, as the CPU overrides do, before
/// dtypes, devices and any kernel), in fact the same error, and no output
/// changed on either.
#[test]
fn shape_errors_match_the_cpu_backend() {
    let Some(gpu) = gpu() else { return };
    let (b, h) = (3, 4);
    let st = |seed| rand([b, 2 * h], seed);
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        Vec<Tensor>,
        Vec<Tensor>,
        Box<dyn Fn(&dyn Backend, &[Tensor], &mut [Tensor]) -> Result<()>>,
    )> = vec![
        (
            "tree_lstm_node_fwd",
            vec![gates(b, 5 * h, 1), rand([b, 2 * h + 2], 2), st(3)],
            vec![rand([b, 5 * h], 4), st(5)],
            Box::new(|be, i, o| {
                outs!(o, [act, s]);
                be.tree_lstm_node_fwd_states(&i[0], &i[1], &i[2], act.view_mut()?, s.view_mut()?)
            }),
        ),
        (
            "tree_lstm_node_rd_fwd",
            vec![
                gates(b, 5 * h, 1),
                mask(b, h, 2),
                st(3),
                rand([b, 2 * h - 2], 4),
            ],
            vec![rand([b, 6 * h], 5), st(6)],
            Box::new(|be, i, o| {
                outs!(o, [act, s]);
                let (act, s) = (act.view_mut()?, s.view_mut()?);
                be.tree_lstm_node_rd_fwd_states(&i[0], &i[1], &i[2], &i[3], act, s)
            }),
        ),
        (
            "tree_lstm_node_bwd",
            vec![rand([b, 5 * h], 1), st(2), st(3), st(4), st(5)],
            vec![rand([b, 5 * h], 6), st(7), rand([b, 2 * h + 1], 8)],
            Box::new(|be, i, o| {
                outs!(o, [dg, dl, dr]);
                let (dg, dl, dr) = (dg.view_mut()?, dl.view_mut()?, dr.view_mut()?);
                be.tree_lstm_node_bwd_states(
                    &i[0],
                    &i[1],
                    &i[2],
                    &i[3],
                    &i[4],
                    dg,
                    Some(dl),
                    Some(dr),
                    false,
                )
            }),
        ),
        (
            "lstm_fwd",
            vec![gates(1, 4 * h, 1), rand([1, 2 * h + 2], 2)],
            vec![rand([1, 4 * h], 3), rand([1, 2 * h], 4)],
            Box::new(|be, i, o| {
                outs!(o, [act, s]);
                be.lstm_fwd_states(&i[0], &i[1], act.view_mut()?, s.view_mut()?)
            }),
        ),
        (
            "lstm_bwd",
            vec![rand([b, 4 * h], 1), st(2), st(3), st(4)],
            vec![rand([b, 4 * h], 5), rand([b - 1, 2 * h], 6)],
            Box::new(|be, i, o| {
                outs!(o, [dg, dp]);
                let (dg, dp) = (dg.view_mut()?, dp.view_mut()?);
                be.lstm_bwd_states(&i[0], &i[1], &i[2], &i[3], dg, Some(dp), false)
            }),
        ),
        (
            "tree_lstm_leaf_rd_fwd",
            vec![gates(b, 3 * h, 1), mask(b, h + 1, 2)],
            vec![rand([b, 4 * h], 3), st(4)],
            Box::new(|be, i, o| {
                outs!(o, [act, s]);
                be.tree_lstm_leaf_rd_fwd_states(&i[0], &i[1], act.view_mut()?, s.view_mut()?)
            }),
        ),
        (
            "tree_lstm_leaf_bwd",
            vec![rand([b, 3 * h], 1), st(2), rand([b, 2 * h + 2], 3)],
            vec![rand([b, 3 * h], 4)],
            Box::new(|be, i, o| {
                outs!(o, [dg]);
                be.tree_lstm_leaf_bwd_states(&i[0], &i[1], &i[2], dg.view_mut()?, false)
            }),
        ),
        (
            "copy_rows_at",
            vec![rand([6, 7], 1)],
            vec![rand([8, 7], 2)],
            Box::new(|be, i, o| {
                outs!(o, [d]);
                be.copy_rows_at(&i[0], &[0, 1], d.view_mut()?, &[2, 3, 4], false)
            }),
        ),
        (
            "copy_rows_at",
            vec![rand([6, 7], 1)],
            vec![rand([8, 7], 2)],
            Box::new(|be, i, o| {
                outs!(o, [d]);
                be.copy_rows_at(&i[0], &[0, 1], d.view_mut()?, &[2, 3, 4], true)
            }),
        ),
        (
            "copy_rows_at",
            vec![rand([6, 2, 3], 1)],
            vec![rand([8, 7], 2)],
            Box::new(|be, i, o| {
                outs!(o, [d]);
                be.copy_rows_at(&i[0], &[0], d.view_mut()?, &[1], true)
            }),
        ),
        (
            "copy_rows_at",
            vec![rand([6, 2, 3], 1)],
            vec![rand([8, 2, 3], 2)],
            Box::new(|be, i, o| {
                // Row 3 of a view of rows 5..8 is out of range.
                let dst = o[0].view_mut()?.into_rows_mut(5..8)?;
                be.copy_rows_at(&i[0], &[0, 1], dst, &[1, 3], false)
            }),
        ),
    ];
    for (op, inputs, outputs, f) in cases {
        let mut cpu_out = outputs.clone();
        let want = f(cpu(), &inputs, &mut cpu_out).expect_err(op);
        let gpu_in: Vec<Tensor> = inputs.iter().map(up).collect();
        let mut gpu_out: Vec<Tensor> = outputs.iter().map(up).collect();
        let got = f(&*gpu, &gpu_in, &mut gpu_out).expect_err(op);
        let ctx = format!("{op}: cuda {got:?}, cpu {want:?}");
        assert_eq!(discriminant(&got), discriminant(&want), "{ctx}");
        assert!(want.to_string().starts_with(op), "{ctx}");
        assert!(got.to_string().starts_with(op), "{ctx}");
        // Both check shapes first with the same functions: word for word.
        assert_eq!(got, want, "{op}");
        for (k, out) in outputs.iter().enumerate() {
            assert_eq!(bits(&cpu_out[k]), bits(out), "{ctx}: cpu output {k}");
            assert_eq!(bits(&gpu_out[k]), bits(out), "{ctx}: cuda output {k}");
        }
    }
}
