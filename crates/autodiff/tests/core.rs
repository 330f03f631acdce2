//! The tape itself: lazy building, shape errors, handles, incremental
//! forward, gradients of the elementwise ops, threads.

mod common;

use std::sync::Arc;

use common::{check, vec_t};
use sheaf_autodiff::{
    ArgRole, Attr, Backward, Expr, Forward, Graph, GraphError, Op, ParamStore, Sequential,
    ShapeError,
};
use sheaf_tensor::Shape;

/// Sum of all elements of a stacked `[b, n]` block: a user-defined op,
/// written through the public trait exactly as a user would.
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

#[test]
fn building_computes_nothing_and_checks_shapes() {
    let mut g = Graph::new();
    let a = g.input(vec_t(&[1.0, 2.0, 3.0]));
    let b = g.input(vec_t(&[1.0, 2.0, 3.0, 4.0]));
    let t = g.tanh(a).unwrap();
    assert!(matches!(g.value(t), Err(GraphError::NotComputed { .. })));
    let err = g.add(a, b).unwrap_err();
    assert_eq!(
        err.to_string(),
        "add: expected two arguments of equal shape, given [3], [4]"
    );
}

/// Leaves are never planned: they share one signature per kind, so that
/// a graph of many inputs does not carry (and the agenda planner does not
/// size its tables by) a signature per input; ops on them still batch.
#[test]
fn inputs_add_no_signatures() {
    let mut g = Graph::new();
    let mut store = ParamStore::new();
    let p = store.add("p", vec_t(&[1.0, 2.0])).unwrap();
    let xs: Vec<Expr> = (0..1000)
        .map(|i| g.input(vec_t(&[i as f32, 1.0])))
        .collect();
    let w = g.param(&p);
    assert_eq!(
        g.signatures().len(),
        2,
        "one for inputs, one for parameters"
    );
    let sig = |g: &Graph, e: Expr| g.node(e.node()).sig();
    assert_eq!(sig(&g, xs[0]), sig(&g, xs[999]));
    assert_ne!(sig(&g, xs[0]), sig(&g, w));
    let names: Vec<_> = g.signatures().iter().map(|s| s.name).collect();
    assert_ne!(names[0], names[1], "{names:?}");
    let ys: Vec<Expr> = xs.iter().map(|&x| g.tanh(x).unwrap()).collect();
    assert_eq!(g.signatures().len(), 3);
    let total = g.sum(&ys).unwrap();
    let v = Sequential::new().forward(&mut g, &store, total).unwrap();
    let want = [
        (0..1000).map(|i| (i as f32).tanh()).sum::<f32>(),
        1000.0 * 1f32.tanh(),
    ];
    let got = v.to_vec::<f32>().unwrap();
    for (a, b) in got.iter().zip(want) {
        assert!((a - b).abs() <= 1e-4 * b.abs(), "{got:?} vs {want:?}");
    }
}

#[test]
fn foreign_and_stale_handles_are_errors() {
    let mut g1 = Graph::new();
    let mut g2 = Graph::new();
    let a = g1.input(vec_t(&[1.0]));
    let err = g2.tanh(a).unwrap_err();
    assert!(
        matches!(err, GraphError::ForeignExpr { op: "tanh", .. }),
        "{err}"
    );
    g1.clear();
    let err = g1.tanh(a).unwrap_err();
    assert!(
        matches!(err, GraphError::StaleExpr { op: "tanh", .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "tanh: the expression for node #0 is stale (built before Graph::clear)"
    );
}

#[test]
fn forward_values_and_incremental_forward() {
    let store = ParamStore::new();
    let exec = Sequential::new();
    let mut g = Graph::new();
    let x = g.input(vec_t(&[0.5, -1.0, 2.0]));
    let y = g.tanh(x).unwrap();
    let v = exec.forward(&mut g, &store, y).unwrap();
    let want: Vec<f32> = [0.5f32, -1.0, 2.0].iter().map(|v| v.tanh()).collect();
    for (a, b) in v.to_vec::<f32>().unwrap().iter().zip(&want) {
        assert!((a - b).abs() < 1e-6);
    }
    assert_eq!(g.evaluated(), 2);
    // Extend the graph after reading a value; only the new part runs.
    let z = g.scale(y, 2.0).unwrap();
    let w = g.add(z, x).unwrap();
    let v = exec.forward(&mut g, &store, w).unwrap();
    let expect: Vec<f32> = want
        .iter()
        .zip([0.5f32, -1.0, 2.0])
        .map(|(t, x)| 2.0 * t + x)
        .collect();
    assert_eq!(v.to_vec::<f32>().unwrap(), expect);
}

type UnaryFn = fn(&mut Graph, Expr) -> sheaf_autodiff::Result<Expr>;
type BinaryFn = fn(&mut Graph, Expr, Expr) -> sheaf_autodiff::Result<Expr>;
#[test]
fn elementwise_gradients_match_finite_differences() {
    let x: &[f32] = &[0.3, -0.7, 1.1, -0.2, 0.05];
    let y: &[f32] = &[1.3, 0.8, -1.5, 2.0, -0.9];
    let pos: &[f32] = &[0.3, 0.7, 1.1, 2.2, 0.5];
    let s = sum_all();
    let unary: [(&str, UnaryFn); 5] = [
        ("tanh", Graph::tanh),
        ("sigmoid", Graph::sigmoid),
        ("relu", Graph::relu),
        ("exp", Graph::exp),
        ("log", Graph::log),
    ];
    for (name, f) in unary {
        let input = if name == "log" { pos } else { x };
        let s = s.clone();
        check(
            &move |g, p| {
                let h = f(g, p[0])?;
                g.apply(&s, &[h], 0)
            },
            &[input],
        );
    }
    let binary: [BinaryFn; 4] = [Graph::add, Graph::sub, Graph::cmult, Graph::cdiv];
    for f in binary {
        let s = s.clone();
        check(
            &move |g, p| {
                let h = f(g, p[0], p[1])?;
                g.apply(&s, &[h], 0)
            },
            &[x, y],
        );
    }
    let s2 = s.clone();
    check(
        &move |g, p| {
            let h = g.scale(p[0], -1.5)?;
            g.apply(&s2, &[h], 0)
        },
        &[x],
    );
}

#[test]
fn repeated_arguments_accumulate() {
    // d/dx sum(x * x) = 2x, and x + x through a tanh in between.
    let s = sum_all();
    check(
        &move |g, p| {
            let sq = g.cmult(p[0], p[0])?;
            let t = g.tanh(p[0])?;
            let u = g.add(t, t)?;
            let v = g.add(sq, u)?;
            g.apply(&s, &[v], 0)
        },
        &[&[0.5, -1.5, 2.0]],
    );
}

#[test]
fn node_gradients_are_kept() {
    let mut store = ParamStore::new();
    let p = store.add("w", vec_t(&[1.0, 2.0])).unwrap();
    let mut g = Graph::new();
    let w = g.param(&p);
    let x = g.input(vec_t(&[3.0, 4.0]));
    let h = g.cmult(w, x).unwrap();
    let loss = g.apply(&sum_all(), &[h], 0).unwrap();
    Sequential::new().backward(&mut g, &store, loss).unwrap();
    assert_eq!(g.grad(h).unwrap().to_vec::<f32>().unwrap(), [1.0, 1.0]);
    assert_eq!(store.grad(&p).unwrap().to_vec::<f32>().unwrap(), [3.0, 4.0]);
    let err = Sequential::new().backward(&mut g, &store, h).unwrap_err();
    assert!(matches!(err, GraphError::LossNotScalar { .. }), "{err}");
}

#[test]
fn non_finite_values_name_the_op() {
    let store = ParamStore::new();
    let mut g = Graph::new();
    g.set_check_finite(true);
    let x = g.input(vec_t(&[1.0, -1.0]));
    let t = g.tanh(x).unwrap();
    let l = g.log(x).unwrap();
    let y = g.add(t, l).unwrap();
    let err = Sequential::new().forward(&mut g, &store, y).unwrap_err();
    assert!(
        matches!(err, GraphError::NonFinite { op: "log", .. }),
        "{err}"
    );
}

#[test]
fn two_threads_train_against_one_store() {
    fn assert_send<T: Send>() {}
    assert_send::<Graph>();
    let mut store = ParamStore::new();
    let p = store.add("w", vec_t(&[1.0, 2.0])).unwrap();
    let store = &store;
    let s = sum_all();
    std::thread::scope(|scope| {
        for k in 0..2 {
            let s = s.clone();
            scope.spawn(move || {
                let mut g = Graph::new();
                let w = g.param(&p);
                let x = g.input(vec_t(&[k as f32 + 1.0, 1.0]));
                let h = g.cmult(w, x).unwrap();
                let loss = g.apply(&s, &[h], 0).unwrap();
                Sequential::new().backward(&mut g, store, loss).unwrap();
            });
        }
    });
    // Gradients of both graphs are summed: [1 + 2, 1 + 1].
    assert_eq!(store.grad(&p).unwrap().to_vec::<f32>().unwrap(), [3.0, 2.0]);
}

#[test]
fn elementwise_ops_batch_like_single_calls() {
    use sheaf_autodiff::testing::{check_batching, Instance};
    let pos = |k: u64, salt: f32| {
        vec_t(
            &(0..7)
                .map(|i| ((i as f32 * salt + k as f32) * 0.37).sin() + 1.5)
                .collect::<Vec<_>>(),
        )
    };
    let instances: Vec<Instance> = (0..4)
        .map(|k| Instance {
            args: vec![pos(k, 1.0), pos(k, 1.7)],
            data: 0,
            seed: k,
        })
        .collect();
    let unary: Vec<Instance> = instances
        .iter()
        .cloned()
        .map(|mut i| {
            i.args.truncate(1);
            i
        })
        .collect();
    // The built-in ops, taken from the nodes that use them.
    let mut g = Graph::new();
    let a = g.input(pos(0, 1.0));
    let b = g.input(pos(0, 2.0));
    let nodes = [
        g.tanh(a).unwrap(),
        g.sigmoid(a).unwrap(),
        g.relu(a).unwrap(),
        g.exp(a).unwrap(),
        g.log(a).unwrap(),
        g.scale(a, 0.25).unwrap(),
        g.add(a, b).unwrap(),
        g.sub(a, b).unwrap(),
        g.cmult(a, b).unwrap(),
        g.cdiv(a, b).unwrap(),
    ];
    for e in nodes {
        let node = e.node();
        let args = if g.args(node).len() == 1 {
            &unary
        } else {
            &instances
        };
        check_batching(g.op(node), args, g.node(node).attr(), 0.0)
            .unwrap_or_else(|m| panic!("{m}"));
    }
    check_batching(&SumAll, &unary, 0, 0.0).unwrap();
}

#[test]
fn reshape_is_a_view_and_differentiates() {
    let store = ParamStore::new();
    let mut g = Graph::new();
    let x = g.input(vec_t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let m = g.reshape(x, [2, 3]).unwrap();
    let v = Sequential::new().forward(&mut g, &store, m).unwrap();
    assert_eq!(v.dims(), [2, 3]);
    assert!(v.shares_storage(g.value(x).unwrap()), "reshape copied");
    let err = g.reshape(x, [4, 2]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "reshape: expected an argument with as many elements as [4, 2], given [6]"
    );
    let s = sum_all();
    check(
        &move |g, p| {
            let r = g.reshape(p[0], [3, 2])?;
            let t = g.tanh(r)?;
            let f = g.reshape(t, [6])?;
            g.apply(&s, &[f], 0)
        },
        &[&[0.1, -0.2, 0.3, 0.4, -0.5, 0.6]],
    );
    use sheaf_autodiff::testing::{check_batching, Instance};
    let inst: Vec<Instance> = (0..3)
        .map(|k| Instance {
            args: vec![vec_t(&[k as f32, 1.0, 2.0, 3.0, 4.0, 5.0])],
            data: 0,
            seed: 0,
        })
        .collect();
    check_batching(g.op(m.node()), &inst, g.node(m.node()).attr(), 0.0).unwrap();
}

/// An op whose output is far larger than any machine's memory.
struct Huge;

impl Op for Huge {
    fn name(&self) -> &'static str {
        "huge"
    }
    fn infer_shape(&self, _args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        Ok(Shape::from([1 << 22, 1 << 22]))
    }
    fn forward(&self, _cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        Ok(())
    }
    fn backward(&self, _cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        Ok(())
    }
}

#[test]
fn failed_allocation_is_an_error_naming_the_bytes() {
    let store = ParamStore::new();
    let mut g = Graph::new();
    let x = g.input(vec_t(&[1.0]));
    let op: Arc<dyn Op> = Arc::new(Huge);
    let y = g.apply(&op, &[x], 0).unwrap();
    let err = Sequential::new().forward(&mut g, &store, y).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("huge (node #1):"), "{text}");
    assert!(text.contains(&(4u64 << 44).to_string()), "{text}");
}
