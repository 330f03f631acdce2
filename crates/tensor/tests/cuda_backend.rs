#![cfg(feature = "cuda")]
//! Parity of the CUDA backend with the CPU backend: elementwise ops,
//! matmul and row ops (the other families: `cuda_backend_*.rs`).
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

// ---- Elementwise.

/// Inputs in the domain of `op` (log needs x > 0; exp is kept moderate).
fn unary_input(op: Unary, shape: impl Into<Shape>, seed: u64) -> Tensor {
    match op {
        Unary::Log => uniform(shape, 0.05, 3.0, seed),
        _ => uniform(shape, -3.0, 3.0, seed),
    }
}

fn unary_tol(op: Unary) -> Tol {
    match op {
        Unary::Relu => ARITH,
        _ => TRANSC,
    }
}

#[test]
fn unary_forward_inplace_and_backward() {
    let Some(gpu) = gpu() else { return };
    // Odd sizes; the last one exceeds one grid of the elementwise launch
    // (SMs x 32 blocks x 256 threads), so the grid-stride loop turns.
    let shapes: [&[usize]; 4] = [&[1], &[37, 53], &[3, 5, 7], &[1200, 1024]];
    for (s, dims) in shapes.iter().enumerate() {
        for op in Unary::ALL {
            let seed = 100 * s as u64 + op as u64;
            let x = unary_input(op, sh(dims), seed);
            let tol = unary_tol(op);
            let garbage = rand(sh(dims), seed + 1);
            parity(&gpu, op.name(), tol, from_ref(&x), &[garbage], |b, i, o| {
                outs!(o, [y]);
                b.unary(op, &i[0], y.view_mut()?)
            });
            parity(
                &gpu,
                op.inplace_name(),
                tol,
                &[],
                from_ref(&x),
                |b, _, o| {
                    outs!(o, [x]);
                    b.unary_inplace(op, x.view_mut()?)
                },
            );

            // In place on a tensor whose device storage is shared: copy on
            // write, the other tensor keeps its values.
            let xg = up(&x);
            let mut z = xg.clone();
            gpu.unary_inplace(op, z.view_mut().unwrap()).unwrap();
            assert!(!z.shares_storage(&xg), "{op}: in place did not copy");
            assert_eq!(host(&xg), host(&x), "{op}: in place wrote through");

            // Backward ACCUMULATES: dx starts nonzero. y is the forward
            // output (computed once, on the CPU, and given to both).
            let mut y = Tensor::zeros(sh(dims), DType::F32, Device::Cpu).unwrap();
            cpu().unary(op, &x, y.view_mut().unwrap()).unwrap();
            let dy = rand(sh(dims), seed + 2);
            let dx0 = rand(sh(dims), seed + 3);
            parity(&gpu, op.bwd_name(), tol, &[x, y, dy], &[dx0], |b, i, o| {
                outs!(o, [dx]);
                b.unary_bwd(op, &i[0], &i[1], &i[2], dx.view_mut()?)
            });
        }
    }
}

#[test]
fn binary_scale_axpy_mul_acc_div_bwd_and_fill() {
    let Some(gpu) = gpu() else { return };
    let shapes: [&[usize]; 4] = [&[1], &[37, 53], &[2, 3, 129], &[1200, 1024]];
    for (s, dims) in shapes.iter().enumerate() {
        let seed = 1000 + 100 * s as u64;
        let a = rand(sh(dims), seed);
        let b = rand(sh(dims), seed + 1);
        let d = away_from_zero(sh(dims), seed + 2);
        let out0 = rand(sh(dims), seed + 3);
        let out1 = rand(sh(dims), seed + 4);
        for op in Binary::ALL {
            let rhs = if op == Binary::Div { &d } else { &b };
            parity(
                &gpu,
                op.name(),
                ARITH,
                &[a.clone(), rhs.clone()],
                from_ref(&out0),
                |be, i, o| {
                    outs!(o, [y]);
                    be.binary(op, &i[0], &i[1], y.view_mut()?)
                },
            );
        }
        for alpha in [-1.75f32, 0.0, 3.0] {
            parity(
                &gpu,
                "scale",
                ARITH,
                from_ref(&a),
                from_ref(&out0),
                |be, i, o| {
                    outs!(o, [y]);
                    be.scale(alpha, &i[0], y.view_mut()?)
                },
            );
            parity(
                &gpu,
                "axpy",
                ARITH,
                from_ref(&a),
                from_ref(&out0),
                |be, i, o| {
                    outs!(o, [y]);
                    be.axpy(alpha, &i[0], y.view_mut()?)
                },
            );
        }
        parity(
            &gpu,
            "mul_acc",
            ARITH,
            &[a.clone(), b.clone()],
            from_ref(&out0),
            |be, i, o| {
                outs!(o, [y]);
                be.mul_acc(&i[0], &i[1], y.view_mut()?)
            },
        );
        parity(
            &gpu,
            "div_bwd",
            ARITH,
            &[a.clone(), d.clone(), b.clone()],
            &[out0.clone(), out1.clone()],
            |be, i, o| {
                outs!(o, [da, db]);
                be.div_bwd(&i[0], &i[1], &i[2], da.view_mut()?, db.view_mut()?)
            },
        );
        let (_, g) = parity(&gpu, "fill", ARITH, &[], from_ref(&out0), |be, _, o| {
            outs!(o, [y]);
            be.fill(-2.5, y.view_mut()?)
        });
        assert!(host(&g[0]).iter().all(|&v| v == -2.5), "fill");
    }
}

// ---- Matmul.

#[test]
fn matmul_all_transposes_alpha_beta() {
    let Some(gpu) = gpu() else { return };
    let mut seed = 2000;
    for (m, k, n) in [(1, 1, 1), (37, 53, 29), (2, 7, 65), (128, 300, 96)] {
        for ta in [NO, YES] {
            for tb in [NO, YES] {
                let sa = if ta == YES { [k, m] } else { [m, k] };
                let sb = if tb == YES { [n, k] } else { [k, n] };
                for (alpha, beta) in [(1.0f32, 0.0f32), (1.5, -0.5), (-0.25, 1.0), (2.0, 2.0)] {
                    seed += 10;
                    let (a, b) = (rand(sa, seed), rand(sb, seed + 1));
                    // With beta == 0 the old contents, NaN included, are
                    // ignored.
                    let out0 = if beta == 0.0 {
                        full(f32::NAN, [m, n])
                    } else {
                        rand([m, n], seed + 2)
                    };
                    let name = format!("matmul {m}x{k}x{n} {ta:?} {tb:?} a={alpha} b={beta}");
                    parity(
                        &gpu,
                        &name,
                        summed(ARITH, k),
                        &[a, b],
                        &[out0],
                        |be, i, o| {
                            outs!(o, [c]);
                            be.matmul(&i[0], ta, &i[1], tb, alpha, beta, c.view_mut()?)
                        },
                    );
                }
            }
        }
    }

    // Rank 3: [2, 5, k] is a 10 x k matrix; out [2, 5, n].
    let (a, b, out0) = (
        rand([2, 5, 33], 2900),
        rand([33, 17], 2901),
        rand([2, 5, 17], 2902),
    );
    parity(
        &gpu,
        "matmul rank 3",
        summed(ARITH, 33),
        &[a, b],
        &[out0],
        |be, i, o| {
            outs!(o, [c]);
            be.matmul(&i[0], NO, &i[1], NO, 0.75, 0.5, c.view_mut()?)
        },
    );

    // k = 0: the product is zero, so out = beta * out (beta = 0: zeros,
    // whatever was there).
    for ta in [NO, YES] {
        for tb in [NO, YES] {
            let sa = if ta == YES { [0, 4] } else { [4, 0] };
            let sb = if tb == YES { [6, 0] } else { [0, 6] };
            let (a, b) = (rand(sa, 1), rand(sb, 2));
            let (_, g) = parity(
                &gpu,
                "matmul k = 0, beta = 0",
                ARITH,
                &[a.clone(), b.clone()],
                &[full(f32::NAN, [4, 6])],
                |be, i, o| {
                    outs!(o, [c]);
                    be.matmul(&i[0], ta, &i[1], tb, 1.5, 0.0, c.view_mut()?)
                },
            );
            assert_eq!(host(&g[0]), [0.0; 24], "k = 0, beta = 0");
            let out0 = rand([4, 6], 3);
            let (_, g) = parity(
                &gpu,
                "matmul k = 0, beta = 2",
                ARITH,
                &[a, b],
                from_ref(&out0),
                |be, i, o| {
                    outs!(o, [c]);
                    be.matmul(&i[0], ta, &i[1], tb, 1.5, 2.0, c.view_mut()?)
                },
            );
            let want: Vec<f32> = host(&out0).iter().map(|v| 2.0 * v).collect();
            assert_eq!(host(&g[0]), want, "k = 0, beta = 2");
        }
    }
}

// ---- Rows.

#[test]
fn gather_scatter_copy_and_broadcast_rows() {
    let Some(gpu) = gpu() else { return };
    for (t, row) in [(&[7usize][..], 0u64), (&[3, 4], 1), (&[300], 2)] {
        let seed = 3000 + 100 * row;
        let table_shape: Vec<usize> = [50].iter().chain(t).copied().collect();
        let src = rand(sh(&table_shape), seed);
        // 80 indices into 50 rows: duplicates certain.
        let ix = indices(80, 50, seed + 1);
        let mut dst_shape = table_shape.clone();
        dst_shape[0] = 80;
        parity(
            &gpu,
            "gather_rows",
            ARITH,
            &[src.clone(), ix.clone()],
            &[rand(sh(&dst_shape), seed + 2)],
            |b, i, o| {
                outs!(o, [dst]);
                b.gather_rows(&i[0], &i[1], dst.view_mut()?)
            },
        );

        // Scatter-add with duplicate indices into a nonzero table; atomics
        // add duplicates in any order, hence a tolerance.
        let grads = rand(sh(&dst_shape), seed + 3);
        let table0 = rand(sh(&table_shape), seed + 4);
        parity(
            &gpu,
            "scatter_add_rows",
            ARITH,
            &[grads.clone(), ix.clone()],
            from_ref(&table0),
            |b, i, o| {
                outs!(o, [dst]);
                b.scatter_add_rows(&i[0], &i[1], dst.view_mut()?)
            },
        );
        // Deterministic mode adds in position order, like the CPU: equal
        // bit for bit.
        let kernels = CudaBackend::global(0).unwrap().kernels();
        kernels.set_deterministic(true);
        let (c, g) = parity(
            &gpu,
            "scatter_add_rows (deterministic)",
            ARITH,
            &[grads, ix],
            &[table0],
            |b, i, o| {
                outs!(o, [dst]);
                b.scatter_add_rows(&i[0], &i[1], dst.view_mut()?)
            },
        );
        kernels.set_deterministic(false);
        assert_eq!(host(&g[0]), host(&c[0]), "deterministic scatter_add_rows");

        // Copy rows 2..9 of src into rows 31..38 of a larger tensor: only
        // those rows change.
        let big0 = rand(sh(&table_shape), seed + 5);
        let (_, g) = parity(
            &gpu,
            "copy_rows",
            ARITH,
            from_ref(&src),
            from_ref(&big0),
            |b, i, o| {
                outs!(o, [dst]);
                b.copy_rows(&i[0], 2, dst.view_mut()?, 31, 7)
            },
        );
        assert_rows_untouched("copy_rows", &g[0], &big0, &(31..38).collect::<Vec<_>>());
        let (got, want) = (
            host(&g[0].rows(31..38).unwrap()),
            host(&src.rows(2..9).unwrap()),
        );
        assert_eq!(got, want, "copy_rows copies exactly");
        // ... and through a row-range view: rows 10..40, dst_row 5 -> 15..22.
        let (_, g) = parity(
            &gpu,
            "copy_rows into a view",
            ARITH,
            from_ref(&src),
            from_ref(&big0),
            |b, i, o| {
                outs!(o, [dst]);
                let view = dst.view_mut()?.into_rows_mut(10..40)?;
                b.copy_rows(&i[0], 0, view, 5, 7)
            },
        );
        assert_rows_untouched(
            "copy_rows into a view",
            &g[0],
            &big0,
            &(15..22).collect::<Vec<_>>(),
        );

        // Broadcast one row over a table.
        let one = rand(sh(t), seed + 6);
        let (_, g) = parity(
            &gpu,
            "broadcast_row",
            ARITH,
            from_ref(&one),
            &[rand(sh(&table_shape), seed + 7)],
            |b, i, o| {
                outs!(o, [dst]);
                b.broadcast_row(&i[0], dst.view_mut()?)
            },
        );
        let got = host(&g[0]);
        for r in got.chunks(one.numel()) {
            assert_eq!(r, host(&one), "broadcast_row");
        }
    }
}
