//! Users' own kernels: CUDA C source compiled with NVRTC on first use and
//! cached per name, launched on the same stream as the built-in kernels.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaFunction, CudaView, CudaViewMut, LaunchArgs, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use crate::error::{CudaError, Result};
use crate::CudaKernels;

/// Compiled user kernels of one device, by `(name, source hash)`.
#[derive(Default)]
pub(crate) struct UserKernels {
    cache: Mutex<HashMap<(String, String), CudaFunction>>,
}

/// A user kernel: CUDA C `source` defining `extern "C" __global__ void
/// <name>(...)`.
#[derive(Debug, Clone, Copy)]
pub struct UserKernel<'s> {
    pub name: &'s str,
    pub source: &'s str,
}

impl CudaKernels {
    /// The compiled function of `kernel`, compiling it with NVRTC (for the
    /// device's own architecture) the first time it is asked for.
    pub fn user_function(&self, kernel: UserKernel<'_>) -> Result<CudaFunction> {
        let key = (
            kernel.name.to_string(),
            crate::ptx::source_hash(kernel.source),
        );
        let mut cache = self.user.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = cache.get(&key) {
            return Ok(f.clone());
        }
        // SAFETY: only opens the NVRTC library by its known names.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaError::Unavailable(
                "NVRTC (libnvrtc) was not found: add the CUDA toolkit's lib directory to LD_LIBRARY_PATH".into(),
            ));
        }
        let compile = |e: cudarc::nvrtc::CompileError| CudaError::Compile {
            name: kernel.name.to_string(),
            log: e.to_string(),
        };
        // PTX for this device's architecture (compute_90 on an H100): a
        // virtual target, so NVRTC yields PTX (a real sm_ target yields a
        // cubin).
        let arch = self.compute_capability().and_then(|cc| match cc {
            (8, 0) => Some("compute_80"),
            (8, 6) => Some("compute_86"),
            (8, 7) => Some("compute_87"),
            (8, 9) => Some("compute_89"),
            (9, 0) => Some("compute_90"),
            (10, 0) => Some("compute_100"),
            (12, 0) => Some("compute_120"),
            // NVRTC's default (a PTX the driver JIT-compiles).
            _ => None,
        });
        let opts = CompileOptions {
            name: Some(format!("{}.cu", kernel.name)),
            arch,
            ..Default::default()
        };
        let ptx: Ptx = compile_ptx_with_opts(kernel.source, opts).map_err(compile)?;
        let module = self
            .context()
            .load_module(ptx)
            .map_err(CudaError::driver("load user kernel"))?;
        let f = module
            .load_function(kernel.name)
            .map_err(CudaError::driver("load user kernel"))?;
        cache.insert(key, f.clone());
        Ok(f)
    }

    /// A launch builder for a user's function on this device's stream: push
    /// the arguments with `arg` and call `launch` (unsafe: the user's
    /// signature is not known to sheaf). Counted as one launch.
    pub fn user_launch<'a>(&'a self, f: &'a CudaFunction) -> LaunchArgs<'a> {
        // Counted now; its time is the caller's, after this returns.
        drop(self.count_launch("user kernel"));
        self.stream().launch_builder(f)
    }

    /// Runs a user's ELEMENTWISE kernel over `n` elements: its signature
    /// must be `extern "C" __global__ void <name>(const float* in_0, ...,
    /// float* out_0, ..., unsigned long long n)` (inputs, then outputs, then
    /// the count), and it must touch elements `0..n` of each pointer only
    /// (a grid-stride loop; any launch shape must work). Every slice is
    /// checked to hold exactly `n` elements; the signature cannot be
    /// checked and is the user's contract.
    pub fn launch_elementwise(
        &self,
        kernel: UserKernel<'_>,
        ins: &[&CudaView<'_, f32>],
        outs: &mut [CudaViewMut<'_, f32>],
        n: usize,
    ) -> Result<()> {
        for v in ins {
            CudaError::check_len("user kernel", "input", v.len(), n)?;
        }
        for v in outs.iter() {
            CudaError::check_len("user kernel", "output", v.len(), n)?;
        }
        if n == 0 {
            return Ok(());
        }
        let f = self.user_function(kernel)?;
        let count = n as u64;
        let mut b = self.user_launch(&f);
        for v in ins {
            b.arg(*v);
        }
        for v in outs.iter_mut() {
            b.arg(v);
        }
        b.arg(&count);
        // SAFETY: every pointer passed covers exactly `n` elements (checked
        // above) and the kernel's documented contract is to touch elements
        // 0..n of each, with the signature (inputs, outputs, count) this
        // builder follows.
        unsafe { b.launch(self.elementwise_config(n)) }
            .map(|_| ())
            .map_err(CudaError::driver("user kernel"))
    }

    /// A grid-stride configuration for `n` elements (256 threads a block).
    pub fn launch_config(&self, n: usize) -> LaunchConfig {
        self.elementwise_config(n)
    }

    /// The device's compute capability, e.g. (9, 0).
    pub fn compute_capability(&self) -> Option<(i32, i32)> {
        self.context().compute_capability().ok()
    }

    pub(crate) fn context(&self) -> &Arc<cudarc::driver::CudaContext> {
        self.stream().context()
    }
}
