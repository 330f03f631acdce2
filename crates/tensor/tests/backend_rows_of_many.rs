//! `RowOps::gather_rows_from` and `RowOps::scatter_add_rows_to` (rows of
//! several tensors into one, and back, in one call), the CPU backend's
//! one-pass kernels and the trait's defaults alike, against a plain host
//! loop: identical bits for the gather, sums added in position order for
//! the scatter (duplicates included), on rank-2 and rank-3 rows; and their
//! errors, with nothing written.

// `TensorError` is large by design (see the crate root).
#![allow(clippy::result_large_err)]

mod common;

use common::state_cells::Defaults;
use common::{get, rand};
use sheaf_tensor::prelude::*;
use sheaf_tensor::{CpuBackend, Shape, Tensor, TensorError};

/// splitmix64 indices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> u32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as u32
    }
}

/// The CPU backend's overrides and the trait's defaults.
fn each_backend(mut f: impl FnMut(&dyn RowOps, &str)) {
    f(&CpuBackend::new(), "cpu");
    f(&Defaults(CpuBackend::new()), "default");
}

fn shape(rows: usize, row: &[usize]) -> Shape {
    Shape::stack(rows, Shape::new(row).unwrap()).unwrap()
}

/// Three sources of 5, 1 and 7 rows; `n` pairs into distinct rows of a
/// 12-row destination.
fn case(row: &[usize], n: usize, seed: u64) -> (Vec<Tensor>, Vec<(u32, u32)>, Vec<u32>) {
    let sizes = [5, 1, 7];
    let srcs: Vec<Tensor> = sizes
        .iter()
        .enumerate()
        .map(|(i, &r)| rand(shape(r, row), seed as u32 * 10 + i as u32))
        .collect();
    let mut rng = Rng(seed);
    let pairs = (0..n)
        .map(|_| {
            let t = rng.below(3);
            (t, rng.below(sizes[t as usize]))
        })
        .collect();
    let mut rows: Vec<u32> = (0..12).collect();
    for i in (1..rows.len()).rev() {
        rows.swap(i, rng.below(i + 1) as usize);
    }
    rows.truncate(n);
    (srcs, pairs, rows)
}

#[test]
fn gather_rows_from_moves_each_row_exactly() {
    each_backend(gather_exactly);
}

fn gather_exactly(be: &dyn RowOps, path: &str) {
    for row in [&[3][..], &[2, 2][..]] {
        for (n, seed) in [(0, 1), (1, 2), (7, 3), (12, 4)] {
            let (srcs, pairs, rows) = case(row, n, seed);
            let before = rand(shape(12, row), 99);
            let mut dst = before.clone();
            let refs: Vec<&Tensor> = srcs.iter().collect();
            be.gather_rows_from(&refs, &pairs, dst.view_mut().unwrap(), &rows)
                .unwrap();
            let len: usize = row.iter().product();
            let mut want = get(&before);
            for (&(t, r), &d) in pairs.iter().zip(&rows) {
                let src = get(&srcs[t as usize]);
                let (r, d) = (r as usize, d as usize);
                want[d * len..(d + 1) * len].copy_from_slice(&src[r * len..(r + 1) * len]);
            }
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            assert_eq!(bits(get(&dst)), bits(want), "{path}: row {row:?}, {n} rows");
        }
    }
}

#[test]
fn scatter_add_rows_to_adds_in_position_order() {
    each_backend(scatter_in_order);
}

fn scatter_in_order(be: &dyn RowOps, path: &str) {
    for row in [&[3][..], &[2, 2][..]] {
        let mut rng = Rng(8);
        let src = rand(shape(9, row), 5);
        let sizes = [4usize, 6, 2];
        let befores: Vec<Tensor> = sizes
            .iter()
            .enumerate()
            .map(|(i, &r)| rand(shape(r, row), 20 + i as u32))
            .collect();
        // 20 adds: repeated destinations and repeated sources.
        let to: Vec<(u32, u32)> = (0..20)
            .map(|_| {
                let t = rng.below(3);
                (t, rng.below(sizes[t as usize]))
            })
            .collect();
        let src_rows: Vec<u32> = (0..20).map(|_| rng.below(9)).collect();
        let mut dsts = befores.clone();
        {
            let mut views: Vec<_> = dsts.iter_mut().map(|t| t.view_mut().unwrap()).collect();
            be.scatter_add_rows_to(&src, &src_rows, &mut views, &to)
                .unwrap();
        }
        let len: usize = row.iter().product();
        let s = get(&src);
        for (t, (got, before)) in dsts.iter().zip(&befores).enumerate() {
            let mut want = get(before);
            for (&(tt, r), &sr) in to.iter().zip(&src_rows) {
                if tt as usize != t {
                    continue;
                }
                let (r, sr) = (r as usize, sr as usize);
                for c in 0..len {
                    want[r * len + c] += s[sr * len + c];
                }
            }
            assert_eq!(get(got), want, "{path}: row {row:?}, destination {t}");
        }
    }
}

#[test]
fn bad_calls_are_errors_and_write_nothing() {
    each_backend(bad_calls);
}

fn bad_calls(be: &dyn RowOps, path: &str) {
    let (srcs, _, _) = case(&[3], 0, 7);
    let refs: Vec<&Tensor> = srcs.iter().collect();
    let before = rand(shape(12, &[3]), 1);
    let other = [rand(shape(4, &[2]), 2)];
    type Case<'a> = (&'a str, Vec<&'a Tensor>, Vec<(u32, u32)>, Vec<u32>);
    let cases: Vec<Case> = vec![
        ("tensor past the list", refs.clone(), vec![(3, 0)], vec![0]),
        ("row past its tensor", refs.clone(), vec![(1, 1)], vec![0]),
        (
            "destination past the end",
            refs.clone(),
            vec![(0, 0)],
            vec![12],
        ),
        (
            "destination twice",
            refs.clone(),
            vec![(0, 0), (2, 1)],
            vec![4, 4],
        ),
        (
            "lengths differ",
            refs.clone(),
            vec![(0, 0), (2, 1)],
            vec![4],
        ),
        ("row shapes differ", vec![&other[0]], vec![(0, 0)], vec![0]),
    ];
    for (name, srcs, pairs, rows) in cases {
        let mut dst = before.clone();
        let e = be
            .gather_rows_from(&srcs, &pairs, dst.view_mut().unwrap(), &rows)
            .expect_err(name);
        assert!(
            matches!(
                e,
                TensorError::InvalidArgument { .. }
                    | TensorError::OutOfRange { .. }
                    | TensorError::ArgShape { .. }
                    | TensorError::ShapeMismatch { .. }
            ),
            "{path}: {name}: {e}"
        );
        assert!(
            e.to_string().contains("gather_rows_from"),
            "{path}: {name}: {e}"
        );
        assert_eq!(get(&dst), get(&before), "{path}: {name}: written");
    }
    // The scatter: a destination row past its tensor.
    let src = rand(shape(2, &[3]), 3);
    let mut dsts = [rand(shape(2, &[3]), 4)];
    let kept = get(&dsts[0]);
    let mut views: Vec<_> = dsts.iter_mut().map(|t| t.view_mut().unwrap()).collect();
    let e = be
        .scatter_add_rows_to(&src, &[0], &mut views, &[(0, 2)])
        .expect_err("row past its tensor");
    assert!(e.to_string().contains("scatter_add_rows_to"), "{path}: {e}");
    drop(views);
    assert_eq!(get(&dsts[0]), kept);
}
