//! `transduce_padded`: a recurrent layer over a sequence given as one
//! padded matrix (noise in the padding) equals `transduce` over its real
//! rows, zeros after them: values and every gradient, under Sequential,
//! Depth and Agenda. A one-directional GRU or Elman stack with vertex
//! functions scans (one node per layer and sequence, every length in one
//! batch); an LSTM, a bidirectional layer or a layer without vertex
//! functions runs position by position. Errors name the layer.

mod common;

use common::{data, input, randomize, run_all};
use sheaf_autodiff::{Expr, Graph, ParamStore};
use sheaf_nn::prelude::*;
use sheaf_nn::{Cell, Recurrent};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

const T: usize = 6;
const LENS: [usize; 5] = [1, 3, 6, 5, 3];

fn close(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-5 * (1.0 + x.abs().max(y.abs())),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

/// Each sequence's `[T, 4]` rows (padding: large noise).
fn rows(k: usize) -> Vec<f32> {
    let mut v = data(T * 4, 7 * k as u64 + 1);
    v[LENS[k] * 4..].iter_mut().for_each(|x| *x += 50.0);
    v
}

/// Every sequence's outputs: padded matrices, or `transduce` over the
/// real rows with zero rows after them (as one matrix each).
fn outputs<C: Cell>(g: &mut Graph, layer: &Recurrent<C>, padded: bool) -> Vec<Expr> {
    let width = layer.output_width();
    (0..LENS.len())
        .map(|k| {
            let v = rows(k);
            if padded {
                let xs = g.input(Tensor::from_vec(v, [T, 4]).unwrap());
                return layer.transduce_padded(g, xs, LENS[k]).unwrap();
            }
            let xs: Vec<Expr> = v[..LENS[k] * 4].chunks(4).map(|r| input(g, r)).collect();
            let mut hs = layer.transduce(g, &xs).unwrap();
            if LENS[k] < T {
                hs.push(input(g, &vec![0.0; (T - LENS[k]) * width]));
            }
            let all = g.concat(&hs).unwrap();
            g.reshape(all, [T, width]).unwrap()
        })
        .collect()
}

fn check<C: Cell>(
    make: impl Fn(&mut Scope<'_>, RecurrentConfig) -> Recurrent<C>,
    bidirectional: bool,
    scans: bool,
) {
    let cfg = RecurrentConfig {
        layers: 2,
        bidirectional,
        ..RecurrentConfig::new(3)
    };
    let mut store = ParamStore::new();
    let plain = make(&mut Scope::new(&mut store, 5), cfg);
    randomize(&mut store);
    let called = plain.clone().with_vertex_functions().unwrap();
    for (form, layer) in [("plain", &plain), ("vertex", &called)] {
        for exec in [None, Some(Strategy::Depth), Some(Strategy::Agenda)] {
            let what = format!("{} bi {bidirectional} {form} {exec:?}", C::NAME);
            let mut g = Graph::new();
            let outs = outputs(&mut g, &plain, false);
            let (want, want_grads) = run_all(&mut g, &mut store, &outs, exec);
            let mut g = Graph::new();
            let outs = outputs(&mut g, layer, true);
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
        }
    }
    // Scanned: one node per layer and sequence, and the sequences of
    // every length one batch per layer.
    let mut g = Graph::new();
    let outs = outputs(&mut g, &called, true);
    let mut exec = Executor::new(Strategy::Agenda);
    let sums: Vec<Expr> = outs.iter().map(|&o| g.sum_elems(o).unwrap()).collect();
    let loss = g.sum(&sums).unwrap();
    exec.forward(&mut g, &store, loss).unwrap();
    let steps = exec.stats().per_op.get(step_name(C::NAME)).copied();
    match scans {
        true => assert_eq!(steps, Some((2, 2 * LENS.len())), "{}", C::NAME),
        false => assert_ne!(steps, Some((2, 2 * LENS.len())), "{}", C::NAME),
    }
}

fn step_name(cell: &str) -> &'static str {
    match cell {
        "Lstm" => "lstm_step",
        "Gru" => "gru_step",
        _ => "rnn_step",
    }
}

#[test]
fn gru_over_padded_sequences_scans_and_equals_transduce() {
    check(|s, cfg| Gru::new(s, 4, cfg).unwrap(), false, true);
}

#[test]
fn elman_over_padded_sequences_scans_and_equals_transduce() {
    check(|s, cfg| Rnn::new(s, 4, cfg).unwrap(), false, true);
}

#[test]
fn lstm_over_padded_sequences_equals_transduce() {
    check(|s, cfg| Lstm::new(s, 4, cfg).unwrap(), false, false);
}

#[test]
fn bidirectional_gru_over_padded_sequences_equals_transduce() {
    check(|s, cfg| Gru::new(s, 4, cfg).unwrap(), true, false);
}

#[test]
fn padded_sequence_mistakes_are_errors() {
    let mut store = ParamStore::new();
    let gru = Gru::new(
        &mut Scope::new(&mut store, 1).sub("enc").unwrap(),
        4,
        RecurrentConfig::new(3),
    )
    .unwrap()
    .with_vertex_functions()
    .unwrap();
    let mut g = Graph::new();
    let xs = g.input(Tensor::from_vec(vec![0.0f32; T * 4], [T, 4]).unwrap());
    for len in [0, T + 1] {
        let e = gru
            .transduce_padded(&mut g, xs, len)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("enc") && e.contains(&format!("length {len}")),
            "{e}"
        );
    }
    let wide = g.input(Tensor::from_vec(vec![0.0f32; T * 5], [T, 5]).unwrap());
    let e = gru
        .transduce_padded(&mut g, wide, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("enc") && e.contains("[6, 5]"), "{e}");
}
