//! Row-wise softmax, log-softmax, softmax cross-entropy (`nll_log_softmax`)
//! and row / column sums.
//!
//! Matrices are row-major `rows x cols` with `cols` given and
//! `rows = len / cols`; a length that is not a multiple of `cols` is
//! [`KernelError::Invalid`]. With `cols == 0` every matrix must be empty and
//! the row count comes from the per-row arguments (labels, outputs).
//!
//! Numerics: every row is shifted by its maximum before exponentiating, so
//! any finite inputs work; -inf entries get probability 0 (log-probability
//! -inf); a row containing NaN, or +inf, or only -inf, gives NaN throughout
//! (as 0/0 does; PyTorch behaves the same). The cross-entropy is
//! `(max - x[label]) + ln(sum exp(x - max))`, never the log of a rounded
//! probability, so a confidently wrong row has a large finite loss rather
//! than `-ln(0) = inf`. (The AVX2 path flushes probabilities below
//! f32::MIN_POSITIVE to 0, as its exp does; the scalar path keeps subnormals.)

use rayon::prelude::*;

use crate::error::{KernelError, Result};
use crate::isa::{CpuKernels, Isa};
use crate::parallel::should_split;

/// Row kernels split their rows over the rayon pool from this many elements
/// (rows x cols) on. Softmax costs about as much per element as sigmoid
/// (one exp plus light passes; 21.5 us for 32k elements on one core, 12.1 us
/// split in two with an awake pool), so it shares the elementwise
/// transcendental threshold, measured in [`crate::elementwise::PAR_MIN_LEN_MATH`].
pub const SOFTMAX_PAR_MIN_LEN: usize = crate::elementwise::PAR_MIN_LEN_MATH;

/// Runs the AVX2 kernel of this name for an `Avx2` or `Avx512` handle, else
/// the scalar one.
macro_rules! dispatch {
    ($isa:expr, $name:ident($($arg:expr),*)) => {
        match $isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                // SAFETY: a `CpuKernels` with ISA `Avx2` exists only when the
                // CPU supports AVX2 and FMA (both constructors check it); the
                // kernel is memory-safe for any slice lengths.
                unsafe { crate::simd::avx2::softmax::$name($($arg),*) }
            }
            // No AVX-512 softmax: an Avx512 handle runs the AVX2 kernels.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                // SAFETY: a `CpuKernels` with ISA `Avx512` exists only when
                // the CPU supports AVX-512F, AVX2 and FMA (both constructors
                // check it); the kernel is memory-safe for any slice lengths.
                unsafe { crate::simd::avx2::softmax::$name($($arg),*) }
            }
            _ => scalar::$name($($arg),*),
        }
    };
}

/// Rows of a `len`-element matrix with `cols` columns; `empty_rows` is the
/// answer when `cols == 0` (then `len` must be 0).
fn rows_of(
    kernel: &'static str,
    arg: &'static str,
    len: usize,
    cols: usize,
    empty_rows: usize,
) -> Result<usize> {
    match (len, cols) {
        (0, 0) => Ok(empty_rows),
        (_, 0) => Err(KernelError::Invalid {
            kernel,
            what: format!("cols is 0 but `{arg}` has {len} elements"),
        }),
        _ if !len.is_multiple_of(cols) => Err(KernelError::Invalid {
            kernel,
            what: format!("`{arg}` has length {len}, not a multiple of cols = {cols}"),
        }),
        _ => Ok(len / cols),
    }
}

/// Every label must name a column: the first that does not is an
/// [`KernelError::Index`] with its row as position and `cols` as the bound.
fn check_labels(kernel: &'static str, labels: &[u32], cols: usize) -> Result<()> {
    match labels.iter().position(|&l| l as usize >= cols) {
        None => Ok(()),
        Some(r) => Err(KernelError::Index {
            kernel,
            index: labels[r] as usize,
            position: r,
            rows: cols,
        }),
    }
}

/// Rows per parallel task, or `None` to stay on this thread.
fn rows_per_task(rows: usize, cols: usize) -> Option<usize> {
    if rows < 2 || !should_split(rows * cols, SOFTMAX_PAR_MIN_LEN) {
        return None;
    }
    let min_rows = (SOFTMAX_PAR_MIN_LEN / 2).div_ceil(cols);
    let even = rows.div_ceil(4 * rayon::current_num_threads());
    Some(even.max(min_rows).max(1))
}

impl CpuKernels {
    /// `y[r] = softmax(x[r])` for every row: `exp(x - max) / sum`.
    pub fn softmax_rows(&self, x: &[f32], cols: usize, y: &mut [f32]) -> Result<()> {
        rows_of("softmax_rows", "x", x.len(), cols, 0)?;
        KernelError::check_len("softmax_rows", "y", y.len(), x.len())?;
        let isa = self.isa();
        match rows_per_task(x.len() / cols.max(1), cols) {
            None => dispatch!(isa, softmax_rows(x, cols, y)),
            Some(rb) => x
                .par_chunks(rb * cols)
                .zip(y.par_chunks_mut(rb * cols))
                .for_each(|(x, y)| dispatch!(isa, softmax_rows(x, cols, y))),
        }
        Ok(())
    }

    /// `y[r] = x[r] - logsumexp(x[r])` for every row, computed as
    /// `(x - max) - ln(sum exp(x - max))`.
    pub fn log_softmax_rows(&self, x: &[f32], cols: usize, y: &mut [f32]) -> Result<()> {
        rows_of("log_softmax_rows", "x", x.len(), cols, 0)?;
        KernelError::check_len("log_softmax_rows", "y", y.len(), x.len())?;
        let isa = self.isa();
        match rows_per_task(x.len() / cols.max(1), cols) {
            None => dispatch!(isa, log_softmax_rows(x, cols, y)),
            Some(rb) => x
                .par_chunks(rb * cols)
                .zip(y.par_chunks_mut(rb * cols))
                .for_each(|(x, y)| dispatch!(isa, log_softmax_rows(x, cols, y))),
        }
        Ok(())
    }

    /// Backward of [`CpuKernels::softmax_rows`] from its OUTPUT `y`:
    /// `dx += y * (dy - <dy, y>)` row by row.
    pub fn softmax_rows_bwd(
        &self,
        y: &[f32],
        dy: &[f32],
        cols: usize,
        dx: &mut [f32],
    ) -> Result<()> {
        self.rows_bwd("softmax_rows_bwd", false, y, dy, cols, dx)
    }

    /// Backward of [`CpuKernels::log_softmax_rows`] from its OUTPUT `y`:
    /// `dx += dy - exp(y) * sum(dy)` row by row.
    pub fn log_softmax_rows_bwd(
        &self,
        y: &[f32],
        dy: &[f32],
        cols: usize,
        dx: &mut [f32],
    ) -> Result<()> {
        self.rows_bwd("log_softmax_rows_bwd", true, y, dy, cols, dx)
    }

    /// The two row backward kernels: `log` picks log-softmax.
    #[allow(clippy::too_many_arguments)]
    fn rows_bwd(
        &self,
        kernel: &'static str,
        log: bool,
        y: &[f32],
        dy: &[f32],
        cols: usize,
        dx: &mut [f32],
    ) -> Result<()> {
        rows_of(kernel, "y", y.len(), cols, 0)?;
        KernelError::check_len(kernel, "dy", dy.len(), y.len())?;
        KernelError::check_len(kernel, "dx", dx.len(), y.len())?;
        let isa = self.isa();
        let run = |y: &[f32], dy: &[f32], dx: &mut [f32]| {
            if log {
                dispatch!(isa, log_softmax_rows_bwd(y, dy, cols, dx))
            } else {
                dispatch!(isa, softmax_rows_bwd(y, dy, cols, dx))
            }
        };
        match rows_per_task(y.len() / cols.max(1), cols) {
            None => run(y, dy, dx),
            Some(rb) => (
                y.par_chunks(rb * cols),
                dy.par_chunks(rb * cols),
                dx.par_chunks_mut(rb * cols),
            )
                .into_par_iter()
                .for_each(|(y, dy, dx)| run(y, dy, dx)),
        }
        Ok(())
    }

    /// Softmax cross-entropy: `loss[r] = -ln softmax(x[r])[labels[r]]`,
    /// computed as `(max - x[r, label]) + ln(sum exp(x[r] - max))`; also
    /// writes `probs = softmax(x)` for [`CpuKernels::nll_log_softmax_bwd`].
    /// A label `>= cols` is [`KernelError::Index`] (position = its row),
    /// reported before anything is written.
    pub fn nll_log_softmax(
        &self,
        x: &[f32],
        cols: usize,
        labels: &[u32],
        probs: &mut [f32],
        loss: &mut [f32],
    ) -> Result<()> {
        const K: &str = "nll_log_softmax";
        let rows = rows_of(K, "x", x.len(), cols, labels.len())?;
        KernelError::check_len(K, "labels", labels.len(), rows)?;
        KernelError::check_len(K, "probs", probs.len(), x.len())?;
        KernelError::check_len(K, "loss", loss.len(), rows)?;
        check_labels(K, labels, cols)?;
        let isa = self.isa();
        match rows_per_task(rows, cols) {
            None => dispatch!(isa, nll_log_softmax(x, cols, labels, probs, loss)),
            Some(rb) => (
                x.par_chunks(rb * cols),
                labels.par_chunks(rb),
                probs.par_chunks_mut(rb * cols),
                loss.par_chunks_mut(rb),
            )
                .into_par_iter()
                .for_each(|(x, l, p, loss)| dispatch!(isa, nll_log_softmax(x, cols, l, p, loss))),
        }
        Ok(())
    }

    /// Backward of [`CpuKernels::nll_log_softmax`]:
    /// `dx[r] += dloss[r] * (probs[r] - onehot(labels[r]))`.
    pub fn nll_log_softmax_bwd(
        &self,
        probs: &[f32],
        cols: usize,
        labels: &[u32],
        dloss: &[f32],
        dx: &mut [f32],
    ) -> Result<()> {
        const K: &str = "nll_log_softmax_bwd";
        let rows = rows_of(K, "probs", probs.len(), cols, labels.len())?;
        KernelError::check_len(K, "labels", labels.len(), rows)?;
        KernelError::check_len(K, "dloss", dloss.len(), rows)?;
        KernelError::check_len(K, "dx", dx.len(), probs.len())?;
        check_labels(K, labels, cols)?;
        let isa = self.isa();
        match rows_per_task(rows, cols) {
            None => dispatch!(isa, nll_log_softmax_bwd(probs, cols, labels, dloss, dx)),
            Some(rb) => (
                probs.par_chunks(rb * cols),
                labels.par_chunks(rb),
                dloss.par_chunks(rb),
                dx.par_chunks_mut(rb * cols),
            )
                .into_par_iter()
                .for_each(|(p, l, g, dx)| dispatch!(isa, nll_log_softmax_bwd(p, cols, l, g, dx))),
        }
        Ok(())
    }

    /// `out[r] = sum_c x[r, c]` (overwrites; with `cols == 0`, `out` may
    /// have any length and becomes zeros).
    pub fn row_sums(&self, x: &[f32], cols: usize, out: &mut [f32]) -> Result<()> {
        let rows = rows_of("row_sums", "x", x.len(), cols, out.len())?;
        KernelError::check_len("row_sums", "out", out.len(), rows)?;
        if cols == 0 {
            out.fill(0.0);
            return Ok(());
        }
        let isa = self.isa();
        match rows_per_task(rows, cols) {
            None => dispatch!(isa, row_sums(x, cols, out)),
            Some(rb) => x
                .par_chunks(rb * cols)
                .zip(out.par_chunks_mut(rb))
                .for_each(|(x, o)| dispatch!(isa, row_sums(x, cols, o))),
        }
        Ok(())
    }

    /// `out[c] += sum_r x[r, c]` (accumulates: the bias gradient of an
    /// affine layer from the output gradient).
    pub fn col_sums_acc(&self, x: &[f32], cols: usize, out: &mut [f32]) -> Result<()> {
        let rows = rows_of("col_sums_acc", "x", x.len(), cols, 0)?;
        KernelError::check_len("col_sums_acc", "out", out.len(), cols)?;
        let isa = self.isa();
        // Split the columns (each task reads its strip of every row), never
        // the rows: that would need a reduction of partial sums.
        if cols >= 128 && should_split(rows * cols, SOFTMAX_PAR_MIN_LEN) {
            let per_task = (cols.div_ceil(2 * rayon::current_num_threads())).next_multiple_of(32);
            out.par_chunks_mut(per_task)
                .enumerate()
                .for_each(|(i, o)| dispatch!(isa, col_sums_acc(x, cols, i * per_task, o)));
        } else {
            dispatch!(isa, col_sums_acc(x, cols, 0, out));
        }
        Ok(())
    }
}

/// The reference implementations: plain loops over rows. Callers pass whole
/// rows, labels < cols, and cols > 0 (or empty slices).
mod scalar {
    fn rows(x: &[f32], cols: usize) -> std::slice::ChunksExact<'_, f32> {
        x.chunks_exact(cols.max(1))
    }

    /// (max, sum of exp(x - max)) of one row, y = exp(x - max).
    fn exp_shift(x: &[f32], y: &mut [f32]) -> (f32, f32) {
        // NaN never wins here, but exp(NaN - m) makes the sum NaN: the row
        // is poisoned either way.
        let m = x
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        let mut s = 0.0;
        for (y, &x) in y.iter_mut().zip(x) {
            *y = (x - m).exp();
            s += *y;
        }
        (m, s)
    }

    pub(super) fn softmax_rows(x: &[f32], cols: usize, y: &mut [f32]) {
        for (x, y) in rows(x, cols).zip(y.chunks_exact_mut(cols.max(1))) {
            let (_, s) = exp_shift(x, y);
            let inv = 1.0 / s;
            y.iter_mut().for_each(|v| *v *= inv);
        }
    }

    pub(super) fn log_softmax_rows(x: &[f32], cols: usize, y: &mut [f32]) {
        for (x, y) in rows(x, cols).zip(y.chunks_exact_mut(cols.max(1))) {
            let (m, s) = exp_shift(x, y);
            let ls = s.ln();
            for (y, &x) in y.iter_mut().zip(x) {
                *y = (x - m) - ls;
            }
        }
    }

    pub(super) fn softmax_rows_bwd(y: &[f32], dy: &[f32], cols: usize, dx: &mut [f32]) {
        let rs = rows(y, cols).zip(rows(dy, cols));
        for ((y, dy), dx) in rs.zip(dx.chunks_exact_mut(cols.max(1))) {
            let d: f32 = y.iter().zip(dy).map(|(y, dy)| y * dy).sum();
            for ((dx, &y), &dy) in dx.iter_mut().zip(y).zip(dy) {
                *dx += y * (dy - d);
            }
        }
    }

    pub(super) fn log_softmax_rows_bwd(y: &[f32], dy: &[f32], cols: usize, dx: &mut [f32]) {
        let rs = rows(y, cols).zip(rows(dy, cols));
        for ((y, dy), dx) in rs.zip(dx.chunks_exact_mut(cols.max(1))) {
            let s: f32 = dy.iter().sum();
            for ((dx, &y), &dy) in dx.iter_mut().zip(y).zip(dy) {
                *dx += dy - y.exp() * s;
            }
        }
    }

    pub(super) fn nll_log_softmax(
        x: &[f32],
        cols: usize,
        labels: &[u32],
        probs: &mut [f32],
        loss: &mut [f32],
    ) {
        let rs = rows(x, cols).zip(probs.chunks_exact_mut(cols.max(1)));
        for (((x, p), &l), loss) in rs.zip(labels).zip(loss) {
            let (m, s) = exp_shift(x, p);
            let inv = 1.0 / s;
            p.iter_mut().for_each(|v| *v *= inv);
            if let Some(&xl) = x.get(l as usize) {
                *loss = (m - xl) + s.ln();
            }
        }
    }

    pub(super) fn nll_log_softmax_bwd(
        probs: &[f32],
        cols: usize,
        labels: &[u32],
        dloss: &[f32],
        dx: &mut [f32],
    ) {
        let rs = rows(probs, cols).zip(dx.chunks_exact_mut(cols.max(1)));
        for (((p, dx), &l), &g) in rs.zip(labels).zip(dloss) {
            for (c, (dx, &p)) in dx.iter_mut().zip(p).enumerate() {
                let onehot = if c == l as usize { 1.0 } else { 0.0 };
                *dx += g * (p - onehot);
            }
        }
    }

    pub(super) fn row_sums(x: &[f32], cols: usize, out: &mut [f32]) {
        for (x, o) in rows(x, cols).zip(out) {
            *o = x.iter().sum();
        }
    }

    /// Columns `c0 .. c0 + out.len()` of x.
    pub(super) fn col_sums_acc(x: &[f32], cols: usize, c0: usize, out: &mut [f32]) {
        for row in rows(x, cols) {
            for (o, v) in out.iter_mut().zip(row.iter().skip(c0)) {
                *o += v;
            }
        }
    }
}
