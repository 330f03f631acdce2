//! SoftmaxOps for the CUDA backend.

use super::{cuda_err, CudaBackend};
use crate::backend::SoftmaxOps;
use crate::check::Check;
use crate::error::Result;
use crate::{Shape, Tensor, TensorMut};

impl SoftmaxOps for CudaBackend {
    fn softmax_rows(&self, x: &Tensor, y: TensorMut<'_>) -> Result<()> {
        const OP: &str = "softmax_rows";
        let ck = Check(OP);
        let (_, cols) = ck.matrix("x", x.shape())?;
        ck.expect("y", x.shape(), y.shape())?;
        let (x, mut y) = (self.f32_in(OP, "x", x)?, self.f32_out(OP, "y", y)?);
        self.kernels
            .softmax_rows(&x, cols, &mut y)
            .map_err(cuda_err(OP))
    }

    fn log_softmax_rows(&self, x: &Tensor, y: TensorMut<'_>) -> Result<()> {
        const OP: &str = "log_softmax_rows";
        let ck = Check(OP);
        let (_, cols) = ck.matrix("x", x.shape())?;
        ck.expect("y", x.shape(), y.shape())?;
        let (x, mut y) = (self.f32_in(OP, "x", x)?, self.f32_out(OP, "y", y)?);
        self.kernels
            .log_softmax_rows(&x, cols, &mut y)
            .map_err(cuda_err(OP))
    }

    fn softmax_rows_bwd(&self, y: &Tensor, dy: &Tensor, dx: TensorMut<'_>) -> Result<()> {
        const OP: &str = "softmax_rows_bwd";
        let ck = Check(OP);
        let (_, cols) = ck.matrix("y", y.shape())?;
        ck.same(y.shape(), dy.shape())?;
        ck.expect("dx", y.shape(), dx.shape())?;
        let (y, dy) = (self.f32_in(OP, "y", y)?, self.f32_in(OP, "dy", dy)?);
        let mut dx = self.f32_out(OP, "dx", dx)?;
        self.kernels
            .softmax_rows_bwd(&y, &dy, cols, &mut dx)
            .map_err(cuda_err(OP))
    }

    fn log_softmax_rows_bwd(&self, y: &Tensor, dy: &Tensor, dx: TensorMut<'_>) -> Result<()> {
        const OP: &str = "log_softmax_rows_bwd";
        let ck = Check(OP);
        let (_, cols) = ck.matrix("y", y.shape())?;
        ck.same(y.shape(), dy.shape())?;
        ck.expect("dx", y.shape(), dx.shape())?;
        let (y, dy) = (self.f32_in(OP, "y", y)?, self.f32_in(OP, "dy", dy)?);
        let mut dx = self.f32_out(OP, "dx", dx)?;
        self.kernels
            .log_softmax_rows_bwd(&y, &dy, cols, &mut dx)
            .map_err(cuda_err(OP))
    }

    fn nll_log_softmax(
        &self,
        x: &Tensor,
        labels: &Tensor,
        probs: TensorMut<'_>,
        loss: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "nll_log_softmax";
        let ck = Check(OP);
        let (rows, cols) = ck.matrix("x", x.shape())?;
        let per_row = x.shape().without_last();
        ck.expect("labels", per_row, labels.shape())?;
        ck.expect("probs", x.shape(), probs.shape())?;
        ck.expect("loss", per_row, loss.shape())?;
        let (x, labels) = (self.f32_in(OP, "x", x)?, self.u32_in(OP, "labels", labels)?);
        let (mut probs, mut loss) = (
            self.f32_out(OP, "probs", probs)?,
            self.f32_out(OP, "loss", loss)?,
        );
        match (rows, cols) {
            (0, _) => Ok(()),
            (_, 0) => Err(crate::check::no_classes(OP)),
            _ => self
                .kernels
                .nll_log_softmax(&x, cols, &labels, &mut probs, &mut loss)
                .map_err(cuda_err(OP)),
        }
    }

    fn nll_log_softmax_bwd(
        &self,
        probs: &Tensor,
        labels: &Tensor,
        dloss: &Tensor,
        dx: TensorMut<'_>,
    ) -> Result<()> {
        const OP: &str = "nll_log_softmax_bwd";
        let ck = Check(OP);
        let (rows, cols) = ck.matrix("probs", probs.shape())?;
        let per_row = probs.shape().without_last();
        ck.expect("labels", per_row, labels.shape())?;
        ck.expect("dloss", per_row, dloss.shape())?;
        ck.expect("dx", probs.shape(), dx.shape())?;
        let (probs, labels) = (
            self.f32_in(OP, "probs", probs)?,
            self.u32_in(OP, "labels", labels)?,
        );
        let (dloss, mut dx) = (
            self.f32_in(OP, "dloss", dloss)?,
            self.f32_out(OP, "dx", dx)?,
        );
        match (rows, cols) {
            (0, _) => Ok(()),
            (_, 0) => Err(crate::check::no_classes(OP)),
            _ => self
                .kernels
                .nll_log_softmax_bwd(&probs, cols, &labels, &dloss, &mut dx)
                .map_err(cuda_err(OP)),
        }
    }

    fn row_sums(&self, x: &Tensor, out: TensorMut<'_>) -> Result<()> {
        const OP: &str = "row_sums";
        let ck = Check(OP);
        let (_, cols) = ck.matrix("x", x.shape())?;
        ck.expect("out", x.shape().without_last(), out.shape())?;
        let (x, mut out) = (self.f32_in(OP, "x", x)?, self.f32_out(OP, "out", out)?);
        self.kernels
            .row_sums(&x, cols, &mut out)
            .map_err(cuda_err(OP))
    }

    fn col_sums_acc(&self, x: &Tensor, out: TensorMut<'_>) -> Result<()> {
        const OP: &str = "col_sums_acc";
        let ck = Check(OP);
        let (_, cols) = ck.matrix("x", x.shape())?;
        ck.expect("out", Shape::from([cols]), out.shape())?;
        let (x, mut out) = (self.f32_in(OP, "x", x)?, self.f32_out(OP, "out", out)?);
        self.kernels
            .col_sums_acc(&x, cols, &mut out)
            .map_err(cuda_err(OP))
    }
}
