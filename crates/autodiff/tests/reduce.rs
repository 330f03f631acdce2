//! Reductions: `sum`, `mean`, `sum_elems`, `mean_elems`, `dot`,
//! `squared_distance`.

mod common;

use common::{assert_close, check_shapes, instances, loss, tensor, value, vec_t};
use sheaf_autodiff::testing::check_batching;
use sheaf_autodiff::{Expr, Graph, GraphError};
use sheaf_tensor::{Shape, Tensor};

#[test]
fn reduction_values() {
    let mut g = Graph::new();
    let a = g.input(vec_t(&[1.0, 2.0, 3.0]));
    let b = g.input(vec_t(&[0.5, -1.0, 4.0]));
    let c = g.input(vec_t(&[2.0, 2.0, 2.0]));
    let m = g.input(Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap());
    let s = g.sum(&[a, b, c]).unwrap();
    let mn = g.mean(&[a, b, c]).unwrap();
    let one = g.sum(&[a]).unwrap();
    let se = g.sum_elems(a).unwrap();
    let me = g.mean_elems(m).unwrap();
    let d = g.dot(a, b).unwrap();
    let sq = g.squared_distance(a, b).unwrap();
    assert_eq!(g.shape(se).unwrap(), Shape::from([1]));
    assert_close(&value(&mut g, s), &[3.5, 3.0, 9.0]);
    assert_close(&value(&mut g, mn), &[3.5 / 3.0, 1.0, 3.0]);
    assert_close(&value(&mut g, one), &[1.0, 2.0, 3.0]);
    assert_close(&value(&mut g, se), &[6.0]);
    assert_close(&value(&mut g, me), &[2.5]);
    assert_close(&value(&mut g, d), &[0.5 - 2.0 + 12.0]);
    assert_close(&value(&mut g, sq), &[0.25 + 9.0 + 1.0]);
}

#[test]
fn reduction_gradients() {
    let v: &[usize] = &[5];
    check_shapes(
        &|g, p| {
            let y = g.sum(&[p[0], p[1], p[2]])?;
            loss(g, y)
        },
        &[v, v, v],
    );
    check_shapes(
        &|g, p| {
            let y = g.mean(&[p[0], p[1], p[2]])?;
            loss(g, y)
        },
        &[&[2, 3], &[2, 3], &[2, 3]],
    );
    // A value listed twice counts twice.
    check_shapes(
        &|g, p| {
            let y = g.mean(&[p[0], p[1], p[0]])?;
            loss(g, y)
        },
        &[v, v],
    );
    // sum_elems of a nonlinear function, so its gradient is not constant.
    check_shapes(
        &|g, p| {
            let t = g.tanh(p[0])?;
            g.sum_elems(t)
        },
        &[v],
    );
    check_shapes(
        &|g, p| {
            let t = g.tanh(p[0])?;
            g.mean_elems(t)
        },
        &[&[2, 3]],
    );
    check_shapes(&|g, p| g.dot(p[0], p[1]), &[v, v]);
    check_shapes(
        &|g, p| {
            let t = g.tanh(p[0])?;
            g.dot(t, t)
        },
        &[v],
    );
    check_shapes(&|g, p| g.squared_distance(p[0], p[1]), &[v, v]);
    check_shapes(
        &|g, p| {
            let d = g.squared_distance(p[0], p[1])?;
            g.tanh(d)
        },
        &[v, v],
    );
}

#[test]
fn reductions_batch_like_single_calls() {
    let mut g = Graph::new();
    let a = g.input(tensor(&[5], 0.0));
    let b = g.input(tensor(&[5], 1.0));
    let c = g.input(tensor(&[5], 2.0));
    let m = g.input(tensor(&[2, 3], 3.0));
    let nodes = [
        (g.sum(&[a, b, c]).unwrap(), 3),
        (g.mean(&[a, b, c]).unwrap(), 3),
        (g.sum_elems(a).unwrap(), 1),
        (g.mean_elems(a).unwrap(), 1),
        (g.dot(a, b).unwrap(), 2),
        (g.squared_distance(a, b).unwrap(), 2),
    ];
    let mat_nodes = [g.sum_elems(m).unwrap(), g.mean_elems(m).unwrap()];
    for batch in 3..=5 {
        for (e, arity) in nodes {
            let shapes: Vec<&[usize]> = vec![&[5]; arity];
            check_batching(g.op(e.node()), &instances(&shapes, &[], batch), 0, 0.0)
                .unwrap_or_else(|m| panic!("{m}"));
        }
        for e in mat_nodes {
            check_batching(g.op(e.node()), &instances(&[&[2, 3]], &[], batch), 0, 0.0)
                .unwrap_or_else(|m| panic!("{m}"));
        }
    }
}

#[test]
fn list_length_is_part_of_the_signature() {
    let mut g = Graph::new();
    let a = g.input(tensor(&[5], 0.0));
    let b = g.input(tensor(&[5], 1.0));
    let two = g.sum(&[a, b]).unwrap();
    let two_again = g.sum(&[b, a]).unwrap();
    let three = g.sum(&[a, b, a]).unwrap();
    let sig = |e: Expr| g.node(e.node()).sig();
    assert_eq!(sig(two), sig(two_again));
    assert_ne!(sig(two), sig(three));
}

#[test]
fn reduction_shape_errors() {
    let mut g = Graph::new();
    let a = g.input(tensor(&[3], 0.0));
    let b = g.input(tensor(&[4], 0.0));
    let empty = g.input(Tensor::from_slice::<f32>(&[], [0]).unwrap());
    let err = |r: sheaf_autodiff::Result<Expr>| r.unwrap_err().to_string();
    assert_eq!(
        err(g.sum(&[a, a, b])),
        "sum: expected at least one argument, all of one shape, given [3], [3], [4]"
    );
    assert_eq!(
        err(g.sum(&[])),
        "sum: expected at least one argument, all of one shape, given "
    );
    assert_eq!(
        err(g.mean(&[b, a])),
        "mean: expected at least one argument, all of one shape, given [4], [3]"
    );
    assert_eq!(
        err(g.mean_elems(empty)),
        "mean_elems: expected one argument with at least one element, given [0]"
    );
    assert_eq!(
        err(g.dot(a, b)),
        "dot: expected two arguments of equal shape, given [3], [4]"
    );
    assert_eq!(
        err(g.squared_distance(b, a)),
        "squared_distance: expected two arguments of equal shape, given [4], [3]"
    );
    // sum_elems takes any value, even an empty one (its sum is 0).
    let z = g.sum_elems(empty).unwrap();
    assert_eq!(value(&mut g, z), [0.0]);
    let mut other = Graph::new();
    assert!(matches!(
        other.sum_elems(a).unwrap_err(),
        GraphError::ForeignExpr {
            op: "sum_elems",
            ..
        }
    ));
}
