//! The [`Backend`] trait: the device-neutral kernel interface, one
//! supertrait per kernel family (one file each).

use std::fmt;

use crate::error::Result;
use crate::{Device, TensorMut};

mod cells;
mod elementwise;
mod matmul;
mod optim;
mod rows;
mod softmax;

pub use cells::{CellOps, StateCellOps};
pub use elementwise::{Binary, ElementwiseOps, Unary};
pub use matmul::MatmulOps;
pub use optim::OptimOps;
#[cfg(feature = "cuda")]
pub(crate) use rows::by_tensor;
pub use rows::RowOps;
pub use softmax::SoftmaxOps;

/// The kernels of one device, on tensors.
///
/// This is the interface autodiff builds on: object-safe (used as
/// `&dyn Backend`, picked at run time by [`Device::backend`]), with a method
/// for every kernel family, grouped in one supertrait per family
/// ([`MatmulOps`], [`ElementwiseOps`], [`RowOps`], [`SoftmaxOps`],
/// [`CellOps`], [`StateCellOps`], [`OptimOps`]); their methods are callable on a
/// `&dyn Backend` without importing them (on a concrete backend type,
/// `use sheaf_tensor::prelude::*`). Contracts shared by all methods:
///
/// - **Checks first.** Every method checks dtypes (all `f32`, index tensors
///   `u32`), devices and shapes before touching any data, and reports a
///   violation as a [`crate::TensorError`] naming the operation (the name
///   used below, or [`Unary::name`] / [`Binary::name`]), the argument and
///   the shapes. It never panics on bad input. Conditions on the *values* of
///   index tensors (an index past the table, a duplicate row in a sparse
///   update, a label not below the class count) are found by the kernel and
///   reported as [`crate::TensorError::Kernel`]; outputs may then be
///   partially written.
/// - **Outputs are [`TensorMut`]s**, so results can go straight into row
///   ranges of larger buffers. Forward methods OVERWRITE their outputs;
///   backward methods (`*_bwd`) and the `*_acc` / `axpy` methods ACCUMULATE
///   (`+=`) into theirs, so an input used twice receives the sum of its
///   gradients.
/// - **Shapes are exact** unless a method says otherwise: an output has
///   exactly the shape stated, not merely the same element count (reshape
///   views are free: [`crate::Tensor::reshape`], [`TensorMut::reshape`]).
/// - **Rows.** Row operations (gather, scatter, copy, broadcast, sparse
///   optimizer steps) work on dimension 0; a row is everything after it.
///   Matrix operations (matmul, the softmax family) see a tensor of rank `r`
///   as a matrix whose rows are indexed by the first `r - 1` dimensions and
///   whose columns are the last one: `[b, t, d]` is a `(b t) x d` matrix.
///   Fused cells take rank-2 `[batch, width]` tensors.
pub trait Backend:
    MatmulOps
    + ElementwiseOps
    + RowOps
    + SoftmaxOps
    + CellOps
    + StateCellOps
    + OptimOps
    + Send
    + Sync
    + fmt::Debug
{
    /// The device this backend runs on.
    fn device(&self) -> Device;

    /// A short description, e.g. `"cpu (avx2)"`.
    fn name(&self) -> String;

    /// Sets every element of `out` to `value` (zeroing gradient buffers).
    fn fill(&self, value: f32, out: TensorMut<'_>) -> Result<()>;

    /// Device kernel launches since the backend was created (0 where
    /// nothing is launched: the CPU); differences count a step's launches.
    fn launches(&self) -> u64 {
        0
    }

    /// The CUDA backend behind this one, if it is one: how a user's op
    /// reaches its own device kernels
    /// ([`crate::CudaBackend::launch_elementwise`]).
    #[cfg(feature = "cuda")]
    fn cuda(&self) -> Option<&crate::CudaBackend> {
        None
    }
}
