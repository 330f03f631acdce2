//! Hand-written CPU kernels for sheaf.
//!
//! Everything here works on plain slices of `f32` (row-major, with explicit
//! row and column counts) and knows nothing of tensors, graphs or batching:
//! the `sheaf-tensor` crate dispatches to these kernels, and anyone may depend
//! on this crate alone.
//!
//! All kernels are methods of [`CpuKernels`], a small `Copy` handle that
//! records which instruction set to use. [`CpuKernels::new`] picks the best
//! one this CPU supports (once, cached); [`CpuKernels::with_isa`] forces one,
//! which is how the tests run every SIMD path and the scalar fallback against
//! the same references.
//!
//! # Contracts shared by every kernel
//! - Lengths are checked once at the entry point; a mismatch returns
//!   [`KernelError`] naming the kernel and the argument, never a panic.
//! - Forward kernels overwrite their outputs. Backward kernels ACCUMULATE
//!   into input gradients (`dx += ...`), so an input used twice receives the
//!   sum of both contributions, as in DyNet's `backward_impl` contract.
//! - NaN and infinity propagate as in IEEE arithmetic.
//! - Work above a measured size runs on the current rayon pool (see
//!   [`parallel`]); below it the kernel stays on the calling thread.
//!
//! `unsafe` lives only in `simd/`: `#[target_feature]` functions reached
//! through safe entry points here, and the two instructions that read and
//! write the SSE control register ([`denormals`]).

pub mod cells;
pub mod denormals;
pub mod elementwise;
mod error;
pub mod gemm;
pub mod gemm_log;
mod isa;
pub mod optim;
pub mod parallel;
pub mod rows;
mod simd;
pub mod softmax;

pub use error::{KernelError, Result};
pub use gemm::Transpose;
pub use isa::{CpuKernels, Isa};
