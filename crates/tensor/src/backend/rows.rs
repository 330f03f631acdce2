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

    /// Rows of several tensors placed into one ("gather_rows_from"):
    /// `dst[dst_rows[i]] = srcs[t][r]` for `(t, r) = from[i]`. Equal row
    /// shapes, every index in range, and no row of `dst` twice. How a
    /// batch's argument is assembled from the outputs of many batches. The
    /// default moves the rows of each source with one
    /// [`RowOps::copy_rows_at`]; a backend may do it all in one pass.
    fn gather_rows_from(
        &self,
        srcs: &[&Tensor],
        from: &[(u32, u32)],
        mut dst: TensorMut<'_>,
        dst_rows: &[u32],
    ) -> Result<()> {
        crate::check::gather_rows_from(srcs, from, dst.shape(), dst_rows)?;
        for (t, (there, here)) in by_tensor(srcs.len(), from, dst_rows) {
            self.copy_rows_at(srcs[t], &there, dst.reborrow(), &here, false)?;
        }
        Ok(())
    }

    /// Rows of one tensor added into several ("scatter_add_rows_to"):
    /// `dsts[t][r] += src[src_rows[i]]` for `(t, r) = to[i]`; duplicates
    /// add up. Equal row shapes, every index in range. How a batch's
    /// argument gradient goes back to the many batches it came from. The
    /// default adds into each destination with one
    /// [`RowOps::copy_rows_at`]; a backend may do it all in one pass.
    fn scatter_add_rows_to(
        &self,
        src: &Tensor,
        src_rows: &[u32],
        dsts: &mut [TensorMut<'_>],
        to: &[(u32, u32)],
    ) -> Result<()> {
        crate::check::scatter_add_rows_to(src.shape(), src_rows, dsts, to)?;
        for (t, (there, here)) in by_tensor(dsts.len(), to, src_rows) {
            self.copy_rows_at(src, &here, dsts[t].reborrow(), &there, true)?;
        }
        Ok(())
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

/// `(tensor, row)` pairs and the matching rows of the one tensor, grouped
/// by tensor (in tensor order, positions in order within each): for each
/// tensor with any, `(tensor, (its rows, the one tensor's rows))`.
pub(crate) fn by_tensor(
    tensors: usize,
    pairs: &[(u32, u32)],
    rows: &[u32],
) -> impl Iterator<Item = (usize, (Vec<u32>, Vec<u32>))> {
    let mut groups = vec![(Vec::new(), Vec::new()); tensors];
    for (&(t, r), &row) in pairs.iter().zip(rows) {
        groups[t as usize].0.push(r);
        groups[t as usize].1.push(row);
    }
    groups
        .into_iter()
        .enumerate()
        .filter(|(_, (there, _))| !there.is_empty())
}
