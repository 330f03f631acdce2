//! Deep graphs: a chain of 100,000 nodes and a left-deep tree of height
//! 10,000 plan and run forward and backward under Depth and Agenda on the
//! default test thread's stack. Nothing (planning, executing, backward,
//! dropping the graph) may recurse on depth; a recursive implementation
//! would overflow the stack here. Results are checked against values
//! computed directly (and, for the chain, Sequential's gradients).

mod common;

use common::{assert_close, tensor, Lcg};
use sheaf_autodiff::{Expr, Graph, ParamStore, Sequential};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

const CHAIN: usize = 100_000;
const HEIGHT: usize = 10_000;

fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn chain_of_100k_nodes() {
    let mut store = ParamStore::new();
    let p = store.add("p", tensor(&mut Lcg(1), &[4], 1.0)).unwrap();
    let start = values(store.value(&p).unwrap());
    let build = |g: &mut Graph| {
        let mut x = g.param(&p);
        // param + (CHAIN - 2) alternating tanh / scale + sum_elems.
        for i in 0..CHAIN - 2 {
            x = if i % 2 == 0 {
                g.tanh(x).unwrap()
            } else {
                g.scale(x, 1.5).unwrap()
            };
        }
        g.sum_elems(x).unwrap()
    };
    // Direct value: the chain's fixed-point iteration in plain f32.
    let expected: f32 = start
        .iter()
        .map(|&v| {
            let mut v = v;
            for i in 0..CHAIN - 2 {
                v = if i % 2 == 0 { v.tanh() } else { v * 1.5 };
            }
            v
        })
        .sum();
    store.zero_grads().unwrap();
    let mut g = Graph::new();
    let loss = build(&mut g);
    assert_eq!(g.len(), CHAIN);
    Sequential::new().backward(&mut g, &store, loss).unwrap();
    let reference = values(&store.grad(&p).unwrap());
    drop(g);
    for st in [Strategy::Depth, Strategy::Agenda] {
        store.zero_grads().unwrap();
        let mut g = Graph::new();
        let loss = build(&mut g);
        let mut e = Executor::new(st);
        let v = values(&e.forward(&mut g, &store, loss).unwrap());
        assert_close(&v, &[expected], &format!("{st:?} chain value"));
        e.backward(&mut g, &store, loss).unwrap();
        assert_eq!(e.stats().batches, CHAIN - 1, "{st:?}");
        assert_close(
            &values(&store.grad(&p).unwrap()),
            &reference,
            &format!("{st:?} chain gradient"),
        );
        // Dropping a deep graph must not recurse either.
        drop(g);
    }
}

#[test]
fn left_deep_tree_of_height_10k() {
    let store = ParamStore::new();
    let mut rng = Lcg(2);
    let leaves: Vec<Tensor> = (0..=HEIGHT).map(|_| tensor(&mut rng, &[3], 1.0)).collect();
    let expected: Vec<f32> = (0..3)
        .map(|j| leaves.iter().map(|t| values(t)[j].tanh()).sum())
        .collect();
    for st in [Strategy::Depth, Strategy::Agenda] {
        let mut g = Graph::new();
        let ts: Vec<Expr> = leaves
            .iter()
            .map(|t| {
                let x = g.input(t.clone());
                g.tanh(x).unwrap()
            })
            .collect();
        let mut acc = ts[0];
        for &t in &ts[1..] {
            acc = g.add(acc, t).unwrap();
        }
        assert_eq!(
            g.node(g.check(acc, "test").unwrap()).depth() as usize,
            HEIGHT + 1
        );
        let loss = g.sum_elems(acc).unwrap();
        let mut e = Executor::new(st);
        let v = values(&e.forward(&mut g, &store, acc).unwrap());
        // Summation order is the same; only rounding of tanh may differ.
        assert_close(&v, &expected, &format!("{st:?} tree value"));
        e.backward(&mut g, &store, loss).unwrap();
        // All leaves' tanh run as one batch; the adds one per level.
        assert_eq!(e.stats().per_op["tanh"], (1, HEIGHT + 1), "{st:?}");
        assert_eq!(e.stats().per_op["add"], (HEIGHT, HEIGHT), "{st:?}");
        for &t in &ts {
            assert_close(
                &values(g.grad(t).unwrap()),
                &[1.0; 3],
                &format!("{st:?} leaf grad"),
            );
        }
    }
}
