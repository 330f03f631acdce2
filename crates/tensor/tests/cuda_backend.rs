#![cfg(feature = "cuda")]
//! Parity of the CUDA backend with the CPU backend: every `Backend` method
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

use std::ops::Deref;
use std::slice::from_ref;
use std::sync::{Mutex, MutexGuard};

use sheaf_tensor::{
    Adagrad, Adam, Backend, Binary, CudaBackend, DType, Device, Result, Sgd, Shape, Tensor,
    TensorError, Transpose, Unary,
};

const CUDA: Device = Device::Cuda(0);
const NO: Transpose = Transpose::No;
const YES: Transpose = Transpose::Yes;

// ---- Tolerances.

/// `|gpu - cpu| <= atol + rtol * |cpu|`.
#[derive(Debug, Clone, Copy)]
struct Tol {
    atol: f32,
    rtol: f32,
}

/// Pure arithmetic.
const ARITH: Tol = Tol {
    atol: 1e-5,
    rtol: 1e-5,
};

/// exp, tanh, sigmoid or log involved.
const TRANSC: Tol = Tol {
    atol: 2e-5,
    rtol: 2e-5,
};

/// `base` for a result summed over `n` terms: scaled by `sqrt(n)` (see the
/// module's docs).
fn summed(base: Tol, n: usize) -> Tol {
    let s = (n.max(1) as f32).sqrt();
    Tol {
        atol: base.atol * s,
        rtol: base.rtol * s,
    }
}

#[track_caller]
fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], tol: Tol) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths differ");
    for (i, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        if g.is_nan() && c.is_nan() {
            continue;
        }
        let ok = (g - c).abs() <= tol.atol + tol.rtol * c.abs();
        assert!(
            ok,
            "{what}: element {i}: cuda {g}, cpu {c} (|diff| {}, tolerance {tol:?})",
            (g - c).abs()
        );
    }
}

/// Rows of `after` other than `touched` are bit-for-bit those of `before`.
#[track_caller]
fn assert_rows_untouched(what: &str, after: &Tensor, before: &Tensor, touched: &[usize]) {
    assert_eq!(after.shape(), before.shape(), "{what}: shape");
    let (a, b) = (host(after), host(before));
    let row = before.row_len();
    for r in 0..before.num_rows() {
        if touched.contains(&r) {
            continue;
        }
        for c in 0..row {
            let i = r * row + c;
            assert_eq!(
                a[i].to_bits(),
                b[i].to_bits(),
                "{what}: row {r} (not written) changed at column {c}: {} -> {}",
                b[i],
                a[i]
            );
        }
    }
}

// ---- Backends.

/// The CUDA backend, held exclusively for one test (see the module docs).
struct Gpu {
    _lock: MutexGuard<'static, ()>,
    backend: &'static dyn Backend,
}

impl Deref for Gpu {
    type Target = dyn Backend;
    fn deref(&self) -> &Self::Target {
        self.backend
    }
}

/// The CUDA backend of device 0, or `None` after printing why the test is
/// skipped.
fn gpu() -> Option<Gpu> {
    static LOCK: Mutex<()> = Mutex::new(());
    match Device::Cuda(0).backend() {
        Ok(backend) => Some(Gpu {
            _lock: LOCK.lock().unwrap_or_else(|p| p.into_inner()),
            backend,
        }),
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

fn cpu() -> &'static dyn Backend {
    Device::Cpu.backend().unwrap()
}

// ---- Data.

/// splitmix64: deterministic, seedable, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }

    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n)) as u32
    }
}

/// Host tensor, elements uniform in `[lo, hi)`.
fn uniform(shape: impl Into<Shape>, lo: f32, hi: f32, seed: u64) -> Tensor {
    let shape = shape.into();
    let mut rng = Rng::new(seed);
    let data: Vec<f32> = (0..shape.numel().unwrap())
        .map(|_| rng.uniform(lo, hi))
        .collect();
    Tensor::from_vec(data, shape).unwrap()
}

/// Host tensor, elements uniform in `[-1, 1)`.
fn rand(shape: impl Into<Shape>, seed: u64) -> Tensor {
    uniform(shape, -1.0, 1.0, seed)
}

/// Host tensor with magnitudes in `[0.5, 2)` and random signs (divisors).
fn away_from_zero(shape: impl Into<Shape>, seed: u64) -> Tensor {
    let shape = shape.into();
    let mut rng = Rng::new(seed);
    let data: Vec<f32> = (0..shape.numel().unwrap())
        .map(|_| {
            let m = rng.uniform(0.5, 2.0);
            if rng.below(2) == 0 {
                m
            } else {
                -m
            }
        })
        .collect();
    Tensor::from_vec(data, shape).unwrap()
}

/// `n` random `u32` values below `bound`, as a host index vector.
fn indices(n: usize, bound: u32, seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let v: Vec<u32> = (0..n).map(|_| rng.below(bound)).collect();
    idx(&v)
}

fn idx(values: &[u32]) -> Tensor {
    Tensor::from_slice(values, [values.len()]).unwrap()
}

fn full(value: f32, shape: impl Into<Shape>) -> Tensor {
    Tensor::full_f32(value, shape, Device::Cpu).unwrap()
}

/// A device copy.
fn up(t: &Tensor) -> Tensor {
    let d = t.to_device(CUDA).unwrap();
    assert_eq!(d.device(), CUDA);
    d
}

fn sh(dims: &[usize]) -> Shape {
    Shape::try_from(dims).unwrap()
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

// ---- The parity driver.

/// Runs `f` on the CPU backend with `inputs` and (copies of) `outputs`,
/// and on the CUDA backend with device copies of both, then compares every
/// output. Returns the outputs, `(cpu, cuda)`, for further checks.
#[track_caller]
fn parity<F>(
    gpu: &Gpu,
    name: &str,
    tol: Tol,
    inputs: &[Tensor],
    outputs: &[Tensor],
    f: F,
) -> (Vec<Tensor>, Vec<Tensor>)
where
    F: Fn(&dyn Backend, &[Tensor], &mut [Tensor]) -> Result<()>,
{
    let gpu_in: Vec<Tensor> = inputs.iter().map(up).collect();
    let mut cpu_out: Vec<Tensor> = outputs.to_vec();
    let mut gpu_out: Vec<Tensor> = outputs.iter().map(up).collect();
    f(cpu(), inputs, &mut cpu_out).unwrap_or_else(|e| panic!("{name} on the CPU: {e}"));
    f(gpu.backend, &gpu_in, &mut gpu_out).unwrap_or_else(|e| panic!("{name} on CUDA: {e}"));
    for (i, (g, c)) in gpu_out.iter().zip(&cpu_out).enumerate() {
        assert_eq!(g.device(), CUDA, "{name}: output {i} left the device");
        assert_eq!(g.shape(), c.shape(), "{name}: output {i} shape");
        assert_close(&format!("{name}: output {i}"), &host(g), &host(c), tol);
    }
    (cpu_out, gpu_out)
}

/// The destructuring every parity closure starts with.
macro_rules! outs {
    ($o:expr, [$($name:ident),+]) => {
        let [$($name),+] = $o else {
            unreachable!("output count")
        };
    };
}

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

/// Pre-activation gates, wide enough to reach the flat parts of sigmoid
/// and tanh.
fn gates(b: usize, width: usize, seed: u64) -> Tensor {
    uniform([b, width], -3.0, 3.0, seed)
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

// ---- Optimizers.

fn sgd(momentum: f32) -> Sgd {
    Sgd {
        lr: 0.05,
        momentum,
        weight_decay: 0.01,
    }
}

fn adagrad() -> Adagrad {
    Adagrad {
        lr: 0.05,
        eps: 1e-8,
        weight_decay: 0.01,
    }
}

fn adam() -> Adam {
    Adam {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
    }
}

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
        let rows = idx(&listed);
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
            &[rows.clone(), g.clone()],
            from_ref(&p),
            |b, i, o| {
                outs!(o, [p]);
                b.sgd_step_rows(&sgd(0.0), p.view_mut()?, &i[0], &i[1], None)
            },
        );
        check("sgd_step_rows", &out, &[&p]);
        let (_, out) = parity(
            &gpu,
            "sgd_step_rows (momentum)",
            ARITH,
            &[rows.clone(), g.clone()],
            &[p.clone(), state.clone()],
            |b, i, o| {
                outs!(o, [p, v]);
                for _ in 0..3 {
                    b.sgd_step_rows(&sgd(0.9), p.view_mut()?, &i[0], &i[1], Some(v.view_mut()?))?;
                }
                Ok(())
            },
        );
        check("sgd_step_rows (momentum)", &out, &[&p, &state]);
        let (_, out) = parity(
            &gpu,
            "adagrad_step_rows",
            ARITH,
            &[rows.clone(), g.clone()],
            &[p.clone(), sq.clone()],
            |b, i, o| {
                outs!(o, [p, a]);
                for _ in 0..3 {
                    b.adagrad_step_rows(&adagrad(), p.view_mut()?, &i[0], &i[1], a.view_mut()?)?;
                }
                Ok(())
            },
        );
        check("adagrad_step_rows", &out, &[&p, &sq]);
        let (_, out) = parity(
            &gpu,
            "adam_step_rows",
            ARITH,
            &[rows, g],
            &[p.clone(), state.clone(), sq.clone()],
            |b, i, o| {
                outs!(o, [p, m, v]);
                for step in 5..=7 {
                    b.adam_step_rows(
                        &adam(),
                        step,
                        p.view_mut()?,
                        &i[0],
                        &i[1],
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

// ---- Errors.

#[test]
fn host_tensors_given_to_the_cuda_backend_are_device_mismatches() {
    let Some(gpu) = gpu() else { return };
    let (a, b) = (rand([4, 5], 1), rand([4, 5], 2));
    let (ag, bg) = (up(&a), up(&b));
    let mut yg = up(&rand([4, 5], 3));
    let mut y = rand([4, 5], 3);

    let e = gpu
        .binary(Binary::Add, &a, &bg, yg.view_mut().unwrap())
        .unwrap_err();
    assert_eq!(
        e,
        TensorError::DeviceMismatch {
            op: "add",
            arg: "a",
            expected: CUDA,
            got: Device::Cpu
        }
    );
    let e = gpu
        .binary(Binary::Mul, &ag, &b, yg.view_mut().unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "mul",
                arg: "b",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu
        .unary(Unary::Tanh, &ag, y.view_mut().unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "tanh",
                arg: "y",
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("tanh") && msg.contains("`y`") && msg.contains("cpu"),
        "{msg}"
    );
    let e = gpu
        .matmul(
            &ag,
            NO,
            &b,
            YES,
            1.0,
            0.0,
            up(&rand([4, 4], 4)).view_mut().unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "matmul",
                arg: "b",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu
        .gather_rows(&ag, &idx(&[0, 1]), up(&rand([2, 5], 5)).view_mut().unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "gather_rows",
                arg: "idx",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu
        .sgd_step_rows(
            &sgd(0.0),
            yg.view_mut().unwrap(),
            &idx(&[1]),
            &up(&rand([1, 5], 6)),
            None,
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "sgd_step_rows",
                arg: "rows",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu
        .lstm_fwd(
            &up(&rand([4, 8], 7)),
            &rand([4, 2], 8),
            up(&rand([4, 8], 9)).view_mut().unwrap(),
            up(&rand([4, 2], 10)).view_mut().unwrap(),
            up(&rand([4, 2], 11)).view_mut().unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "lstm_fwd",
                arg: "c_prev",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu.fill(1.0, y.view_mut().unwrap()).unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "fill",
                arg: "out",
                ..
            }
        ),
        "{e}"
    );
    // And the other way round: a device tensor given to the CPU backend.
    let e = cpu()
        .binary(Binary::Add, &ag, &b, y.view_mut().unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "add",
                arg: "a",
                ..
            }
        ),
        "{e}"
    );
}

/// Shape errors are the CPU backend's, word for word.
#[test]
fn shape_errors_match_the_cpu_backend() {
    let Some(gpu) = gpu() else { return };
    // Each case runs with host tensors on the CPU and device copies on
    // CUDA, and must fail the same way.
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        Vec<Tensor>,
        Vec<Tensor>,
        Box<dyn Fn(&dyn Backend, &[Tensor], &mut [Tensor]) -> Result<()>>,
    )> = vec![
        (
            "add",
            vec![rand([4, 5], 1), rand([5, 4], 2)],
            vec![rand([4, 5], 3)],
            Box::new(|b, i, o| b.binary(Binary::Add, &i[0], &i[1], o[0].view_mut()?)),
        ),
        (
            "tanh",
            vec![rand([4, 5], 1)],
            vec![rand([4, 6], 3)],
            Box::new(|b, i, o| b.unary(Unary::Tanh, &i[0], o[0].view_mut()?)),
        ),
        (
            "matmul inner",
            vec![rand([4, 5], 1), rand([6, 3], 2)],
            vec![rand([4, 3], 3)],
            Box::new(|b, i, o| b.matmul(&i[0], NO, &i[1], NO, 1.0, 0.0, o[0].view_mut()?)),
        ),
        (
            "matmul out",
            vec![rand([4, 5], 1), rand([5, 3], 2)],
            vec![rand([3, 4], 3)],
            Box::new(|b, i, o| b.matmul(&i[0], NO, &i[1], NO, 1.0, 0.0, o[0].view_mut()?)),
        ),
        (
            "gather_rows",
            vec![rand([10, 5], 1), idx(&[1, 2, 3])],
            vec![rand([2, 5], 3)],
            Box::new(|b, i, o| b.gather_rows(&i[0], &i[1], o[0].view_mut()?)),
        ),
        (
            "copy_rows out of range",
            vec![rand([10, 5], 1)],
            vec![rand([4, 5], 3)],
            Box::new(|b, i, o| b.copy_rows(&i[0], 8, o[0].view_mut()?, 0, 3)),
        ),
        (
            "softmax_rows",
            vec![rand([4, 5], 1)],
            vec![rand([4, 4], 3)],
            Box::new(|b, i, o| b.softmax_rows(&i[0], o[0].view_mut()?)),
        ),
        (
            "nll_log_softmax",
            vec![rand([4, 5], 1), idx(&[0, 1, 2])],
            vec![rand([4, 5], 3), rand([4], 4)],
            Box::new(|b, i, o| {
                let [p, l] = o else { unreachable!() };
                b.nll_log_softmax(&i[0], &i[1], p.view_mut()?, l.view_mut()?)
            }),
        ),
        (
            "lstm_fwd",
            vec![rand([4, 8], 1), rand([4, 2], 2)],
            vec![rand([4, 8], 3), rand([4, 3], 4), rand([4, 2], 5)],
            Box::new(|b, i, o| {
                let [a, c, h] = o else { unreachable!() };
                b.lstm_fwd(&i[0], &i[1], a.view_mut()?, c.view_mut()?, h.view_mut()?)
            }),
        ),
        (
            "sgd_step_rows",
            vec![idx(&[1, 2]), rand([3, 5], 2)],
            vec![rand([10, 5], 3)],
            Box::new(|b, i, o| b.sgd_step_rows(&sgd(0.0), o[0].view_mut()?, &i[0], &i[1], None)),
        ),
        (
            "adam_step zero",
            vec![rand([3, 5], 2)],
            vec![rand([3, 5], 3), rand([3, 5], 4), rand([3, 5], 5)],
            Box::new(|b, i, o| {
                let [p, m, v] = o else { unreachable!() };
                b.adam_step(
                    &adam(),
                    0,
                    p.view_mut()?,
                    &i[0],
                    m.view_mut()?,
                    v.view_mut()?,
                )
            }),
        ),
        (
            "sgd_step momentum without velocity",
            vec![rand([3, 5], 2)],
            vec![rand([3, 5], 3)],
            Box::new(|b, i, o| b.sgd_step(&sgd(0.9), o[0].view_mut()?, &i[0], None)),
        ),
    ];
    for (name, inputs, outputs, f) in cases {
        let mut cpu_out = outputs.clone();
        let want = f(cpu(), &inputs, &mut cpu_out).expect_err(name);
        let gpu_in: Vec<Tensor> = inputs.iter().map(up).collect();
        let mut gpu_out: Vec<Tensor> = outputs.iter().map(up).collect();
        let got = f(&*gpu, &gpu_in, &mut gpu_out).expect_err(name);
        assert_eq!(got.to_string(), want.to_string(), "{name}");
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn bad_index_values_are_errors_at_the_next_download() {
    let Some(gpu) = gpu() else { return };
    // Gather: the launch succeeds (the device checks the value), the next
    // download reports it, naming the kernel; the one after is clean.
    let src = up(&rand([10, 4], 1));
    let mut dst = up(&rand([3, 4], 2));
    gpu.gather_rows(&src, &up(&idx(&[1, 99, 2])), dst.view_mut().unwrap())
        .unwrap();
    let e = dst.to_vec::<f32>().unwrap_err();
    assert!(matches!(e, TensorError::Cuda { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("gather_rows"), "{msg}");
    assert!(msg.contains("99"), "{msg}");
    assert!(dst.to_vec::<f32>().is_ok(), "the error is reported once");

    // Scatter-add, likewise.
    let mut table = up(&rand([10, 4], 3));
    gpu.scatter_add_rows(
        &up(&rand([2, 4], 4)),
        &up(&idx(&[0, 10])),
        table.view_mut().unwrap(),
    )
    .unwrap();
    let msg = table.to_vec::<f32>().unwrap_err().to_string();
    assert!(msg.contains("scatter_add_rows"), "{msg}");

    // A label not below the class count.
    let (mut probs, mut loss) = (up(&rand([2, 3], 5)), up(&rand([2], 6)));
    gpu.nll_log_softmax(
        &up(&rand([2, 3], 7)),
        &up(&idx(&[0, 3])),
        probs.view_mut().unwrap(),
        loss.view_mut().unwrap(),
    )
    .unwrap();
    let msg = loss.to_vec::<f32>().unwrap_err().to_string();
    assert!(msg.contains("nll_log_softmax"), "{msg}");

    // Sparse optimizer rows are checked on the host before the launch: a
    // duplicate or an id past the table is a Kernel error, nothing changes.
    let p0 = rand([10, 4], 8);
    let mut p = up(&p0);
    let e = gpu
        .sgd_step_rows(
            &sgd(0.0),
            p.view_mut().unwrap(),
            &up(&idx(&[2, 5, 2])),
            &up(&rand([3, 4], 9)),
            None,
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::Kernel {
                op: "sgd_step_rows",
                ..
            }
        ),
        "{e:?}"
    );
    let e = gpu
        .adam_step_rows(
            &adam(),
            1,
            p.view_mut().unwrap(),
            &up(&idx(&[10])),
            &up(&rand([1, 4], 10)),
            up(&rand([10, 4], 11)).view_mut().unwrap(),
            up(&rand([10, 4], 12)).view_mut().unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::Kernel {
                op: "adam_step_rows",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(host(&p), host(&p0), "rejected sparse steps change nothing");
}

#[test]
fn huge_device_allocation_is_an_error_naming_the_bytes() {
    let Some(_gpu) = gpu() else { return };
    let r = Tensor::zeros([1 << 20, 1 << 20], DType::F32, CUDA);
    let msg = r.expect_err("4 TiB cannot be allocated").to_string();
    let bytes = (4u64 << 40).to_string();
    assert!(msg.contains(&bytes), "{msg}");
    // The device is still usable afterwards.
    let t = Tensor::full_f32(3.0, [2, 2], CUDA).unwrap();
    assert_eq!(host(&t), [3.0; 4]);
}

/// Runs everywhere: without a CUDA driver, asking for a CUDA device is an
/// error saying CUDA is unavailable, never a panic.
#[test]
fn without_a_driver_cuda_devices_are_unavailable() {
    if sheaf_kernels_cuda::driver_present() {
        // With a driver, device 0 may still be missing: then it must be
        // the same kind of error.
        if let Err(e) = Device::Cuda(0).backend() {
            assert!(e.to_string().contains("CUDA is unavailable"), "{e}");
        }
        eprintln!("skipping the no-driver checks: a CUDA driver is present");
        return;
    }
    let unavailable = |e: TensorError| {
        let msg = e.to_string();
        assert!(msg.contains("CUDA is unavailable"), "{msg}");
    };
    unavailable(Device::Cuda(0).backend().map(|_| ()).unwrap_err());
    unavailable(Device::Cuda(3).backend().map(|_| ()).unwrap_err());
    unavailable(Tensor::zeros([2, 3], DType::F32, CUDA).unwrap_err());
    unavailable(Tensor::full_f32(1.0, [2, 3], CUDA).unwrap_err());
    unavailable(rand([2, 3], 1).to_device(CUDA).unwrap_err());
    unavailable(CudaBackend::global(0).map(|_| ()).unwrap_err());
    assert!(!CUDA.is_available());
    // The CPU is unaffected.
    assert!(Device::Cpu.is_available());
}
