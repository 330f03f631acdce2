//! Sequence ops: `sequence_last`, `sequence_mask`, `sequence_reverse`,
//! `sequence_sum`. Values, finite-difference gradients, batching with
//! mixed lengths, padding invariance and errors.

mod common;

use common::{assert_close, check_shapes, loss, tensor, value};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{Expr, Graph, GraphError};
use sheaf_tensor::Tensor;

/// `[[1, 2], [3, 4], [5, 6], [7, 8]]`: T = 4, w = 2.
fn seq(g: &mut Graph) -> Expr {
    let v: Vec<f32> = (1..=8).map(|i| i as f32).collect();
    g.input(Tensor::from_vec(v, [4, 2]).unwrap())
}

#[test]
fn sequence_values() {
    let mut g = Graph::new();
    let x = seq(&mut g);
    let last = g.sequence_last(x, 3).unwrap();
    let mask = g.sequence_mask(x, 2, -1.0).unwrap();
    let rev = g.sequence_reverse(x, 3).unwrap();
    let sum = g.sequence_sum(x, 2).unwrap();
    let none = g.sequence_sum(x, 0).unwrap();
    let all_masked = g.sequence_mask(x, 0, 0.0).unwrap();
    assert_close(&value(&mut g, last), &[5.0, 6.0]);
    assert_close(&value(&mut g, mask), &[1., 2., 3., 4., -1., -1., -1., -1.]);
    assert_close(&value(&mut g, rev), &[5., 6., 3., 4., 1., 2., 7., 8.]);
    assert_close(&value(&mut g, sum), &[10.0]);
    assert_close(&value(&mut g, none), &[0.0]);
    assert_close(&value(&mut g, all_masked), &[0.0; 8]);
}

#[test]
fn sequence_gradients() {
    for len in [1, 3, 5] {
        check_shapes(
            &move |g, p| {
                let y = g.sequence_last(p[0], len)?;
                loss(g, y)
            },
            &[&[5, 3]],
        );
        check_shapes(
            &move |g, p| {
                let y = g.sequence_mask(p[0], len, 0.5)?;
                loss(g, y)
            },
            &[&[5, 3]],
        );
        check_shapes(
            &move |g, p| {
                let y = g.sequence_reverse(p[0], len)?;
                loss(g, y)
            },
            &[&[5, 2, 2]],
        );
        check_shapes(
            &move |g, p| {
                let t = g.tanh(p[0])?;
                g.sequence_sum(t, len)
            },
            &[&[5]],
        );
    }
}

/// A batch of instances with different lengths equals each run alone.
#[test]
fn sequence_ops_batch_over_mixed_lengths() {
    let instances: Vec<Instance> = [1u32, 4, 2, 0, 3]
        .iter()
        .enumerate()
        .map(|(k, &len)| Instance {
            args: vec![tensor(&[4, 3], k as f32)],
            data: len,
            seed: 0,
        })
        .collect();
    let mut g = Graph::new();
    let x = g.input(tensor(&[4, 3], 0.0));
    let nodes = [
        g.sequence_mask(x, 2, 7.0).unwrap(),
        g.sequence_reverse(x, 2).unwrap(),
        g.sequence_sum(x, 2).unwrap(),
    ];
    for e in nodes {
        let n = e.node();
        check_batching(g.op(n), &instances, g.node(n).attr(), 0.0)
            .unwrap_or_else(|m| panic!("{}: {m}", g.op_name(n)));
    }
    // sequence_last needs len >= 1 (the graph method enforces it).
    let last = g.sequence_last(x, 2).unwrap().node();
    let nonzero: Vec<Instance> = instances.into_iter().filter(|i| i.data > 0).collect();
    check_batching(g.op(last), &nonzero, 0, 0.0).unwrap_or_else(|m| panic!("{m}"));
}

/// Whatever the padding rows hold (inf and NaN included, which a masked
/// product would spread), the results are those of the unpadded sequence;
/// a mistake (reading row `len` instead of `len - 1`) would fail.
#[test]
fn padding_does_not_change_results() {
    let short = tensor(&[3, 2], 1.0);
    let mut padded = short.to_vec::<f32>().unwrap();
    padded.extend([f32::INFINITY, f32::NAN, 42.0, f32::NEG_INFINITY]);
    let padded = Tensor::from_vec(padded, [5, 2]).unwrap();
    let mut g = Graph::new();
    let (s, p) = (g.input(short), g.input(padded));
    for f in [
        |g: &mut Graph, x| g.sequence_last(x, 3),
        |g: &mut Graph, x| g.sequence_sum(x, 3),
    ] {
        let (a, b) = (f(&mut g, s).unwrap(), f(&mut g, p).unwrap());
        assert_eq!(value(&mut g, a), value(&mut g, b));
    }
    let (a, b) = (
        g.sequence_reverse(s, 3).unwrap(),
        g.sequence_reverse(p, 3).unwrap(),
    );
    assert_eq!(value(&mut g, a), value(&mut g, b)[..6]);
}

#[test]
fn sequence_errors() {
    let mut g = Graph::new();
    let x = seq(&mut g);
    let err = g.sequence_last(x, 5).unwrap_err();
    assert_eq!(
        err.to_string(),
        "sequence_last: length 5 is outside 1..=4 for a sequence of shape [4, 2]"
    );
    let err = g.sequence_last(x, 0).unwrap_err();
    assert!(
        matches!(
            err,
            GraphError::Data {
                op: "sequence_last",
                ..
            }
        ),
        "{err}"
    );
    assert!(g.sequence_mask(x, 5, 0.0).is_err());
    assert!(g.sequence_reverse(x, 5).is_err());
    let v = g.input(tensor(&[4], 0.0));
    let err = g.sequence_last(v, 1).unwrap_err();
    assert!(
        matches!(
            err,
            GraphError::Shape {
                op: "sequence_last",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("[4]"), "{err}");
    // A zero-length sequence [0, 2]: masks and sums are fine, last is not.
    let empty = g.input(Tensor::from_vec(Vec::<f32>::new(), [0, 2]).unwrap());
    let s = g.sequence_sum(empty, 0).unwrap();
    assert_close(&value(&mut g, s), &[0.0]);
    assert!(g.sequence_last(empty, 0).is_err());
}
