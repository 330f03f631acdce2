//! Incremental forward: a model builds half its graph, runs it (batched),
//! reads a value, adds nodes that depend on both the value read (the graph's
//! shape does) and the nodes already computed, runs forward again, then
//! backward. The result equals building everything at once (batched), and
//! equals Sequential both ways, for every node value and gradient and every
//! parameter gradient (tolerance: `common/mod.rs`).

mod common;

use common::{assert_same, snapshot, tensor, Lcg, Run};
use sheaf_autodiff::{Expr, Graph, Param, ParamStore, Sequential};
use sheaf_sched::{Executor, Strategy};

const D: usize = 5;
const N: usize = 7;

struct Model {
    w: Param,
    b: Param,
    w2: Param,
    b2: Param,
}

fn model(store: &mut ParamStore, rng: &mut Lcg) -> Model {
    Model {
        w: store.add("w", tensor(rng, &[D, D], 0.5)).unwrap(),
        b: store.add("b", tensor(rng, &[D], 0.2)).unwrap(),
        w2: store.add("w2", tensor(rng, &[D, D], 0.5)).unwrap(),
        b2: store.add("b2", tensor(rng, &[D], 0.2)).unwrap(),
    }
}

/// What the second half depends on, read from the first half's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decision {
    class: u32,
    steps: usize,
}

fn decide(h: &[f32]) -> Decision {
    let class = (0..h.len()).max_by(|&a, &b| h[a].total_cmp(&h[b])).unwrap() as u32;
    Decision {
        class,
        steps: 1 + class as usize % 3,
    }
}

/// First half: one input and one hidden vector per instance.
fn first_half(g: &mut Graph, m: &Model, rng: &mut Lcg) -> Vec<(Expr, Expr)> {
    g.set_seed(99);
    (0..N)
        .map(|_| {
            let x = g.input(tensor(rng, &[D], 1.0));
            let (w, b) = (g.param(&m.w), g.param(&m.b));
            let a = g.affine(b, &[(w, x)]).unwrap();
            (x, g.tanh(a).unwrap())
        })
        .collect()
}

/// Second half: per instance, `steps` recurrent steps over earlier nodes,
/// then a loss on the class read from the first half.
fn second_half(g: &mut Graph, m: &Model, first: &[(Expr, Expr)], ds: &[Decision]) -> Vec<Expr> {
    let mut losses = Vec::new();
    for (&(x, h0), d) in first.iter().zip(ds) {
        let mut h = h0;
        for _ in 0..d.steps {
            let (w, w2, b2) = (g.param(&m.w), g.param(&m.w2), g.param(&m.b2));
            let a = g.affine(b2, &[(w2, h), (w, x)]).unwrap();
            let t = g.tanh(a).unwrap();
            h = g.dropout(t, 0.25).unwrap();
        }
        let both = g.cmult(h, h0).unwrap();
        losses.push(g.pick_neg_log_softmax(both, d.class).unwrap());
        losses.push(g.dot(h, h0).unwrap());
    }
    losses
}

/// The reference or a batched executor, behind one interface.
enum Exec {
    Ref(Sequential),
    Batched(Box<Executor>),
}

impl Exec {
    fn new(run: Run) -> Self {
        match run {
            Run::Reference => Exec::Ref(Sequential::new()),
            Run::Batched(st) => Exec::Batched(Box::new(Executor::new(st))),
            Run::Device(None, d) => Exec::Ref(Sequential::on(d).unwrap()),
            Run::Device(Some(st), d) => Exec::Batched(Box::new(Executor::on(st, d).unwrap())),
        }
    }
    fn forward(&mut self, g: &mut Graph, store: &ParamStore, target: Expr) -> Vec<f32> {
        match self {
            Exec::Ref(s) => s.forward(g, store, target),
            Exec::Batched(e) => Ok(e.forward(g, store, target).unwrap()),
        }
        .unwrap()
        .to_vec()
        .unwrap()
    }
    fn backward(&mut self, g: &mut Graph, store: &ParamStore, loss: Expr) {
        match self {
            Exec::Ref(s) => s.backward(g, store, loss).unwrap(),
            Exec::Batched(e) => e.backward(g, store, loss).unwrap(),
        }
    }
}

/// The decisions of every instance, from the first half's values.
fn read_decisions(g: &Graph, first: &[(Expr, Expr)]) -> Vec<Decision> {
    first
        .iter()
        .map(|&(_, h)| decide(&g.value(h).unwrap().to_vec::<f32>().unwrap()))
        .collect()
}

/// Builds in two halves with a forward (and a read) between them.
fn incremental(
    store: &mut ParamStore,
    m: &Model,
    run: Run,
) -> (Graph, common::Snapshot, Vec<Decision>) {
    store.zero_grads().unwrap();
    let mut g = Graph::new();
    let mut ex = Exec::new(run);
    let first = first_half(&mut g, m, &mut Lcg(5));
    ex.forward(&mut g, store, first.last().unwrap().1);
    let ds = read_decisions(&g, &first);
    assert_eq!(g.evaluated(), g.len());
    let n1 = g.len();
    let losses = second_half(&mut g, m, &first, &ds);
    ex.forward(&mut g, store, *losses.last().unwrap());
    assert!(g.len() > n1);
    let loss = g.sum(&losses).unwrap();
    // The loss node is new: backward runs a third, one-node forward.
    ex.backward(&mut g, store, loss);
    if let Exec::Batched(e) = &ex {
        // The first forward planned the whole first half; each later one
        // only what was new.
        assert_eq!(e.plans().len(), 3, "{run:?}");
        assert_eq!(e.plans()[2].batches.len(), 1, "{run:?}");
    }
    let snap = snapshot(&g, store);
    (g, snap, ds)
}

fn at_once(store: &mut ParamStore, m: &Model, ds: &[Decision], run: Run) -> common::Snapshot {
    let mut g = Graph::new();
    let first = first_half(&mut g, m, &mut Lcg(5));
    let losses = second_half(&mut g, m, &first, ds);
    let loss = g.sum(&losses).unwrap();
    common::run(&mut g, store, loss, run)
}

#[test]
fn incremental_forward_equals_building_at_once_and_sequential() {
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut Lcg(3));
    let (g, reference, ds) = incremental(&mut store, &m, Run::Reference);
    // The decisions vary, so the second half really has several shapes.
    assert!(ds.iter().any(|d| d.steps != ds[0].steps), "{ds:?}");
    let once = at_once(&mut store, &m, &ds, Run::Reference);
    assert_same(&once, &reference, &g, "sequential at once");
    for st in [Strategy::Depth, Strategy::Agenda] {
        let (g2, got, ds2) = incremental(&mut store, &m, Run::Batched(st));
        assert_eq!(ds2, ds, "{st:?}: values read mid-build differ");
        assert_same(&got, &reference, &g2, &format!("{st:?} incremental"));
        let once = at_once(&mut store, &m, &ds, Run::Batched(st));
        assert_same(&once, &reference, &g2, &format!("{st:?} at once"));
    }
}

/// Backward on the first half's loss, then extend the graph and backward
/// on a loss over both halves: each backward equals Sequential's.
#[test]
fn backward_then_extend_then_backward_again() {
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut Lcg(4));
    let go = |store: &mut ParamStore, run: Run| {
        let mut g = Graph::new();
        let mut ex = Exec::new(run);
        let first = first_half(&mut g, &m, &mut Lcg(8));
        let hs: Vec<Expr> = first.iter().map(|&(_, h)| h).collect();
        let s1 = g.sum(&hs).unwrap();
        let loss1 = g.sum_elems(s1).unwrap();
        store.zero_grads().unwrap();
        ex.forward(&mut g, store, loss1);
        let ds = read_decisions(&g, &first);
        ex.backward(&mut g, store, loss1);
        let a = snapshot(&g, store);
        let mut losses = second_half(&mut g, &m, &first, &ds);
        losses.push(loss1);
        let loss2 = g.sum(&losses).unwrap();
        store.zero_grads().unwrap();
        ex.backward(&mut g, store, loss2);
        let b = snapshot(&g, store);
        (g, a, b)
    };
    let (_, ra, rb) = go(&mut store, Run::Reference);
    for st in [Strategy::Depth, Strategy::Agenda] {
        let (g, a, b) = go(&mut store, Run::Batched(st));
        assert_same(&a, &ra, &g, &format!("{st:?} first backward"));
        assert_same(&b, &rb, &g, &format!("{st:?} second backward"));
    }
}
