//! Optimizer updates: SGD (with momentum), Adagrad and Adam, dense and over
//! selected rows of an embedding table.
//!
//! All follow PyTorch's formulas, with `weight_decay` as L2 (the gradient
//! becomes `grad + weight_decay * param` before anything else):
//! - SGD: `v = momentum v + g; param -= lr v` (no dampening, no Nesterov);
//!   with `momentum == 0` simply `param -= lr g` and no velocity is kept.
//! - Adagrad: `accum += g^2; param -= lr g / (sqrt(accum) + eps)`.
//! - Adam: `m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//!   param -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)`
//!   with `t` the 1-based step.
//!
//! The sparse-row variants are *lazy*: rows not listed, and their optimizer
//! state, are left bit-for-bit unchanged (a dense step with a zero gradient
//! would still decay their momentum and move them). Lazy Adam corrects the
//! bias with the global step. A listed row gets exactly the dense update.
//!
//! The per-element updates are plain loops that the compiler vectorises
//! (`sqrt` and division included); the Avx2 ISA runs the same loops
//! compiled with AVX2 enabled (Adam ~2x faster in cache). The arithmetic is
//! identical, so results depend neither on the ISA nor on the thread count.

use rayon::prelude::*;

use crate::parallel::should_split;
use crate::rows::check_indices;
use crate::{CpuKernels, Isa, KernelError, Result};

/// Dense updates split over threads above this many parameters. Measured on
/// the 2-core Zen 3 (AVX2 build): Adam 1.6x and SGD 0.9x at 32768, 1.8x and
/// 1.6x at 65536.
pub const OPTIM_MIN_LEN: usize = 1 << 16;

/// Sparse-row updates split above this many updated elements: rows of a
/// large table come from DRAM, and a split paid only from 256 x 300 (1.9x)
/// on, not at 128 x 300.
pub const OPTIM_ROWS_MIN_LEN: usize = 1 << 16;

/// Parameters of stochastic gradient descent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
}

impl Default for Sgd {
    /// `lr = 0.01`, no momentum, no weight decay.
    fn default() -> Self {
        Sgd {
            lr: 0.01,
            momentum: 0.0,
            weight_decay: 0.0,
        }
    }
}

/// Parameters of Adagrad.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adagrad {
    pub lr: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

impl Default for Adagrad {
    /// `lr = 0.01`, `eps = 1e-8`, no weight decay.
    fn default() -> Self {
        Adagrad {
            lr: 0.01,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// Parameters of Adam.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adam {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

impl Default for Adam {
    /// `lr = 1e-3`, `beta1 = 0.9`, `beta2 = 0.999`, `eps = 1e-8`, no weight decay.
    fn default() -> Self {
        Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

#[inline(always)]
fn sgd_plain(cfg: &Sgd, p: &mut [f32], g: &[f32]) {
    let (lr, wd) = (cfg.lr, cfg.weight_decay);
    for (p, &g) in p.iter_mut().zip(g) {
        *p -= lr * (g + wd * *p);
    }
}

#[inline(always)]
fn sgd_momentum(cfg: &Sgd, p: &mut [f32], g: &[f32], v: &mut [f32]) {
    let (lr, mu, wd) = (cfg.lr, cfg.momentum, cfg.weight_decay);
    for ((p, &g), v) in p.iter_mut().zip(g).zip(v.iter_mut()) {
        *v = mu * *v + (g + wd * *p);
        *p -= lr * *v;
    }
}

#[inline(always)]
fn adagrad(cfg: &Adagrad, p: &mut [f32], g: &[f32], acc: &mut [f32]) {
    let (lr, eps, wd) = (cfg.lr, cfg.eps, cfg.weight_decay);
    for ((p, &g), a) in p.iter_mut().zip(g).zip(acc.iter_mut()) {
        let g = g + wd * *p;
        *a += g * g;
        *p -= lr * g / (a.sqrt() + eps);
    }
}

/// Adam's per-step constants: `lr / (1 - b1^t)` and `1 / sqrt(1 - b2^t)`.
#[derive(Clone, Copy)]
pub(crate) struct AdamStep {
    step_size: f32,
    inv_sqrt_bc2: f32,
}

impl AdamStep {
    fn new(kernel: &'static str, cfg: &Adam, step: u64) -> Result<AdamStep> {
        let invalid = |what: String| Err(KernelError::Invalid { kernel, what });
        if step == 0 {
            return invalid("step is 1-based; got 0".into());
        }
        for (name, b) in [("beta1", cfg.beta1), ("beta2", cfg.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return invalid(format!("{name} = {b} is outside [0, 1)"));
            }
        }
        // powf: a u64 step need not fit powi's i32; beta^t underflows to 0 anyway.
        let bc1 = 1.0 - f64::from(cfg.beta1).powf(step as f64);
        let bc2 = 1.0 - f64::from(cfg.beta2).powf(step as f64);
        Ok(AdamStep {
            step_size: (f64::from(cfg.lr) / bc1) as f32,
            inv_sqrt_bc2: (1.0 / bc2.sqrt()) as f32,
        })
    }
}

impl Adam {
    /// Adam's per-step constants for the 1-based `step`, computed in f64:
    /// `(lr / (1 - beta1^step), 1 / sqrt(1 - beta2^step))`, as every Adam
    /// kernel (CPU or device) applies them. Errors as [`CpuKernels::adam_step`].
    pub fn bias_corrections(&self, step: u64) -> Result<(f32, f32)> {
        let s = AdamStep::new("adam_step", self, step)?;
        Ok((s.step_size, s.inv_sqrt_bc2))
    }
}

#[inline(always)]
fn adam(cfg: &Adam, s: AdamStep, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    let (b1, b2, eps, wd) = (cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay);
    let (c1, c2) = (1.0 - b1, 1.0 - b2);
    let (step_size, inv_sqrt_bc2) = (s.step_size, s.inv_sqrt_bc2);
    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
        let g = g + wd * *p;
        *m = b1 * *m + c1 * g;
        *v = b2 * *v + c2 * (g * g);
        *p -= step_size * *m / (v.sqrt() * inv_sqrt_bc2 + eps);
    }
}

/// One optimizer update with its per-step constants.
#[derive(Clone, Copy)]
pub(crate) enum Update {
    Sgd(Sgd),
    Adagrad(Adagrad),
    Adam(Adam, AdamStep),
}

/// Applies `u` to a chunk: `p` the parameters, `g` their gradient, `a` and
/// `b` the state slices (velocity / accum / m, v; empty when unused).
/// `#[inline(always)]` so that the AVX2 wrapper compiles the loops 8-wide.
#[inline(always)]
pub(crate) fn apply(u: &Update, p: &mut [f32], g: &[f32], a: &mut [f32], b: &mut [f32]) {
    match u {
        Update::Sgd(c) if c.momentum == 0.0 => sgd_plain(c, p, g),
        Update::Sgd(c) => sgd_momentum(c, p, g, a),
        Update::Adagrad(c) => adagrad(c, p, g, a),
        Update::Adam(c, s) => adam(c, *s, p, g, a, b),
    }
}

impl CpuKernels {
    /// [`apply`] with the Scalar or the AVX2 build (also for `Avx512`).
    fn apply(&self, u: &Update, p: &mut [f32], g: &[f32], a: &mut [f32], b: &mut [f32]) {
        match self.isa() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a CpuKernels with isa Avx2 exists only on CPUs with
            // AVX2 and FMA; `apply` is safe code over slices.
            Isa::Avx2 => unsafe { crate::simd::avx2::optim::optim_apply(u, p, g, a, b) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a CpuKernels with isa Avx512 exists only on CPUs with
            // AVX-512F, AVX2 and FMA; no AVX-512 build of the updates, so
            // it runs the AVX2 one.
            Isa::Avx512 => unsafe { crate::simd::avx2::optim::optim_apply(u, p, g, a, b) },
            _ => apply(u, p, g, a, b),
        }
    }
}

/// Applies `u` over equal-length chunks of the four slices (`b`, `c` may be
/// empty when unused), splitting over threads above [`OPTIM_MIN_LEN`].
fn for_chunks(k: &CpuKernels, u: Update, p: &mut [f32], g: &[f32], b: &mut [f32], c: &mut [f32]) {
    if !should_split(p.len(), OPTIM_MIN_LEN) {
        return k.apply(&u, p, g, b, c);
    }
    let chunk = OPTIM_MIN_LEN / 2;
    let n_chunks = p.len().div_ceil(chunk);
    // An empty state slice yields no chunks; hand out empty slices instead.
    fn state(s: &mut [f32], chunk: usize, n_chunks: usize) -> Vec<&mut [f32]> {
        if s.is_empty() {
            (0..n_chunks).map(|_| <&mut [f32]>::default()).collect()
        } else {
            s.chunks_mut(chunk).collect()
        }
    }
    let (bs, cs) = (state(b, chunk, n_chunks), state(c, chunk, n_chunks));
    p.par_chunks_mut(chunk)
        .zip(g.par_chunks(chunk))
        .zip(bs)
        .zip(cs)
        .for_each(|(((p, g), b), c)| k.apply(&u, p, g, b, c));
}

/// Validates the row list of a sparse step and returns, for each table row
/// touched, `(row, position in rows)`, sorted by row.
fn check_rows(
    kernel: &'static str,
    table_len: usize,
    cols: usize,
    rows: &[u32],
    grad_len: usize,
) -> Result<Vec<(u32, u32)>> {
    if cols == 0 {
        return Err(KernelError::Invalid {
            kernel,
            what: "cols must be positive".into(),
        });
    }
    if !table_len.is_multiple_of(cols) {
        return Err(KernelError::Invalid {
            kernel,
            what: format!("`param` has length {table_len}, not a multiple of cols = {cols}"),
        });
    }
    let expected = rows
        .len()
        .checked_mul(cols)
        .ok_or_else(|| KernelError::Invalid {
            kernel,
            what: "rows.len() x cols overflows usize".into(),
        })?;
    KernelError::check_len(kernel, "grad", grad_len, expected)?;
    check_indices(kernel, rows, table_len / cols)?;
    let mut sorted: Vec<(u32, u32)> = rows.iter().zip(0..).map(|(&r, i)| (r, i)).collect();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(KernelError::Invalid {
            kernel,
            what: format!(
                "row {} appears more than once in `rows` (positions {} and {})",
                w[0].0, w[0].1, w[1].1
            ),
        });
    }
    Ok(sorted)
}

/// One table row's slices of up to three equally shaped buffers (an empty
/// buffer gives empty rows), plus its gradient row.
type RowSlices<'a> = (&'a mut [f32], &'a [f32], &'a mut [f32], &'a mut [f32]);

/// Splits `p`, `b`, `c` into the disjoint rows listed in `sorted` (distinct,
/// ascending) and pairs each with its gradient row.
fn split_rows<'a>(
    sorted: &[(u32, u32)],
    cols: usize,
    p: &'a mut [f32],
    g: &'a [f32],
    b: &'a mut [f32],
    c: &'a mut [f32],
) -> Vec<RowSlices<'a>> {
    let (mut p, mut b, mut c) = (p, b, c);
    let mut next = 0usize;
    let mut out = Vec::with_capacity(sorted.len());
    for &(r, i) in sorted {
        let skip = (r as usize - next) * cols;
        let take = |s: &mut &'a mut [f32]| -> &'a mut [f32] {
            let whole = std::mem::take(s);
            if whole.is_empty() {
                return whole;
            }
            let (row, rest) = whole[skip..].split_at_mut(cols);
            *s = rest;
            row
        };
        let (pr, br, cr) = (take(&mut p), take(&mut b), take(&mut c));
        let i = i as usize;
        out.push((pr, &g[i * cols..(i + 1) * cols], br, cr));
        next = r as usize + 1;
    }
    out
}

/// Applies `u` to each listed row, in parallel above [`OPTIM_ROWS_MIN_LEN`]
/// updated elements. Checks the lengths first.
#[allow(clippy::too_many_arguments)]
fn sparse_step(
    kernel: &'static str,
    k: &CpuKernels,
    u: Update,
    p: &mut [f32],
    cols: usize,
    rows: &[u32],
    g: &[f32],
    b: &mut [f32],
    c: &mut [f32],
) -> Result<()> {
    let sorted = check_rows(kernel, p.len(), cols, rows, g.len())?;
    let rows = split_rows(&sorted, cols, p, g, b, c);
    if should_split(g.len(), OPTIM_ROWS_MIN_LEN) {
        let per_task = (OPTIM_ROWS_MIN_LEN / 8 / cols).max(1);
        rows.into_par_iter()
            .with_min_len(per_task)
            .for_each(|(p, g, b, c)| k.apply(&u, p, g, b, c));
    } else {
        rows.into_iter()
            .for_each(|(p, g, b, c)| k.apply(&u, p, g, b, c));
    }
    Ok(())
}

/// Length check for SGD's velocity: `param`'s length, or empty without momentum.
fn check_velocity(kernel: &'static str, cfg: &Sgd, velocity: &[f32], len: usize) -> Result<()> {
    if cfg.momentum == 0.0 && velocity.is_empty() {
        Ok(())
    } else {
        KernelError::check_len(kernel, "velocity", velocity.len(), len)
    }
}

impl CpuKernels {
    /// One SGD step over `param`. With `momentum == 0` the velocity is
    /// neither read nor written and may be empty; otherwise it has
    /// `param`'s length.
    pub fn sgd_step(
        &self,
        cfg: &Sgd,
        param: &mut [f32],
        grad: &[f32],
        velocity: &mut [f32],
    ) -> Result<()> {
        const K: &str = "sgd_step";
        KernelError::check_len(K, "grad", grad.len(), param.len())?;
        check_velocity(K, cfg, velocity, param.len())?;
        for_chunks(self, Update::Sgd(*cfg), param, grad, velocity, &mut []);
        Ok(())
    }

    /// One Adagrad step; `accum` (the running sum of squared gradients,
    /// initially zero) has `param`'s length.
    pub fn adagrad_step(
        &self,
        cfg: &Adagrad,
        param: &mut [f32],
        grad: &[f32],
        accum: &mut [f32],
    ) -> Result<()> {
        const K: &str = "adagrad_step";
        KernelError::check_len(K, "grad", grad.len(), param.len())?;
        KernelError::check_len(K, "accum", accum.len(), param.len())?;
        for_chunks(self, Update::Adagrad(*cfg), param, grad, accum, &mut []);
        Ok(())
    }

    /// One Adam step. `step` counts from 1 (0 is [`KernelError::Invalid`],
    /// as are betas outside `[0, 1)`); `m` and `v` (initially zero) have
    /// `param`'s length.
    pub fn adam_step(
        &self,
        cfg: &Adam,
        step: u64,
        param: &mut [f32],
        grad: &[f32],
        m: &mut [f32],
        v: &mut [f32],
    ) -> Result<()> {
        const K: &str = "adam_step";
        let s = AdamStep::new(K, cfg, step)?;
        KernelError::check_len(K, "grad", grad.len(), param.len())?;
        KernelError::check_len(K, "m", m.len(), param.len())?;
        KernelError::check_len(K, "v", v.len(), param.len())?;
        for_chunks(self, Update::Adam(*cfg, s), param, grad, m, v);
        Ok(())
    }

    /// [`CpuKernels::sgd_step`] on the rows `rows` of a `? x cols` table;
    /// row `i` of `grad` (`rows.len() x cols`) belongs to table row
    /// `rows[i]`. Other rows and their velocity are untouched (lazy).
    /// Out-of-range ids are [`KernelError::Index`], repeated ids
    /// [`KernelError::Invalid`]; nothing is written on error.
    pub fn sgd_step_rows(
        &self,
        cfg: &Sgd,
        param: &mut [f32],
        cols: usize,
        rows: &[u32],
        grad: &[f32],
        velocity: &mut [f32],
    ) -> Result<()> {
        const K: &str = "sgd_step_rows";
        check_velocity(K, cfg, velocity, param.len())?;
        // Without momentum the velocity is ignored (it may be empty).
        let velocity = if cfg.momentum == 0.0 {
            &mut [][..]
        } else {
            velocity
        };
        sparse_step(
            K,
            self,
            Update::Sgd(*cfg),
            param,
            cols,
            rows,
            grad,
            velocity,
            &mut [],
        )
    }

    /// [`CpuKernels::adagrad_step`] on selected rows; see
    /// [`CpuKernels::sgd_step_rows`].
    pub fn adagrad_step_rows(
        &self,
        cfg: &Adagrad,
        param: &mut [f32],
        cols: usize,
        rows: &[u32],
        grad: &[f32],
        accum: &mut [f32],
    ) -> Result<()> {
        const K: &str = "adagrad_step_rows";
        KernelError::check_len(K, "accum", accum.len(), param.len())?;
        sparse_step(
            K,
            self,
            Update::Adagrad(*cfg),
            param,
            cols,
            rows,
            grad,
            accum,
            &mut [],
        )
    }

    /// Lazy Adam: [`CpuKernels::adam_step`] on selected rows, bias-corrected
    /// with the global `step`; see [`CpuKernels::sgd_step_rows`].
    #[allow(clippy::too_many_arguments)]
    pub fn adam_step_rows(
        &self,
        cfg: &Adam,
        step: u64,
        param: &mut [f32],
        cols: usize,
        rows: &[u32],
        grad: &[f32],
        m: &mut [f32],
        v: &mut [f32],
    ) -> Result<()> {
        const K: &str = "adam_step_rows";
        let s = AdamStep::new(K, cfg, step)?;
        KernelError::check_len(K, "m", m.len(), param.len())?;
        KernelError::check_len(K, "v", v.len(), param.len())?;
        sparse_step(
            K,
            self,
            Update::Adam(*cfg, s),
            param,
            cols,
            rows,
            grad,
            m,
            v,
        )
    }
}
