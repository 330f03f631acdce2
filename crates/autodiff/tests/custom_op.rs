//! A user-defined fused op, written only through the public [`Op`] trait
//! and the `Backend` kernels, with the checks every op should pass: values,
//! gradients against finite differences, batched calls against single ones,
//! and shape errors. (The same op is the example of the crate docs.)

mod common;

use std::sync::Arc;

use common::vec_t;
use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{
    ArgRole, Attr, Backward, Expr, Forward, Graph, Op, ParamStore, Sequential, ShapeError,
};
use sheaf_tensor::{Binary, DType, Shape, Tensor, TensorError, Unary};

/// `swish(x) = x σ(x)`, fused into one node; `σ(x)` is saved for backward.
struct Swish;

impl Op for Swish {
    fn name(&self) -> &'static str {
        "swish"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [x] => Ok(*x),
            _ => Err(ShapeError::expected("one argument")),
        }
    }
    fn aux_shape(&self, out: &Shape, _args: &[Shape], _attr: Attr) -> Option<Shape> {
        Some(*out)
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let (be, x) = (cx.backend, &cx.args[0]);
        let mut s = Tensor::zeros(x.shape(), DType::F32, be.device())?;
        be.unary(Unary::Sigmoid, x, s.view_mut()?)?;
        be.binary(Binary::Mul, x, &s, cx.out)?;
        if let Some(aux) = cx.aux {
            be.copy_rows(&s, 0, aux, 0, s.num_rows())?;
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let (be, x, dy) = (cx.backend, &cx.args[0], cx.dout);
        let s = cx.aux.ok_or(TensorError::InvalidArgument {
            op: "swish",
            arg: "aux",
            reason: "must hold sigmoid(x)",
        })?;
        let Some(dx) = cx.dargs[0].as_mut() else {
            return Ok(());
        };
        // d(x σ(x))/dx = σ + x σ (1 - σ)
        be.mul_acc(dy, s, dx.reborrow())?;
        let mut t = Tensor::zeros(x.shape(), DType::F32, be.device())?;
        be.binary(Binary::Mul, dy, x, t.view_mut()?)?;
        be.unary_bwd(Unary::Sigmoid, x, s, &t, dx.reborrow())
    }
}

/// Sum of all elements of a stacked `[b, n]` block (as in tests/core.rs).
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

fn swish_ref(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

const X: [f32; 6] = [-2.5, -0.7, 0.0, 0.3, 1.1, 3.0];

#[test]
fn swish_values() {
    let swish: Arc<dyn Op> = Arc::new(Swish);
    let mut g = Graph::new();
    let x = g.input(vec_t(&X));
    let y = g.apply(&swish, &[x], 0).unwrap();
    let v = Sequential::new()
        .forward(&mut g, &ParamStore::new(), y)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for (got, x) in v.iter().zip(X) {
        assert!((got - swish_ref(x)).abs() < 1e-6, "swish({x}) = {got}");
    }
}

#[test]
fn swish_gradients_match_finite_differences() {
    let swish: Arc<dyn Op> = Arc::new(Swish);
    let sum: Arc<dyn Op> = Arc::new(SumAll);
    let mut store = ParamStore::new();
    let p = store.add("x", vec_t(&X)).unwrap();
    // swish(x) + swish(swish(x)) * x: the op twice on one node's output, its
    // output used twice.
    let build = move |g: &mut Graph, xs: &[Expr]| {
        let y = g.apply(&swish, &[xs[0]], 0)?;
        let z = g.apply(&swish, &[y], 0)?;
        let zx = g.cmult(z, xs[0])?;
        let t = g.add(y, zx)?;
        g.apply(&sum, &[t], 0)
    };
    check_gradients(&mut store, &[p], &build, GradCheck::default()).unwrap();
}

#[test]
fn swish_batches_like_single_calls() {
    let instances: Vec<Instance> = (0..4)
        .map(|k| Instance {
            args: vec![vec_t(
                &(0..7)
                    .map(|i| ((i * 3 + k) as f32 * 0.61).sin() * 3.0)
                    .collect::<Vec<_>>(),
            )],
            data: 0,
            seed: k as u64,
        })
        .collect();
    check_batching(&Swish, &instances, 0, 0.0).unwrap();
    // Nodes of one Arc share a signature, so an executor may batch them.
    let swish: Arc<dyn Op> = Arc::new(Swish);
    let mut g = Graph::new();
    let a = g.input(vec_t(&X));
    let b = g.input(vec_t(&X));
    let ya = g.apply(&swish, &[a], 0).unwrap();
    let yb = g.apply(&swish, &[b], 0).unwrap();
    assert_eq!(g.node(ya.node()).sig(), g.node(yb.node()).sig());
}

#[test]
fn swish_shape_errors() {
    let swish: Arc<dyn Op> = Arc::new(Swish);
    let mut g = Graph::new();
    let a = g.input(vec_t(&[1.0, 2.0, 3.0]));
    let err = g.apply(&swish, &[a, a], 0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "swish: expected one argument, given [3], [3]"
    );
}

/// Swish whose backward adds `offset * dy`: a wrong gradient, off by
/// `offset` per element, that a gradient check must catch.
struct SkewedSwish {
    offset: f32,
}

impl Op for SkewedSwish {
    fn name(&self) -> &'static str {
        "skewed_swish"
    }
    fn infer_shape(&self, args: &[Shape], attr: Attr) -> Result<Shape, ShapeError> {
        Swish.infer_shape(args, attr)
    }
    fn aux_shape(&self, out: &Shape, args: &[Shape], attr: Attr) -> Option<Shape> {
        Swish.aux_shape(out, args, attr)
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        Swish.forward(cx)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        Swish.backward(cx)?;
        let (be, dy) = (cx.backend, cx.dout);
        let skew = Tensor::from_vec(vec![self.offset; dy.numel()], dy.shape())?;
        if let Some(dx) = cx.dargs[0].as_mut() {
            be.mul_acc(dy, &skew, dx.reborrow())?;
        }
        Ok(())
    }
}

/// The check itself is tested: gradients off by 0.3% of their size, or by
/// 2e-3 absolute, fail it (the old atol = rtol = 1e-2 let both through),
/// and the exact ones pass with the same settings.
#[test]
fn gradient_check_fails_on_slightly_wrong_backward() {
    let sum: Arc<dyn Op> = Arc::new(SumAll);
    let check = |op: Arc<dyn Op>, scale: f32| {
        let sum = sum.clone();
        let mut store = ParamStore::new();
        let xs: Vec<f32> = X.iter().map(|x| x * scale).collect();
        let p = store.add("x", vec_t(&xs)).unwrap();
        let build = move |g: &mut Graph, xs: &[Expr]| {
            let y = g.apply(&op, &[xs[0]], 0)?;
            g.apply(&sum, &[y], 0)
        };
        check_gradients(&mut store, &[p], &build, GradCheck::default())
    };
    let skewed = |offset| -> Arc<dyn Op> { Arc::new(SkewedSwish { offset }) };
    for scale in [1.0, 0.01] {
        check(Arc::new(Swish), scale).unwrap();
        check(skewed(0.0), scale).unwrap();
        let err = check(skewed(2e-3), scale).unwrap_err().to_string();
        assert!(err.contains("gradient check failed for x"), "{err}");
    }
    // Relative: swish'(3) is about 1.09; 0.3% of it is 3.3e-3.
    let err = check(skewed(3.3e-3), 1.0).unwrap_err().to_string();
    assert!(err.contains("gradient check failed"), "{err}");
}
