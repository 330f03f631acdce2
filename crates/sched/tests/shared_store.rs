//! Executors side by side on one parameter store (a minibatch split over
//! threads): a dense parameter's accumulator held by another thread is not
//! waited for; the batch's gradient goes into a buffer of its own, added
//! when the call is done. The accumulated gradients equal those of the two
//! graphs run one after the other (tolerance: `common/mod.rs`), whether or
//! not a thread found an accumulator busy; here one is held on purpose
//! while both run.

mod common;

use std::thread;
use std::time::Duration;

use common::{assert_close, tensor, Lcg};
use sheaf_autodiff::{Expr, Graph, Param, ParamStore};
use sheaf_sched::{Executor, Strategy};

const D: usize = 6;

struct Model {
    w: Param,
    b: Param,
    u: Param,
    table: Param,
}

fn model(store: &mut ParamStore, rng: &mut Lcg) -> Model {
    Model {
        w: store.add("w", tensor(rng, &[D, D], 0.5)).unwrap(),
        b: store.add("b", tensor(rng, &[D], 0.2)).unwrap(),
        u: store.add("u", tensor(rng, &[D, D], 0.5)).unwrap(),
        table: store.add_table("emb", tensor(rng, &[10, D], 0.5)).unwrap(),
    }
}

/// `n` chains of two affine layers on embedding rows, summed.
fn build(g: &mut Graph, m: &Model, n: usize, offset: u32) -> Expr {
    let mut losses = Vec::new();
    for i in 0..n as u32 {
        let e = g.param(&m.table);
        let x = g.lookup(e, (i + offset) % 10).unwrap();
        let (w, b, u) = (g.param(&m.w), g.param(&m.b), g.param(&m.u));
        let h = g.affine(b, &[(w, x)]).unwrap();
        let h = g.tanh(h).unwrap();
        let y = g.affine(b, &[(u, h)]).unwrap();
        let y = g.tanh(y).unwrap();
        losses.push(g.sum_elems(y).unwrap());
    }
    g.sum(&losses).unwrap()
}

fn grads(store: &ParamStore, m: &Model) -> Vec<Vec<f32>> {
    [&m.w, &m.b, &m.u, &m.table]
        .iter()
        .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
        .collect()
}

#[test]
fn executors_side_by_side_accumulate_what_they_would_one_after_the_other() {
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut rng = Lcg(7);
        let mut store = ParamStore::new();
        let m = model(&mut store, &mut rng);
        let mut parts: Vec<(Graph, Executor, Expr)> = (0..2)
            .map(|k| {
                let mut g = Graph::new();
                let loss = build(&mut g, &m, 5 + k, 3 * k as u32);
                (g, Executor::new(strategy), loss)
            })
            .collect();

        // One after the other.
        for (g, exec, loss) in parts.iter_mut() {
            exec.forward(g, &store, *loss).unwrap();
            exec.backward(g, &store, *loss).unwrap();
        }
        let reference = grads(&store, &m);
        store.zero_grads().unwrap();

        // Side by side, with `u`'s accumulator held by this thread while
        // they start, so that whoever reaches it first cannot lock it.
        let shared = &store;
        let held = shared.lock_grad(m.u.id(), "test").unwrap();
        thread::scope(|s| {
            let workers: Vec<_> = parts
                .iter_mut()
                .map(|(g, exec, loss)| {
                    s.spawn(move || {
                        exec.forward(g, shared, *loss).unwrap();
                        exec.backward(g, shared, *loss).unwrap();
                    })
                })
                .collect();
            thread::sleep(Duration::from_millis(200));
            drop(held);
            for w in workers {
                w.join().unwrap();
            }
        });
        let got = grads(&store, &m);
        for (name, (g, r)) in ["w", "b", "u", "emb"]
            .iter()
            .zip(got.iter().zip(&reference))
        {
            assert_close(g, r, &format!("{strategy:?}: gradient of {name}"));
        }
        // The table's touched rows are recorded either way.
        let touched = store.lock_grad(m.table.id(), "test").unwrap().rows.len();
        assert!(touched > 0, "{strategy:?}: no rows of the table recorded");
    }
}
