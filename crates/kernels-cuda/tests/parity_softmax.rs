//! GPU-vs-CPU parity of the softmax family: softmax, log-softmax, the
//! cross-entropy loss, row and column sums.
//!
//! Each test opens the device first and returns early (printing why) when
//! there is none. Tolerances are documented in `common`.

#![allow(clippy::too_many_arguments, clippy::needless_range_loop)]

mod common;

use common::prelude::*;

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
