#![cfg(feature = "cuda")]
//! Parity of the CUDA backend with the CPU backend: optimizer updates and
//! outputs written through views.
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

// ---- Optimizers.

/// Three steps of each dense optimizer (state carried between steps).
#[test]
fn dense_optimizer_steps() {
    let Some(gpu) = gpu() else { return };
    for dims in [&[1usize][..], &[41, 23], &[3, 5, 7]] {
        let seed = 7000 + dims.iter().product::<usize>() as u64;
        let p = rand(sh(dims), seed);
        let g = rand(sh(dims), seed + 1);
        let state = rand(sh(dims), seed + 2);
        let sq = uniform(sh(dims), 0.0, 0.01, seed + 3); // accum / v are >= 0
        parity(
            &gpu,
            "sgd_step",
            ARITH,
            from_ref(&g),
            from_ref(&p),
            |b, i, o| {
                outs!(o, [p]);
                for _ in 0..3 {
                    b.sgd_step(&sgd(0.0), p.view_mut()?, &i[0], None)?;
                }
                Ok(())
            },
        );
        parity(
            &gpu,
            "sgd_step (momentum)",
            ARITH,
            from_ref(&g),
            &[p.clone(), state.clone()],
            |b, i, o| {
                outs!(o, [p, v]);
                for _ in 0..3 {
                    b.sgd_step(&sgd(0.9), p.view_mut()?, &i[0], Some(v.view_mut()?))?;
                }
                Ok(())
            },
        );
        // Without momentum a given velocity is ignored.
        let (_, out) = parity(
            &gpu,
            "sgd_step (velocity ignored)",
            ARITH,
            from_ref(&g),
            &[p.clone(), state.clone()],
            |b, i, o| {
                outs!(o, [p, v]);
                b.sgd_step(&sgd(0.0), p.view_mut()?, &i[0], Some(v.view_mut()?))
            },
        );
        assert_eq!(host(&out[1]), host(&state), "velocity without momentum");
        parity(
            &gpu,
            "adagrad_step",
            ARITH,
            from_ref(&g),
            &[p.clone(), sq.clone()],
            |b, i, o| {
                outs!(o, [p, a]);
                for _ in 0..3 {
                    b.adagrad_step(&adagrad(), p.view_mut()?, &i[0], a.view_mut()?)?;
                }
                Ok(())
            },
        );
        parity(
            &gpu,
            "adam_step",
            ARITH,
            &[g],
            &[p, state.clone(), sq],
            |b, i, o| {
                outs!(o, [p, m, v]);
                for step in 1..=3 {
                    b.adam_step(
                        &adam(),
                        step,
                        p.view_mut()?,
                        &i[0],
                        m.view_mut()?,
                        v.view_mut()?,
                    )?;
                }
                Ok(())
            },
        );
    }
}

/// Sparse-row steps: listed rows as on the CPU, every other row of the
/// parameter and of the state bit-for-bit unchanged.
#[test]
fn sparse_row_optimizer_steps() {
    let Some(gpu) = gpu() else { return };
    for row in [&[13usize][..], &[2, 3], &[300]] {
        let table: Vec<usize> = [50].iter().chain(row).copied().collect();
        let seed = 8000 + row.iter().product::<usize>() as u64;
        let listed = [3u32, 17, 0, 49, 22];
        let touched: Vec<usize> = listed.iter().map(|&r| r as usize).collect();
        let mut gshape = table.clone();
        gshape[0] = listed.len();
        let g = rand(sh(&gshape), seed);
        let p = rand(sh(&table), seed + 1);
        let state = rand(sh(&table), seed + 2);
        let sq = uniform(sh(&table), 0.0, 0.01, seed + 3);

        let check = |name: &str, out: &[Tensor], before: &[&Tensor]| {
            for (k, (a, b)) in out.iter().zip(before).enumerate() {
                assert_rows_untouched(&format!("{name}: output {k}"), a, b, &touched);
            }
        };

        let (_, out) = parity(
            &gpu,
            "sgd_step_rows",
            ARITH,
            from_ref(&g),
            &[p.clone(), state.clone()],
            |b, i, o| {
                outs!(o, [p, v]);
                // Without momentum a velocity given is neither read nor
                // written.
                b.sgd_step_rows(
                    &sgd(0.0),
                    p.view_mut()?,
                    &listed,
                    &i[0],
                    Some(v.view_mut()?),
                )
            },
        );
        check("sgd_step_rows", &out[..1], &[&p]);
        assert_rows_untouched("sgd_step_rows: velocity", &out[1], &state, &[]);
        let (_, out) = parity(
            &gpu,
            "sgd_step_rows (momentum)",
            ARITH,
            from_ref(&g),
            &[p.clone(), state.clone()],
            |b, i, o| {
                outs!(o, [p, v]);
                for _ in 0..3 {
                    b.sgd_step_rows(
                        &sgd(0.9),
                        p.view_mut()?,
                        &listed,
                        &i[0],
                        Some(v.view_mut()?),
                    )?;
                }
                Ok(())
            },
        );
        check("sgd_step_rows (momentum)", &out, &[&p, &state]);
        let (_, out) = parity(
            &gpu,
            "adagrad_step_rows",
            ARITH,
            from_ref(&g),
            &[p.clone(), sq.clone()],
            |b, i, o| {
                outs!(o, [p, a]);
                for _ in 0..3 {
                    b.adagrad_step_rows(&adagrad(), p.view_mut()?, &listed, &i[0], a.view_mut()?)?;
                }
                Ok(())
            },
        );
        check("adagrad_step_rows", &out, &[&p, &sq]);
        let (_, out) = parity(
            &gpu,
            "adam_step_rows",
            ARITH,
            from_ref(&g),
            &[p.clone(), state.clone(), sq.clone()],
            |b, i, o| {
                outs!(o, [p, m, v]);
                for step in 5..=7 {
                    b.adam_step_rows(
                        &adam(),
                        step,
                        p.view_mut()?,
                        &listed,
                        &i[0],
                        m.view_mut()?,
                        v.view_mut()?,
                    )?;
                }
                Ok(())
            },
        );
        check("adam_step_rows", &out, &[&p, &state, &sq]);
    }
}

// ---- Outputs through views.

#[test]
fn outputs_through_row_views_and_splits() {
    let Some(gpu) = gpu() else { return };
    let big0 = rand([12, 16], 9000);

    // A row range: rows 3..8 change, the rest not.
    let x = rand([5, 16], 9001);
    let (_, g) = parity(
        &gpu,
        "tanh into rows 3..8",
        TRANSC,
        from_ref(&x),
        from_ref(&big0),
        |b, i, o| {
            outs!(o, [t]);
            b.unary(Unary::Tanh, &i[0], t.view_mut()?.into_rows_mut(3..8)?)
        },
    );
    assert_rows_untouched("tanh into rows 3..8", &g[0], &big0, &[3, 4, 5, 6, 7]);

    // Split halves: the top gets 2x, the bottom p - q; each lands in its
    // own rows of the device tensor (checked exactly, not only against
    // the CPU).
    let (top, p, q) = (
        rand([5, 16], 9002),
        rand([7, 16], 9003),
        rand([7, 16], 9004),
    );
    let (_, g) = parity(
        &gpu,
        "split rows",
        ARITH,
        &[top.clone(), p.clone(), q.clone()],
        from_ref(&big0),
        |b, i, o| {
            outs!(o, [t]);
            let (head, tail) = t.view_mut()?.into_split_rows(5)?;
            b.scale(2.0, &i[0], head)?;
            b.binary(Binary::Sub, &i[1], &i[2], tail)
        },
    );
    let got = host(&g[0]);
    let want_top: Vec<f32> = host(&top).iter().map(|v| 2.0 * v).collect();
    let want_bottom: Vec<f32> = host(&p).iter().zip(host(&q)).map(|(a, b)| a - b).collect();
    assert_eq!(&got[..5 * 16], &want_top[..], "split: head rows");
    assert_eq!(&got[5 * 16..], &want_bottom[..], "split: tail rows");

    // Split of a row range, written by matmul (top) and fill (bottom):
    // rows 2..5 <- a b, rows 5..10 <- 1.25, others unchanged.
    let (a, bm) = (rand([3, 9], 9005), rand([9, 16], 9006));
    let (_, g) = parity(
        &gpu,
        "matmul and fill into a split row range",
        summed(ARITH, 9),
        &[a, bm],
        from_ref(&big0),
        |b, i, o| {
            outs!(o, [t]);
            let (head, tail) = t.view_mut()?.into_rows_mut(2..10)?.into_split_rows(3)?;
            b.matmul(&i[0], NO, &i[1], NO, 1.0, 0.0, head)?;
            b.fill(1.25, tail)
        },
    );
    assert_rows_untouched(
        "matmul and fill into a split row range",
        &g[0],
        &big0,
        &(2..10).collect::<Vec<_>>(),
    );
    assert!(host(&g[0].rows(5..10).unwrap()).iter().all(|&v| v == 1.25));

    // Gather into one half, a cell into the other (rank-2 outputs [b, H]).
    let (src, ix) = (rand([30, 16], 9007), indices(4, 30, 9008));
    let (gt, cp) = (gates(8, 3 * 16, 9009), rand([8, 16], 9010));
    let (_, g) = parity(
        &gpu,
        "gather and a cell into split halves",
        TRANSC,
        &[src, ix, gt],
        &[big0.clone(), rand([8, 48], 9011), cp],
        |b, i, o| {
            outs!(o, [t, act, c]);
            let (head, tail) = t.view_mut()?.into_split_rows(4)?;
            b.gather_rows(&i[0], &i[1], head)?;
            // tail is rows 4..12: 8 rows of h.
            b.tree_lstm_leaf_fwd(&i[2], act.view_mut()?, c.view_mut()?, tail)
        },
    );
    assert_eq!(g[0].shape(), big0.shape());
}
