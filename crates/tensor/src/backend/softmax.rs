//! Softmax, log-softmax, the cross-entropy loss and row/column sums, all
//! along the last dimension.

use crate::error::Result;
use crate::{Tensor, TensorMut};

/// Softmax, log-softmax, the cross-entropy loss and row/column sums, all
/// along the last dimension.
///
/// Part of [`super::Backend`], whose documentation states the contracts
/// shared by every method.
pub trait SoftmaxOps {
    /// `y = softmax(x)` along the last dimension ("softmax_rows").
    fn softmax_rows(&self, x: &Tensor, y: TensorMut<'_>) -> Result<()>;

    /// `y = log softmax(x)` along the last dimension ("log_softmax_rows").
    fn log_softmax_rows(&self, x: &Tensor, y: TensorMut<'_>) -> Result<()>;

    /// `dx += y * (dy - <dy, y>)` per row, `y` the softmax output
    /// ("softmax_rows_bwd").
    fn softmax_rows_bwd(&self, y: &Tensor, dy: &Tensor, dx: TensorMut<'_>) -> Result<()>;

    /// `dx += dy - exp(y) * sum(dy)` per row, `y` the log-softmax output
    /// ("log_softmax_rows_bwd").
    fn log_softmax_rows_bwd(&self, y: &Tensor, dy: &Tensor, dx: TensorMut<'_>) -> Result<()>;

    /// Cross-entropy of softmax ("nll_log_softmax"):
    /// `loss[r] = -log softmax(x[r])[labels[r]]`, and `probs = softmax(x)`,
    /// saved for the backward pass. For `x` `[b, C]`: `labels` (`u32`) and
    /// `loss` are `[b]`, `probs` is `[b, C]` (generally: `labels` and `loss`
    /// have the shape of `x` without its last dimension).
    fn nll_log_softmax(
        &self,
        x: &Tensor,
        labels: &Tensor,
        probs: TensorMut<'_>,
        loss: TensorMut<'_>,
    ) -> Result<()>;

    /// `dx[r] += dloss[r] * (probs[r] - onehot(labels[r]))`
    /// ("nll_log_softmax_bwd"); shapes as in [`SoftmaxOps::nll_log_softmax`].
    fn nll_log_softmax_bwd(
        &self,
        probs: &Tensor,
        labels: &Tensor,
        dloss: &Tensor,
        dx: TensorMut<'_>,
    ) -> Result<()>;

    /// `out[r] = sum_c x[r, c]` ("row_sums", overwrites); `out` has the shape
    /// of `x` without its last dimension.
    fn row_sums(&self, x: &Tensor, out: TensorMut<'_>) -> Result<()>;

    /// `out[c] += sum_r x[r, c]` ("col_sums_acc", accumulates: bias
    /// gradients); `out` is `[last dimension of x]`.
    fn col_sums_acc(&self, x: &Tensor, out: TensorMut<'_>) -> Result<()>;
}
