//! RowOps for the CUDA backend.

use super::{cuda_err, CudaBackend};
use crate::backend::RowOps;
use crate::check;
use crate::error::{Result, TensorError};
use crate::KernelError;
use crate::{Tensor, TensorMut};

/// An index error found on the host (zero-column moves check their ids
/// there) is the CPU backend's error, word for word and variant for variant.
fn host_checked(op: &'static str) -> impl Fn(sheaf_kernels_cuda::CudaError) -> TensorError {
    move |e| match e {
        sheaf_kernels_cuda::CudaError::Index {
            kernel,
            index,
            position,
            bound,
        } => TensorError::Kernel {
            op,
            source: KernelError::Index {
                kernel,
                index,
                position,
                rows: bound,
            },
        },
        other => cuda_err(op)(other),
    }
}

/// The source ids, then the destination ids, of a copy in which each
/// destination keeps only its LAST write: the CPU copies in order, so a row
/// written twice ends as the later source; threads writing it at once
/// would race instead.
fn last_writes(src_rows: &[u32], dst_rows: &[u32], dst_n: usize) -> Vec<u32> {
    let mut seen = vec![0u64; dst_n.div_ceil(64)];
    let mut mark = |d: u32| {
        let (w, bit) = (d as usize / 64, 1u64 << (d % 64));
        let fresh = seen[w] & bit == 0;
        seen[w] |= bit;
        fresh
    };
    let mut keep: Vec<usize> = (0..dst_rows.len())
        .rev()
        .filter(|&i| mark(dst_rows[i]))
        .collect();
    keep.reverse();
    keep.iter()
        .map(|&i| src_rows[i])
        .chain(keep.iter().map(|&i| dst_rows[i]))
        .collect()
}

impl RowOps for CudaBackend {
    fn gather_rows(&self, src: &Tensor, idx: &Tensor, dst: TensorMut<'_>) -> Result<()> {
        const OP: &str = "gather_rows";
        let cols = check::gather_rows(src.shape(), idx.shape(), dst.shape())?;
        let table_rows = src.num_rows();
        let (src, idx) = (self.f32_in(OP, "src", src)?, self.u32_in(OP, "idx", idx)?);
        let mut dst = self.f32_out(OP, "dst", dst)?;
        if cols == 0 {
            // Nothing to move, but bad index values are still errors.
            return self
                .kernels
                .check_indices(OP, &idx, table_rows)
                .map_err(host_checked(OP));
        }
        self.kernels
            .gather_rows(&src, cols, &idx, &mut dst)
            .map_err(cuda_err(OP))
    }

    fn scatter_add_rows(&self, src: &Tensor, idx: &Tensor, dst: TensorMut<'_>) -> Result<()> {
        const OP: &str = "scatter_add_rows";
        let cols = check::scatter_add_rows(src.shape(), idx.shape(), dst.shape())?;
        let table_rows = dst.num_rows();
        let (src, idx) = (self.f32_in(OP, "src", src)?, self.u32_in(OP, "idx", idx)?);
        let mut dst = self.f32_out(OP, "dst", dst)?;
        if cols == 0 {
            return self
                .kernels
                .check_indices(OP, &idx, table_rows)
                .map_err(host_checked(OP));
        }
        self.kernels
            .scatter_add_rows(&src, cols, &idx, &mut dst)
            .map_err(cuda_err(OP))
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
        let dst_n = dst.num_rows();
        let (src, mut dst) = (self.f32_in(OP, "src", src)?, self.f32_out(OP, "dst", dst)?);
        if cols == 0 || src_rows.is_empty() {
            return Ok(());
        }
        if accumulate && self.kernels.deterministic() {
            // Duplicates must add up in position order, as on the CPU:
            // gather, then the ordered scatter-add.
            let n = src_rows.len();
            let from = self.kernels.upload(src_rows).map_err(cuda_err(OP))?;
            let to = self.kernels.upload(dst_rows).map_err(cuda_err(OP))?;
            let mut rows = self
                .kernels
                .alloc_zeros::<f32>(n * cols)
                .map_err(cuda_err(OP))?;
            self.kernels
                .gather_rows(&src, cols, &from.as_view(), &mut rows.as_view_mut())
                .map_err(cuda_err(OP))?;
            return self
                .kernels
                .scatter_add_rows(&rows.as_view(), cols, &to.as_view(), &mut dst)
                .map_err(cuda_err(OP));
        }
        // Both id lists in one upload: one copy and one launch in all.
        let ids = if accumulate {
            src_rows.iter().chain(dst_rows).copied().collect()
        } else {
            last_writes(src_rows, dst_rows, dst_n)
        };
        let ids = self.kernels.upload(&ids).map_err(cuda_err(OP))?;
        self.kernels
            .copy_rows_at(&src, cols, &ids.as_view(), &mut dst, accumulate)
            .map_err(cuda_err(OP))
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
        let views = srcs
            .iter()
            .map(|t| self.f32_in(OP, "srcs", t))
            .collect::<Result<Vec<_>>>()?;
        let mut dst = self.f32_out(OP, "dst", dst)?;
        if cols == 0 {
            return Ok(());
        }
        self.kernels
            .gather_rows_from(&views, cols, from, &mut dst, dst_rows)
            .map_err(cuda_err(OP))
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
        if cols == 0 {
            // Nothing moves; the dtypes and devices are still checked.
            self.f32_in(OP, "src", src)?;
            for t in dsts.iter_mut() {
                self.f32_out(OP, "dsts", t.reborrow())?;
            }
            return Ok(());
        }
        if self.kernels.deterministic() {
            // Duplicates must add up in position order, as on the CPU: one
            // ordered add per destination (copy_rows_at's deterministic path).
            for (t, (there, here)) in crate::backend::by_tensor(dsts.len(), to, src_rows) {
                self.copy_rows_at(src, &here, dsts[t].reborrow(), &there, true)?;
            }
            return Ok(());
        }
        let src = self.f32_in(OP, "src", src)?;
        let mut views = dsts
            .iter_mut()
            .map(|t| self.f32_out(OP, "dsts", t.reborrow()))
            .collect::<Result<Vec<_>>>()?;
        self.kernels
            .scatter_add_rows_to(&src, cols, src_rows, &mut views, to)
            .map_err(cuda_err(OP))
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
        let (src, dst) = (self.f32_in(OP, "src", src)?, self.f32_out(OP, "dst", dst)?);
        if cols == 0 || n == 0 {
            return Ok(());
        }
        let from = src.slice(src_row * cols..(src_row + n) * cols);
        let mut to = sheaf_kernels_cuda::narrow_view_mut(dst, dst_row * cols, (dst_row + n) * cols);
        self.kernels.copy(&from, &mut to).map_err(cuda_err(OP))
    }

    fn broadcast_row(&self, row: &Tensor, dst: TensorMut<'_>) -> Result<()> {
        const OP: &str = "broadcast_row";
        check::broadcast_row(row.shape(), dst.shape())?;
        let (row, mut dst) = (self.f32_in(OP, "row", row)?, self.f32_out(OP, "dst", dst)?);
        if row.is_empty() {
            return Ok(());
        }
        self.kernels
            .broadcast_row(&row, &mut dst)
            .map_err(cuda_err(OP))
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
        let (src, mut dst) = (self.f32_in(OP, "src", src)?, self.f32_out(OP, "dst", dst)?);
        if width == 0 {
            return Ok(());
        }
        self.kernels
            .copy_cols(&src, sc, src_col, &mut dst, dc, dst_col, width, accumulate)
            .map_err(cuda_err(OP))
    }
}
