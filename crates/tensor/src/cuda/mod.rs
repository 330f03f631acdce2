//! [`CudaBackend`]: the [`Backend`] over `sheaf-kernels-cuda`, and the
//! device storage behind CUDA tensors.
//!
//! Every method runs the same shape checks as the CPU backend
//! (`crate::check`), then checks dtypes and devices, and only then
//! launches. Kernels run asynchronously on the device's one stream;
//! reading a value ([`crate::Tensor::to_vec`]) waits for them and reports
//! any bad index value a kernel found since the last read
//! ([`TensorError::Cuda`] with the kernel's name).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use sheaf_kernels_cuda::{as_u32, CudaError, CudaKernels, CudaSlice, CudaView, CudaViewMut};

use crate::backend::Backend;
use crate::dtype::Element;
use crate::error::{Result, TensorError};
use crate::{Device, Tensor, TensorMut};

mod cells;
mod elementwise;
mod matmul;
mod optim;
mod rows;
mod softmax;

/// The CUDA backend of one device.
#[derive(Debug)]
pub struct CudaBackend {
    kernels: CudaKernels,
    ordinal: usize,
}

impl CudaBackend {
    /// The process-wide backend of `cuda:ordinal`, opened on first use.
    pub fn global(ordinal: usize) -> Result<&'static CudaBackend> {
        static OPEN: OnceLock<Mutex<HashMap<usize, &'static CudaBackend>>> = OnceLock::new();
        let mut open = OPEN
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(b) = open.get(&ordinal) {
            return Ok(b);
        }
        let kernels = CudaKernels::new(ordinal).map_err(cuda_err("open device"))?;
        // One per device for the whole process, like the CPU backend.
        let backend: &'static CudaBackend = Box::leak(Box::new(CudaBackend { kernels, ordinal }));
        open.insert(ordinal, backend);
        Ok(backend)
    }

    /// The kernels this backend launches (launch counts, determinism, TF32,
    /// users' kernels).
    pub fn kernels(&self) -> &CudaKernels {
        &self.kernels
    }

    /// Runs a user's elementwise CUDA kernel (compiled with NVRTC on first
    /// use, cached) over tensors of one shape: `kernel`'s signature is
    /// `(const float* in_0, ..., float* out_0, ..., unsigned long long n)`
    /// with `n` the element count, and it touches elements `0..n` only (see
    /// [`sheaf_kernels_cuda::CudaKernels::launch_elementwise`]). Outputs
    /// are whatever the kernel writes: overwrite or accumulate.
    pub fn launch_elementwise(
        &self,
        kernel: sheaf_kernels_cuda::UserKernel<'_>,
        inputs: &[&Tensor],
        outputs: Vec<TensorMut<'_>>,
    ) -> Result<()> {
        const OP: &str = "user kernel";
        let Some(first) = outputs.first() else {
            return Ok(());
        };
        let shape = first.shape();
        let ck = crate::check::Check(OP);
        for t in inputs {
            ck.expect("input", shape, t.shape())?;
        }
        for t in &outputs {
            ck.expect("output", shape, t.shape())?;
        }
        let ins = inputs
            .iter()
            .map(|t| self.f32_in(OP, "input", t))
            .collect::<Result<Vec<_>>>()?;
        let mut outs = outputs
            .into_iter()
            .map(|t| self.f32_out(OP, "output", t))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&CudaView<'_, f32>> = ins.iter().collect();
        self.kernels
            .launch_elementwise(kernel, &refs, &mut outs, shape.numel_unchecked())
            .map_err(cuda_err(OP))
    }

    /// Waits for the device and reports a bad index value a kernel found.
    pub fn synchronize(&self) -> Result<()> {
        self.kernels.check().map_err(cuda_err("synchronize"))
    }

    /// Input `arg` of `op` as device `f32`s of this backend's device.
    pub(crate) fn f32_in<'t>(
        &self,
        op: &'static str,
        arg: &'static str,
        t: &'t Tensor,
    ) -> Result<CudaView<'t, f32>> {
        self.view::<f32>(op, arg, t)
    }

    /// Input `arg` of `op` as device `u32`s.
    pub(crate) fn u32_in<'t>(
        &self,
        op: &'static str,
        arg: &'static str,
        t: &'t Tensor,
    ) -> Result<CudaView<'t, u32>> {
        Ok(as_u32(&self.view::<u32>(op, arg, t)?))
    }

    fn view<'t, T: Element>(
        &self,
        op: &'static str,
        arg: &'static str,
        t: &'t Tensor,
    ) -> Result<CudaView<'t, f32>> {
        crate::check::meta::<T>(op, arg, t.dtype(), t.device(), self.device())?;
        t.cuda_view().ok_or(TensorError::DeviceMismatch {
            op,
            arg,
            expected: self.device(),
            got: t.device(),
        })
    }

    /// Output `arg` of `op`, a `u32` tensor, as its device words.
    pub(crate) fn u32_out<'a>(
        &self,
        op: &'static str,
        arg: &'static str,
        t: TensorMut<'a>,
    ) -> Result<CudaViewMut<'a, f32>> {
        crate::check::meta::<u32>(op, arg, t.dtype(), t.device(), self.device())?;
        let got = t.device();
        t.into_cuda_view().ok_or(TensorError::DeviceMismatch {
            op,
            arg,
            expected: self.device(),
            got,
        })
    }

    /// Output `arg` of `op` as device `f32`s.
    pub(crate) fn f32_out<'a>(
        &self,
        op: &'static str,
        arg: &'static str,
        t: TensorMut<'a>,
    ) -> Result<CudaViewMut<'a, f32>> {
        crate::check::meta::<f32>(op, arg, t.dtype(), t.device(), self.device())?;
        let got = t.device();
        t.into_cuda_view().ok_or(TensorError::DeviceMismatch {
            op,
            arg,
            expected: self.device(),
            got,
        })
    }
}

/// Maps a kernel error of `op`.
pub(crate) fn cuda_err(op: &'static str) -> impl Fn(CudaError) -> TensorError {
    move |source| TensorError::Cuda { op, source }
}

impl Backend for CudaBackend {
    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    fn name(&self) -> String {
        format!("cuda:{} ({})", self.ordinal, self.kernels.device_name())
    }

    fn fill(&self, value: f32, out: TensorMut<'_>) -> Result<()> {
        let mut out = self.f32_out("fill", "out", out)?;
        self.kernels.fill(value, &mut out).map_err(cuda_err("fill"))
    }

    fn cuda(&self) -> Option<&CudaBackend> {
        Some(self)
    }

    fn launches(&self) -> u64 {
        self.kernels.launches()
    }
}

/// Device memory of a tensor: 4-byte words (every dtype's size) on
/// `cuda:ordinal`.
pub(crate) struct CudaStorage {
    pub(crate) data: CudaSlice<f32>,
    pub(crate) ordinal: usize,
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        // The slice's own drop frees the memory on the device's stream but
        // does not make the context current: a tensor dropped on a thread
        // that never touched the device (a fresh thread, a rayon worker)
        // would fail to free it and leak it.
        sheaf_kernels_cuda::bind_for_drop(&self.data);
    }
}

impl CudaStorage {
    /// `words` zeroed words on `cuda:ordinal`.
    pub(crate) fn zeroed(ordinal: usize, words: usize) -> Result<CudaStorage> {
        let k = &CudaBackend::global(ordinal)?.kernels;
        let data = k.alloc_zeros::<f32>(words).map_err(cuda_err("zeros"))?;
        Ok(CudaStorage { data, ordinal })
    }

    /// A device copy of `words`.
    pub(crate) fn upload(ordinal: usize, words: &[u32]) -> Result<CudaStorage> {
        let k = &CudaBackend::global(ordinal)?.kernels;
        let words: &[f32] = bytemuck::cast_slice(words);
        // Small uploads (a batch's indices, labels, masks) go through
        // page-locked staging: the host does not wait for the stream.
        let data = if words.len() <= sheaf_kernels_cuda::STAGING_MAX {
            k.upload_staged(words)
        } else {
            k.upload::<f32>(words)
        }
        .map_err(cuda_err("to_device"))?;
        Ok(CudaStorage { data, ordinal })
    }

    /// Words `offset..offset + len` as host elements of `T`.
    pub(crate) fn download<T: Element>(&self, offset: usize, len: usize) -> Result<Vec<T>> {
        let k = &CudaBackend::global(self.ordinal)?.kernels;
        let mut host = vec![0.0f32; len];
        k.download(&self.data.slice(offset..offset + len), &mut host)
            .map_err(cuda_err("to_vec"))?;
        Ok(bytemuck::cast_slice(&host).to_vec())
    }

    /// A fresh device copy of words `offset..offset + len`.
    pub(crate) fn duplicate(&self, offset: usize, len: usize) -> Result<CudaStorage> {
        let k = &CudaBackend::global(self.ordinal)?.kernels;
        let data = k
            .duplicate(&self.data.slice(offset..offset + len))
            .map_err(cuda_err("deep_clone"))?;
        Ok(CudaStorage {
            data,
            ordinal: self.ordinal,
        })
    }
}
