//! Maxima: `maximum` of two values, `max` over a list; the gradient goes
//! to the first argument holding the maximum.

mod common;

use common::{assert_close, check, instances, loss, value, vec_t};
use sheaf_autodiff::testing::check_batching;
use sheaf_autodiff::{Graph, ParamStore, Sequential};

#[test]
fn values_and_ties() {
    let mut g = Graph::new();
    let a = g.input(vec_t(&[1.0, -2.0, 3.0, 0.5]));
    let b = g.input(vec_t(&[0.0, -1.0, 3.0, 0.7]));
    let c = g.input(vec_t(&[2.0, -3.0, 1.0, 0.7]));
    let m = g.maximum(a, b).unwrap();
    let l = g.max(&[a, b, c]).unwrap();
    let one = g.max(&[c]).unwrap();
    assert_close(&value(&mut g, m), &[1.0, -1.0, 3.0, 0.7]);
    assert_close(&value(&mut g, l), &[2.0, -1.0, 3.0, 0.7]);
    assert_close(&value(&mut g, one), &[2.0, -3.0, 1.0, 0.7]);
}

#[test]
fn the_gradient_goes_to_the_first_maximum() {
    let mut store = ParamStore::new();
    let pa = store.add("a", vec_t(&[1.0, 3.0, 0.7])).unwrap();
    let pb = store.add("b", vec_t(&[0.0, 3.0, 0.7])).unwrap();
    let pc = store.add("c", vec_t(&[2.0, 1.0, 0.7])).unwrap();
    let mut g = Graph::new();
    let (a, b, c) = (g.param(&pa), g.param(&pb), g.param(&pc));
    let m = g.max(&[a, b, c]).unwrap();
    let w = g.input(vec_t(&[1.0, 10.0, 100.0]));
    let y = g.dot(m, w).unwrap();
    Sequential::new().backward(&mut g, &store, y).unwrap();
    let grad = |p| store.grad(p).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(grad(&pa), vec![0.0, 10.0, 100.0]);
    assert_eq!(grad(&pb), vec![0.0, 0.0, 0.0]);
    assert_eq!(grad(&pc), vec![1.0, 0.0, 0.0]);
}

#[test]
fn gradients_match_finite_differences() {
    // Values at least 0.1 apart at every position, so no step of the
    // difference quotient crosses a tie.
    let a = [0.3f32, -0.8, 1.2, 0.0, 2.0];
    let b = [0.5f32, -1.0, 0.4, 0.6, 1.1];
    let c = [-0.2f32, 0.9, 0.8, 0.3, 1.5];
    check(
        &|g, p| {
            let y = g.maximum(p[0], p[1])?;
            loss(g, y)
        },
        &[&a[..], &b[..]],
    );
    check(
        &|g, p| {
            let y = g.max(&[p[0], p[1], p[2]])?;
            loss(g, y)
        },
        &[&a[..], &b[..], &c[..]],
    );
    // One value listed twice: its gradient counts once per position.
    check(
        &|g, p| {
            let y = g.max(&[p[0], p[1], p[0]])?;
            loss(g, y)
        },
        &[&a[..], &b[..]],
    );
}

#[test]
fn shape_errors() {
    let mut g = Graph::new();
    let a = g.input(vec_t(&[1.0, 2.0]));
    let b = g.input(vec_t(&[1.0, 2.0, 3.0]));
    assert_eq!(
        g.maximum(a, b).unwrap_err().to_string(),
        "maximum: expected two arguments of one shape, given [2], [3]"
    );
    assert_eq!(
        g.max(&[a, b]).unwrap_err().to_string(),
        "max: expected at least one argument, all of one shape, given [2], [3]"
    );
    assert_eq!(
        g.max(&[]).unwrap_err().to_string(),
        "max: expected at least one argument, all of one shape, given "
    );
}

#[test]
fn batched_equals_single() {
    let mut g = Graph::new();
    let a = g.input(vec_t(&[1.0; 5]));
    let m = g.maximum(a, a).unwrap();
    let l = g.max(&[a, a, a]).unwrap();
    for batch in 2..=4 {
        check_batching(
            g.op(m.node()),
            &instances(&[&[5], &[5]], &[], batch),
            0,
            0.0,
        )
        .unwrap();
        check_batching(
            g.op(l.node()),
            &instances(&[&[5], &[5], &[5]], &[], batch),
            0,
            0.0,
        )
        .unwrap();
        let m23: &[usize] = &[2, 3];
        check_batching(g.op(l.node()), &instances(&[m23; 3], &[], batch), 0, 0.0).unwrap();
    }
}
