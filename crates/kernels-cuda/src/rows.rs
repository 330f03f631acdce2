//! Row gather, scatter-add and broadcast along dimension 0.

use cudarc::driver::{CudaView, CudaViewMut, DevicePtr, DevicePtrMut};

use crate::error::{CudaError, Result};
use crate::launch::launch;
use crate::CudaKernels;

/// `rows x cols` from a length, or why not.
fn table_rows(kernel: &'static str, arg: &'static str, len: usize, cols: usize) -> Result<u32> {
    if cols == 0 || !len.is_multiple_of(cols) {
        return Err(CudaError::Invalid {
            kernel,
            what: format!("`{arg}` has length {len}, not a positive multiple of cols = {cols}"),
        });
    }
    u32::try_from(len / cols).map_err(|_| CudaError::Invalid {
        kernel,
        what: format!("`{arg}` has {} rows; row ids are u32", len / cols),
    })
}

fn cols_u32(kernel: &'static str, cols: usize) -> Result<u32> {
    u32::try_from(cols).map_err(|_| CudaError::Invalid {
        kernel,
        what: format!("{cols} columns do not fit u32"),
    })
}

impl CudaKernels {
    /// `dst[i, :] = src[idx[i], :]`; `src` is a `? x cols` table. An index
    /// past the table is reported by the next [`CudaKernels::check`].
    pub fn gather_rows(
        &self,
        src: &CudaView<'_, f32>,
        cols: usize,
        idx: &CudaView<'_, u32>,
        dst: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        const K: &str = "gather_rows";
        let rows = table_rows(K, "src", src.len(), cols)?;
        CudaError::check_len(K, "dst", dst.len(), idx.len() * cols)?;
        let (n_idx, c) = (idx.len() as u64, cols_u32(K, cols)?);
        if dst.is_empty() {
            return Ok(());
        }
        let err = self.error_word();
        let cfg = self.elementwise_config(dst.len());
        launch!(
            self,
            "gather_rows",
            cfg,
            [src, &rows, idx, dst, &n_idx, &c, &*err]
        )
    }

    /// `dst[idx[i], :] += src[i, :]`: duplicates accumulate, with atomics
    /// or, under [`CudaKernels::set_deterministic`], in position order.
    pub fn scatter_add_rows(
        &self,
        src: &CudaView<'_, f32>,
        cols: usize,
        idx: &CudaView<'_, u32>,
        dst: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        const K: &str = "scatter_add_rows";
        let rows = table_rows(K, "dst", dst.len(), cols)?;
        CudaError::check_len(K, "src", src.len(), idx.len() * cols)?;
        let (n_idx, c) = (idx.len() as u64, cols_u32(K, cols)?);
        if src.is_empty() {
            return Ok(());
        }
        let err = self.error_word();
        if self.deterministic() {
            let cfg = self.elementwise_config(cols);
            launch!(
                self,
                "scatter_add_rows_ordered",
                cfg,
                [src, idx, dst, &rows, &n_idx, &c, &*err]
            )
        } else {
            let cfg = self.elementwise_config(src.len());
            launch!(
                self,
                "scatter_add_rows",
                cfg,
                [src, idx, dst, &rows, &n_idx, &c, &*err]
            )
        }
    }

    /// `dst[rows[n + i], :] (+)= src[rows[i], :]` for `i < n`, where `rows`
    /// holds `2n` ids (the sources, then the destinations): rows of one
    /// batch placed into another in one launch. Accumulating, duplicate
    /// destinations add up with atomics (in an unspecified order). An id
    /// past its table is reported by the next [`CudaKernels::check`].
    pub fn copy_rows_at(
        &self,
        src: &CudaView<'_, f32>,
        cols: usize,
        rows: &CudaView<'_, u32>,
        dst: &mut CudaViewMut<'_, f32>,
        accumulate: bool,
    ) -> Result<()> {
        const K: &str = "copy_rows_at";
        if !rows.len().is_multiple_of(2) {
            return Err(CudaError::Invalid {
                kernel: K,
                what: format!("`rows` has odd length {}", rows.len()),
            });
        }
        let n = rows.len() / 2;
        if n == 0 {
            return Ok(());
        }
        let src_rows = table_rows(K, "src", src.len(), cols)?;
        let dst_rows = table_rows(K, "dst", dst.len(), cols)?;
        let (n, c, acc) = (n as u64, cols_u32(K, cols)?, u32::from(accumulate));
        let err = self.error_word();
        let cfg = self.elementwise_config(n as usize * cols);
        launch!(
            self,
            "copy_rows_at",
            cfg,
            [src, &src_rows, rows, dst, &dst_rows, &n, &c, &acc, &*err]
        )
    }

    /// `dst[dst_rows[i], :] = srcs[t][r, :]` for `(t, r) = from[i]`: rows of
    /// several `? x cols` tables into one in ONE launch (the addresses and
    /// all indices go up in one upload). Each row of `dst` must be named
    /// once at most (the caller checks; writes to one row would race). A
    /// bad index is reported by the next [`CudaKernels::check`].
    pub fn gather_rows_from(
        &self,
        srcs: &[CudaView<'_, f32>],
        cols: usize,
        from: &[(u32, u32)],
        dst: &mut CudaViewMut<'_, f32>,
        dst_rows: &[u32],
    ) -> Result<()> {
        const K: &str = "gather_rows_from";
        CudaError::check_len(K, "dst_rows", dst_rows.len(), from.len())?;
        if from.is_empty() {
            return Ok(());
        }
        let rows = table_rows(K, "dst", dst.len(), cols)?;
        let stream = self.stream().clone();
        let mut table = Vec::with_capacity(2 * srcs.len() + 2 * from.len());
        let mut guards = Vec::with_capacity(srcs.len());
        for s in srcs {
            let (ptr, guard) = s.device_ptr(&stream);
            table.push(ptr);
            guards.push(guard);
        }
        for s in srcs {
            table.push(u64::from(table_rows(K, "srcs", s.len(), cols)?));
        }
        self.launch_rows_of_many(K, table, from, dst_rows, cols, |k, n, c, table, err| {
            launch!(
                self,
                "gather_rows_from",
                self.elementwise_config(n as usize * cols),
                [table, &k, &n, &c, dst, &rows, err]
            )
        })
    }

    /// `dsts[t][r, :] += src[src_rows[i], :]` for `(t, r) = to[i]`, with
    /// atomics: one `? x cols` table's rows added into several in ONE
    /// launch. Duplicates add up in an unspecified order. A bad index is
    /// reported by the next [`CudaKernels::check`].
    pub fn scatter_add_rows_to(
        &self,
        src: &CudaView<'_, f32>,
        cols: usize,
        src_rows: &[u32],
        dsts: &mut [CudaViewMut<'_, f32>],
        to: &[(u32, u32)],
    ) -> Result<()> {
        const K: &str = "scatter_add_rows_to";
        CudaError::check_len(K, "src_rows", src_rows.len(), to.len())?;
        if to.is_empty() {
            return Ok(());
        }
        let rows = table_rows(K, "src", src.len(), cols)?;
        let stream = self.stream().clone();
        let mut counts = Vec::with_capacity(dsts.len());
        for d in dsts.iter() {
            counts.push(u64::from(table_rows(K, "dsts", d.len(), cols)?));
        }
        let mut table = Vec::with_capacity(2 * dsts.len() + 2 * to.len());
        let mut guards = Vec::with_capacity(dsts.len());
        for d in dsts.iter_mut() {
            let (ptr, guard) = d.device_ptr_mut(&stream);
            table.push(ptr);
            guards.push(guard);
        }
        table.extend(counts);
        self.launch_rows_of_many(K, table, to, src_rows, cols, |k, n, c, table, err| {
            launch!(
                self,
                "scatter_add_rows_to",
                self.elementwise_config(n as usize * cols),
                [table, &k, &n, &c, src, &rows, err]
            )
        })
    }

    /// Completes `table` (addresses and row counts of the k tensors) with
    /// the pairs and the one tensor's rows, uploads it, and launches.
    fn launch_rows_of_many(
        &self,
        kernel: &'static str,
        mut table: Vec<u64>,
        pairs: &[(u32, u32)],
        rows: &[u32],
        cols: usize,
        launch: impl FnOnce(
            u32,
            u64,
            u32,
            &CudaView<'_, u64>,
            &cudarc::driver::CudaSlice<u32>,
        ) -> Result<()>,
    ) -> Result<()> {
        let k = u32::try_from(table.len() / 2).map_err(|_| CudaError::Invalid {
            kernel,
            what: format!("{} tensors; at most 2^32", table.len() / 2),
        })?;
        table.extend(
            pairs
                .iter()
                .map(|&(t, r)| u64::from(t) << 32 | u64::from(r)),
        );
        table.extend(rows.iter().map(|&r| u64::from(r)));
        let table = self.upload(&table)?;
        let err = self.error_word();
        let n = pairs.len() as u64;
        launch(k, n, cols_u32(kernel, cols)?, &table.as_view(), &err)
    }

    /// Index values `idx[i] < bound`, checked on the host: for row moves of
    /// zero columns, which launch no kernel and so never read the indices
    /// on the device, yet must reject a bad one as the CPU does. Waits for
    /// the stream to read `idx`, but unlike a download leaves an error that
    /// an earlier kernel recorded for the next [`CudaKernels::check`], so
    /// that it is reported under that kernel's name, not this one's.
    pub fn check_indices(
        &self,
        kernel: &'static str,
        idx: &CudaView<'_, u32>,
        bound: usize,
    ) -> Result<()> {
        if idx.is_empty() {
            return Ok(());
        }
        let mut host = vec![0u32; idx.len()];
        let _api = self.count_launch("check_indices");
        let stream = self.stream();
        stream
            .memcpy_dtoh(idx, &mut host)
            .map_err(CudaError::driver(kernel))?;
        stream.synchronize().map_err(CudaError::driver(kernel))?;
        match host.iter().position(|&r| r as usize >= bound) {
            None => Ok(()),
            Some(position) => Err(CudaError::Index {
                kernel,
                index: host[position] as usize,
                position,
                bound,
            }),
        }
    }

    /// `dst[r, dst_col..+width] (+)= src[r, src_col..+width]` for every
    /// row of the `? x src_cols` matrix `src` and `? x dst_cols` `dst`.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_cols(
        &self,
        src: &CudaView<'_, f32>,
        src_cols: usize,
        src_col: usize,
        dst: &mut CudaViewMut<'_, f32>,
        dst_cols: usize,
        dst_col: usize,
        width: usize,
        accumulate: bool,
    ) -> Result<()> {
        const K: &str = "copy_cols";
        let invalid = |what: String| Err(CudaError::Invalid { kernel: K, what });
        if src_col.checked_add(width).is_none_or(|e| e > src_cols) {
            return invalid(format!(
                "columns {src_col}..+{width} of a {src_cols}-wide `src`"
            ));
        }
        if dst_col.checked_add(width).is_none_or(|e| e > dst_cols) {
            return invalid(format!(
                "columns {dst_col}..+{width} of a {dst_cols}-wide `dst`"
            ));
        }
        if width == 0 {
            return Ok(());
        }
        let rows = table_rows(K, "src", src.len(), src_cols)?;
        CudaError::check_len(K, "dst", dst.len(), rows as usize * dst_cols)?;
        let [sc, so, dc, dof, w] = [src_cols, src_col, dst_cols, dst_col, width].map(|v| v as u32);
        for v in [src_cols, dst_cols] {
            cols_u32(K, v)?;
        }
        let (rows, acc) = (u64::from(rows), u32::from(accumulate));
        let cfg = self.elementwise_config(rows as usize * width);
        launch!(
            self,
            "copy_cols",
            cfg,
            [src, &sc, &so, dst, &dc, &dof, &w, &rows, &acc]
        )
    }

    /// Every row of `dst` (`dst.len() / row.len()` rows) becomes `row`.
    pub fn broadcast_row(
        &self,
        row: &CudaView<'_, f32>,
        dst: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        const K: &str = "broadcast_row";
        if row.is_empty() {
            return CudaError::check_len(K, "dst", dst.len(), 0);
        }
        table_rows(K, "dst", dst.len(), row.len())?;
        let (n, c) = (dst.len() as u64, cols_u32(K, row.len())?);
        if n == 0 {
            return Ok(());
        }
        launch!(
            self,
            "broadcast_row",
            self.elementwise_config(dst.len()),
            [row, dst, &n, &c]
        )
    }
}
