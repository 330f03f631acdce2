//! Inputs are stacked by shape into one buffer per forward (`leaves.rs`):
//! a batch over inputs made in order reads them in place, values and
//! gradients equal the sequential run, each input still reads as its own
//! value, and an input as the loss, large inputs and inputs added by a
//! later (incremental) forward work as before.

mod common;

use common::{tensor, Lcg};
use sheaf_autodiff::{Expr, Graph, ParamStore};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

/// 30 inputs of [6] and 12 of [4] (interleaved), each through its own
/// affine and tanh, summed into one loss.
fn model(g: &mut Graph, store: &mut ParamStore, rng: &mut Lcg) -> (Expr, Vec<(Expr, Tensor)>) {
    let w6 = store.add("w6", tensor(rng, &[5, 6], 0.5)).unwrap();
    let w4 = store.add("w4", tensor(rng, &[5, 4], 0.5)).unwrap();
    let b = store.add("b", tensor(rng, &[5], 0.5)).unwrap();
    let (w6, w4, b) = (g.param(&w6), g.param(&w4), g.param(&b));
    let mut inputs = Vec::new();
    let mut terms = Vec::new();
    for i in 0..42 {
        let (w, len) = if i % 7 < 5 { (w6, 6) } else { (w4, 4) };
        let v = tensor(rng, &[len], 1.0);
        let x = g.input(v.clone());
        inputs.push((x, v));
        let a = g.affine(b, &[(w, x)]).unwrap();
        let h = g.tanh(a).unwrap();
        terms.push(g.sum_elems(h).unwrap());
    }
    (g.sum(&terms).unwrap(), inputs)
}

#[test]
fn inputs_in_order_are_read_in_place_and_equal_sequential() {
    let mut results = Vec::new();
    for strategy in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut store = ParamStore::new();
        let mut g = Graph::new();
        let (loss, inputs) = model(&mut g, &mut store, &mut Lcg(3));
        let mut e = Executor::new(strategy);
        let value = e
            .forward(&mut g, &store, loss)
            .unwrap()
            .item::<f32>()
            .unwrap();
        e.backward(&mut g, &store, loss).unwrap();
        for (x, v) in &inputs {
            assert_eq!(
                g.value(*x).unwrap().to_vec::<f32>().unwrap(),
                v.to_vec::<f32>().unwrap(),
                "{strategy:?}: an input's value changed"
            );
        }
        if strategy != Strategy::Sequential {
            let affine = e.stats().gathered_per_op.get("affine").copied();
            assert_eq!(
                affine.unwrap_or(0),
                0,
                "{strategy:?}: inputs made in order were gathered, not viewed"
            );
        }
        let grads: Vec<Vec<f32>> = store
            .params()
            .iter()
            .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
            .collect();
        results.push((strategy, value, grads));
    }
    let (_, v0, g0) = &results[0];
    for (s, v, grads) in &results[1..] {
        assert!(
            (v - v0).abs() <= 1e-5 * v0.abs().max(1.0),
            "{s:?}: {v} vs {v0}"
        );
        for (a, b) in grads.iter().zip(g0) {
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                    "{s:?}: {x} vs {y}"
                );
            }
        }
    }
}

#[test]
fn an_input_as_the_loss_and_large_and_later_inputs() {
    let store = ParamStore::new();
    let mut g = Graph::new();
    let one = g.input(Tensor::from_slice(&[2.5f32], [1]).unwrap());
    let mut e = Executor::new(Strategy::Agenda);
    let v = e.forward(&mut g, &store, one).unwrap();
    assert_eq!(v.item::<f32>().unwrap(), 2.5);
    e.backward(&mut g, &store, one).unwrap();
    // A large input (kept as its own tensor) beside small ones, and inputs
    // added after a first forward.
    let big = g.input(Tensor::from_vec(vec![1.0f32; 70_000], [70_000]).unwrap());
    let s = g.sum_elems(big).unwrap();
    let total = g.add(s, one).unwrap();
    assert_eq!(
        e.forward(&mut g, &store, total)
            .unwrap()
            .item::<f32>()
            .unwrap(),
        70_002.5
    );
    let more = g.input(Tensor::from_slice(&[1.5f32], [1]).unwrap());
    let last = g.add(total, more).unwrap();
    assert_eq!(
        e.forward(&mut g, &store, last)
            .unwrap()
            .item::<f32>()
            .unwrap(),
        70_004.0
    );
    e.backward(&mut g, &store, last).unwrap();
}
