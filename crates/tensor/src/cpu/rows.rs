//! RowOps for the CPU backend.

use super::{check_indices, f32_in, f32_out, u32_in, CpuBackend};
use crate::backend::RowOps;
use crate::check;
use crate::error::{Result, TensorError};
use crate::{Tensor, TensorMut};

impl RowOps for CpuBackend {
    fn gather_rows(&self, src: &Tensor, idx: &Tensor, dst: TensorMut<'_>) -> Result<()> {
        const OP: &str = "gather_rows";
        let cols = check::gather_rows(src.shape(), idx.shape(), dst.shape())?;
        let table_rows = src.num_rows();
        let (src, idx) = (f32_in(OP, "src", src)?, u32_in(OP, "idx", idx)?);
        let dst = f32_out(OP, "dst", dst)?;
        if cols == 0 {
            return check_indices(OP, idx, table_rows);
        }
        self.kernels
            .gather_rows(src, cols, idx, dst)
            .map_err(TensorError::kernel(OP))
    }

    fn scatter_add_rows(&self, src: &Tensor, idx: &Tensor, dst: TensorMut<'_>) -> Result<()> {
        const OP: &str = "scatter_add_rows";
        let cols = check::scatter_add_rows(src.shape(), idx.shape(), dst.shape())?;
        let table_rows = dst.num_rows();
        let (src, idx) = (f32_in(OP, "src", src)?, u32_in(OP, "idx", idx)?);
        let dst = f32_out(OP, "dst", dst)?;
        if cols == 0 {
            return check_indices(OP, idx, table_rows);
        }
        self.kernels
            .scatter_add_rows(src, cols, idx, dst)
            .map_err(TensorError::kernel(OP))
    }

    fn copy_rows_at(
        &self,
        src: &Tensor,
        src_rows: &[u32],
        dst: TensorMut<'_>,
        dst_rows: &[u32],
        accumulate: bool,
    ) -> Result<()> {
        const OP: &str = "copy_rows_at";
        let cols = check::copy_rows_at(src.shape(), src_rows, dst.shape(), dst_rows)?;
        let (src, dst) = (f32_in(OP, "src", src)?, f32_out(OP, "dst", dst)?);
        if cols == 0 {
            return Ok(());
        }
        self.kernels
            .gather_scatter_rows(src, cols, src_rows, dst, dst_rows, accumulate)
            .map_err(TensorError::kernel(OP))
    }

    fn gather_rows_from(
        &self,
        srcs: &[&Tensor],
        from: &[(u32, u32)],
        dst: TensorMut<'_>,
        dst_rows: &[u32],
    ) -> Result<()> {
        const OP: &str = "gather_rows_from";
        let cols = check::gather_rows_from(srcs, from, dst.shape(), dst_rows)?;
        let slices = srcs
            .iter()
            .map(|t| f32_in(OP, "srcs", t))
            .collect::<Result<Vec<_>>>()?;
        let dst = f32_out(OP, "dst", dst)?;
        if cols == 0 {
            return Ok(());
        }
        self.kernels
            .gather_rows_from(&slices, cols, from, dst, dst_rows)
            .map_err(TensorError::kernel(OP))
    }

    fn scatter_add_rows_to(
        &self,
        src: &Tensor,
        src_rows: &[u32],
        dsts: &mut [TensorMut<'_>],
        to: &[(u32, u32)],
    ) -> Result<()> {
        const OP: &str = "scatter_add_rows_to";
        let cols = check::scatter_add_rows_to(src.shape(), src_rows, dsts, to)?;
        let src = f32_in(OP, "src", src)?;
        let mut slices = dsts
            .iter_mut()
            .map(|t| f32_out(OP, "dsts", t.reborrow()))
            .collect::<Result<Vec<_>>>()?;
        if cols == 0 {
            return Ok(());
        }
        self.kernels
            .scatter_add_rows_to(src, cols, src_rows, &mut slices, to)
            .map_err(TensorError::kernel(OP))
    }

    fn copy_rows(
        &self,
        src: &Tensor,
        src_row: usize,
        dst: TensorMut<'_>,
        dst_row: usize,
        n: usize,
    ) -> Result<()> {
        const OP: &str = "copy_rows";
        let cols = check::copy_rows(src.shape(), src_row, dst.shape(), dst_row, n)?;
        let (src, dst) = (f32_in(OP, "src", src)?, f32_out(OP, "dst", dst)?);
        if cols == 0 || n == 0 {
            return Ok(());
        }
        self.kernels
            .copy_rows(src, src_row, dst, dst_row, n, cols)
            .map_err(TensorError::kernel(OP))
    }

    fn broadcast_row(&self, row: &Tensor, dst: TensorMut<'_>) -> Result<()> {
        const OP: &str = "broadcast_row";
        check::broadcast_row(row.shape(), dst.shape())?;
        let (row, dst) = (f32_in(OP, "row", row)?, f32_out(OP, "dst", dst)?);
        if row.is_empty() {
            return Ok(());
        }
        self.kernels
            .broadcast_row(row, dst)
            .map_err(TensorError::kernel(OP))
    }

    fn copy_cols(
        &self,
        src: &Tensor,
        src_col: usize,
        dst: TensorMut<'_>,
        dst_col: usize,
        width: usize,
        accumulate: bool,
    ) -> Result<()> {
        const OP: &str = "copy_cols";
        let (sc, dc) = check::copy_cols(src.shape(), src_col, dst.shape(), dst_col, width)?;
        let (src, dst) = (f32_in(OP, "src", src)?, f32_out(OP, "dst", dst)?);
        if width == 0 {
            return Ok(());
        }
        self.kernels
            .copy_cols(src, sc, src_col, dst, dc, dst_col, width, accumulate)
            .map_err(TensorError::kernel(OP))
    }
}
