//! Shared by the `cuda_backend*` tests: tolerances, the GPU handle, random
//! data and the parity driver (each test file uses part of it).
#![allow(dead_code, unused_imports, unused_macros)]
// `TensorError` keeps its shapes inline (about 150 bytes), as the library
// explains at its `allow`; the parity closures return it.
#![allow(clippy::result_large_err)]

#[path = "../common/cell_calls.rs"]
pub mod cell_calls;
pub use cell_calls::CellCalls;

pub use std::ops::Deref;
pub use std::slice::from_ref;
use std::sync::{Mutex, MutexGuard};

pub use sheaf_tensor::{
    Adagrad, Adam, Backend, Binary, CudaBackend, DType, Device, Result, Sgd, Shape, Tensor,
    TensorError, Transpose, Unary,
};

pub const CUDA: Device = Device::Cuda(0);
pub const NO: Transpose = Transpose::No;
pub const YES: Transpose = Transpose::Yes;

// ---- Tolerances.

/// `|gpu - cpu| <= atol + rtol * |cpu|`.
#[derive(Debug, Clone, Copy)]
pub struct Tol {
    pub atol: f32,
    pub rtol: f32,
}

/// Pure arithmetic.
pub const ARITH: Tol = Tol {
    atol: 1e-5,
    rtol: 1e-5,
};

/// exp, tanh, sigmoid or log involved.
pub const TRANSC: Tol = Tol {
    atol: 2e-5,
    rtol: 2e-5,
};

/// `base` for a result summed over `n` terms: scaled by `sqrt(n)` (see the
/// module's docs).
pub fn summed(base: Tol, n: usize) -> Tol {
    let s = (n.max(1) as f32).sqrt();
    Tol {
        atol: base.atol * s,
        rtol: base.rtol * s,
    }
}

#[track_caller]
pub fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], tol: Tol) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths differ");
    for (i, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        if g.is_nan() && c.is_nan() {
            continue;
        }
        let ok = (g - c).abs() <= tol.atol + tol.rtol * c.abs();
        assert!(
            ok,
            "{what}: element {i}: cuda {g}, cpu {c} (|diff| {}, tolerance {tol:?})",
            (g - c).abs()
        );
    }
}

/// Rows of `after` other than `touched` are bit-for-bit those of `before`.
#[track_caller]
pub fn assert_rows_untouched(what: &str, after: &Tensor, before: &Tensor, touched: &[usize]) {
    assert_eq!(after.shape(), before.shape(), "{what}: shape");
    let (a, b) = (host(after), host(before));
    let row = before.row_len();
    for r in 0..before.num_rows() {
        if touched.contains(&r) {
            continue;
        }
        for c in 0..row {
            let i = r * row + c;
            assert_eq!(
                a[i].to_bits(),
                b[i].to_bits(),
                "{what}: row {r} (not written) changed at column {c}: {} -> {}",
                b[i],
                a[i]
            );
        }
    }
}

// ---- Backends.

/// The CUDA backend, held exclusively for one test (see the module docs).
pub struct Gpu {
    _lock: MutexGuard<'static, ()>,
    backend: &'static dyn Backend,
}

impl Deref for Gpu {
    type Target = dyn Backend;
    fn deref(&self) -> &Self::Target {
        self.backend
    }
}

/// The CUDA backend of device 0, or `None` after printing why the test is
/// skipped; under `SHEAF_REQUIRE_GPU=1` a device that fails to open fails
/// the test instead.
pub fn gpu() -> Option<Gpu> {
    static LOCK: Mutex<()> = Mutex::new(());
    match Device::Cuda(0).backend() {
        Ok(backend) => Some(Gpu {
            _lock: LOCK.lock().unwrap_or_else(|p| p.into_inner()),
            backend,
        }),
        Err(e) if sheaf_tensor::gpu_required() => {
            panic!(
                "{}=1, but cuda:0 did not open: {e}",
                sheaf_tensor::REQUIRE_GPU_VAR
            )
        }
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

pub fn cpu() -> &'static dyn Backend {
    Device::Cpu.backend().unwrap()
}

// ---- Data.

/// splitmix64: deterministic, seedable, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }

    pub fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n)) as u32
    }
}

/// Host tensor, elements uniform in `[lo, hi)`.
pub fn uniform(shape: impl Into<Shape>, lo: f32, hi: f32, seed: u64) -> Tensor {
    let shape = shape.into();
    let mut rng = Rng::new(seed);
    let data: Vec<f32> = (0..shape.numel().unwrap())
        .map(|_| rng.uniform(lo, hi))
        .collect();
    Tensor::from_vec(data, shape).unwrap()
}

/// Host tensor, elements uniform in `[-1, 1)`.
pub fn rand(shape: impl Into<Shape>, seed: u64) -> Tensor {
    uniform(shape, -1.0, 1.0, seed)
}

/// Host tensor with magnitudes in `[0.5, 2)` and random signs (divisors).
pub fn away_from_zero(shape: impl Into<Shape>, seed: u64) -> Tensor {
    let shape = shape.into();
    let mut rng = Rng::new(seed);
    let data: Vec<f32> = (0..shape.numel().unwrap())
        .map(|_| {
            let m = rng.uniform(0.5, 2.0);
            if rng.below(2) == 0 {
                m
            } else {
                -m
            }
        })
        .collect();
    Tensor::from_vec(data, shape).unwrap()
}

/// `n` random `u32` values below `bound`, as a host index vector.
pub fn indices(n: usize, bound: u32, seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let v: Vec<u32> = (0..n).map(|_| rng.below(bound)).collect();
    idx(&v)
}

pub fn idx(values: &[u32]) -> Tensor {
    Tensor::from_slice(values, [values.len()]).unwrap()
}

pub fn full(value: f32, shape: impl Into<Shape>) -> Tensor {
    Tensor::full_f32(value, shape, Device::Cpu).unwrap()
}

/// A device copy.
pub fn up(t: &Tensor) -> Tensor {
    let d = t.to_device(CUDA).unwrap();
    assert_eq!(d.device(), CUDA);
    d
}

pub fn sh(dims: &[usize]) -> Shape {
    Shape::try_from(dims).unwrap()
}

pub fn host(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

// ---- The parity driver.

/// Runs `f` on the CPU backend with `inputs` and (copies of) `outputs`,
/// and on the CUDA backend with device copies of both, then compares every
/// output. Returns the outputs, `(cpu, cuda)`, for further checks.
#[track_caller]
pub fn parity<F>(
    gpu: &Gpu,
    name: &str,
    tol: Tol,
    inputs: &[Tensor],
    outputs: &[Tensor],
    f: F,
) -> (Vec<Tensor>, Vec<Tensor>)
where
    F: Fn(&dyn Backend, &[Tensor], &mut [Tensor]) -> Result<()>,
{
    let gpu_in: Vec<Tensor> = inputs.iter().map(up).collect();
    let mut cpu_out: Vec<Tensor> = outputs.to_vec();
    let mut gpu_out: Vec<Tensor> = outputs.iter().map(up).collect();
    f(cpu(), inputs, &mut cpu_out).unwrap_or_else(|e| panic!("{name} on the CPU: {e}"));
    f(gpu.backend, &gpu_in, &mut gpu_out).unwrap_or_else(|e| panic!("{name} on CUDA: {e}"));
    for (i, (g, c)) in gpu_out.iter().zip(&cpu_out).enumerate() {
        assert_eq!(g.device(), CUDA, "{name}: output {i} left the device");
        assert_eq!(g.shape(), c.shape(), "{name}: output {i} shape");
        assert_close(&format!("{name}: output {i}"), &host(g), &host(c), tol);
    }
    (cpu_out, gpu_out)
}

/// The destructuring every parity closure starts with.
macro_rules! outs {
    ($o:expr, [$($name:ident),+]) => {
        let [$($name),+] = $o else {
            unreachable!("output count")
        };
    };
}

/// Pre-activation gates, wide enough to reach the flat parts of sigmoid
/// and tanh.
pub fn gates(b: usize, width: usize, seed: u64) -> Tensor {
    uniform([b, width], -3.0, 3.0, seed)
}

/// Optimizer settings of the tests.
pub fn sgd(momentum: f32) -> Sgd {
    Sgd {
        lr: 0.05,
        momentum,
        weight_decay: 0.01,
    }
}

pub fn adagrad() -> Adagrad {
    Adagrad {
        lr: 0.05,
        eps: 1e-8,
        weight_decay: 0.01,
    }
}

pub fn adam() -> Adam {
    Adam {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
    }
}
