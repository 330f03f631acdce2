//! Recurrent layers: [`Lstm`], [`Gru`] and the Elman [`Rnn`], one step at
//! a time ([`Recurrent::step`]) or over a sequence
//! ([`Recurrent::transduce`]), stacked and bidirectional.
//!
//! Over a sequence the input products `W x_t + b` of every position are
//! added before the recurrence, apart from it: they depend on no earlier
//! step, so every strategy runs each layer's as one batch.
//!
//! Weights, per layer `l<k>` and direction (`fwd`, `bwd`): `w` `[G H, in]`,
//! `u` `[G H, H]`, `b` `[G H]` (GRU: also `b_u` `[3H]`), `G` gates.
//! - LSTM (`G = 4`), rows in the order `i, f, o, u`: `c = σ(i) tanh(u) +
//!   σ(f) c_prev`, `h = σ(o) tanh(c)`; the state is `[c | h]` `[2H]`.
//!   PyTorch's `LSTMCell` orders its rows `i, f, g, o` (`g` is `u`) and has
//!   two biases: `w` is `weight_ih` with its last two blocks of `H` rows
//!   swapped, `u` likewise from `weight_hh`, `b = bias_ih + bias_hh`
//!   (swapped the same way).
//! - GRU (`G = 3`), PyTorch's `GRUCell` exactly: rows `r, z, n`,
//!   `w = weight_ih`, `u = weight_hh`, `b = bias_ih`, `b_u = bias_hh`;
//!   `n = tanh(W_n x + b_n + r (U_n h + b_un))`, `h = (1 - z) n + z h_prev`.
//! - Elman RNN (`G = 1`): `h = tanh(W x + b + U h_prev)`.
//!
//! Recurrent dropout ([`RecurrentConfig::recurrent_dropout`], rate `p`)
//! follows Semeniuta, Severyn & Barth (2016), as the fused Tree-LSTM ops
//! ([`Graph::tree_lstm_node_rd`]) and [`crate::BinaryTreeLstm`] do: it
//! drops what a step adds to the memory, never the memory itself, with a
//! fresh inverted-dropout mask `d` at every step (not one per sequence as
//! Gal & Ghahramani's), in training mode only:
//! - LSTM: `c = σ(i) d(tanh(u)) + σ(f) c_prev` (the fused Tree-LSTM cell
//!   with one child, so still one kernel per step);
//! - GRU: `h = (1 - z) d(n) + z h_prev` (composed of graph ops);
//! - Elman: `h = tanh(W x + b + U d(h_prev))` (the candidate is the whole
//!   state, so its recurrent input is dropped; the paper's equation).
//!
//! In evaluation mode ([`Graph::is_train`] false) and at rate 0 a layer
//! builds exactly the graph it builds without recurrent dropout.

use std::marker::PhantomData;

use sheaf_autodiff::{Expr, Graph, GraphError, Param, Result};
use sheaf_tensor::{DType, Device, Tensor};

use crate::cells::{Cell, GruCell, LstmCell, Prev, RnnCell};
use crate::scope::{layer_path, Scope};
pub use crate::unit::{RecurrentConfig, Unit};

/// A recurrent layer of cell `C`: [`Lstm`], [`Gru`] or [`Rnn`].
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore, Sequential};
/// use sheaf_nn::prelude::*;
/// use sheaf_tensor::Tensor;
///
/// let mut store = ParamStore::new();
/// let rnn = Rnn::new(&mut Scope::new(&mut store, 1).sub("rnn")?, 2, RecurrentConfig::new(3))?;
/// let mut g = Graph::new();
/// let xs: Vec<_> = (0..4)
///     .map(|t| g.input(Tensor::from_vec(vec![t as f32, 1.0], [2]).unwrap()))
///     .collect();
/// let hs = rnn.transduce(&mut g, &xs)?;
/// assert_eq!(hs.len(), 4);
/// let last = Sequential::new().forward(&mut g, &store, hs[3])?.to_vec::<f32>().unwrap();
/// // Elman: h = tanh(...), in (-1, 1).
/// assert!(last.len() == 3 && last.iter().all(|v| v.abs() < 1.0));
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Recurrent<C: Cell> {
    cfg: RecurrentConfig,
    /// `units[layer][direction]`.
    units: Vec<Vec<Unit>>,
    pub(crate) path: String,
    cell: PhantomData<C>,
    /// Step functions, when on ([`Recurrent::with_vertex_functions`]).
    steps: Option<crate::recurrent_vertex::UnitFns>,
}

/// LSTM layers (see the module docs for the gates and weight layout).
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore};
/// use sheaf_nn::prelude::*;
///
/// let mut store = ParamStore::new();
/// let lstm = Lstm::new(&mut Scope::new(&mut store, 1).sub("lstm")?, 3, RecurrentConfig::new(4))?;
/// // Four gate blocks; the state is [c | h].
/// assert_eq!(store.get("lstm.l0.fwd.w").unwrap().shape().dims(), &[16, 3]);
/// let mut g = Graph::new();
/// let s = lstm.zero_state(&mut g)?;
/// assert_eq!(g.shape(s.states[0])?.dims(), &[8]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
pub type Lstm = Recurrent<LstmCell>;
/// GRU layers, PyTorch's `GRUCell` equations.
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore};
/// use sheaf_nn::prelude::*;
///
/// let mut store = ParamStore::new();
/// let gru = Gru::new(&mut Scope::new(&mut store, 1).sub("gru")?, 3, RecurrentConfig::new(4))?;
/// // Three gate blocks and a second bias; the state is h.
/// assert_eq!(store.get("gru.l0.fwd.w").unwrap().shape().dims(), &[12, 3]);
/// assert!(store.get("gru.l0.fwd.b_u").is_some());
/// let mut g = Graph::new();
/// let s = gru.zero_state(&mut g)?;
/// assert_eq!(g.shape(s.states[0])?.dims(), &[4]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
pub type Gru = Recurrent<GruCell>;
/// Elman RNN layers.
///
/// ```
/// use sheaf_autodiff::ParamStore;
/// use sheaf_nn::prelude::*;
///
/// let mut store = ParamStore::new();
/// let rnn = Rnn::new(&mut Scope::new(&mut store, 1).sub("rnn")?, 3, RecurrentConfig::new(4))?;
/// assert_eq!(rnn.params().len(), 3);
/// assert_eq!(store.get("rnn.l0.fwd.w").unwrap().shape().dims(), &[4, 3]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
pub type Rnn = Recurrent<RnnCell>;

/// Per-layer (and per-direction) states: `states[layer * dirs + dir]`.
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore};
/// use sheaf_nn::prelude::*;
///
/// let mut store = ParamStore::new();
/// let cfg = RecurrentConfig { layers: 2, bidirectional: true, ..RecurrentConfig::new(4) };
/// let lstm = Lstm::new(&mut Scope::new(&mut store, 1), 3, cfg)?;
/// let mut g = Graph::new();
/// let s = lstm.zero_state(&mut g)?;
/// // states[layer * 2 + direction], each [c | h].
/// assert_eq!(s.states.len(), 4);
/// assert_eq!(g.shape(s.states[3])?.dims(), &[8]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    /// The states, the first layer's first.
    pub states: Vec<Expr>,
    /// The zero inputs [`Recurrent::zero_state`] made: while `states[i]`
    /// is still `zeros[i]`, the first step leaves out the recurrent
    /// product (`U 0`), as a hand-written model would. A state replaced by
    /// the user no longer matches and gets its product.
    zeros: Vec<Expr>,
}

impl State {
    /// Given states (`states[layer * dirs + dir]`).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::prelude::*;
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1), 2, RecurrentConfig::new(3))?;
    /// let mut g = Graph::new();
    /// // Start from a given state (e.g. an encoder's last output).
    /// let h0 = g.input(Tensor::from_vec(vec![0.5f32, -0.5, 0.0], [3]).unwrap());
    /// let x = g.input(Tensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap());
    /// let s1 = gru.step(&mut g, &State::new(vec![h0]), x)?;
    /// let h1 = gru.output(&mut g, &s1)?;
    /// assert_eq!(Sequential::new().forward(&mut g, &store, h1)?.dims(), &[3]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn new(states: Vec<Expr>) -> State {
        State {
            states,
            zeros: Vec::new(),
        }
    }

    /// What a first step knows of state `i`.
    fn prev(&self, i: usize) -> Prev {
        match self.zeros.get(i) {
            Some(z) if self.states.get(i) == Some(z) => Prev::Zero,
            _ => Prev::Unknown,
        }
    }
}

impl<C: Cell> Recurrent<C> {
    /// Layers `l0`, `l1`, ... (directions `fwd`, `bwd` when bidirectional)
    /// in `scope`, reading inputs of width `inp`. Errors: zero sizes or
    /// layers, dropout outside `[0, 1)`.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::prelude::*;
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig { layers: 2, ..RecurrentConfig::new(8) };
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1).sub("lstm")?, 4, cfg)?;
    /// assert_eq!(lstm.params().len(), 6);
    /// assert_eq!(store.get("lstm.l1.fwd.w").unwrap().shape().dims(), &[32, 8]);
    /// let bad = RecurrentConfig { recurrent_dropout: 1.0, ..RecurrentConfig::new(8) };
    /// let e = Lstm::new(&mut Scope::new(&mut store, 1).sub("x")?, 4, bad).unwrap_err();
    /// assert!(e.to_string().contains("Lstm: recurrent dropout must lie in [0, 1), it is 1"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn new(scope: &mut Scope<'_>, inp: usize, cfg: RecurrentConfig) -> Result<Self> {
        let bad = |what: String| Err(GraphError::Params(format!("{}: {what}", C::NAME)));
        if inp == 0 || cfg.hidden == 0 || cfg.layers == 0 {
            return bad(format!(
                "input width {inp}, hidden size {} and {} layers must all be positive",
                cfg.hidden, cfg.layers
            ));
        }
        let rates = [
            ("input", cfg.input_dropout),
            ("output", cfg.output_dropout),
            ("recurrent", cfg.recurrent_dropout),
        ];
        for (name, p) in rates {
            if !(0.0..1.0).contains(&p) {
                return bad(format!("{name} dropout must lie in [0, 1), it is {p}"));
            }
        }
        let dirs: &[&str] = if cfg.bidirectional {
            &["fwd", "bwd"]
        } else {
            &["fwd"]
        };
        let mut units = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let width = match l {
                0 => inp,
                _ => cfg.hidden * dirs.len(),
            };
            let mut layer = scope.sub(&format!("l{l}"))?;
            let mut row = Vec::with_capacity(dirs.len());
            for d in dirs {
                let rd = cfg.recurrent_dropout;
                row.push(Unit::new::<C>(&mut layer.sub(d)?, width, cfg.hidden, rd)?);
            }
            units.push(row);
        }
        Ok(Recurrent {
            cfg,
            units,
            path: layer_path(C::NAME, scope),
            cell: PhantomData,
            steps: None,
        })
    }

    /// The step functions, when on.
    pub(crate) fn step_fns(&self) -> Option<&crate::recurrent_vertex::UnitFns> {
        self.steps.as_ref()
    }

    pub(crate) fn set_step_fns(&mut self, fns: Option<crate::recurrent_vertex::UnitFns>) {
        self.steps = fns;
    }

    /// The configuration.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::prelude::*;
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig { bidirectional: true, ..RecurrentConfig::new(8) };
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1), 4, cfg)?;
    /// assert_eq!(gru.config(), cfg);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn config(&self) -> RecurrentConfig {
        self.cfg
    }

    /// Every parameter, layer by layer and direction by direction.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::prelude::*;
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig { layers: 2, bidirectional: true, ..RecurrentConfig::new(8) };
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1), 4, cfg)?;
    /// // w, u, b, b_u per layer and direction.
    /// assert_eq!(gru.params().len(), 2 * 2 * 4);
    /// let sizes = gru.params().into_iter().map(|p| p.shape().dims().iter().product::<usize>());
    /// assert_eq!(sizes.sum::<usize>(), 2 * (24 * 4 + 24 * 8 + 48) + 2 * (24 * 16 + 24 * 8 + 48));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn params(&self) -> Vec<Param> {
        self.units.iter().flatten().flat_map(Unit::params).collect()
    }

    /// `units()[layer][direction]`.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::prelude::*;
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig { layers: 3, bidirectional: true, ..RecurrentConfig::new(8) };
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1), 4, cfg)?;
    /// assert_eq!(lstm.units().len(), 3);
    /// assert!(lstm.units().iter().all(|layer| layer.len() == 2));
    /// // Layers above the first read both directions.
    /// assert_eq!(lstm.units()[1][0].w().shape().dims(), &[32, 16]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn units(&self) -> &[Vec<Unit>] {
        &self.units
    }

    /// The width of each position's output: `H`, or `2H` bidirectional.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::prelude::*;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let uni = Lstm::new(&mut root.sub("uni")?, 4, RecurrentConfig::new(8))?;
    /// let cfg = RecurrentConfig { bidirectional: true, ..RecurrentConfig::new(8) };
    /// let bi = Lstm::new(&mut root.sub("bi")?, 4, cfg)?;
    /// assert_eq!((uni.output_width(), bi.output_width()), (8, 16));
    /// // The layer on top reads that width.
    /// let out = Linear::new(&mut root.sub("out")?, bi.output_width(), 2, true)?;
    /// assert_eq!(out.inp(), 16);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn output_width(&self) -> usize {
        self.cfg.hidden * self.dirs()
    }

    pub(crate) fn dirs(&self) -> usize {
        if self.cfg.bidirectional {
            2
        } else {
            1
        }
    }

    /// Zero states for every layer and direction.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::prelude::*;
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig { layers: 2, ..RecurrentConfig::new(8) };
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1), 4, cfg)?;
    /// let mut g = Graph::new();
    /// let s = lstm.zero_state(&mut g)?;
    /// assert_eq!(s.states.len(), 2);
    /// let c_h = Sequential::new().forward(&mut g, &store, s.states[1])?;
    /// assert_eq!(c_h.to_vec::<f32>().unwrap(), vec![0.0; 16]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn zero_state(&self, g: &mut Graph) -> Result<State> {
        let width = C::state_width(self.cfg.hidden);
        let zeros = Tensor::zeros([width], DType::F32, Device::Cpu).map_err(|source| {
            GraphError::Tensor {
                context: format!("{} zero state", C::NAME),
                source: Box::new(source),
            }
        })?;
        let states: Vec<Expr> = (0..self.units.len() * self.dirs())
            .map(|_| g.input(zeros.clone()))
            .collect();
        Ok(State {
            zeros: states.clone(),
            states,
        })
    }

    /// The top layer's output `h` of `state` (unidirectional layers),
    /// without output dropout (apply [`Graph::dropout`] where wanted).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore};
    /// use sheaf_nn::prelude::*;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let lstm = Lstm::new(&mut root.sub("lstm")?, 2, RecurrentConfig::new(3))?;
    /// let mut g = Graph::new();
    /// let s = lstm.zero_state(&mut g)?;
    /// let h = lstm.output(&mut g, &s)?;
    /// assert_eq!(g.shape(h)?.dims(), &[3]);
    /// let cfg = RecurrentConfig { bidirectional: true, ..RecurrentConfig::new(3) };
    /// let bi = Lstm::new(&mut root.sub("bi")?, 2, cfg)?;
    /// let s = bi.zero_state(&mut g)?;
    /// let e = bi.output(&mut g, &s).unwrap_err();
    /// let want = "Lstm \"bi\": a bidirectional layer's outputs come from transduce";
    /// assert!(e.to_string().contains(want));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn output(&self, g: &mut Graph, state: &State) -> Result<Expr> {
        if self.cfg.bidirectional {
            return Err(GraphError::Params(format!(
                "{}: a bidirectional layer's outputs come from transduce",
                self.path
            )));
        }
        match state.states.last() {
            Some(&s) => C::output(g, s),
            None => Err(GraphError::Params(format!("{}: an empty state", C::NAME))),
        }
    }

    /// One step of a unidirectional stack from `state` on input `x`
    /// `[in]`; the new state (read the output with
    /// [`Recurrent::output`]). Errors: a bidirectional layer (it needs the
    /// whole sequence: use [`Recurrent::transduce`]), a state of another
    /// layer count, an input of the wrong width.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::prelude::*;
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let cfg = RecurrentConfig { layers: 2, ..RecurrentConfig::new(4) };
    /// let lstm = Lstm::new(&mut root.sub("lstm")?, 2, cfg)?;
    /// let cfg = RecurrentConfig { bidirectional: true, ..RecurrentConfig::new(4) };
    /// let bi = Lstm::new(&mut root.sub("bi")?, 2, cfg)?;
    /// let mut g = Graph::new();
    /// let xs: Vec<_> = (0..3)
    ///     .map(|t| g.input(Tensor::from_vec(vec![t as f32, 1.0], [2]).unwrap()))
    ///     .collect();
    /// // Step by step (as a decoder feeding back its outputs would) ...
    /// let mut state = lstm.zero_state(&mut g)?;
    /// for &x in &xs {
    ///     state = lstm.step(&mut g, &state, x)?;
    /// }
    /// let h = lstm.output(&mut g, &state)?;
    /// // ... is what transduce computes over the whole sequence.
    /// let hs = lstm.transduce(&mut g, &xs)?;
    /// let seq = Sequential::new();
    /// let a = seq.forward(&mut g, &store, h)?.to_vec::<f32>().unwrap();
    /// let b = seq.forward(&mut g, &store, hs[2])?.to_vec::<f32>().unwrap();
    /// assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-6));
    /// let s = bi.zero_state(&mut g)?;
    /// let e = bi.step(&mut g, &s, xs[0]).unwrap_err();
    /// assert!(e.to_string().contains("not step by step"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn step(&self, g: &mut Graph, state: &State, x: Expr) -> Result<State> {
        if self.cfg.bidirectional {
            return Err(GraphError::Params(format!(
                "{}: a bidirectional layer runs over whole sequences (transduce), not step by step",
                self.path
            )));
        }
        self.check_state(state)?;
        self.check_input(g, x, 0)?;
        let mut x = self.drop(g, x, self.cfg.input_dropout)?;
        let mut next = Vec::with_capacity(self.units.len());
        let last = self.units.len() - 1;
        for (l, (layer, &s)) in self.units.iter().zip(&state.states).enumerate() {
            let unit = &layer[0];
            let xw = unit.input_part(g, x)?;
            let s = self.run_step(g, (l, 0), xw, s, state.prev(l))?;
            next.push(s);
            if l < last {
                // Between layers; the top output (read with `output`) is
                // left to the caller.
                x = C::output(g, s)?;
                x = self.drop(g, x, self.cfg.output_dropout)?;
            }
        }
        Ok(State::new(next))
    }

    /// The top layer's outputs at every position of `xs` (each `[in]`),
    /// from zero states.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::prelude::*;
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig { bidirectional: true, ..RecurrentConfig::new(4) };
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1).sub("gru")?, 2, cfg)?;
    /// let mut g = Graph::new();
    /// let xs: Vec<_> = (0..5)
    ///     .map(|t| g.input(Tensor::from_vec(vec![t as f32, 1.0], [2]).unwrap()))
    ///     .collect();
    /// let hs = gru.transduce(&mut g, &xs)?;
    /// // One output per position, both directions concatenated.
    /// assert_eq!(hs.len(), 5);
    /// assert_eq!(Sequential::new().forward(&mut g, &store, hs[0])?.dims(), &[8]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn transduce(&self, g: &mut Graph, xs: &[Expr]) -> Result<Vec<Expr>> {
        let init = self.zero_state(g)?;
        self.transduce_from(g, xs, &init)
    }

    /// [`Recurrent::transduce`] from the given initial states (the
    /// backward direction starts its run at the last position). Errors:
    /// an empty sequence, an input of the wrong width (naming the layer,
    /// the position and both widths), a state of another layer count.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::prelude::*;
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1).sub("gru")?, 2, RecurrentConfig::new(3))?;
    /// let mut g = Graph::new();
    /// let h0 = g.input(Tensor::from_vec(vec![0.1f32, 0.2, 0.3], [3]).unwrap());
    /// let init = State::new(vec![h0]);
    /// let xs: Vec<_> = (0..3)
    ///     .map(|t| g.input(Tensor::from_vec(vec![t as f32, 1.0], [2]).unwrap()))
    ///     .collect();
    /// let hs = gru.transduce_from(&mut g, &xs, &init)?;
    /// assert_eq!(Sequential::new().forward(&mut g, &store, hs[2])?.dims(), &[3]);
    /// // Errors name the layer, the position and both widths.
    /// let wide = g.input(Tensor::from_vec(vec![0.0f32; 3], [3]).unwrap());
    /// let e = gru.transduce_from(&mut g, &[xs[0], wide], &init).unwrap_err();
    /// let want = "Gru \"gru\": the input at position 1 has shape [3], the layer reads [2]";
    /// assert!(e.to_string().contains(want));
    /// let e = gru.transduce_from(&mut g, &[], &init).unwrap_err();
    /// assert!(e.to_string().contains("an empty sequence"));
    /// let e = gru.transduce_from(&mut g, &xs, &State::new(vec![])).unwrap_err();
    /// assert!(e.to_string().contains("a state of 0 layer(s) x direction(s), this layer has 1"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn transduce_from(&self, g: &mut Graph, xs: &[Expr], init: &State) -> Result<Vec<Expr>> {
        if xs.is_empty() {
            return Err(GraphError::Params(format!(
                "{}.transduce: an empty sequence",
                self.path
            )));
        }
        self.check_state(init)?;
        for (t, &x) in xs.iter().enumerate() {
            self.check_input(g, x, t)?;
        }
        let mut seq: Vec<Expr> = xs
            .iter()
            .map(|&x| self.drop(g, x, self.cfg.input_dropout))
            .collect::<Result<_>>()?;
        let dirs = self.dirs();
        for (l, layer) in self.units.iter().enumerate() {
            let mut outs: Vec<Vec<Expr>> = Vec::with_capacity(dirs);
            for (d, unit) in layer.iter().enumerate() {
                // The input parts of every position first: one batch.
                // Folded steps take their input and compute the product
                // themselves (see `fold_input_products`).
                let fold = self.folds_inputs();
                let xw: Vec<Expr> = match fold {
                    true => Vec::new(),
                    false => seq
                        .iter()
                        .map(|&x| unit.input_part(g, x))
                        .collect::<Result<_>>()?,
                };
                let mut state = init.states[l * dirs + d];
                let mut prev = init.prev(l * dirs + d);
                let mut h = vec![None; seq.len()];
                let order: Box<dyn Iterator<Item = usize>> = match d {
                    0 => Box::new(0..seq.len()),
                    _ => Box::new((0..seq.len()).rev()),
                };
                for t in order {
                    state = match fold {
                        true => self.run_step_x(g, (l, d), seq[t], state, prev)?,
                        false => self.run_step(g, (l, d), xw[t], state, prev)?,
                    };
                    let out = C::output(g, state)?;
                    prev = Prev::Output(out);
                    h[t] = Some(out);
                }
                outs.push(h.into_iter().flatten().collect());
            }
            seq = (0..seq.len())
                .map(|t| {
                    let y = match dirs {
                        1 => outs[0][t],
                        _ => g.concat(&[outs[0][t], outs[1][t]])?,
                    };
                    self.drop(g, y, self.cfg.output_dropout)
                })
                .collect::<Result<_>>()?;
        }
        Ok(seq)
    }

    pub(crate) fn drop(&self, g: &mut Graph, x: Expr, p: f32) -> Result<Expr> {
        match p > 0.0 && g.is_train() {
            true => g.dropout(x, p),
            false => Ok(x),
        }
    }

    fn check_state(&self, state: &State) -> Result<()> {
        let want = self.units.len() * self.dirs();
        if state.states.len() != want {
            return Err(GraphError::Params(format!(
                "{}: a state of {} layer(s) x direction(s), this layer has {want}",
                self.path,
                state.states.len()
            )));
        }
        Ok(())
    }

    fn check_input(&self, g: &Graph, x: Expr, position: usize) -> Result<()> {
        let (shape, want) = (g.shape(x)?, self.units[0][0].inp);
        if shape.dims() != [want] {
            return Err(GraphError::Params(format!(
                "{}: the input at position {position} has shape {shape}, the layer reads [{want}]",
                self.path
            )));
        }
        Ok(())
    }
}
