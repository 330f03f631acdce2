//! Matrix products.
//!
//! Arities mirror the kernel contract one to one, hence
//! `clippy::too_many_arguments` is allowed.
#![allow(clippy::too_many_arguments)]

use crate::error::Result;
use crate::{Tensor, TensorMut, Transpose};

/// Matrix products.
///
/// Part of [`super::Backend`], whose documentation states the contracts
/// shared by every method.
pub trait MatmulOps {
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
}
