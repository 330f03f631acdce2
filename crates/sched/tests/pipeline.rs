//! `Pipeline` builds the next minibatch's graph while the current one
//! runs: training through it must equal building and running in turn, bit
//! for bit (dropout masks included), at one thread and at several, and its
//! errors must come in the order the work would have run in.

use sheaf_autodiff::{Expr, Graph, Optimizer, Param, ParamStore};
use sheaf_sched::{Executor, Pipeline, Strategy};
use sheaf_tensor::{Sgd, Tensor};

struct Model {
    w: Param,
    b: Param,
    w_out: Param,
    b_out: Param,
}

/// Deterministic values in [-scale, scale).
fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn model(store: &mut ParamStore) -> Model {
    let mut add = |name: &str, shape: &[usize], seed| {
        let n = shape.iter().product();
        let t = Tensor::from_vec(
            values(seed, n, 0.4),
            sheaf_tensor::Shape::new(shape).unwrap(),
        );
        store.add(name, t.unwrap()).unwrap()
    };
    Model {
        w: add("w", &[24, 16], 1),
        b: add("b", &[24], 2),
        w_out: add("w_out", &[5, 24], 3),
        b_out: add("b_out", &[5], 4),
    }
}

/// Minibatch `k`: a chain of `2 + k % 3` layers per instance, with
/// dropout, so that graphs differ per step and depend on the step's seed.
fn build(g: &mut Graph, m: &Model, k: usize) -> Expr {
    g.set_train(true);
    g.set_seed(1000 + k as u64);
    let mut losses = Vec::new();
    for i in 0..6 {
        let x = Tensor::from_vec(values((k * 10 + i) as u64, 16, 1.0), [16]).unwrap();
        let mut h = g.input(x);
        let (w, b) = (g.param(&m.w), g.param(&m.b));
        h = g.affine(b, &[(w, h)]).unwrap();
        h = g.tanh(h).unwrap();
        for _ in 0..(k + i) % 3 {
            let h16 = g.dropout(h, 0.3).unwrap();
            let (wo, bo) = (g.param(&m.w_out), g.param(&m.b_out));
            let logits = g.affine(bo, &[(wo, h16)]).unwrap();
            losses.push(g.pick_neg_log_softmax(logits, (i % 5) as u32).unwrap());
        }
        let (wo, bo) = (g.param(&m.w_out), g.param(&m.b_out));
        let logits = g.affine(bo, &[(wo, h)]).unwrap();
        losses.push(
            g.pick_neg_log_softmax(logits, ((i + k) % 5) as u32)
                .unwrap(),
        );
    }
    g.sum(&losses).unwrap()
}

fn sgd() -> Optimizer {
    Optimizer::sgd(Sgd {
        lr: 0.05,
        momentum: 0.0,
        weight_decay: 0.0,
    })
}

/// Each step's loss and the final parameters.
type Trained = (Vec<f32>, Vec<Vec<f32>>);

fn finish(store: &ParamStore) -> Vec<Vec<f32>> {
    store
        .params()
        .iter()
        .map(|p| store.value(p).unwrap().to_vec::<f32>().unwrap())
        .collect()
}

/// Eight steps built and run in turn.
fn in_turn(strategy: Strategy) -> Trained {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let (mut opt, mut exec, mut g) = (sgd(), Executor::new(strategy), Graph::new());
    let mut losses = Vec::new();
    for k in 0..8 {
        g.clear();
        let loss = build(&mut g, &m, k);
        exec.forward(&mut g, &store, loss).unwrap();
        exec.backward(&mut g, &store, loss).unwrap();
        losses.push(g.value(loss).unwrap().to_vec::<f32>().unwrap()[0]);
        g.clear();
        opt.step(&mut store).unwrap();
    }
    (losses, finish(&store))
}

/// The same eight steps through a `Pipeline`.
fn pipelined(strategy: Strategy) -> Trained {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let (mut opt, mut exec) = (sgd(), Executor::new(strategy));
    let mut losses = Vec::new();
    let mut seen = Vec::new();
    let buffers = |store: &ParamStore| -> Vec<usize> {
        let ps = store.params();
        ps.iter()
            .map(|p| store.value(p).unwrap().storage_id())
            .collect()
    };
    let before = buffers(&store);
    Pipeline::new()
        .run(
            0..8usize,
            |g, &k| Ok::<_, String>(build(g, &m, k)),
            |g, loss, k| {
                seen.push(k);
                exec.forward(g, &store, loss).map_err(|e| e.to_string())?;
                exec.backward(g, &store, loss).map_err(|e| e.to_string())?;
                losses.push(g.value(loss).unwrap().to_vec::<f32>().unwrap()[0]);
                // Cleared before the update (see `Pipeline::run`).
                g.clear();
                opt.step(&mut store).map_err(|e| e.to_string())
            },
        )
        .unwrap();
    assert_eq!(seen, (0..8).collect::<Vec<_>>(), "items run in order");
    assert_eq!(buffers(&store), before, "updated in place, not copied");
    assert_eq!(opt.shared_copies(), 0, "no parameter copied");
    (losses, finish(&store))
}

/// Eight steps in the order a newcomer writes: the update before the
/// clear, and in one case the graph run again after the update.
fn natural_order(strategy: Strategy) -> Trained {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let (mut opt, mut exec, mut g) = (sgd(), Executor::new(strategy), Graph::new());
    let buffers: Vec<usize> = store
        .params()
        .iter()
        .map(|p| store.value(p).unwrap().storage_id())
        .collect();
    let mut losses = Vec::new();
    for k in 0..8 {
        let loss = build(&mut g, &m, k);
        losses.push(
            exec.forward(&mut g, &store, loss)
                .unwrap()
                .item::<f32>()
                .unwrap(),
        );
        exec.backward(&mut g, &store, loss).unwrap();
        opt.step(&mut store).unwrap();
        if k == 7 {
            // Not cleared: the updated parameters are read, not stale ones.
            let again = exec.forward(&mut g, &store, loss).unwrap();
            let mut fresh = Graph::new();
            let l = build(&mut fresh, &m, k);
            let want = Executor::new(strategy)
                .forward(&mut fresh, &store, l)
                .unwrap();
            assert_eq!(
                again.to_vec::<f32>().unwrap(),
                want.to_vec::<f32>().unwrap()
            );
            assert_ne!(again.item::<f32>().unwrap(), losses[7], "{strategy:?}");
        }
        g.clear();
    }
    assert_eq!(opt.shared_copies(), 0, "{strategy:?}: no parameter copied");
    let after: Vec<usize> = store
        .params()
        .iter()
        .map(|p| store.value(p).unwrap().storage_id())
        .collect();
    assert_eq!(after, buffers, "{strategy:?}: updated in place");
    (losses, finish(&store))
}

#[test]
fn updating_before_clearing_trains_alike_and_copies_nothing() {
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let want = in_turn(strategy);
        let got = natural_order(strategy);
        assert_eq!(got.0, want.0, "{strategy:?}: losses");
        assert_eq!(got.1, want.1, "{strategy:?}: parameters");
    }
}

#[test]
fn pipelined_training_equals_building_and_running_in_turn() {
    for threads in [1, 2, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for strategy in [Strategy::Depth, Strategy::Agenda] {
            let (want, got) = pool.install(|| (in_turn(strategy), pipelined(strategy)));
            let mut initial = ParamStore::new();
            model(&mut initial);
            assert_ne!(want.1, finish(&initial), "the steps update the weights");
            assert_eq!(got.0, want.0, "{strategy:?} at {threads} threads: losses");
            assert_eq!(got.1, want.1, "{strategy:?} at {threads} threads: weights");
        }
    }
}

#[test]
fn the_next_item_is_built_while_the_current_one_runs() {
    // Run 0 waits for a message that only the build of item 1 sends: it
    // would time out if building waited for the run.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let result = pool.install(move || {
        Pipeline::new().run(
            0..2usize,
            |g, &k| {
                if k == 1 {
                    tx.lock().unwrap().send(()).unwrap();
                }
                Ok(g.input(Tensor::from_vec(vec![k as f32], [1]).unwrap()))
            },
            |_, _, k| match k {
                0 => rx
                    .recv_timeout(std::time::Duration::from_secs(60))
                    .map_err(|e| format!("item 1 was not built during run 0: {e}")),
                _ => Ok(()),
            },
        )
    });
    assert_eq!(result, Ok(()));
}

#[test]
fn a_failed_build_stops_after_the_steps_before_it() {
    let mut ran = Vec::new();
    let result = Pipeline::new().run(
        0..6usize,
        |g, &k| match k {
            3 => Err(format!("bad item {k}")),
            _ => Ok(g.input(Tensor::from_vec(vec![k as f32], [1]).unwrap())),
        },
        |_, _, k| {
            ran.push(k);
            Ok(())
        },
    );
    assert_eq!(result, Err("bad item 3".to_string()));
    assert_eq!(ran, [0, 1, 2], "the items before the bad one ran");
}

#[test]
fn a_failed_step_stops_the_run() {
    let built = std::sync::Mutex::new(Vec::new());
    let mut ran = Vec::new();
    let result = Pipeline::new().run(
        0..6usize,
        |g, &k| {
            built.lock().unwrap().push(k);
            // Item k's graph has k + 1 nodes.
            let x = Tensor::from_vec(vec![k as f32], [1]).unwrap();
            Ok((0..=k).map(|_| g.input(x.clone())).last().unwrap())
        },
        |g, _, k| {
            ran.push(k);
            assert_eq!(g.len(), k + 1, "each run sees its own item's graph");
            match k {
                1 => Err(format!("step {k} failed")),
                _ => Ok(()),
            }
        },
    );
    assert_eq!(result, Err("step 1 failed".to_string()));
    assert_eq!(ran, [0, 1]);
    let mut built = built.into_inner().unwrap();
    built.sort();
    assert_eq!(
        built,
        [0, 1, 2],
        "at most the item after the failed one was built"
    );
}

#[test]
fn no_items_run_nothing() {
    let result = Pipeline::new().run(
        std::iter::empty::<usize>(),
        |_, _| -> Result<Expr, String> { unreachable!("nothing to build") },
        |_, _, _| unreachable!("nothing to run"),
    );
    assert_eq!(result, Ok(()));
}
