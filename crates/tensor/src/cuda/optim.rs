//! OptimOps for the CUDA backend.
//!
//! The sparse-row updates take their row ids on the host, check that they
//! are in range and distinct, as the CPU does (on the device, two threads
//! updating one row would race, and an id past the table would write
//! outside it), and upload them through page-locked staging: no read from
//! the device, no wait for the stream.
#![allow(clippy::too_many_arguments)]

use sheaf_kernels_cuda::{as_u32, AdamArgs, CudaSlice, CudaViewMut, RowSet};

use super::{cuda_err, CudaBackend};
use crate::backend::OptimOps;
use crate::check::{self, check_step, check_velocity, Check};
use crate::error::{Result, TensorError};
use crate::{Adagrad, Adam, Sgd, Tensor, TensorMut};

impl CudaBackend {
    fn velocity<'a>(
        &self,
        op: &'static str,
        v: Option<TensorMut<'a>>,
    ) -> Result<Option<CudaViewMut<'a, f32>>> {
        v.map(|v| self.f32_out(op, "velocity", v)).transpose()
    }

    /// The (checked) row ids of a sparse update as device words, uploaded
    /// without waiting for the stream.
    fn upload_rows(&self, op: &'static str, rows: &[u32]) -> Result<CudaSlice<f32>> {
        let words: &[f32] = bytemuck::cast_slice(rows);
        if words.len() <= sheaf_kernels_cuda::STAGING_MAX {
            self.kernels.upload_staged(words)
        } else {
            self.kernels.upload(words)
        }
        .map_err(cuda_err(op))
    }
}

fn adam_args(op: &'static str, cfg: &Adam, step: u64) -> Result<AdamArgs> {
    let (step_size, inv_sqrt_bc2) = cfg
        .bias_corrections(step)
        .map_err(TensorError::kernel(op))?;
    Ok(AdamArgs {
        beta1: cfg.beta1,
        beta2: cfg.beta2,
        eps: cfg.eps,
        weight_decay: cfg.weight_decay,
        step_size,
        inv_sqrt_bc2,
    })
}

impl OptimOps for CudaBackend {
    fn sgd_step(
        &self,
        cfg: &Sgd,
        param: TensorMut<'_>,
        grad: &Tensor,
        velocity: Option<TensorMut<'_>>,
    ) -> Result<()> {
        const OP: &str = "sgd_step";
        Check(OP).same(param.shape(), grad.shape())?;
        check_velocity(OP, cfg, param.shape(), velocity.as_ref())?;
        let (mut param, grad) = (
            self.f32_out(OP, "param", param)?,
            self.f32_in(OP, "grad", grad)?,
        );
        let mut v = self.velocity(OP, velocity)?;
        let v = if cfg.momentum == 0.0 {
            None
        } else {
            v.as_mut()
        };
        self.kernels
            .sgd_step(cfg.lr, cfg.momentum, cfg.weight_decay, &mut param, &grad, v)
            .map_err(cuda_err(OP))
    }

    fn adagrad_step(
        &self,
        cfg: &Adagrad,
        param: TensorMut<'_>,
        grad: &Tensor,
        accum: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "adagrad_step";
        let ck = Check(OP);
        ck.same(param.shape(), grad.shape())?;
        ck.expect("accum", param.shape(), accum.shape())?;
        let (mut param, grad) = (
            self.f32_out(OP, "param", param)?,
            self.f32_in(OP, "grad", grad)?,
        );
        let mut accum = self.f32_out(OP, "accum", accum)?;
        self.kernels
            .adagrad_step(
                cfg.lr,
                cfg.eps,
                cfg.weight_decay,
                &mut param,
                &grad,
                &mut accum,
            )
            .map_err(cuda_err(OP))
    }

    fn adam_step(
        &self,
        cfg: &Adam,
        step: u64,
        param: TensorMut<'_>,
        grad: &Tensor,
        m: TensorMut<'_>,
        v: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "adam_step";
        let ck = Check(OP);
        check_step(OP, step)?;
        ck.same(param.shape(), grad.shape())?;
        ck.expect("m", param.shape(), m.shape())?;
        ck.expect("v", param.shape(), v.shape())?;
        let args = adam_args(OP, cfg, step)?;
        let (mut param, grad) = (
            self.f32_out(OP, "param", param)?,
            self.f32_in(OP, "grad", grad)?,
        );
        let (mut m, mut v) = (self.f32_out(OP, "m", m)?, self.f32_out(OP, "v", v)?);
        self.kernels
            .adam_step(&args, &mut param, &grad, &mut m, &mut v)
            .map_err(cuda_err(OP))
    }

    fn sgd_step_rows(
        &self,
        cfg: &Sgd,
        param: TensorMut<'_>,
        rows: &[u32],
        grad: &Tensor,
        velocity: Option<TensorMut<'_>>,
    ) -> Result<()> {
        const OP: &str = "sgd_step_rows";
        let cols = check::step_rows(OP, param.shape(), rows, grad.shape())?;
        check_velocity(OP, cfg, param.shape(), velocity.as_ref())?;
        check::row_ids(OP, rows, param.num_rows())?;
        let mut param = self.f32_out(OP, "param", param)?;
        let grad = self.f32_in(OP, "grad", grad)?;
        let mut v = self.velocity(OP, velocity)?;
        if cols == 0 {
            return Ok(());
        }
        let v = if cfg.momentum == 0.0 {
            None
        } else {
            v.as_mut()
        };
        let ids = self.upload_rows(OP, rows)?;
        let ids = as_u32(&ids.slice(0..rows.len()));
        let set = RowSet { rows: &ids, cols };
        self.kernels
            .sgd_step_rows(
                cfg.lr,
                cfg.momentum,
                cfg.weight_decay,
                &mut param,
                set,
                &grad,
                v,
            )
            .map_err(cuda_err(OP))
    }

    fn adagrad_step_rows(
        &self,
        cfg: &Adagrad,
        param: TensorMut<'_>,
        rows: &[u32],
        grad: &Tensor,
        accum: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "adagrad_step_rows";
        let cols = check::step_rows(OP, param.shape(), rows, grad.shape())?;
        Check(OP).expect("accum", param.shape(), accum.shape())?;
        check::row_ids(OP, rows, param.num_rows())?;
        let mut param = self.f32_out(OP, "param", param)?;
        let (grad, mut accum) = (
            self.f32_in(OP, "grad", grad)?,
            self.f32_out(OP, "accum", accum)?,
        );
        if cols == 0 {
            return Ok(());
        }
        let ids = self.upload_rows(OP, rows)?;
        let ids = as_u32(&ids.slice(0..rows.len()));
        let set = RowSet { rows: &ids, cols };
        self.kernels
            .adagrad_step_rows(
                cfg.lr,
                cfg.eps,
                cfg.weight_decay,
                &mut param,
                set,
                &grad,
                &mut accum,
            )
            .map_err(cuda_err(OP))
    }

    fn adam_step_rows(
        &self,
        cfg: &Adam,
        step: u64,
        param: TensorMut<'_>,
        rows: &[u32],
        grad: &Tensor,
        m: TensorMut<'_>,
        v: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "adam_step_rows";
        check_step(OP, step)?;
        let cols = check::step_rows(OP, param.shape(), rows, grad.shape())?;
        let ck = Check(OP);
        ck.expect("m", param.shape(), m.shape())?;
        ck.expect("v", param.shape(), v.shape())?;
        let args = adam_args(OP, cfg, step)?;
        check::row_ids(OP, rows, param.num_rows())?;
        let mut param = self.f32_out(OP, "param", param)?;
        let grad = self.f32_in(OP, "grad", grad)?;
        let (mut m, mut v) = (self.f32_out(OP, "m", m)?, self.f32_out(OP, "v", v)?);
        if cols == 0 {
            return Ok(());
        }
        let ids = self.upload_rows(OP, rows)?;
        let ids = as_u32(&ids.slice(0..rows.len()));
        let set = RowSet { rows: &ids, cols };
        self.kernels
            .adam_step_rows(&args, &mut param, set, &grad, &mut m, &mut v)
            .map_err(cuda_err(OP))
    }
}
