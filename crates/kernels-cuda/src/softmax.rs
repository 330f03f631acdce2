//! Softmax, log-softmax, the cross-entropy loss, row and column sums along
//! the last dimension of `rows x cols` matrices.

use cudarc::driver::{CudaView, CudaViewMut};

use crate::error::{CudaError, Result};
use crate::launch::launch;
use crate::CudaKernels;

type In<'a, 'b> = &'a CudaView<'b, f32>;
type Out<'a, 'b> = &'a mut CudaViewMut<'b, f32>;

/// Row count of a `? x cols` matrix of length `len`, as the kernels take it.
fn dims(kernel: &'static str, arg: &'static str, len: usize, cols: usize) -> Result<(u32, u32)> {
    let invalid = |what: String| CudaError::Invalid { kernel, what };
    if cols == 0 {
        return if len == 0 {
            Ok((0, 0))
        } else {
            Err(invalid(format!("`{arg}` has length {len} but cols = 0")))
        };
    }
    if !len.is_multiple_of(cols) {
        return Err(invalid(format!(
            "`{arg}` has length {len}, not a multiple of cols = {cols}"
        )));
    }
    let rows = u32::try_from(len / cols).map_err(|_| invalid("rows do not fit u32".into()))?;
    let cols = u32::try_from(cols).map_err(|_| invalid("cols do not fit u32".into()))?;
    Ok((rows, cols))
}

impl CudaKernels {
    /// `y = softmax(x)` row by row.
    pub fn softmax_rows(&self, x: In, cols: usize, y: Out) -> Result<()> {
        let (r, c) = dims("softmax_rows", "x", x.len(), cols)?;
        CudaError::check_len("softmax_rows", "y", y.len(), x.len())?;
        if r == 0 || c == 0 {
            return Ok(());
        }
        let cfg = self.row_config(r as usize, cols);
        launch!(self, "softmax_rows", cfg, [x, y, &r, &c])
    }

    /// `y = log_softmax(x)` row by row.
    pub fn log_softmax_rows(&self, x: In, cols: usize, y: Out) -> Result<()> {
        let (r, c) = dims("log_softmax_rows", "x", x.len(), cols)?;
        CudaError::check_len("log_softmax_rows", "y", y.len(), x.len())?;
        if r == 0 || c == 0 {
            return Ok(());
        }
        let cfg = self.row_config(r as usize, cols);
        launch!(self, "log_softmax_rows", cfg, [x, y, &r, &c])
    }

    /// `dx += y * (dy - <dy, y>)` from softmax's output `y`.
    pub fn softmax_rows_bwd(&self, y: In, dy: In, cols: usize, dx: Out) -> Result<()> {
        const K: &str = "softmax_rows_bwd";
        let (r, c) = dims(K, "y", y.len(), cols)?;
        CudaError::check_len(K, "dy", dy.len(), y.len())?;
        CudaError::check_len(K, "dx", dx.len(), y.len())?;
        if r == 0 || c == 0 {
            return Ok(());
        }
        launch!(
            self,
            "softmax_rows_bwd",
            self.row_config(r as usize, cols),
            [y, dy, dx, &r, &c]
        )
    }

    /// `dx += dy - exp(y) * sum(dy)` from log-softmax's output `y`.
    pub fn log_softmax_rows_bwd(&self, y: In, dy: In, cols: usize, dx: Out) -> Result<()> {
        const K: &str = "log_softmax_rows_bwd";
        let (r, c) = dims(K, "y", y.len(), cols)?;
        CudaError::check_len(K, "dy", dy.len(), y.len())?;
        CudaError::check_len(K, "dx", dx.len(), y.len())?;
        if r == 0 || c == 0 {
            return Ok(());
        }
        launch!(
            self,
            "log_softmax_rows_bwd",
            self.row_config(r as usize, cols),
            [y, dy, dx, &r, &c]
        )
    }

    /// `probs = softmax(x)`, `loss[r] = -log softmax(x)[r, labels[r]]`. A
    /// label not below `cols` is reported by the next check.
    pub fn nll_log_softmax(
        &self,
        x: In,
        cols: usize,
        labels: &CudaView<'_, u32>,
        probs: Out,
        loss: Out,
    ) -> Result<()> {
        const K: &str = "nll_log_softmax";
        let (r, c) = dims(K, "x", x.len(), cols)?;
        CudaError::check_len(K, "labels", labels.len(), r as usize)?;
        CudaError::check_len(K, "probs", probs.len(), x.len())?;
        CudaError::check_len(K, "loss", loss.len(), r as usize)?;
        if r == 0 {
            return Ok(());
        }
        if c == 0 {
            return Err(CudaError::Invalid {
                kernel: K,
                what: "no classes (cols = 0)".into(),
            });
        }
        let err = self.error_word();
        let cfg = self.row_config(r as usize, cols);
        launch!(
            self,
            "nll_log_softmax",
            cfg,
            [x, labels, probs, loss, &r, &c, &*err]
        )
    }

    /// `dx[r] += dloss[r] (probs[r] - onehot(labels[r]))`.
    pub fn nll_log_softmax_bwd(
        &self,
        probs: In,
        cols: usize,
        labels: &CudaView<'_, u32>,
        dloss: In,
        dx: Out,
    ) -> Result<()> {
        const K: &str = "nll_log_softmax_bwd";
        let (r, c) = dims(K, "probs", probs.len(), cols)?;
        CudaError::check_len(K, "labels", labels.len(), r as usize)?;
        CudaError::check_len(K, "dloss", dloss.len(), r as usize)?;
        CudaError::check_len(K, "dx", dx.len(), probs.len())?;
        if r == 0 || c == 0 {
            return Ok(());
        }
        let err = self.error_word();
        let cfg = self.row_config(r as usize, cols);
        launch!(
            self,
            "nll_log_softmax_bwd",
            cfg,
            [probs, labels, dloss, dx, &r, &c, &*err]
        )
    }

    /// `out[r] = sum(x[r, :])`.
    pub fn row_sums(&self, x: In, cols: usize, out: Out) -> Result<()> {
        let (r, c) = dims("row_sums", "x", x.len(), cols)?;
        if cols == 0 {
            return self.fill(0.0, out);
        }
        CudaError::check_len("row_sums", "out", out.len(), r as usize)?;
        if r == 0 {
            return Ok(());
        }
        launch!(
            self,
            "row_sums",
            self.row_config(r as usize, cols),
            [x, out, &r, &c]
        )
    }

    /// `out[c] += sum(x[:, c])`.
    pub fn col_sums_acc(&self, x: In, cols: usize, out: Out) -> Result<()> {
        let (r, c) = dims("col_sums_acc", "x", x.len(), cols)?;
        CudaError::check_len("col_sums_acc", "out", out.len(), cols)?;
        if r == 0 || c == 0 {
            return Ok(());
        }
        launch!(
            self,
            "col_sums_acc",
            self.elementwise_config(cols),
            [x, out, &r, &c]
        )
    }
}
