//! A forward that fails part way through an incremental step: the batches
//! of the failed plan that did run are forgotten with it, so that running
//! forward again and then backward gives the gradients of a run that never
//! failed (before, their buffers and records stayed, and backward paired
//! the plans with the wrong batches).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{tanh_chains, tensor, Lcg};
use sheaf_autodiff::{
    ArgRole, Attr, Backward, Expr, Forward, Graph, Op, ParamStore, Sequential, ShapeError,
};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::{Shape, TensorError};

/// `y = 3 x`, whose forward fails while `fail` is set.
struct Triple {
    fail: AtomicBool,
}

impl Op for Triple {
    fn name(&self) -> &'static str {
        "triple"
    }
    fn arg_role(&self, _i: usize, _n: usize) -> ArgRole {
        ArgRole::Stack
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [s] => Ok(*s),
            _ => Err(ShapeError::expected("one argument")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        if self.fail.swap(false, Ordering::SeqCst) {
            return Err(TensorError::InvalidArgument {
                op: "triple",
                arg: "x",
                reason: "fails once, as asked",
            });
        }
        let x = cx.args[0].as_slice::<f32>()?;
        let out = cx.out.into_mut_slice::<f32>()?;
        out.iter_mut().zip(x).for_each(|(o, v)| *o = 3.0 * v);
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let dy = cx.dout.to_vec::<f32>()?;
        if let Some(dx) = cx.dargs[0].as_mut() {
            let dx = dx.as_mut_slice::<f32>()?;
            dx.iter_mut().zip(&dy).for_each(|(d, g)| *d += 3.0 * g);
        }
        Ok(())
    }
}

const D: usize = 4;
const N: usize = 5;

/// `loss = sum(op(2 t_i))` over the chains `t_i`.
fn part_two(g: &mut Graph, op: &Arc<dyn Op>, ts: &[Expr]) -> Expr {
    let parts: Vec<Expr> = ts
        .iter()
        .map(|&t| {
            let u = g.scale(t, 2.0).unwrap();
            let y = g.apply(op, &[u], 0).unwrap();
            g.sum_elems(y).unwrap()
        })
        .collect();
    g.sum(&parts).unwrap()
}

#[test]
fn a_failed_forward_leaves_no_batches_behind() {
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut store = ParamStore::new();
        let w = store.add("w", tensor(&mut Lcg(3), &[D], 0.8)).unwrap();

        // Reference: the same graph, nothing failing, run by Sequential.
        let calm: Arc<dyn Op> = Arc::new(Triple {
            fail: AtomicBool::new(false),
        });
        let mut g = Graph::new();
        let ts = tanh_chains(&mut g, &w, N, &mut Lcg(9));
        let loss = part_two(&mut g, &calm, &ts);
        let want_loss = Sequential::new().forward(&mut g, &store, loss).unwrap();
        Sequential::new().backward(&mut g, &store, loss).unwrap();
        let want = store.grad(&w).unwrap().to_vec::<f32>().unwrap();
        store.zero_grads().unwrap();

        let flaky: Arc<dyn Op> = Arc::new(Triple {
            fail: AtomicBool::new(true),
        });
        let mut exec = Executor::new(strategy);
        let mut g = Graph::new();
        let ts = tanh_chains(&mut g, &w, N, &mut Lcg(9));
        exec.forward(&mut g, &store, *ts.last().unwrap()).unwrap();
        let loss = part_two(&mut g, &flaky, &ts);
        // `scale` runs, then `triple` fails.
        let e = exec.forward(&mut g, &store, loss).unwrap_err().to_string();
        assert!(e.contains("triple") && e.contains("fails once"), "{e}");
        let got_loss = exec.forward(&mut g, &store, loss).unwrap();
        exec.backward(&mut g, &store, loss).unwrap();
        let got = store.grad(&w).unwrap().to_vec::<f32>().unwrap();
        let what = format!("{strategy:?}");
        let (a, b) = (
            got_loss.to_vec::<f32>().unwrap(),
            want_loss.to_vec::<f32>().unwrap(),
        );
        assert!(
            (a[0] - b[0]).abs() <= 1e-5 * b[0].abs().max(1.0),
            "{what}: loss {a:?} vs {b:?}"
        );
        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                "{what}: dw[{i}] {x} vs {y}"
            );
        }
    }
}
