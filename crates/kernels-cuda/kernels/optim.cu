// Optimizer updates, PyTorch's formulas as in kernels-cpu's optim.rs
// (weight_decay as L2). Dense: one thread per parameter. Sparse rows: one
// thread per (listed row, column); the host has checked that the listed
// rows are in range and distinct, so no two threads share an element.
// Adam's bias corrections come from the host (f64 powers of the betas).
#include "common.cuh"

__device__ __forceinline__ void sgd1(float* p, float g, float lr, float wd) {
    *p -= lr * (g + wd * *p);
}
__device__ __forceinline__ void sgd_m1(float* p, float g, float* v, float lr, float mu, float wd) {
    *v = mu * *v + (g + wd * *p);
    *p -= lr * *v;
}
__device__ __forceinline__ void adagrad1(float* p, float g, float* a, float lr, float eps,
                                         float wd) {
    g += wd * *p;
    *a += g * g;
    *p -= lr * g / (sqrtf(*a) + eps);
}
__device__ __forceinline__ void adam1(float* p, float g, float* m, float* v, float b1, float b2,
                                      float eps, float wd, float step_size, float inv_sqrt_bc2) {
    g += wd * *p;
    *m = b1 * *m + (1.0f - b1) * g;
    *v = b2 * *v + (1.0f - b2) * (g * g);
    *p -= step_size * *m / (sqrtf(*v) * inv_sqrt_bc2 + eps);
}

extern "C" __global__ void sgd_step(float* p, const float* g, u64 n, float lr, float wd) {
    GRID_STRIDE(i, n) { sgd1(&p[i], g[i], lr, wd); }
}
extern "C" __global__ void sgd_momentum_step(float* p, const float* g, float* v, u64 n, float lr,
                                             float mu, float wd) {
    GRID_STRIDE(i, n) { sgd_m1(&p[i], g[i], &v[i], lr, mu, wd); }
}
extern "C" __global__ void adagrad_step(float* p, const float* g, float* a, u64 n, float lr,
                                        float eps, float wd) {
    GRID_STRIDE(i, n) { adagrad1(&p[i], g[i], &a[i], lr, eps, wd); }
}
extern "C" __global__ void adam_step(float* p, const float* g, float* m, float* v, u64 n, float b1,
                                     float b2, float eps, float wd, float step_size,
                                     float inv_sqrt_bc2) {
    GRID_STRIDE(i, n) { adam1(&p[i], g[i], &m[i], &v[i], b1, b2, eps, wd, step_size, inv_sqrt_bc2); }
}

// Element e of the listed rows: its table element and its gradient element.
#define ROW_LOOP(e, n_rows, cols)                                             \
    GRID_STRIDE(e, (u64)(n_rows) * (cols))                                    \
    for (u64 at = (u64)rows[e / (cols)] * (cols) + e % (cols), once = 0; once < 1; ++once)

extern "C" __global__ void sgd_step_rows(float* p, const u32* rows, const float* g, u64 n_rows,
                                         u64 cols, float lr, float wd) {
    ROW_LOOP(e, n_rows, cols) { sgd1(&p[at], g[e], lr, wd); }
}
extern "C" __global__ void sgd_momentum_step_rows(float* p, const u32* rows, const float* g,
                                                  float* v, u64 n_rows, u64 cols, float lr,
                                                  float mu, float wd) {
    ROW_LOOP(e, n_rows, cols) { sgd_m1(&p[at], g[e], &v[at], lr, mu, wd); }
}
extern "C" __global__ void adagrad_step_rows(float* p, const u32* rows, const float* g, float* a,
                                             u64 n_rows, u64 cols, float lr, float eps, float wd) {
    ROW_LOOP(e, n_rows, cols) { adagrad1(&p[at], g[e], &a[at], lr, eps, wd); }
}
extern "C" __global__ void adam_step_rows(float* p, const u32* rows, const float* g, float* m,
                                          float* v, u64 n_rows, u64 cols, float b1, float b2,
                                          float eps, float wd, float step_size,
                                          float inv_sqrt_bc2) {
    ROW_LOOP(e, n_rows, cols) {
        adam1(&p[at], g[e], &m[at], &v[at], b1, b2, eps, wd, step_size, inv_sqrt_bc2);
    }
}
