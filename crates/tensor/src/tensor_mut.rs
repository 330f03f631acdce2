//! [`TensorMut`]: a mutable borrowed view, the form of every backend output.

use std::fmt;
use std::ops::RangeBounds;

use crate::dtype::{DType, Element};
use crate::error::{Result, TensorError};
use crate::storage::HostStorage;
use crate::tensor::{check_reshape, row_range};
use crate::{Device, Shape};

/// A mutable view of a tensor's elements, borrowed from a [`crate::Tensor`]
/// (see [`crate::Tensor::view_mut`]).
///
/// Backends write their outputs through `TensorMut`s rather than returning
/// fresh tensors, so a caller decides where results go: the executor writes
/// the output of one batch straight into a row range of a larger buffer
/// ([`TensorMut::rows_mut`]), or several results side by side into disjoint
/// halves of one ([`TensorMut::split_rows_mut`]). The borrow checker then
/// guarantees that no two outputs overlap.
///
/// Like a tensor, the view is contiguous and row-major; it holds exactly
/// `shape.numel()` elements.
pub struct TensorMut<'a> {
    data: Data<'a>,
    shape: Shape,
}

/// The viewed elements, typed. Device memory joins as further arms when
/// CUDA arrives; until then every view is host memory.
enum Data<'a> {
    F32(&'a mut [f32]),
    I32(&'a mut [i32]),
    U32(&'a mut [u32]),
    /// Device words of any dtype, on `cuda:ordinal`.
    #[cfg(feature = "cuda")]
    Cuda {
        view: sheaf_kernels_cuda::CudaViewMut<'a, f32>,
        dtype: DType,
        ordinal: usize,
    },
}

impl<'a> Data<'a> {
    fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::I32(_) => DType::I32,
            Data::U32(_) => DType::U32,
            #[cfg(feature = "cuda")]
            Data::Cuda { dtype, .. } => *dtype,
        }
    }

    fn device(&self) -> Device {
        match self {
            #[cfg(feature = "cuda")]
            Data::Cuda { ordinal, .. } => Device::Cuda(*ordinal),
            _ => Device::Cpu,
        }
    }

    fn reborrow(&mut self) -> Data<'_> {
        match self {
            Data::F32(s) => Data::F32(s),
            Data::I32(s) => Data::I32(s),
            Data::U32(s) => Data::U32(s),
            #[cfg(feature = "cuda")]
            Data::Cuda {
                view,
                dtype,
                ordinal,
            } => Data::Cuda {
                view: view.slice_mut(..),
                dtype: *dtype,
                ordinal: *ordinal,
            },
        }
    }

    /// Elements `start..end`; the caller has checked `start <= end <= len`.
    fn slice(self, start: usize, end: usize) -> Data<'a> {
        match self {
            Data::F32(s) => Data::F32(&mut s[start..end]),
            Data::I32(s) => Data::I32(&mut s[start..end]),
            Data::U32(s) => Data::U32(&mut s[start..end]),
            #[cfg(feature = "cuda")]
            Data::Cuda {
                view,
                dtype,
                ordinal,
            } => Data::Cuda {
                view: sheaf_kernels_cuda::narrow_view_mut(view, start, end),
                dtype,
                ordinal,
            },
        }
    }

    /// Splits at element `mid`; the caller has checked `mid <= len`.
    fn split_at(self, mid: usize) -> (Data<'a>, Data<'a>) {
        match self {
            Data::F32(s) => {
                let (a, b) = s.split_at_mut(mid);
                (Data::F32(a), Data::F32(b))
            }
            Data::I32(s) => {
                let (a, b) = s.split_at_mut(mid);
                (Data::I32(a), Data::I32(b))
            }
            Data::U32(s) => {
                let (a, b) = s.split_at_mut(mid);
                (Data::U32(a), Data::U32(b))
            }
            #[cfg(feature = "cuda")]
            Data::Cuda {
                view,
                dtype,
                ordinal,
            } => {
                let (a, b) = sheaf_kernels_cuda::split_view_mut(view, mid);
                let part = |view| Data::Cuda {
                    view,
                    dtype,
                    ordinal,
                };
                (part(a), part(b))
            }
        }
    }
}

impl<'a> TensorMut<'a> {
    /// Elements `offset..offset + numel` of `host`, as `dtype`; the tensor
    /// that lends them has checked the range.
    pub(crate) fn from_host(
        host: &'a mut HostStorage,
        dtype: DType,
        offset: usize,
        numel: usize,
        shape: Shape,
    ) -> TensorMut<'a> {
        let range = offset..offset + numel;
        let data = match dtype {
            DType::F32 => Data::F32(&mut host.as_mut_slice::<f32>()[range]),
            DType::I32 => Data::I32(&mut host.as_mut_slice::<i32>()[range]),
            DType::U32 => Data::U32(&mut host.as_mut_slice::<u32>()[range]),
        };
        TensorMut { data, shape }
    }

    /// A view of `numel` device elements from `offset`.
    #[cfg(feature = "cuda")]
    pub(crate) fn from_cuda(
        storage: &'a mut crate::cuda::CudaStorage,
        dtype: DType,
        offset: usize,
        numel: usize,
        shape: Shape,
    ) -> TensorMut<'a> {
        let ordinal = storage.ordinal;
        let view = storage.data.slice_mut(offset..offset + numel);
        TensorMut {
            data: Data::Cuda {
                view,
                dtype,
                ordinal,
            },
            shape,
        }
    }

    /// The device elements (crate-internal: backends).
    #[cfg(feature = "cuda")]
    pub(crate) fn into_cuda_view(self) -> Option<sheaf_kernels_cuda::CudaViewMut<'a, f32>> {
        match self.data {
            Data::Cuda { view, .. } => Some(view),
            _ => None,
        }
    }

    /// The shape.
    #[inline]
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The element type.
    #[inline]
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The device of the viewed memory.
    #[inline]
    pub fn device(&self) -> Device {
        self.data.device()
    }

    /// The number of elements.
    #[inline]
    pub fn numel(&self) -> usize {
        self.shape.numel_unchecked()
    }

    /// The number of rows (dimension 0; 1 for a scalar).
    #[inline]
    pub fn num_rows(&self) -> usize {
        self.shape.rows()
    }

    /// The number of elements per row.
    #[inline]
    pub fn row_len(&self) -> usize {
        self.shape.row_len_unchecked()
    }

    /// A shorter-lived view of the same elements, so that `self` can be
    /// passed by value to a backend and used again afterwards.
    pub fn reborrow(&mut self) -> TensorMut<'_> {
        TensorMut {
            data: self.data.reborrow(),
            shape: self.shape,
        }
    }

    /// The elements as a slice of `T` ([`TensorError::DTypeMismatch`] unless
    /// `T` is the view's dtype).
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        let got = self.dtype();
        // Each cast is between a type and itself (`T::DTYPE` names `T`,
        // since `Element` is sealed), so it cannot fail.
        match &self.data {
            Data::F32(s) if T::DTYPE == DType::F32 => Ok(bytemuck::cast_slice(s)),
            Data::I32(s) if T::DTYPE == DType::I32 => Ok(bytemuck::cast_slice(s)),
            Data::U32(s) if T::DTYPE == DType::U32 => Ok(bytemuck::cast_slice(s)),
            #[cfg(feature = "cuda")]
            Data::Cuda { ordinal, .. } => Err(TensorError::DeviceMismatch {
                op: "as_slice",
                arg: "self",
                expected: Device::Cpu,
                got: Device::Cuda(*ordinal),
            }),
            _ => Err(dtype_mismatch::<T>("as_slice", got)),
        }
    }

    /// The elements as a mutable slice of `T`.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        self.reborrow().into_mut_slice()
    }

    /// The elements as a mutable slice of `T` for the whole borrow `'a`.
    pub fn into_mut_slice<T: Element>(self) -> Result<&'a mut [T]> {
        let got = self.dtype();
        match self.data {
            Data::F32(s) if T::DTYPE == DType::F32 => Ok(bytemuck::cast_slice_mut(s)),
            Data::I32(s) if T::DTYPE == DType::I32 => Ok(bytemuck::cast_slice_mut(s)),
            Data::U32(s) if T::DTYPE == DType::U32 => Ok(bytemuck::cast_slice_mut(s)),
            #[cfg(feature = "cuda")]
            Data::Cuda { ordinal, .. } => Err(TensorError::DeviceMismatch {
                op: "into_mut_slice",
                arg: "self",
                expected: Device::Cpu,
                got: Device::Cuda(ordinal),
            }),
            _ => Err(dtype_mismatch::<T>("into_mut_slice", got)),
        }
    }

    /// The rows `range` of dimension 0 as a view (rank >= 1 required).
    pub fn rows_mut(&mut self, range: impl RangeBounds<usize>) -> Result<TensorMut<'_>> {
        self.reborrow().into_rows("rows_mut", range)
    }

    /// [`TensorMut::rows_mut`] consuming the view, keeping its lifetime.
    pub fn into_rows_mut(self, range: impl RangeBounds<usize>) -> Result<TensorMut<'a>> {
        self.into_rows("into_rows_mut", range)
    }

    fn into_rows(self, op: &'static str, range: impl RangeBounds<usize>) -> Result<TensorMut<'a>> {
        let (start, end) = row_range(op, &self.shape, range)?;
        let row_len = self.row_len();
        Ok(TensorMut {
            data: self.data.slice(start * row_len, end * row_len),
            shape: self.shape.with_rows(end - start),
        })
    }

    /// Two disjoint views: rows `..at` and rows `at..`.
    pub fn split_rows_mut(&mut self, at: usize) -> Result<(TensorMut<'_>, TensorMut<'_>)> {
        self.reborrow().into_split("split_rows_mut", at)
    }

    /// [`TensorMut::split_rows_mut`] consuming the view, keeping its lifetime.
    pub fn into_split_rows(self, at: usize) -> Result<(TensorMut<'a>, TensorMut<'a>)> {
        self.into_split("into_split_rows", at)
    }

    fn into_split(self, op: &'static str, at: usize) -> Result<(TensorMut<'a>, TensorMut<'a>)> {
        let (_, at) = row_range(op, &self.shape, 0..at)?;
        let rows = self.num_rows();
        let (head, tail) = self.data.split_at(at * self.shape.row_len_unchecked());
        Ok((
            TensorMut {
                data: head,
                shape: self.shape.with_rows(at),
            },
            TensorMut {
                data: tail,
                shape: self.shape.with_rows(rows - at),
            },
        ))
    }

    /// The same elements under another shape with the same element count.
    pub fn reshape(self, shape: impl Into<Shape>) -> Result<TensorMut<'a>> {
        let shape = check_reshape(self.shape, shape.into())?;
        Ok(TensorMut {
            data: self.data,
            shape,
        })
    }
}

fn dtype_mismatch<T: Element>(op: &'static str, got: DType) -> TensorError {
    TensorError::DTypeMismatch {
        op,
        arg: "self",
        expected: T::DTYPE,
        got,
    }
}

impl fmt::Debug for TensorMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorMut")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype())
            .finish_non_exhaustive()
    }
}
