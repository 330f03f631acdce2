//! Recurrent dropout in the Tree-LSTM cells (`tree_lstm_leaf_rd`,
//! `tree_lstm_node_rd`): the candidate is dropped per element with masks
//! from the node's seed, gradients match finite differences with the mask
//! fixed, batched calls equal single ones, evaluation mode is the plain
//! cell, and rate 0 is the plain op itself.

mod common;

use common::{check, vec_t, wavy};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{Expr, Graph, GraphError, ParamStore, Sequential};

fn sig(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `sum(w * x)` with distinct weights.
fn weighted(g: &mut Graph, x: Expr, salt: f32) -> sheaf_autodiff::Result<Expr> {
    let n = g.shape(x)?.dims()[0];
    let w = g.input(vec_t(&wavy(n, salt)));
    let y = g.cmult(x, w)?;
    g.sum_elems(y)
}

/// Forward value of a node cell with rate `p` (seed, mode), and the
/// gradients of `weighted(state)` w.r.t. gates, left and right.
fn node_run(p: f32, seed: u64, train: bool, h: usize) -> (Vec<f32>, Vec<Vec<f32>>) {
    let mut store = ParamStore::new();
    let gates = store.add("g", vec_t(&wavy(5 * h, 1.0))).unwrap();
    let left = store.add("l", vec_t(&wavy(2 * h, 2.0))).unwrap();
    let right = store.add("r", vec_t(&wavy(2 * h, 3.0))).unwrap();
    let mut g = Graph::new();
    g.set_seed(seed);
    g.set_train(train);
    let (ge, le, re) = (g.param(&gates), g.param(&left), g.param(&right));
    let s = if p == 0.0 {
        g.tree_lstm_node(ge, le, re).unwrap()
    } else {
        g.tree_lstm_node_rd(ge, le, re, p).unwrap()
    };
    let loss = weighted(&mut g, s, 4.0).unwrap();
    let seq = Sequential::new();
    seq.backward(&mut g, &store, loss).unwrap();
    let value = g.value(s).unwrap().to_vec::<f32>().unwrap();
    let grads = [gates, left, right]
        .iter()
        .map(|x| store.grad(x).unwrap().to_vec::<f32>().unwrap())
        .collect();
    (value, grads)
}

#[test]
fn node_drops_the_candidate_only() {
    let (h, p) = (4000, 0.25f32);
    let keep = 1.0 / (1.0 - p);
    let gates = wavy(5 * h, 1.0);
    let (cl, cr) = (wavy(2 * h, 2.0), wavy(2 * h, 3.0));
    let (state, _) = node_run(p, 9, true, h);
    let mut dropped = 0;
    for k in 0..h {
        let gate = |j: usize| gates[j * h + k];
        let cand = sig(gate(0)) * gate(4).tanh();
        let memory = sig(gate(1)) * cl[k] + sig(gate(2)) * cr[k];
        let c = state[k];
        let kept = (c - (cand * keep + memory)).abs() < 1e-5;
        let gone = (c - memory).abs() < 1e-6;
        assert!(
            kept || gone,
            "element {k}: c {c}, candidate {cand}, memory {memory}"
        );
        dropped += usize::from(gone && !kept);
        let want_h = sig(gate(3)) * c.tanh();
        assert!((state[h + k] - want_h).abs() < 1e-5, "h of element {k}");
    }
    // Binomial standard deviation ~0.007; allow 4 of them.
    let frac = dropped as f32 / h as f32;
    assert!((frac - p).abs() < 0.03, "dropped {frac}");
    assert_eq!(node_run(p, 9, true, h).0, state, "same seed, same mask");
    assert_ne!(
        node_run(p, 10, true, h).0,
        state,
        "another seed, another mask"
    );
}

#[test]
fn evaluation_mode_is_the_plain_cell() {
    let plain = node_run(0.0, 3, false, 13);
    assert_eq!(node_run(0.4, 3, false, 13), plain);
    // ... also in training mode without dropout.
    assert_eq!(node_run(0.0, 3, true, 13), plain);
    let leaf = |p: f32| {
        let mut g = Graph::new();
        g.set_train(false);
        let x = g.input(vec_t(&wavy(30, 5.0)));
        let s = if p == 0.0 {
            g.tree_lstm_leaf(x).unwrap()
        } else {
            g.tree_lstm_leaf_rd(x, p).unwrap()
        };
        let store = ParamStore::new();
        Sequential::new()
            .forward(&mut g, &store, s)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    assert_eq!(leaf(0.5), leaf(0.0));
}

#[test]
fn rate_is_part_of_the_signature_and_zero_is_the_plain_op() {
    let mut g = Graph::new();
    let x = g.input(vec_t(&[0.0; 6]));
    let s = g.input(vec_t(&[0.0; 4]));
    let y = g.input(vec_t(&[0.0; 10]));
    let sig_of = |g: &Graph, e: Expr| g.node(e.node()).sig();
    let plain = g.tree_lstm_leaf(x).unwrap();
    let zero = g.tree_lstm_leaf_rd(x, 0.0).unwrap();
    let neg_zero = g.tree_lstm_leaf_rd(x, -0.0).unwrap();
    let a = g.tree_lstm_leaf_rd(x, 0.25).unwrap();
    let b = g.tree_lstm_leaf_rd(x, 0.25).unwrap();
    let c = g.tree_lstm_leaf_rd(x, 0.5).unwrap();
    assert_eq!(sig_of(&g, zero), sig_of(&g, plain));
    assert_eq!(sig_of(&g, neg_zero), sig_of(&g, plain));
    assert_eq!(sig_of(&g, a), sig_of(&g, b));
    assert_ne!(sig_of(&g, a), sig_of(&g, plain));
    assert_ne!(sig_of(&g, a), sig_of(&g, c));
    let n0 = g.tree_lstm_node(y, s, s).unwrap();
    let n1 = g.tree_lstm_node_rd(y, s, s, 0.0).unwrap();
    let n2 = g.tree_lstm_node_rd(y, s, s, 0.25).unwrap();
    assert_eq!(sig_of(&g, n0), sig_of(&g, n1));
    assert_ne!(sig_of(&g, n0), sig_of(&g, n2));
    let info = &g.signatures()[sig_of(&g, n2).index()];
    assert_eq!(info.name, "tree_lstm_node");
}

#[test]
fn bad_rates_are_clear_errors() {
    let mut g = Graph::new();
    let x = g.input(vec_t(&[0.0; 6]));
    let y = g.input(vec_t(&[0.0; 10]));
    let s = g.input(vec_t(&[0.0; 4]));
    for p in [1.0f32, -0.1, f32::NAN] {
        let err = g.tree_lstm_leaf_rd(x, p).unwrap_err();
        assert!(
            matches!(
                err,
                GraphError::Data {
                    op: "tree_lstm_leaf",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("recurrent dropout rate"), "{err}");
        let err = g.tree_lstm_node_rd(y, s, s, p).unwrap_err();
        assert!(
            matches!(
                err,
                GraphError::Data {
                    op: "tree_lstm_node",
                    ..
                }
            ),
            "{err}"
        );
    }
    // Shapes are still checked with a rate.
    let err = g.tree_lstm_leaf_rd(y, 0.5).unwrap_err();
    assert!(err.to_string().contains("gates [3H]"), "{err}");
}

// Gradient checks run every graph with seed 0 in training mode: the masks
// repeat, so the loss is a fixed smooth function of the inputs.

#[test]
fn leaf_gradients_with_dropout() {
    check(
        &|g, p| {
            let s = g.tree_lstm_leaf_rd(p[0], 0.5)?;
            weighted(g, s, 5.0)
        },
        &[wavy(3 * 8, 1.0)],
    );
}

#[test]
fn node_and_tree_gradients_with_dropout() {
    let h = 8;
    check(
        &|g, p| {
            let s = g.tree_lstm_node_rd(p[0], p[1], p[2], 0.4)?;
            weighted(g, s, 5.0)
        },
        &[wavy(5 * h, 1.0), wavy(2 * h, 2.0), wavy(2 * h, 3.0)],
    );
    check(
        &|g, p| {
            let l1 = g.tree_lstm_leaf_rd(p[0], 0.4)?;
            let l2 = g.tree_lstm_leaf_rd(p[1], 0.4)?;
            let n1 = g.tree_lstm_node_rd(p[2], l1, l2, 0.4)?;
            let n2 = g.tree_lstm_node_rd(p[3], l1, l1, 0.4)?;
            let root = g.tree_lstm_node_rd(p[4], n1, n2, 0.4)?;
            let hh = g.cell_h(root)?;
            weighted(g, hh, 7.0)
        },
        &[
            wavy(3 * h, 1.0),
            wavy(3 * h, 2.0),
            wavy(5 * h, 3.0),
            wavy(5 * h, 4.0),
            wavy(5 * h, 5.0),
        ],
    );
}

#[test]
fn dropout_cells_batch_like_single_calls() {
    for h in [5, 13] {
        let mut g = Graph::new();
        let zeros = |n: usize| vec_t(&vec![0.0; n]);
        let g3 = g.input(zeros(3 * h));
        let g5 = g.input(zeros(5 * h));
        let s = g.input(zeros(2 * h));
        for p in [0.25f32, 0.6] {
            let cases = [
                (g.tree_lstm_leaf_rd(g3, p).unwrap(), vec![3 * h]),
                (
                    g.tree_lstm_node_rd(g5, s, s, p).unwrap(),
                    vec![5 * h, 2 * h, 2 * h],
                ),
            ];
            for (e, lens) in cases {
                let node = e.node();
                for b in [1, 4] {
                    let instances: Vec<Instance> = (0..b)
                        .map(|r| Instance {
                            args: lens
                                .iter()
                                .enumerate()
                                .map(|(j, &n)| vec_t(&wavy(n, (r * 10 + j) as f32 + 0.5)))
                                .collect(),
                            data: 0,
                            seed: 1000 + 17 * r as u64,
                        })
                        .collect();
                    check_batching(g.op(node), &instances, g.node(node).attr(), 0.0)
                        .unwrap_or_else(|m| panic!("H = {h}, p = {p}, b = {b}: {m}"));
                }
            }
        }
    }
}
