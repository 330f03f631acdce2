//! GPU-vs-CPU parity of the optimizer updates, dense and on listed rows.
//!
//! Each test opens the device first and returns early (printing why) when
//! there is none. Tolerances are documented in `common`.

#![allow(clippy::too_many_arguments, clippy::needless_range_loop)]

mod common;

use common::prelude::*;

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
                    // A velocity passed with momentum 0 must be ignored
                    // (checked bit for bit below), as the dense step and
                    // the CPU ignore it.
                    k.sgd_step_rows(
                        sgd.lr,
                        0.0,
                        sgd.weight_decay,
                        &mut pd.as_view_mut(),
                        set,
                        &gv,
                        Some(&mut ad.as_view_mut()),
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
