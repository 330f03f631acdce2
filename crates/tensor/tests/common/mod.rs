//! Helpers shared by the backend tests.
#![allow(dead_code)] // each test binary uses a different subset

pub mod cell_calls;
pub mod state_cells;

#[allow(unused_imports)]
pub use cell_calls::CellCalls;

use sheaf_kernels_cpu::{CpuKernels, Isa};
use sheaf_tensor::{CpuBackend, DType, Device, Shape, Tensor};

pub fn backends() -> Vec<CpuBackend> {
    Isa::supported()
        .into_iter()
        .map(|isa| CpuBackend::with_kernels(CpuKernels::with_isa(isa).unwrap()))
        .collect()
}

/// Deterministic values in about [-1, 1].
pub fn vals(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

pub fn t(data: &[f32], shape: impl Into<Shape>) -> Tensor {
    Tensor::from_slice(data, shape).unwrap()
}

pub fn rand(shape: impl Into<Shape>, seed: u32) -> Tensor {
    let shape = shape.into();
    t(&vals(shape.numel().unwrap(), seed), shape)
}

pub fn get(x: &Tensor) -> Vec<f32> {
    x.to_vec::<f32>().unwrap()
}

#[track_caller]
pub fn close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

pub fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

pub fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

pub fn zeros(shape: impl Into<Shape>) -> Tensor {
    Tensor::zeros(shape, DType::F32, Device::Cpu).unwrap()
}
