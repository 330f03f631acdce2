//! Shapes, dtypes, tensors and the [`Backend`] trait of sheaf.
//!
//! This crate sits between the kernel crates, which work on plain slices and
//! know nothing of tensors, and the autodiff/scheduling crates above, which
//! know nothing of devices. It provides:
//!
//! - [`Shape`] and [`DType`]: what a tensor is. A shape is stored inline (at
//!   most [`Shape::MAX_RANK`] dimensions, `Copy`, no heap) because every graph
//!   node carries several and building a node must stay far under a
//!   microsecond.
//! - [`Tensor`]: a contiguous row-major view into reference-counted storage
//!   (64-byte aligned on the host). Clones and views (row ranges, reshapes)
//!   are O(1) and share storage; writing is copy-on-write, so a value handed
//!   to one graph node can never be changed behind its back by another, while
//!   buffers owned by a single tensor are written in place.
//! - [`TensorMut`]: a borrowed mutable view, which is how backends take their
//!   outputs, so results can be written straight into row ranges of a larger
//!   buffer without a copy.
//! - [`Backend`]: the device-neutral kernel interface (matmul, elementwise,
//!   row gather/scatter, softmax and losses, fused recurrent cells, optimizer
//!   steps), object-safe and picked at run time from a [`Device`]. Every
//!   method checks dtypes and shapes first and reports a mismatch as a
//!   [`TensorError`] naming the operation, the argument and the shapes.
//!   [`CpuBackend`] dispatches to `sheaf-kernels-cpu`; CUDA will come behind a
//!   `cuda` feature.
//!
//! ```
//! use sheaf_tensor::{Binary, DType, Device, Tensor};
//!
//! let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
//! let b = Tensor::full_f32(10.0, [2, 2], Device::Cpu)?;
//! let mut y = Tensor::zeros([2, 2], DType::F32, Device::Cpu)?;
//! let backend = Device::Cpu.backend()?;
//! backend.binary(Binary::Add, &a, &b, y.view_mut()?)?;
//! assert_eq!(y.to_vec::<f32>()?, [11.0, 12.0, 13.0, 14.0]);
//!
//! // Views share storage; writing to a shared tensor copies it first.
//! let top = y.rows(0..1)?;
//! assert!(top.shares_storage(&y));
//! y.as_mut_slice::<f32>()?[0] = 0.0;
//! assert_eq!(top.to_vec::<f32>()?, [11.0, 12.0]);
//! # Ok::<(), sheaf_tensor::TensorError>(())
//! ```
#![forbid(unsafe_code)]
// `TensorError` keeps its shapes inline (about 150 bytes) so that variants are
// plain to match and building one never allocates; errors are returned from
// calls that do far more work than moving one, so the size costs nothing
// measurable on the success path.
#![allow(clippy::result_large_err)]

mod backend;
pub mod cell;
mod check;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod device;
mod dtype;
mod error;
mod shape;
mod storage;
mod tensor;
mod tensor_mut;

pub use backend::{
    Backend, Binary, CellOps, ElementwiseOps, MatmulOps, OptimOps, RowOps, SoftmaxOps,
    StateCellOps, Unary,
};
pub use cell::CellSpec;
pub use cpu::CpuBackend;
#[cfg(feature = "cuda")]
pub use cuda::CudaBackend;
pub use device::{gpu_required, Device, REQUIRE_GPU_VAR};
pub use dtype::{DType, Element};
pub use error::{debug_error, Result, TensorError};
pub use shape::Shape;
/// A user's CUDA C kernel (name and source), for
/// [`CudaBackend::launch_elementwise`].
#[cfg(feature = "cuda")]
pub use sheaf_kernels_cuda::UserKernel;
pub use storage::HOST_ALIGN;
pub use tensor::Tensor;
pub use tensor_mut::TensorMut;

/// `use sheaf_tensor::prelude::*`: the tensor types ([`Tensor`],
/// [`Shape`], [`DType`], [`Device`], [`TensorError`]) and the backend
/// traits, for calling backend methods on a concrete backend type such as
/// [`CpuBackend`] (on a `&dyn Backend` they need no import). No `Result`,
/// so a glob does not shadow the standard one.
pub mod prelude {
    pub use crate::backend::{
        Backend, CellOps, ElementwiseOps, MatmulOps, OptimOps, RowOps, SoftmaxOps, StateCellOps,
    };
    pub use crate::{DType, Device, Shape, Tensor, TensorError};
}

/// Subnormal floats flushed to zero on the threads that run kernels (see
/// the module's docs); executors call [`denormals::prepare`].
pub use sheaf_kernels_cpu::denormals;
/// Optimizer configurations, shared with the kernel crate.
pub use sheaf_kernels_cpu::optim::{Adagrad, Adam, Sgd};
/// The kernel crate's error, the source of [`TensorError::Kernel`].
pub use sheaf_kernels_cpu::KernelError;
/// Whether a matrix operand of [`MatmulOps::matmul`] is transposed.
pub use sheaf_kernels_cpu::Transpose;
