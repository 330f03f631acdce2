//! Helpers shared by the integration tests of this crate: tensor
//! constructors, finite-difference gradient checks, instances for
//! `check_batching`, and a lookup op written through the public [`Op`]
//! trait. Each test file uses only some of them.
#![allow(dead_code)]

use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::testing::Instance;
use sheaf_autodiff::{
    ArgRole, Attr, Backward, Expr, Forward, Graph, Op, ParamStore, Sequential, ShapeError,
};
use sheaf_tensor::{Shape, Tensor};

/// A graph-building function, as `check_gradients` takes it.
pub type Build = dyn Fn(&mut Graph, &[Expr]) -> sheaf_autodiff::Result<Expr>;

/// A vector `[v.len()]` holding `v`.
pub fn vec_t(v: &[f32]) -> Tensor {
    Tensor::from_slice(v, [v.len()]).unwrap()
}

/// `n` values in about [-1, 1], different for each `salt`.
pub fn wavy(n: usize, salt: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 1.37 + salt) * 0.91).sin())
        .collect()
}

/// Finite-difference check of `build` with dense parameters `x0, x1, ...`
/// holding `inputs`.
pub fn check<V: AsRef<[f32]>>(build: &Build, inputs: &[V]) {
    let mut store = ParamStore::new();
    let params: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, v)| store.add(&format!("x{i}"), vec_t(v.as_ref())).unwrap())
        .collect();
    check_gradients(&mut store, &params, build, GradCheck::default()).unwrap();
}

/// Deterministic, varied values in about [-1, 1].
pub fn vals(n: usize, salt: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 + 1.0) * 0.73 + salt * 1.37).sin())
        .collect()
}

/// A tensor of the given shape holding `vals(n, salt)`.
pub fn tensor(shape: &[usize], salt: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(vals(n, salt), Shape::new(shape).unwrap()).unwrap()
}

/// A scalar loss that weighs every element of `y` differently, so a
/// gradient routed to the wrong element is caught: `sum(y * c)`.
pub fn loss(g: &mut Graph, y: Expr) -> sheaf_autodiff::Result<Expr> {
    let shape = g.shape(y)?;
    let c = g.input(tensor(shape.dims(), 9.0));
    let h = g.cmult(y, c)?;
    g.sum_elems(h)
}

/// Finite-difference check of `build` with parameters of the given shapes.
/// Every parameter is also used by a later node (`sum_elems(tanh(p))`,
/// whose backward runs first), so an op that overwrites its arguments'
/// gradients instead of adding to them fails the check.
pub fn check_shapes(build: &Build, shapes: &[&[usize]]) {
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
pub fn instances(shapes: &[&[usize]], shared: &[usize], b: usize) -> Vec<Instance> {
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
pub fn value(g: &mut Graph, e: Expr) -> Vec<f32> {
    let store = ParamStore::new();
    Sequential::new()
        .forward(g, &store, e)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

/// `got` equals `want` up to a relative error of 1e-5.
pub fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (a, b) in got.iter().zip(want) {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

/// Row `data` of a shared `[rows, cols]` table; its backward writes only
/// that row and says so with `touch_rows` (an embedding lookup).
pub struct Lookup;

impl Op for Lookup {
    fn name(&self) -> &'static str {
        "test_lookup"
    }
    fn arg_role(&self, _i: usize, _n: usize) -> ArgRole {
        ArgRole::Share
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [t] if t.rank() == 2 => Ok(Shape::from([t.dims()[1]])),
            _ => Err(ShapeError::expected("one table")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let t = cx.args[0].as_slice::<f32>()?;
        let cols = cx.args[0].row_len();
        let out = cx.out.into_mut_slice::<f32>()?;
        for (b, &r) in cx.data.iter().enumerate() {
            let r = r as usize;
            out[b * cols..(b + 1) * cols].copy_from_slice(&t[r * cols..(r + 1) * cols]);
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let dy = cx.dout.to_vec::<f32>()?;
        let data = cx.data;
        if let Some(dt) = cx.dargs[0].as_mut() {
            let cols = dt.row_len();
            let dt = dt.as_mut_slice::<f32>()?;
            for (b, &r) in data.iter().enumerate() {
                let r = r as usize;
                for c in 0..cols {
                    dt[r * cols + c] += dy[b * cols + c];
                }
            }
            cx.touch_rows(0, data);
        }
        Ok(())
    }
}
