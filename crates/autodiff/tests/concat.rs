//! Vectors: `concat` and `slice`.

mod common;

use common::{check_shapes, instances, loss, tensor, value, vec_t};
use sheaf_autodiff::testing::check_batching;
use sheaf_autodiff::{Expr, Graph, GraphError};
use sheaf_tensor::Shape;

#[test]
fn concat_and_slice_values() {
    let mut g = Graph::new();
    let a = g.input(vec_t(&[1.0, 2.0]));
    let b = g.input(vec_t(&[3.0]));
    let c = g.input(vec_t(&[4.0, 5.0, 6.0]));
    let abc = g.concat(&[a, b, c]).unwrap();
    let one = g.concat(&[c]).unwrap();
    let mid = g.slice(abc, 1, 4).unwrap();
    let all = g.slice(c, 0, 3).unwrap();
    assert_eq!(g.shape(abc).unwrap(), Shape::from([6]));
    assert_eq!(g.shape(mid).unwrap(), Shape::from([3]));
    assert_eq!(value(&mut g, abc), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(value(&mut g, one), [4.0, 5.0, 6.0]);
    assert_eq!(value(&mut g, mid), [2.0, 3.0, 4.0]);
    assert_eq!(value(&mut g, all), [4.0, 5.0, 6.0]);
}

#[test]
fn concat_and_slice_gradients() {
    check_shapes(
        &|g, p| {
            let y = g.concat(&[p[0], p[1], p[2]])?;
            let t = g.tanh(y)?;
            loss(g, t)
        },
        &[&[2], &[3], &[1]],
    );
    // A vector concatenated with itself.
    check_shapes(
        &|g, p| {
            let y = g.concat(&[p[0], p[1], p[0]])?;
            loss(g, y)
        },
        &[&[3], &[2]],
    );
    check_shapes(
        &|g, p| {
            let y = g.slice(p[0], 2, 5)?;
            let t = g.tanh(y)?;
            loss(g, t)
        },
        &[&[7]],
    );
    // Overlapping slices of one vector accumulate.
    check_shapes(
        &|g, p| {
            let a = g.slice(p[0], 0, 4)?;
            let b = g.slice(p[0], 2, 6)?;
            let y = g.cmult(a, b)?;
            loss(g, y)
        },
        &[&[6]],
    );
}

#[test]
fn concat_and_slice_batch_like_single_calls() {
    let mut g = Graph::new();
    let a = g.input(tensor(&[2], 0.0));
    let b = g.input(tensor(&[3], 1.0));
    let c = g.input(tensor(&[1], 2.0));
    let x = g.input(tensor(&[7], 3.0));
    let cat = g.concat(&[a, b, c]).unwrap();
    let sl = g.slice(x, 2, 5).unwrap();
    let head = g.slice(x, 0, 1).unwrap();
    for batch in 3..=5 {
        check_batching(
            g.op(cat.node()),
            &instances(&[&[2], &[3], &[1]], &[], batch),
            0,
            0.0,
        )
        .unwrap_or_else(|m| panic!("{m}"));
        for e in [sl, head] {
            let attr = g.node(e.node()).attr();
            check_batching(g.op(e.node()), &instances(&[&[7]], &[], batch), attr, 0.0)
                .unwrap_or_else(|m| panic!("{m}"));
        }
    }
}

#[test]
fn slice_range_is_part_of_the_signature() {
    let mut g = Graph::new();
    let x = g.input(tensor(&[7], 0.0));
    let y = g.input(tensor(&[7], 1.0));
    let a = g.slice(x, 2, 5).unwrap();
    let b = g.slice(y, 2, 5).unwrap();
    let c = g.slice(x, 1, 4).unwrap();
    let sig = |e: Expr| g.node(e.node()).sig();
    assert_eq!(sig(a), sig(b));
    assert_ne!(sig(a), sig(c));
}

#[test]
fn concat_and_slice_errors() {
    let mut g = Graph::new();
    let v = g.input(tensor(&[3], 0.0));
    let m = g.input(tensor(&[2, 2], 0.0));
    let x = g.input(tensor(&[5], 0.0));
    let err = |r: sheaf_autodiff::Result<Expr>| r.unwrap_err().to_string();
    assert_eq!(
        err(g.concat(&[v, m])),
        "concat: expected at least one argument, all vectors [n], given [3], [2, 2]"
    );
    assert_eq!(
        err(g.concat(&[])),
        "concat: expected at least one argument, all vectors [n], given "
    );
    assert_eq!(
        err(g.slice(m, 0, 1)),
        "slice: expected a vector [n], given [2, 2]"
    );
    let e = g.slice(x, 2, 7).unwrap_err();
    assert!(matches!(e, GraphError::Data { op: "slice", .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "slice: range 2..7 reaches past the end of a vector of length 5"
    );
    assert_eq!(
        err(g.slice(x, 3, 3)),
        "slice: range 3..3 is empty (start must be below end)"
    );
    assert_eq!(
        err(g.slice(x, 4, 1)),
        "slice: range 4..1 is empty (start must be below end)"
    );
    assert_eq!(
        err(g.slice(x, 1 << 33, (1 << 33) + 1)),
        "slice: range 8589934592..8589934593 reaches past the end of a vector of length 5"
    );
    // Rejected nodes are not added.
    let n = g.len();
    let _ = g.slice(x, 0, 9);
    assert_eq!(g.len(), n);
}

#[test]
fn slice_run_alone_is_a_view() {
    let store = sheaf_autodiff::ParamStore::new();
    let mut g = Graph::new();
    let x = g.input(sheaf_tensor::Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0], [5]).unwrap());
    let s = g.slice(x, 1, 4).unwrap();
    let v = sheaf_autodiff::Sequential::new()
        .forward(&mut g, &store, s)
        .unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), [2.0, 3.0, 4.0]);
    assert!(v.shares_storage(g.value(x).unwrap()), "slice copied");
}
