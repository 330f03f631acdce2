// Shared by every kernel file: sizes, the grid-stride loop and the error
// word through which kernels report bad index VALUES (the host checks
// shapes before launching; values live on the device).
#pragma once

typedef unsigned long long u64;
typedef unsigned int u32;

// for (i = this thread's first element; i < n; i += all threads).
#define GRID_STRIDE(i, n)                                                     \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n);  \
         i += (u64)blockDim.x * gridDim.x)

// err[0] = kernel code (0: no error), err[1] = bad index, err[2] = its
// position, err[3] = the bound it broke. The first report wins; the host
// reads the word at its next synchronisation and names the kernel.
__device__ __forceinline__ void report_index(u32* err, u32 code, u32 index, u64 position,
                                             u32 bound) {
    if (atomicCAS(err, 0u, code) == 0u) {
        err[1] = index;
        err[2] = (u32)position;
        err[3] = bound;
    }
}

// exp(x) / (1 + exp(x)) for negative x keeps the tiny values the CPU's
// sigmoid gives below -88 (1 / (1 + exp(-x)) rounds them to 0).
__device__ __forceinline__ float sigmoidf_(float x) {
    if (x < 0.0f) {
        float t = expf(x);
        return t / (1.0f + t);
    }
    return 1.0f / (1.0f + expf(-x));
}
