//! GPU-vs-CPU parity: every CUDA kernel against `sheaf-kernels-cpu` on
//! random inputs, element by element, plus the error paths.
//!
//! Each test opens the device first and returns early (printing why) when
//! there is none, so the suite builds and passes on machines without CUDA
//! and really runs on a GPU. Tolerances are documented in `common`.

#![allow(clippy::too_many_arguments, clippy::needless_range_loop)]

mod common;

use common::{
    assert_bits_eq, assert_close, assert_within, down, gpu, up, Rng, TestResult, ARITH, SUM_RTOL,
    TRANSC,
};
use sheaf_kernels_cpu::optim::{Adagrad, Adam, Sgd};
use sheaf_kernels_cpu::{CpuKernels, Transpose};
use sheaf_kernels_cuda::{
    as_u32, AdamArgs, CudaError, CudaKernels, Map, Operand, PushKernelArg, RowSet, UserKernel, Zip,
};

/// Lengths of the elementwise tests: one element, a few blocks, and more
/// than the grid of `elementwise_config` (at most 32 blocks of 256 threads
/// per SM, about 1.1M threads on an H100), so the grid-stride loop turns.
const LENS: [usize; 3] = [1, 1000, 2_100_003];

const MAPS: [Map; 5] = [Map::Tanh, Map::Sigmoid, Map::Relu, Map::Exp, Map::Log];

/// Inputs for `f`: where it is interesting, and positive for Log.
fn map_input(rng: &mut Rng, f: Map, n: usize) -> Vec<f32> {
    match f {
        Map::Tanh => rng.vec(n, -6.0, 6.0),
        Map::Sigmoid => rng.vec(n, -10.0, 10.0),
        Map::Relu => rng.vec(n, -1.0, 1.0),
        Map::Exp => rng.vec(n, -10.0, 10.0),
        Map::Log => rng.vec(n, 0.01, 100.0),
    }
}

/// Relu is a select (exact); the others are transcendental.
fn map_tol(f: Map) -> common::Tol {
    if f == Map::Relu {
        ARITH
    } else {
        TRANSC
    }
}

fn cpu_map(cpu: &CpuKernels, f: Map, x: &[f32], y: &mut [f32]) {
    match f {
        Map::Tanh => cpu.tanh(x, y),
        Map::Sigmoid => cpu.sigmoid(x, y),
        Map::Relu => cpu.relu(x, y),
        Map::Exp => cpu.exp(x, y),
        Map::Log => cpu.log(x, y),
    }
    .expect("cpu map");
}

fn cpu_map_inplace(cpu: &CpuKernels, f: Map, x: &mut [f32]) {
    match f {
        Map::Tanh => cpu.tanh_inplace(x),
        Map::Sigmoid => cpu.sigmoid_inplace(x),
        Map::Relu => cpu.relu_inplace(x),
        Map::Exp => cpu.exp_inplace(x),
        Map::Log => cpu.log_inplace(x),
    }
    .expect("cpu map in place");
}

fn cpu_map_bwd(cpu: &CpuKernels, f: Map, v: &[f32], dy: &[f32], dx: &mut [f32]) {
    match f {
        Map::Tanh => cpu.tanh_bwd(v, dy, dx),
        Map::Sigmoid => cpu.sigmoid_bwd(v, dy, dx),
        Map::Relu => cpu.relu_bwd(v, dy, dx),
        Map::Exp => cpu.exp_bwd(v, dy, dx),
        Map::Log => cpu.log_bwd(v, dy, dx),
    }
    .expect("cpu map bwd");
}

// ---------------------------------------------------------------- elementwise

#[test]
fn map_forward_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(1);
    for f in MAPS {
        for n in LENS {
            let x = map_input(&mut rng, f, n);
            let mut want = vec![0.0; n];
            cpu_map(&cpu, f, &x, &mut want);
            let xd = up(&k, &x)?;
            let mut yd = k.alloc_zeros::<f32>(n)?;
            k.map(f, &xd.as_view(), &mut yd.as_view_mut())?;
            assert_close(
                &format!("map {f:?} n={n}"),
                &down(&k, &yd)?,
                &want,
                map_tol(f),
            );
        }
    }
    Ok(())
}

#[test]
fn map_inplace_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(2);
    for f in MAPS {
        for n in LENS {
            let mut want = map_input(&mut rng, f, n);
            let mut yd = up(&k, &want)?;
            cpu_map_inplace(&cpu, f, &mut want);
            k.map_inplace(f, &mut yd.as_view_mut())?;
            assert_close(
                &format!("map_inplace {f:?} n={n}"),
                &down(&k, &yd)?,
                &want,
                map_tol(f),
            );
        }
    }
    Ok(())
}

/// Backward from the forward's OUTPUT (tanh, sigmoid, exp) or INPUT (relu,
/// log), accumulating into a nonzero `dx`. Only arithmetic on given values:
/// [`ARITH`].
#[test]
fn map_backward_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(3);
    for f in MAPS {
        for n in LENS {
            let x = map_input(&mut rng, f, n);
            let v = match f {
                Map::Relu | Map::Log => x,
                _ => {
                    let mut y = vec![0.0; n];
                    cpu_map(&cpu, f, &x, &mut y);
                    y
                }
            };
            let dy = rng.vec(n, -1.0, 1.0);
            let dx0 = rng.away_from_zero(n);
            let mut want = dx0.clone();
            cpu_map_bwd(&cpu, f, &v, &dy, &mut want);
            let (vd, dyd) = (up(&k, &v)?, up(&k, &dy)?);
            let mut dxd = up(&k, &dx0)?;
            k.map_bwd(f, &vd.as_view(), &dyd.as_view(), &mut dxd.as_view_mut())?;
            assert_close(
                &format!("map_bwd {f:?} n={n}"),
                &down(&k, &dxd)?,
                &want,
                ARITH,
            );
        }
    }
    Ok(())
}

#[test]
fn zip_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(4);
    for f in [Zip::Add, Zip::Sub, Zip::Mul, Zip::Div] {
        for n in LENS {
            let a = rng.vec(n, -2.0, 2.0);
            // Divisors of magnitude at least 0.5.
            let b = match f {
                Zip::Div => rng.away_from_zero(n),
                _ => rng.vec(n, -2.0, 2.0),
            };
            let mut want = vec![0.0; n];
            match f {
                Zip::Add => cpu.add(&a, &b, &mut want),
                Zip::Sub => cpu.sub(&a, &b, &mut want),
                Zip::Mul => cpu.mul(&a, &b, &mut want),
                Zip::Div => cpu.div(&a, &b, &mut want),
            }?;
            let (ad, bd) = (up(&k, &a)?, up(&k, &b)?);
            let mut yd = k.alloc_zeros::<f32>(n)?;
            k.zip(f, &ad.as_view(), &bd.as_view(), &mut yd.as_view_mut())?;
            assert_close(&format!("zip {f:?} n={n}"), &down(&k, &yd)?, &want, ARITH);
        }
    }
    Ok(())
}

#[test]
fn scale_axpy_mul_acc_match_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(5);
    for n in LENS {
        let x = rng.vec(n, -2.0, 2.0);
        let b = rng.vec(n, -2.0, 2.0);
        let y0 = rng.away_from_zero(n);
        let xd = up(&k, &x)?;
        let bd = up(&k, &b)?;

        let mut want = vec![0.0; n];
        cpu.scale(-1.7, &x, &mut want)?;
        let mut yd = k.alloc_zeros::<f32>(n)?;
        k.scale(-1.7, &xd.as_view(), &mut yd.as_view_mut())?;
        assert_close(&format!("scale n={n}"), &down(&k, &yd)?, &want, ARITH);

        let mut want = y0.clone();
        cpu.axpy(0.3, &x, &mut want)?;
        let mut yd = up(&k, &y0)?;
        k.axpy(0.3, &xd.as_view(), &mut yd.as_view_mut())?;
        assert_close(&format!("axpy n={n}"), &down(&k, &yd)?, &want, ARITH);

        let mut want = y0.clone();
        cpu.mul_acc(&x, &b, &mut want)?;
        let mut yd = up(&k, &y0)?;
        k.mul_acc(&xd.as_view(), &bd.as_view(), &mut yd.as_view_mut())?;
        assert_close(&format!("mul_acc n={n}"), &down(&k, &yd)?, &want, ARITH);
    }
    Ok(())
}

#[test]
fn div_bwd_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(6);
    for n in LENS {
        let a = rng.vec(n, -2.0, 2.0);
        let b = rng.away_from_zero(n);
        let dy = rng.vec(n, -1.0, 1.0);
        let (da0, db0) = (rng.away_from_zero(n), rng.away_from_zero(n));
        let (mut da, mut db) = (da0.clone(), db0.clone());
        cpu.div_bwd(&a, &b, &dy, &mut da, &mut db)?;
        let (ad, bd, dyd) = (up(&k, &a)?, up(&k, &b)?, up(&k, &dy)?);
        let (mut dad, mut dbd) = (up(&k, &da0)?, up(&k, &db0)?);
        k.div_bwd(
            &ad.as_view(),
            &bd.as_view(),
            &dyd.as_view(),
            &mut dad.as_view_mut(),
            &mut dbd.as_view_mut(),
        )?;
        assert_close(&format!("div_bwd da n={n}"), &down(&k, &dad)?, &da, ARITH);
        assert_close(&format!("div_bwd db n={n}"), &down(&k, &dbd)?, &db, ARITH);
    }
    Ok(())
}

#[test]
fn fill_writes_exactly_its_slice() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let mut rng = Rng::new(7);
    for n in LENS {
        let mut yd = k.alloc_zeros::<f32>(n)?;
        k.fill(3.25, &mut yd.as_view_mut())?;
        assert_bits_eq(&format!("fill n={n}"), &down(&k, &yd)?, &vec![3.25; n]);
    }
    // A sub-slice: the elements around it keep their values.
    let y0 = rng.vec(100, -1.0, 1.0);
    let mut yd = up(&k, &y0)?;
    k.fill(-0.5, &mut yd.slice_mut(10..37))?;
    let mut want = y0.clone();
    want[10..37].fill(-0.5);
    assert_bits_eq("fill sub-slice", &down(&k, &yd)?, &want);
    Ok(())
}

// ---------------------------------------------------------------- rows

/// `len` row ids below `rows` with guaranteed duplicates (positions 1, 2
/// and the last repeat position 0's row).
fn dup_indices(rng: &mut Rng, len: usize, rows: u32) -> Vec<u32> {
    let mut idx = rng.indices(len, rows);
    if len >= 4 {
        idx[1] = idx[0];
        idx[2] = idx[0];
        idx[len - 1] = idx[0];
    }
    idx
}

/// A gather copies: exact, including through an index array stored in f32
/// storage (`as_u32`), as the tensor crate keeps it.
#[test]
fn gather_rows_matches_cpu_exactly() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(8);
    for cols in [1usize, 33, 300] {
        for n_idx in [1usize, 100, 5000] {
            let rows = 40u32;
            let src = rng.vec(rows as usize * cols, -1.0, 1.0);
            let idx = dup_indices(&mut rng, n_idx, rows);
            let mut want = vec![0.0; n_idx * cols];
            cpu.gather_rows(&src, cols, &idx, &mut want)?;
            let srcd = up(&k, &src)?;

            let idxd = k.upload(&idx)?;
            let mut dst = k.alloc_zeros::<f32>(n_idx * cols)?;
            k.gather_rows(
                &srcd.as_view(),
                cols,
                &idxd.as_view(),
                &mut dst.as_view_mut(),
            )?;
            let what = format!("gather_rows cols={cols} n_idx={n_idx}");
            assert_bits_eq(&what, &down(&k, &dst)?, &want);

            let as_f32: Vec<f32> = idx.iter().map(|&i| f32::from_bits(i)).collect();
            let idx_f = up(&k, &as_f32)?;
            let mut dst = k.alloc_zeros::<f32>(n_idx * cols)?;
            k.gather_rows(
                &srcd.as_view(),
                cols,
                &as_u32(&idx_f.as_view()),
                &mut dst.as_view_mut(),
            )?;
            assert_bits_eq(&format!("{what} (as_u32)"), &down(&k, &dst)?, &want);
        }
    }
    Ok(())
}

/// Cases of the scatter tests: (cols, n_idx, indices) with duplicates,
/// including one where 64 positions all land on row 3.
fn scatter_cases(rng: &mut Rng, rows: u32) -> Vec<(usize, Vec<u32>)> {
    let mut cases = Vec::new();
    for cols in [1usize, 33, 300] {
        cases.push((cols, dup_indices(rng, 100, rows)));
        cases.push((cols, vec![3; 64]));
        cases.push((cols, dup_indices(rng, 3000, rows)));
    }
    cases
}

/// Atomics add duplicates in an unspecified order: the bound is relative to
/// the magnitudes of everything summed into each element.
#[test]
fn scatter_add_rows_atomic_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(9);
    let rows = 40u32;
    for (cols, idx) in scatter_cases(&mut rng, rows) {
        let n_idx = idx.len();
        let src = rng.vec(n_idx * cols, -1.0, 1.0);
        let dst0 = rng.vec(rows as usize * cols, -1.0, 1.0);
        let mut want = dst0.clone();
        cpu.scatter_add_rows(&src, cols, &idx, &mut want)?;
        let mut mag: Vec<f32> = dst0.iter().map(|v| v.abs()).collect();
        for (i, &r) in idx.iter().enumerate() {
            for c in 0..cols {
                mag[r as usize * cols + c] += src[i * cols + c].abs();
            }
        }
        let (srcd, idxd) = (up(&k, &src)?, k.upload(&idx)?);
        let mut dst = up(&k, &dst0)?;
        k.scatter_add_rows(
            &srcd.as_view(),
            cols,
            &idxd.as_view(),
            &mut dst.as_view_mut(),
        )?;
        assert_within(
            &format!("scatter_add_rows (atomic) cols={cols} n_idx={n_idx}"),
            &down(&k, &dst)?,
            &want,
            |i, _| SUM_RTOL * mag[i],
        );
    }
    Ok(())
}

/// Under `set_deterministic(true)` duplicates add in position order, like
/// the CPU: bit-for-bit equal.
#[test]
fn scatter_add_rows_deterministic_is_bit_exact() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    k.set_deterministic(true);
    assert!(k.deterministic());
    let mut rng = Rng::new(10);
    let rows = 40u32;
    for (cols, idx) in scatter_cases(&mut rng, rows) {
        let n_idx = idx.len();
        let src = rng.vec(n_idx * cols, -1.0, 1.0);
        let dst0 = rng.vec(rows as usize * cols, -1.0, 1.0);
        let mut want = dst0.clone();
        cpu.scatter_add_rows(&src, cols, &idx, &mut want)?;
        let (srcd, idxd) = (up(&k, &src)?, k.upload(&idx)?);
        let mut dst = up(&k, &dst0)?;
        k.scatter_add_rows(
            &srcd.as_view(),
            cols,
            &idxd.as_view(),
            &mut dst.as_view_mut(),
        )?;
        assert_bits_eq(
            &format!("scatter_add_rows (deterministic) cols={cols} n_idx={n_idx}"),
            &down(&k, &dst)?,
            &want,
        );
    }
    Ok(())
}

#[test]
fn broadcast_row_matches_cpu_exactly() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(11);
    for cols in [1usize, 33, 300] {
        for rows in [1usize, 17, 4000] {
            let row = rng.vec(cols, -1.0, 1.0);
            let mut want = vec![0.0; rows * cols];
            cpu.broadcast_row(&row, &mut want)?;
            let rowd = up(&k, &row)?;
            let mut dst = k.alloc_zeros::<f32>(rows * cols)?;
            k.broadcast_row(&rowd.as_view(), &mut dst.as_view_mut())?;
            assert_bits_eq(
                &format!("broadcast_row cols={cols} rows={rows}"),
                &down(&k, &dst)?,
                &want,
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- softmax family

/// Widths around the block reduction's edge cases: one element (31 idle
/// lanes of the one warp), below a warp, just past one, several warps, and
/// wider than the largest block (each thread loops over columns).
const COLS: [usize; 5] = [1, 5, 33, 300, 1500];

/// (rows, cols) of the softmax-family tests: 7 rows of every width, and
/// more rows than the row kernels' grid (64 blocks per SM, about 8.4k on
/// an H100) so blocks loop over rows.
fn row_shapes() -> Vec<(usize, usize)> {
    let mut shapes: Vec<(usize, usize)> = COLS.iter().map(|&c| (7, c)).collect();
    shapes.push((9000, 5));
    shapes
}

#[test]
fn softmax_rows_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(12);
    for (rows, cols) in row_shapes() {
        let x = rng.vec(rows * cols, -5.0, 5.0);
        let mut want = vec![0.0; x.len()];
        cpu.softmax_rows(&x, cols, &mut want)?;
        let xd = up(&k, &x)?;
        let mut yd = k.alloc_zeros::<f32>(x.len())?;
        k.softmax_rows(&xd.as_view(), cols, &mut yd.as_view_mut())?;
        let what = format!("softmax_rows {rows}x{cols}");
        assert_close(&what, &down(&k, &yd)?, &want, TRANSC);
    }
    Ok(())
}

#[test]
fn log_softmax_rows_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(13);
    for (rows, cols) in row_shapes() {
        let x = rng.vec(rows * cols, -5.0, 5.0);
        let mut want = vec![0.0; x.len()];
        cpu.log_softmax_rows(&x, cols, &mut want)?;
        let xd = up(&k, &x)?;
        let mut yd = k.alloc_zeros::<f32>(x.len())?;
        k.log_softmax_rows(&xd.as_view(), cols, &mut yd.as_view_mut())?;
        let what = format!("log_softmax_rows {rows}x{cols}");
        assert_close(&what, &down(&k, &yd)?, &want, TRANSC);
    }
    Ok(())
}

/// Large logits (about 1e4, where one ulp is ~1e-3): the CPU computes
/// `(x - max) - ln(sum)`, exact in its first difference, so the outputs
/// (log-probabilities of a few units) keep full relative accuracy. A kernel
/// that forms `max + ln(sum)` first rounds it to the ulp of 1e4 and loses
/// ~5e-4 absolute: this test holds the GPU to the CPU's formula.
#[test]
fn log_softmax_rows_keeps_accuracy_for_large_logits() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(14);
    for cols in [5usize, 300] {
        let rows = 7;
        let x: Vec<f32> = rng
            .vec(rows * cols, -5.0, 5.0)
            .into_iter()
            .map(|v| v + 1e4)
            .collect();
        let mut want = vec![0.0; x.len()];
        cpu.log_softmax_rows(&x, cols, &mut want)?;
        let xd = up(&k, &x)?;
        let mut yd = k.alloc_zeros::<f32>(x.len())?;
        k.log_softmax_rows(&xd.as_view(), cols, &mut yd.as_view_mut())?;
        let what = format!("log_softmax_rows {rows}x{cols} at 1e4");
        assert_close(&what, &down(&k, &yd)?, &want, TRANSC);
    }
    Ok(())
}

/// `dx += y (dy - <dy, y>)` from softmax's output; `<dy, y>` is a sum of
/// terms whose magnitudes add to at most max|dy| (y sums to 1): [`ARITH`].
#[test]
fn softmax_rows_bwd_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(15);
    for (rows, cols) in row_shapes() {
        let x = rng.vec(rows * cols, -5.0, 5.0);
        let mut y = vec![0.0; x.len()];
        cpu.softmax_rows(&x, cols, &mut y)?;
        let dy = rng.vec(x.len(), -1.0, 1.0);
        let dx0 = rng.away_from_zero(x.len());
        let mut want = dx0.clone();
        cpu.softmax_rows_bwd(&y, &dy, cols, &mut want)?;
        let (yd, dyd) = (up(&k, &y)?, up(&k, &dy)?);
        let mut dxd = up(&k, &dx0)?;
        k.softmax_rows_bwd(&yd.as_view(), &dyd.as_view(), cols, &mut dxd.as_view_mut())?;
        let what = format!("softmax_rows_bwd {rows}x{cols}");
        assert_close(&what, &down(&k, &dxd)?, &want, ARITH);
    }
    Ok(())
}

/// `dx += dy - exp(y) sum(dy)` from log-softmax's output: [`TRANSC`] for
/// the exp, plus the sum's rounding (bounded by [`SUM_RTOL`] times the sum
/// of |dy| over the row) times exp(y).
#[test]
fn log_softmax_rows_bwd_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(16);
    for (rows, cols) in row_shapes() {
        let x = rng.vec(rows * cols, -5.0, 5.0);
        let mut y = vec![0.0; x.len()];
        cpu.log_softmax_rows(&x, cols, &mut y)?;
        let dy = rng.vec(x.len(), -1.0, 1.0);
        let dx0 = rng.away_from_zero(x.len());
        let mut want = dx0.clone();
        cpu.log_softmax_rows_bwd(&y, &dy, cols, &mut want)?;
        let abs_sums: Vec<f32> = dy
            .chunks(cols)
            .map(|r| r.iter().map(|v| v.abs()).sum())
            .collect();
        let (yd, dyd) = (up(&k, &y)?, up(&k, &dy)?);
        let mut dxd = up(&k, &dx0)?;
        k.log_softmax_rows_bwd(&yd.as_view(), &dyd.as_view(), cols, &mut dxd.as_view_mut())?;
        assert_within(
            &format!("log_softmax_rows_bwd {rows}x{cols}"),
            &down(&k, &dxd)?,
            &want,
            |i, c| TRANSC.bound(c) + SUM_RTOL * y[i].exp() * abs_sums[i / cols],
        );
    }
    Ok(())
}

#[test]
fn nll_log_softmax_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(17);
    for (rows, cols) in row_shapes() {
        let x = rng.vec(rows * cols, -5.0, 5.0);
        let labels = rng.indices(rows, cols as u32);
        let (mut probs, mut loss) = (vec![0.0; x.len()], vec![0.0; rows]);
        cpu.nll_log_softmax(&x, cols, &labels, &mut probs, &mut loss)?;
        let (xd, ld) = (up(&k, &x)?, k.upload(&labels)?);
        let mut pd = k.alloc_zeros::<f32>(x.len())?;
        let mut lossd = k.alloc_zeros::<f32>(rows)?;
        k.nll_log_softmax(
            &xd.as_view(),
            cols,
            &ld.as_view(),
            &mut pd.as_view_mut(),
            &mut lossd.as_view_mut(),
        )?;
        let what = format!("nll_log_softmax {rows}x{cols}");
        assert_close(&format!("{what} probs"), &down(&k, &pd)?, &probs, TRANSC);
        assert_close(&format!("{what} loss"), &down(&k, &lossd)?, &loss, TRANSC);
    }
    Ok(())
}

/// `dx[r] += dloss[r] (probs[r] - onehot(labels[r]))`: arithmetic only.
#[test]
fn nll_log_softmax_bwd_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(18);
    for (rows, cols) in row_shapes() {
        let x = rng.vec(rows * cols, -5.0, 5.0);
        let labels = rng.indices(rows, cols as u32);
        let (mut probs, mut loss) = (vec![0.0; x.len()], vec![0.0; rows]);
        cpu.nll_log_softmax(&x, cols, &labels, &mut probs, &mut loss)?;
        let dloss = rng.vec(rows, -2.0, 2.0);
        let dx0 = rng.away_from_zero(x.len());
        let mut want = dx0.clone();
        cpu.nll_log_softmax_bwd(&probs, cols, &labels, &dloss, &mut want)?;
        let (pd, ld, dld) = (up(&k, &probs)?, k.upload(&labels)?, up(&k, &dloss)?);
        let mut dxd = up(&k, &dx0)?;
        k.nll_log_softmax_bwd(
            &pd.as_view(),
            cols,
            &ld.as_view(),
            &dld.as_view(),
            &mut dxd.as_view_mut(),
        )?;
        let what = format!("nll_log_softmax_bwd {rows}x{cols}");
        assert_close(&what, &down(&k, &dxd)?, &want, ARITH);
    }
    Ok(())
}

/// Sums in a different order: bounded by [`SUM_RTOL`] times the sum of the
/// row's magnitudes (mixed signs, so the result itself may be small).
#[test]
fn row_sums_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(19);
    for (rows, cols) in row_shapes() {
        let x = rng.vec(rows * cols, -1.0, 1.0);
        let mut want = vec![0.0; rows];
        cpu.row_sums(&x, cols, &mut want)?;
        let mag: Vec<f32> = x
            .chunks(cols)
            .map(|r| r.iter().map(|v| v.abs()).sum())
            .collect();
        let xd = up(&k, &x)?;
        let mut out = k.alloc_zeros::<f32>(rows)?;
        k.row_sums(&xd.as_view(), cols, &mut out.as_view_mut())?;
        assert_within(
            &format!("row_sums {rows}x{cols}"),
            &down(&k, &out)?,
            &want,
            |i, _| SUM_RTOL * mag[i],
        );
    }
    Ok(())
}

/// Accumulates into a nonzero `out`; bound as [`row_sums_matches_cpu`],
/// over the column and the initial value.
#[test]
fn col_sums_acc_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(20);
    let mut shapes = row_shapes();
    shapes.push((3, 70_000)); // more columns than one block of threads, several blocks
    for (rows, cols) in shapes {
        let x = rng.vec(rows * cols, -1.0, 1.0);
        let out0 = rng.away_from_zero(cols);
        let mut want = out0.clone();
        cpu.col_sums_acc(&x, cols, &mut want)?;
        let mut mag: Vec<f32> = out0.iter().map(|v| v.abs()).collect();
        for r in 0..rows {
            for c in 0..cols {
                mag[c] += x[r * cols + c].abs();
            }
        }
        let xd = up(&k, &x)?;
        let mut out = up(&k, &out0)?;
        k.col_sums_acc(&xd.as_view(), cols, &mut out.as_view_mut())?;
        assert_within(
            &format!("col_sums_acc {rows}x{cols}"),
            &down(&k, &out)?,
            &want,
            |i, _| SUM_RTOL * mag[i],
        );
    }
    Ok(())
}

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
            k.lstm_fwd(
                &gd.as_view(),
                &cpd.as_view(),
                hd,
                &mut actd.as_view_mut(),
                &mut cd.as_view_mut(),
                &mut hdv.as_view_mut(),
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
            k.lstm_bwd(
                &actd.as_view(),
                &cpd.as_view(),
                &cd.as_view(),
                &dcd.as_view(),
                &dhd.as_view(),
                hd,
                &mut dgd.as_view_mut(),
                &mut dcpd.as_view_mut(),
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
            k.gru_fwd(
                &xwd.as_view(),
                &hud.as_view(),
                &hpd.as_view(),
                hd,
                &mut actd.as_view_mut(),
                &mut hdv.as_view_mut(),
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
            k.gru_bwd(
                &actd.as_view(),
                &hud.as_view(),
                &hpd.as_view(),
                &dhd.as_view(),
                hd,
                &mut dxwd.as_view_mut(),
                &mut dhud.as_view_mut(),
                &mut dhpd.as_view_mut(),
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
            let mv = md.as_view();
            let mut actd = k.alloc_zeros::<f32>(act.len())?;
            let mut cd = k.alloc_zeros::<f32>(c.len())?;
            let mut hdv = k.alloc_zeros::<f32>(h.len())?;
            k.tree_lstm_leaf_fwd(
                &gd.as_view(),
                dropout.then_some(&mv),
                hd,
                &mut actd.as_view_mut(),
                &mut cd.as_view_mut(),
                &mut hdv.as_view_mut(),
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
            k.tree_lstm_leaf_bwd(
                &actd.as_view(),
                dropout,
                &cd.as_view(),
                &dcd.as_view(),
                &dhd.as_view(),
                hd,
                &mut dgd.as_view_mut(),
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
            let mv = md.as_view();
            let mut actd = k.alloc_zeros::<f32>(act.len())?;
            let mut cd = k.alloc_zeros::<f32>(c.len())?;
            let mut hdv = k.alloc_zeros::<f32>(h.len())?;
            k.tree_lstm_node_fwd(
                &gd.as_view(),
                dropout.then_some(&mv),
                &cld.as_view(),
                &crd.as_view(),
                hd,
                &mut actd.as_view_mut(),
                &mut cd.as_view_mut(),
                &mut hdv.as_view_mut(),
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
            k.tree_lstm_node_bwd(
                &actd.as_view(),
                dropout,
                &cld.as_view(),
                &crd.as_view(),
                &cd.as_view(),
                &dcd.as_view(),
                &dhd.as_view(),
                hd,
                &mut dgd.as_view_mut(),
                &mut dcld.as_view_mut(),
                &mut dcrd.as_view_mut(),
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

// ---------------------------------------------------------------- optimizers
//
// Three steps with fresh gradients each, so the state (velocity, accum,
// m, v) is carried and compared. Only arithmetic and sqrt (correctly
// rounded on both sides): [`ARITH`].

const OPT_LENS: [usize; 3] = [1, 1000, 300_001];
const STEPS: u64 = 3;

fn adam_cfg() -> Adam {
    Adam {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.05,
    }
}

/// The device's per-step Adam numbers, from the CPU's own f64 bias
/// corrections.
fn adam_args(cfg: &Adam, step: u64) -> AdamArgs {
    let (step_size, inv_sqrt_bc2) = cfg.bias_corrections(step).expect("valid step");
    AdamArgs {
        beta1: cfg.beta1,
        beta2: cfg.beta2,
        eps: cfg.eps,
        weight_decay: cfg.weight_decay,
        step_size,
        inv_sqrt_bc2,
    }
}

fn sgd_dense(seed: u64, momentum: f32) -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(seed);
    let cfg = Sgd {
        lr: 0.1,
        momentum,
        weight_decay: 0.05,
    };
    for n in OPT_LENS {
        let mut p = rng.vec(n, -1.0, 1.0);
        let mut v = if momentum == 0.0 {
            vec![]
        } else {
            vec![0.0; n]
        };
        let mut pd = up(&k, &p)?;
        let mut vd = k.alloc_zeros::<f32>(n)?;
        for _ in 0..STEPS {
            let g = rng.vec(n, -1.0, 1.0);
            cpu.sgd_step(&cfg, &mut p, &g, &mut v)?;
            let gd = up(&k, &g)?;
            let mut vv = vd.as_view_mut();
            let velocity = (momentum != 0.0).then_some(&mut vv);
            k.sgd_step(
                cfg.lr,
                cfg.momentum,
                cfg.weight_decay,
                &mut pd.as_view_mut(),
                &gd.as_view(),
                velocity,
            )?;
        }
        let what = format!("sgd momentum={momentum} n={n}");
        assert_close(&format!("{what} param"), &down(&k, &pd)?, &p, ARITH);
        if momentum != 0.0 {
            assert_close(&format!("{what} velocity"), &down(&k, &vd)?, &v, ARITH);
        }
    }
    Ok(())
}

#[test]
fn sgd_matches_cpu() -> TestResult {
    sgd_dense(27, 0.0)
}

#[test]
fn sgd_momentum_matches_cpu() -> TestResult {
    sgd_dense(28, 0.9)
}

#[test]
fn adagrad_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(29);
    let cfg = Adagrad {
        lr: 0.1,
        eps: 1e-8,
        weight_decay: 0.05,
    };
    for n in OPT_LENS {
        let mut p = rng.vec(n, -1.0, 1.0);
        let mut acc = vec![0.0; n];
        let (mut pd, mut accd) = (up(&k, &p)?, k.alloc_zeros::<f32>(n)?);
        for _ in 0..STEPS {
            let g = rng.vec(n, -1.0, 1.0);
            cpu.adagrad_step(&cfg, &mut p, &g, &mut acc)?;
            let gd = up(&k, &g)?;
            k.adagrad_step(
                cfg.lr,
                cfg.eps,
                cfg.weight_decay,
                &mut pd.as_view_mut(),
                &gd.as_view(),
                &mut accd.as_view_mut(),
            )?;
        }
        assert_close(&format!("adagrad n={n} param"), &down(&k, &pd)?, &p, ARITH);
        assert_close(
            &format!("adagrad n={n} accum"),
            &down(&k, &accd)?,
            &acc,
            ARITH,
        );
    }
    Ok(())
}

#[test]
fn adam_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(30);
    let cfg = adam_cfg();
    for n in OPT_LENS {
        let mut p = rng.vec(n, -1.0, 1.0);
        let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
        let mut pd = up(&k, &p)?;
        let (mut md, mut vd) = (k.alloc_zeros::<f32>(n)?, k.alloc_zeros::<f32>(n)?);
        for step in 1..=STEPS {
            let g = rng.vec(n, -1.0, 1.0);
            cpu.adam_step(&cfg, step, &mut p, &g, &mut m, &mut v)?;
            let gd = up(&k, &g)?;
            k.adam_step(
                &adam_args(&cfg, step),
                &mut pd.as_view_mut(),
                &gd.as_view(),
                &mut md.as_view_mut(),
                &mut vd.as_view_mut(),
            )?;
        }
        assert_close(&format!("adam n={n} param"), &down(&k, &pd)?, &p, ARITH);
        assert_close(&format!("adam n={n} m"), &down(&k, &md)?, &m, ARITH);
        assert_close(&format!("adam n={n} v"), &down(&k, &vd)?, &v, ARITH);
    }
    Ok(())
}

// Sparse rows: a 40-row table, two steps over two distinct-row lists (in
// no particular order). Listed rows get the dense update ([`ARITH`]); rows
// listed in neither step, and their state, must be BIT-unchanged.

const TABLE_ROWS: usize = 40;
const STEP_ROWS: [&[u32]; 2] = [&[7, 3, 39, 0, 22, 12], &[12, 5, 30, 7]];

/// Table rows no step lists.
fn untouched_rows() -> Vec<usize> {
    (0..TABLE_ROWS)
        .filter(|r| !STEP_ROWS.iter().any(|s| s.contains(&(*r as u32))))
        .collect()
}

/// Compares a sparse-updated table with the CPU's: listed rows within
/// [`ARITH`], untouched rows bit-equal to their initial values.
fn check_sparse(what: &str, gpu: &[f32], cpu: &[f32], initial: &[f32], cols: usize) {
    assert_close(what, gpu, cpu, ARITH);
    for r in untouched_rows() {
        let span = r * cols..(r + 1) * cols;
        assert_bits_eq(
            &format!("{what}: untouched row {r}"),
            &gpu[span.clone()],
            &initial[span],
        );
    }
}

#[derive(Clone, Copy, Debug)]
enum SparseOpt {
    Sgd,
    SgdMomentum,
    Adagrad,
    Adam,
}

fn sparse_case(opt: SparseOpt, seed: u64) -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(seed);
    let sgd = Sgd {
        lr: 0.1,
        momentum: if matches!(opt, SparseOpt::SgdMomentum) {
            0.9
        } else {
            0.0
        },
        weight_decay: 0.05,
    };
    let adagrad = Adagrad {
        lr: 0.1,
        eps: 1e-8,
        weight_decay: 0.05,
    };
    let adam = adam_cfg();
    for cols in [1usize, 33] {
        let n = TABLE_ROWS * cols;
        let p0 = rng.vec(n, -1.0, 1.0);
        // Nonzero state everywhere, so "untouched" means something.
        let (a0, b0) = match opt {
            SparseOpt::Sgd | SparseOpt::SgdMomentum => (rng.vec(n, -1.0, 1.0), vec![]),
            SparseOpt::Adagrad => (rng.vec(n, 0.1, 1.0), vec![]),
            SparseOpt::Adam => (rng.vec(n, -0.1, 0.1), rng.vec(n, 1e-4, 1e-2)),
        };
        let (mut p, mut a, mut b) = (p0.clone(), a0.clone(), b0.clone());
        let mut pd = up(&k, &p0)?;
        let mut ad = up(&k, &a0)?;
        let mut bd = up(&k, &if b0.is_empty() { vec![0.0] } else { b0.clone() })?;
        for (i, rows) in STEP_ROWS.iter().enumerate() {
            let step = i as u64 + 1;
            let g = rng.vec(rows.len() * cols, -1.0, 1.0);
            let (gd, rd) = (up(&k, &g)?, k.upload(rows)?);
            let (gv, rv) = (gd.as_view(), rd.as_view());
            let set = RowSet { rows: &rv, cols };
            match opt {
                SparseOpt::Sgd => {
                    cpu.sgd_step_rows(&sgd, &mut p, cols, rows, &g, &mut [])?;
                    k.sgd_step_rows(
                        sgd.lr,
                        0.0,
                        sgd.weight_decay,
                        &mut pd.as_view_mut(),
                        set,
                        &gv,
                        None,
                    )?;
                }
                SparseOpt::SgdMomentum => {
                    cpu.sgd_step_rows(&sgd, &mut p, cols, rows, &g, &mut a)?;
                    k.sgd_step_rows(
                        sgd.lr,
                        sgd.momentum,
                        sgd.weight_decay,
                        &mut pd.as_view_mut(),
                        set,
                        &gv,
                        Some(&mut ad.as_view_mut()),
                    )?;
                }
                SparseOpt::Adagrad => {
                    cpu.adagrad_step_rows(&adagrad, &mut p, cols, rows, &g, &mut a)?;
                    k.adagrad_step_rows(
                        adagrad.lr,
                        adagrad.eps,
                        adagrad.weight_decay,
                        &mut pd.as_view_mut(),
                        set,
                        &gv,
                        &mut ad.as_view_mut(),
                    )?;
                }
                SparseOpt::Adam => {
                    cpu.adam_step_rows(&adam, step, &mut p, cols, rows, &g, &mut a, &mut b)?;
                    k.adam_step_rows(
                        &adam_args(&adam, step),
                        &mut pd.as_view_mut(),
                        set,
                        &gv,
                        &mut ad.as_view_mut(),
                        &mut bd.as_view_mut(),
                    )?;
                }
            }
        }
        let what = format!("{opt:?} rows cols={cols}");
        check_sparse(&format!("{what} param"), &down(&k, &pd)?, &p, &p0, cols);
        if !matches!(opt, SparseOpt::Sgd) {
            check_sparse(&format!("{what} state"), &down(&k, &ad)?, &a, &a0, cols);
        } else {
            // Without momentum the velocity is neither read nor written.
            assert_bits_eq(&format!("{what} velocity"), &down(&k, &ad)?, &a0);
        }
        if matches!(opt, SparseOpt::Adam) {
            check_sparse(&format!("{what} v"), &down(&k, &bd)?, &b, &b0, cols);
        }
    }
    Ok(())
}

#[test]
fn sgd_rows_matches_cpu() -> TestResult {
    sparse_case(SparseOpt::Sgd, 31)
}

#[test]
fn sgd_momentum_rows_matches_cpu() -> TestResult {
    sparse_case(SparseOpt::SgdMomentum, 32)
}

#[test]
fn adagrad_rows_matches_cpu() -> TestResult {
    sparse_case(SparseOpt::Adagrad, 33)
}

#[test]
fn adam_rows_matches_cpu() -> TestResult {
    sparse_case(SparseOpt::Adam, 34)
}

// ---------------------------------------------------------------- sgemm
//
// Bound per element of C: GEMM_RTOL * sqrt(k) * (|alpha| sum_p |A_ip B_pj|
// + |beta C0_ij|). A dot product of k terms in any order (cuBLAS tiles and
// may split k) errs by about sqrt(k) eps times the sum of the terms'
// magnitudes for random rounding; 1e-5 leaves ~80x margin over eps while a
// wrong operand, transpose or leading dimension changes elements by O(1)
// of their magnitude. Elements of C outside the m x n product (padding
// between rows, gaps between batches) must stay bit-unchanged.

const GEMM_RTOL: f32 = 1e-5;

/// A row-major operand: stored `rows x cols` with leading dimension
/// `ld = cols + pad` (the padding is random too, and must not be read).
struct Mat {
    data: Vec<f32>,
    ld: usize,
}

impl Mat {
    fn random(rng: &mut Rng, rows: usize, cols: usize, pad: usize) -> Mat {
        let ld = cols + pad;
        Mat {
            data: rng.vec(rows * ld, -1.0, 1.0),
            ld,
        }
    }
}

/// `op(X)[i, j]` of a stored matrix starting at `off`.
fn at(x: &[f32], off: usize, ld: usize, transposed: bool, i: usize, j: usize) -> f32 {
    if transposed {
        x[off + j * ld + i]
    } else {
        x[off + i * ld + j]
    }
}

fn tr(t: bool) -> Transpose {
    if t {
        Transpose::Yes
    } else {
        Transpose::No
    }
}

/// The bound of every element of a C buffer: `Some(magnitude)` for the
/// product's elements (one product at `c_off` with the operands at `a_off`,
/// `b_off`), `None` (exact) elsewhere; fills `bounds`.
#[allow(clippy::type_complexity)]
fn gemm_magnitudes(
    bounds: &mut [Option<f32>],
    (m, n, kk): (usize, usize, usize),
    alpha: f32,
    (a, a_off, lda, ta): (&[f32], usize, usize, bool),
    (b, b_off, ldb, tb): (&[f32], usize, usize, bool),
    beta: f32,
    (c0, c_off, ldc): (&[f32], usize, usize),
) {
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..kk {
                let x = at(a, a_off, lda, ta, i, p) * at(b, b_off, ldb, tb, p, j);
                s += f64::from(x.abs());
            }
            let e = c_off + i * ldc + j;
            let mag = f64::from(alpha.abs()) * s + f64::from((beta * c0[e]).abs());
            bounds[e] = Some(GEMM_RTOL * (kk as f32).sqrt() * mag as f32);
        }
    }
}

fn assert_gemm(what: &str, gpu: &[f32], cpu: &[f32], bounds: &[Option<f32>]) {
    assert_within(what, gpu, cpu, |i, _| bounds[i].unwrap_or(0.0));
}

#[test]
fn sgemm_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(35);
    let shapes = [
        (1, 1, 1),
        (5, 3, 7),
        (17, 33, 65),
        (64, 5, 300),
        (130, 70, 257),
    ];
    for (m, n, kk) in shapes {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for (alpha, beta) in [(1.0f32, 0.0f32), (0.75, -0.5)] {
                let what = format!("sgemm {m}x{n}x{kk} ta={ta} tb={tb} alpha={alpha} beta={beta}");
                let (ar, ac) = if ta { (kk, m) } else { (m, kk) };
                let (br, bc) = if tb { (n, kk) } else { (kk, n) };
                let a = Mat::random(&mut rng, ar, ac, 3);
                let b = Mat::random(&mut rng, br, bc, 5);
                let ldc = n + 2;
                let c0 = rng.vec(m * ldc, -1.0, 1.0);
                let mut want = c0.clone();
                cpu.sgemm(
                    tr(ta),
                    tr(tb),
                    m,
                    n,
                    kk,
                    alpha,
                    &a.data,
                    a.ld,
                    &b.data,
                    b.ld,
                    beta,
                    &mut want,
                    ldc,
                )?;
                let (adev, bdev) = (up(&k, &a.data)?, up(&k, &b.data)?);
                let (av, bv) = (adev.as_view(), bdev.as_view());
                let mut cd = up(&k, &c0)?;
                k.sgemm(
                    m,
                    n,
                    kk,
                    alpha,
                    Operand {
                        data: &av,
                        transposed: ta,
                        ld: a.ld,
                    },
                    Operand {
                        data: &bv,
                        transposed: tb,
                        ld: b.ld,
                    },
                    beta,
                    &mut cd.as_view_mut(),
                    ldc,
                )?;
                let mut bounds = vec![None; c0.len()];
                gemm_magnitudes(
                    &mut bounds,
                    (m, n, kk),
                    alpha,
                    (&a.data, 0, a.ld, ta),
                    (&b.data, 0, b.ld, tb),
                    beta,
                    (&c0, 0, ldc),
                );
                assert_gemm(&what, &down(&k, &cd)?, &want, &bounds);
            }
        }
    }
    Ok(())
}

/// `batch` products at strides with gaps between them, against a loop of
/// CPU sgemms at the same offsets.
#[test]
fn sgemm_strided_batched_matches_cpu_loop() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(36);
    let batch = 3;
    for (m, n, kk) in [(9, 7, 11), (33, 17, 40)] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (alpha, beta) = (0.5f32, 1.25f32);
            let what = format!("sgemm_strided_batched {batch}x{m}x{n}x{kk} ta={ta} tb={tb}");
            let (ar, ac) = if ta { (kk, m) } else { (m, kk) };
            let (br, bc) = if tb { (n, kk) } else { (kk, n) };
            let (lda, ldb, ldc) = (ac + 2, bc + 1, n + 3);
            let (sa, sb, sc) = (ar * lda + 5, br * ldb + 2, m * ldc + 7);
            let a = rng.vec(sa * (batch - 1) + ar * lda, -1.0, 1.0);
            let b = rng.vec(sb * (batch - 1) + br * ldb, -1.0, 1.0);
            let c0 = rng.vec(sc * (batch - 1) + m * ldc, -1.0, 1.0);
            let mut want = c0.clone();
            let mut bounds = vec![None; c0.len()];
            for i in 0..batch {
                cpu.sgemm(
                    tr(ta),
                    tr(tb),
                    m,
                    n,
                    kk,
                    alpha,
                    &a[i * sa..],
                    lda,
                    &b[i * sb..],
                    ldb,
                    beta,
                    &mut want[i * sc..],
                    ldc,
                )?;
                gemm_magnitudes(
                    &mut bounds,
                    (m, n, kk),
                    alpha,
                    (&a, i * sa, lda, ta),
                    (&b, i * sb, ldb, tb),
                    beta,
                    (&c0, i * sc, ldc),
                );
            }
            let (adev, bdev) = (up(&k, &a)?, up(&k, &b)?);
            let (av, bv) = (adev.as_view(), bdev.as_view());
            let mut cd = up(&k, &c0)?;
            k.sgemm_strided_batched(
                batch,
                m,
                n,
                kk,
                alpha,
                (
                    Operand {
                        data: &av,
                        transposed: ta,
                        ld: lda,
                    },
                    sa,
                ),
                (
                    Operand {
                        data: &bv,
                        transposed: tb,
                        ld: ldb,
                    },
                    sb,
                ),
                beta,
                (&mut cd.as_view_mut(), sc, ldc),
            )?;
            assert_gemm(&what, &down(&k, &cd)?, &want, &bounds);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- errors

/// An index VALUE out of range is found on the device, reported by the
/// next check naming the kernel, and cleared: the check after is clean.
/// In-range positions are still gathered.
#[test]
fn out_of_range_gather_index_is_reported_by_the_next_check() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let src: Vec<f32> = (0..12).map(|v| v as f32).collect(); // 4 rows x 3
    let srcd = up(&k, &src)?;
    let idx = k.upload(&[2u32, 9, 0])?;
    let mut dst = k.alloc_zeros::<f32>(9)?;
    k.gather_rows(&srcd.as_view(), 3, &idx.as_view(), &mut dst.as_view_mut())?;
    match k.check() {
        Err(CudaError::Index {
            kernel,
            index,
            position,
            bound,
        }) => {
            assert_eq!(kernel, "gather_rows");
            assert_eq!((index, position, bound), (9, 1, 4));
        }
        other => panic!("expected CudaError::Index from gather_rows, got {other:?}"),
    }
    k.check()?;
    let got = down(&k, &dst)?; // a clean download too
    assert_bits_eq("gathered rows", &got[..3], &src[6..9]);
    assert_bits_eq("skipped row", &got[3..6], &[0.0; 3]);
    assert_bits_eq("gathered rows", &got[6..], &src[..3]);
    Ok(())
}

/// The same for scatter-add (both modes) and for an out-of-range label.
#[test]
fn out_of_range_scatter_index_and_label_are_reported() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let src = up(&k, &[1.0; 6])?;
    let idx = k.upload(&[1u32, 7])?;
    for deterministic in [false, true] {
        k.set_deterministic(deterministic);
        let mut dst = k.alloc_zeros::<f32>(9)?;
        k.scatter_add_rows(&src.as_view(), 3, &idx.as_view(), &mut dst.as_view_mut())?;
        match k.check() {
            Err(CudaError::Index {
                kernel,
                index,
                position,
                bound,
            }) => assert_eq!(
                (kernel, index, position, bound),
                ("scatter_add_rows", 7, 1, 3)
            ),
            other => panic!("expected CudaError::Index from scatter_add_rows, got {other:?}"),
        }
        k.check()?;
    }
    let x = up(&k, &[0.5; 8])?; // 2 rows x 4
    let labels = k.upload(&[3u32, 4])?;
    let mut probs = k.alloc_zeros::<f32>(8)?;
    let mut loss = k.alloc_zeros::<f32>(2)?;
    k.nll_log_softmax(
        &x.as_view(),
        4,
        &labels.as_view(),
        &mut probs.as_view_mut(),
        &mut loss.as_view_mut(),
    )?;
    match k.check() {
        Err(CudaError::Index {
            kernel,
            index,
            position,
            bound,
        }) => assert_eq!(
            (kernel, index, position, bound),
            ("nll_log_softmax", 4, 1, 4)
        ),
        other => panic!("expected CudaError::Index from nll_log_softmax, got {other:?}"),
    }
    k.check()?;
    Ok(())
}

/// A shape mismatch is found on the host: `Len`, and nothing launched.
#[test]
fn length_mismatch_is_len_before_any_launch() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let a = up(&k, &[1.0; 10])?;
    let b = up(&k, &[1.0; 9])?;
    let mut y = k.alloc_zeros::<f32>(10)?;
    let before = k.launches();
    let r = k.zip(Zip::Add, &a.as_view(), &b.as_view(), &mut y.as_view_mut());
    assert_eq!(k.launches(), before, "a launch (or copy) was issued");
    match r {
        Err(CudaError::Len {
            kernel,
            arg,
            got,
            expected,
        }) => assert_eq!((kernel, arg, got, expected), ("zip", "b", 9, 10)),
        other => panic!("expected CudaError::Len, got {other:?}"),
    }
    // b = 9 rows come from c_prev (H = 1): gates of 10 elements are not 9 x 4.
    let r = k.lstm_fwd(
        &a.as_view(),
        &b.as_view(),
        1,
        &mut y.as_view_mut(),
        &mut k.alloc_zeros::<f32>(9)?.as_view_mut(),
        &mut k.alloc_zeros::<f32>(9)?.as_view_mut(),
    );
    assert!(
        matches!(
            r,
            Err(CudaError::Len {
                kernel: "lstm_fwd",
                arg: "gates",
                got: 10,
                expected: 36
            })
        ),
        "{r:?}"
    );
    k.check()?;
    Ok(())
}

/// An impossible allocation is `OutOfMemory` naming the bytes, not a panic.
#[test]
fn huge_allocation_is_out_of_memory() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let len = 1usize << 40;
    let Err(e) = k.alloc_zeros::<f32>(len) else {
        panic!("allocated 4 TiB on one device");
    };
    let msg = e.to_string();
    match e {
        CudaError::OutOfMemory { bytes, ordinal, .. } => {
            assert_eq!((bytes, ordinal), (len * 4, 0));
            assert!(msg.contains(&(len * 4).to_string()), "{msg}");
        }
        other => panic!("expected CudaError::OutOfMemory, got {other}"),
    }
    // The context is still usable.
    let x = up(&k, &[1.0, 2.0])?;
    assert_eq!(down(&k, &x)?, vec![1.0, 2.0]);
    Ok(())
}

// ---------------------------------------------------------------- user kernels

const SILU: &str = r#"
extern "C" __global__ void parity_silu(const float* x, float* y, unsigned long long n) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)blockDim.x * gridDim.x) {
        float v = x[i];
        y[i] = v / (1.0f + expf(-v));
    }
}
"#;

/// A user's kernel compiled by NVRTC, `y = x * sigmoid(x)`, against a CPU
/// loop with std's exp ([`TRANSC`]).
#[test]
fn user_kernel_silu_matches_cpu_loop() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let kernel = UserKernel {
        name: "parity_silu",
        source: SILU,
    };
    let f = k.user_function(kernel)?;
    let _cached = k.user_function(kernel)?;
    let mut rng = Rng::new(37);
    for n in LENS {
        let x = rng.vec(n, -8.0, 8.0);
        let want: Vec<f32> = x.iter().map(|&v| v / (1.0 + (-v).exp())).collect();
        let xd = up(&k, &x)?;
        let mut yd = k.alloc_zeros::<f32>(n)?;
        let n64 = n as u64;
        {
            let (xv, mut yv) = (xd.as_view(), yd.as_view_mut());
            let mut launch = k.user_launch(&f);
            launch.arg(&xv).arg(&mut yv).arg(&n64);
            // SAFETY: parity_silu takes (const float*, float*, unsigned long
            // long), matching the three arguments pushed in order; both
            // slices hold n elements and the grid-stride loop stops at n.
            unsafe { launch.launch(k.launch_config(n)) }?;
        }
        assert_close(&format!("user silu n={n}"), &down(&k, &yd)?, &want, TRANSC);
    }
    Ok(())
}

// ------------------------------------------------ column blocks, row scaling, maxima

/// Column blocks (copy and accumulate), row scaling and the running maximum
/// with its gradient routing equal the CPU kernels bit for bit (no
/// arithmetic beyond one add or multiply per element).
#[test]
fn column_blocks_row_scaling_and_maxima_match_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(41);
    let (rows, sc, dc) = (37usize, 20usize, 33usize);
    let src = rng.vec(rows * sc, -1.0, 1.0);
    let dst0 = rng.vec(rows * dc, -1.0, 1.0);
    for acc in [false, true] {
        let mut want = dst0.clone();
        cpu.copy_cols(&src, sc, 3, &mut want, dc, 11, 9, acc)?;
        let (s, mut d) = (up(&k, &src)?, up(&k, &dst0)?);
        k.copy_cols(&s.as_view(), sc, 3, &mut d.as_view_mut(), dc, 11, 9, acc)?;
        assert_bits_eq(&format!("copy_cols acc={acc}"), &down(&k, &d)?, &want);
    }
    let (x, s) = (rng.vec(rows * sc, -2.0, 2.0), rng.vec(rows, -2.0, 2.0));
    let y0 = rng.vec(rows * sc, -1.0, 1.0);
    for acc in [false, true] {
        let mut want = y0.clone();
        cpu.scale_rows(&x, sc, &s, &mut want, acc)?;
        let (xd, sd, mut yd) = (up(&k, &x)?, up(&k, &s)?, up(&k, &y0)?);
        k.scale_rows(&xd.as_view(), sc, &sd.as_view(), &mut yd.as_view_mut(), acc)?;
        assert_close(
            &format!("scale_rows acc={acc}"),
            &down(&k, &yd)?,
            &want,
            ARITH,
        );
    }
    // A running maximum over 4 arguments with ties and a NaN, then routing.
    let n = 1000;
    let mut args: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(n, -1.0, 1.0)).collect();
    let tied = args[1][..10].to_vec();
    args[2][..10].copy_from_slice(&tied); // ties: the first keeps it
    args[3][20] = f32::NAN;
    let (mut best, mut arg) = (args[0].clone(), vec![0u32; n]);
    for (j, a) in args.iter().enumerate().skip(1) {
        cpu.max_update(a, j as u32, &mut best, &mut arg)?;
    }
    let mut bd = up(&k, &args[0])?;
    let mut ad = k.alloc_zeros::<f32>(n)?;
    for (j, a) in args.iter().enumerate().skip(1) {
        let ad_ = up(&k, a)?;
        k.max_update(
            &ad_.as_view(),
            j as u32,
            &mut bd.as_view_mut(),
            &mut ad.as_view_mut(),
        )?;
    }
    assert_bits_eq("max_update best", &down(&k, &bd)?, &best);
    let arg_bits: Vec<f32> = arg.iter().map(|&a| f32::from_bits(a)).collect();
    assert_bits_eq("max_update arg", &down(&k, &ad)?, &arg_bits);
    let dy = rng.vec(n, -1.0, 1.0);
    let dx0 = rng.vec(n, -1.0, 1.0);
    for j in 0..4u32 {
        let mut want = dx0.clone();
        cpu.max_route(&dy, &arg, j, &mut want)?;
        let (dyd, mut dxd) = (up(&k, &dy)?, up(&k, &dx0)?);
        let av = ad.as_view();
        k.max_route(
            &dyd.as_view(),
            &sheaf_kernels_cuda::as_u32(&av),
            j,
            &mut dxd.as_view_mut(),
        )?;
        assert_bits_eq(&format!("max_route {j}"), &down(&k, &dxd)?, &want);
    }
    Ok(())
}
