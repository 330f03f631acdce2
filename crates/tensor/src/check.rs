//! Device-neutral shape checks for the [`crate::Backend`] methods.
//!
//! Each function takes the shapes of one method's arguments, returns the
//! sizes its kernel needs, or the error naming the op, the argument and the
//! shapes. They look at shapes only (dtypes and devices are checked when a
//! backend fetches the data), so every backend shares them.

use crate::error::{Result, TensorError};
use crate::{KernelError, Shape, Transpose};

/// The checks of one op: carries the op name into every error.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Check(pub(crate) &'static str);

impl Check {
    /// Two arguments must have equal shapes (`ShapeMismatch`).
    pub(crate) fn same(self, lhs: Shape, rhs: Shape) -> Result<()> {
        if lhs == rhs {
            Ok(())
        } else {
            Err(self.mismatch(lhs, rhs))
        }
    }

    pub(crate) fn mismatch(self, lhs: Shape, rhs: Shape) -> TensorError {
        TensorError::ShapeMismatch {
            op: self.0,
            lhs,
            rhs,
        }
    }

    /// Argument `arg` must have shape `expected` (`ArgShape`).
    pub(crate) fn expect(self, arg: &'static str, expected: Shape, got: Shape) -> Result<()> {
        if expected == got {
            Ok(())
        } else {
            Err(TensorError::ArgShape {
                op: self.0,
                arg,
                expected,
                got,
            })
        }
    }

    /// Argument `arg` must have rank at least `min` (1 or 2).
    pub(crate) fn min_rank(self, arg: &'static str, shape: Shape, min: usize) -> Result<()> {
        if shape.rank() >= min {
            return Ok(());
        }
        let expected = if min <= 1 { "at least 1" } else { "at least 2" };
        Err(self.rank_error(arg, shape, expected))
    }

    /// Argument `arg` must have rank exactly `rank` (1 or 2).
    pub(crate) fn rank(self, arg: &'static str, shape: Shape, rank: usize) -> Result<()> {
        if shape.rank() == rank {
            return Ok(());
        }
        let expected = if rank == 1 { "1" } else { "2" };
        Err(self.rank_error(arg, shape, expected))
    }

    fn rank_error(self, arg: &'static str, shape: Shape, expected: &'static str) -> TensorError {
        TensorError::RankMismatch {
            op: self.0,
            arg,
            expected,
            shape,
        }
    }

    /// `shape` (rank >= 1) as a matrix: (product of the leading dimensions,
    /// last dimension).
    pub(crate) fn matrix(self, arg: &'static str, shape: Shape) -> Result<(usize, usize)> {
        self.min_rank(arg, shape, 1)?;
        let cols = shape.last_dim().unwrap_or(1);
        let rows = shape
            .without_last()
            .numel()
            .map_err(|_| TensorError::SizeOverflow { shape })?;
        Ok((rows, cols))
    }

    /// A row-indexed table (rank >= 1) and an index vector (rank 1): returns
    /// the number of indices.
    pub(crate) fn index(self, arg: &'static str, idx: Shape) -> Result<usize> {
        self.rank(arg, idx, 1)?;
        Ok(idx.rows())
    }
}

/// Sizes of one `sgemm` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatmulDims {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
}

/// [`crate::Backend::matmul`]'s checks.
pub(crate) fn matmul(
    a: Shape,
    ta: Transpose,
    b: Shape,
    tb: Transpose,
    out: Shape,
) -> Result<MatmulDims> {
    let ck = Check("matmul");
    ck.min_rank("a", a, 2)?;
    ck.min_rank("b", b, 2)?;
    ck.min_rank("out", out, 2)?;
    let (ar, ac) = ck.matrix("a", a)?;
    let (br, bc) = ck.matrix("b", b)?;
    let (m, k) = match ta {
        Transpose::No => (ar, ac),
        Transpose::Yes => (ac, ar),
    };
    let (kb, n) = match tb {
        Transpose::No => (br, bc),
        Transpose::Yes => (bc, br),
    };
    if k != kb {
        return Err(ck.mismatch(a, b));
    }
    if ck.matrix("out", out)? != (m, n) {
        return Err(TensorError::ArgShape {
            op: "matmul",
            arg: "out",
            expected: Shape::from([m, n]),
            got: out,
        });
    }
    Ok(MatmulDims {
        m,
        n,
        k,
        lda: ac,
        ldb: bc,
        ldc: n,
    })
}

/// Rows-family checks: `src` rows gathered by `idx` into `dst`. Returns the
/// row length.
pub(crate) fn gather_rows(src: Shape, idx: Shape, dst: Shape) -> Result<usize> {
    let ck = Check("gather_rows");
    ck.min_rank("src", src, 1)?;
    let n = ck.index("idx", idx)?;
    ck.expect("dst", src.with_rows(n), dst)?;
    Ok(src.row_len_unchecked())
}

/// `src` rows scatter-added into `dst` at `idx`. Returns the row length.
pub(crate) fn scatter_add_rows(src: Shape, idx: Shape, dst: Shape) -> Result<usize> {
    let ck = Check("scatter_add_rows");
    ck.min_rank("src", src, 1)?;
    ck.min_rank("dst", dst, 1)?;
    let n = ck.index("idx", idx)?;
    if n != src.rows() {
        return Err(TensorError::ArgShape {
            op: "scatter_add_rows",
            arg: "idx",
            expected: Shape::from([src.rows()]),
            got: idx,
        });
    }
    ck.same(src.row_shape(), dst.row_shape())
        .map_err(|_| ck.mismatch(src, dst))?;
    Ok(src.row_len_unchecked())
}

/// Rows `src_rows` of `src` copied (added) to rows `dst_rows` of `dst`:
/// equal row shapes, equal counts, rows in range. Returns the row length.
pub(crate) fn copy_rows_at(
    src: Shape,
    src_rows: &[u32],
    dst: Shape,
    dst_rows: &[u32],
) -> Result<usize> {
    const OP: &str = "copy_rows_at";
    let ck = Check(OP);
    ck.min_rank("src", src, 1)?;
    ck.min_rank("dst", dst, 1)?;
    ck.same(src.row_shape(), dst.row_shape())
        .map_err(|_| ck.mismatch(src, dst))?;
    if src_rows.len() != dst_rows.len() {
        return Err(TensorError::ArgShape {
            op: OP,
            arg: "dst_rows",
            expected: Shape::from([src_rows.len()]),
            got: Shape::from([dst_rows.len()]),
        });
    }
    for (arg, rows, n) in [
        ("src_rows", src_rows, src.rows()),
        ("dst_rows", dst_rows, dst.rows()),
    ] {
        if let Some(&r) = rows.iter().find(|&&r| r as usize >= n) {
            let r = r as usize;
            return Err(TensorError::OutOfRange {
                op: OP,
                arg,
                start: r,
                end: r + 1,
                rows: n,
            });
        }
    }
    Ok(src.row_len_unchecked())
}

/// `gather_rows_from`'s arguments (see [`rows_of_many`]).
pub(crate) fn gather_rows_from(
    srcs: &[&crate::Tensor],
    from: &[(u32, u32)],
    dst: Shape,
    dst_rows: &[u32],
) -> Result<usize> {
    let shapes: Vec<Shape> = srcs.iter().map(|t| t.shape()).collect();
    let args = ["srcs", "dst"];
    rows_of_many("gather_rows_from", args, &shapes, from, dst, dst_rows, true)
}

/// `scatter_add_rows_to`'s arguments (see [`rows_of_many`]).
pub(crate) fn scatter_add_rows_to(
    src: Shape,
    src_rows: &[u32],
    dsts: &[crate::TensorMut<'_>],
    to: &[(u32, u32)],
) -> Result<usize> {
    let shapes: Vec<Shape> = dsts.iter().map(|t| t.shape()).collect();
    let args = ["dsts", "src"];
    rows_of_many(
        "scatter_add_rows_to",
        args,
        &shapes,
        to,
        src,
        src_rows,
        false,
    )
}

/// Rows `(s, r)` of several tensors `many` moved to or from rows `rows` of
/// one tensor `one` (`gather_rows_from`, `scatter_add_rows_to`): equal row
/// shapes, equal counts, every index in range; with `distinct`, no row of
/// `one` twice (each written once, so the order of writes cannot matter).
/// Returns the row length.
fn rows_of_many(
    op: &'static str,
    [many_arg, one_arg]: [&'static str; 2],
    many: &[Shape],
    pairs: &[(u32, u32)],
    one: Shape,
    rows: &[u32],
    distinct: bool,
) -> Result<usize> {
    let ck = Check(op);
    ck.min_rank(one_arg, one, 1)?;
    for &m in many {
        ck.min_rank(many_arg, m, 1)?;
        ck.same(m.row_shape(), one.row_shape())
            .map_err(|_| ck.mismatch(m, one))?;
    }
    if pairs.len() != rows.len() {
        return Err(TensorError::ArgShape {
            op,
            arg: "rows",
            expected: Shape::from([pairs.len()]),
            got: Shape::from([rows.len()]),
        });
    }
    let out_of_range = |arg, r: usize, n| TensorError::OutOfRange {
        op,
        arg,
        start: r,
        end: r + 1,
        rows: n,
    };
    for &(t, r) in pairs {
        let Some(m) = many.get(t as usize) else {
            return Err(TensorError::InvalidArgument {
                op,
                arg: "pairs",
                reason: "name a tensor past the list",
            });
        };
        if r as usize >= m.rows() {
            return Err(out_of_range("pairs", r as usize, m.rows()));
        }
    }
    if let Some(&r) = rows.iter().find(|&&r| r as usize >= one.rows()) {
        return Err(out_of_range("rows", r as usize, one.rows()));
    }
    if distinct {
        let mut seen = vec![0u64; one.rows().div_ceil(64)];
        for &r in rows {
            let (word, bit) = (r as usize / 64, 1u64 << (r % 64));
            let before = seen[word];
            seen[word] |= bit;
            if before & bit != 0 {
                return Err(TensorError::InvalidArgument {
                    op,
                    arg: "rows",
                    reason: "name one destination row twice",
                });
            }
        }
    }
    Ok(one.row_len_unchecked())
}

/// `n` rows from `src_row` of `src` to `dst_row` of `dst`. Returns the row
/// length.
pub(crate) fn copy_rows(
    src: Shape,
    src_row: usize,
    dst: Shape,
    dst_row: usize,
    n: usize,
) -> Result<usize> {
    let ck = Check("copy_rows");
    ck.min_rank("src", src, 1)?;
    ck.min_rank("dst", dst, 1)?;
    ck.same(src.row_shape(), dst.row_shape())
        .map_err(|_| ck.mismatch(src, dst))?;
    row_span("src", src, src_row, n)?;
    row_span("dst", dst, dst_row, n)?;
    Ok(src.row_len_unchecked())
}

fn row_span(arg: &'static str, shape: Shape, start: usize, n: usize) -> Result<()> {
    let end = start.saturating_add(n);
    if end <= shape.rows() && start.checked_add(n).is_some() {
        Ok(())
    } else {
        Err(TensorError::OutOfRange {
            op: "copy_rows",
            arg,
            start,
            end,
            rows: shape.rows(),
        })
    }
}

/// `row` broadcast to every row of `dst`.
pub(crate) fn broadcast_row(row: Shape, dst: Shape) -> Result<()> {
    let ck = Check("broadcast_row");
    ck.min_rank("dst", dst, 1)?;
    ck.expect("row", dst.row_shape(), row)
}

/// Sparse optimizer step: `param` `[table_rows, ...]`, `rows` `n` row ids,
/// `grad` `[n, ...]`. Returns the row length.
pub(crate) fn step_rows(
    op: &'static str,
    param: Shape,
    rows: &[u32],
    grad: Shape,
) -> Result<usize> {
    let ck = Check(op);
    ck.min_rank("param", param, 1)?;
    ck.expect("grad", param.with_rows(rows.len()), grad)?;
    Ok(param.row_len_unchecked())
}

/// The row ids of a sparse optimizer step: each below `table_rows`, none
/// listed twice (the CPU kernels check the same, with the same words).
pub(crate) fn row_ids(op: &'static str, rows: &[u32], table_rows: usize) -> Result<()> {
    let mut first_at = std::collections::HashMap::with_capacity(rows.len());
    for (position, &id) in rows.iter().enumerate() {
        let source = if id as usize >= table_rows {
            KernelError::Index {
                kernel: op,
                index: id as usize,
                position,
                rows: table_rows,
            }
        } else if let Some(first) = first_at.insert(id, position) {
            KernelError::Invalid {
                kernel: op,
                what: format!(
                    "row {id} appears more than once in `rows` (positions {first} and {position})"
                ),
            }
        } else {
            continue;
        };
        return Err(TensorError::Kernel { op, source });
    }
    Ok(())
}

/// Cell widths: `b` rows and hidden size `h` read from `base` (rank 2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cell {
    ck: Check,
    pub b: usize,
    pub h: usize,
    base: Shape,
}

impl Cell {
    /// Reads `b` and `h` from `base`, the `[b, H]` argument named `arg`.
    pub(crate) fn new(op: &'static str, arg: &'static str, base: Shape) -> Result<Cell> {
        let ck = Check(op);
        ck.rank(arg, base, 2)?;
        Ok(Cell {
            ck,
            b: base.rows(),
            h: base.row_len_unchecked(),
            base,
        })
    }

    /// Reads `b` and `H` from a batch of cell states `[b, 2H]` named `arg`
    /// (rows `[c | h]`); other arguments are then checked against it as
    /// `k` blocks of `H` (the states' own shape is `k = 2`).
    pub(crate) fn states(op: &'static str, arg: &'static str, states: Shape) -> Result<Cell> {
        let ck = Check(op);
        ck.rank(arg, states, 2)?;
        let width = states.row_len_unchecked();
        if !width.is_multiple_of(2) {
            return Err(TensorError::InvalidArgument {
                op,
                arg,
                reason: "must be cell states [b, 2H] (rows [c | h]): its row length is odd",
            });
        }
        Ok(Cell {
            ck,
            b: states.rows(),
            h: width / 2,
            base: states,
        })
    }

    /// `[b, k H]`, or `None` if `k H` overflows (then no tensor can match).
    fn wide(&self, k: usize) -> Option<Shape> {
        Some(Shape::from([self.b, self.h.checked_mul(k)?]))
    }

    /// Another argument of `k` gate blocks, which must be `[b, k H]`.
    pub(crate) fn gates(&self, arg: &'static str, k: usize, got: Shape) -> Result<()> {
        match self.wide(k) {
            Some(expected) => self.ck.expect(arg, expected, got),
            None => Err(self.ck.mismatch(got, self.base)),
        }
    }

    /// Whether the cell has no elements: every buffer is empty, so there is
    /// nothing to compute (and the kernel, which derives `b` as a length
    /// divided by `H`, is not asked to divide by zero).
    pub(crate) fn is_empty(&self) -> bool {
        self.b == 0 || self.h == 0
    }
}

/// Argument `arg` of `op` has element type `T` and lives on `expected`.
pub(crate) fn meta<T: crate::Element>(
    op: &'static str,
    arg: &'static str,
    got: crate::DType,
    device: crate::Device,
    expected: crate::Device,
) -> Result<()> {
    if got != T::DTYPE {
        return Err(TensorError::DTypeMismatch {
            op,
            arg,
            expected: T::DTYPE,
            got,
        });
    }
    if device != expected {
        return Err(TensorError::DeviceMismatch {
            op,
            arg,
            expected,
            got: device,
        });
    }
    Ok(())
}

/// SGD's velocity: required with momentum, and shaped like `param` if given.
pub(crate) fn check_velocity(
    op: &'static str,
    cfg: &crate::Sgd,
    param: Shape,
    velocity: Option<&crate::TensorMut<'_>>,
) -> Result<()> {
    match velocity {
        Some(v) => Check(op).expect("velocity", param, v.shape()),
        None if cfg.momentum != 0.0 => Err(TensorError::MissingArgument {
            op,
            arg: "velocity",
            when: "momentum is not 0",
        }),
        None => Ok(()),
    }
}

/// Adam's step counts from 1: step 0 would divide by a zero bias correction.
pub(crate) fn check_step(op: &'static str, step: u64) -> Result<()> {
    if step == 0 {
        Err(TensorError::InvalidArgument {
            op,
            arg: "step",
            reason: "must be at least 1 (Adam steps count from 1)",
        })
    } else {
        Ok(())
    }
}

/// `copy_cols`: both matrices with one row count and the column ranges
/// inside them; returns (src_cols, dst_cols).
pub(crate) fn copy_cols(
    src: Shape,
    src_col: usize,
    dst: Shape,
    dst_col: usize,
    width: usize,
) -> Result<(usize, usize)> {
    const OP: &str = "copy_cols";
    let ck = Check(OP);
    let (src_rows, src_cols) = ck.matrix("src", src)?;
    let (dst_rows, dst_cols) = ck.matrix("dst", dst)?;
    if src_rows != dst_rows {
        return Err(ck.mismatch(src, dst));
    }
    for (arg, start, cols) in [("src", src_col, src_cols), ("dst", dst_col, dst_cols)] {
        let end = start.saturating_add(width);
        if end > cols {
            return Err(TensorError::ColumnRange {
                op: OP,
                arg,
                start,
                end,
                cols,
            });
        }
    }
    Ok((src_cols, dst_cols))
}

/// `scale_rows`: `s` holds one factor per row of the matrix `x`, `y` is
/// shaped like `x`; returns the row width.
pub(crate) fn scale_rows(x: Shape, s: Shape, y: Shape) -> Result<usize> {
    let ck = Check("scale_rows");
    let (_, cols) = ck.matrix("x", x)?;
    ck.expect("s", x.without_last(), s)?;
    ck.expect("y", x, y)?;
    Ok(cols)
}

/// The "x has rows but no classes" error of the loss with zero columns.
pub(crate) fn no_classes(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "x",
        reason: "has rows but no classes (its last dimension is 0)",
    }
}
