//! W6, "sum of a string": read `4+3+9` one character at a time and output
//! the sum (16). A 2-layer GRU over one-hot characters, the last valid
//! state -> linear -> squared loss (`sheaf-nn`'s `Gru` and `Linear`), trained with any strategy: `bucket`
//! (length buckets, padded, masked with `sequence_last`), `agenda` or
//! `sequential` (unpadded dynamic graphs). The model is written once, for
//! one instance at a given padded length; the unpadded strategies call it
//! with `padded = len`.
//!
//! Data: strings of 2 to 21 single-digit terms joined by `+` (lengths 3 to
//! 41, every odd length equally likely), generated from a seed. Terms are
//! single digits so that the target is a count a GRU can learn to within
//! 1.0 in seconds; the model predicts the sum / 10 and errors are reported
//! in units of the sum.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sheaf_autodiff::{Adam, Expr, Graph, Init, Optimizer, Param, ParamStore};
use sheaf_nn::{Gru, Inits, Linear, RecurrentConfig, Scope};
use sheaf_sched::{Bucketing, Executor, PlanStats, Strategy};
use sheaf_tensor::Tensor;

use crate::error::{Error, Result};

/// Characters: the ten digits and `+`.
pub const SYMBOLS: usize = 11;
/// Shortest and longest string.
pub const MIN_LEN: usize = 3;
/// Longest string (BENCHMARKS.md W6).
pub const MAX_LEN: usize = 41;
/// The target is the sum divided by this (keeps it near the unit range).
const SCALE: f32 = 10.0;

/// One string and its sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// Symbol ids (0-9 digits, 10 `+`).
    pub chars: Vec<u8>,
    /// The sum of the terms.
    pub sum: f32,
}

impl Example {
    /// The string, e.g. `4+3+9`.
    pub fn text(&self) -> String {
        self.chars
            .iter()
            .map(|&c| if c == 10 { '+' } else { char::from(b'0' + c) })
            .collect()
    }
}

/// `n` examples from `seed`, lengths uniform over the odd lengths within
/// `min_len..=max_len` (clamped to 3..=41).
pub fn generate(n: usize, seed: u64, min_len: usize, max_len: usize) -> Vec<Example> {
    let mut rng = StdRng::seed_from_u64(seed);
    let lo = min_len.clamp(MIN_LEN, MAX_LEN).div_ceil(2);
    let hi = max_len.clamp(MIN_LEN, MAX_LEN).div_ceil(2);
    (0..n)
        .map(|_| {
            let terms = rng.random_range(lo..=hi.max(lo));
            let mut chars = Vec::with_capacity(2 * terms);
            let mut sum = 0.0;
            for k in 0..terms {
                if k > 0 {
                    chars.push(10);
                }
                let d: u8 = rng.random_range(0..10);
                sum += f32::from(d);
                chars.push(d);
            }
            Example { chars, sum }
        })
        .collect()
}

/// How the model is written (the same values and gradients each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Every GRU step's ops one by one.
    Inline,
    /// Each GRU step one call of a vertex function
    /// ([`Model::with_vertex_functions`]).
    Vertex,
    /// Each GRU layer an input product and a scan per string
    /// ([`Model::with_scans`]).
    Scan,
}

/// How the batches run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Length buckets with this spacing, padded and masked.
    Bucket(f64),
    /// A batched strategy over unpadded graphs (agenda, depth, sequential).
    Dynamic(Strategy),
}

/// Settings of a training run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Hidden size of both GRU layers.
    pub hidden: usize,
    /// Instances per update.
    pub batch: usize,
    /// Training examples.
    pub train: usize,
    /// Held-out examples.
    pub test: usize,
    /// Passes over the training set.
    pub epochs: usize,
    /// Adam's initial learning rate (decays linearly to a tenth).
    pub lr: f32,
    /// Data and initialisation seed.
    pub seed: u64,
    /// Shortest and longest strings.
    pub min_len: usize,
    /// Longest string.
    pub max_len: usize,
    /// Strategy.
    pub mode: Mode,
    /// How the model is written.
    pub form: Form,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            hidden: 32,
            batch: 32,
            train: 4000,
            test: 500,
            epochs: 8,
            lr: 0.01,
            seed: 1,
            min_len: MIN_LEN,
            max_len: MAX_LEN,
            mode: Mode::Bucket(1.5),
            form: Form::Scan,
        }
    }
}

/// The 2-layer GRU regressor, from `sheaf-nn` layers.
#[derive(Debug, Clone)]
pub struct Model {
    gru: Gru,
    out: Linear,
    /// Each GRU layer one scan per string ([`Model::with_scans`]).
    scan: bool,
}

impl Model {
    /// A model with hidden size `h`, initialised from `seed`: parameters
    /// `gru.l{0,1}.fwd.{w,u,b,b_u}` and `out.{w,b}`, weights and GRU biases
    /// uniform in ±1/√h (PyTorch's GRU initialisation), the output bias
    /// zero.
    pub fn new(store: &mut ParamStore, h: usize, seed: u64) -> Result<Self> {
        let a = (1.0 / h as f32).sqrt();
        let uniform = Init::Uniform { low: -a, high: a };
        let inits = Inits {
            matrix: uniform,
            bias: uniform,
            ..Inits::default()
        };
        let mut root = Scope::new(store, seed).with_inits(inits);
        let cfg = RecurrentConfig {
            layers: 2,
            ..RecurrentConfig::new(h)
        };
        let gru = Gru::new(&mut root.sub("gru")?, SYMBOLS, cfg)?;
        let zero_bias = Inits {
            bias: Init::Zeros,
            ..inits
        };
        let out = Linear::new(&mut root.sub("out")?.with_inits(zero_bias), h, 1, true)?;
        Ok(Model {
            gru,
            out,
            scan: false,
        })
    }

    /// The same model with each GRU step after the first one call of a
    /// vertex function ([`Gru::with_vertex_functions`]): the same values
    /// and gradients, fewer graph nodes per step.
    pub fn with_vertex_functions(self) -> Result<Self> {
        Ok(Model {
            gru: self.gru.with_vertex_functions()?,
            ..self
        })
    }

    /// The same model with each GRU layer two nodes per string: the
    /// string is one `[T, 11]` matrix of one-hot rows padded to the
    /// `padded` positions [`Model::predict`] is given (the [`Runner`]
    /// gives every string of a minibatch its longest length), the input
    /// products of all positions one node and the recurrent steps one
    /// scan ([`Gru::transduce_padded`], [`sheaf_autodiff::Graph::scan`]),
    /// so a minibatch of strings of any lengths runs each layer as two
    /// batches. The same values and gradients (tested).
    pub fn with_scans(self) -> Result<Self> {
        Ok(Model {
            gru: self.gru.with_vertex_functions()?,
            scan: true,
            ..self
        })
    }

    /// With vertex functions: each step's call also computes its input
    /// product (`Recurrent::fold_input_products`), one node per step.
    pub fn fold_input_products(self, yes: bool) -> Self {
        Model {
            gru: self.gru.fold_input_products(yes),
            ..self
        }
    }

    /// Every parameter: the GRU's layer by layer (`w`, `u`, `b`, `b_u`),
    /// then the output's weight and bias.
    pub fn params(&self) -> Vec<Param> {
        let mut ps = self.gru.params();
        ps.push(self.out.weight());
        ps.extend(self.out.bias());
        ps
    }

    /// The prediction (sum / 10, `[1]`) for `ex` run at padded length
    /// `padded >= len`: padded steps read zero vectors, and
    /// `sequence_last` takes the state at the true length, so the result
    /// does not depend on `padded` (unpadded, the last state is taken
    /// directly).
    pub fn predict(&self, g: &mut Graph, ex: &Example, padded: usize) -> Result<Expr> {
        if self.scan {
            return self.predict_scanned(g, ex, padded);
        }
        let xs = (0..padded)
            .map(|t| {
                let mut v = vec![0.0f32; SYMBOLS];
                if let Some(&c) = ex.chars.get(t) {
                    v[usize::from(c)] = 1.0;
                }
                Ok(g.input(Tensor::from_vec(v, [SYMBOLS]).map_err(cfg_err)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let hs = self.gru.transduce(g, &xs)?;
        let last = match hs.last() {
            // Unpadded (the dynamic strategies): the state at the true
            // length is the last one. Concatenating the sequence to pick
            // it cost three graph nodes per string, a third of W6's
            // batches under agenda.
            Some(&h) if padded == ex.chars.len() => h,
            _ => {
                let seq = g.concat(&hs)?;
                let seq = g.reshape(seq, [padded, self.gru.output_width()])?;
                g.sequence_last(seq, ex.chars.len())?
            }
        };
        Ok(self.out.forward(g, last)?)
    }

    /// [`Model::predict`] with scans: one input and one node per layer.
    fn predict_scanned(&self, g: &mut Graph, ex: &Example, steps: usize) -> Result<Expr> {
        let len = ex.chars.len();
        let mut rows = vec![0.0f32; steps * SYMBOLS];
        for (t, &c) in ex.chars.iter().enumerate() {
            rows[t * SYMBOLS + usize::from(c)] = 1.0;
        }
        let xs = g.input(Tensor::from_vec(rows, [steps, SYMBOLS]).map_err(cfg_err)?);
        let hs = self.gru.transduce_padded(g, xs, len)?;
        let last = g.sequence_last(hs, len)?;
        Ok(self.out.forward(g, last)?)
    }

    /// Squared loss of `ex` at padded length `padded`.
    pub fn loss(&self, g: &mut Graph, ex: &Example, padded: usize) -> Result<Expr> {
        let y = self.predict(g, ex, padded)?;
        let target = g.input(Tensor::from_vec(vec![ex.sum / SCALE], [1]).map_err(cfg_err)?);
        Ok(g.squared_distance(y, target)?)
    }
}

fn cfg_err(e: impl std::fmt::Display) -> Error {
    Error::Config(e.to_string())
}

/// What a training run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Held-out mean absolute error of the sum, after each epoch.
    pub mae: Vec<f32>,
    /// Training instances per second (graph building included).
    pub throughput: f64,
    /// Padded steps / all steps over training (0 unless bucketing).
    pub padding_fraction: f64,
    /// Statistics of the last update.
    pub last_stats: PlanStats,
}

/// Runs the strategy of `mode` over one minibatch: forward, backward
/// (gradients accumulate in `store`). Returns the summed loss.
pub struct Runner {
    bucketing: Option<Bucketing>,
    exec: Executor,
    graph: Graph,
    /// Padded and total steps so far.
    pub steps: (usize, usize),
}

impl Runner {
    /// A runner for `mode`.
    pub fn new(mode: Mode) -> Result<Self> {
        let (bucketing, strategy) = match mode {
            Mode::Bucket(s) => (Some(Bucketing::new(s)?), Strategy::Agenda),
            Mode::Dynamic(s) => (None, s),
        };
        Ok(Runner {
            bucketing,
            exec: Executor::new(strategy),
            graph: Graph::new(),
            steps: (0, 0),
        })
    }

    /// Forward and backward of `batch`; gradients accumulate in `store`.
    /// The graph is left cleared, so that an update writes the parameters
    /// in place.
    pub fn run(&mut self, model: &Model, store: &ParamStore, batch: &[&Example]) -> Result<f32> {
        // Scans batch when their strings share a padded length: unpadded
        // strategies give them the minibatch's longest.
        let longest = batch.iter().map(|e| e.chars.len()).max().unwrap_or(0);
        let common = model.scan && self.bucketing.is_none();
        self.run_with(store, batch, |g, ex, t| {
            model.loss(g, ex, if common { longest } else { t })
        })
    }

    /// [`Runner::run`] with any model: `build(g, ex, padded)` builds the
    /// loss of `ex` at padded length `padded` (its own length unless
    /// bucketing), as [`Model::loss`] does.
    pub fn run_with(
        &mut self,
        store: &ParamStore,
        batch: &[&Example],
        mut build: impl FnMut(&mut Graph, &Example, usize) -> Result<Expr>,
    ) -> Result<f32> {
        let g = &mut self.graph;
        if let Some(b) = &mut self.bucketing {
            let lens: Vec<usize> = batch.iter().map(|e| e.chars.len()).collect();
            let mut err = None;
            let loss = b.step(g, store, &lens, |g, i, t| {
                build(g, batch[i], t).map_err(|e| {
                    let msg = e.to_string();
                    err = Some(e);
                    sheaf_autodiff::GraphError::Data {
                        op: "sumstr",
                        what: msg,
                    }
                })
            });
            if let Some(e) = err {
                return Err(e);
            }
            let loss = loss?;
            self.steps.0 += b.stats().padded_steps;
            self.steps.1 += b.stats().total_steps;
            return Ok(loss);
        }
        g.clear();
        let mut losses = Vec::with_capacity(batch.len());
        for ex in batch {
            losses.push(build(g, ex, ex.chars.len())?);
            self.steps.1 += ex.chars.len();
        }
        let loss = g.sum(&losses)?;
        let v = self.exec.forward(g, store, loss)?;
        self.exec.backward(g, store, loss)?;
        g.clear();
        Ok(v.as_slice::<f32>().map_err(cfg_err)?.iter().sum())
    }

    /// Statistics of the last [`Runner::run`].
    pub fn stats(&self) -> PlanStats {
        match &self.bucketing {
            Some(b) => b.stats().clone(),
            None => self.exec.stats().clone(),
        }
    }
}

/// Held-out mean absolute error of the sum (agenda executor, unpadded).
pub fn mae(model: &Model, store: &ParamStore, data: &[Example]) -> Result<f32> {
    let mut exec = Executor::new(Strategy::Agenda);
    exec.set_inference(true);
    let mut total = 0.0f64;
    for chunk in data.chunks(256) {
        let mut g = Graph::new();
        let longest = chunk.iter().map(|e| e.chars.len()).max().unwrap_or(0);
        let ys = chunk
            .iter()
            .map(|ex| {
                model.predict(
                    &mut g,
                    ex,
                    if model.scan { longest } else { ex.chars.len() },
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let all = g.concat(&ys)?;
        let v = exec.forward(&mut g, store, all)?;
        for (y, ex) in v.as_slice::<f32>().map_err(cfg_err)?.iter().zip(chunk) {
            total += f64::from((y * SCALE - ex.sum).abs());
        }
    }
    Ok((total / data.len().max(1) as f64) as f32)
}

/// Trains a model under `cfg`; `progress` sees (epoch, held-out MAE).
pub fn train(cfg: &Config, mut progress: impl FnMut(usize, f32)) -> Result<Report> {
    if cfg.batch == 0 || cfg.train == 0 || cfg.test == 0 || cfg.hidden == 0 {
        return Err(Error::Config(
            "--batch, --train, --test and --hidden must be at least 1".into(),
        ));
    }
    if cfg.min_len > cfg.max_len {
        return Err(Error::Config(format!(
            "--min-len {} is above --max-len {}",
            cfg.min_len, cfg.max_len
        )));
    }
    let train = generate(cfg.train, cfg.seed, cfg.min_len, cfg.max_len);
    let test = generate(
        cfg.test,
        cfg.seed.wrapping_add(1_000_003),
        cfg.min_len,
        cfg.max_len,
    );
    let mut store = ParamStore::new();
    let model = Model::new(&mut store, cfg.hidden, cfg.seed)?;
    let model = match cfg.form {
        Form::Inline => model,
        Form::Vertex => model.with_vertex_functions()?,
        Form::Scan => model.with_scans()?,
    };
    let mut opt = Optimizer::adam(Adam {
        lr: cfg.lr,
        ..Adam::default()
    })
    .with_clip_norm(5.0);
    let mut runner = Runner::new(cfg.mode)?;
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0xba7c);
    let mut mae_hist = Vec::new();
    let mut busy = 0.0f64;
    let mut seen = 0usize;
    for epoch in 0..cfg.epochs {
        // Linear decay to a tenth: Adam at a constant rate oscillates on
        // this task late in training (held-out MAE jumping 0.3 <-> 2).
        opt.set_lr(cfg.lr * (1.0 - 0.9 * epoch as f32 / cfg.epochs.max(1) as f32));
        for i in (1..order.len()).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        for chunk in order.chunks(cfg.batch) {
            let batch: Vec<&Example> = chunk.iter().map(|&i| &train[i]).collect();
            let t0 = Instant::now();
            runner.run(&model, &store, &batch)?;
            opt.step(&mut store)?;
            busy += t0.elapsed().as_secs_f64();
            seen += batch.len();
        }
        let m = mae(&model, &store, &test)?;
        progress(epoch + 1, m);
        mae_hist.push(m);
    }
    let (padded, total) = runner.steps;
    Ok(Report {
        mae: mae_hist,
        throughput: seen as f64 / busy.max(1e-9),
        padding_fraction: padded as f64 / total.max(1) as f64,
        last_stats: runner.stats(),
    })
}
