//! W2 of `shared/BENCHMARKS.md`: the synthetic BiLSTM tagger of the DyNet
//! paper (section 4.1). Sentences of 40 words over a vocabulary of 1000,
//! embeddings of 200, two bidirectional LSTM layers of 256 per direction
//! (the second reads `[h_fwd; h_bwd]`, 512 wide), a softmax over 300 tags
//! at every word; 64 sentences per update, their losses summed into one
//! graph, plain SGD with lr 0.05.
//!
//! Per step the gates are `W x_t + b + U h_{t-1}`; the input products
//! `W x_t + b` are written apart from the recurrence (their own node), so
//! every strategy runs them as one product over all time steps before the
//! first cell, as a hand-batcher (and cuDNN) does; [`crate::w2_manual`] is
//! that hand-batched version.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sheaf_autodiff::{Expr, Graph, Init, Optimizer, Param, ParamStore, Sgd};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::{DType, Device, Tensor};

/// Sizes of a tagger (W2's are [`Config::w2`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub vocab: usize,
    pub embed: usize,
    pub hidden: usize,
    pub classes: usize,
    /// Words per sentence.
    pub len: usize,
}

impl Config {
    /// W2: vocabulary 1000, embedding 200, 256 per direction, 300 tags,
    /// sentences of 40.
    pub fn w2() -> Config {
        Config {
            vocab: 1000,
            embed: 200,
            hidden: 256,
            classes: 300,
            len: 40,
        }
    }

    /// Useful training FLOPs of one sentence of `len` words
    /// (BENCHMARKS.md): per word and direction `2 * 4H * (in + H)` per
    /// layer, the output layer `2 * C * 2H`, all times 3. The first step of
    /// a direction has no `U h` product, but W2 counts it (as DyNet does):
    /// the difference is 1/40 of the recurrent products.
    pub fn train_flops(&self, len: usize) -> f64 {
        let (e, h, c) = (self.embed as f64, self.hidden as f64, self.classes as f64);
        let layer = |input: f64| 2.0 * 2.0 * 4.0 * h * (input + h);
        let per_word = layer(e) + layer(2.0 * h) + 2.0 * c * 2.0 * h;
        3.0 * len as f64 * per_word
    }
}

/// Per batch: the batches W2 prescribes.
pub const BATCH: usize = 64;

/// One LSTM direction of one layer: gates `W x + b + U h_prev`, `[4H]`
/// in the order `i, f, o, u`.
#[derive(Debug, Clone)]
pub struct Direction {
    pub w: Param,
    pub u: Param,
    pub b: Param,
}

/// The tagger's parameters.
#[derive(Debug, Clone)]
pub struct Model {
    pub cfg: Config,
    pub emb: Param,
    /// `layers[l][d]`: layer `l`, direction `d` (0 forward, 1 backward).
    pub layers: [[Direction; 2]; 2],
    pub w_out: Param,
    pub b_out: Param,
}

impl Model {
    /// Seeded initialisation: embeddings uniform in ±0.1, matrices Glorot
    /// uniform, biases uniform in ±0.1 (not zero, so a misplaced bias
    /// shows in the tests).
    pub fn new(store: &mut ParamStore, cfg: Config, seed: u64) -> Result<Model, String> {
        let mut rng = StdRng::seed_from_u64(seed);
        let e = |e: sheaf_autodiff::GraphError| format!("W2 model: {e}");
        let small = Init::Uniform {
            low: -0.1,
            high: 0.1,
        };
        let emb = store
            .add_lookup("emb", cfg.vocab, cfg.embed, small, &mut rng)
            .map_err(e)?;
        let h = cfg.hidden;
        let mut dir = |name: &str, input: usize| -> Result<Direction, String> {
            Ok(Direction {
                w: store
                    .add_param(
                        &format!("{name}.w"),
                        [4 * h, input],
                        Init::GlorotUniform,
                        &mut rng,
                    )
                    .map_err(e)?,
                u: store
                    .add_param(
                        &format!("{name}.u"),
                        [4 * h, h],
                        Init::GlorotUniform,
                        &mut rng,
                    )
                    .map_err(e)?,
                b: store
                    .add_param(&format!("{name}.b"), [4 * h], small, &mut rng)
                    .map_err(e)?,
            })
        };
        let layers = [
            [dir("l1.fwd", cfg.embed)?, dir("l1.bwd", cfg.embed)?],
            [dir("l2.fwd", 2 * h)?, dir("l2.bwd", 2 * h)?],
        ];
        let w_out = store
            .add_param("out.w", [cfg.classes, 2 * h], Init::GlorotUniform, &mut rng)
            .map_err(e)?;
        let b_out = store
            .add_param("out.b", [cfg.classes], small, &mut rng)
            .map_err(e)?;
        Ok(Model {
            cfg,
            emb,
            layers,
            w_out,
            b_out,
        })
    }
}

/// A sentence: word ids and one tag per word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentence {
    pub words: Vec<u32>,
    pub tags: Vec<u32>,
}

/// `count` random sentences of `cfg.len` words (uniform ids and tags).
pub fn sentences(cfg: &Config, count: usize, seed: u64) -> Vec<Sentence> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| Sentence {
            words: (0..cfg.len)
                .map(|_| rng.random_range(0..cfg.vocab as u32))
                .collect(),
            tags: (0..cfg.len)
                .map(|_| rng.random_range(0..cfg.classes as u32))
                .collect(),
        })
        .collect()
}

/// One direction over `xs`: the `h` of every position, in position order.
/// `zero` is a zero state `[2H]` (`[c | h]`) for the first step.
pub fn run_direction(
    g: &mut Graph,
    d: &Direction,
    xs: &[Expr],
    backward: bool,
    zero: Expr,
) -> sheaf_autodiff::Result<Vec<Expr>> {
    let (w, u, b) = (g.param(&d.w), g.param(&d.u), g.param(&d.b));
    let mut hs = vec![None; xs.len()];
    let (mut state, mut h) = (zero, None);
    for s in 0..xs.len() {
        let t = if backward { xs.len() - 1 - s } else { s };
        // Off the recurrence: batched over all positions before any cell.
        let wx = g.affine(b, &[(w, xs[t])])?;
        let gates = match h {
            Some(h) => {
                let uh = g.linear(u, h)?;
                g.add(wx, uh)?
            }
            None => wx,
        };
        state = g.lstm_cell(gates, state)?;
        let ht = g.cell_h(state)?;
        hs[t] = Some(ht);
        h = Some(ht);
    }
    Ok(hs.into_iter().flatten().collect())
}

/// The summed tag loss of one sentence, built into `g` (`zero`: a zero
/// state `[2H]` input shared by the graph's sentences).
pub fn sentence_loss(
    g: &mut Graph,
    m: &Model,
    s: &Sentence,
    zero: Expr,
) -> sheaf_autodiff::Result<Expr> {
    let emb = g.param(&m.emb);
    let mut xs = Vec::with_capacity(s.words.len());
    for &w in &s.words {
        xs.push(g.lookup(emb, w)?);
    }
    tagger_loss(g, m, xs, &s.tags, zero)
}

/// The tagger above the word vectors `xs`: both BiLSTM layers, the output
/// layer and the summed loss against `tags`.
pub fn tagger_loss(
    g: &mut Graph,
    m: &Model,
    mut xs: Vec<Expr>,
    tags: &[u32],
    zero: Expr,
) -> sheaf_autodiff::Result<Expr> {
    for layer in &m.layers {
        let fwd = run_direction(g, &layer[0], &xs, false, zero)?;
        let bwd = run_direction(g, &layer[1], &xs, true, zero)?;
        xs = fwd
            .iter()
            .zip(&bwd)
            .map(|(&f, &b)| g.concat(&[f, b]))
            .collect::<sheaf_autodiff::Result<_>>()?;
    }
    let (wo, bo) = (g.param(&m.w_out), g.param(&m.b_out));
    let mut losses = Vec::with_capacity(xs.len());
    for (&x, &tag) in xs.iter().zip(tags) {
        let logits = g.affine(bo, &[(wo, x)])?;
        losses.push(g.pick_neg_log_softmax(logits, tag)?);
    }
    g.sum(&losses)
}

/// The zero state input of a graph.
pub fn zero_state(g: &mut Graph, cfg: &Config) -> Result<Expr, String> {
    let z = Tensor::zeros([2 * cfg.hidden], DType::F32, Device::Cpu)
        .map_err(|e| format!("W2 zero state: {e}"))?;
    Ok(g.input(z))
}

/// One training step: the batch's losses summed into one graph, one
/// forward, one backward (with `exec`, or Sequential when `None`), one SGD
/// update. Returns the summed loss.
pub fn train_step(
    m: &Model,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    g: &mut Graph,
    exec: Option<&mut Executor>,
    batch: &[Sentence],
) -> Result<f32, String> {
    let e = |e: sheaf_autodiff::GraphError| e.to_string();
    g.clear();
    let zero = zero_state(g, &m.cfg)?;
    let mut losses = Vec::with_capacity(batch.len());
    for s in batch {
        losses.push(sentence_loss(g, m, s, zero).map_err(e)?);
    }
    let loss = g.sum(&losses).map_err(e)?;
    crate::step::backward_and_step(g, store, opt, exec, loss)
}

/// Plain SGD with lr 0.05, as W2 prescribes.
pub fn optimizer() -> Optimizer {
    Optimizer::sgd(Sgd {
        lr: LR,
        momentum: 0.0,
        weight_decay: 0.0,
    })
}

/// W2's learning rate.
pub const LR: f32 = 0.05;

/// The strategies W2 reports besides `manual`.
pub fn strategies() -> [(&'static str, Option<Strategy>); 3] {
    [
        ("sequential", None),
        ("depth", Some(Strategy::Depth)),
        ("agenda", Some(Strategy::Agenda)),
    ]
}
