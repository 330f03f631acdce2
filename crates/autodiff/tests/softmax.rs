//! Softmax family: softmax, log_softmax, pick_neg_log_softmax.

mod common;

use common::{check, vec_t, wavy, Build};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{Expr, Graph, GraphError, ParamStore, Sequential};
use sheaf_tensor::{Shape, Tensor};

/// `sum(w * f(x))` with fixed weights `w` (the sum of a softmax alone is
/// constant, so its gradient would be zero).
fn weighted(f: fn(&mut Graph, Expr) -> sheaf_autodiff::Result<Expr>) -> Box<Build> {
    Box::new(move |g: &mut Graph, p: &[Expr]| {
        let y = f(g, p[0])?;
        let w = g.input(vec_t(&wavy(6, 2.0)));
        let h = g.cmult(y, w)?;
        g.sum_elems(h)
    })
}

#[test]
fn softmax_gradients_match_finite_differences() {
    let x = wavy(6, 0.4);
    check(&*weighted(Graph::softmax), &[&x]);
    check(&*weighted(Graph::log_softmax), &[&x]);
    // The loss of two classes, summed.
    check(
        &|g, p| {
            let a = g.pick_neg_log_softmax(p[0], 2)?;
            let b = g.pick_neg_log_softmax(p[0], 5)?;
            g.add(a, b)
        },
        &[&x],
    );
}

#[test]
fn softmax_values() {
    let mut store = ParamStore::new();
    let exec = Sequential::new();
    let xs = [0.5f32, -1.0, 2.0, 0.0];
    let p = store.add("x", vec_t(&xs)).unwrap();
    let mut g = Graph::new();
    let x = g.param(&p);
    let sm = g.softmax(x).unwrap();
    let ls = g.log_softmax(x).unwrap();
    let loss = g.pick_neg_log_softmax(x, 2).unwrap();
    assert_eq!(g.shape(loss).unwrap(), Shape::from([1]));
    exec.forward(&mut g, &store, loss).unwrap();
    let z: f32 = xs.iter().map(|v| v.exp()).sum();
    let sm = g.value(sm).unwrap().to_vec::<f32>().unwrap();
    let ls = g.value(ls).unwrap().to_vec::<f32>().unwrap();
    for i in 0..4 {
        assert!((sm[i] - xs[i].exp() / z).abs() < 1e-6);
        assert!((ls[i] - (xs[i] - z.ln())).abs() < 1e-5);
    }
    let l = g.value(loss).unwrap().to_vec::<f32>().unwrap();
    assert!((l[0] + ls[2]).abs() < 1e-5, "{l:?} vs {}", -ls[2]);
    // Gradient of the loss: softmax - onehot(class).
    exec.backward(&mut g, &store, loss).unwrap();
    let dx = store.grad(&p).unwrap().to_vec::<f32>().unwrap();
    for i in 0..4 {
        let want = sm[i] - if i == 2 { 1.0 } else { 0.0 };
        assert!((dx[i] - want).abs() < 1e-6);
    }
}

#[test]
fn losses_of_different_classes_share_a_signature() {
    let mut g = Graph::new();
    let x = g.input(vec_t(&[1.0, 2.0, 3.0]));
    let y = g.input(vec_t(&[3.0, 2.0, 1.0]));
    let a = g.pick_neg_log_softmax(x, 0).unwrap();
    let b = g.pick_neg_log_softmax(y, 2).unwrap();
    assert_eq!(g.node(a.node()).sig(), g.node(b.node()).sig());
}

#[test]
fn softmax_family_batches_like_single_calls() {
    let instances: Vec<Instance> = [1u32, 4, 0, 4, 6]
        .iter()
        .enumerate()
        .map(|(k, &c)| Instance {
            args: vec![vec_t(
                &wavy(7, k as f32)
                    .iter()
                    .map(|v| 3.0 * v)
                    .collect::<Vec<_>>(),
            )],
            data: c,
            seed: k as u64,
        })
        .collect();
    let mut g = Graph::new();
    let x = g.input(vec_t(&wavy(7, 0.0)));
    let nodes = [
        g.softmax(x).unwrap(),
        g.log_softmax(x).unwrap(),
        g.pick_neg_log_softmax(x, 0).unwrap(),
    ];
    for e in nodes {
        let node = e.node();
        for b in 3..=5 {
            check_batching(g.op(node), &instances[..b], g.node(node).attr(), 0.0)
                .unwrap_or_else(|m| panic!("{m}"));
        }
    }
    // A class past the scores is a kernel error.
    let mut bad = instances.clone();
    bad[2].data = 7;
    let loss = nodes[2].node();
    let err = check_batching(g.op(loss), &bad, 0, 0.0).unwrap_err();
    assert!(
        err.starts_with("pick_neg_log_softmax forward: nll_log_softmax failed"),
        "{err}"
    );
}

#[test]
fn softmax_errors() {
    let mut g = Graph::new();
    let m = g.input(Tensor::from_vec(vec![0.0f32; 6], [2, 3]).unwrap());
    let empty = g.input(Tensor::from_vec(Vec::<f32>::new(), [0]).unwrap());
    assert_eq!(
        g.softmax(m).unwrap_err().to_string(),
        "softmax: expected one vector [n] with n >= 1, given [2, 3]"
    );
    assert_eq!(
        g.log_softmax(empty).unwrap_err().to_string(),
        "log_softmax: expected one vector [n] with n >= 1, given [0]"
    );
    assert_eq!(
        g.pick_neg_log_softmax(m, 0).unwrap_err().to_string(),
        "pick_neg_log_softmax: expected one vector [n] with n >= 1, given [2, 3]"
    );
    assert_eq!(
        g.pick_neg_log_softmax(empty, 0).unwrap_err().to_string(),
        "pick_neg_log_softmax: expected one vector [n] with n >= 1, given [0]"
    );
    let x = g.input(vec_t(&[1.0, 2.0, 3.0, 4.0, 5.0]));
    let err = g.pick_neg_log_softmax(x, 5).unwrap_err();
    assert!(
        matches!(
            err,
            GraphError::Data {
                op: "pick_neg_log_softmax",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "pick_neg_log_softmax: class 5 is out of range for 5 classes"
    );
    assert!(g.pick_neg_log_softmax(x, 4).is_ok());
}
