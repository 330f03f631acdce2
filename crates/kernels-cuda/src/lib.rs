//! CUDA kernels for sheaf.
//!
//! The same kernel families as `sheaf-kernels-cpu`: elementwise maps and
//! derivatives, row gather / scatter-add, the softmax family and the
//! cross-entropy loss, fused LSTM, GRU and Tree-LSTM cells, optimizer
//! updates (dense and sparse rows), fill; GEMM through cuBLAS; users' own
//! kernels through NVRTC. Like the CPU crate, it knows device slices
//! (`cudarc`'s [`CudaView`] / [`CudaViewMut`]), not tensors.
//!
//! The CUDA C sources are `kernels/*.cu`; `cargo xtask build-kernels`
//! compiles them to PTX (`ptx/*.ptx`, committed and embedded), so building
//! needs no CUDA toolkit. `cudarc` loads libcuda, cuBLAS and NVRTC when a
//! [`CudaKernels`] is first created: this crate builds and its tests run
//! (skipping the device parts) on machines without CUDA.
//!
//! Every kernel runs on the context's one stream. Shapes are checked on the
//! host before a launch ([`CudaError::Len`], [`CudaError::Invalid`]); index
//! VALUES live on the device and are checked there, reported by the next
//! [`CudaKernels::check`] or download as [`CudaError::Index`].
//!
//! Feature `nccl`: `NcclComm`, NCCL's collectives on device slices, on
//! the kernels' stream (libnccl, too, is loaded at run time).

mod cells;
mod context;
mod elementwise;
mod error;
mod gemm;
mod launch;
#[cfg(feature = "nccl")]
mod nccl;
mod optim;
pub mod ptx;
mod rows;
mod softmax;
mod user;

pub use context::{
    as_u32, bind_for_drop, device_count, driver_present, narrow_view_mut, split_view_mut,
    CudaKernels, STAGING_MAX,
};
pub use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};
pub use elementwise::{Map, Zip};
pub use error::{CudaError, Result};
pub use gemm::{Operand, TILED_MAX_KN, TILED_MAX_MNK};
#[cfg(feature = "nccl")]
pub use nccl::{check_nccl, nccl_present, nccl_unique_id, NcclComm, NcclType, NCCL_ID_BYTES};
pub use optim::{AdamArgs, RowSet};
pub use user::UserKernel;

/// The environment variable under which GPU tests FAIL, instead of
/// skipping, where a device cannot be opened: `SHEAF_REQUIRE_GPU=1`. The
/// GPU bundle's `run.sh` sets it, so that a run on a GPU machine whose
/// device, cuBLAS or PTX fails to load reports failures, not passes.
pub const REQUIRE_GPU_VAR: &str = "SHEAF_REQUIRE_GPU";

/// Whether [`REQUIRE_GPU_VAR`] is set to `1`.
pub fn gpu_required() -> bool {
    std::env::var_os(REQUIRE_GPU_VAR).is_some_and(|v| v == "1")
}
