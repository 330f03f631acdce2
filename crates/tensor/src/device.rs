//! [`Device`]: where a tensor lives and which backend runs its kernels.

use std::fmt;

use crate::backend::Backend;
use crate::error::{Result, TensorError};

/// Where a tensor's storage lives.
///
/// Backends are picked at run time from this enum (not through generics), so
/// one model type runs on any device. Only `Cpu` works today; CUDA joins
/// behind the `cuda` feature, and until then every CUDA request is
/// [`TensorError::DeviceUnavailable`] rather than a missing variant, so code
/// written against `Device` does not change when the feature arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory, kernels from `sheaf-kernels-cpu`.
    #[default]
    Cpu,
    /// The CUDA device with this ordinal.
    Cuda(usize),
}

/// Why CUDA devices are unavailable in this build.
const NO_CUDA: &str = "sheaf-tensor was built without the `cuda` feature";

impl Device {
    /// Ok if tensors can be allocated on this device in this build.
    pub fn check_available(self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(_) => Err(self.unavailable()),
        }
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
            Device::Cuda(_) => Err(self.unavailable()),
        }
    }

    fn unavailable(self) -> TensorError {
        TensorError::DeviceUnavailable {
            device: self,
            reason: NO_CUDA,
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
