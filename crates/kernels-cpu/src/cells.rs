//! Fused recurrent cells: LSTM, GRU and the Tree-LSTM leaf / internal node,
//! forward and backward, on `b` rows of hidden size `H` at once.
//!
//! Gate inputs are pre-activations `[b, kH]`, the k gate blocks side by side
//! in each row; `act` (same shape) receives the activated gates in forward
//! and is read back by backward; `dgates` / `dxw` / `dhu` are gradients with
//! respect to the pre-activations. Backward ACCUMULATES into every gradient.
//!
//! Each row is processed in one pass while it sits in L1: copy the row's
//! pre-activations into `act`, run the activations in place over the
//! contiguous sigmoid blocks and the tanh block (through `sigmoid_into` /
//! `tanh_into`, one helper each), then combine with elementwise loops over
//! H-long slices that the compiler vectorises. The `tanh(c)` that backward
//! needs is recomputed from `c` (cheaper than storing it). With the Avx2
//! ISA the same row code is compiled with AVX2 + FMA enabled
//! (`simd/avx2/cells.rs`), with Avx512 with AVX-512F too where that is
//! faster (`simd/avx512/cells.rs`); the arithmetic is the same, so the
//! ISAs agree up to the activation functions (and the two SIMD ones
//! exactly, as their activations do).

use rayon::prelude::*;

use crate::{CpuKernels, Isa, KernelError, Result};

mod strided;
use strided::{cell_outputs, dense, dense_mut, Arg, ArgMut};
pub(crate) use strided::{Rows, RowsMut};

/// Forward cells split over rows above this many `b x H` elements. Measured
/// on the 2-core Zen 3: a split pays from ~15 us of work on. A forward
/// costs five activations per element (~5-6 ns with vectorised ones, ~30
/// with libm's), so 4096 elements is past that point either way.
pub const CELLS_FWD_MIN_LEN: usize = 1 << 12;

/// Backward cells split above this many elements: one activation (tanh of
/// c) or none per element, ~1-2 ns; 1.5-1.9x from 128 x 150 (19200) on,
/// none at 64 x 150.
pub const CELLS_BWD_MIN_LEN: usize = 1 << 14;

/// Logistic sigmoid of every element, in place.
#[inline]
fn sigmoid_into(k: &CpuKernels, x: &mut [f32]) {
    // An in-place kernel has no lengths to mismatch: it cannot fail.
    let _ = k.sigmoid_inplace(x);
}

/// Hyperbolic tangent of every element, in place.
#[inline]
fn tanh_into(k: &CpuKernels, x: &mut [f32]) {
    // An in-place kernel has no lengths to mismatch: it cannot fail.
    let _ = k.tanh_inplace(x);
}

/// Splits `s` into its first `K` blocks of `h` elements.
#[inline(always)]
fn blocks<const K: usize>(s: &[f32], h: usize) -> [&[f32]; K] {
    std::array::from_fn(|j| &s[j * h..(j + 1) * h])
}

/// Mutable [`blocks`].
#[inline(always)]
fn blocks_mut<const K: usize>(s: &mut [f32], h: usize) -> [&mut [f32]; K] {
    let mut rest = s;
    std::array::from_fn(|_| {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(h);
        rest = tail;
        head
    })
}

/// Defines an elementwise loop over H-long slices: `fn name(ins; outs)`
/// takes each input as `&[f32]` and each output as `&mut [f32]` (all of the
/// first output's length); the body sees `f32` inputs and `&mut f32`
/// outputs. Separate reference arguments tell LLVM that the slices do not
/// alias, so the loop vectorises without runtime overlap checks (which, on
/// slices carved from one row, it otherwise fails and runs scalar).
macro_rules! elementwise {
    ($(fn $name:ident($($i:ident),*; $($o:ident),*) $body:block)*) => {$(
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        fn $name($($i: &[f32],)* $($o: &mut [f32],)*) {
            let n = [$($o.len()),*][0];
            $(let $i = &$i[..n];)*
            $(let $o = &mut $o[..n];)*
            for j in 0..n {
                $(let $i = $i[j];)*
                $(let $o = &mut $o[j];)*
                $body
            }
        }
    )*};
}

elementwise! {
    fn mul_into(o; h) { *h *= o; }
    fn add_into(x, u; a) { *a = x + u; }
    fn lstm_c(i, f, u, cp; c) { *c = i * u + f * cp; }
    fn leaf_c(i, u; c) { *c = i * u; }
    fn node_c(i, u, fl, cl, fr, cr; c) { *c = i * u + fl * cl + fr * cr; }
    fn gru_n(x, r, u; n) { *n = x + r * u; }
    fn gru_h(z, n, hp; h) { *h = (1.0 - z) * n + z * hp; }
    fn lstm_bwd_elems(i, f, o, u, t, cp, dc, dh; di, df, d_o, du, dcp) {
        let dct = dc + dh * o * (1.0 - t * t);
        *di += dct * u * (i * (1.0 - i));
        *df += dct * cp * (f * (1.0 - f));
        *d_o += dh * t * (o * (1.0 - o));
        *du += dct * i * (1.0 - u * u);
        *dcp += dct * f;
    }
    fn gru_bwd_elems(r, z, n, un, hp, dh; dxr, dxz, dxn, dur, duz, dun, dhp) {
        let dnp = dh * (1.0 - z) * (1.0 - n * n);
        let drp = dnp * un * (r * (1.0 - r));
        let dzp = dh * (hp - n) * (z * (1.0 - z));
        (*dxr, *dur) = (*dxr + drp, *dur + drp);
        (*dxz, *duz) = (*dxz + dzp, *duz + dzp);
        (*dxn, *dun) = (*dxn + dnp, *dun + dnp * r);
        *dhp += dh * z;
    }
    fn leaf_bwd_elems(i, o, u, t, dc, dh; di, d_o, du) {
        let dct = dc + dh * o * (1.0 - t * t);
        *di += dct * u * (i * (1.0 - i));
        *d_o += dh * t * (o * (1.0 - o));
        *du += dct * i * (1.0 - u * u);
    }
    fn node_bwd_elems(i, fl, fr, o, u, t, cl, cr, dc, dh; di, dfl, dfr, d_o, du, dcl, dcr) {
        let dct = dc + dh * o * (1.0 - t * t);
        *di += dct * u * (i * (1.0 - i));
        *dfl += dct * cl * (fl * (1.0 - fl));
        *dfr += dct * cr * (fr * (1.0 - fr));
        *d_o += dh * t * (o * (1.0 - o));
        *du += dct * i * (1.0 - u * u);
        *dcl += dct * fl;
        *dcr += dct * fr;
    }
}

/// `h = o * tanh(c)`.
#[inline(always)]
fn out_gate(k: &CpuKernels, o: &[f32], c: &[f32], h: &mut [f32]) {
    crate::rows::copy(h, c);
    tanh_into(k, h);
    mul_into(o, h);
}

/// `act = gates` with the first `n_sig` blocks through the sigmoid and the
/// rest through tanh.
#[inline(always)]
fn activate(k: &CpuKernels, gates: &[f32], hd: usize, n_sig: usize, act: &mut [f32]) {
    crate::rows::copy(act, gates);
    let (s, t) = act.split_at_mut(n_sig * hd);
    sigmoid_into(k, s);
    tanh_into(k, t);
}

// ---- Row kernels, on `[b, kH]` blocks: `(hidden, inputs, outputs)` in the
// ---- order of the entry point's arguments. `#[inline(always)]` so that the
// ---- AVX2 / AVX-512 wrappers compile them with the wider instruction set.

/// Rows of an input `[b, k H]` (`k` gate blocks each, at any pitch).
#[inline(always)]
fn rows<'a>(r: Rows<'a>, k: usize, hd: usize) -> impl Iterator<Item = &'a [f32]> {
    debug_assert_eq!(r.width(), k * hd);
    r.iter()
}

/// Rows of an output `[b, k H]` (at any pitch).
#[inline(always)]
fn rows_mut<'a>(r: RowsMut<'a>, k: usize, hd: usize) -> impl Iterator<Item = &'a mut [f32]> {
    debug_assert_eq!(r.width(), k * hd);
    r.iter_mut()
}

#[inline(always)]
pub(crate) fn lstm_fwd_rows(
    k: &CpuKernels,
    hd: usize,
    [gates, c_prev]: [Rows<'_>; 2],
    [act, c, h]: [RowsMut<'_>; 3],
) {
    let ins = rows(gates, 4, hd).zip(rows(c_prev, 1, hd));
    let outs = rows_mut(act, 4, hd).zip(cell_outputs(c, h, hd));
    for ((g, cp), (a, (c, h))) in ins.zip(outs) {
        activate(k, g, hd, 3, a);
        let [i, f, o, u] = blocks(a, hd);
        lstm_c(i, f, u, cp, c);
        out_gate(k, o, c, h);
    }
}

#[inline(always)]
pub(crate) fn lstm_bwd_rows(
    k: &CpuKernels,
    hd: usize,
    ins: [Rows<'_>; 5],
    [dgates, dc_prev]: [RowsMut<'_>; 2],
) {
    let [act, c_prev, c, dc, dh] = ins;
    let mut tc = vec![0.0f32; hd];
    let state = rows(act, 4, hd)
        .zip(rows(c_prev, 1, hd))
        .zip(rows(c, 1, hd));
    let grads = rows(dc, 1, hd).zip(rows(dh, 1, hd));
    let outs = rows_mut(dgates, 4, hd).zip(rows_mut(dc_prev, 1, hd));
    for (((a, cp), c), ((dc, dh), (dg, dcp))) in state.zip(grads.zip(outs)) {
        crate::rows::copy(&mut tc, c);
        tanh_into(k, &mut tc);
        let [i, f, o, u] = blocks(a, hd);
        let [di, df, d_o, du] = blocks_mut(dg, hd);
        lstm_bwd_elems(i, f, o, u, &tc, cp, dc, dh, di, df, d_o, du, dcp);
    }
}

#[inline(always)]
pub(crate) fn gru_fwd_rows(
    k: &CpuKernels,
    hd: usize,
    [xw, hu, h_prev]: [Rows<'_>; 3],
    [act, h]: [RowsMut<'_>; 2],
) {
    let ins = rows(xw, 3, hd)
        .zip(rows(hu, 3, hd))
        .zip(rows(h_prev, 1, hd));
    for (((x, u), hp), (a, h)) in ins.zip(rows_mut(act, 3, hd).zip(rows_mut(h, 1, hd))) {
        let (rz, n) = a.split_at_mut(2 * hd);
        add_into(&x[..2 * hd], &u[..2 * hd], rz);
        sigmoid_into(k, rz);
        let (r, z) = rz.split_at(hd);
        gru_n(&x[2 * hd..], r, &u[2 * hd..], n);
        tanh_into(k, n);
        gru_h(z, n, hp, h);
    }
}

#[inline(always)]
pub(crate) fn gru_bwd_rows(
    _k: &CpuKernels,
    hd: usize,
    [act, hu, h_prev, dh]: [Rows<'_>; 4],
    [dxw, dhu, dh_prev]: [RowsMut<'_>; 3],
) {
    let ins = rows(act, 3, hd)
        .zip(rows(hu, 3, hd))
        .zip(rows(h_prev, 1, hd).zip(rows(dh, 1, hd)));
    let outs = rows_mut(dxw, 3, hd)
        .zip(rows_mut(dhu, 3, hd))
        .zip(rows_mut(dh_prev, 1, hd));
    for (((a, u), (hp, dh)), ((dx, du), dhp)) in ins.zip(outs) {
        let [r, z, n] = blocks(a, hd);
        let [dxr, dxz, dxn] = blocks_mut(dx, hd);
        let [dur, duz, dun] = blocks_mut(du, hd);
        gru_bwd_elems(
            r,
            z,
            n,
            &u[2 * hd..],
            hp,
            dh,
            dxr,
            dxz,
            dxn,
            dur,
            duz,
            dun,
            dhp,
        );
    }
}

#[inline(always)]
pub(crate) fn leaf_fwd_rows(
    k: &CpuKernels,
    hd: usize,
    [gates]: [Rows<'_>; 1],
    [act, c, h]: [RowsMut<'_>; 3],
) {
    let outs = rows_mut(act, 3, hd).zip(cell_outputs(c, h, hd));
    for (g, (a, (c, h))) in rows(gates, 3, hd).zip(outs) {
        activate(k, g, hd, 2, a);
        let [i, o, u] = blocks(a, hd);
        leaf_c(i, u, c);
        out_gate(k, o, c, h);
    }
}

#[inline(always)]
pub(crate) fn leaf_bwd_rows(
    k: &CpuKernels,
    hd: usize,
    [act, c, dc, dh]: [Rows<'_>; 4],
    [dgates]: [RowsMut<'_>; 1],
) {
    let mut tc = vec![0.0f32; hd];
    let ins = rows(act, 3, hd)
        .zip(rows(c, 1, hd))
        .zip(rows(dc, 1, hd).zip(rows(dh, 1, hd)));
    for (((a, c), (dc, dh)), dg) in ins.zip(rows_mut(dgates, 3, hd)) {
        crate::rows::copy(&mut tc, c);
        tanh_into(k, &mut tc);
        let [i, o, u] = blocks(a, hd);
        let [di, d_o, du] = blocks_mut(dg, hd);
        leaf_bwd_elems(i, o, u, &tc, dc, dh, di, d_o, du);
    }
}

#[inline(always)]
pub(crate) fn node_fwd_rows(
    k: &CpuKernels,
    hd: usize,
    [gates, c_l, c_r]: [Rows<'_>; 3],
    [act, c, h]: [RowsMut<'_>; 3],
) {
    let ins = rows(gates, 5, hd).zip(rows(c_l, 1, hd).zip(rows(c_r, 1, hd)));
    let outs = rows_mut(act, 5, hd).zip(cell_outputs(c, h, hd));
    for ((g, (cl, cr)), (a, (c, h))) in ins.zip(outs) {
        activate(k, g, hd, 4, a);
        let [i, fl, fr, o, u] = blocks(a, hd);
        node_c(i, u, fl, cl, fr, cr, c);
        out_gate(k, o, c, h);
    }
}

#[inline(always)]
pub(crate) fn node_bwd_rows(k: &CpuKernels, hd: usize, ins: [Rows<'_>; 6], outs: [RowsMut<'_>; 3]) {
    let ([act, c_l, c_r, c, dc, dh], [dgates, dc_l, dc_r]) = (ins, outs);
    let mut tc = vec![0.0f32; hd];
    let state = rows(act, 5, hd)
        .zip(rows(c_l, 1, hd).zip(rows(c_r, 1, hd)))
        .zip(rows(c, 1, hd));
    let grads = rows(dc, 1, hd).zip(rows(dh, 1, hd));
    let outs = rows_mut(dgates, 5, hd).zip(rows_mut(dc_l, 1, hd).zip(rows_mut(dc_r, 1, hd)));
    for (((a, (cl, cr)), c), ((dc, dh), (dg, (dcl, dcr)))) in state.zip(grads.zip(outs)) {
        crate::rows::copy(&mut tc, c);
        tanh_into(k, &mut tc);
        let [i, fl, fr, o, u] = blocks(a, hd);
        let [di, dfl, dfr, d_o, du] = blocks_mut(dg, hd);
        node_bwd_elems(
            i, fl, fr, o, u, &tc, cl, cr, dc, dh, di, dfl, dfr, d_o, du, dcl, dcr,
        );
    }
}

// ---- Entry points.

/// Checks the arguments of a cell and runs `f` on all `b` rows, or on row
/// blocks in parallel above `min_len` elements. Each argument is `k H`
/// wide, its rows `p H` apart: dense (`p == k`, length exactly `b k H`) or
/// a half of a batch of states (`k = 1`, `p = 2`: the batch is exactly
/// `b 2H`). `b` comes from `ins[0]`, which is dense. `f` gets matching row
/// blocks of every argument.
fn run_cell<const N: usize, const M: usize, F>(
    kernel: &'static str,
    min_len: usize,
    hidden: usize,
    ins: [Arg<'_>; N],
    outs: [ArgMut<'_>; M],
    f: F,
) -> Result<()>
where
    F: Fn([Rows<'_>; N], [RowsMut<'_>; M]) + Sync,
{
    let invalid = |what: String| Err(KernelError::Invalid { kernel, what });
    if hidden == 0 {
        return invalid("hidden must be positive".into());
    }
    let (arg0, len0, k0) = (ins[0].name, ins[0].data.len(), ins[0].k);
    debug_assert_eq!(ins[0].k, ins[0].p, "the first argument of a cell is dense");
    let Some(width) = k0.checked_mul(hidden) else {
        return invalid("hidden x gates overflows usize".into());
    };
    if !len0.is_multiple_of(width) {
        return invalid(format!(
            "`{arg0}` has length {len0}, not a multiple of {k0} x hidden = {width}"
        ));
    }
    let b = len0 / width;
    let ins_len = ins
        .iter()
        .map(|a| (a.name, a.whole.unwrap_or(a.data.len()), a.k, a.p));
    let outs_len = outs.iter().map(|a| (a.name, a.data.len(), a.k, a.p));
    for (arg, got, k, p) in ins_len.chain(outs_len) {
        // Every row width k H and pitch p H must fit even with no rows: the
        // row kernels compute them. A strided argument is a whole batch of
        // `b` rows of p H (its view is checked through that batch).
        let Some(needed) = k.max(p).checked_mul(hidden).and_then(|w| w.checked_mul(b)) else {
            return invalid("b x hidden x gates overflows usize".into());
        };
        KernelError::check_len(kernel, arg, got, needed)?;
    }
    if b == 0 {
        // Nothing to compute (and `hidden` may be too large to allocate the
        // row kernels' scratch).
        return Ok(());
    }
    let mut ins = ins.map(|a| a.view(hidden, b));
    let mut outs = outs.map(|a| a.view(hidden, b));
    let threads = rayon::current_num_threads();
    if b < 2 || !crate::parallel::should_split(b * hidden, min_len) {
        f(ins, outs);
        return Ok(());
    }
    let rpt = b.div_ceil(4 * threads).max(min_len / 2 / hidden).max(1);
    let tasks: Vec<_> = (0..b.div_ceil(rpt))
        .map(|_| {
            let i = std::array::from_fn(|j| ins[j].take_rows(rpt));
            let o = std::array::from_fn(|j| outs[j].take_rows(rpt));
            (i, o)
        })
        .collect();
    tasks.into_par_iter().for_each(|(i, o)| f(i, o));
    Ok(())
}

/// Calls a row kernel's Scalar, AVX2 or AVX-512 build (`simd::avx512::cells`
/// re-exports the AVX2 build where AVX-512 did not measure faster).
macro_rules! dispatch {
    ($k:expr, $f:ident, $hd:expr, $ins:expr, $outs:expr) => {
        match $k.isa() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a CpuKernels with isa Avx2 exists only on CPUs with
            // AVX2 and FMA; the row kernel is safe code over slices.
            Isa::Avx2 => unsafe { crate::simd::avx2::cells::$f($k, $hd, $ins, $outs) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a CpuKernels with isa Avx512 exists only on CPUs with
            // AVX-512F, AVX2 and FMA, enough for either build found there;
            // the row kernel is safe code over slices.
            Isa::Avx512 => unsafe { crate::simd::avx512::cells::$f($k, $hd, $ins, $outs) },
            _ => $f($k, $hd, $ins, $outs),
        }
    };
}

const FWD: usize = CELLS_FWD_MIN_LEN;
const BWD: usize = CELLS_BWD_MIN_LEN;

// After the macros, which it uses.
mod rd;
mod states;
pub(crate) use rd::{leaf_rd_bwd_rows, leaf_rd_fwd_rows, node_rd_bwd_rows, node_rd_fwd_rows};

impl CpuKernels {
    /// LSTM forward, gates `[i, f, o, u]` (`[b, 4H]`, pre-activation):
    /// `c = s(i) t(u) + s(f) c_prev`, `h = s(o) tanh(c)`. `c_prev`, `c`, `h`
    /// are `[b, H]` (b = `c_prev.len() / hidden`); `act` is `[b, 4H]`.
    pub fn lstm_fwd(
        &self,
        gates: &[f32],
        c_prev: &[f32],
        hidden: usize,
        act: &mut [f32],
        c: &mut [f32],
        h: &mut [f32],
    ) -> Result<()> {
        let ins = [dense("c_prev", c_prev, 1), dense("gates", gates, 4)];
        let outs = [
            dense_mut("act", act, 4),
            dense_mut("c", c, 1),
            dense_mut("h", h, 1),
        ];
        run_cell("lstm_fwd", FWD, hidden, ins, outs, |[cp, g], o| {
            dispatch!(self, lstm_fwd_rows, hidden, [g, cp], o)
        })
    }

    /// LSTM backward. `dc`, `dh` are the gradients at the outputs `c`, `h`;
    /// accumulates into `dgates` (`[b, 4H]`, w.r.t. the pre-activations) and
    /// `dc_prev`.
    #[allow(clippy::too_many_arguments)]
    pub fn lstm_bwd(
        &self,
        act: &[f32],
        c_prev: &[f32],
        c: &[f32],
        dc: &[f32],
        dh: &[f32],
        hidden: usize,
        dgates: &mut [f32],
        dc_prev: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("c_prev", c_prev, 1),
            dense("act", act, 4),
            dense("c", c, 1),
            dense("dc", dc, 1),
            dense("dh", dh, 1),
        ];
        let outs = [
            dense_mut("dgates", dgates, 4),
            dense_mut("dc_prev", dc_prev, 1),
        ];
        run_cell(
            "lstm_bwd",
            BWD,
            hidden,
            ins,
            outs,
            |[cp, a, c, dc, dh], o| dispatch!(self, lstm_bwd_rows, hidden, [a, cp, c, dc, dh], o),
        )
    }

    /// GRU forward (PyTorch convention). `xw = W x + b_w` and
    /// `hu = U h_prev + b_u` are `[b, 3H]` in gate order `[r, z, n]`:
    /// `r = s(xw_r + hu_r)`, `z = s(xw_z + hu_z)`, `n = tanh(xw_n + r hu_n)`,
    /// `h = (1 - z) n + z h_prev`. `act` (`[b, 3H]`) receives `[r, z, n]`.
    pub fn gru_fwd(
        &self,
        xw: &[f32],
        hu: &[f32],
        h_prev: &[f32],
        hidden: usize,
        act: &mut [f32],
        h: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("h_prev", h_prev, 1),
            dense("xw", xw, 3),
            dense("hu", hu, 3),
        ];
        let outs = [dense_mut("act", act, 3), dense_mut("h", h, 1)];
        run_cell("gru_fwd", FWD, hidden, ins, outs, |[hp, x, u], o| {
            dispatch!(self, gru_fwd_rows, hidden, [x, u, hp], o)
        })
    }

    /// GRU backward: accumulates into `dxw`, `dhu` (`[b, 3H]`) and the direct
    /// part of `dh_prev` (`z dh`; the path through `hu` is the caller's
    /// `dhu U`).
    #[allow(clippy::too_many_arguments)]
    pub fn gru_bwd(
        &self,
        act: &[f32],
        hu: &[f32],
        h_prev: &[f32],
        dh: &[f32],
        hidden: usize,
        dxw: &mut [f32],
        dhu: &mut [f32],
        dh_prev: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("h_prev", h_prev, 1),
            dense("act", act, 3),
            dense("hu", hu, 3),
            dense("dh", dh, 1),
        ];
        let outs = [
            dense_mut("dxw", dxw, 3),
            dense_mut("dhu", dhu, 3),
            dense_mut("dh_prev", dh_prev, 1),
        ];
        run_cell("gru_bwd", BWD, hidden, ins, outs, |[hp, a, u, dh], o| {
            dispatch!(self, gru_bwd_rows, hidden, [a, u, hp, dh], o)
        })
    }

    /// Tree-LSTM leaf forward, gates `[i, o, u]` (`[b, 3H]`):
    /// `c = s(i) t(u)`, `h = s(o) tanh(c)`; b = `gates.len() / 3H`.
    pub fn tree_lstm_leaf_fwd(
        &self,
        gates: &[f32],
        hidden: usize,
        act: &mut [f32],
        c: &mut [f32],
        h: &mut [f32],
    ) -> Result<()> {
        let outs = [
            dense_mut("act", act, 3),
            dense_mut("c", c, 1),
            dense_mut("h", h, 1),
        ];
        run_cell(
            "tree_lstm_leaf_fwd",
            FWD,
            hidden,
            [dense("gates", gates, 3)],
            outs,
            |i, o| dispatch!(self, leaf_fwd_rows, hidden, i, o),
        )
    }

    /// Tree-LSTM leaf backward: accumulates into `dgates` (`[b, 3H]`).
    pub fn tree_lstm_leaf_bwd(
        &self,
        act: &[f32],
        c: &[f32],
        dc: &[f32],
        dh: &[f32],
        hidden: usize,
        dgates: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("c", c, 1),
            dense("act", act, 3),
            dense("dc", dc, 1),
            dense("dh", dh, 1),
        ];
        run_cell(
            "tree_lstm_leaf_bwd",
            BWD,
            hidden,
            ins,
            [dense_mut("dgates", dgates, 3)],
            |[c, a, dc, dh], o| dispatch!(self, leaf_bwd_rows, hidden, [a, c, dc, dh], o),
        )
    }

    /// Tree-LSTM internal node forward, gates `[i, f_l, f_r, o, u]`
    /// (`[b, 5H]`): `c = s(i) t(u) + s(f_l) c_l + s(f_r) c_r`,
    /// `h = s(o) tanh(c)`; b = `c_l.len() / hidden`.
    #[allow(clippy::too_many_arguments)]
    pub fn tree_lstm_node_fwd(
        &self,
        gates: &[f32],
        c_l: &[f32],
        c_r: &[f32],
        hidden: usize,
        act: &mut [f32],
        c: &mut [f32],
        h: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("c_l", c_l, 1),
            dense("gates", gates, 5),
            dense("c_r", c_r, 1),
        ];
        let outs = [
            dense_mut("act", act, 5),
            dense_mut("c", c, 1),
            dense_mut("h", h, 1),
        ];
        run_cell(
            "tree_lstm_node_fwd",
            FWD,
            hidden,
            ins,
            outs,
            |[cl, g, cr], o| dispatch!(self, node_fwd_rows, hidden, [g, cl, cr], o),
        )
    }

    /// Tree-LSTM internal node backward: accumulates into `dgates`
    /// (`[b, 5H]`), `dc_l` and `dc_r`.
    #[allow(clippy::too_many_arguments)]
    pub fn tree_lstm_node_bwd(
        &self,
        act: &[f32],
        c_l: &[f32],
        c_r: &[f32],
        c: &[f32],
        dc: &[f32],
        dh: &[f32],
        hidden: usize,
        dgates: &mut [f32],
        dc_l: &mut [f32],
        dc_r: &mut [f32],
    ) -> Result<()> {
        let ins = [
            dense("c_l", c_l, 1),
            dense("act", act, 5),
            dense("c_r", c_r, 1),
            dense("c", c, 1),
            dense("dc", dc, 1),
            dense("dh", dh, 1),
        ];
        let outs = [
            dense_mut("dgates", dgates, 5),
            dense_mut("dc_l", dc_l, 1),
            dense_mut("dc_r", dc_r, 1),
        ];
        run_cell(
            "tree_lstm_node_bwd",
            BWD,
            hidden,
            ins,
            outs,
            |[cl, a, cr, c, dc, dh], o| {
                dispatch!(self, node_bwd_rows, hidden, [a, cl, cr, c, dc, dh], o)
            },
        )
    }
}
