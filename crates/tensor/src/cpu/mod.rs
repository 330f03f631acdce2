//! [`CpuBackend`]: the [`Backend`] over `sheaf-kernels-cpu`.
//!
//! Every method runs the shared shape checks (`crate::check`), fetches the
//! host slices (checking dtypes and devices), and only then calls the kernel.
//! Shapes with a zero-width row (`H == 0`, zero columns) never reach a
//! kernel: nothing is computed for them, and kernels that derive a row count
//! as `len / cols` cannot be asked to divide by zero.

use std::sync::OnceLock;

use sheaf_kernels_cpu::{CpuKernels, KernelError};

use crate::backend::Backend;
use crate::dtype::Element;
use crate::error::{Result, TensorError};
use crate::{Device, Tensor, TensorMut};

mod cells;
mod elementwise;
mod matmul;
mod optim;
pub(crate) mod packed;
mod rows;
mod softmax;

/// The CPU backend: [`Backend`] on host tensors, through [`CpuKernels`].
///
/// Holds the kernel handle, so tests can run the backend on every ISA
/// ([`CpuBackend::with_kernels`]); [`Device::backend`] hands out one shared
/// instance with the best ISA of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuBackend {
    kernels: CpuKernels,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// A backend with the best ISA of this CPU.
    pub fn new() -> Self {
        CpuBackend {
            kernels: CpuKernels::new(),
        }
    }

    /// A backend running the given kernels (a forced ISA, for tests).
    pub fn with_kernels(kernels: CpuKernels) -> Self {
        CpuBackend { kernels }
    }

    /// The kernels this backend calls.
    pub fn kernels(&self) -> CpuKernels {
        self.kernels
    }

    /// The process-wide instance behind [`Device::backend`].
    pub(crate) fn global() -> &'static CpuBackend {
        static CPU: OnceLock<CpuBackend> = OnceLock::new();
        CPU.get_or_init(CpuBackend::new)
    }
}

/// Input `arg` of `op` as a host slice of `T`.
fn input<'t, T: Element>(op: &'static str, arg: &'static str, t: &'t Tensor) -> Result<&'t [T]> {
    crate::check::meta::<T>(op, arg, t.dtype(), t.device(), Device::Cpu)?;
    t.as_slice::<T>()
}

/// Output `arg` of `op` as a mutable host slice of `T`.
fn output<'a, T: Element>(
    op: &'static str,
    arg: &'static str,
    t: TensorMut<'a>,
) -> Result<&'a mut [T]> {
    crate::check::meta::<T>(op, arg, t.dtype(), t.device(), Device::Cpu)?;
    t.into_mut_slice::<T>()
}

fn f32_in<'t>(op: &'static str, arg: &'static str, t: &'t Tensor) -> Result<&'t [f32]> {
    input::<f32>(op, arg, t)
}

fn u32_in<'t>(op: &'static str, arg: &'static str, t: &'t Tensor) -> Result<&'t [u32]> {
    input::<u32>(op, arg, t)
}

fn f32_out<'a>(op: &'static str, arg: &'static str, t: TensorMut<'a>) -> Result<&'a mut [f32]> {
    output::<f32>(op, arg, t)
}

/// For zero-width rows, which skip the kernel: the index check the kernel
/// would have made (it cannot, since it derives the table's row count from
/// its length), reported exactly as the kernel reports it.
fn check_indices(op: &'static str, idx: &[u32], rows: usize) -> Result<()> {
    match idx.iter().position(|&i| i as usize >= rows) {
        None => Ok(()),
        Some(position) => Err(TensorError::Kernel {
            op,
            source: KernelError::Index {
                kernel: op,
                index: idx[position] as usize,
                position,
                rows,
            },
        }),
    }
}

impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn name(&self) -> String {
        format!("cpu ({})", self.kernels.isa().name())
    }

    fn fill(&self, value: f32, out: TensorMut<'_>) -> Result<()> {
        f32_out("fill", "out", out)?.fill(value);
        Ok(())
    }
}
