// Fused recurrent cells, one thread per (row, unit j < H). Gate layouts,
// formulas and accumulation follow kernels-cpu's cells.rs / cells/rd.rs
// exactly: gates are pre-activations, k blocks of H per row; forward writes
// the activated gates to act; backward ACCUMULATES into every gradient and
// recomputes tanh(c).
//
// Every one-block argument but the dropout mask (c, h, their previous
// values and gradients) is read and written at row pitch `sp`: `hd` for
// [b, H] blocks, 2 hd for halves of [b, 2H] cell states [c | h] (the h
// half passed as a pointer H into the row), so that cells on states copy
// no halves out and back. A forward given no `h` (null) writes it into
// c's row, H further on: c and h of one states buffer.
#include "common.cuh"

#define CELL_LOOP(b, hd)                                                      \
    GRID_STRIDE(e, (u64)(b) * (hd))                                           \
    for (u64 row = e / (hd), j = e - row * (hd), once = 0; once < 1; ++once)

// Gate block g of row `row` in a [b, k H] array.
#define AT(p, k, g) (p)[row * (k) * hd + (u64)(g) * hd + j]
#define ST(p) (p)[row * sp + j]
// The dropout mask, [b, H] always.
#define MK(p) (p)[row * hd + j]

// LSTM, gates [i, f, o, u]: c = s(i) t(u) + s(f) c_prev, h = s(o) tanh(c).
extern "C" __global__ void lstm_fwd(const float* gates, const float* c_prev, float* act, float* c,
                                    float* h, u64 b, u64 hd, u64 sp) {
    if (!h) h = c + hd;
    CELL_LOOP(b, hd) {
        float i = sigmoidf_(AT(gates, 4, 0)), f = sigmoidf_(AT(gates, 4, 1));
        float o = sigmoidf_(AT(gates, 4, 2)), u = tanhf(AT(gates, 4, 3));
        AT(act, 4, 0) = i; AT(act, 4, 1) = f; AT(act, 4, 2) = o; AT(act, 4, 3) = u;
        float cn = i * u + f * ST(c_prev);
        ST(c) = cn;
        ST(h) = o * tanhf(cn);
    }
}

extern "C" __global__ void lstm_bwd(const float* act, const float* c_prev, const float* c,
                                    const float* dc, const float* dh, float* dgates,
                                    float* dc_prev, u64 b, u64 hd, u64 sp) {
    CELL_LOOP(b, hd) {
        float i = AT(act, 4, 0), f = AT(act, 4, 1), o = AT(act, 4, 2), u = AT(act, 4, 3);
        float t = tanhf(ST(c)), g = ST(dh);
        float dct = ST(dc) + g * o * (1.0f - t * t);
        AT(dgates, 4, 0) += dct * u * (i * (1.0f - i));
        AT(dgates, 4, 1) += dct * ST(c_prev) * (f * (1.0f - f));
        AT(dgates, 4, 2) += g * t * (o * (1.0f - o));
        AT(dgates, 4, 3) += dct * i * (1.0f - u * u);
        ST(dc_prev) += dct * f;
    }
}

// GRU, blocks [r, z, n]: r, z = s(xw + hu), n = t(xw_n + r hu_n),
// h = (1 - z) n + z h_prev.
extern "C" __global__ void gru_fwd(const float* xw, const float* hu, const float* h_prev,
                                   float* act, float* h, u64 b, u64 hd, u64 sp) {
    CELL_LOOP(b, hd) {
        float r = sigmoidf_(AT(xw, 3, 0) + AT(hu, 3, 0));
        float z = sigmoidf_(AT(xw, 3, 1) + AT(hu, 3, 1));
        float n = tanhf(AT(xw, 3, 2) + r * AT(hu, 3, 2));
        AT(act, 3, 0) = r; AT(act, 3, 1) = z; AT(act, 3, 2) = n;
        ST(h) = (1.0f - z) * n + z * ST(h_prev);
    }
}

extern "C" __global__ void gru_bwd(const float* act, const float* hu, const float* h_prev,
                                   const float* dh, float* dxw, float* dhu, float* dh_prev, u64 b, u64 hd, u64 sp) {
    CELL_LOOP(b, hd) {
        float r = AT(act, 3, 0), z = AT(act, 3, 1), n = AT(act, 3, 2);
        float un = AT(hu, 3, 2), hp = ST(h_prev), g = ST(dh);
        float dnp = g * (1.0f - z) * (1.0f - n * n);
        float drp = dnp * un * (r * (1.0f - r));
        float dzp = g * (hp - n) * (z * (1.0f - z));
        AT(dxw, 3, 0) += drp; AT(dhu, 3, 0) += drp;
        AT(dxw, 3, 1) += dzp; AT(dhu, 3, 1) += dzp;
        AT(dxw, 3, 2) += dnp; AT(dhu, 3, 2) += dnp * r;
        ST(dh_prev) += g * z;
    }
}

// Tree-LSTM leaf, gates [i, o, u] (+ mask m in act for the rd variant):
// c = s(i) t(u) [m], h = s(o) tanh(c).
__device__ __forceinline__ void leaf_fwd(const float* gates, const float* mask, float* act,
                                         float* c, float* h, u64 row, u64 j, u64 hd, u64 sp) {
    float i = sigmoidf_(AT(gates, 3, 0)), o = sigmoidf_(AT(gates, 3, 1)), u = tanhf(AT(gates, 3, 2));
    u32 k = mask ? 4 : 3;
    AT(act, k, 0) = i; AT(act, k, 1) = o; AT(act, k, 2) = u;
    float m = 1.0f;
    if (mask) AT(act, 4, 3) = m = MK(mask);
    float cn = mask ? i * u * m : i * u;
    ST(c) = cn;
    ST(h) = o * tanhf(cn);
}

__device__ __forceinline__ void leaf_bwd(const float* act, bool rd, const float* c, const float* dc,
                                         const float* dh, float* dgates, u64 row, u64 j, u64 hd, u64 sp) {
    u32 k = rd ? 4 : 3;
    float i = AT(act, k, 0), o = AT(act, k, 1), u = AT(act, k, 2);
    float t = tanhf(ST(c)), g = ST(dh);
    float dct = ST(dc) + g * o * (1.0f - t * t);
    float dcm = rd ? dct * AT(act, 4, 3) : dct;
    AT(dgates, 3, 0) += dcm * u * (i * (1.0f - i));
    AT(dgates, 3, 1) += g * t * (o * (1.0f - o));
    AT(dgates, 3, 2) += dcm * i * (1.0f - u * u);
}

extern "C" __global__ void tree_lstm_leaf_fwd(const float* gates, float* act, float* c, float* h,
                                              u64 b, u64 hd, u64 sp) {
    if (!h) h = c + hd;
    CELL_LOOP(b, hd) { leaf_fwd(gates, nullptr, act, c, h, row, j, hd, sp); }
}

extern "C" __global__ void tree_lstm_leaf_rd_fwd(const float* gates, const float* mask, float* act,
                                                 float* c, float* h, u64 b, u64 hd, u64 sp) {
    if (!h) h = c + hd;
    CELL_LOOP(b, hd) { leaf_fwd(gates, mask, act, c, h, row, j, hd, sp); }
}

extern "C" __global__ void tree_lstm_leaf_bwd(const float* act, const float* c, const float* dc,
                                              const float* dh, float* dgates, u64 b, u64 hd, u64 sp) {
    CELL_LOOP(b, hd) { leaf_bwd(act, false, c, dc, dh, dgates, row, j, hd, sp); }
}

extern "C" __global__ void tree_lstm_leaf_rd_bwd(const float* act, const float* c, const float* dc,
                                                 const float* dh, float* dgates, u64 b, u64 hd, u64 sp) {
    CELL_LOOP(b, hd) { leaf_bwd(act, true, c, dc, dh, dgates, row, j, hd, sp); }
}

// Tree-LSTM internal node, gates [i, f_l, f_r, o, u] (+ mask m in act):
// c = s(i) t(u) [m] + s(f_l) c_l + s(f_r) c_r, h = s(o) tanh(c).
__device__ __forceinline__ void node_fwd(const float* gates, const float* mask, const float* c_l,
                                         const float* c_r, float* act, float* c, float* h, u64 row,
                                         u64 j, u64 hd, u64 sp) {
    float i = sigmoidf_(AT(gates, 5, 0)), fl = sigmoidf_(AT(gates, 5, 1));
    float fr = sigmoidf_(AT(gates, 5, 2)), o = sigmoidf_(AT(gates, 5, 3));
    float u = tanhf(AT(gates, 5, 4));
    u32 k = mask ? 6 : 5;
    AT(act, k, 0) = i; AT(act, k, 1) = fl; AT(act, k, 2) = fr; AT(act, k, 3) = o; AT(act, k, 4) = u;
    float cand = i * u;
    if (mask) {
        float m = MK(mask);
        AT(act, 6, 5) = m;
        cand = i * u * m;
    }
    float cn = cand + fl * ST(c_l) + fr * ST(c_r);
    ST(c) = cn;
    ST(h) = o * tanhf(cn);
}

__device__ __forceinline__ void node_bwd(const float* act, bool rd, const float* c_l,
                                         const float* c_r, const float* c, const float* dc,
                                         const float* dh, float* dgates, float* dc_l, float* dc_r,
                                         u64 row, u64 j, u64 hd, u64 sp) {
    u32 k = rd ? 6 : 5;
    float i = AT(act, k, 0), fl = AT(act, k, 1), fr = AT(act, k, 2), o = AT(act, k, 3);
    float u = AT(act, k, 4);
    float t = tanhf(ST(c)), g = ST(dh);
    float dct = ST(dc) + g * o * (1.0f - t * t);
    float dcm = rd ? dct * AT(act, 6, 5) : dct;
    AT(dgates, 5, 0) += dcm * u * (i * (1.0f - i));
    AT(dgates, 5, 1) += dct * ST(c_l) * (fl * (1.0f - fl));
    AT(dgates, 5, 2) += dct * ST(c_r) * (fr * (1.0f - fr));
    AT(dgates, 5, 3) += g * t * (o * (1.0f - o));
    AT(dgates, 5, 4) += dcm * i * (1.0f - u * u);
    ST(dc_l) += dct * fl;
    ST(dc_r) += dct * fr;
}

extern "C" __global__ void tree_lstm_node_fwd(const float* gates, const float* c_l,
                                              const float* c_r, float* act, float* c, float* h,
                                              u64 b, u64 hd, u64 sp) {
    if (!h) h = c + hd;
    CELL_LOOP(b, hd) { node_fwd(gates, nullptr, c_l, c_r, act, c, h, row, j, hd, sp); }
}

extern "C" __global__ void tree_lstm_node_rd_fwd(const float* gates, const float* mask,
                                                 const float* c_l, const float* c_r, float* act,
                                                 float* c, float* h, u64 b, u64 hd, u64 sp) {
    if (!h) h = c + hd;
    CELL_LOOP(b, hd) { node_fwd(gates, mask, c_l, c_r, act, c, h, row, j, hd, sp); }
}

extern "C" __global__ void tree_lstm_node_bwd(const float* act, const float* c_l,
                                              const float* c_r, const float* c, const float* dc,
                                              const float* dh, float* dgates, float* dc_l,
                                              float* dc_r, u64 b, u64 hd, u64 sp) {
    CELL_LOOP(b, hd) { node_bwd(act, false, c_l, c_r, c, dc, dh, dgates, dc_l, dc_r, row, j, hd, sp); }
}

extern "C" __global__ void tree_lstm_node_rd_bwd(const float* act, const float* c_l,
                                                 const float* c_r, const float* c, const float* dc,
                                                 const float* dh, float* dgates, float* dc_l,
                                                 float* dc_r, u64 b, u64 hd, u64 sp) {
    CELL_LOOP(b, hd) { node_bwd(act, true, c_l, c_r, c, dc, dh, dgates, dc_l, dc_r, row, j, hd, sp); }
}
