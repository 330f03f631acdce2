//! Scalars against vectors: `broadcast` and `scale_by`.

mod common;

use common::{assert_close, check, check_shapes, instances, loss, value, vec_t};
use sheaf_autodiff::testing::check_batching;
use sheaf_autodiff::Graph;
use sheaf_tensor::Tensor;

#[test]
fn values() {
    let mut g = Graph::new();
    let s = g.input(vec_t(&[2.5]));
    let x = g.input(vec_t(&[1.0, -2.0, 4.0]));
    let m = g.input(Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap());
    let b = g.broadcast(s, 4).unwrap();
    let y = g.scale_by(x, s).unwrap();
    let z = g.scale_by(m, s).unwrap();
    assert_close(&value(&mut g, b), &[2.5; 4]);
    assert_close(&value(&mut g, y), &[2.5, -5.0, 10.0]);
    assert_close(&value(&mut g, z), &[2.5, 5.0, 7.5, 10.0]);
}

#[test]
fn gradients() {
    check_shapes(
        &|g, p| {
            let y = g.broadcast(p[0], 5)?;
            loss(g, y)
        },
        &[&[1]],
    );
    check_shapes(
        &|g, p| {
            let y = g.scale_by(p[0], p[1])?;
            loss(g, y)
        },
        &[&[4], &[1]],
    );
    check_shapes(
        &|g, p| {
            let y = g.scale_by(p[0], p[1])?;
            loss(g, y)
        },
        &[&[2, 3], &[1]],
    );
    // The scalar scales itself: both gradients land on one parameter.
    check(
        &|g, p| {
            let y = g.scale_by(p[0], p[0])?;
            loss(g, y)
        },
        &[&[0.7f32][..]],
    );
}

#[test]
fn errors() {
    let mut g = Graph::new();
    let v = g.input(vec_t(&[1.0, 2.0]));
    let s = g.input(vec_t(&[3.0]));
    assert_eq!(
        g.broadcast(v, 3).unwrap_err().to_string(),
        "broadcast: expected one argument of shape [1], given [2]"
    );
    assert_eq!(
        g.broadcast(s, 0).unwrap_err().to_string(),
        "broadcast: cannot broadcast to 0 elements"
    );
    assert_eq!(
        g.scale_by(s, v).unwrap_err().to_string(),
        "scale_by: expected a value and a scalar of shape [1], given [1], [2]"
    );
}

#[test]
fn batched_equals_single() {
    let mut g = Graph::new();
    let s = g.input(vec_t(&[3.0]));
    let x = g.input(vec_t(&[1.0; 4]));
    let b = g.broadcast(s, 6).unwrap();
    let y = g.scale_by(x, s).unwrap();
    for batch in 2..=4 {
        check_batching(g.op(b.node()), &instances(&[&[1]], &[], batch), 6, 0.0).unwrap();
        check_batching(
            g.op(y.node()),
            &instances(&[&[4], &[1]], &[], batch),
            0,
            0.0,
        )
        .unwrap();
    }
}
