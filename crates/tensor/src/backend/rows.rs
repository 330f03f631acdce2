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
