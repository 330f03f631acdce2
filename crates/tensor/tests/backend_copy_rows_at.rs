//! `RowOps::copy_rows_at`: the CPU override (one pass through
//! `gather_scatter_rows`) against the trait's default (row-by-row
//! `copy_rows`, or `gather_rows` + `scatter_add_rows`), and both against a
//! plain host loop.
//!
//! - Copy and accumulate on rank-1, rank-2, rank-3 (row shape `[2, 3]`) and
//!   zero-width tensors, into row-range views of larger tensors: identical
//!   bits, duplicates last-wins (copy) or added in position order.
//! - Errors (row shapes, ranks, list lengths, rows out of range in either
//!   list, `u32` tensors): the override's exact error, the default's same
//!   variant and argument, the destination unchanged on both paths (also
//!   with empty lists, where no kernel of the default runs).

// `TensorError` is large by design (see the crate root).
#![allow(clippy::result_large_err)]

mod common;

use std::mem::discriminant;
use std::ops::Range;

use common::backends;
use common::state_cells::{bits, rnd, Defaults};
use sheaf_tensor::prelude::*;
use sheaf_tensor::{CpuBackend, DType, Device, Result, Shape, Tensor, TensorError};

/// xorshift64*: index lists.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: usize) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as u32
    }

    fn list(&mut self, n: usize, rows: usize) -> Vec<u32> {
        (0..n).map(|_| self.below(rows)).collect()
    }

    /// `n <= rows` distinct rows in random order.
    fn distinct(&mut self, n: usize, rows: usize) -> Vec<u32> {
        let mut all: Vec<u32> = (0..rows as u32).collect();
        for i in (1..all.len()).rev() {
            all.swap(i, self.below(i + 1) as usize);
        }
        all.truncate(n);
        all
    }
}

fn stack(n: usize, row: &[usize]) -> Shape {
    Shape::stack(n, Shape::new(row).unwrap()).unwrap()
}

/// One call: `src` (`[src_rows, row...]`), the destination `big`
/// (`[big_rows, row...]`) of which rows `view` are passed as `dst`.
struct Call {
    src: Tensor,
    src_idx: Vec<u32>,
    big: Tensor,
    view: Range<usize>,
    dst_idx: Vec<u32>,
    accumulate: bool,
}

impl Call {
    /// Runs `copy_rows_at` on a fresh copy of `big`; returns the outcome
    /// and the copy afterwards.
    fn run<B: RowOps + ?Sized>(&self, be: &B) -> (Result<()>, Tensor) {
        let mut big = self.big.clone();
        let res = (|| {
            let whole = big.view_mut()?;
            let dst = if whole.shape().rank() == 0 {
                whole // a scalar has no rows to take
            } else {
                whole.into_rows_mut(self.view.clone())?
            };
            be.copy_rows_at(
                &self.src,
                &self.src_idx,
                dst,
                &self.dst_idx,
                self.accumulate,
            )
        })();
        (res, big)
    }

    /// The host loop's result on `big`.
    fn reference(&self) -> Vec<u32> {
        let row_len = self.src.shape().row_len().unwrap();
        let src = self.src.to_vec::<f32>().unwrap();
        let mut out = self.big.to_vec::<f32>().unwrap();
        let base = self.view.start * row_len;
        for (&s, &d) in self.src_idx.iter().zip(&self.dst_idx) {
            for c in 0..row_len {
                let v = src[s as usize * row_len + c];
                let o = &mut out[base + d as usize * row_len + c];
                if self.accumulate {
                    *o += v;
                } else {
                    *o = v;
                }
            }
        }
        out.into_iter().map(f32::to_bits).collect()
    }
}

/// The CPU override of every ISA, the global CPU backend and the default
/// over every ISA all give the reference's bits.
fn agree(call: &Call, ctx: &str) {
    let want = call.reference();
    let mut got = Vec::new();
    for be in backends() {
        got.push((format!("cpu {}", be.name()), call.run(&be)));
        got.push((format!("default {}", be.name()), call.run(&Defaults(be))));
    }
    got.push(("global".into(), call.run(Device::Cpu.backend().unwrap())));
    got.push(("new".into(), call.run(&CpuBackend::new())));
    for (path, (res, big)) in got {
        res.unwrap_or_else(|e| panic!("{ctx} ({path}): {e}"));
        assert_eq!(bits(&big), want, "{ctx} ({path})");
    }
}

const ROWS: [&[usize]; 5] = [&[], &[1], &[4], &[2, 3], &[0]];

#[test]
fn matches_reference_into_row_views() {
    let mut rng = Rng::new(3);
    for row in ROWS {
        for trial in 0..8u32 {
            let src_rows = 1 + rng.below(12) as usize;
            let rows = 1 + rng.below(12) as usize;
            let (pad, tail) = (rng.below(4) as usize, rng.below(4) as usize);
            let src = rnd(stack(src_rows, row), 10 + trial, 1.0);
            let big = rnd(stack(pad + rows + tail, row), 20 + trial, 1.0);
            let view = pad..pad + rows;
            // Distinct destinations, then duplicates in both lists.
            let n = rng.below(rows + 1) as usize;
            let lists = [
                (rng.list(n, src_rows), rng.distinct(n, rows)),
                {
                    let n = rng.below(3 * rows + 1) as usize;
                    (rng.list(n, src_rows), rng.list(n, rows))
                },
                (Vec::new(), Vec::new()),
            ];
            for (k, (src_idx, dst_idx)) in lists.into_iter().enumerate() {
                for accumulate in [false, true] {
                    let call = Call {
                        src: src.clone(),
                        src_idx: src_idx.clone(),
                        big: big.clone(),
                        view: view.clone(),
                        dst_idx: dst_idx.clone(),
                        accumulate,
                    };
                    let ctx = format!("row {row:?} trial {trial} list {k} acc {accumulate}");
                    agree(&call, &ctx);
                }
            }
        }
    }
}

#[test]
fn wide_rows_many_positions() {
    let mut rng = Rng::new(5);
    let row: &[usize] = &[3, 100];
    let src = rnd(stack(300, row), 1, 1.0);
    let big = rnd(stack(260, row), 2, 1.0);
    let (src_idx, dst_idx) = (rng.list(700, 300), rng.list(700, 250));
    for accumulate in [false, true] {
        let call = Call {
            src: src.clone(),
            src_idx: src_idx.clone(),
            big: big.clone(),
            view: 7..257,
            dst_idx: dst_idx.clone(),
            accumulate,
        };
        agree(&call, &format!("wide acc {accumulate}"));
    }
}

#[test]
fn duplicates_last_wins_or_add_up() {
    let row: &[usize] = &[2, 3];
    let (src, big) = (rnd(stack(4, row), 1, 1.0), rnd(stack(6, row), 2, 1.0));
    let (s, b) = (src.to_vec::<f32>().unwrap(), big.to_vec::<f32>().unwrap());
    for accumulate in [false, true] {
        // View row 1 (big row 3) receives src rows 0, 3, 1 in that order.
        let call = Call {
            src: src.clone(),
            src_idx: vec![0, 3, 2, 1],
            big: big.clone(),
            view: 2..5,
            dst_idx: vec![1, 1, 0, 1],
            accumulate,
        };
        agree(&call, &format!("duplicates acc {accumulate}"));
        let out = call.run(&Defaults(CpuBackend::new())).1;
        let out = out.to_vec::<f32>().unwrap();
        for c in 0..6 {
            let want = match accumulate {
                false => s[6 + c],
                true => ((b[18 + c] + s[c]) + s[18 + c]) + s[6 + c],
            };
            assert_eq!(out[18 + c].to_bits(), want.to_bits(), "column {c}");
        }
    }
}

// ---------------------------------------------------------------------------
// Errors.
// ---------------------------------------------------------------------------

/// The argument an error names, if its variant names one.
fn arg_of(e: &TensorError) -> Option<&'static str> {
    match *e {
        TensorError::ArgShape { arg, .. }
        | TensorError::DTypeMismatch { arg, .. }
        | TensorError::RankMismatch { arg, .. }
        | TensorError::OutOfRange { arg, .. } => Some(arg),
        TensorError::ShapeMismatch { .. } => None,
        ref other => panic!("unexpected error variant: {other:?}"),
    }
}

fn tensor(shape: Shape, dtype: DType, seed: u32) -> Tensor {
    match dtype {
        DType::F32 => rnd(shape, seed, 1.0),
        DType::U32 => {
            let n = shape.numel().unwrap();
            Tensor::from_vec((0..n as u32).map(|i| i * 7 + seed).collect(), shape).unwrap()
        }
        other => panic!("unexpected dtype {other}"),
    }
}

/// Every path rejects `call` with `want` (the override exactly, the default
/// with the same variant and argument) and leaves the destination as it
/// was. Returns the default's error.
#[track_caller]
fn rejects(call: &Call, want: &TensorError, ctx: &str) -> TensorError {
    let before = bits(&call.big);
    let mut default_err = None;
    for be in backends() {
        let (res, big) = call.run(&be);
        let err = res.expect_err(&format!("{ctx} (cpu): accepted"));
        assert_eq!(&err, want, "{ctx} (cpu {})", be.name());
        assert_eq!(bits(&big), before, "{ctx}: cpu wrote on error");

        let (res, big) = call.run(&Defaults(be));
        let err = res.expect_err(&format!("{ctx} (default): accepted"));
        assert_eq!(
            (discriminant(&err), arg_of(&err)),
            (discriminant(want), arg_of(want)),
            "{ctx} (default {}): got {err:?}, want {want:?}",
            be.name()
        );
        assert_eq!(bits(&big), before, "{ctx}: default wrote on error");
        default_err = Some(err);
    }
    default_err.unwrap()
}

const OP: &str = "copy_rows_at";

/// `src` `[src_rows, src_row...]`, `dst` rows 1..1 + dst_rows of a
/// `[dst_rows + 3, dst_row...]` tensor.
#[allow(clippy::too_many_arguments)]
fn bad_call(
    src_row: &[usize],
    src_rows: usize,
    src_dtype: DType,
    dst_row: &[usize],
    dst_rows: usize,
    dst_dtype: DType,
    src_idx: &[u32],
    dst_idx: &[u32],
    accumulate: bool,
) -> Call {
    Call {
        src: tensor(stack(src_rows, src_row), src_dtype, 1),
        src_idx: src_idx.to_vec(),
        big: tensor(stack(dst_rows + 3, dst_row), dst_dtype, 2),
        view: 1..1 + dst_rows,
        dst_idx: dst_idx.to_vec(),
        accumulate,
    }
}

const F: DType = DType::F32;
const U: DType = DType::U32;

/// What the override reports for a `u32` argument `arg`.
fn u32_err(arg: &'static str) -> TensorError {
    TensorError::DTypeMismatch {
        op: OP,
        arg,
        expected: DType::F32,
        got: DType::U32,
    }
}

#[test]
fn mismatched_row_shapes() {
    let pairs: [(&[usize], &[usize]); 5] = [
        (&[2, 3], &[3, 2]),
        (&[2, 3], &[6]),
        (&[6], &[2, 3]),
        (&[], &[1]),
        (&[4], &[5]),
    ];
    for (sr, dr) in pairs {
        for accumulate in [false, true] {
            for (si, di) in [(&[0u32, 1][..], &[2u32, 0][..]), (&[][..], &[][..])] {
                let call = bad_call(sr, 4, F, dr, 5, F, si, di, accumulate);
                let want = TensorError::ShapeMismatch {
                    op: OP,
                    lhs: stack(4, sr),
                    rhs: stack(5, dr),
                };
                let e = rejects(&call, &want, &format!("{sr:?} vs {dr:?} {si:?}"));
                assert_eq!(e, want, "the default reports the same check");
            }
        }
    }
}

#[test]
fn rank_zero_arguments() {
    for accumulate in [false, true] {
        // A scalar `src` (its row shape is a scalar too, as is a rank-1
        // destination's).
        let scalar = Shape::new(&[]).unwrap();
        let call = Call {
            src: rnd(scalar, 1, 1.0),
            src_idx: vec![0],
            big: rnd([4], 2, 1.0),
            view: 0..4,
            dst_idx: vec![1],
            accumulate,
        };
        let want = TensorError::RankMismatch {
            op: OP,
            arg: "src",
            expected: "at least 1",
            shape: scalar,
        };
        assert_eq!(rejects(&call, &want, "scalar src"), want);
        // A scalar destination (the whole of a scalar tensor).
        let call = Call {
            src: rnd([3], 1, 1.0),
            src_idx: vec![0],
            big: rnd(scalar, 2, 1.0),
            view: 0..1,
            dst_idx: vec![0],
            accumulate,
        };
        let want = TensorError::RankMismatch {
            op: OP,
            arg: "dst",
            expected: "at least 1",
            shape: scalar,
        };
        assert_eq!(rejects(&call, &want, "scalar dst"), want);
    }
}

#[test]
fn unequal_list_lengths() {
    for row in ROWS {
        for accumulate in [false, true] {
            for (si, di) in [
                (&[0u32, 1, 2][..], &[0u32, 1][..]),
                (&[1][..], &[0, 1, 2][..]),
                (&[2][..], &[][..]),
                (&[][..], &[3][..]),
            ] {
                let call = bad_call(row, 4, F, row, 5, F, si, di, accumulate);
                let want = TensorError::ArgShape {
                    op: OP,
                    arg: "dst_rows",
                    expected: Shape::from([si.len()]),
                    got: Shape::from([di.len()]),
                };
                let e = rejects(&call, &want, &format!("{row:?} {si:?} / {di:?}"));
                assert_eq!(e, want);
            }
        }
    }
}

#[test]
fn rows_out_of_range() {
    let out = |arg, r: u32, rows| TensorError::OutOfRange {
        op: OP,
        arg,
        start: r as usize,
        end: r as usize + 1,
        rows,
    };
    for row in ROWS {
        for accumulate in [false, true] {
            // src has 4 rows; dst is a view of 5 rows (big has 8), so rows
            // 5..8 exist in the tensor but not in the view.
            let cases: [(&[u32], &[u32], TensorError); 8] = [
                (&[4], &[0], out("src_rows", 4, 4)),
                (&[0, 1, 2, 3, 9], &[0, 1, 2, 3, 4], out("src_rows", 9, 4)),
                (&[0, 7, 5], &[0, 1, 2], out("src_rows", 7, 4)),
                (&[u32::MAX], &[0], out("src_rows", u32::MAX, 4)),
                (&[0], &[5], out("dst_rows", 5, 5)),
                (&[0, 1, 2], &[4, 3, 7], out("dst_rows", 7, 5)),
                (&[3, 3], &[0, u32::MAX], out("dst_rows", u32::MAX, 5)),
                // Both bad: the source is named.
                (&[0, 6], &[9, 0], out("src_rows", 6, 4)),
            ];
            for (si, di, want) in cases {
                let call = bad_call(row, 4, F, row, 5, F, si, di, accumulate);
                let ctx = format!("{row:?} acc {accumulate} {si:?} -> {di:?}");
                assert_eq!(rejects(&call, &want, &ctx), want, "{ctx}");
            }
        }
    }
}

#[test]
fn u32_arguments() {
    for row in [&[2usize, 3][..], &[4][..], &[][..]] {
        for accumulate in [false, true] {
            let (si, di) = (&[0u32, 3, 1][..], &[4u32, 0, 0][..]);
            for (sd, dd, arg) in [(U, F, "src"), (F, U, "dst"), (U, U, "src")] {
                let call = bad_call(row, 4, sd, row, 5, dd, si, di, accumulate);
                let want = u32_err(arg);
                let ctx = format!("{row:?} acc {accumulate} {sd}/{dd}");
                let e = rejects(&call, &want, &ctx);
                // The default reports it from the method it calls.
                let TensorError::DTypeMismatch { op, .. } = e else {
                    unreachable!()
                };
                assert!(
                    ["copy_rows", "gather_rows", "scatter_add_rows", OP].contains(&op),
                    "{ctx}: {op}"
                );
            }
            // The shape checks come first.
            let call = bad_call(row, 4, U, row, 5, F, &[0, 9], &[0, 1], accumulate);
            let want = TensorError::OutOfRange {
                op: OP,
                arg: "src_rows",
                start: 9,
                end: 10,
                rows: 4,
            };
            assert_eq!(rejects(&call, &want, "u32 src, bad row"), want);
        }
    }
}

/// With empty index lists the override still rejects a `u32` argument (the
/// `Backend` contract: dtypes are checked first), and so does the default
/// when accumulating (its `gather_rows` / `scatter_add_rows` check them).
#[test]
fn u32_arguments_with_empty_lists() {
    for (sd, dd, arg) in [(U, F, "src"), (F, U, "dst")] {
        let want = u32_err(arg);
        let call = bad_call(&[2, 3], 4, sd, &[2, 3], 5, dd, &[], &[], true);
        rejects(&call, &want, &format!("empty lists {sd}/{dd} accumulating"));
        let call = bad_call(&[2, 3], 4, sd, &[2, 3], 5, dd, &[], &[], false);
        let (res, big) = call.run(&CpuBackend::new());
        assert_eq!(res, Err(want), "empty lists {sd}/{dd} copying");
        assert_eq!(bits(&big), bits(&call.big));
    }
}

/// The default checks dtypes itself: its copy path once left that to the
/// `copy_rows` it calls per pair, so empty lists let a `u32` through.
#[test]
fn default_copy_rejects_u32_with_empty_lists() {
    for (sd, dd, arg) in [(U, F, "src"), (F, U, "dst")] {
        let want = u32_err(arg);
        let call = bad_call(&[2, 3], 4, sd, &[2, 3], 5, dd, &[], &[], false);
        rejects(&call, &want, &format!("empty lists {sd}/{dd} copying"));
    }
}
