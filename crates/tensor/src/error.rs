//! [`TensorError`]: everything the tensor crate rejects.

use sheaf_kernels_cpu::KernelError;
use thiserror::Error;

use crate::{DType, Device, Shape};

/// Result of every fallible tensor operation.
pub type Result<T, E = TensorError> = std::result::Result<T, E>;

/// What the tensor crate rejects.
///
/// Operation errors name the operation (`op`, the method or kernel name),
/// the offending argument where there is one, and the shapes involved, so the
/// message alone points at the failing call. Every variant is
/// `Clone + Eq`, so tests can compare errors, not just their text.
#[derive(Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TensorError {
    /// Two arguments that must agree do not, e.g. the inner dimensions of a
    /// matrix product or the two operands of an elementwise sum.
    #[error("{op}: shapes {lhs} and {rhs} do not match")]
    ShapeMismatch {
        op: &'static str,
        lhs: Shape,
        rhs: Shape,
    },

    /// An argument (typically an output) does not have the shape that the
    /// other arguments imply.
    #[error("{op}: argument `{arg}` has shape {got}, expected {expected}")]
    ArgShape {
        op: &'static str,
        arg: &'static str,
        expected: Shape,
        got: Shape,
    },

    /// An argument has the wrong element type.
    #[error("{op}: argument `{arg}` has dtype {got}, expected {expected}")]
    DTypeMismatch {
        op: &'static str,
        arg: &'static str,
        expected: DType,
        got: DType,
    },

    /// An argument has the wrong number of dimensions. `expected` reads
    /// after "rank": `"2"`, `"at least 1"`.
    #[error("{op}: argument `{arg}` must have rank {expected}, got shape {shape}")]
    RankMismatch {
        op: &'static str,
        arg: &'static str,
        expected: &'static str,
        shape: Shape,
    },

    /// A shape with more than [`Shape::MAX_RANK`] dimensions was requested.
    #[error("shapes have at most {max} dimensions, got {rank}", max = Shape::MAX_RANK)]
    RankTooLarge { rank: usize },

    /// The element count (or row length, or byte size) of a shape does not
    /// fit in `usize`.
    #[error("shape {shape} has too many elements to address")]
    SizeOverflow { shape: Shape },

    /// A row range (a view, or the rows a kernel copies) reaches past the
    /// end of a tensor, or ends before it starts.
    #[error("{op}: rows {start}..{end} of `{arg}` are out of range ({rows} rows)")]
    OutOfRange {
        op: &'static str,
        arg: &'static str,
        start: usize,
        end: usize,
        rows: usize,
    },

    /// A column range past the last column of a matrix argument.
    #[error("{op}: columns {start}..{end} of `{arg}` are out of range ({cols} columns)")]
    ColumnRange {
        op: &'static str,
        arg: &'static str,
        start: usize,
        end: usize,
        cols: usize,
    },

    /// A reshape to a shape with a different element count.
    #[error("reshape: cannot view {from} ({from_numel} elements) as {to} ({to_numel} elements)")]
    ReshapeSize {
        from: Shape,
        to: Shape,
        from_numel: usize,
        to_numel: usize,
    },

    /// Data of `len` elements given for a shape of `numel` elements.
    #[error("{op}: {len} elements given for shape {shape} ({numel} elements)")]
    ElementCount {
        op: &'static str,
        len: usize,
        shape: Shape,
        numel: usize,
    },

    /// An integer meant as an index is negative.
    #[error("{op}: index {value} at position {position} is negative")]
    IndexNegative {
        op: &'static str,
        position: usize,
        value: i64,
    },

    /// An argument that is optional in general is required by the others
    /// (a velocity buffer for SGD with momentum).
    #[error("{op}: argument `{arg}` is required when {when}")]
    MissingArgument {
        op: &'static str,
        arg: &'static str,
        when: &'static str,
    },

    /// A scalar argument, or a combination of shapes, that no shape check
    /// covers (an Adam step of 0; class scores with no classes).
    #[error("{op}: argument `{arg}` {reason}")]
    InvalidArgument {
        op: &'static str,
        arg: &'static str,
        reason: &'static str,
    },

    /// The device cannot be used: not compiled in, or not present.
    #[error("device {device} is unavailable: {reason}")]
    DeviceUnavailable {
        device: Device,
        reason: &'static str,
    },

    /// An argument lives on another device than the backend it was given to.
    #[error("{op}: argument `{arg}` is on {got}, expected {expected}")]
    DeviceMismatch {
        op: &'static str,
        arg: &'static str,
        expected: Device,
        got: Device,
    },

    /// A CUDA kernel, copy or allocation failed (out of device memory
    /// names the bytes; a bad index value found on the device names the
    /// kernel, the index and its position).
    #[cfg(feature = "cuda")]
    #[error("{op}: {source}")]
    Cuda {
        op: &'static str,
        #[source]
        source: sheaf_kernels_cuda::CudaError,
    },

    /// The allocator could not provide `bytes` bytes. Allocation goes
    /// through `try_reserve_exact`, so a huge request is this error, not an
    /// abort.
    #[error("failed to allocate {bytes} bytes")]
    AllocFailed { bytes: usize },

    /// A kernel rejected a call after the backend's own checks passed: an
    /// index out of range, a duplicate row in a sparse update, a label not
    /// below the class count — conditions on the *values* of index tensors,
    /// which only the kernel scans.
    ///
    /// The message repeats the kernel's message because most callers print
    /// only the outermost error; `source()` still returns the typed
    /// [`KernelError`].
    #[error("{op} failed: {source}")]
    Kernel {
        op: &'static str,
        #[source]
        source: KernelError,
    },
}

/// The `Debug` of sheaf's error types: the message, as `Display` prints it
/// (so a `main` returning `Result<(), Box<dyn Error>>` shows it), and with
/// `{:#?}` the chain of causes, one a line.
pub fn debug_error(e: &dyn std::error::Error, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    write!(f, "{e}")?;
    if f.alternate() {
        let mut cause = e.source();
        while let Some(c) = cause {
            write!(f, "\n  caused by: {c}")?;
            cause = c.source();
        }
    }
    Ok(())
}

impl TensorError {
    /// Wraps a kernel error with the name of the backend operation.
    pub(crate) fn kernel(op: &'static str) -> impl FnOnce(KernelError) -> TensorError {
        move |source| TensorError::Kernel { op, source }
    }
}

/// `{:?}` prints the message, as `{}` does: a `main` returning
/// `Result<(), Box<dyn Error>>` shows it so. `{:#?}` adds the chain of
/// causes, one a line.
impl std::fmt::Debug for TensorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        debug_error(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_the_message() {
        let err = TensorError::InvalidArgument {
            op: "unary",
            arg: "out",
            reason: "too short",
        };
        let shown = err.to_string();
        assert!(!shown.is_empty());
        assert_eq!(format!("{err:?}"), shown);
    }
}
