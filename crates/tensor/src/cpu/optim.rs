//! OptimOps for the CPU backend.
#![allow(clippy::too_many_arguments)]

use super::{f32_in, f32_out, CpuBackend};
use crate::backend::OptimOps;
use crate::check::{self, check_step, check_velocity, Check};
use crate::error::{Result, TensorError};
use crate::{Adagrad, Adam, Sgd, Tensor, TensorMut};

impl OptimOps for CpuBackend {
    fn sgd_step(
        &self,
        cfg: &Sgd,
        param: TensorMut<'_>,
        grad: &Tensor,
        velocity: Option<TensorMut<'_>>,
    ) -> Result<()> {
        const OP: &str = "sgd_step";
        let ck = Check(OP);
        ck.same(param.shape(), grad.shape())?;
        check_velocity(OP, cfg, param.shape(), velocity.as_ref())?;
        let (param, grad) = (f32_out(OP, "param", param)?, f32_in(OP, "grad", grad)?);
        let velocity = velocity_slice(OP, velocity)?;
        self.kernels
            .sgd_step(cfg, param, grad, velocity)
            .map_err(TensorError::kernel(OP))
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
        let (param, grad) = (f32_out(OP, "param", param)?, f32_in(OP, "grad", grad)?);
        let accum = f32_out(OP, "accum", accum)?;
        self.kernels
            .adagrad_step(cfg, param, grad, accum)
            .map_err(TensorError::kernel(OP))
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
        let (param, grad) = (f32_out(OP, "param", param)?, f32_in(OP, "grad", grad)?);
        let (m, v) = (f32_out(OP, "m", m)?, f32_out(OP, "v", v)?);
        self.kernels
            .adam_step(cfg, step, param, grad, m, v)
            .map_err(TensorError::kernel(OP))
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
        let table_rows = param.num_rows();
        let param = f32_out(OP, "param", param)?;
        let grad = f32_in(OP, "grad", grad)?;
        let velocity = velocity_slice(OP, velocity)?;
        if cols == 0 {
            return check::row_ids(OP, rows, table_rows);
        }
        self.kernels
            .sgd_step_rows(cfg, param, cols, rows, grad, velocity)
            .map_err(TensorError::kernel(OP))
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
        let table_rows = param.num_rows();
        let param = f32_out(OP, "param", param)?;
        let (grad, accum) = (f32_in(OP, "grad", grad)?, f32_out(OP, "accum", accum)?);
        if cols == 0 {
            return check::row_ids(OP, rows, table_rows);
        }
        self.kernels
            .adagrad_step_rows(cfg, param, cols, rows, grad, accum)
            .map_err(TensorError::kernel(OP))
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
        let table_rows = param.num_rows();
        let param = f32_out(OP, "param", param)?;
        let grad = f32_in(OP, "grad", grad)?;
        let (m, v) = (f32_out(OP, "m", m)?, f32_out(OP, "v", v)?);
        if cols == 0 {
            return check::row_ids(OP, rows, table_rows);
        }
        self.kernels
            .adam_step_rows(cfg, step, param, cols, rows, grad, m, v)
            .map_err(TensorError::kernel(OP))
    }
}

/// The velocity slice; empty when there is none (the kernel ignores it then).
fn velocity_slice<'a>(op: &'static str, velocity: Option<TensorMut<'a>>) -> Result<&'a mut [f32]> {
    match velocity {
        Some(v) => f32_out(op, "velocity", v),
        None => Ok(&mut []),
    }
}
