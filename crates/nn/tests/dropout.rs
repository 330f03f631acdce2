//! Dropout in the layers: recurrent dropout (Semeniuta et al. 2016) in
//! `Lstm` / `Gru` / `Rnn`, input and output dropout of the recurrent
//! layers, and `Mlp`'s dropout.
//!
//! - At rate 0, and at any rate in evaluation mode, a layer builds the
//!   graph of a layer without dropout: the same ops, the same values.
//! - In training mode a layer equals the same model written here with raw
//!   graph ops, node for node (so with the same masks: a mask depends on
//!   the graph's seed and the node's position only): values and parameter
//!   gradients under Sequential exactly, under Depth and Agenda within
//!   1e-4 (1 + |x|) (summation order only).
//! - The masks act where the docs say: from one step's values, computed
//!   in f64, each LSTM / GRU candidate element is scaled by 0 or 1 / (1 - p)
//!   and the memory is never dropped.
//! - Finite-difference gradient checks in training mode (the masks repeat
//!   because the check rebuilds the same graph with the same seed).

use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::{Expr, Graph, GraphError, Param, ParamStore};
use sheaf_nn::prelude::*;
use sheaf_nn::{Cell, GruCell, LstmCell, Recurrent, RnnCell, Unit};
use sheaf_sched::Strategy;
use sheaf_tensor::{DType, Device, Tensor};

mod common;
use common::*;

const P: f32 = 0.5;

fn zeros(g: &mut Graph, n: usize) -> Expr {
    g.input(Tensor::zeros([n], DType::F32, Device::Cpu).unwrap())
}

/// A graph with `seed`, every parameter of `params` put on it first (so
/// their nodes come first whatever builds the rest) and the inputs of
/// sequences of lengths 1, 3 and 5.
fn setup(params: &[Param], inp: usize, train: bool) -> (Graph, Vec<Vec<Expr>>) {
    let mut g = Graph::new();
    g.set_seed(77);
    g.set_train(train);
    for p in params {
        g.param(p);
    }
    let seqs = [1usize, 3, 5]
        .iter()
        .enumerate()
        .map(|(s, &len)| {
            (0..len)
                .map(|t| input(&mut g, &data(inp, (10 * s + t) as u64)))
                .collect()
        })
        .collect();
    (g, seqs)
}

/// One step of the raw-op model, as the module docs of sheaf-nn's
/// recurrent layers write it: returns the new state and its output.
trait RawStep {
    fn raw(g: &mut Graph, u: &Unit, xw: Expr, state: Expr, out: Option<Expr>) -> (Expr, Expr);
}

impl RawStep for LstmCell {
    fn raw(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr, out: Option<Expr>) -> (Expr, Expr) {
        let h = unit.hidden();
        let s = match out {
            // From zero: a leaf on [i, o, u].
            None => {
                let ou = g.slice(xw, 2 * h, 4 * h).unwrap();
                let i = g.slice(xw, 0, h).unwrap();
                let iou = g.concat(&[i, ou]).unwrap();
                g.tree_lstm_leaf_rd(iou, P).unwrap()
            }
            // A node whose second child has zero memory.
            Some(hp) => {
                let u = g.param(&unit.u());
                let hu = g.linear(u, hp).unwrap();
                let gates = g.add(xw, hu).unwrap();
                let ou = g.slice(gates, 2 * h, 4 * h).unwrap();
                let iof = g.slice(gates, 0, 2 * h).unwrap();
                let (none, no_child) = (zeros(g, h), zeros(g, 2 * h));
                let gates = g.concat(&[iof, none, ou]).unwrap();
                g.tree_lstm_node_rd(gates, state, no_child, P).unwrap()
            }
        };
        (s, g.cell_h(s).unwrap())
    }
}

impl RawStep for GruCell {
    fn raw(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr, out: Option<Expr>) -> (Expr, Expr) {
        let h = unit.hidden();
        let b_u = g.param(&unit.b_u().unwrap());
        let hu = match out {
            None => b_u,
            Some(_) => {
                let u = g.param(&unit.u());
                g.affine(b_u, &[(u, state)]).unwrap()
            }
        };
        // h = (1 - z) d(n) + z h_prev, n = tanh(xw_n + r hu_n).
        let pre = g.add(xw, hu).unwrap();
        let rz = g.slice(pre, 0, 2 * h).unwrap();
        let rz = g.sigmoid(rz).unwrap();
        let r = g.slice(rz, 0, h).unwrap();
        let z = g.slice(rz, h, 2 * h).unwrap();
        let xn = g.slice(xw, 2 * h, 3 * h).unwrap();
        let hn = g.slice(hu, 2 * h, 3 * h).unwrap();
        let rhn = g.cmult(r, hn).unwrap();
        let n = g.add(xn, rhn).unwrap();
        let n = g.tanh(n).unwrap();
        let n = g.dropout(n, P).unwrap();
        let diff = g.sub(state, n).unwrap();
        let zd = g.cmult(z, diff).unwrap();
        let s = g.add(n, zd).unwrap();
        (s, s)
    }
}

impl RawStep for RnnCell {
    fn raw(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr, out: Option<Expr>) -> (Expr, Expr) {
        let pre = match out {
            None => xw,
            // h = tanh(W x + b + U d(h_prev)).
            Some(_) => {
                let hd = g.dropout(state, P).unwrap();
                let u = g.param(&unit.u());
                let hu = g.linear(u, hd).unwrap();
                g.add(xw, hu).unwrap()
            }
        };
        let s = g.tanh(pre).unwrap();
        (s, s)
    }
}

/// The raw-op model of a one-layer unidirectional `layer` over `xs` from
/// zero, in the node order `transduce` builds.
fn raw_transduce<C: Cell + RawStep>(g: &mut Graph, layer: &Recurrent<C>, xs: &[Expr]) -> Vec<Expr> {
    let unit = layer.units()[0][0];
    let mut state = zeros(g, C::state_width(unit.hidden()));
    let (w, b) = (g.param(&unit.w()), g.param(&unit.b()));
    let xw: Vec<Expr> = xs
        .iter()
        .map(|&x| g.affine(b, &[(w, x)]).unwrap())
        .collect();
    let mut out = None;
    let mut outs = Vec::new();
    for &xw in &xw {
        let (s, o) = C::raw(g, &unit, xw, state, out);
        (state, out) = (s, Some(o));
        outs.push(o);
    }
    outs
}

fn make<C: Cell>(store: &mut ParamStore, inp: usize, h: usize, rd: f32) -> Recurrent<C> {
    let cfg = RecurrentConfig {
        recurrent_dropout: rd,
        ..RecurrentConfig::new(h)
    };
    let l = Recurrent::<C>::new(&mut Scope::new(store, 3).sub("rnn").unwrap(), inp, cfg).unwrap();
    randomize(store);
    l
}

fn training_equals_raw_ops<C: Cell + RawStep>() {
    let (inp, h) = (3, 4);
    let mut store = ParamStore::new();
    let layer = make::<C>(&mut store, inp, h, P);
    let params = layer.params();
    // The layer's graph (`raw`: the raw-op model's), in training or not.
    let build = |raw: bool, train: bool| {
        let (mut g, seqs) = setup(&params, inp, train);
        let outs: Vec<Expr> = seqs
            .iter()
            .flat_map(|xs| match raw {
                true => raw_transduce(&mut g, &layer, xs),
                false => layer.transduce(&mut g, xs).unwrap(),
            })
            .collect();
        (g, outs)
    };
    let (mut g, outs) = build(false, true);
    let (mut r, routs) = build(true, true);
    assert_eq!(
        ops(&g),
        ops(&r),
        "{}: the layer's graph, node for node",
        C::NAME
    );
    let want = run_all(&mut r, &mut store, &routs, None);
    assert_eq!(
        run_all(&mut g, &mut store, &outs, None),
        want,
        "{}",
        C::NAME
    );
    // The masks did something: some candidate (or state) was dropped.
    let (mut e, eouts) = build(false, false);
    assert_ne!(
        run_all(&mut e, &mut store, &eouts, None).0,
        want.0,
        "{}",
        C::NAME
    );
    for s in [Strategy::Depth, Strategy::Agenda] {
        let (mut g, outs) = build(false, true);
        let (v, gr) = run_all(&mut g, &mut store, &outs, Some(s));
        for (what, a, b) in [("value", &v, &want.0), ("gradient", &gr, &want.1)] {
            for (k, (x, y)) in a.iter().zip(b).enumerate() {
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
}

#[test]
fn recurrent_dropout_in_training_equals_the_raw_ops() {
    training_equals_raw_ops::<LstmCell>();
    training_equals_raw_ops::<GruCell>();
    training_equals_raw_ops::<RnnCell>();
}

/// At rate 0 in training, and at a rate in evaluation, the graph (ops and
/// values) is that of the plain layer: 2 layers, bidirectional.
fn no_dropout_graph<C: Cell>() {
    let inp = 3;
    let build = |rd: f32, train: bool| {
        let mut store = ParamStore::new();
        let cfg = RecurrentConfig {
            layers: 2,
            bidirectional: true,
            recurrent_dropout: rd,
            ..RecurrentConfig::new(4)
        };
        let l = Recurrent::<C>::new(&mut Scope::new(&mut store, 8), inp, cfg).unwrap();
        randomize(&mut store);
        let (mut g, seqs) = setup(&l.params(), inp, train);
        let outs: Vec<Expr> = seqs
            .iter()
            .flat_map(|xs| l.transduce(&mut g, xs).unwrap())
            .collect();
        let vals: Vec<Vec<f32>> = outs.iter().map(|&o| run(&mut g, &store, o)).collect();
        (ops(&g), vals)
    };
    let plain = build(0.0, true);
    assert!(plain
        .0
        .iter()
        .all(|(n, _)| *n != "dropout" && !n.starts_with("tree")));
    assert_eq!(build(0.0, false), plain, "{} rate 0, evaluation", C::NAME);
    assert_eq!(build(0.3, false), plain, "{} rate 0.3, evaluation", C::NAME);
    assert_ne!(
        build(0.3, true).0,
        plain.0,
        "{} rate 0.3, training",
        C::NAME
    );
}

#[test]
fn recurrent_dropout_adds_nothing_at_rate_zero_or_in_evaluation() {
    no_dropout_graph::<LstmCell>();
    no_dropout_graph::<GruCell>();
    no_dropout_graph::<RnnCell>();
}

/// `m` with each element 0 or `1 / (1 - P)` (within 1e-4), both present.
fn is_mask(what: &str, m: &[f64]) {
    let keep = 1.0 / (1.0 - f64::from(P));
    for (j, &x) in m.iter().enumerate() {
        assert!(
            x.abs() < 1e-4 || (x - keep).abs() < 1e-4 * keep,
            "{what}: factor {j} is {x}"
        );
    }
    assert!(m.iter().any(|x| x.abs() < 1e-4), "{what}: nothing dropped");
    assert!(
        m.iter().any(|x| x.abs() > 0.5),
        "{what}: everything dropped"
    );
}

#[test]
fn lstm_and_gru_drop_only_the_candidate() {
    let (inp, h) = (3, 16);
    let f = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
    let (x, h0, c0) = (data(inp, 1), data(h, 2), data(h, 3));
    // LSTM: c = σ(i) m tanh(u) + σ(f) c_prev, h = σ(o) tanh(c).
    let mut store = ParamStore::new();
    let lstm = make::<LstmCell>(&mut store, inp, h, P);
    let [w, u, b] = [0, 1, 2].map(|i| vals(&store, &lstm.params()[i]));
    let mut g = Graph::new();
    let xe = input(&mut g, &x);
    let s0: Vec<f32> = c0.iter().chain(&h0).copied().collect();
    let s0 = State::new(vec![input(&mut g, &s0)]);
    let s1 = lstm.step(&mut g, &s0, xe).unwrap();
    let got = f(&run(&mut g, &store, s1.states[0]));
    let (wx, uh) = (mv(&w, &f(&x)), mv(&u, &f(&h0)));
    let pre: Vec<f64> = (0..4 * h).map(|k| wx[k] + uh[k] + b[k]).collect();
    let (c0, h0) = (f(&c0), f(&h0));
    let m: Vec<f64> = (0..h)
        .map(|j| (got[j] - sig(pre[h + j]) * c0[j]) / (sig(pre[j]) * pre[3 * h + j].tanh()))
        .collect();
    is_mask("lstm", &m);
    for j in 0..h {
        let want = sig(pre[2 * h + j]) * got[j].tanh();
        assert!((got[h + j] - want).abs() < 1e-5, "lstm h[{j}]");
    }
    // GRU: h = (1 - z) m n + z h_prev.
    let mut store = ParamStore::new();
    let gru = make::<GruCell>(&mut store, inp, h, P);
    let [w, u, b, bu] = [0, 1, 2, 3].map(|i| vals(&store, &gru.params()[i]));
    let mut g = Graph::new();
    let (xe, he) = (input(&mut g, &x), input(&mut g, &data(h, 2)));
    let s1 = gru.step(&mut g, &State::new(vec![he]), xe).unwrap();
    let got = f(&run(&mut g, &store, s1.states[0]));
    let gi: Vec<f64> = mv(&w, &f(&x)).iter().zip(&b).map(|(a, c)| a + c).collect();
    let gh: Vec<f64> = mv(&u, &h0).iter().zip(&bu).map(|(a, c)| a + c).collect();
    let m: Vec<f64> = (0..h)
        .map(|j| {
            let z = sig(gi[h + j] + gh[h + j]);
            let r = sig(gi[j] + gh[j]);
            let n = (gi[2 * h + j] + r * gh[2 * h + j]).tanh();
            (got[j] - z * h0[j]) / ((1.0 - z) * n)
        })
        .collect();
    is_mask("gru", &m);
}

#[test]
fn gradients_with_recurrent_dropout_match_finite_differences() {
    let inp = 3;
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 5);
    let cfg = RecurrentConfig {
        recurrent_dropout: 0.3,
        ..RecurrentConfig::new(3)
    };
    let lstm = Lstm::new(&mut root.sub("lstm").unwrap(), inp, cfg).unwrap();
    let gru = Gru::new(&mut root.sub("gru").unwrap(), 3, cfg).unwrap();
    let rnn = Rnn::new(&mut root.sub("rnn").unwrap(), 3, cfg).unwrap();
    randomize(&mut store);
    let params: Vec<Param> = [lstm.params(), gru.params(), rnn.params()].concat();
    let build = |g: &mut Graph, _: &[Expr]| -> Result<Expr, GraphError> {
        assert!(g.is_train());
        let xs: Vec<Expr> = (0..3).map(|t| input(g, &data(inp, 40 + t))).collect();
        let hs = lstm.transduce(g, &xs)?;
        let hs = gru.transduce(g, &hs)?;
        let ys = rnn.transduce(g, &hs)?;
        let sq: Vec<Expr> = ys.iter().map(|&y| g.dot(y, y)).collect::<Result<_, _>>()?;
        g.sum(&sq)
    };
    check_gradients(&mut store, &params, &build, GradCheck::default()).unwrap();
}

#[test]
fn input_and_output_dropout_only_in_training() {
    let inp = 3;
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 4);
    let cfg = RecurrentConfig {
        layers: 2,
        bidirectional: true,
        ..RecurrentConfig::new(4)
    };
    let plain = Gru::new(&mut root.sub("a").unwrap(), inp, cfg).unwrap();
    let cfg = RecurrentConfig {
        input_dropout: 0.2,
        output_dropout: 0.4,
        ..cfg
    };
    // Other names, the same values: copy them over.
    let dropped = Gru::new(&mut root.sub("b").unwrap(), inp, cfg).unwrap();
    randomize(&mut store);
    for (a, b) in plain.params().iter().zip(dropped.params()) {
        *store.value_mut(&b).unwrap() = store.value(a).unwrap().clone();
    }
    let outputs = |layer: &Gru, train: bool| {
        let (mut g, seqs) = setup(&layer.params(), inp, train);
        let outs: Vec<Expr> = seqs
            .iter()
            .flat_map(|xs| layer.transduce(&mut g, xs).unwrap())
            .collect();
        let v: Vec<Vec<f32>> = outs.iter().map(|&o| run(&mut g, &store, o)).collect();
        (count(&g, "dropout"), g.len(), v)
    };
    let base = outputs(&plain, false);
    // Evaluation: not one dropout node, the plain layer's graph and values.
    assert_eq!(outputs(&dropped, false), base);
    // Training: one node per input, and per output of each of 2 layers.
    let (n, _, v) = outputs(&dropped, true);
    assert_eq!(n, 9 + 2 * 9);
    assert_ne!(v, base.2);
    // The input masks alone, written with raw ops: layer `a` on dropped
    // inputs equals layer `b` with input dropout only.
    let cfg_in = RecurrentConfig {
        input_dropout: 0.2,
        ..RecurrentConfig::new(4)
    };
    let only_in = Gru::new(
        &mut Scope::new(&mut store, 4).sub("c").unwrap(),
        inp,
        cfg_in,
    )
    .unwrap();
    let one = Gru::new(
        &mut Scope::new(&mut store, 4).sub("d").unwrap(),
        inp,
        RecurrentConfig::new(4),
    )
    .unwrap();
    for (a, b) in one.params().iter().zip(only_in.params()) {
        *store.value_mut(&b).unwrap() = store.value(a).unwrap().clone();
    }
    let mut g = Graph::new();
    let xs: Vec<Expr> = (0..4).map(|t| input(&mut g, &data(inp, t))).collect();
    let ys = only_in.transduce(&mut g, &xs).unwrap();
    let mut r = Graph::new();
    let rxs: Vec<Expr> = (0..4).map(|t| input(&mut r, &data(inp, t))).collect();
    // transduce makes the zero state first, then drops the inputs.
    zeros(&mut r, 4);
    let dropped: Vec<Expr> = rxs.iter().map(|&x| r.dropout(x, 0.2).unwrap()).collect();
    let rys = one.transduce(&mut r, &dropped).unwrap();
    for (t, (&y, &ry)) in ys.iter().zip(&rys).enumerate() {
        let (a, b) = (run(&mut g, &store, y), run(&mut r, &store, ry));
        assert_eq!(a, b, "input dropout, position {t}");
    }
}

#[test]
fn mlp_dropout_only_in_training() {
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 6);
    let sizes = [3, 6, 5, 2];
    let plain = Mlp::new(&mut root.sub("a").unwrap(), &sizes, Activation::Tanh, 0.0).unwrap();
    let mlp = Mlp::new(&mut root.sub("b").unwrap(), &sizes, Activation::Tanh, 0.5).unwrap();
    randomize(&mut store);
    for (a, b) in plain.layers().iter().zip(mlp.layers()) {
        *store.value_mut(&b.weight()).unwrap() = store.value(&a.weight()).unwrap().clone();
        let (ab, bb) = (a.bias().unwrap(), b.bias().unwrap());
        *store.value_mut(&bb).unwrap() = store.value(&ab).unwrap().clone();
    }
    let x = data(3, 9);
    let out = |m: &Mlp, train: bool| {
        let mut g = Graph::new();
        g.set_train(train);
        let xe = input(&mut g, &x);
        let y = m.forward(&mut g, xe).unwrap();
        (ops(&g).len(), count(&g, "dropout"), run(&mut g, &store, y))
    };
    let base = out(&plain, true);
    assert_eq!(base.1, 0);
    // Evaluation: no dropout node at all (not even identities).
    assert_eq!(out(&mlp, false), base);
    // Training: before every layer but the first, as raw ops (the hidden
    // layers' activation fused into their affine: the same nodes, so the
    // same dropout seeds).
    let (_, n, v) = out(&mlp, true);
    assert_eq!(n, 2);
    let mut g = Graph::new();
    let mut h = input(&mut g, &x);
    for (i, l) in plain.layers().iter().enumerate() {
        if i > 0 {
            h = g.dropout(h, 0.5).unwrap();
        }
        h = match i < 2 {
            true => {
                let w = g.param(&l.weight());
                let b = g.param(&l.bias().unwrap());
                g.affine_act(sheaf_tensor::Unary::Tanh, b, &[(w, h)])
                    .unwrap()
            }
            false => l.forward(&mut g, h).unwrap(),
        };
    }
    assert_eq!(v, run(&mut g, &store, h));
    assert_ne!(v, base.2);
}
