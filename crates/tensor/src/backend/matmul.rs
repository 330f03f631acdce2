//! Matrix products.
//!
//! Arities mirror the kernel contract one to one, hence
//! `clippy::too_many_arguments` is allowed.
#![allow(clippy::too_many_arguments)]

use super::RowOps;
use crate::error::Result;
use crate::{Tensor, TensorMut, Transpose};

/// Matrix products.
///
/// Part of [`super::Backend`], whose documentation states the contracts
/// shared by every method.
pub trait MatmulOps: RowOps {
    /// `out = alpha * op(a) * op(b) + beta * out` ("matmul").
    ///
    /// `a`, `b` and `out` have rank >= 2 and are seen as matrices (rows x
    /// last dimension). `op(a)` is `a` or its transpose (`ta`), `m x k`;
    /// `op(b)` is `k x n`; `out` must be `m x n`. With `beta == 0` the old
    /// contents of `out` (NaN included) are ignored. Errors: the inner
    /// dimensions differ (`ShapeMismatch` of `a` and `b`), `out` is not
    /// `[m, n]` (`ArgShape`).
    fn matmul(
        &self,
        a: &Tensor,
        ta: Transpose,
        b: &Tensor,
        tb: Transpose,
        alpha: f32,
        beta: f32,
        out: TensorMut<'_>,
    ) -> Result<()>;

    /// `out = op(a) * op(b) + bias`, `bias` (the row shape of `out`, `[n]`)
    /// added to every row ("matmul_bias"): an affine layer's forward.
    /// `a`, `b`, `out` as in [`MatmulOps::matmul`]; errors as there, and
    /// `ArgShape` for a `bias` whose shape is not `out`'s row shape. The
    /// default broadcasts the bias into `out` and adds the product (beta 1);
    /// the CPU adds it in the product's last step where it packs the weight
    /// (no separate pass writing `out` first).
    fn matmul_bias(
        &self,
        a: &Tensor,
        ta: Transpose,
        b: &Tensor,
        tb: Transpose,
        bias: &Tensor,
        mut out: TensorMut<'_>,
    ) -> Result<()> {
        crate::check::matmul(a.shape(), ta, b.shape(), tb, out.shape())?;
        self.broadcast_row(bias, out.reborrow())?;
        self.matmul(a, ta, b, tb, 1.0, 1.0, out)
    }
}
