//! The executor's arena: one executor reused over many steps (graphs of
//! different shapes, cleared between steps) keeps equalling Sequential,
//! stops allocating once warm, and never reuses a buffer the user still
//! holds a value of.

mod common;

use common::{assert_same, run, snapshot, tensor, Lcg, Run};
use sheaf_autodiff::{Expr, Graph, Param, ParamStore};
use sheaf_sched::{Executor, Strategy};

const D: usize = 6;
const VOCAB: usize = 11;

struct Model {
    emb: Param,
    w: Param,
    u: Param,
    b: Param,
    out: Param,
}

fn model(store: &mut ParamStore, rng: &mut Lcg) -> Model {
    Model {
        emb: store
            .add_table("emb", tensor(rng, &[VOCAB, D], 0.5))
            .unwrap(),
        w: store.add("w", tensor(rng, &[D, D], 0.4)).unwrap(),
        u: store.add("u", tensor(rng, &[D, 2 * D], 0.4)).unwrap(),
        b: store.add("b", tensor(rng, &[D], 0.1)).unwrap(),
        out: store.add("out", tensor(rng, &[3, D], 0.4)).unwrap(),
    }
}

/// A step's graph: `n` sequences folded left to right, of lengths and words
/// drawn from `seed`, with a softmax loss per step and per sequence.
fn build(g: &mut Graph, m: &Model, seed: u64, n: usize) -> Expr {
    let mut rng = Lcg(seed);
    let mut losses = Vec::new();
    for _ in 0..n {
        let len = 1 + rng.below(6) as usize;
        let emb = g.param(&m.emb);
        let (w, b) = (g.param(&m.w), g.param(&m.b));
        let x = g.lookup(emb, rng.below(VOCAB as u64) as u32).unwrap();
        let mut h = g.affine(b, &[(w, x)]).unwrap();
        h = g.tanh(h).unwrap();
        for _ in 1..len {
            let x = g.lookup(emb, rng.below(VOCAB as u64) as u32).unwrap();
            let hx = g.concat(&[h, x]).unwrap();
            let u = g.param(&m.u);
            let a = g.affine(b, &[(u, hx)]).unwrap();
            let s = g.sigmoid(a).unwrap();
            h = g.cmult(s, h).unwrap();
            let out = g.param(&m.out);
            let logits = g.linear(out, h).unwrap();
            losses.push(g.pick_neg_log_softmax(logits, rng.below(3) as u32).unwrap());
        }
        let out = g.param(&m.out);
        let logits = g.linear(out, h).unwrap();
        losses.push(g.pick_neg_log_softmax(logits, rng.below(3) as u32).unwrap());
    }
    g.sum(&losses).unwrap()
}

#[test]
fn one_executor_over_many_steps_equals_sequential() {
    let mut rng = Lcg(5);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng);
    for strategy in [Strategy::Depth, Strategy::Agenda, Strategy::Auto] {
        let mut exec = Executor::new(strategy);
        let mut g = Graph::new();
        // Graphs of different sizes, then the first again.
        for (step, &(seed, n)) in [(1, 9), (2, 4), (3, 13), (1, 9), (1, 9)].iter().enumerate() {
            let mut reference_graph = Graph::new();
            let loss = build(&mut reference_graph, &m, seed, n);
            let reference = run(&mut reference_graph, &mut store, loss, Run::Reference);

            g.clear();
            store.zero_grads().unwrap();
            let loss = build(&mut g, &m, seed, n);
            exec.forward(&mut g, &store, loss).unwrap();
            exec.backward(&mut g, &store, loss).unwrap();
            let got = snapshot(&g, &store);
            assert_same(&got, &reference, &g, &format!("{strategy:?} step {step}"));
            let stats = exec.stats();
            assert!(stats.arena_bytes > 0 && stats.arena_peak_bytes >= stats.arena_bytes);
            if step == 4 {
                assert_eq!(
                    stats.arena_fresh_bytes, 0,
                    "{strategy:?}: a repeated graph reuses the arena"
                );
            }
        }
    }
}

#[test]
fn values_the_user_keeps_are_not_reused() {
    let mut rng = Lcg(8);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng);
    let mut exec = Executor::new(Strategy::Agenda);
    let mut g = Graph::new();
    let loss = build(&mut g, &m, 4, 6);
    let kept = exec.forward(&mut g, &store, loss).unwrap();
    let before = kept.to_vec::<f32>().unwrap();
    exec.backward(&mut g, &store, loss).unwrap();
    let grads_kept = g.grad(loss).unwrap().clone();
    for seed in 5..9 {
        g.clear();
        let loss = build(&mut g, &m, seed, 6);
        exec.forward(&mut g, &store, loss).unwrap();
        exec.backward(&mut g, &store, loss).unwrap();
    }
    assert_eq!(kept.to_vec::<f32>().unwrap(), before);
    assert_eq!(grads_kept.to_vec::<f32>().unwrap(), vec![1.0]);
}
