//! Element types: the runtime [`DType`] tag and the compile-time [`Element`]
//! trait that ties a Rust type to it.

use std::fmt;

/// The element type of a tensor.
///
/// `F32` holds values and gradients; `U32` holds row indices (gather,
/// scatter, embedding lookups, labels), the type the kernels take for them;
/// `I32` is there for integer data read from files before it is checked and
/// converted to indices (see [`crate::Tensor::to_indices`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer (row indices).
    U32,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 3] = [DType::F32, DType::I32, DType::U32];

    /// Size of one element in bytes.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
        }
    }

    /// Lower-case name, as in error messages: `f32`, `i32`, `u32`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod private {
    /// Seals [`super::Element`]: storage casts rely on the list of element
    /// types being exactly the one in [`super::DType`].
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
    impl Sealed for u32 {}
}

/// A Rust type that can be a tensor element.
///
/// Sealed: implemented for `f32`, `i32` and `u32` only, so that
/// `T::DTYPE == tensor.dtype()` proves that the tensor's bytes are `T`s.
pub trait Element:
    private::Sealed + bytemuck::Pod + fmt::Debug + PartialEq + Send + Sync + 'static
{
    /// The dtype tag of this type.
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}

impl Element for i32 {
    const DTYPE: DType = DType::I32;
}

impl Element for u32 {
    const DTYPE: DType = DType::U32;
}
