use thiserror::Error;

/// Result of every kernel entry point.
pub type Result<T> = std::result::Result<T, KernelError>;

/// What a kernel rejects. Each variant names the kernel (`"sgemm"`,
/// `"tanh"`, ...) so the message points at the failing call.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A slice does not have the length the other arguments imply.
    #[error("{kernel}: argument `{arg}` has length {got}, expected {expected}")]
    Length {
        kernel: &'static str,
        arg: &'static str,
        expected: usize,
        got: usize,
    },
    /// A slice is shorter than the other arguments imply (strided inputs).
    #[error("{kernel}: argument `{arg}` has length {got}, needs at least {needed}")]
    TooShort {
        kernel: &'static str,
        arg: &'static str,
        needed: usize,
        got: usize,
    },
    /// A row index points outside the table it indexes.
    #[error("{kernel}: index {index} at position {position} is out of range for {rows} rows")]
    Index {
        kernel: &'static str,
        index: usize,
        position: usize,
        rows: usize,
    },
    /// A scalar argument is outside its valid range (a leading dimension
    /// smaller than the row width, a class id not below the class count...).
    #[error("{kernel}: {what}")]
    Invalid { kernel: &'static str, what: String },
}

impl KernelError {
    /// Checks `got == expected` for argument `arg` of `kernel`.
    #[inline]
    pub(crate) fn check_len(
        kernel: &'static str,
        arg: &'static str,
        got: usize,
        expected: usize,
    ) -> Result<()> {
        if got == expected {
            Ok(())
        } else {
            Err(KernelError::Length {
                kernel,
                arg,
                expected,
                got,
            })
        }
    }

    /// Checks `got >= needed` for argument `arg` of `kernel`.
    #[inline]
    pub(crate) fn check_min_len(
        kernel: &'static str,
        arg: &'static str,
        got: usize,
        needed: usize,
    ) -> Result<()> {
        if got >= needed {
            Ok(())
        } else {
            Err(KernelError::TooShort {
                kernel,
                arg,
                needed,
                got,
            })
        }
    }
}
