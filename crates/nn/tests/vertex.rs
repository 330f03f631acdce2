//! Recurrent layers with their steps as vertex functions
//! (`with_vertex_functions`) equal the same layers built op by op: 2-layer
//! bidirectional LSTM, GRU and Elman stacks over sequences of several
//! lengths, values and every gradient, under Sequential, Depth and Agenda,
//! in training mode without dropout and in evaluation mode with recurrent
//! dropout configured; and a step adds one node.

mod common;

use common::{data, input, randomize, run_all};
use sheaf_autodiff::{Expr, Graph, ParamStore};
use sheaf_nn::prelude::*;
use sheaf_nn::{Cell, Recurrent};
use sheaf_sched::Strategy;

fn close(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-5 * (1.0 + x.abs().max(y.abs())),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

fn outputs<C: Cell>(g: &mut Graph, layer: &Recurrent<C>, train: bool) -> Vec<Expr> {
    g.set_train(train);
    let mut outs = Vec::new();
    for (k, len) in [1usize, 3, 5].into_iter().enumerate() {
        let xs: Vec<Expr> = (0..len)
            .map(|t| input(g, &data(4, (10 * k + t) as u64)))
            .collect();
        outs.extend(layer.transduce(g, &xs).unwrap());
    }
    outs
}

fn check<C: Cell>(make: impl Fn(&mut Scope<'_>, RecurrentConfig) -> Recurrent<C>) {
    for (train, rd) in [(true, 0.0), (false, 0.3)] {
        let cfg = RecurrentConfig {
            layers: 2,
            bidirectional: true,
            recurrent_dropout: rd,
            ..RecurrentConfig::new(3)
        };
        let mut store = ParamStore::new();
        let plain = make(&mut Scope::new(&mut store, 5), cfg);
        randomize(&mut store);
        let unfolded = plain.clone().with_vertex_functions().unwrap();
        let folded = unfolded.clone().fold_input_products(true);
        for (exec, fold) in [None, Some(Strategy::Depth), Some(Strategy::Agenda)]
            .into_iter()
            .flat_map(|e| [(e, false), (e, true)])
        {
            let called = if fold { &folded } else { &unfolded };
            let what = format!("{} train {train} {exec:?} fold {fold}", C::NAME);
            let mut g = Graph::new();
            let outs = outputs(&mut g, &plain, train);
            let (want, want_grads) = run_all(&mut g, &mut store, &outs, exec);
            let plain_nodes = g.len();
            let mut g = Graph::new();
            let outs = outputs(&mut g, called, train);
            let (got, grads) = run_all(&mut g, &mut store, &outs, exec);
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                close(&format!("{what} output {k}"), a, b);
            }
            for (k, (a, b)) in grads.iter().zip(&want_grads).enumerate() {
                close(&format!("{what} gradient {k}"), a, b);
                assert!(
                    a.iter().any(|v| *v != 0.0),
                    "{what}: parameter {k} got no gradient"
                );
            }
            assert!(
                g.len() < plain_nodes,
                "{what}: {} vs {plain_nodes} nodes",
                g.len()
            );
            if fold {
                // One node fewer per step after the first of each run: the
                // input product is inside the call.
                let mut g2 = Graph::new();
                outputs(&mut g2, &unfolded, train);
                assert!(
                    g.len() < g2.len(),
                    "{what}: {} vs {} unfolded",
                    g.len(),
                    g2.len()
                );
            }
        }
    }
}

#[test]
fn lstm_steps_as_calls_equal_the_ops() {
    check(|s, cfg| Lstm::new(s, 4, cfg).unwrap());
}

#[test]
fn gru_steps_as_calls_equal_the_ops() {
    check(|s, cfg| Gru::new(s, 4, cfg).unwrap());
}

#[test]
fn elman_steps_as_calls_equal_the_ops() {
    check(|s, cfg| Rnn::new(s, 4, cfg).unwrap());
}
