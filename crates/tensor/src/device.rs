//! [`Device`]: where a tensor lives and which backend runs its kernels.

use std::fmt;

use crate::backend::Backend;
use crate::error::Result;
#[cfg(not(feature = "cuda"))]
use crate::error::TensorError;

/// Where a tensor's storage lives.
///
/// Backends are picked at run time from this enum (not through generics), so
/// one model type runs on any device. `Cuda` devices work when sheaf is
/// built with the `cuda` feature and the machine has the CUDA driver and
/// the device; otherwise a CUDA request is an error saying why
/// ([`TensorError::DeviceUnavailable`] without the feature), never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory, kernels from `sheaf-kernels-cpu`.
    #[default]
    Cpu,
    /// The CUDA device with this ordinal.
    Cuda(usize),
}

/// Why CUDA devices are unavailable in this build.
#[cfg(not(feature = "cuda"))]
const NO_CUDA: &str = "sheaf-tensor was built without the `cuda` feature";

impl Device {
    /// Ok if tensors can be allocated on this device in this build.
    pub fn check_available(self) -> Result<()> {
        self.backend().map(|_| ())
    }

    /// Whether tensors can be allocated on this device in this build.
    pub fn is_available(self) -> bool {
        self.check_available().is_ok()
    }

    /// The backend that runs kernels on this device: a process-wide
    /// instance, built on first use.
    pub fn backend(self) -> Result<&'static dyn Backend> {
        match self {
            Device::Cpu => Ok(crate::cpu::CpuBackend::global()),
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => Ok(crate::cuda::CudaBackend::global(n)?),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(self.unavailable()),
        }
    }

    #[cfg(not(feature = "cuda"))]
    fn unavailable(self) -> TensorError {
        TensorError::DeviceUnavailable {
            device: self,
            reason: NO_CUDA,
        }
    }
}

/// The environment variable under which tests with GPU parts FAIL,
/// instead of skipping, where a CUDA device cannot be opened:
/// `SHEAF_REQUIRE_GPU=1`. The GPU bundle's `run.sh` sets it, so that a run
/// on a GPU machine proves something even when the driver, cuBLAS or the
/// PTX fails to load.
pub const REQUIRE_GPU_VAR: &str = "SHEAF_REQUIRE_GPU";

/// Whether [`REQUIRE_GPU_VAR`] is set to `1`.
pub fn gpu_required() -> bool {
    std::env::var_os(REQUIRE_GPU_VAR).is_some_and(|v| v == "1")
}

impl std::str::FromStr for Device {
    type Err = String;

    /// `cpu`, `cuda` (device 0) or `cuda:N`.
    fn from_str(s: &str) -> std::result::Result<Device, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device {s:?}: expected cpu, cuda or cuda:N")),
        }
    }
}

impl fmt::Display for Device {
    /// `cpu`, `cuda:0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}
