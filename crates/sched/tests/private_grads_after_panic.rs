//! An executor whose backward panicked (a user op's bug) is used again:
//! the private parameter gradients it had summed before the panic (a busy
//! parameter, see `shared_store.rs`) must not reach the next step. Fails
//! if they do: the next step's gradient of `u` is then twice the reference.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{assert_close, tensor, Lcg};
use sheaf_autodiff::{Attr, Backward, Expr, Forward, Graph, Op, Param, ParamStore, ShapeError};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Shape;

const D: usize = 5;

/// The identity, whose backward panics while `panics` is set.
struct Boom {
    panics: Arc<AtomicBool>,
}

impl Op for Boom {
    fn name(&self) -> &'static str {
        "boom"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [x] => Ok(*x),
            _ => Err(ShapeError::expected("one argument")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let rows = cx.args[0].num_rows();
        cx.backend.copy_rows(&cx.args[0], 0, cx.out, 0, rows)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        assert!(!self.panics.load(Ordering::SeqCst), "boom");
        match cx.dargs[0].as_mut() {
            Some(dx) => cx.backend.axpy(1.0, cx.dout, dx.reborrow()),
            None => Ok(()),
        }
    }
}

/// `sum(tanh(u boom(table[row]) + b))` over the items.
fn build(g: &mut Graph, boom: &Arc<dyn Op>, ps: (&Param, &Param, &Param), items: &[u32]) -> Expr {
    let (table, u, b) = ps;
    let mut losses = Vec::new();
    for &row in items {
        let e = g.param(table);
        let x = g.lookup(e, row).unwrap();
        let x = g.apply(boom, &[x], 0).unwrap();
        let (u, b) = (g.param(u), g.param(b));
        let h = g.affine(b, &[(u, x)]).unwrap();
        let h = g.tanh(h).unwrap();
        losses.push(g.sum_elems(h).unwrap());
    }
    g.sum(&losses).unwrap()
}

#[test]
fn private_gradients_of_a_panicked_backward_are_dropped() {
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut rng = Lcg(3);
        let mut store = ParamStore::new();
        let table = store
            .add_table("emb", tensor(&mut rng, &[8, D], 0.5))
            .unwrap();
        let u = store.add("u", tensor(&mut rng, &[D, D], 0.5)).unwrap();
        let b = store.add("b", tensor(&mut rng, &[D], 0.2)).unwrap();
        let panics = Arc::new(AtomicBool::new(false));
        let boom: Arc<dyn Op> = Arc::new(Boom {
            panics: Arc::clone(&panics),
        });
        let items = [1u32, 4, 6];
        let ps = (&table, &u, &b);

        // Reference: one clean step.
        let mut g = Graph::new();
        let mut exec = Executor::new(strategy);
        let loss = build(&mut g, &boom, ps, &items);
        exec.backward(&mut g, &store, loss).unwrap();
        let reference = store.grad(&u).unwrap().to_vec::<f32>().unwrap();

        // A step that panics after `u` went private (its lock held here).
        store.zero_grads().unwrap();
        g.clear();
        let loss = build(&mut g, &boom, ps, &items);
        exec.forward(&mut g, &store, loss).unwrap();
        panics.store(true, Ordering::SeqCst);
        let held = store.lock_grad(u.id(), "test").unwrap();
        let shared = &store;
        thread::scope(|s| {
            let worker = s.spawn(|| {
                catch_unwind(AssertUnwindSafe(|| exec.backward(&mut g, shared, loss))).is_err()
            });
            thread::sleep(Duration::from_millis(100));
            drop(held);
            assert!(
                worker.join().unwrap(),
                "{strategy:?}: the backward should panic"
            );
        });

        // The next step on the same executor.
        panics.store(false, Ordering::SeqCst);
        store.zero_grads().unwrap();
        g.clear();
        let loss = build(&mut g, &boom, ps, &items);
        exec.backward(&mut g, &store, loss).unwrap();
        let got = store.grad(&u).unwrap().to_vec::<f32>().unwrap();
        assert_close(
            &got,
            &reference,
            &format!("{strategy:?}: gradient of u after a panic"),
        );
    }
}
