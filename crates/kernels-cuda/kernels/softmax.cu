// Softmax family along the last dimension: one block per row, a block-wide
// reduction in shared memory (blockDim.x is a power of two, at most 1024).
#include "common.cuh"

#define ERR_LABEL 3u
#define ERR_LABEL_BWD 4u

// Reduces v over the block with op; every thread gets the result.
template <typename Op>
__device__ float block_reduce(float v, Op op) {
    __shared__ float shared[32];
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
    __syncthreads();  // shared may still be read by a previous reduction
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    // Lanes past the last warp contribute the operation's identity.
    v = lane < warps ? shared[lane] : Op::identity();
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

struct Max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
    __device__ static float identity() { return -INFINITY; }
};
struct Sum {
    __device__ float operator()(float a, float b) const { return a + b; }
    __device__ static float identity() { return 0.0f; }
};

// Row max and sum(exp(x - max)) of row x.
__device__ void row_stats(const float* x, u32 cols, float* max_out, float* sum_out) {
    float m = -INFINITY;
    for (u32 c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, x[c]);
    m = block_reduce(m, Max());
    float s = 0.0f;
    for (u32 c = threadIdx.x; c < cols; c += blockDim.x) s += expf(x[c] - m);
    *max_out = m;
    *sum_out = block_reduce(s, Sum());
}

extern "C" __global__ void softmax_rows(const float* x, float* y, u32 rows, u32 cols) {
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + (u64)r * cols;
        float m, s;
        row_stats(xr, cols, &m, &s);
        float inv = 1.0f / s;
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x) y[(u64)r * cols + c] = expf(xr[c] - m) * inv;
    }
}

extern "C" __global__ void log_softmax_rows(const float* x, float* y, u32 rows, u32 cols) {
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + (u64)r * cols;
        float m, s;
        row_stats(xr, cols, &m, &s);
        // (x - m) - log(s), as the CPU: m + log(s) rounded first would
        // lose the small differences of large logits.
        float ls = logf(s);
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x) y[(u64)r * cols + c] = (xr[c] - m) - ls;
    }
}

// dx += y * (dy - <dy, y>)
extern "C" __global__ void softmax_rows_bwd(const float* y, const float* dy, float* dx, u32 rows,
                                            u32 cols) {
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 o = (u64)r * cols;
        float d = 0.0f;
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x) d += dy[o + c] * y[o + c];
        d = block_reduce(d, Sum());
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x) dx[o + c] += y[o + c] * (dy[o + c] - d);
    }
}

// dx += dy - exp(y) * sum(dy)
extern "C" __global__ void log_softmax_rows_bwd(const float* y, const float* dy, float* dx,
                                                u32 rows, u32 cols) {
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 o = (u64)r * cols;
        float s = 0.0f;
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x) s += dy[o + c];
        s = block_reduce(s, Sum());
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x) dx[o + c] += dy[o + c] - expf(y[o + c]) * s;
    }
}

// probs = softmax(x), loss[r] = -log softmax(x)[r, labels[r]]
extern "C" __global__ void nll_log_softmax(const float* x, const u32* labels, float* probs,
                                           float* loss, u32 rows, u32 cols, u32* err) {
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 o = (u64)r * cols;
        float m, s;
        row_stats(x + o, cols, &m, &s);
        float inv = 1.0f / s;
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x) probs[o + c] = expf(x[o + c] - m) * inv;
        if (threadIdx.x == 0) {
            u32 l = labels[r];
            if (l >= cols) {
                report_index(err, ERR_LABEL, l, r, cols);
                loss[r] = NAN;
            } else {
                loss[r] = (m - x[o + l]) + logf(s);
            }
        }
    }
}

// dx[r] += dloss[r] (probs[r] - onehot(labels[r]))
extern "C" __global__ void nll_log_softmax_bwd(const float* probs, const u32* labels,
                                               const float* dloss, float* dx, u32 rows, u32 cols,
                                               u32* err) {
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 o = (u64)r * cols;
        u32 l = labels[r];
        float g = dloss[r];
        if (l >= cols && threadIdx.x == 0) report_index(err, ERR_LABEL_BWD, l, r, cols);
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x)
            dx[o + c] += g * (probs[o + c] - (c == l ? 1.0f : 0.0f));
    }
}

// out[r] = sum of row r
extern "C" __global__ void row_sums(const float* x, float* out, u32 rows, u32 cols) {
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        float s = 0.0f;
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x) s += x[(u64)r * cols + c];
        s = block_reduce(s, Sum());
        if (threadIdx.x == 0) out[r] = s;
    }
}

// out[c] += sum over rows of x[:, c]: one thread per column, reads coalesced
// across the threads of a warp.
extern "C" __global__ void col_sums_acc(const float* x, float* out, u32 rows, u32 cols) {
    GRID_STRIDE(c, cols) {
        float s = 0.0f;
        for (u32 r = 0; r < rows; ++r) s += x[(u64)r * cols + c];
        out[c] += s;
    }
}
