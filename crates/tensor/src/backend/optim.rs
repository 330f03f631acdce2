//! Optimizer updates, dense and sparse-row (embedding tables).
//!
//! Arities mirror the kernel contract one to one, hence
//! `clippy::too_many_arguments` is allowed.
#![allow(clippy::too_many_arguments)]

use crate::error::Result;
use crate::{Adagrad, Adam, Sgd, Tensor, TensorMut};

/// Optimizer updates, dense and sparse-row (embedding tables).
///
/// Dense steps: `grad` and the state buffers have the shape of `param`.
/// Sparse-row steps (embedding tables): `param` and the state are
/// `[table_rows, ...]`, `rows` `n` distinct row ids given on the HOST (the
/// caller knows them: checking them needs no read from a device), `grad`
/// `[n, ...]` (row i belongs to table row `rows[i]`); only those rows
/// change. An id past the table or listed twice is an error and nothing
/// is updated. `weight_decay` is L2 (grad + wd * param).
///
/// Part of [`super::Backend`], whose documentation states the contracts
/// shared by every method.
pub trait OptimOps {
    /// SGD step ("sgd_step"); `velocity` is required when
    /// `cfg.momentum != 0` and ignored (may be `None`) otherwise.
    fn sgd_step(
        &self,
        cfg: &Sgd,
        param: TensorMut<'_>,
        grad: &Tensor,
        velocity: Option<TensorMut<'_>>,
    ) -> Result<()>;

    /// Adagrad step ("adagrad_step").
    fn adagrad_step(
        &self,
        cfg: &Adagrad,
        param: TensorMut<'_>,
        grad: &Tensor,
        accum: TensorMut<'_>,
    ) -> Result<()>;

    /// Adam step ("adam_step"); `step` counts from 1 (bias correction), 0 is
    /// an `InvalidArgument`.
    fn adam_step(
        &self,
        cfg: &Adam,
        step: u64,
        param: TensorMut<'_>,
        grad: &Tensor,
        m: TensorMut<'_>,
        v: TensorMut<'_>,
    ) -> Result<()>;

    /// Sparse-row SGD step ("sgd_step_rows").
    fn sgd_step_rows(
        &self,
        cfg: &Sgd,
        param: TensorMut<'_>,
        rows: &[u32],
        grad: &Tensor,
        velocity: Option<TensorMut<'_>>,
    ) -> Result<()>;

    /// Sparse-row Adagrad step ("adagrad_step_rows").
    fn adagrad_step_rows(
        &self,
        cfg: &Adagrad,
        param: TensorMut<'_>,
        rows: &[u32],
        grad: &Tensor,
        accum: TensorMut<'_>,
    ) -> Result<()>;

    /// Sparse-row ("lazy") Adam step ("adam_step_rows"): bias correction by
    /// the global `step`, moments of untouched rows unchanged.
    fn adam_step_rows(
        &self,
        cfg: &Adam,
        step: u64,
        param: TensorMut<'_>,
        rows: &[u32],
        grad: &Tensor,
        m: TensorMut<'_>,
        v: TensorMut<'_>,
    ) -> Result<()>;
}
