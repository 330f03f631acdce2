// Small row-major products, C = alpha op(A) op(B) + beta C, in ONE plain
// launch: cuBLAS spends 20-40 us of host time per call on the GPU
// machines (gVisor), five to ten times a kernel launch, and tree models
// issue hundreds of products per step whose device time is a few us.
// 64 x 64 tiles of C per block of 256 threads, each thread 4 x 4 outputs,
// K in steps of 16 through shared memory; any transposes, leading
// dimensions and sizes (edges masked). beta = 0 writes C without reading
// it, as BLAS does.
#include "common.cuh"

#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void sgemm_tiled(const float* a, const float* b, float* c, u64 m, u64 n,
                                       u64 k, u64 lda, u64 ldb, u64 ldc, u32 ta, u32 tb,
                                       float alpha, float beta) {
    __shared__ float as[BK][BM + 4];
    __shared__ float bs[BK][BN + 4];
    const u32 tid = threadIdx.x;
    const u64 row0 = (u64)blockIdx.y * BM, col0 = (u64)blockIdx.x * BN;
    const u32 tr = tid / 16, tc = tid % 16;  // this thread's 4 x 4 block
    float acc[4][4] = {{0.0f}};
    for (u64 k0 = 0; k0 < k; k0 += BK) {
        // 64 x 16 of op(A) and 16 x 64 of op(B): 1024 values each, four
        // per thread.
        for (u32 e = tid; e < BM * BK; e += 256) {
            u32 i = e / BK, kk = e % BK;  // op(A)[row0 + i][k0 + kk]
            if (ta) { kk = e / BM; i = e % BM; }
            u64 r = row0 + i, q = k0 + kk;
            float v = 0.0f;
            if (r < m && q < k) v = ta ? a[q * lda + r] : a[r * lda + q];
            as[kk][i] = v;
        }
        for (u32 e = tid; e < BK * BN; e += 256) {
            u32 kk = e / BN, j = e % BN;  // op(B)[k0 + kk][col0 + j]
            if (tb) { j = e / BK; kk = e % BK; }
            u64 q = k0 + kk, s = col0 + j;
            float v = 0.0f;
            if (q < k && s < n) v = tb ? b[s * ldb + q] : b[q * ldb + s];
            bs[kk][j] = v;
        }
        __syncthreads();
#pragma unroll
        for (u32 kk = 0; kk < BK; ++kk) {
            float x[4], y[4];
#pragma unroll
            for (u32 t = 0; t < 4; ++t) {
                x[t] = as[kk][tr * 4 + t];
                y[t] = bs[kk][tc * 4 + t];
            }
#pragma unroll
            for (u32 i = 0; i < 4; ++i)
#pragma unroll
                for (u32 j = 0; j < 4; ++j) acc[i][j] = fmaf(x[i], y[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (u32 i = 0; i < 4; ++i) {
        u64 r = row0 + tr * 4 + i;
        if (r >= m) continue;
#pragma unroll
        for (u32 j = 0; j < 4; ++j) {
            u64 s = col0 + tc * 4 + j;
            if (s >= n) continue;
            float* p = &c[r * ldc + s];
            *p = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * *p;
        }
    }
}
