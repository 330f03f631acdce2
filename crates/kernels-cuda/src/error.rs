//! [`CudaError`]: everything a CUDA kernel call can report.

use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;

/// Result of a CUDA kernel call.
pub type Result<T, E = CudaError> = std::result::Result<T, E>;

/// Why a CUDA kernel call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// No usable CUDA: the driver library is missing, or no such device.
    #[error("CUDA is unavailable: {0}")]
    Unavailable(String),
    /// The CUDA driver failed (allocation, copy, launch, module load).
    #[error("{kernel}: CUDA driver error: {source}")]
    Driver {
        kernel: &'static str,
        #[source]
        source: DriverError,
    },
    /// The device has not `bytes` bytes free.
    #[error(
        "allocating {bytes} bytes on cuda:{ordinal}: out of device memory ({free} bytes free)"
    )]
    OutOfMemory {
        bytes: usize,
        ordinal: usize,
        free: usize,
    },
    /// cuBLAS failed.
    #[error("{kernel}: cuBLAS error: {source}")]
    Blas {
        kernel: &'static str,
        #[source]
        source: CublasError,
    },
    /// NVRTC could not compile a user's kernel.
    #[error("compiling CUDA kernel `{name}` with NVRTC: {log}")]
    Compile { name: String, log: String },
    /// A slice argument has the wrong length.
    #[error("{kernel}: `{arg}` has length {got}, expected {expected}")]
    Len {
        kernel: &'static str,
        arg: &'static str,
        got: usize,
        expected: usize,
    },
    /// An argument is invalid for another reason.
    #[error("{kernel}: {what}")]
    Invalid { kernel: &'static str, what: String },
    /// An NCCL collective (or making a communicator) failed.
    #[error("{op}: NCCL error: {what}")]
    Nccl { op: &'static str, what: String },
    /// An index VALUE was out of range; found by a kernel on the device and
    /// reported at the next synchronisation ([`crate::CudaKernels::check`]).
    #[error("{kernel}: index {index} at position {position} is out of range for {bound} rows")]
    Index {
        kernel: &'static str,
        index: usize,
        position: usize,
        bound: usize,
    },
}

impl CudaError {
    /// Checks a slice length.
    pub(crate) fn check_len(
        kernel: &'static str,
        arg: &'static str,
        got: usize,
        expected: usize,
    ) -> Result<()> {
        if got == expected {
            Ok(())
        } else {
            Err(CudaError::Len {
                kernel,
                arg,
                got,
                expected,
            })
        }
    }

    /// Maps a driver error of `kernel`.
    pub(crate) fn driver(kernel: &'static str) -> impl Fn(DriverError) -> CudaError {
        move |source| CudaError::Driver { kernel, source }
    }
}
