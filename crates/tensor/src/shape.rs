//! [`Shape`]: the dimensions of a tensor, stored inline.
//!
//! A graph node carries its output shape and the shapes of its inputs, and
//! models build one node per operation per instance; a heap-allocated
//! `Vec<usize>` per shape would make building nodes allocation-bound. A
//! `Shape` is a fixed array of [`Shape::MAX_RANK`] dimensions plus a rank,
//! `Copy`, and never allocates.

use std::fmt;

use crate::error::{Result, TensorError};

/// The dimensions of a tensor, row-major, at most [`Shape::MAX_RANK`] of them.
///
/// Dimension 0 is the *row* axis: views ([`crate::Tensor::rows`]), gathers and
/// batching all work on whole rows, and a row is everything after dimension 0
/// ([`Shape::row_shape`]). A scalar (rank 0) counts as one row of one element.
///
/// Unused trailing slots are kept at zero, so `Eq` and `Hash` (over every
/// slot) see only the real dimensions.
#[derive(Clone, Copy, Eq, Default)]
pub struct Shape {
    dims: [usize; Shape::MAX_RANK],
    rank: u8,
}

impl PartialEq for Shape {
    /// Every slot, without branches: graph building compares shapes per
    /// node, and the derived `==` calls `memcmp` (8% of building a node).
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        let diff = (self.dims.iter().zip(&other.dims)).fold(0, |d, (a, b)| d | (a ^ b));
        diff == 0 && self.rank == other.rank
    }
}

impl std::hash::Hash for Shape {
    /// The same slots as `eq`.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.dims.hash(state);
        self.rank.hash(state);
    }
}

impl Shape {
    /// The largest supported rank. Batched views add one axis to an
    /// instance's shape, so instances may have up to 5 dimensions.
    pub const MAX_RANK: usize = 6;

    /// The shape of a scalar: rank 0, one element.
    pub const fn scalar() -> Shape {
        Shape {
            dims: [0; Shape::MAX_RANK],
            rank: 0,
        }
    }

    /// A shape with the given dimensions, or [`TensorError::RankTooLarge`]
    /// if there are more than [`Shape::MAX_RANK`].
    pub fn new(dims: &[usize]) -> Result<Shape> {
        if dims.len() > Shape::MAX_RANK {
            return Err(TensorError::RankTooLarge { rank: dims.len() });
        }
        let mut shape = Shape::scalar();
        shape.dims[..dims.len()].copy_from_slice(dims);
        // `dims.len() <= MAX_RANK = 6`, so the cast is lossless.
        shape.rank = dims.len() as u8;
        Ok(shape)
    }

    /// The dimensions, `rank()` of them.
    #[inline]
    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.rank()]
    }

    /// The number of dimensions.
    #[inline]
    pub fn rank(&self) -> usize {
        usize::from(self.rank)
    }

    /// Dimension `i`, or `None` if `i >= rank()`.
    #[inline]
    pub fn dim(&self, i: usize) -> Option<usize> {
        self.dims().get(i).copied()
    }

    /// The last dimension (the row width of kernels that see a tensor as a
    /// matrix, such as softmax), or `None` for a scalar.
    #[inline]
    pub fn last_dim(&self) -> Option<usize> {
        self.dims().last().copied()
    }

    /// The number of elements, or [`TensorError::SizeOverflow`] if it does
    /// not fit in `usize`. A shape with a zero dimension has 0 elements even
    /// if the other dimensions overflow together.
    pub fn numel(&self) -> Result<usize> {
        checked_product(self.dims()).ok_or(TensorError::SizeOverflow { shape: *self })
    }

    /// The number of rows: dimension 0, or 1 for a scalar.
    #[inline]
    pub fn rows(&self) -> usize {
        self.dim(0).unwrap_or(1)
    }

    /// The number of elements in one row: the product of dimensions 1.., or
    /// 1 for rank 0 and 1. [`TensorError::SizeOverflow`] if it does not fit.
    pub fn row_len(&self) -> Result<usize> {
        let tail = self.dims().get(1..).unwrap_or(&[]);
        checked_product(tail).ok_or(TensorError::SizeOverflow { shape: *self })
    }

    /// The shape of one row: dimensions 1.. (a scalar for rank 0 and 1).
    pub fn row_shape(&self) -> Shape {
        let mut row = Shape::scalar();
        let rank = self.rank().saturating_sub(1);
        row.dims[..rank].copy_from_slice(self.dims().get(1..).unwrap_or(&[]));
        row.rank = rank as u8;
        row
    }

    /// `n` rows of shape `row`: `[n, row...]`, the shape of a batch.
    /// [`TensorError::RankTooLarge`] if `row` already has the maximum rank.
    pub fn stack(n: usize, row: Shape) -> Result<Shape> {
        if row.rank() >= Shape::MAX_RANK {
            return Err(TensorError::RankTooLarge {
                rank: row.rank() + 1,
            });
        }
        let mut shape = Shape::scalar();
        shape.dims[0] = n;
        shape.dims[1..=row.rank()].copy_from_slice(row.dims());
        shape.rank = row.rank + 1;
        Ok(shape)
    }

    /// The shape without its last dimension (a scalar stays a scalar): the
    /// shape of per-row results such as losses and row sums.
    pub fn without_last(&self) -> Shape {
        let mut shape = *self;
        if shape.rank > 0 {
            shape.rank -= 1;
            shape.dims[shape.rank()] = 0;
        }
        shape
    }

    /// The same shape with dimension 0 replaced by `n`; a scalar becomes `[n]`.
    pub fn with_rows(&self, n: usize) -> Shape {
        let mut shape = *self;
        if shape.rank == 0 {
            shape.rank = 1;
        }
        shape.dims[0] = n;
        shape
    }

    /// The product of all dimensions, for shapes already known to be valid
    /// (a tensor's shape: its constructors checked [`Shape::numel`] and
    /// [`Shape::row_len`]). Wrapping multiplication cannot change the result
    /// of a product that does not overflow, and avoids a panic path.
    #[inline]
    pub(crate) fn numel_unchecked(&self) -> usize {
        self.dims().iter().fold(1, |acc, &d| acc.wrapping_mul(d))
    }

    /// [`Shape::row_len`] for shapes already known to be valid.
    #[inline]
    pub(crate) fn row_len_unchecked(&self) -> usize {
        let tail = self.dims().get(1..).unwrap_or(&[]);
        tail.iter().fold(1, |acc, &d| acc.wrapping_mul(d))
    }

    /// Checks that the element count and the row length fit in `usize`,
    /// which every tensor's shape must satisfy. Returns the element count.
    pub(crate) fn validate(&self) -> Result<usize> {
        self.row_len()?;
        self.numel()
    }
}

/// The product of `dims`, 0 if any is 0, `None` on overflow otherwise.
fn checked_product(dims: &[usize]) -> Option<usize> {
    if dims.contains(&0) {
        return Some(0);
    }
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl<const N: usize> From<[usize; N]> for Shape {
    /// A shape from an array literal; an array longer than
    /// [`Shape::MAX_RANK`] fails to compile.
    fn from(dims: [usize; N]) -> Shape {
        const { assert!(N <= Shape::MAX_RANK, "a Shape has at most 6 dimensions") };
        let mut shape = Shape::scalar();
        shape.dims[..N].copy_from_slice(&dims);
        shape.rank = N as u8;
        shape
    }
}

impl From<&Shape> for Shape {
    fn from(shape: &Shape) -> Shape {
        *shape
    }
}

impl TryFrom<&[usize]> for Shape {
    type Error = TensorError;

    fn try_from(dims: &[usize]) -> Result<Shape> {
        Shape::new(dims)
    }
}

impl TryFrom<Vec<usize>> for Shape {
    type Error = TensorError;

    fn try_from(dims: Vec<usize>) -> Result<Shape> {
        Shape::new(&dims)
    }
}

impl fmt::Display for Shape {
    /// `[2, 3]`; a scalar prints as `[]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
