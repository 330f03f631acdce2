//! Matrix products: `matmul`, `affine`, `linear`, `linear_sum`.

mod common;

use common::{assert_close, check_shapes, instances, loss, tensor, value};
use sheaf_autodiff::testing::check_batching;
use sheaf_autodiff::{Expr, Graph};
use sheaf_tensor::{Shape, Tensor, Unary};

#[test]
fn matmul_values() {
    let mut g = Graph::new();
    let a = g.input(Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]).unwrap());
    let b = g.input(Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], [3, 2]).unwrap());
    let v = g.input(Tensor::from_slice(&[1.0f32, -1.0, 2.0], [3]).unwrap());
    let ab = g.matmul(a, b).unwrap();
    let av = g.matmul(a, v).unwrap();
    assert_eq!(g.shape(ab).unwrap(), Shape::from([2, 2]));
    assert_eq!(g.shape(av).unwrap(), Shape::from([2]));
    assert_close(&value(&mut g, ab), &[4.0, 5.0, 10.0, 11.0]);
    assert_close(&value(&mut g, av), &[5.0, 11.0]);
}

#[test]
fn matmul_gradients() {
    check_shapes(
        &|g, p| {
            let y = g.matmul(p[0], p[1])?;
            loss(g, y)
        },
        &[&[3, 4], &[4, 2]],
    );
    check_shapes(
        &|g, p| {
            let y = g.matmul(p[0], p[1])?;
            loss(g, y)
        },
        &[&[3, 4], &[4]],
    );
    // A repeated argument (a square matrix times itself), through a node.
    check_shapes(
        &|g, p| {
            let t = g.tanh(p[0])?;
            let y = g.matmul(t, t)?;
            loss(g, y)
        },
        &[&[3, 3]],
    );
}

#[test]
fn matmul_batches_like_single_calls() {
    let mut g = Graph::new();
    let a = g.input(tensor(&[3, 4], 0.0));
    let b = g.input(tensor(&[4, 2], 1.0));
    let v = g.input(tensor(&[4], 1.0));
    let ab = g.matmul(a, b).unwrap();
    let av = g.matmul(a, v).unwrap();
    for b in 3..=5 {
        check_batching(
            g.op(ab.node()),
            &instances(&[&[3, 4], &[4, 2]], &[], b),
            0,
            0.0,
        )
        .unwrap_or_else(|m| panic!("{m}"));
        check_batching(
            g.op(av.node()),
            &instances(&[&[3, 4], &[4]], &[], b),
            0,
            0.0,
        )
        .unwrap_or_else(|m| panic!("{m}"));
    }
}

#[test]
fn matmul_shape_errors() {
    let mut g = Graph::new();
    let a = g.input(tensor(&[3, 4], 0.0));
    let b = g.input(tensor(&[3, 2], 0.0));
    let v = g.input(tensor(&[4], 0.0));
    let c = g.input(tensor(&[2, 3, 4], 0.0));
    let msg = "matmul: expected a matrix [m, k] and a matrix [k, n] or a vector [k], given";
    assert_eq!(
        g.matmul(a, b).unwrap_err().to_string(),
        format!("{msg} [3, 4], [3, 2]")
    );
    assert_eq!(
        g.matmul(v, a).unwrap_err().to_string(),
        format!("{msg} [4], [3, 4]")
    );
    assert_eq!(
        g.matmul(c, v).unwrap_err().to_string(),
        format!("{msg} [2, 3, 4], [4]")
    );
}

#[test]
fn affine_values() {
    let mut g = Graph::new();
    let bias = g.input(Tensor::from_slice(&[0.5f32, -0.5], [2]).unwrap());
    let w1 = g.input(Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]).unwrap());
    let x1 = g.input(Tensor::from_slice(&[1.0f32, -1.0, 2.0], [3]).unwrap());
    let w2 = g.input(Tensor::from_slice(&[2.0f32, 0.0], [2, 1]).unwrap());
    let x2 = g.input(Tensor::from_slice(&[3.0f32], [1]).unwrap());
    let y = g.affine(bias, &[(w1, x1), (w2, x2)]).unwrap();
    let l = g.linear(w1, x1).unwrap();
    let s = g.linear_sum(&[(w1, x1), (w2, x2)]).unwrap();
    assert_close(&value(&mut g, y), &[5.0 + 6.0 + 0.5, 11.0 - 0.5]);
    assert_close(&value(&mut g, l), &[5.0, 11.0]);
    assert_close(&value(&mut g, s), &[11.0, 11.0]);
}

#[test]
fn affine_gradients() {
    // bias, W1, x1, W2, x2; the inputs also through a node (tanh).
    check_shapes(
        &|g, p| {
            let x2 = g.tanh(p[4])?;
            let y = g.affine(p[0], &[(p[1], p[2]), (p[3], x2)])?;
            loss(g, y)
        },
        &[&[3], &[3, 4], &[4], &[3, 2], &[2]],
    );
    check_shapes(
        &|g, p| {
            let y = g.linear(p[0], p[1])?;
            loss(g, y)
        },
        &[&[3, 4], &[4]],
    );
    check_shapes(
        &|g, p| {
            let y = g.linear_sum(&[(p[0], p[1]), (p[2], p[3])])?;
            loss(g, y)
        },
        &[&[2, 4], &[4], &[2, 3], &[3]],
    );
    // The same weight in two terms, and the same input twice.
    check_shapes(
        &|g, p| {
            let y = g.affine(p[0], &[(p[1], p[2]), (p[1], p[2])])?;
            loss(g, y)
        },
        &[&[3], &[3, 4], &[4]],
    );
}

#[test]
fn affine_batches_like_single_calls() {
    let mut g = Graph::new();
    let bias = g.input(tensor(&[3], 0.0));
    let w1 = g.input(tensor(&[3, 4], 1.0));
    let x1 = g.input(tensor(&[4], 2.0));
    let w2 = g.input(tensor(&[3, 2], 3.0));
    let x2 = g.input(tensor(&[2], 4.0));
    let y = g.affine(bias, &[(w1, x1), (w2, x2)]).unwrap();
    let l = g.linear(w1, x1).unwrap();
    let s = g.linear_sum(&[(w1, x1), (w2, x2)]).unwrap();
    for b in 3..=5 {
        let inst = instances(&[&[3], &[3, 4], &[4], &[3, 2], &[2]], &[0, 1, 3], b);
        check_batching(g.op(y.node()), &inst, 0, 1e-5).unwrap_or_else(|m| panic!("{m}"));
        let inst = instances(&[&[3, 4], &[4]], &[0], b);
        check_batching(g.op(l.node()), &inst, 0, 1e-5).unwrap_or_else(|m| panic!("{m}"));
        let inst = instances(&[&[3, 4], &[4], &[3, 2], &[2]], &[0, 2], b);
        check_batching(g.op(s.node()), &inst, 0, 1e-5).unwrap_or_else(|m| panic!("{m}"));
    }
}

#[test]
fn affine_signature_shares_weights_only() {
    let mut g = Graph::new();
    let bias = g.input(tensor(&[3], 0.0));
    let w = g.input(tensor(&[3, 4], 1.0));
    let w_other = g.input(tensor(&[3, 4], 2.0));
    let xa = g.input(tensor(&[4], 3.0));
    let xb = g.input(tensor(&[4], 4.0));
    let a = g.affine(bias, &[(w, xa)]).unwrap();
    let b = g.affine(bias, &[(w, xb)]).unwrap();
    let c = g.affine(bias, &[(w_other, xb)]).unwrap();
    let sig = |e: Expr| g.node(e.node()).sig();
    assert_eq!(sig(a), sig(b));
    assert_ne!(sig(a), sig(c));
}

#[test]
fn affine_shape_errors() {
    let mut g = Graph::new();
    let bias = g.input(tensor(&[3], 0.0));
    let w1 = g.input(tensor(&[3, 4], 0.0));
    let x1 = g.input(tensor(&[4], 0.0));
    let w2 = g.input(tensor(&[2, 2], 0.0));
    let x5 = g.input(tensor(&[5], 0.0));
    let err = |r: sheaf_autodiff::Result<Expr>| r.unwrap_err().to_string();
    assert_eq!(
        err(g.affine(bias, &[])),
        "affine: expected a bias [out] and at least one (weight [out, in], input [in]) pair, given [3]"
    );
    assert_eq!(
        err(g.affine(w1, &[(w1, x1)])),
        "affine: expected a bias vector [out], given [3, 4], [3, 4], [4]"
    );
    assert_eq!(
        err(g.affine(bias, &[(w1, x1), (w2, x1)])),
        "affine: expected weight 2 of shape [3, in] (out = 3, from the bias), given [3], [3, 4], [4], [2, 2], [4]"
    );
    assert_eq!(
        err(g.affine(bias, &[(w1, x5)])),
        "affine: expected input 1 of shape [4] (the columns of weight 1), given [3], [3, 4], [5]"
    );
    assert_eq!(
        err(g.linear(x1, x1)),
        "linear: expected weight 1 of shape [out, in], given [4], [4]"
    );
    assert_eq!(
        err(g.linear_sum(&[(w1, x1), (w2, x1)])),
        "linear: expected weight 2 of shape [3, in] (out = 3, from weight 1), given [3, 4], [4], [2, 2], [4]"
    );
    assert_eq!(
        err(g.linear_sum(&[])),
        "linear: expected at least one (weight [out, in], input [in]) pair, given "
    );
}

type Act = (Unary, fn(&mut Graph, Expr) -> sheaf_autodiff::Result<Expr>);
const ACTS: [Act; 3] = [
    (Unary::Relu, Graph::relu),
    (Unary::Tanh, Graph::tanh),
    (Unary::Sigmoid, Graph::sigmoid),
];

#[test]
fn affine_act_equals_affine_then_the_activation() {
    for (act, f) in ACTS {
        let mut g = Graph::new();
        let bias = g.input(Tensor::from_slice(&[0.5f32, -0.5, 0.0], [3]).unwrap());
        let w = g.input(tensor(&[3, 4], 1.0));
        let x = g.input(tensor(&[4], 2.0));
        let w2 = g.input(tensor(&[3, 2], 3.0));
        let x2 = g.input(tensor(&[2], 4.0));
        let fused = g.affine_act(act, bias, &[(w, x), (w2, x2)]).unwrap();
        let pre = g.affine(bias, &[(w, x), (w2, x2)]).unwrap();
        let two = f(&mut g, pre).unwrap();
        assert_eq!(g.op(fused.node()).name(), format!("affine_{act}"));
        let (a, b) = (value(&mut g, fused), value(&mut g, two));
        assert_eq!(a, b, "{act}");
    }
}

#[test]
fn affine_act_gradients() {
    for (act, _) in ACTS {
        // bias, W1, x1, W2, x2; an input through a node (tanh).
        check_shapes(
            &move |g, p| {
                let x2 = g.tanh(p[4])?;
                let y = g.affine_act(act, p[0], &[(p[1], p[2]), (p[3], x2)])?;
                loss(g, y)
            },
            &[&[5], &[5, 4], &[4], &[5, 2], &[2]],
        );
    }
    // Relu's kink lies away from every pre-activation of that check (its
    // finite differences would straddle it otherwise), and both sides of it
    // are taken.
    let mut g = Graph::new();
    let p: Vec<Expr> = [&[5][..], &[5, 4], &[4], &[5, 2], &[2]]
        .iter()
        .enumerate()
        .map(|(i, s)| g.input(tensor(s, i as f32)))
        .collect();
    let x2 = g.tanh(p[4]).unwrap();
    let pre = g.affine(p[0], &[(p[1], p[2]), (p[3], x2)]).unwrap();
    let pre = value(&mut g, pre);
    assert!(pre.iter().all(|v| v.abs() > 1e-2), "{pre:?}");
    assert!(
        pre.iter().any(|&v| v > 0.0) && pre.iter().any(|&v| v < 0.0),
        "{pre:?}"
    );
}

#[test]
fn affine_act_batches_like_single_calls() {
    for (act, _) in ACTS {
        let mut g = Graph::new();
        let bias = g.input(tensor(&[3], 0.0));
        let (w1, x1) = (g.input(tensor(&[3, 4], 1.0)), g.input(tensor(&[4], 2.0)));
        let y = g.affine_act(act, bias, &[(w1, x1)]).unwrap();
        for b in 3..=5 {
            let inst = instances(&[&[3], &[3, 4], &[4]], &[0, 1], b);
            check_batching(g.op(y.node()), &inst, 0, 1e-5).unwrap_or_else(|m| panic!("{m}"));
        }
    }
}

#[test]
fn affine_act_signature_and_errors() {
    let mut g = Graph::new();
    let bias = g.input(tensor(&[3], 0.0));
    let w = g.input(tensor(&[3, 4], 1.0));
    let x = g.input(tensor(&[4], 3.0));
    let plain = g.affine(bias, &[(w, x)]).unwrap();
    let relu = g.affine_act(Unary::Relu, bias, &[(w, x)]).unwrap();
    let relu2 = g.affine_act(Unary::Relu, bias, &[(w, x)]).unwrap();
    let tanh = g.affine_act(Unary::Tanh, bias, &[(w, x)]).unwrap();
    let sig = |e: Expr| g.node(e.node()).sig();
    assert_eq!(sig(relu), sig(relu2));
    assert_ne!(sig(relu), sig(plain));
    assert_ne!(sig(relu), sig(tanh));
    let err = |r: sheaf_autodiff::Result<Expr>| r.unwrap_err().to_string();
    assert_eq!(
        err(g.affine_act(Unary::Exp, bias, &[(w, x)])),
        "affine_act: exp cannot be fused into an affine (relu, tanh and sigmoid can)"
    );
    assert_eq!(
        err(g.affine_act(Unary::Relu, w, &[(w, x)])),
        "affine_relu: expected a bias vector [out], given [3, 4], [3, 4], [4]"
    );
}

/// Inputs of rows `[T, in]` (a sequence's positions): each row as the
/// vector alone would give, `[T, out]`, in one product over every row of a
/// batch; gradients against finite differences; batching; shape errors.
#[test]
fn affine_over_rows_equals_each_row_alone() {
    let mut g = Graph::new();
    let bias = g.input(tensor(&[3], 0.0));
    let w1 = g.input(tensor(&[3, 4], 1.0));
    let w2 = g.input(tensor(&[3, 2], 2.0));
    let x1 = tensor(&[5, 4], 3.0);
    let x2 = tensor(&[5, 2], 4.0);
    let (r1, r2) = (g.input(x1.clone()), g.input(x2.clone()));
    let y = g.affine(bias, &[(w1, r1), (w2, r2)]).unwrap();
    let z = g.affine_act(Unary::Tanh, bias, &[(w1, r1)]).unwrap();
    assert_eq!(g.shape(y).unwrap(), Shape::from([5, 3]));
    let (got, got_z) = (value(&mut g, y), value(&mut g, z));
    for t in 0..5 {
        let row = |x: &Tensor, n: usize| x.rows(t..t + 1).unwrap().reshape([n]).unwrap();
        let (a, b) = (g.input(row(&x1, 4)), g.input(row(&x2, 2)));
        let want = g.affine(bias, &[(w1, a), (w2, b)]).unwrap();
        assert_close(&got[3 * t..3 * t + 3], &value(&mut g, want));
        let want = g.affine_act(Unary::Tanh, bias, &[(w1, a)]).unwrap();
        assert_close(&got_z[3 * t..3 * t + 3], &value(&mut g, want));
    }
    check_shapes(
        &|g, p| {
            let x2 = g.tanh(p[4])?;
            let y = g.affine(p[0], &[(p[1], p[2]), (p[3], x2)])?;
            loss(g, y)
        },
        &[&[3], &[3, 4], &[6, 4], &[3, 2], &[6, 2]],
    );
    check_shapes(
        &|g, p| {
            let y = g.affine_act(Unary::Sigmoid, p[0], &[(p[1], p[2])])?;
            loss(g, y)
        },
        &[&[3], &[3, 4], &[6, 4]],
    );
    for b in 3..=5 {
        let inst = instances(&[&[3], &[3, 4], &[5, 4], &[3, 2], &[5, 2]], &[0, 1, 3], b);
        check_batching(g.op(y.node()), &inst, 0, 1e-5).unwrap_or_else(|m| panic!("{m}"));
    }
    let err = |r: sheaf_autodiff::Result<Expr>| r.unwrap_err().to_string();
    let (v1, r6) = (g.input(tensor(&[4], 0.0)), g.input(tensor(&[6, 2], 0.0)));
    let e = err(g.affine(bias, &[(w1, r1), (w2, r6)]));
    assert!(e.contains("input 2 of shape [5] + [2]"), "{e}");
    let e = err(g.affine(bias, &[(w1, r1), (w1, v1)]));
    assert!(e.contains("input 2 of shape [5] + [4]"), "{e}");
    let cube = g.input(tensor(&[2, 5, 4], 0.0));
    assert!(g.affine(bias, &[(w1, cube)]).is_err());
}
