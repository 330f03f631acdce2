//! [`Tensor`]: a shape, a dtype and a view into shared storage.

use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use crate::dtype::{DType, Element};
use crate::error::{Result, TensorError};
use crate::storage::{HostStorage, Storage};
use crate::tensor_mut::TensorMut;
use crate::{Device, Shape};

/// A dense, row-major tensor: a contiguous run of `shape.numel()` elements
/// of one [`DType`], starting `offset` elements into shared storage.
///
/// - **Cheap to clone and to view.** Cloning bumps a reference count;
///   [`Tensor::rows`], [`Tensor::row`] and [`Tensor::reshape`] are O(1) and
///   share the storage. Views are row ranges and reshapes only, so every
///   tensor is one contiguous slice: exactly what the kernels take.
/// - **Copy-on-write.** Writing ([`Tensor::as_mut_slice`],
///   [`Tensor::view_mut`]) first copies the viewed region into fresh storage
///   if any other tensor shares the storage, so writing through one tensor
///   never changes another. A tensor that owns its storage alone (the
///   executor's buffers) is written in place. So fill a buffer completely
///   (one [`Tensor::view_mut`], split into row ranges with
///   [`TensorMut::rows_mut`] / [`TensorMut::split_rows_mut`]) before handing
///   out views of it: a write while views exist copies the buffer.
///
/// Invariants, set by the constructors and kept by the views: the shape's
/// element count and row length fit in `usize` ([`Shape::numel`] succeeds),
/// and `offset + numel` elements of the dtype fit in the storage.
#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    offset: usize,
    shape: Shape,
    dtype: DType,
}

impl Tensor {
    /// A zero-filled tensor.
    ///
    /// [`TensorError::AllocFailed`] if the memory cannot be had (never an
    /// abort), [`TensorError::DeviceUnavailable`] for a device this build
    /// cannot use, [`TensorError::SizeOverflow`] for a shape whose size does
    /// not fit in `usize`.
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        let shape = shape.into();
        device.check_available()?;
        let numel = shape.validate()?;
        let bytes = numel
            .checked_mul(dtype.size_in_bytes())
            .ok_or(TensorError::SizeOverflow { shape })?;
        let storage = match device {
            Device::Cpu => Storage::Host(HostStorage::zeroed(bytes)?),
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => Storage::Cuda(crate::cuda::CudaStorage::zeroed(n, numel)?),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => return Err(device.check_available().unwrap_err()),
        };
        Ok(Tensor::from_storage(storage, shape, dtype))
    }

    /// A tensor with every element `value`.
    pub fn full_f32(value: f32, shape: impl Into<Shape>, device: Device) -> Result<Tensor> {
        let mut t = Tensor::zeros(shape, DType::F32, device)?;
        if value != 0.0 {
            device.backend()?.fill(value, t.view_mut()?)?;
        }
        Ok(t)
    }

    /// A host tensor holding `data`, which must have exactly
    /// `shape.numel()` elements ([`TensorError::ElementCount`] otherwise).
    ///
    /// The data is copied: a `Vec<T>` is only 4-byte aligned, and tensor
    /// storage is 64-byte aligned for the SIMD kernels.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: impl Into<Shape>) -> Result<Tensor> {
        Tensor::copy_of("from_vec", &data, shape.into())
    }

    /// A host tensor holding a copy of `data` (see [`Tensor::from_vec`]).
    pub fn from_slice<T: Element>(data: &[T], shape: impl Into<Shape>) -> Result<Tensor> {
        Tensor::copy_of("from_slice", data, shape.into())
    }

    /// A rank-0 host tensor holding `value`.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        let host = HostStorage::from_value(value);
        Tensor::from_storage(Storage::Host(host), Shape::scalar(), T::DTYPE)
    }

    fn copy_of<T: Element>(op: &'static str, data: &[T], shape: Shape) -> Result<Tensor> {
        let numel = shape.validate()?;
        if numel != data.len() {
            return Err(TensorError::ElementCount {
                op,
                len: data.len(),
                shape,
                numel,
            });
        }
        let host = HostStorage::from_slice(data)?;
        Ok(Tensor::from_storage(Storage::Host(host), shape, T::DTYPE))
    }

    fn from_storage(storage: Storage, shape: Shape, dtype: DType) -> Tensor {
        Tensor {
            storage: Arc::new(storage),
            offset: 0,
            shape,
            dtype,
        }
    }

    /// The shape.
    #[inline]
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The dimensions (shorthand for `shape().dims()`).
    #[inline]
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }

    /// The element type.
    #[inline]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the storage lives on.
    #[inline]
    pub fn device(&self) -> Device {
        self.storage.device()
    }

    /// The number of dimensions.
    #[inline]
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// The number of elements (infallible: checked at construction).
    #[inline]
    pub fn numel(&self) -> usize {
        self.shape.numel_unchecked()
    }

    /// The number of rows (dimension 0; 1 for a scalar). (`rows(range)` is
    /// the view of a row range.)
    #[inline]
    pub fn num_rows(&self) -> usize {
        self.shape.rows()
    }

    /// The number of elements per row (1 for rank 0 and 1).
    #[inline]
    pub fn row_len(&self) -> usize {
        self.shape.row_len_unchecked()
    }

    /// An identifier of the underlying buffer (its address). Two tensors
    /// with the same id share storage; a view has its parent's id. For tests
    /// and diagnostics: an id may be reused after the buffer is freed.
    pub fn storage_id(&self) -> usize {
        self.storage.addr()
    }

    /// Position of this view's first element in its storage, in elements
    /// (two views of one storage are adjacent when one's offset is the
    /// other's plus its element count).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Whether this tensor alone holds its storage: no clone or view of it
    /// exists, so writing to it copies nothing and reusing the storage
    /// (see [`Tensor::recycle`]) changes no other tensor.
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.storage) == 1 && Arc::weak_count(&self.storage) == 0
    }

    /// Size of the whole storage in elements of this tensor's dtype (at
    /// least `offset + numel`).
    pub fn capacity(&self) -> usize {
        self.storage.words()
    }

    /// Reuses this tensor's storage for a zero-filled tensor of `shape` and
    /// `dtype`, without allocating: how the executor's arena hands last
    /// step's buffers to this step. Gives the tensor back unchanged when its
    /// storage is shared with another tensor (reusing it would change that
    /// one), too small, or `shape` is invalid.
    pub fn recycle(
        self,
        shape: impl Into<Shape>,
        dtype: DType,
    ) -> std::result::Result<Tensor, Tensor> {
        let mut t = self.reuse(shape, dtype)?;
        let bytes = t.numel() * dtype.size_in_bytes();
        match Arc::get_mut(&mut t.storage).map(|s| s.host_mut("recycle")) {
            Some(Ok(host)) => host.as_bytes_mut()[..bytes].fill(0),
            _ => return Err(t),
        }
        Ok(t)
    }

    /// [`Tensor::recycle`] without the zero fill: the elements are whatever
    /// the storage held (for a buffer the caller overwrites completely).
    pub fn reuse(
        mut self,
        shape: impl Into<Shape>,
        dtype: DType,
    ) -> std::result::Result<Tensor, Tensor> {
        let shape = shape.into();
        let bytes = match shape.validate() {
            Ok(n) => n.checked_mul(dtype.size_in_bytes()),
            Err(_) => None,
        };
        match bytes {
            Some(bytes)
                if self.is_unique() && self.capacity() * self.dtype.size_in_bytes() >= bytes =>
            {
                // A reused buffer is no weight any more (see `mark_as_weight`).
                if let Some(Ok(host)) = Arc::get_mut(&mut self.storage).map(|s| s.host_mut("reuse"))
                {
                    host.forget_packing();
                }
                self.offset = 0;
                self.shape = shape;
                self.dtype = dtype;
                Ok(self)
            }
            _ => Err(self),
        }
    }

    /// Marks this tensor's buffer as a weight, one that many matrix products
    /// read unchanged (parameter stores mark what executors read). On the
    /// CPU, products that gain from it then pack the buffer once into the
    /// kernels' panels and keep that copy until the buffer is next written
    /// (every write drops it), instead of packing it per product. Copies
    /// made by [`Tensor::deep_clone`] (and so a copy on write) stay marked;
    /// [`Tensor::reuse`] and [`Tensor::recycle`] forget the mark. Elsewhere
    /// it changes nothing.
    pub fn mark_as_weight(&self) {
        if let Some(cache) = self.pack_cache() {
            cache.mark_as_weight();
        }
    }

    /// Bytes of the packed copies kept of this tensor's buffer (see
    /// [`Tensor::mark_as_weight`]; memory kept for packing again after a
    /// write is not counted).
    pub fn packed_bytes(&self) -> usize {
        self.pack_cache().map_or(0, |c| c.bytes())
    }

    /// The packed copies of a host buffer.
    pub(crate) fn pack_cache(&self) -> Option<&crate::cpu::packed::PackCache> {
        match &*self.storage {
            Storage::Host(h) => Some(h.pack_cache()),
            #[cfg(feature = "cuda")]
            Storage::Cuda(_) => None,
        }
    }

    /// Whether `self` and `other` view the same buffer.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// The rows `range` of dimension 0, as a view sharing this tensor's
    /// storage (O(1), no copy). Rank 0 is a [`TensorError::RankMismatch`],
    /// a range past the end an [`TensorError::OutOfRange`].
    pub fn rows(&self, range: impl RangeBounds<usize>) -> Result<Tensor> {
        let (start, end) = row_range("rows", &self.shape, range)?;
        let mut view = self.clone();
        view.offset += start * self.row_len();
        view.shape = self.shape.with_rows(end - start);
        Ok(view)
    }

    /// Row `i` as a view of shape [`Shape::row_shape`] (one rank less), O(1).
    pub fn row(&self, i: usize) -> Result<Tensor> {
        let (start, _) = row_range("row", &self.shape, i..i.saturating_add(1))?;
        let mut view = self.clone();
        view.offset += start * self.row_len();
        view.shape = self.shape.row_shape();
        Ok(view)
    }

    /// The same elements under another shape with the same element count,
    /// sharing storage (O(1)); [`TensorError::ReshapeSize`] otherwise.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = check_reshape(self.shape, shape.into())?;
        let mut view = self.clone();
        view.shape = shape;
        Ok(view)
    }

    /// The elements as a slice of `T`; [`TensorError::DTypeMismatch`] unless
    /// `T` is this tensor's dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.check_dtype::<T>("as_slice")?;
        let host = self.storage.host("as_slice")?;
        Ok(&host.as_slice::<T>()[self.offset..self.offset + self.numel()])
    }

    /// The elements copied into a `Vec`.
    /// From a device, this downloads the elements (waiting for the device)
    /// and reports any index error a device kernel recorded since the last
    /// download.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        #[cfg(feature = "cuda")]
        if let Storage::Cuda(c) = &*self.storage {
            self.check_dtype::<T>("to_vec")?;
            return c.download(self.offset, self.numel());
        }
        Ok(self.as_slice::<T>()?.to_vec())
    }

    /// The one element of a tensor that holds exactly one (a loss, a
    /// score), from any device: `loss.item::<f32>()?`. Errors: another
    /// element count ([`TensorError::ArgShape`], expecting `[1]`), another
    /// dtype.
    ///
    /// ```
    /// use sheaf_tensor::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![2.5f32], [1]).unwrap().item::<f32>().unwrap(), 2.5);
    /// assert!(Tensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap().item::<f32>().is_err());
    /// ```
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(TensorError::ArgShape {
                op: "item",
                arg: "self",
                expected: Shape::from([1]),
                got: self.shape(),
            });
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// This tensor on `device`: the same tensor (a cheap clone) if it is
    /// there already, else a copy (host to device, device to host, or
    /// between devices through the host).
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if self.device() == device {
            return Ok(self.clone());
        }
        device.check_available()?;
        let words: Vec<u32> = match self.dtype {
            DType::F32 => bytemuck::cast_slice(&self.to_vec::<f32>()?).to_vec(),
            DType::I32 => bytemuck::cast_slice(&self.to_vec::<i32>()?).to_vec(),
            DType::U32 => self.to_vec::<u32>()?,
        };
        let storage = match device {
            Device::Cpu => Storage::Host(HostStorage::from_slice(&words)?),
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => Storage::Cuda(crate::cuda::CudaStorage::upload(n, &words)?),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => return Err(device.check_available().unwrap_err()),
        };
        Ok(Tensor::from_storage(storage, self.shape, self.dtype))
    }

    /// The elements as a mutable slice of `T`, copying first if the storage
    /// is shared (copy-on-write; see the type's docs).
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        self.check_dtype::<T>("as_mut_slice")?;
        self.make_unique()?;
        let (offset, numel) = (self.offset, self.numel());
        let host = self.unique_storage()?.host_mut("as_mut_slice")?;
        Ok(&mut host.as_mut_slice::<T>()[offset..offset + numel])
    }

    /// A mutable view of the whole tensor, the form in which backends take
    /// outputs; copies first if the storage is shared (copy-on-write).
    pub fn view_mut(&mut self) -> Result<TensorMut<'_>> {
        self.make_unique()?;
        let (offset, numel, shape) = (self.offset, self.numel(), self.shape);
        let dtype = self.dtype;
        match self.unique_storage()? {
            Storage::Host(host) => Ok(TensorMut::from_host(host, dtype, offset, numel, shape)),
            #[cfg(feature = "cuda")]
            Storage::Cuda(c) => Ok(TensorMut::from_cuda(c, dtype, offset, numel, shape)),
        }
    }

    /// A tensor of the same shape in its own, fresh storage (marked as a
    /// weight if this one is: [`Tensor::mark_as_weight`]).
    pub fn deep_clone(&self) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Storage::Cuda(c) = &*self.storage {
            let fresh = c.duplicate(self.offset, self.numel())?;
            return Ok(Tensor::from_storage(
                Storage::Cuda(fresh),
                self.shape,
                self.dtype,
            ));
        }
        let host = self.storage.host("deep_clone")?;
        let size = self.dtype.size_in_bytes();
        let region = &host.as_bytes()[self.offset * size..(self.offset + self.numel()) * size];
        let mut fresh = HostStorage::zeroed(region.len())?;
        fresh.as_bytes_mut()[..region.len()].copy_from_slice(region);
        // A weight's copy (its copy on write, too) is still a weight.
        if host.pack_cache().is_weight() {
            fresh.pack_cache().mark_as_weight();
        }
        Ok(Tensor::from_storage(
            Storage::Host(fresh),
            self.shape,
            self.dtype,
        ))
    }

    /// This tensor as row indices: a `u32` tensor is returned as is (a cheap
    /// clone), an `i32` one is converted, with [`TensorError::IndexNegative`]
    /// for the first negative value. `f32` is a [`TensorError::DTypeMismatch`].
    pub fn to_indices(&self) -> Result<Tensor> {
        match self.dtype {
            DType::U32 => Ok(self.clone()),
            DType::I32 if self.device() != Device::Cpu => {
                let dev = self.device();
                self.to_device(Device::Cpu)?.to_indices()?.to_device(dev)
            }
            DType::I32 => {
                let src = self.as_slice::<i32>()?;
                let mut out = Tensor::zeros(self.shape, DType::U32, self.device())?;
                let dst = out.as_mut_slice::<u32>()?;
                for (position, (d, &s)) in dst.iter_mut().zip(src).enumerate() {
                    *d = u32::try_from(s).map_err(|_| TensorError::IndexNegative {
                        op: "to_indices",
                        position,
                        value: i64::from(s),
                    })?;
                }
                Ok(out)
            }
            got => Err(TensorError::DTypeMismatch {
                op: "to_indices",
                arg: "self",
                expected: DType::U32,
                got,
            }),
        }
    }

    fn check_dtype<T: Element>(&self, op: &'static str) -> Result<()> {
        if T::DTYPE == self.dtype {
            Ok(())
        } else {
            Err(TensorError::DTypeMismatch {
                op,
                arg: "self",
                expected: T::DTYPE,
                got: self.dtype,
            })
        }
    }

    /// Makes this tensor the only owner of its storage, copying the viewed
    /// region (not the whole buffer) into fresh storage if it is shared.
    /// Afterwards `Arc::get_mut` succeeds: nobody else holds the `Arc`,
    /// and nobody can clone it meanwhile since we hold `&mut self`.
    fn make_unique(&mut self) -> Result<()> {
        if Arc::get_mut(&mut self.storage).is_none() {
            *self = self.deep_clone()?;
        }
        Ok(())
    }

    /// The storage, after [`Tensor::make_unique`] made it this tensor's own.
    fn unique_storage(&mut self) -> Result<&mut Storage> {
        self.make_unique()?;
        // A fresh deep clone is held by nobody else: `get_mut` succeeds.
        Arc::get_mut(&mut self.storage).ok_or(TensorError::AllocFailed { bytes: 0 })
    }

    /// Runs `f` on this tensor's device memory and on the stream every
    /// kernel of its device runs on, copying first if the storage is shared
    /// (copy-on-write, as [`Tensor::view_mut`]): how device memory is handed
    /// to a library that works on it directly (NCCL in `sheaf-dist`).
    ///
    /// The view holds the elements as 4-byte words typed `f32`, whatever
    /// the dtype (check [`Tensor::dtype`] before doing arithmetic on them).
    /// Queue work on the view on `stream` only: it is then ordered after
    /// the kernels that wrote the tensor and before those that read it,
    /// with no host wait. A host tensor is a
    /// [`TensorError::InvalidArgument`].
    #[cfg(feature = "cuda")]
    pub fn with_cuda_slice_mut<R>(
        &mut self,
        f: impl FnOnce(
            &mut sheaf_kernels_cuda::CudaViewMut<'_, f32>,
            &Arc<sheaf_kernels_cuda::CudaStream>,
        ) -> R,
    ) -> Result<R> {
        const OP: &str = "with_cuda_slice_mut";
        let not_on_device = TensorError::InvalidArgument {
            op: OP,
            arg: "self",
            reason: "is in host memory, not on a CUDA device",
        };
        let Device::Cuda(ordinal) = self.device() else {
            return Err(not_on_device);
        };
        let stream = crate::cuda::CudaBackend::global(ordinal)?
            .kernels()
            .stream();
        let mut view = self.view_mut()?.into_cuda_view().ok_or(not_on_device)?;
        Ok(f(&mut view, stream))
    }

    /// The device elements of this view (crate-internal: backends).
    #[cfg(feature = "cuda")]
    pub(crate) fn cuda_view(&self) -> Option<sheaf_kernels_cuda::CudaView<'_, f32>> {
        match &*self.storage {
            Storage::Cuda(c) => Some(c.data.slice(self.offset..self.offset + self.numel())),
            Storage::Host(_) => None,
        }
    }
}

/// Resolves `range` against the rows of `shape` (rank >= 1) into
/// `start..end` with `start <= end <= rows`, or the error `op` reports.
pub(crate) fn row_range(
    op: &'static str,
    shape: &Shape,
    range: impl RangeBounds<usize>,
) -> Result<(usize, usize)> {
    if shape.rank() == 0 {
        return Err(TensorError::RankMismatch {
            op,
            arg: "self",
            expected: "at least 1",
            shape: *shape,
        });
    }
    let rows = shape.rows();
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => rows,
    };
    if start <= end && end <= rows {
        Ok((start, end))
    } else {
        Err(TensorError::OutOfRange {
            op,
            arg: "self",
            start,
            end,
            rows,
        })
    }
}

/// Checks that `to` is a valid shape with as many elements as `from`.
pub(crate) fn check_reshape(from: Shape, to: Shape) -> Result<Shape> {
    let to_numel = to.validate()?;
    let from_numel = from.numel_unchecked();
    if to_numel == from_numel {
        Ok(to)
    } else {
        Err(TensorError::ReshapeSize {
            from,
            to,
            from_numel,
            to_numel,
        })
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .field("device", &self.device())
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}
