//! GPU-vs-CPU parity: the elementwise and row kernels against
//! `sheaf-kernels-cpu` on random inputs, element by element (the other
//! families: `parity_*.rs`).
//!
//! Each test opens the device first and returns early (printing why) when
//! there is none, so the suite builds and passes on machines without CUDA
//! and really runs on a GPU. Tolerances are documented in `common`.

#![allow(clippy::too_many_arguments, clippy::needless_range_loop)]

mod common;

use common::prelude::*;

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
