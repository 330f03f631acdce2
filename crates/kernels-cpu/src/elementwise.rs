//! Elementwise arithmetic, activations and their derivatives.
//!
//! All slices of one call have the same length (checked; a mismatch is a
//! [`KernelError::Length`] naming the argument). Forward kernels overwrite
//! their output, `_bwd` kernels accumulate into the input gradients, and the
//! `_inplace` variants overwrite their argument (the fused cell kernels run
//! them on gate blocks of a few hundred elements, so the per-call overhead is
//! one length check and one ISA match).
//!
//! The scalar path ([`Isa::Scalar`]) is plain Rust with std's `f32`
//! functions and is the reference; the AVX2 path
//! (`simd::avx2::{math, elementwise}`) evaluates exp / log / tanh / sigmoid
//! with its own polynomials, within a few ulp of it (see `simd::avx2::math`).
//! The AVX-512 path (`simd::avx512`) evaluates the same polynomials with the
//! same operations, 16 lanes wide, and returns the AVX2 results bit for bit.
//!
//! Above a length threshold the work is split over the current rayon pool.

use crate::error::{KernelError, Result};
use crate::isa::{CpuKernels, Isa};
use crate::parallel::should_split;

/// Transcendental kernels (tanh, sigmoid, exp, log and their in-place forms)
/// split over the rayon pool from this length on.
///
/// Measured on the 2-core Zen 3 machine, AVX2 path, one 2-way
/// `rayon::join` against one thread (timing loops, best of 5 runs):
///
/// | elements | tanh 1 thr / 2 thr | sigmoid          | add              |
/// |---------:|--------------------|------------------|------------------|
/// |  16k     | 4.5 / 3.2 us       | 10.2 / 6.1 us    | 2.0 / 1.9 us     |
/// |  32k     | 8.9 / 5.6 us       | 20.8 / 11.7 us   | 4.0 / 2.9 us     |
/// |  64k     | 18.1 / 10.1 us     | 41.1 / 22.3 us   | 13.4 / 5.1 us    |
/// | 128k     | 36.2 / 19.5 us     | 84.1 / 45.1 us   | 20.1 / 12.6 us   |
///
/// That is with the pool's workers awake (back-to-back calls). After 2 ms
/// of idling the wake-up and the other core's cold cache cost 5-15 us, and
/// the split only breaks even near 64k (tanh, sigmoid) and 128k (add). The
/// thresholds sit there: never much slower than one thread, up to 1.8x
/// faster in a busy training loop.
pub const PAR_MIN_LEN_MATH: usize = 1 << 16;

/// Memory-bound kernels (add ... div, scale, axpy, mul_acc, relu and every
/// `_bwd`) split from this length on (see [`PAR_MIN_LEN_MATH`] for the
/// measurements).
pub const PAR_MIN_LEN_ARITH: usize = 1 << 17;

/// Runs the AVX2 kernel of this name for an `Avx2` handle, the one of
/// `simd::avx512::elementwise` for an `Avx512` handle (an AVX-512 kernel, or
/// the AVX2 one re-exported where AVX-512 did not measure faster), else the
/// scalar one.
macro_rules! dispatch {
    ($isa:expr, $name:ident($($arg:expr),*)) => {
        match $isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                // SAFETY: a `CpuKernels` with ISA `Avx2` exists only when the
                // CPU supports AVX2 and FMA (both constructors check it); the
                // kernel is memory-safe for any slice lengths.
                unsafe { crate::simd::avx2::elementwise::$name($($arg),*) }
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                // SAFETY: a `CpuKernels` with ISA `Avx512` exists only when
                // the CPU supports AVX-512F, AVX2 and FMA (both constructors
                // check it), which covers both the AVX-512 kernels and the
                // AVX2 ones re-exported there; all are memory-safe for any
                // slice lengths.
                unsafe { crate::simd::avx512::elementwise::$name($($arg),*) }
            }
            _ => scalar::$name($($arg),*),
        }
    };
}

/// Output tuples that can be cut in two at an element index.
trait SplitOut: Sized + Send {
    fn split(self, mid: usize) -> (Self, Self);
}

impl SplitOut for [&mut [f32]; 1] {
    fn split(self, mid: usize) -> (Self, Self) {
        let [a] = self;
        let (a0, a1) = a.split_at_mut(mid);
        ([a0], [a1])
    }
}

impl SplitOut for [&mut [f32]; 2] {
    fn split(self, mid: usize) -> (Self, Self) {
        let [a, b] = self;
        let (a0, a1) = a.split_at_mut(mid);
        let (b0, b1) = b.split_at_mut(mid);
        ([a0, b0], [a1, b1])
    }
}

/// Calls `f` on `(ins, outs)` (all of length `len`), or, when `len` reaches
/// `min_len` and the pool has several threads, on halves of them in
/// parallel, recursively (pieces end up between `min_len / 2` and `min_len`).
fn par_run<const NI: usize, O: SplitOut>(
    len: usize,
    ins: [&[f32]; NI],
    outs: O,
    min_len: usize,
    f: &(impl Fn([&[f32]; NI], O) + Sync),
) {
    if !should_split(len, min_len.max(64)) {
        return f(ins, outs);
    }
    // Cut on a 64-byte boundary (relative to the start) to keep vectors whole.
    let mid = len / 2 / 16 * 16;
    let (o0, o1) = outs.split(mid);
    rayon::join(
        || par_run(mid, ins.map(|s| &s[..mid]), o0, min_len, f),
        || par_run(len - mid, ins.map(|s| &s[mid..]), o1, min_len, f),
    );
}

/// Declares `y = op(a, b)` entry points.
macro_rules! binary {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<()> {
            let name = stringify!($name);
            KernelError::check_len(name, "b", b.len(), a.len())?;
            KernelError::check_len(name, "y", y.len(), a.len())?;
            let isa = self.isa();
            par_run(a.len(), [a, b], [y], PAR_MIN_LEN_ARITH, &|[a, b], [y]| {
                dispatch!(isa, $name(a, b, y))
            });
            Ok(())
        }
    )*};
}

/// Declares `y = op(x)` entry points with their in-place forms.
macro_rules! unary {
    ($($(#[$doc:meta])* $name:ident, $inplace:ident, $min:expr;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, x: &[f32], y: &mut [f32]) -> Result<()> {
            KernelError::check_len(stringify!($name), "y", y.len(), x.len())?;
            let isa = self.isa();
            par_run(x.len(), [x], [y], $min, &|[x], [y]| dispatch!(isa, $name(x, y)));
            Ok(())
        }

        #[doc = concat!("In-place [`CpuKernels::", stringify!($name), "`]: `x = ",
                        stringify!($name), "(x)`.")]
        pub fn $inplace(&self, x: &mut [f32]) -> Result<()> {
            let isa = self.isa();
            par_run(x.len(), [], [x], $min, &|[], [x]| dispatch!(isa, $inplace(x)));
            Ok(())
        }
    )*};
}

/// Declares `dx += g(v, dy)` entry points (`v` is the forward input or output).
macro_rules! backward {
    ($($(#[$doc:meta])* $name:ident($v:ident);)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, $v: &[f32], dy: &[f32], dx: &mut [f32]) -> Result<()> {
            let name = stringify!($name);
            KernelError::check_len(name, "dy", dy.len(), $v.len())?;
            KernelError::check_len(name, "dx", dx.len(), $v.len())?;
            let isa = self.isa();
            par_run($v.len(), [$v, dy], [dx], PAR_MIN_LEN_ARITH, &|[v, dy], [dx]| {
                dispatch!(isa, $name(v, dy, dx))
            });
            Ok(())
        }
    )*};
}

impl CpuKernels {
    binary! {
        /// `y = a + b`.
        add;
        /// `y = a - b`.
        sub;
        /// `y = a * b`.
        mul;
        /// `y = a / b` (IEEE: x / 0 is +-inf, 0 / 0 is NaN).
        div;
        /// `y += a * b` (the backward of `mul`). With FMA on the AVX2 path.
        mul_acc;
    }

    /// `y = alpha * x`.
    pub fn scale(&self, alpha: f32, x: &[f32], y: &mut [f32]) -> Result<()> {
        KernelError::check_len("scale", "y", y.len(), x.len())?;
        let isa = self.isa();
        par_run(x.len(), [x], [y], PAR_MIN_LEN_ARITH, &|[x], [y]| {
            dispatch!(isa, scale(alpha, x, y))
        });
        Ok(())
    }

    /// `y += alpha * x` (the backward of `add` / `sub` / `scale`).
    pub fn axpy(&self, alpha: f32, x: &[f32], y: &mut [f32]) -> Result<()> {
        KernelError::check_len("axpy", "y", y.len(), x.len())?;
        let isa = self.isa();
        par_run(x.len(), [x], [y], PAR_MIN_LEN_ARITH, &|[x], [y]| {
            dispatch!(isa, axpy(alpha, x, y))
        });
        Ok(())
    }

    unary! {
        /// `y = tanh(x)`; tanh(+-inf) = +-1.
        tanh, tanh_inplace, PAR_MIN_LEN_MATH;
        /// `y = 1 / (1 + exp(-x))`; 0 at -inf, 1 at +inf, relative accuracy
        /// kept for large negative x.
        sigmoid, sigmoid_inplace, PAR_MIN_LEN_MATH;
        /// `y = max(x, 0)`; NaN stays NaN.
        relu, relu_inplace, PAR_MIN_LEN_ARITH;
        /// `y = exp(x)`: inf above ln(f32::MAX), subnormal then 0 below about -87.3.
        exp, exp_inplace, PAR_MIN_LEN_MATH;
        /// `y = ln(x)`: -inf at 0, NaN below 0.
        log, log_inplace, PAR_MIN_LEN_MATH;
    }

    backward! {
        /// `dx += dy * (1 - y^2)`, `y` the OUTPUT of [`CpuKernels::tanh`].
        tanh_bwd(y);
        /// `dx += dy * y * (1 - y)`, `y` the OUTPUT of [`CpuKernels::sigmoid`].
        sigmoid_bwd(y);
        /// `dx += dy` where `x > 0` (a select, so NaN or inf in `dy` does not
        /// leak where `x <= 0`), `x` the INPUT of [`CpuKernels::relu`].
        relu_bwd(x);
        /// `dx += dy * y`, `y` the OUTPUT of [`CpuKernels::exp`].
        exp_bwd(y);
        /// `dx += dy / x`, `x` the INPUT of [`CpuKernels::log`].
        log_bwd(x);
    }

    /// One step of a running maximum over a list (max-pooling): where
    /// `x > best`, `best = x` and `arg = k`. Strictly greater, so the first
    /// of equal values keeps its place and NaN never wins.
    pub fn max_update(&self, x: &[f32], k: u32, best: &mut [f32], arg: &mut [u32]) -> Result<()> {
        KernelError::check_len("max_update", "best", best.len(), x.len())?;
        KernelError::check_len("max_update", "arg", arg.len(), x.len())?;
        for ((&v, b), a) in x.iter().zip(best.iter_mut()).zip(arg.iter_mut()) {
            if v > *b {
                *b = v;
                *a = k;
            }
        }
        Ok(())
    }

    /// The gradient of a maximum to its `k`-th argument: `dx += dy` where
    /// `arg == k`.
    pub fn max_route(&self, dy: &[f32], arg: &[u32], k: u32, dx: &mut [f32]) -> Result<()> {
        KernelError::check_len("max_route", "arg", arg.len(), dy.len())?;
        KernelError::check_len("max_route", "dx", dx.len(), dy.len())?;
        for ((&g, &a), d) in dy.iter().zip(arg).zip(dx.iter_mut()) {
            if a == k {
                *d += g;
            }
        }
        Ok(())
    }

    /// Row scaling: `y[r, :] (+)= s[r] * x[r, :]` for the `s.len()` rows
    /// of `x` (`cols` wide); `accumulate` adds instead of overwriting.
    pub fn scale_rows(
        &self,
        x: &[f32],
        cols: usize,
        s: &[f32],
        y: &mut [f32],
        accumulate: bool,
    ) -> Result<()> {
        const K: &str = "scale_rows";
        KernelError::check_len(K, "x", x.len(), s.len().saturating_mul(cols))?;
        KernelError::check_len(K, "y", y.len(), x.len())?;
        if cols == 0 {
            return Ok(());
        }
        let rows = x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)).zip(s);
        for ((x, y), &s) in rows {
            if accumulate {
                y.iter_mut().zip(x).for_each(|(y, x)| *y += s * x);
            } else {
                y.iter_mut().zip(x).for_each(|(y, x)| *y = s * x);
            }
        }
        Ok(())
    }

    /// Backward of `y = a / b`: `da += dy / b`, `db -= (dy / b) * (a / b)`.
    pub fn div_bwd(
        &self,
        a: &[f32],
        b: &[f32],
        dy: &[f32],
        da: &mut [f32],
        db: &mut [f32],
    ) -> Result<()> {
        let n = a.len();
        KernelError::check_len("div_bwd", "b", b.len(), n)?;
        KernelError::check_len("div_bwd", "dy", dy.len(), n)?;
        KernelError::check_len("div_bwd", "da", da.len(), n)?;
        KernelError::check_len("div_bwd", "db", db.len(), n)?;
        let isa = self.isa();
        par_run(
            n,
            [a, b, dy],
            [da, db],
            PAR_MIN_LEN_ARITH,
            &|[a, b, dy], [da, db]| dispatch!(isa, div_bwd(a, b, dy, da, db)),
        );
        Ok(())
    }
}

/// The reference implementations: plain loops, std's `f32` functions.
/// Callers pass equal lengths.
mod scalar {
    fn map(x: &[f32], y: &mut [f32], f: impl Fn(f32) -> f32) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y = f(x);
        }
    }

    fn map2(a: &[f32], b: &[f32], y: &mut [f32], f: impl Fn(f32, f32) -> f32) {
        for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
            *y = f(a, b);
        }
    }

    fn acc(v: &[f32], dy: &[f32], dx: &mut [f32], f: impl Fn(f32, f32) -> f32) {
        for ((dx, &v), &dy) in dx.iter_mut().zip(v).zip(dy) {
            *dx += f(v, dy);
        }
    }

    // e^x / (1 + e^x) on the negative side: 1 / (1 + e^-x) would round
    // e^-x to inf below -88.7 and return 0 where the answer is subnormal.
    fn sigmoid1(x: f32) -> f32 {
        if x < 0.0 {
            let t = x.exp();
            t / (1.0 + t)
        } else {
            1.0 / (1.0 + (-x).exp())
        }
    }

    // `x < 0 ? 0 : x` keeps NaN (and -0.0), as the AVX2 max(0, x) does.
    fn relu1(x: f32) -> f32 {
        if x < 0.0 {
            0.0
        } else {
            x
        }
    }

    pub(super) fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
        map2(a, b, y, |a, b| a + b);
    }
    pub(super) fn sub(a: &[f32], b: &[f32], y: &mut [f32]) {
        map2(a, b, y, |a, b| a - b);
    }
    pub(super) fn mul(a: &[f32], b: &[f32], y: &mut [f32]) {
        map2(a, b, y, |a, b| a * b);
    }
    pub(super) fn div(a: &[f32], b: &[f32], y: &mut [f32]) {
        map2(a, b, y, |a, b| a / b);
    }
    pub(super) fn mul_acc(a: &[f32], b: &[f32], y: &mut [f32]) {
        acc(a, b, y, |a, b| a * b);
    }
    pub(super) fn scale(alpha: f32, x: &[f32], y: &mut [f32]) {
        map(x, y, |x| alpha * x);
    }
    pub(super) fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y += alpha * x;
        }
    }
    pub(super) fn tanh(x: &[f32], y: &mut [f32]) {
        map(x, y, f32::tanh);
    }
    pub(super) fn sigmoid(x: &[f32], y: &mut [f32]) {
        map(x, y, sigmoid1);
    }
    pub(super) fn relu(x: &[f32], y: &mut [f32]) {
        map(x, y, relu1);
    }
    pub(super) fn exp(x: &[f32], y: &mut [f32]) {
        map(x, y, f32::exp);
    }
    pub(super) fn log(x: &[f32], y: &mut [f32]) {
        map(x, y, f32::ln);
    }
    pub(super) fn tanh_inplace(x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = v.tanh());
    }
    pub(super) fn sigmoid_inplace(x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = sigmoid1(*v));
    }
    pub(super) fn relu_inplace(x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = relu1(*v));
    }
    pub(super) fn exp_inplace(x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = v.exp());
    }
    pub(super) fn log_inplace(x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = v.ln());
    }
    pub(super) fn tanh_bwd(y: &[f32], dy: &[f32], dx: &mut [f32]) {
        acc(y, dy, dx, |y, dy| dy * (1.0 - y * y));
    }
    pub(super) fn sigmoid_bwd(y: &[f32], dy: &[f32], dx: &mut [f32]) {
        acc(y, dy, dx, |y, dy| dy * (y * (1.0 - y)));
    }
    pub(super) fn relu_bwd(x: &[f32], dy: &[f32], dx: &mut [f32]) {
        acc(x, dy, dx, |x, dy| if x > 0.0 { dy } else { 0.0 });
    }
    pub(super) fn exp_bwd(y: &[f32], dy: &[f32], dx: &mut [f32]) {
        acc(y, dy, dx, |y, dy| dy * y);
    }
    pub(super) fn log_bwd(x: &[f32], dy: &[f32], dx: &mut [f32]) {
        acc(x, dy, dx, |x, dy| dy / x);
    }
    pub(super) fn div_bwd(a: &[f32], b: &[f32], dy: &[f32], da: &mut [f32], db: &mut [f32]) {
        for i in 0..a
            .len()
            .min(b.len())
            .min(dy.len())
            .min(da.len())
            .min(db.len())
        {
            let q = dy[i] / b[i];
            da[i] += q;
            db[i] -= q * (a[i] / b[i]);
        }
    }
}
