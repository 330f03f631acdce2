//! Softmax family: softmax, log_softmax, pick_neg_log_softmax.

use std::sync::Arc;

use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{
    ArgRole, Attr, Backward, Expr, Forward, Graph, GraphError, Op, ParamStore, Sequential,
    ShapeError,
};
use sheaf_tensor::{Shape, Tensor};

/// Sum of all elements of a stacked `[b, n]` block (as in core.rs): the
/// scalar loss of the gradient checks.
struct SumAll;

impl Op for SumAll {
    fn name(&self) -> &'static str {
        "sum_all"
    }
    fn arg_role(&self, _i: usize, _n: usize) -> ArgRole {
        ArgRole::Stack
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [_] => Ok(Shape::from([1])),
            _ => Err(ShapeError::expected("one argument")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let x = cx.args[0].as_slice::<f32>()?;
        let b = cx.out.num_rows();
        let n = x.len() / b.max(1);
        let out = cx.out.into_mut_slice::<f32>()?;
        for (r, o) in out.iter_mut().enumerate() {
            *o = x[r * n..(r + 1) * n].iter().sum();
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let dy = cx.dout.to_vec::<f32>()?;
        if let Some(dx) = cx.dargs[0].as_mut() {
            let dx = dx.as_mut_slice::<f32>()?;
            let n = dx.len() / dy.len().max(1);
            for (r, d) in dy.iter().enumerate() {
                dx[r * n..(r + 1) * n].iter_mut().for_each(|v| *v += d);
            }
        }
        Ok(())
    }
}

fn sum_all() -> Arc<dyn Op> {
    Arc::new(SumAll)
}

fn vec_t(v: &[f32]) -> Tensor {
    Tensor::from_slice(v, [v.len()]).unwrap()
}

/// `n` values in about [-1, 1], different for each `salt`.
fn wavy(n: usize, salt: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 1.37 + salt) * 0.91).sin())
        .collect()
}

type Build = dyn Fn(&mut Graph, &[Expr]) -> sheaf_autodiff::Result<Expr>;

/// Finite-difference check of `build` with dense parameters `x0, x1, ...`.
fn check(build: &Build, inputs: &[&[f32]]) {
    let mut store = ParamStore::new();
    let params: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, v)| store.add(&format!("x{i}"), vec_t(v)).unwrap())
        .collect();
    check_gradients(&mut store, &params, build, GradCheck::default()).unwrap();
}

/// `sum(w * f(x))` with fixed weights `w` (the sum of a softmax alone is
/// constant, so its gradient would be zero).
fn weighted(f: fn(&mut Graph, Expr) -> sheaf_autodiff::Result<Expr>) -> Box<Build> {
    let s = sum_all();
    Box::new(move |g: &mut Graph, p: &[Expr]| {
        let y = f(g, p[0])?;
        let w = g.input(vec_t(&wavy(6, 2.0)));
        let h = g.cmult(y, w)?;
        g.apply(&s, &[h], 0)
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
