// Whole-row moves along dimension 0: gather, scatter-add, broadcast.
// Index values are checked here (the host cannot see them) and reported
// through the error word; an out-of-range row is skipped, never read or
// written.
#include "common.cuh"

#define ERR_GATHER 1u
#define ERR_SCATTER 2u
#define ERR_COPY_ROWS_AT 5u
#define ERR_ROWS_FROM 6u
#define ERR_ROWS_TO 7u

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

// The rows of several tensors in one launch. `table` (one upload) holds k
// tensor addresses, their k row counts, then n pairs (t << 32 | r), then
// the n rows of the one tensor. gather_rows_from: one[rows[i]] =
// many[t][r] (each row of `one` written once; the host checks it);
// scatter_add_rows_to: many[t][r] += one[rows[i]], with atomics. The host
// checks every index; a bad one here is reported, never followed.
__device__ __forceinline__ bool row_of_many(const u64* table, u32 k, u64 n, u64 i, u32 one_rows,
                                            u32 code, u32* err, u32* t, u32* r, u32* row) {
    u64 pair = table[2 * (u64)k + i];
    *t = (u32)(pair >> 32);
    *r = (u32)pair;
    *row = (u32)table[2 * (u64)k + n + i];
    if (*t >= k) {
        report_index(err, code, *t, i, k);
        return false;
    }
    if (*r >= table[k + *t]) {
        report_index(err, code, *r, i, (u32)table[k + *t]);
        return false;
    }
    if (*row >= one_rows) {
        report_index(err, code, *row, n + i, one_rows);
        return false;
    }
    return true;
}

extern "C" __global__ void gather_rows_from(const u64* table, u32 k, u64 n, u32 cols, float* dst,
                                            u32 dst_rows, u32* err) {
    GRID_STRIDE(e, n * cols) {
        u64 i = e / cols, c = e - i * cols;
        u32 t, r, row;
        if (!row_of_many(table, k, n, i, dst_rows, ERR_ROWS_FROM, err, &t, &r, &row)) continue;
        const float* src = (const float*)table[t];
        dst[(u64)row * cols + c] = src[(u64)r * cols + c];
    }
}

extern "C" __global__ void scatter_add_rows_to(const u64* table, u32 k, u64 n, u32 cols,
                                               const float* src, u32 src_rows, u32* err) {
    GRID_STRIDE(e, n * cols) {
        u64 i = e / cols, c = e - i * cols;
        u32 t, r, row;
        if (!row_of_many(table, k, n, i, src_rows, ERR_ROWS_TO, err, &t, &r, &row)) continue;
        float* dst = (float*)table[t];
        atomicAdd(&dst[(u64)r * cols + c], src[(u64)row * cols + c]);
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
