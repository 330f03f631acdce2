//! Optimizer updates, dense and over listed rows of a table. Hyper-
//! parameters come as plain numbers (the tensor crate owns the optimizer
//! configurations); Adam's bias corrections are computed by the caller in
//! f64, as on the CPU, and passed as `step_size` and `inv_sqrt_bc2`.
#![allow(clippy::too_many_arguments)]

use cudarc::driver::{CudaView, CudaViewMut};

use crate::error::{CudaError, Result};
use crate::launch::launch;
use crate::CudaKernels;

type In<'a, 'b> = &'a CudaView<'b, f32>;
type Out<'a, 'b> = &'a mut CudaViewMut<'b, f32>;

/// Adam's per-step numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamArgs {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// `lr / (1 - beta1^t)`.
    pub step_size: f32,
    /// `1 / sqrt(1 - beta2^t)`.
    pub inv_sqrt_bc2: f32,
}

/// The rows of a sparse update: `n_rows x cols` gradient for a `? x cols`
/// table. The CALLER guarantees that the listed rows are below the
/// table's row count and distinct (the tensor crate checks them on the
/// host): two threads must never update one element.
#[derive(Debug, Clone, Copy)]
pub struct RowSet<'a, 'b> {
    pub rows: &'a CudaView<'b, u32>,
    pub cols: usize,
}

fn check_rows(kernel: &'static str, param: usize, set: &RowSet, grad: usize) -> Result<(u64, u64)> {
    if set.cols == 0 || !param.is_multiple_of(set.cols) {
        return Err(CudaError::Invalid {
            kernel,
            what: format!(
                "`param` has length {param}, not a positive multiple of cols = {}",
                set.cols
            ),
        });
    }
    CudaError::check_len(kernel, "grad", grad, set.rows.len() * set.cols)?;
    Ok((set.rows.len() as u64, set.cols as u64))
}

impl CudaKernels {
    /// `param -= lr (grad + wd param)`, or with `velocity` (momentum `mu`):
    /// `v = mu v + (grad + wd param); param -= lr v`.
    pub fn sgd_step(
        &self,
        lr: f32,
        mu: f32,
        wd: f32,
        param: Out,
        grad: In,
        velocity: Option<Out>,
    ) -> Result<()> {
        CudaError::check_len("sgd_step", "grad", grad.len(), param.len())?;
        let n = param.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let cfg = self.elementwise_config(param.len());
        // Without momentum the velocity is neither read nor written (as on
        // the CPU).
        match velocity.filter(|_| mu != 0.0) {
            None => launch!(self, "sgd_step", cfg, [param, grad, &n, &lr, &wd]),
            Some(v) => {
                CudaError::check_len("sgd_step", "velocity", v.len(), param.len())?;
                launch!(
                    self,
                    "sgd_momentum_step",
                    cfg,
                    [param, grad, v, &n, &lr, &mu, &wd]
                )
            }
        }
    }

    /// `accum += g^2; param -= lr g / (sqrt(accum) + eps)`, `g = grad + wd param`.
    pub fn adagrad_step(
        &self,
        lr: f32,
        eps: f32,
        wd: f32,
        param: Out,
        grad: In,
        accum: Out,
    ) -> Result<()> {
        CudaError::check_len("adagrad_step", "grad", grad.len(), param.len())?;
        CudaError::check_len("adagrad_step", "accum", accum.len(), param.len())?;
        let n = param.len() as u64;
        if n == 0 {
            return Ok(());
        }
        launch!(
            self,
            "adagrad_step",
            self.elementwise_config(param.len()),
            [param, grad, accum, &n, &lr, &eps, &wd]
        )
    }

    /// One Adam step.
    pub fn adam_step(&self, a: &AdamArgs, param: Out, grad: In, m: Out, v: Out) -> Result<()> {
        for (arg, len) in [("grad", grad.len()), ("m", m.len()), ("v", v.len())] {
            CudaError::check_len("adam_step", arg, len, param.len())?;
        }
        let n = param.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let cfg = self.elementwise_config(param.len());
        launch!(
            self,
            "adam_step",
            cfg,
            [
                param,
                grad,
                m,
                v,
                &n,
                &a.beta1,
                &a.beta2,
                &a.eps,
                &a.weight_decay,
                &a.step_size,
                &a.inv_sqrt_bc2
            ]
        )
    }

    /// [`CudaKernels::sgd_step`] on the listed rows only (lazy).
    pub fn sgd_step_rows(
        &self,
        lr: f32,
        mu: f32,
        wd: f32,
        param: Out,
        set: RowSet,
        grad: In,
        velocity: Option<Out>,
    ) -> Result<()> {
        let (n_rows, cols) = check_rows("sgd_step_rows", param.len(), &set, grad.len())?;
        if n_rows == 0 {
            return Ok(());
        }
        let (rows, cfg) = (set.rows, self.elementwise_config(grad.len()));
        // Without momentum the velocity is neither read nor written, as in
        // the dense step and on the CPU.
        match velocity.filter(|_| mu != 0.0) {
            None => launch!(
                self,
                "sgd_step_rows",
                cfg,
                [param, rows, grad, &n_rows, &cols, &lr, &wd]
            ),
            Some(v) => {
                CudaError::check_len("sgd_step_rows", "velocity", v.len(), param.len())?;
                launch!(
                    self,
                    "sgd_momentum_step_rows",
                    cfg,
                    [param, rows, grad, v, &n_rows, &cols, &lr, &mu, &wd]
                )
            }
        }
    }

    /// [`CudaKernels::adagrad_step`] on the listed rows only.
    pub fn adagrad_step_rows(
        &self,
        lr: f32,
        eps: f32,
        wd: f32,
        param: Out,
        set: RowSet,
        grad: In,
        accum: Out,
    ) -> Result<()> {
        let (n_rows, cols) = check_rows("adagrad_step_rows", param.len(), &set, grad.len())?;
        CudaError::check_len("adagrad_step_rows", "accum", accum.len(), param.len())?;
        if n_rows == 0 {
            return Ok(());
        }
        let (rows, cfg) = (set.rows, self.elementwise_config(grad.len()));
        launch!(
            self,
            "adagrad_step_rows",
            cfg,
            [param, rows, grad, accum, &n_rows, &cols, &lr, &eps, &wd]
        )
    }

    /// Lazy Adam on the listed rows (bias-corrected with the global step).
    pub fn adam_step_rows(
        &self,
        a: &AdamArgs,
        param: Out,
        set: RowSet,
        grad: In,
        m: Out,
        v: Out,
    ) -> Result<()> {
        let (n_rows, cols) = check_rows("adam_step_rows", param.len(), &set, grad.len())?;
        CudaError::check_len("adam_step_rows", "m", m.len(), param.len())?;
        CudaError::check_len("adam_step_rows", "v", v.len(), param.len())?;
        if n_rows == 0 {
            return Ok(());
        }
        let (rows, cfg) = (set.rows, self.elementwise_config(grad.len()));
        launch!(
            self,
            "adam_step_rows",
            cfg,
            [
                param,
                rows,
                grad,
                m,
                v,
                &n_rows,
                &cols,
                &a.beta1,
                &a.beta2,
                &a.eps,
                &a.weight_decay,
                &a.step_size,
                &a.inv_sqrt_bc2
            ]
        )
    }
}
