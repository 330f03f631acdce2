// Whole-row moves along dimension 0: gather, scatter-add, broadcast.
// Index values are checked here (the host cannot see them) and reported
// through the error word; an out-of-range row is skipped, never read or
// written.
#include "common.cuh"

#define ERR_GATHER 1u
#define ERR_SCATTER 2u
#define ERR_COPY_ROWS_AT 5u

// dst[i, :] = src[idx[i], :], one thread per output element.
extern "C" __global__ void gather_rows(const float* src, u32 table_rows, const u32* idx,
                                       float* dst, u64 n_idx, u32 cols, u32* err) {
    GRID_STRIDE(e, n_idx * cols) {
        u64 i = e / cols;
        u32 r = idx[i];
        if (r >= table_rows) {
            report_index(err, ERR_GATHER, r, i, table_rows);
            continue;
        }
        dst[e] = src[(u64)r * cols + (e - i * cols)];
    }
}

// dst[idx[i], :] += src[i, :] with atomics: duplicates accumulate in an
// unspecified order (results may differ in the last bits run to run).
extern "C" __global__ void scatter_add_rows(const float* src, const u32* idx, float* dst,
                                            u32 table_rows, u64 n_idx, u32 cols, u32* err) {
    GRID_STRIDE(e, n_idx * cols) {
        u64 i = e / cols;
        u32 r = idx[i];
        if (r >= table_rows) {
            report_index(err, ERR_SCATTER, r, i, table_rows);
            continue;
        }
        atomicAdd(&dst[(u64)r * cols + (e - i * cols)], src[e]);
    }
}

// The deterministic variant: one thread per column walks the positions in
// order, so duplicates accumulate exactly as on the CPU (bit-for-bit the
// same sums), at the price of a serial loop over the rows.
extern "C" __global__ void scatter_add_rows_ordered(const float* src, const u32* idx, float* dst,
                                                    u32 table_rows, u64 n_idx, u32 cols,
                                                    u32* err) {
    GRID_STRIDE(c, cols) {
        for (u64 i = 0; i < n_idx; ++i) {
            u32 r = idx[i];
            if (r >= table_rows) {
                if (c == 0) report_index(err, ERR_SCATTER, r, i, table_rows);
                continue;
            }
            dst[(u64)r * cols + c] += src[i * cols + c];
        }
    }
}

// dst[rows[n + i], :] (+)= src[rows[i], :] for i < n: how rows of several
// batches are placed into one (and, accumulating, their gradients sent
// back) in one launch instead of one copy per row. `rows` holds the n
// source ids, then the n destination ids (one upload). The host checks
// them; a bad one here is reported, never read or written. Accumulating
// duplicates use atomics (order unspecified, as scatter_add_rows).
extern "C" __global__ void copy_rows_at(const float* src, u32 src_rows, const u32* rows,
                                        float* dst, u32 dst_rows, u64 n, u32 cols,
                                        u32 accumulate, u32* err) {
    GRID_STRIDE(e, n * cols) {
        u64 i = e / cols, c = e - i * cols;
        u32 s = rows[i], d = rows[n + i];
        if (s >= src_rows) {
            report_index(err, ERR_COPY_ROWS_AT, s, i, src_rows);
            continue;
        }
        if (d >= dst_rows) {
            report_index(err, ERR_COPY_ROWS_AT, d, n + i, dst_rows);
            continue;
        }
        float v = src[(u64)s * cols + c];
        if (accumulate) {
            atomicAdd(&dst[(u64)d * cols + c], v);
        } else {
            dst[(u64)d * cols + c] = v;
        }
    }
}

// Every row of dst (n / cols rows) becomes row.
extern "C" __global__ void broadcast_row(const float* row, float* dst, u64 n, u32 cols) {
    GRID_STRIDE(e, n) { dst[e] = row[e % cols]; }
}

// dst[r, dst_col + j] (+)= src[r, src_col + j] for j < width, every row.
extern "C" __global__ void copy_cols(const float* src, u32 src_cols, u32 src_col, float* dst,
                                     u32 dst_cols, u32 dst_col, u32 width, u64 rows,
                                     u32 accumulate) {
    GRID_STRIDE(e, rows * width) {
        u64 r = e / width, j = e - r * width;
        float v = src[r * src_cols + src_col + j];
        float* d = &dst[r * dst_cols + dst_col + j];
        *d = accumulate ? *d + v : v;
    }
}
