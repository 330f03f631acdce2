// Elementwise maps, their derivatives (which ACCUMULATE into dx), binary
// maps, BLAS-1 updates and fill: one thread per element, grid-stride.
#include "common.cuh"

#define UNARY(name, expr)                                                     \
    extern "C" __global__ void name(const float* x, float* y, u64 n) {        \
        GRID_STRIDE(i, n) {                                                   \
            float v = x[i];                                                   \
            y[i] = (expr);                                                    \
        }                                                                     \
    }

UNARY(tanh_f, tanhf(v))
UNARY(sigmoid_f, sigmoidf_(v))
UNARY(relu_f, v < 0.0f ? 0.0f : v)  // NaN stays NaN, as on the CPU
UNARY(exp_f, expf(v))
UNARY(log_f, logf(v))

// dx += dy * f'(.), from the output y (tanh, sigmoid, exp) or the input x.
#define UNARY_BWD(name, expr)                                                 \
    extern "C" __global__ void name(const float* v_, const float* dy, float* dx, u64 n) { \
        GRID_STRIDE(i, n) {                                                   \
            float v = v_[i], g = dy[i];                                       \
            dx[i] += (expr);                                                  \
        }                                                                     \
    }

UNARY_BWD(tanh_bwd, g * (1.0f - v * v))
UNARY_BWD(sigmoid_bwd, g * (v * (1.0f - v)))
UNARY_BWD(relu_bwd, v > 0.0f ? g : 0.0f)
UNARY_BWD(exp_bwd, g * v)
UNARY_BWD(log_bwd, g / v)

#define BINARY(name, op)                                                      \
    extern "C" __global__ void name(const float* a, const float* b, float* y, u64 n) { \
        GRID_STRIDE(i, n) { y[i] = a[i] op b[i]; }                            \
    }

BINARY(add_f, +)
BINARY(sub_f, -)
BINARY(mul_f, *)
BINARY(div_f, /)

// y = alpha x
extern "C" __global__ void scale_f(float alpha, const float* x, float* y, u64 n) {
    GRID_STRIDE(i, n) { y[i] = alpha * x[i]; }
}

// y += alpha x
extern "C" __global__ void axpy_f(float alpha, const float* x, float* y, u64 n) {
    GRID_STRIDE(i, n) { y[i] += alpha * x[i]; }
}

// y += a * b
extern "C" __global__ void mul_acc_f(const float* a, const float* b, float* y, u64 n) {
    GRID_STRIDE(i, n) { y[i] += a[i] * b[i]; }
}

// y = a / b: da += dy / b, db -= dy a / b^2
extern "C" __global__ void div_bwd_f(const float* a, const float* b, const float* dy, float* da,
                                     float* db, u64 n) {
    GRID_STRIDE(i, n) {
        float q = dy[i] / b[i];
        da[i] += q;
        db[i] -= q * (a[i] / b[i]);
    }
}

extern "C" __global__ void fill_f(float value, float* y, u64 n) {
    GRID_STRIDE(i, n) { y[i] = value; }
}

// y[r, :] (+)= s[r] * x[r, :]
extern "C" __global__ void scale_rows(const float* x, const float* s, float* y, u64 n, u32 cols,
                                      u32 accumulate) {
    GRID_STRIDE(i, n) {
        float v = s[i / cols] * x[i];
        y[i] = accumulate ? y[i] + v : v;
    }
}

// Running maximum: where x > best (strictly: the first of equals stays,
// NaN never wins), best = x and arg = k.
extern "C" __global__ void max_update(const float* x, u32 k, float* best, u32* arg, u64 n) {
    GRID_STRIDE(i, n) {
        if (x[i] > best[i]) {
            best[i] = x[i];
            arg[i] = k;
        }
    }
}

// dx += dy where arg == k
extern "C" __global__ void max_route(const float* dy, const u32* arg, u32 k, float* dx, u64 n) {
    GRID_STRIDE(i, n) {
        if (arg[i] == k) dx[i] += dy[i];
    }
}
