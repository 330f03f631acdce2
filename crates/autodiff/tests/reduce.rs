//! Reductions: `sum`, `mean`, `sum_elems`, `mean_elems`, `dot`,
//! `squared_distance`.

use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{Expr, Graph, GraphError, ParamStore, Sequential};
use sheaf_tensor::{Shape, Tensor};

type Build = dyn Fn(&mut Graph, &[Expr]) -> sheaf_autodiff::Result<Expr>;

/// Deterministic, varied values in about [-1, 1].
fn vals(n: usize, salt: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 + 1.0) * 0.73 + salt * 1.37).sin())
        .collect()
}

fn tensor(shape: &[usize], salt: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(vals(n, salt), Shape::new(shape).unwrap()).unwrap()
}

/// A scalar loss that weighs every element of `y` differently, so a
/// gradient routed to the wrong element is caught: `sum(y * c)`.
fn loss(g: &mut Graph, y: Expr) -> sheaf_autodiff::Result<Expr> {
    let shape = g.shape(y)?;
    let c = g.input(tensor(shape.dims(), 9.0));
    let h = g.cmult(y, c)?;
    g.sum_elems(h)
}

/// Finite-difference check of `build` with parameters of the given shapes.
/// Every parameter is also used by a later node (`sum_elems(tanh(p))`,
/// whose backward runs first), so an op that overwrites its arguments'
/// gradients instead of adding to them fails the check.
fn check(build: &Build, shapes: &[&[usize]]) {
    let mut store = ParamStore::new();
    let params: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| store.add(&format!("x{i}"), tensor(s, i as f32)).unwrap())
        .collect();
    let with_other_uses = |g: &mut Graph, p: &[Expr]| {
        let mut terms = vec![build(g, p)?];
        for &x in p {
            let t = g.tanh(x)?;
            terms.push(g.sum_elems(t)?);
        }
        g.sum(&terms)
    };
    check_gradients(&mut store, &params, &with_other_uses, GradCheck::default())
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Instances for `check_batching`: stacked arguments vary per instance,
/// `shared` ones (by index) are the same in every instance.
fn instances(shapes: &[&[usize]], shared: &[usize], b: usize) -> Vec<Instance> {
    (0..b)
        .map(|k| Instance {
            args: shapes
                .iter()
                .enumerate()
                .map(|(j, s)| {
                    let salt = if shared.contains(&j) {
                        0.0
                    } else {
                        k as f32 * 3.1
                    };
                    tensor(s, j as f32 + salt)
                })
                .collect(),
            data: 0,
            seed: k as u64,
        })
        .collect()
}

/// The forward value of `e` as a vector.
fn value(g: &mut Graph, e: Expr) -> Vec<f32> {
    let store = ParamStore::new();
    Sequential::new()
        .forward(g, &store, e)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (a, b) in got.iter().zip(want) {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

fn vec_t(v: &[f32]) -> Tensor {
    Tensor::from_slice(v, [v.len()]).unwrap()
}

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
    check(
        &|g, p| {
            let y = g.sum(&[p[0], p[1], p[2]])?;
            loss(g, y)
        },
        &[v, v, v],
    );
    check(
        &|g, p| {
            let y = g.mean(&[p[0], p[1], p[2]])?;
            loss(g, y)
        },
        &[&[2, 3], &[2, 3], &[2, 3]],
    );
    // A value listed twice counts twice.
    check(
        &|g, p| {
            let y = g.mean(&[p[0], p[1], p[0]])?;
            loss(g, y)
        },
        &[v, v],
    );
    // sum_elems of a nonlinear function, so its gradient is not constant.
    check(
        &|g, p| {
            let t = g.tanh(p[0])?;
            g.sum_elems(t)
        },
        &[v],
    );
    check(
        &|g, p| {
            let t = g.tanh(p[0])?;
            g.mean_elems(t)
        },
        &[&[2, 3]],
    );
    check(&|g, p| g.dot(p[0], p[1]), &[v, v]);
    check(
        &|g, p| {
            let t = g.tanh(p[0])?;
            g.dot(t, t)
        },
        &[v],
    );
    check(&|g, p| g.squared_distance(p[0], p[1]), &[v, v]);
    check(
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
