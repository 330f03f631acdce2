//! Whole-row operations along dimension 0: gather by index, scatter-add by
//! index, copy a row range, broadcast one row. These move data between the
//! per-instance layout of a graph and the batched blocks kernels run on.

use crate::error::Result;
use crate::{Tensor, TensorMut};

/// Whole-row operations along dimension 0: gather by index, scatter-add by
/// index, copy a row range, broadcast one row. These move data between the
/// per-instance layout of a graph and the batched blocks kernels run on.
///
/// Part of [`super::Backend`], whose documentation states the contracts
/// shared by every method.
pub trait RowOps {
    /// `dst[i] = src[idx[i]]` ("gather_rows"): `src` is `[rows, ...]`, `idx` a
    /// `u32` vector `[n]`, `dst` is `[n, ...]` (the row shape of `src`).
    fn gather_rows(&self, src: &Tensor, idx: &Tensor, dst: TensorMut<'_>) -> Result<()>;

    /// `dst[idx[i]] += src[i]` ("scatter_add_rows"); duplicates accumulate.
    /// `src` is `[n, ...]`, `idx` `[n]`, `dst` `[rows, ...]` with the same row
    /// shape.
    fn scatter_add_rows(&self, src: &Tensor, idx: &Tensor, dst: TensorMut<'_>) -> Result<()>;

    /// `dst[dst_rows[i]] = src[src_rows[i]]` for every `i` ("copy_rows_at";
    /// ADDS with `accumulate`, duplicates then add up): equal row shapes,
    /// index lists of equal length given on the host, every row in range
    /// (`OutOfRange` otherwise). How rows of several batches are placed
    /// into one, and their gradients sent back. The default copies row by
    /// row, or gathers into a temporary and scatter-adds it; a backend may
    /// do it in one pass.
    fn copy_rows_at(
        &self,
        src: &Tensor,
        src_rows: &[u32],
        mut dst: TensorMut<'_>,
        dst_rows: &[u32],
        accumulate: bool,
    ) -> Result<()> {
        crate::check::copy_rows_at(src.shape(), src_rows, dst.shape(), dst_rows)?;
        // Dtypes and devices here too: with empty lists no kernel below
        // would look at them.
        let device = src.device();
        let meta = crate::check::meta::<f32>;
        meta("copy_rows_at", "src", src.dtype(), device, device)?;
        meta("copy_rows_at", "dst", dst.dtype(), dst.device(), device)?;
        if !accumulate {
            for (&s, &d) in src_rows.iter().zip(dst_rows) {
                self.copy_rows(src, s as usize, dst.reborrow(), d as usize, 1)?;
            }
            return Ok(());
        }
        let index = |rows: &[u32]| Tensor::from_vec(rows.to_vec(), [rows.len()])?.to_device(device);
        let (from, to) = (index(src_rows)?, index(dst_rows)?);
        let n = src_rows.len();
        let mut rows = Tensor::zeros(src.shape().with_rows(n), crate::DType::F32, device)?;
        self.gather_rows(src, &from, rows.view_mut()?)?;
        self.scatter_add_rows(&rows, &to, dst)
    }

    /// `dst[dst_row + i] = src[src_row + i]` for `i < n` ("copy_rows"); equal
    /// row shapes, both ranges in bounds (`OutOfRange` otherwise).
    fn copy_rows(
        &self,
        src: &Tensor,
        src_row: usize,
        dst: TensorMut<'_>,
        dst_row: usize,
        n: usize,
    ) -> Result<()>;

    /// Every row of `dst` = `row` ("broadcast_row"); `row` has the row shape
    /// of `dst` (a bias `[d]` for `dst` `[b, d]`).
    fn broadcast_row(&self, row: &Tensor, dst: TensorMut<'_>) -> Result<()>;

    /// Column blocks of two matrices with the same row count:
    /// `dst[r, dst_col + j] = src[r, src_col + j]` for `j < width` and every
    /// row `r` (ADDS instead with `accumulate`). How values are placed side
    /// by side (concatenation) and cut apart again, and their gradients.
    fn copy_cols(
        &self,
        src: &Tensor,
        src_col: usize,
        dst: TensorMut<'_>,
        dst_col: usize,
        width: usize,
        accumulate: bool,
    ) -> Result<()>;
}
