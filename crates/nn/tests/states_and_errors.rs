//! Given initial states, cells of users' own, and the errors for sizes.
//!
//! - `transduce_from` on 2 stacked bidirectional layers from nonzero
//!   states (a different one per layer and direction) equals the model
//!   written with raw graph ops (the backward direction starting at the
//!   last position from its own state): values and parameter gradients
//!   within 1e-5 (1 + |x|).
//! - `b_u` exists exactly for cells that declare `Cell::U_BIAS`, whatever
//!   their gate count.
//! - Zero sizes and malformed parameters are errors naming the layer and
//!   the sizes, before any parameter is made.

use sheaf_autodiff::{Expr, Graph, GraphError, Init, ParamStore, Result};
use sheaf_nn::prelude::*;
use sheaf_nn::{Cell, GruCell, LstmCell, Prev, Recurrent, RnnCell, Unit};

mod common;
use common::*;

/// One plain step written with raw ops from any previous state: the new
/// state and its output.
trait RawStep: Cell {
    fn raw(g: &mut Graph, u: &Unit, xw: Expr, state: Expr) -> (Expr, Expr);
}

impl RawStep for LstmCell {
    fn raw(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr) -> (Expr, Expr) {
        let h = g.cell_h(state).unwrap();
        let u = g.param(&unit.u());
        let hu = g.linear(u, h).unwrap();
        let gates = g.add(xw, hu).unwrap();
        let s = g.lstm_cell(gates, state).unwrap();
        (s, g.cell_h(s).unwrap())
    }
}

impl RawStep for GruCell {
    fn raw(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr) -> (Expr, Expr) {
        let (u, b_u) = (g.param(&unit.u()), g.param(&unit.b_u().unwrap()));
        let hu = g.affine(b_u, &[(u, state)]).unwrap();
        let s = g.gru_cell(xw, hu, state).unwrap();
        (s, s)
    }
}

impl RawStep for RnnCell {
    fn raw(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr) -> (Expr, Expr) {
        let u = g.param(&unit.u());
        let hu = g.linear(u, state).unwrap();
        let pre = g.add(xw, hu).unwrap();
        let s = g.tanh(pre).unwrap();
        (s, s)
    }
}

fn bidirectional_from_given_states<C: RawStep>(seed: u64) {
    let (inp, h, len) = (3, 4, 5);
    let mut store = ParamStore::new();
    let cfg = RecurrentConfig {
        layers: 2,
        bidirectional: true,
        ..RecurrentConfig::new(h)
    };
    let layer = Recurrent::<C>::new(&mut Scope::new(&mut store, seed), inp, cfg).unwrap();
    randomize(&mut store);
    let width = C::state_width(h);
    let build = |raw: bool| {
        let mut g = Graph::new();
        let xs: Vec<Expr> = (0..len)
            .map(|t| input(&mut g, &data(inp, 30 + t as u64)))
            .collect();
        // States l0.fwd, l0.bwd, l1.fwd, l1.bwd, all different.
        let init: Vec<Expr> = (0..4)
            .map(|k| input(&mut g, &data(width, 50 + k)))
            .collect();
        if !raw {
            let ys = layer
                .transduce_from(&mut g, &xs, &State::new(init))
                .unwrap();
            return (g, ys);
        }
        let mut seq = xs;
        for (l, units) in layer.units().iter().enumerate() {
            let mut outs = vec![vec![None; len]; 2];
            for (d, unit) in units.iter().enumerate() {
                let (w, b) = (g.param(&unit.w()), g.param(&unit.b()));
                let mut state = init[2 * l + d];
                let order: Vec<usize> = match d {
                    0 => (0..len).collect(),
                    _ => (0..len).rev().collect(),
                };
                for t in order {
                    let xw = g.affine(b, &[(w, seq[t])]).unwrap();
                    let (s, o) = C::raw(&mut g, unit, xw, state);
                    state = s;
                    outs[d][t] = Some(o);
                }
            }
            seq = (0..len)
                .map(|t| {
                    g.concat(&[outs[0][t].unwrap(), outs[1][t].unwrap()])
                        .unwrap()
                })
                .collect();
        }
        (g, seq)
    };
    let (mut g, ys) = build(false);
    let got = run_all(&mut g, &mut store, &ys, None);
    let (mut r, rys) = build(true);
    let want = run_all(&mut r, &mut store, &rys, None);
    for (what, a, b) in [("value", &got.0, &want.0), ("gradient", &got.1, &want.1)] {
        for (k, (x, y)) in a.iter().zip(b).enumerate() {
            let y: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
            close(&format!("{} {what} {k}", C::NAME), x, &y, 1e-5);
        }
    }
    // The given states mattered: from zero the outputs differ.
    let mut z = Graph::new();
    let xs: Vec<Expr> = (0..len)
        .map(|t| input(&mut z, &data(inp, 30 + t as u64)))
        .collect();
    let zs = layer.transduce(&mut z, &xs).unwrap();
    assert_ne!(run(&mut z, &store, zs[0]), got.0[0], "{}", C::NAME);
    assert_ne!(
        run(&mut z, &store, zs[len - 1]),
        got.0[len - 1],
        "{}",
        C::NAME
    );
}

#[test]
fn bidirectional_transduce_from_given_states_equals_raw_ops() {
    bidirectional_from_given_states::<LstmCell>(31);
    bidirectional_from_given_states::<GruCell>(32);
    bidirectional_from_given_states::<RnnCell>(33);
}

/// A user's cell of 3 gate blocks without a recurrent bias:
/// `h = tanh(a) σ(b) + tanh(c)` of `W x + b + U h_prev`'s blocks.
#[derive(Debug, Clone, Copy)]
struct ThreeGates;

impl Cell for ThreeGates {
    const NAME: &'static str = "ThreeGates";
    const GATES: usize = 3;
    fn state_width(h: usize) -> usize {
        h
    }
    fn output(_: &mut Graph, state: Expr) -> Result<Expr> {
        Ok(state)
    }
    fn step(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr, prev: Prev) -> Result<Expr> {
        let h = unit.hidden();
        let pre = match prev {
            Prev::Zero => xw,
            _ => {
                let u = g.param(&unit.u());
                let hu = g.linear(u, state)?;
                g.add(xw, hu)?
            }
        };
        let a = g.slice(pre, 0, h)?;
        let a = g.tanh(a)?;
        let b = g.slice(pre, h, 2 * h)?;
        let b = g.sigmoid(b)?;
        let c = g.slice(pre, 2 * h, 3 * h)?;
        let c = g.tanh(c)?;
        let ab = g.cmult(a, b)?;
        g.add(ab, c)
    }
}

/// A user's one-block cell whose recurrent product has its own bias:
/// `h = tanh(W x + b + (U h_prev + b_u))`.
#[derive(Debug, Clone, Copy)]
struct BiasedU;

impl Cell for BiasedU {
    const NAME: &'static str = "BiasedU";
    const GATES: usize = 1;
    const U_BIAS: bool = true;
    fn state_width(h: usize) -> usize {
        h
    }
    fn output(_: &mut Graph, state: Expr) -> Result<Expr> {
        Ok(state)
    }
    fn step(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr, _: Prev) -> Result<Expr> {
        let b_u = unit
            .b_u()
            .ok_or_else(|| GraphError::Params("BiasedU: no b_u".into()))?;
        let (u, b_u) = (g.param(&unit.u()), g.param(&b_u));
        let hu = g.affine(b_u, &[(u, state)])?;
        let pre = g.add(xw, hu)?;
        g.tanh(pre)
    }
}

#[test]
fn b_u_follows_the_cell_not_its_gate_count() {
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 2);
    let three =
        Recurrent::<ThreeGates>::new(&mut root.sub("t").unwrap(), 2, RecurrentConfig::new(3));
    let three = three.unwrap();
    let biased =
        Recurrent::<BiasedU>::new(&mut root.sub("bu").unwrap(), 2, RecurrentConfig::new(3));
    let biased = biased.unwrap();
    let gru = Gru::new(&mut root.sub("gru").unwrap(), 2, RecurrentConfig::new(3)).unwrap();
    let lstm = Lstm::new(&mut root.sub("lstm").unwrap(), 2, RecurrentConfig::new(3)).unwrap();
    assert_eq!(three.params().len(), 3);
    assert!(store.get("t.l0.fwd.b_u").is_none());
    assert!(three.units()[0][0].b_u().is_none());
    assert_eq!(biased.params().len(), 4);
    assert_eq!(store.get("bu.l0.fwd.b_u").unwrap().shape().dims(), &[3]);
    assert_eq!(gru.params().len(), 4);
    assert_eq!(store.get("gru.l0.fwd.b_u").unwrap().shape().dims(), &[9]);
    assert_eq!(lstm.params().len(), 3);
    assert!(store.get("lstm.l0.fwd.b_u").is_none());
    // Both run, and b_u gets a gradient.
    randomize(&mut store);
    let mut g = Graph::new();
    let xs: Vec<Expr> = (0..3).map(|t| input(&mut g, &data(2, t))).collect();
    let ys = [
        three.transduce(&mut g, &xs).unwrap(),
        biased.transduce(&mut g, &xs).unwrap(),
    ]
    .concat();
    let (_, grads) = run_all(&mut g, &mut store, &ys, None);
    let params = store.params();
    let k = params
        .iter()
        .position(|p| Some(*p) == store.get("bu.l0.fwd.b_u"));
    assert!(grads[k.unwrap()].iter().any(|&x| x != 0.0));
}

fn err<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.unwrap_err().to_string()
}

fn says(e: &str, want: &str) {
    assert!(e.contains(want), "{e:?} does not say {want:?}");
}

#[test]
fn zero_sizes_are_errors_naming_the_layer() {
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 1);
    let e = err(Linear::new(&mut root.sub("fc").unwrap(), 0, 2, true));
    says(
        &e,
        "Linear \"fc\": input width 0, output width 2 must all be positive",
    );
    let e = err(Linear::new(&mut root.sub("fc").unwrap(), 3, 0, false));
    says(
        &e,
        "Linear \"fc\": input width 3, output width 0 must all be positive",
    );
    let e = err(Embedding::new(&mut root.sub("emb").unwrap(), 0, 4));
    says(
        &e,
        "Embedding \"emb\": vocabulary 0, dim 4 must all be positive",
    );
    let e = err(Embedding::new(&mut root.sub("emb").unwrap(), 5, 0));
    says(
        &e,
        "Embedding \"emb\": vocabulary 5, dim 0 must all be positive",
    );
    let e = err(Mlp::new(
        &mut root.sub("mlp").unwrap(),
        &[3, 0, 2],
        Activation::Tanh,
        0.0,
    ));
    says(&e, "Mlp \"mlp\": sizes [3, 0, 2] must all be positive");
    let e = err(Attention::dot(&mut root.sub("att").unwrap(), 0));
    says(&e, "Attention \"att\": vector width 0 must all be positive");
    let e = err(Attention::additive(&mut root.sub("att").unwrap(), 4, 0, 3));
    says(
        &e,
        "Attention \"att\": vector width 4, query width 0, hidden 3 must all be positive",
    );
    let e = err(Attention::feed_forward(&mut root.sub("att").unwrap(), 4, 0));
    says(
        &e,
        "Attention \"att\": vector width 4, hidden 0 must all be positive",
    );
    // At the root the layer is named by its kind alone.
    let e = err(Linear::new(&mut root, 0, 0, true));
    says(
        &e,
        "Linear: input width 0, output width 0 must all be positive",
    );
    // Nothing was made before the check.
    assert!(store.params().is_empty());
}

#[test]
fn layers_over_given_parameters_check_their_shapes() {
    let mut store = ParamStore::new();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0);
    let w = store
        .add_param("w", [2, 3], Init::GlorotUniform, &mut rng)
        .unwrap();
    let b = store.add_param("b", [2], Init::Zeros, &mut rng).unwrap();
    let flat = store
        .add_param("flat", [0, 3], Init::Zeros, &mut rng)
        .unwrap();
    let fc = Linear::from_params(w, Some(b)).unwrap();
    assert_eq!((fc.inp(), fc.out(), fc.bias()), (3, 2, Some(b)));
    let e = err(Linear::from_params(b, None));
    says(&e, "Linear: the weight has shape [2], it must be a matrix");
    let e = err(Linear::from_params(w, Some(w)));
    says(
        &e,
        "Linear: the bias has shape [2, 3], the weight [2, 3] needs [2]",
    );
    says(&err(Linear::from_params(flat, None)), "shape [0, 3]");
    says(&err(Embedding::from_param(flat)), "shape [0, 3]");
    let e = err(Embedding::from_param(b));
    says(
        &e,
        "Embedding: the table has shape [2], it must be a matrix",
    );
    let emb = Embedding::from_param(w).unwrap();
    assert_eq!((emb.vocab(), emb.dim()), (2, 3));
    // Rates outside [0, 1), NaN included, are refused too.
    for p in [1.0, -0.1, f32::NAN] {
        let cfg = RecurrentConfig {
            recurrent_dropout: p,
            ..RecurrentConfig::new(2)
        };
        let e = err(Lstm::new(&mut Scope::new(&mut store, 1), 2, cfg));
        says(&e, "Lstm: recurrent dropout must lie in [0, 1)");
    }
}
