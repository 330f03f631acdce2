//! The layers against their equations and against the batching executors.
//!
//! - LSTM, GRU and Elman steps against the equations computed here in f64
//!   from the parameters' values (PyTorch's `LSTMCell` with the documented
//!   row order, `GRUCell` as is): within 1e-5 (the CPU's vectorised
//!   sigmoid and tanh err by ~2e-7 relative, a few operations deep).
//! - Stacked bidirectional layers over sequences of several lengths in one
//!   graph: Depth and Agenda give the values and parameter gradients of
//!   Sequential within 1e-4 (1 + |x|) (summation order only, as in the
//!   scheduler's own equality tests).
//! - Finite-difference gradient checks through `transduce`.
//! - Names, seeds and error texts.

use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::{Expr, Graph, GraphError, Param, ParamStore, Sequential};
use sheaf_nn::prelude::*;
use sheaf_nn::{Cell, Recurrent};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

mod common;
use common::*;

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

#[test]
fn lstm_step_follows_pytorch_lstmcell() {
    let (inp, h) = (5, 3);
    let mut store = ParamStore::new();
    let lstm = Lstm::new(&mut Scope::new(&mut store, 1), inp, RecurrentConfig::new(h)).unwrap();
    randomize(&mut store);
    let [w, u, b] = [0, 1, 2].map(|i| vals(&store, &lstm.params()[i]));
    let (x, h0, c0) = (data(inp, 7), data(h, 8), data(h, 9));
    let mut g = Graph::new();
    let xe = input(&mut g, &x);
    let s0: Vec<f32> = c0.iter().chain(&h0).copied().collect();
    let state = State::new(vec![input(&mut g, &s0)]);
    let s1 = lstm.step(&mut g, &state, xe).unwrap();
    let got = run(&mut g, &store, s1.states[0]);
    // PyTorch's LSTMCell on weights converted as the module docs say:
    // rows [i; f; g; o] are sheaf's blocks 0, 1, 3, 2 (g is sheaf's u).
    let to_torch = |m: &[f64]| -> Vec<f64> {
        let rows = m.len() / 4;
        [0, 1, 3, 2]
            .iter()
            .flat_map(|&k| m[k * rows..(k + 1) * rows].to_vec())
            .collect()
    };
    let (w_ih, w_hh, bias) = (to_torch(&w), to_torch(&u), to_torch(&b));
    let f = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
    let (x, h0, c0) = (f(&x), f(&h0), f(&c0));
    let pre: Vec<f64> = mv(&w_ih, &x)
        .iter()
        .zip(mv(&w_hh, &h0))
        .zip(&bias)
        .map(|((a, b2), c)| a + b2 + c)
        .collect();
    let block = |k: usize| &pre[k * h..(k + 1) * h];
    let (i, fg, gg, o) = (block(0), block(1), block(2), block(3));
    let c: Vec<f64> = (0..h)
        .map(|j| sig(fg[j]) * c0[j] + sig(i[j]) * gg[j].tanh())
        .collect();
    let hn: Vec<f64> = (0..h).map(|j| sig(o[j]) * c[j].tanh()).collect();
    let want: Vec<f64> = c.iter().chain(&hn).copied().collect();
    close("lstm [c | h]", &got, &want, 1e-5);
}

#[test]
fn gru_step_follows_pytorch_grucell() {
    let (inp, h) = (4, 3);
    let mut store = ParamStore::new();
    let gru = Gru::new(&mut Scope::new(&mut store, 2), inp, RecurrentConfig::new(h)).unwrap();
    randomize(&mut store);
    let [w, u, b, bu] = [0, 1, 2, 3].map(|i| vals(&store, &gru.params()[i]));
    let (x, h0) = (data(inp, 3), data(h, 4));
    let mut g = Graph::new();
    let (xe, he) = (input(&mut g, &x), input(&mut g, &h0));
    let s1 = gru.step(&mut g, &State::new(vec![he]), xe).unwrap();
    let got = run(&mut g, &store, s1.states[0]);
    let f = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
    let (x, h0) = (f(&x), f(&h0));
    let gi: Vec<f64> = mv(&w, &x).iter().zip(&b).map(|(a, c)| a + c).collect();
    let gh: Vec<f64> = mv(&u, &h0).iter().zip(&bu).map(|(a, c)| a + c).collect();
    let want: Vec<f64> = (0..h)
        .map(|j| {
            let r = sig(gi[j] + gh[j]);
            let z = sig(gi[h + j] + gh[h + j]);
            let n = (gi[2 * h + j] + r * gh[2 * h + j]).tanh();
            (1.0 - z) * n + z * h0[j]
        })
        .collect();
    close("gru h", &got, &want, 1e-5);
}

#[test]
fn elman_step_is_tanh_of_both_products() {
    let (inp, h) = (3, 4);
    let mut store = ParamStore::new();
    let rnn = Rnn::new(&mut Scope::new(&mut store, 3), inp, RecurrentConfig::new(h)).unwrap();
    randomize(&mut store);
    let [w, u, b] = [0, 1, 2].map(|i| vals(&store, &rnn.params()[i]));
    let (x, h0) = (data(inp, 5), data(h, 6));
    let mut g = Graph::new();
    let (xe, he) = (input(&mut g, &x), input(&mut g, &h0));
    let s1 = rnn.step(&mut g, &State::new(vec![he]), xe).unwrap();
    let got = run(&mut g, &store, s1.states[0]);
    let f = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
    let want: Vec<f64> = mv(&w, &f(&x))
        .iter()
        .zip(mv(&u, &f(&h0)))
        .zip(&b)
        .map(|((a, c), d)| (a + c + d).tanh())
        .collect();
    close("rnn h", &got, &want, 1e-5);
}

/// Values of every output and gradients of every parameter of `layer`
/// over sequences of lengths 1, 4 and 7 in one graph, under `exec`.
fn sequences<C: Cell>(
    layer: &Recurrent<C>,
    store: &ParamStore,
    inp: usize,
    exec: Option<Strategy>,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    store.params().iter().for_each(|p| {
        let mut acc = store.lock_grad(p.id(), "test").unwrap();
        acc.grad = Tensor::zeros(
            p.shape(),
            sheaf_tensor::DType::F32,
            sheaf_tensor::Device::Cpu,
        )
        .unwrap();
        acc.dense = false;
    });
    let mut g = Graph::new();
    let mut outs = Vec::new();
    for (s, len) in [1usize, 4, 7].into_iter().enumerate() {
        let xs: Vec<Expr> = (0..len)
            .map(|t| input(&mut g, &data(inp, (10 * s + t) as u64)))
            .collect();
        outs.extend(layer.transduce(&mut g, &xs).unwrap());
    }
    let sums: Vec<Expr> = outs.iter().map(|&o| g.sum_elems(o).unwrap()).collect();
    let loss = g.sum(&sums).unwrap();
    match exec {
        None => {
            Sequential::new().backward(&mut g, store, loss).unwrap();
        }
        Some(s) => {
            let mut x = Executor::new(s);
            x.forward(&mut g, store, loss).unwrap();
            x.backward(&mut g, store, loss).unwrap();
        }
    }
    let values = outs
        .iter()
        .map(|&o| g.value(o).unwrap().to_vec().unwrap())
        .collect();
    let grads = store
        .params()
        .iter()
        .map(|p| store.grad(p).unwrap().to_vec().unwrap())
        .collect();
    (values, grads)
}

fn batched_equals_sequential<C: Cell>(seed: u64) {
    let inp = 5;
    let mut store = ParamStore::new();
    let cfg = RecurrentConfig {
        layers: 2,
        bidirectional: true,
        ..RecurrentConfig::new(6)
    };
    let layer = Recurrent::<C>::new(&mut Scope::new(&mut store, seed), inp, cfg).unwrap();
    randomize(&mut store);
    let (v0, g0) = sequences(&layer, &store, inp, None);
    for s in [Strategy::Depth, Strategy::Agenda] {
        let (v, gr) = sequences(&layer, &store, inp, Some(s));
        for (what, a, b) in [("value", &v, &v0), ("gradient", &gr, &g0)] {
            for (k, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    assert!(
                        (p - q).abs() <= 1e-4 * (1.0 + p.abs().max(q.abs())),
                        "{} {s:?} {what} {k}[{i}]: {p} vs {q} sequentially",
                        C::NAME
                    );
                }
            }
        }
    }
    // Every parameter got a gradient (both directions, both layers).
    assert!(g0.iter().all(|g| g.iter().any(|&x| x != 0.0)));
}

#[test]
fn stacked_bidirectional_layers_batch_like_sequential() {
    batched_equals_sequential::<sheaf_nn::LstmCell>(11);
    batched_equals_sequential::<sheaf_nn::GruCell>(12);
    batched_equals_sequential::<sheaf_nn::RnnCell>(13);
}

#[test]
fn transduce_equals_stepping_by_hand() {
    let inp = 3;
    let mut store = ParamStore::new();
    let cfg = RecurrentConfig {
        layers: 2,
        ..RecurrentConfig::new(4)
    };
    let lstm = Lstm::new(&mut Scope::new(&mut store, 4), inp, cfg).unwrap();
    randomize(&mut store);
    let mut g = Graph::new();
    let xs: Vec<Expr> = (0..5).map(|t| input(&mut g, &data(inp, t))).collect();
    let ys = lstm.transduce(&mut g, &xs).unwrap();
    let mut state = lstm.zero_state(&mut g).unwrap();
    let mut by_hand = Vec::new();
    for &x in &xs {
        state = lstm.step(&mut g, &state, x).unwrap();
        by_hand.push(lstm.output(&mut g, &state).unwrap());
    }
    // From zero states the first step leaves out U 0: the same values as
    // the same zeros given as an ordinary state.
    let zeros = lstm.zero_state(&mut g).unwrap();
    let plain = lstm
        .transduce_from(&mut g, &xs, &State::new(zeros.states))
        .unwrap();
    for (t, ((&a, &b), &c)) in ys.iter().zip(&by_hand).zip(&plain).enumerate() {
        let (a, b) = (run(&mut g, &store, a), run(&mut g, &store, b));
        assert_eq!(a, b, "position {t}");
        let c = run(&mut g, &store, c);
        close(
            &format!("position {t} from plain zeros"),
            &c,
            &f64s(&a),
            1e-6,
        );
    }
}

/// From `zero_state` the first step leaves out `U 0`: the same values as
/// the same zeros given as a plain state; and a zero state the user
/// replaced gets its recurrent product again.
fn zero_states_are_only_skipped_while_zero<C: Cell>(seed: u64) {
    let inp = 3;
    let mut store = ParamStore::new();
    let cfg = RecurrentConfig {
        layers: 2,
        bidirectional: true,
        ..RecurrentConfig::new(4)
    };
    let layer = Recurrent::<C>::new(&mut Scope::new(&mut store, seed), inp, cfg).unwrap();
    randomize(&mut store);
    let mut g = Graph::new();
    let xs: Vec<Expr> = (0..4).map(|t| input(&mut g, &data(inp, 60 + t))).collect();
    let zero = layer.zero_state(&mut g).unwrap();
    let a = layer.transduce_from(&mut g, &xs, &zero).unwrap();
    let plain = layer
        .transduce_from(&mut g, &xs, &State::new(zero.states.clone()))
        .unwrap();
    // A nonzero state put in place of a zero one.
    let width = zero.states.len();
    let mut edited = zero.clone();
    let given: Vec<Expr> = (0..width)
        .map(|k| {
            let w = g.shape(zero.states[k]).unwrap().dims()[0];
            input(&mut g, &data(w, 70 + k as u64))
        })
        .collect();
    edited.states = given.clone();
    let b = layer.transduce_from(&mut g, &xs, &edited).unwrap();
    let c = layer
        .transduce_from(&mut g, &xs, &State::new(given))
        .unwrap();
    for t in 0..xs.len() {
        let (va, vp) = (run(&mut g, &store, a[t]), run(&mut g, &store, plain[t]));
        close(
            &format!("{} zero vs plain {t}", C::NAME),
            &va,
            &f64s(&vp),
            1e-6,
        );
        let (vb, vc) = (run(&mut g, &store, b[t]), run(&mut g, &store, c[t]));
        assert_eq!(
            vb,
            vc,
            "{} edited zero state vs plain, position {t}",
            C::NAME
        );
    }
}

#[test]
fn zero_states_are_skipped_only_while_zero() {
    zero_states_are_only_skipped_while_zero::<sheaf_nn::LstmCell>(21);
    zero_states_are_only_skipped_while_zero::<sheaf_nn::GruCell>(22);
    zero_states_are_only_skipped_while_zero::<sheaf_nn::RnnCell>(23);
}

#[test]
fn gradients_through_transduce_match_finite_differences() {
    let inp = 3;
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 5);
    let cfg = RecurrentConfig {
        bidirectional: true,
        ..RecurrentConfig::new(2)
    };
    let gru = Gru::new(&mut root.sub("gru").unwrap(), inp, cfg).unwrap();
    let lstm = Lstm::new(&mut root.sub("lstm").unwrap(), 4, RecurrentConfig::new(2)).unwrap();
    randomize(&mut store);
    let params: Vec<Param> = gru.params().into_iter().chain(lstm.params()).collect();
    let build = |g: &mut Graph, _: &[Expr]| -> Result<Expr, GraphError> {
        let xs: Vec<Expr> = (0..3).map(|t| input(g, &data(inp, 40 + t))).collect();
        let hs = gru.transduce(g, &xs)?;
        let ys = lstm.transduce(g, &hs)?;
        let sq: Vec<Expr> = ys.iter().map(|&y| g.dot(y, y)).collect::<Result<_, _>>()?;
        g.sum(&sq)
    };
    check_gradients(&mut store, &params, &build, GradCheck::default()).unwrap();
}

#[test]
fn tree_lstm_equals_the_raw_cell_ops() {
    let (inp, h) = (4, 3);
    let mut store = ParamStore::new();
    let cell = BinaryTreeLstm::new(&mut Scope::new(&mut store, 6), inp, h, 0.0).unwrap();
    randomize(&mut store);
    let [wl, bl, u, b] = cell.params();
    let mut g = Graph::new();
    let (x1, x2) = (input(&mut g, &data(inp, 1)), input(&mut g, &data(inp, 2)));
    let (l, r) = (
        cell.leaf(&mut g, x1).unwrap(),
        cell.leaf(&mut g, x2).unwrap(),
    );
    let root = cell.node(&mut g, l, r).unwrap();
    // The same tree from the ops themselves.
    let raw = |g: &mut Graph, x: Expr| {
        let (w, bb) = (g.param(&wl), g.param(&bl));
        let gates = g.affine(bb, &[(w, x)]).unwrap();
        g.tree_lstm_leaf(gates).unwrap()
    };
    let (rl, rr) = (raw(&mut g, x1), raw(&mut g, x2));
    let (hl, hr) = (g.cell_h(rl).unwrap(), g.cell_h(rr).unwrap());
    let hh = g.concat(&[hl, hr]).unwrap();
    let (ue, be) = (g.param(&u), g.param(&b));
    let gates = g.affine(be, &[(ue, hh)]).unwrap();
    let want = g.tree_lstm_node(gates, rl, rr).unwrap();
    assert_eq!(run(&mut g, &store, root), run(&mut g, &store, want));
}

#[test]
fn scopes_name_and_seed_parameters_by_path() {
    let make = |order: bool| {
        let mut store = ParamStore::new();
        let mut root = Scope::new(&mut store, 9);
        if order {
            Linear::new(&mut root.sub("a").unwrap(), 3, 2, true).unwrap();
            Linear::new(&mut root.sub("b").unwrap(), 3, 2, true).unwrap();
        } else {
            Linear::new(&mut root.sub("b").unwrap(), 3, 2, true).unwrap();
            Linear::new(&mut root.sub("a").unwrap(), 3, 2, true).unwrap();
        }
        let w = store.get("a.w").unwrap();
        store.value(&w).unwrap().to_vec::<f32>().unwrap()
    };
    // Values depend on the name and seed, not on the order of creation.
    assert_eq!(make(true), make(false));
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 9);
    let mut enc = root.sub("enc").unwrap();
    let cfg = RecurrentConfig {
        layers: 2,
        bidirectional: true,
        ..RecurrentConfig::new(4)
    };
    let gru = Gru::new(&mut enc.sub("gru").unwrap(), 3, cfg).unwrap();
    assert_eq!(gru.params().len(), 2 * 2 * 4);
    for name in ["enc.gru.l0.fwd.w", "enc.gru.l1.bwd.b_u", "enc.gru.l1.fwd.u"] {
        assert!(store.get(name).is_some(), "{name}");
    }
    assert_eq!(
        store.get("enc.gru.l1.fwd.w").unwrap().shape().dims(),
        &[12, 8],
        "layer 1 reads both directions of layer 0"
    );
    // Duplicates and bad names are errors that name them.
    let mut root = Scope::new(&mut store, 9);
    let e = Linear::new(
        &mut root
            .sub("enc")
            .unwrap()
            .sub("gru")
            .unwrap()
            .sub("l0")
            .unwrap()
            .sub("fwd")
            .unwrap(),
        3,
        12,
        true,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("\"enc.gru.l0.fwd.w\" already exists"),
        "{e}"
    );
    for bad in ["", "a.b"] {
        let e = root.sub(bad).unwrap_err();
        assert!(e.to_string().contains("without '.'"), "{e}");
    }
}

#[test]
fn mistakes_are_errors_that_name_the_layer() {
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 1);
    let cfg = RecurrentConfig {
        bidirectional: true,
        ..RecurrentConfig::new(4)
    };
    let lstm = Lstm::new(&mut root.sub("enc").unwrap(), 3, cfg).unwrap();
    let mut g = Graph::new();
    let xs = [input(&mut g, &[1.0, 2.0, 3.0]), input(&mut g, &[1.0, 2.0])];
    let e = lstm.transduce(&mut g, &xs).unwrap_err().to_string();
    assert!(
        e.contains("Lstm \"enc\"")
            && e.contains("position 1")
            && e.contains("[2]")
            && e.contains("[3]"),
        "{e}"
    );
    let e = lstm.transduce(&mut g, &[]).unwrap_err().to_string();
    assert!(e.contains("empty sequence"), "{e}");
    let state = lstm.zero_state(&mut g).unwrap();
    let e = lstm.step(&mut g, &state, xs[0]).unwrap_err().to_string();
    assert!(e.contains("bidirectional"), "{e}");
    let e = Mlp::new(&mut root.sub("mlp").unwrap(), &[4], Activation::Relu, 0.0).unwrap_err();
    assert!(e.to_string().contains("input and an output size"), "{e}");
    let e = Gru::new(
        &mut root.sub("g").unwrap(),
        3,
        RecurrentConfig {
            input_dropout: 1.0,
            ..RecurrentConfig::new(2)
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("input dropout"), "{e}");
}

#[test]
fn mlp_stacks_linear_layers_with_activations() {
    let mut store = ParamStore::new();
    let mlp = Mlp::new(
        &mut Scope::new(&mut store, 3),
        &[3, 5, 2],
        Activation::Relu,
        0.0,
    )
    .unwrap();
    randomize(&mut store);
    let [l0, l1] = [mlp.layers()[0], mlp.layers()[1]];
    let x = data(3, 1);
    let mut g = Graph::new();
    let xe = input(&mut g, &x);
    let y = mlp.forward(&mut g, xe).unwrap();
    let got = run(&mut g, &store, y);
    let f = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<f64>>();
    let (w0, b0) = (
        vals(&store, &l0.weight()),
        vals(&store, &l0.bias().unwrap()),
    );
    let (w1, b1) = (
        vals(&store, &l1.weight()),
        vals(&store, &l1.bias().unwrap()),
    );
    let h: Vec<f64> = mv(&w0, &f(x))
        .iter()
        .zip(&b0)
        .map(|(a, b)| (a + b).max(0.0))
        .collect();
    let want: Vec<f64> = mv(&w1, &h).iter().zip(&b1).map(|(a, b)| a + b).collect();
    close("mlp", &got, &want, 1e-5);
}
