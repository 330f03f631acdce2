//! Executors side by side on one parameter store (a minibatch split over
//! threads): a dense parameter's accumulator held by another thread is not
//! waited for; the executor sums that parameter's gradient in a buffer of
//! its own for the rest of its backward and adds it at the end. The accumulated gradients equal those of the two
//! graphs run one after the other (tolerance: `common/mod.rs`), whether or
//! not a thread found an accumulator busy; here one is held on purpose
//! while both run. `DataParallel` does this for a minibatch: its loss and
//! gradients equal the unsplit graph's.

mod common;

use std::thread;
use std::time::Duration;

use common::{assert_close, tensor, Lcg};
use sheaf_autodiff::{Expr, Graph, Param, ParamStore};
use sheaf_sched::{DataParallel, Executor, SchedError, Strategy};

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
    let items: Vec<u32> = (0..n as u32).map(|i| (i + offset) % 10).collect();
    build_items(g, m, &items).unwrap()
}

/// One chain per item (an embedding row), summed.
fn build_items(g: &mut Graph, m: &Model, items: &[u32]) -> sheaf_autodiff::Result<Expr> {
    let mut losses = Vec::new();
    for &row in items {
        let e = g.param(&m.table);
        let x = g.lookup(e, row)?;
        let (w, b, u) = (g.param(&m.w), g.param(&m.b), g.param(&m.u));
        let h = g.affine(b, &[(w, x)])?;
        let h = g.tanh(h)?;
        let y = g.affine(b, &[(u, h)])?;
        let y = g.tanh(y)?;
        losses.push(g.sum_elems(y)?);
    }
    g.sum(&losses)
}

/// Every parameter's gradient in `store` equals `reference` (from
/// [`grads`]), within the tolerance.
fn assert_grads(store: &ParamStore, m: &Model, reference: &[Vec<f32>], what: &str) {
    let got = grads(store, m);
    for (name, (g, r)) in ["w", "b", "u", "emb"].iter().zip(got.iter().zip(reference)) {
        assert_close(g, r, &format!("{what}: gradient of {name}"));
    }
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
        assert_grads(&store, &m, &reference, &format!("{strategy:?}"));
        // The table's touched rows are recorded either way.
        let touched = store.lock_grad(m.table.id(), "test").unwrap().rows.len();
        assert!(touched > 0, "{strategy:?}: no rows of the table recorded");
    }
}

/// Chains that apply `u` at three depths (three batches), so that a
/// busy `u` is summed apart across several batches.
fn build_deep(g: &mut Graph, m: &Model, items: &[u32]) -> Expr {
    let mut losses = Vec::new();
    for &row in items {
        let e = g.param(&m.table);
        let mut h = g.lookup(e, row).unwrap();
        for _ in 0..3 {
            let (b, u) = (g.param(&m.b), g.param(&m.u));
            h = g.affine(b, &[(u, h)]).unwrap();
            h = g.tanh(h).unwrap();
        }
        losses.push(g.sum_elems(h).unwrap());
    }
    g.sum(&losses).unwrap()
}

/// `u` and `b` held by this thread while two executors run backward: each
/// sums them apart over its three batches and adds them once at its end
/// (after the locks are released), which must equal one run after the
/// other. Fails if a private buffer were re-zeroed, dropped, or added
/// more than once.
#[test]
fn a_busy_parameter_is_summed_apart_over_several_batches() {
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut rng = Lcg(5);
        let mut store = ParamStore::new();
        let m = model(&mut store, &mut rng);
        let mut parts: Vec<(Graph, Executor, Expr)> = (0..2)
            .map(|k| {
                let mut g = Graph::new();
                let items: Vec<u32> = (0..4 + k as u32).map(|i| (i * 3 + k as u32) % 10).collect();
                let loss = build_deep(&mut g, &m, &items);
                (g, Executor::new(strategy), loss)
            })
            .collect();
        for (g, exec, loss) in parts.iter_mut() {
            exec.forward(g, &store, *loss).unwrap();
            exec.backward(g, &store, *loss).unwrap();
        }
        let reference = grads(&store, &m);
        store.zero_grads().unwrap();
        // Forward first, so that both backwards start with the locks held.
        for (g, exec, loss) in parts.iter_mut() {
            exec.forward(g, &store, *loss).unwrap();
        }
        let shared = &store;
        let held = (
            shared.lock_grad(m.u.id(), "test").unwrap(),
            shared.lock_grad(m.b.id(), "test").unwrap(),
        );
        thread::scope(|s| {
            let workers: Vec<_> = parts
                .iter_mut()
                .map(|(g, exec, loss)| s.spawn(move || exec.backward(g, shared, *loss).unwrap()))
                .collect();
            thread::sleep(Duration::from_millis(200));
            drop(held);
            for w in workers {
                w.join().unwrap();
            }
        });
        assert_grads(&store, &m, &reference, &format!("{strategy:?}"));
        // A second step on the same executors starts with no private
        // buffers left over: the same gradients again.
        store.zero_grads().unwrap();
        for (g, exec, loss) in parts.iter_mut() {
            exec.backward(g, &store, *loss).unwrap();
        }
        assert_grads(
            &store,
            &m,
            &reference,
            &format!("{strategy:?}: second step"),
        );
    }
}

#[test]
fn data_parallel_equals_the_unsplit_batch() {
    let items: Vec<u32> = (0..11).map(|i| (i * 7) % 10).collect();
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut rng = Lcg(11);
        let mut store = ParamStore::new();
        let m = model(&mut store, &mut rng);
        let mut g = Graph::new();
        let loss = build_items(&mut g, &m, &items).unwrap();
        let mut exec = Executor::new(strategy);
        exec.forward(&mut g, &store, loss).unwrap();
        exec.backward(&mut g, &store, loss).unwrap();
        let reference_loss = g.value(loss).unwrap().to_vec::<f32>().unwrap()[0];
        let reference = grads(&store, &m);
        // More parts than fit leave the last ones idle (11 items, 4 parts
        // of 3); one part is the unsplit run.
        for parts in [1, 2, 3, 4, 16] {
            store.zero_grads().unwrap();
            let mut dp = DataParallel::new(strategy, parts);
            let total = dp
                .backward(&store, &items, |_, g, chunk| -> Result<Expr, SchedError> {
                    Ok(build_items(g, &m, chunk)?)
                })
                .unwrap();
            let what = format!("{strategy:?}, {parts} parts");
            assert_close(&[total], &[reference_loss], &format!("{what}: loss"));
            assert_grads(&store, &m, &reference, &what);
        }
    }
}

/// More parts than threads run in waves: in a pool of one thread (one
/// part at a time) and of three, as many results as without waves.
#[test]
fn data_parallel_with_more_parts_than_threads() {
    let items: Vec<u32> = (0..9).collect();
    let mut reference = None;
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let (total, got) = pool.install(|| {
            let mut rng = Lcg(3);
            let mut store = ParamStore::new();
            let m = model(&mut store, &mut rng);
            let mut dp = DataParallel::new(Strategy::Agenda, 5);
            let total = dp
                .backward(&store, &items, |_, g, chunk| -> Result<Expr, SchedError> {
                    Ok(build_items(g, &m, chunk)?)
                })
                .unwrap();
            (total, grads(&store, &m))
        });
        match &reference {
            None => reference = Some((total, got)),
            Some((t, r)) => {
                assert_close(&[total], &[*t], &format!("{threads} threads: loss"));
                for (g, r) in got.iter().zip(r) {
                    assert_close(g, r, &format!("{threads} threads: gradients"));
                }
            }
        }
    }
}

#[test]
fn data_parallel_reports_a_part_error_and_runs_nothing_without_items() {
    let mut rng = Lcg(5);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng);
    let mut dp = DataParallel::new(Strategy::Agenda, 2);
    let empty: [u32; 0] = [];
    let total = dp
        .backward(&store, &empty, |_, _, _| -> Result<Expr, SchedError> {
            unreachable!("no part runs without items")
        })
        .unwrap();
    assert_eq!(total, 0.0);
    // Row 10 is past the table (10 rows): the second part's lookup fails.
    let items = [1u32, 2, 3, 10];
    let err = dp
        .backward(&store, &items, |_, g, chunk| -> Result<Expr, SchedError> {
            Ok(build_items(g, &m, chunk)?)
        })
        .unwrap_err();
    assert!(err.to_string().contains("lookup"), "{err}");
}
