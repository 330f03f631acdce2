//! A one-layer BiLSTM tagger over 8 sequences of lengths 1..=20: `lstm_cell`
//! with `affine` gate projections (`W x + U h + b`), a zero initial state
//! given with `g.input`, and a softmax loss (`pick_neg_log_softmax`) per
//! token, summed into one scalar. Depth and Agenda equal Sequential (every
//! node's value and gradient, every parameter's gradient, within the
//! tolerance of `common/mod.rs`), and Agenda runs all cells of both
//! directions in at most 2 x (longest length) kernel calls. With the input
//! projection `W x` written off the recurrence, both strategies run it as
//! one product over all tokens, before the first cell.

mod common;

use common::{check_all, full, tensor, Lcg};
use sheaf_autodiff::{Expr, Graph, Param, ParamStore};
use sheaf_sched::{Executor, Strategy};

const VOCAB: usize = 40;
const E: usize = 6;
const H: usize = 5;
const CLASSES: usize = 4;
const LENGTHS: [usize; 8] = [1, 20, 7, 13, 2, 16, 9, 11];

struct Direction {
    w: Param,
    u: Param,
    b: Param,
}

struct Model {
    emb: Param,
    fwd: Direction,
    bwd: Direction,
    w_out: Param,
    b_out: Param,
}

fn model(store: &mut ParamStore, rng: &mut Lcg) -> Model {
    let mut dir = |store: &mut ParamStore, name: &str| Direction {
        w: store
            .add(&format!("{name}_w"), tensor(rng, &[4 * H, E], 0.4))
            .unwrap(),
        u: store
            .add(&format!("{name}_u"), tensor(rng, &[4 * H, H], 0.4))
            .unwrap(),
        b: store
            .add(&format!("{name}_b"), tensor(rng, &[4 * H], 0.1))
            .unwrap(),
    };
    let fwd = dir(store, "fwd");
    let bwd = dir(store, "bwd");
    Model {
        emb: store
            .add_table("emb", tensor(rng, &[VOCAB, E], 0.5))
            .unwrap(),
        fwd,
        bwd,
        w_out: store
            .add("w_out", tensor(rng, &[CLASSES, 2 * H], 0.4))
            .unwrap(),
        b_out: store.add("b_out", tensor(rng, &[CLASSES], 0.1)).unwrap(),
    }
}

/// The hidden states of one direction over `xs` (in the order given).
fn run_direction(g: &mut Graph, d: &Direction, xs: &[Expr]) -> Vec<Expr> {
    let (w, u, b) = (g.param(&d.w), g.param(&d.u), g.param(&d.b));
    let mut state = g.input(full(0.0, &[2 * H]));
    let mut h = g.input(full(0.0, &[H]));
    let mut hs = Vec::with_capacity(xs.len());
    for &x in xs {
        let gates = g.affine(b, &[(w, x), (u, h)]).unwrap();
        state = g.lstm_cell(gates, state).unwrap();
        h = g.cell_h(state).unwrap();
        hs.push(h);
    }
    hs
}

struct Sentence {
    words: Vec<u32>,
    tags: Vec<u32>,
}

fn sentences(rng: &mut Lcg) -> Vec<Sentence> {
    LENGTHS
        .iter()
        .map(|&n| Sentence {
            words: (0..n).map(|_| rng.below(VOCAB as u64) as u32).collect(),
            tags: (0..n).map(|_| rng.below(CLASSES as u64) as u32).collect(),
        })
        .collect()
}

fn build(g: &mut Graph, m: &Model, data: &[Sentence]) -> Expr {
    let mut losses = Vec::new();
    for s in data {
        let emb = g.param(&m.emb);
        let xs: Vec<Expr> = s.words.iter().map(|&w| g.lookup(emb, w).unwrap()).collect();
        let hf = run_direction(g, &m.fwd, &xs);
        let rev: Vec<Expr> = xs.iter().rev().copied().collect();
        let mut hb = run_direction(g, &m.bwd, &rev);
        hb.reverse();
        let (wo, bo) = (g.param(&m.w_out), g.param(&m.b_out));
        for t in 0..xs.len() {
            let h = g.concat(&[hf[t], hb[t]]).unwrap();
            let logits = g.affine(bo, &[(wo, h)]).unwrap();
            losses.push(g.pick_neg_log_softmax(logits, s.tags[t]).unwrap());
        }
    }
    g.sum(&losses).unwrap()
}

#[test]
fn bilstm_batched_equals_sequential() {
    let mut rng = Lcg(23);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng);
    let data = sentences(&mut rng);
    let reference = check_all(&mut store, |g| build(g, &m, &data), "bilstm");
    // The loss is a real cross-entropy over all tokens (not vacuous).
    let tokens: usize = LENGTHS.iter().sum();
    let loss = reference.values.last().unwrap()[0];
    assert!(loss > 0.5 * tokens as f32, "loss {loss}");
    assert!(reference.params.iter().all(|p| p.iter().any(|&v| v != 0.0)));
}

#[test]
fn agenda_runs_bilstm_cells_in_at_most_two_batches_per_step() {
    let mut rng = Lcg(29);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng);
    let data = sentences(&mut rng);
    let max_len = *LENGTHS.iter().max().unwrap();
    let mut g = Graph::new();
    let loss = build(&mut g, &m, &data);
    let mut e = Executor::new(Strategy::Agenda);
    e.forward(&mut g, &store, loss).unwrap();
    e.backward(&mut g, &store, loss).unwrap();
    let (batches, nodes) = e.stats().per_op["lstm_cell"];
    assert_eq!(nodes, 2 * LENGTHS.iter().sum::<usize>());
    assert!(
        batches <= 2 * max_len,
        "{batches} lstm_cell batches for longest length {max_len}\n{}",
        e.stats()
    );
    // The per-token output layer is off the recurrence: few batches.
    let (out_batches, _) = e.stats().per_op["pick_neg_log_softmax"];
    assert!(out_batches <= 2 * max_len, "{}", e.stats());
}

/// Like `build`, one direction only, with the input projection `W x` taken
/// off the recurrence: `gates = (U h + b) + W x`. The products `W x` of all
/// tokens depend on nothing recurrent, so they must run as ONE product over
/// every token of every sentence, before the first cell.
fn build_projected(g: &mut Graph, m: &Model, data: &[Sentence]) -> Expr {
    let mut losses = Vec::new();
    for s in data {
        let emb = g.param(&m.emb);
        let (w, u, b) = (g.param(&m.fwd.w), g.param(&m.fwd.u), g.param(&m.fwd.b));
        let mut state = g.input(full(0.0, &[2 * H]));
        let mut h = g.input(full(0.0, &[H]));
        for (&word, &tag) in s.words.iter().zip(&s.tags) {
            let x = g.lookup(emb, word).unwrap();
            let xp = g.linear(w, x).unwrap();
            let uh = g.affine(b, &[(u, h)]).unwrap();
            let gates = g.add(uh, xp).unwrap();
            state = g.lstm_cell(gates, state).unwrap();
            h = g.cell_h(state).unwrap();
            let hh = g.concat(&[h, h]).unwrap();
            let (wo, bo) = (g.param(&m.w_out), g.param(&m.b_out));
            let logits = g.affine(bo, &[(wo, hh)]).unwrap();
            losses.push(g.pick_neg_log_softmax(logits, tag).unwrap());
        }
    }
    g.sum(&losses).unwrap()
}

#[test]
fn input_projections_run_as_one_product_before_the_recurrence() {
    let mut rng = Lcg(31);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng);
    let data = sentences(&mut rng);
    check_all(
        &mut store,
        |g| build_projected(g, &m, &data),
        "projected lstm",
    );
    let tokens: usize = LENGTHS.iter().sum();
    for strategy in [Strategy::Agenda, Strategy::Depth] {
        let mut g = Graph::new();
        let loss = build_projected(&mut g, &m, &data);
        let mut e = Executor::new(strategy);
        e.forward(&mut g, &store, loss).unwrap();
        assert_eq!(
            e.stats().per_op["linear"],
            (1, tokens),
            "{strategy:?}: every token's W x in one product\n{}",
            e.stats()
        );
        let order: Vec<&str> = e.plans()[0]
            .batches
            .iter()
            .map(|batch| g.op_name(batch.nodes[0]))
            .collect();
        let linear = order.iter().position(|&op| op == "linear").unwrap();
        let first_cell = order.iter().position(|&op| op == "lstm_cell").unwrap();
        assert!(linear < first_cell, "{strategy:?}: {order:?}");
    }
}

#[test]
fn sequence_steps_read_states_and_logits_in_place() {
    let mut rng = Lcg(37);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng);
    let data = sentences(&mut rng);
    for strategy in [Strategy::Agenda, Strategy::Depth] {
        let mut g = Graph::new();
        let loss = build(&mut g, &m, &data);
        let mut e = Executor::new(strategy);
        e.forward(&mut g, &store, loss).unwrap();
        let stats = e.stats();
        // Each step's states are read in place by the next step's `cell_h`,
        // and the logits by the loss: no copies on those paths.
        for op in ["cell_h", "pick_neg_log_softmax"] {
            assert_eq!(
                stats.gathered_per_op.get(op).copied().unwrap_or(0),
                0,
                "{strategy:?}: {op} inputs were copied\n{stats}"
            );
        }
    }
}
