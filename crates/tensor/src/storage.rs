//! Where tensor elements live: [`Storage`], today host memory only.
//!
//! Host buffers are 64-byte aligned (a cache line, and the width of an
//! AVX-512 register) without any `unsafe`: the buffer is a `Vec` of 64-byte,
//! 64-aligned [`Block`]s, viewed as `[f32]` / `[i32]` / `[u32]` through
//! `bytemuck`. Storage is untyped; the tensor that owns it knows the dtype.

use bytemuck::{Pod, Zeroable};

use crate::cpu::packed::PackCache;
use crate::dtype::Element;
use crate::error::{Result, TensorError};
use crate::Device;

/// Alignment of host buffers, in bytes.
pub const HOST_ALIGN: usize = 64;

/// The allocation unit of host storage: one aligned cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Block([u32; 16]);

const _: () = assert!(std::mem::size_of::<Block>() == HOST_ALIGN);
const _: () = assert!(std::mem::align_of::<Block>() == HOST_ALIGN);

/// The buffer behind one or more tensors.
///
/// Host memory, or device memory behind the `cuda` feature; code that
/// needs host memory goes through [`Storage::host`] and friends, the one
/// place that rejects device storage. Not `Clone`: copies are explicit
/// (`Tensor::deep_clone`), since a device copy can fail.
pub(crate) enum Storage {
    Host(HostStorage),
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::CudaStorage),
}

impl Storage {
    /// The device this storage lives on.
    pub(crate) fn device(&self) -> Device {
        match self {
            Storage::Host(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            Storage::Cuda(c) => Device::Cuda(c.ordinal),
        }
    }

    /// The host buffer, or an error naming `op` if the storage is on a device.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    pub(crate) fn host(&self, op: &'static str) -> Result<&HostStorage> {
        match self {
            Storage::Host(h) => Ok(h),
            #[cfg(feature = "cuda")]
            Storage::Cuda(_) => Err(self.not_on_host(op)),
        }
    }

    /// Mutable access to the host buffer.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    pub(crate) fn host_mut(&mut self, op: &'static str) -> Result<&mut HostStorage> {
        match self {
            Storage::Host(h) => Ok(h),
            #[cfg(feature = "cuda")]
            Storage::Cuda(_) => Err(self.not_on_host(op)),
        }
    }

    #[cfg(feature = "cuda")]
    fn not_on_host(&self, op: &'static str) -> TensorError {
        TensorError::DeviceMismatch {
            op,
            arg: "self",
            expected: Device::Cpu,
            got: self.device(),
        }
    }

    /// Capacity in 4-byte elements (every dtype is 4 bytes wide).
    pub(crate) fn words(&self) -> usize {
        match self {
            Storage::Host(h) => h.as_bytes().len() / 4,
            #[cfg(feature = "cuda")]
            Storage::Cuda(c) => c.data.len(),
        }
    }

    /// Identifies the buffer (for "no copy" checks): the address of the
    /// first host byte, or of the device buffer's handle.
    pub(crate) fn addr(&self) -> usize {
        match self {
            Storage::Host(h) => h.as_bytes().as_ptr() as usize,
            #[cfg(feature = "cuda")]
            Storage::Cuda(c) => c as *const _ as usize,
        }
    }
}

/// A zero-initialised, 64-byte aligned host buffer, with the packed copies
/// the CPU's products keep of it when it is a weight (`cpu/packed.rs`),
/// dropped on every mutable access.
pub(crate) struct HostStorage {
    blocks: Vec<Block>,
    pack: PackCache,
}

impl Clone for HostStorage {
    /// A copy of the elements; packed copies are not carried over.
    fn clone(&self) -> Self {
        HostStorage {
            blocks: self.blocks.clone(),
            pack: self.pack.same_mark(),
        }
    }
}

impl HostStorage {
    /// A zeroed buffer of at least `bytes` bytes (rounded up to whole blocks).
    ///
    /// Reserves with `try_reserve_exact`, so a request the allocator cannot
    /// satisfy (or whose size overflows) is [`TensorError::AllocFailed`]
    /// instead of an abort.
    pub(crate) fn zeroed(bytes: usize) -> Result<HostStorage> {
        let n = bytes.div_ceil(HOST_ALIGN);
        let mut blocks = Vec::new();
        blocks
            .try_reserve_exact(n)
            .map_err(|_| TensorError::AllocFailed { bytes })?;
        blocks.resize(n, Block::zeroed());
        Ok(HostStorage {
            blocks,
            pack: PackCache::default(),
        })
    }

    /// A one-block buffer holding `value` first. Infallible like any tiny
    /// allocation in Rust (an allocator that cannot give 64 bytes aborts).
    pub(crate) fn from_value<T: Element>(value: T) -> HostStorage {
        let mut storage = HostStorage {
            blocks: vec![Block::zeroed()],
            pack: PackCache::default(),
        };
        if let Some(first) = storage.as_mut_slice::<T>().first_mut() {
            *first = value;
        }
        storage
    }

    /// A buffer holding a copy of `data`.
    pub(crate) fn from_slice<T: Element>(data: &[T]) -> Result<HostStorage> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let mut storage = HostStorage::zeroed(bytes.len())?;
        storage.as_bytes_mut()[..bytes.len()].copy_from_slice(bytes);
        Ok(storage)
    }

    /// The whole buffer as bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.blocks)
    }

    /// The whole buffer as mutable bytes (packed copies of it are dropped).
    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.pack.clear();
        bytemuck::cast_slice_mut(&mut self.blocks)
    }

    /// The whole buffer as elements of type `T`. Infallible: a block's size
    /// and alignment (64) are multiples of every element type's.
    pub(crate) fn as_slice<T: Element>(&self) -> &[T] {
        bytemuck::cast_slice(&self.blocks)
    }

    /// The whole buffer as mutable elements of type `T` (packed copies of
    /// it are dropped).
    pub(crate) fn as_mut_slice<T: Element>(&mut self) -> &mut [T] {
        self.pack.clear();
        bytemuck::cast_slice_mut(&mut self.blocks)
    }

    /// Forgets the weight mark and every packed copy and spare (the buffer
    /// is reused for something else).
    pub(crate) fn forget_packing(&mut self) {
        self.pack.reset();
    }

    /// The packed copies of this buffer (see `cpu/packed.rs`).
    pub(crate) fn pack_cache(&self) -> &PackCache {
        &self.pack
    }
}
