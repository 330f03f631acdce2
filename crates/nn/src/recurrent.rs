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

use crate::scope::{layer_path, Scope};

/// What differs between the recurrent cells.
///
/// ```
/// use sheaf_nn::{Cell, GruCell, LstmCell, RnnCell};
///
/// // Rows of `w` and the state width of a cell of hidden size `h`.
/// fn sizes<C: Cell>(h: usize) -> (&'static str, usize, usize) {
///     (C::NAME, C::GATES * h, C::state_width(h))
/// }
/// assert_eq!(sizes::<LstmCell>(8), ("Lstm", 32, 16));
/// assert_eq!(sizes::<GruCell>(8), ("Gru", 24, 8));
/// assert_eq!(sizes::<RnnCell>(8), ("Rnn", 8, 8));
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
pub trait Cell: Copy + std::fmt::Debug {
    /// The layer's name in messages (`"Lstm"`).
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Cell, Gru, GruCell, RecurrentConfig, Scope};
    ///
    /// assert_eq!(GruCell::NAME, "Gru");
    /// let mut store = ParamStore::new();
    /// let e = Gru::new(&mut Scope::new(&mut store, 1), 0, RecurrentConfig::new(4)).unwrap_err();
    /// assert!(e.to_string().starts_with("Gru: input width 0"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    const NAME: &'static str;
    /// Gate blocks of `H` rows in `w` and `u`.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Cell, Lstm, LstmCell, RecurrentConfig, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1), 3, RecurrentConfig::new(5))?;
    /// assert_eq!(lstm.units()[0][0].w().shape().dims(), &[LstmCell::GATES * 5, 3]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    const GATES: usize;
    /// The state's width for hidden size `h` (`2h` for `[c | h]`).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore};
    /// use sheaf_nn::{Cell, Lstm, LstmCell, RecurrentConfig, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1), 3, RecurrentConfig::new(5))?;
    /// let mut g = Graph::new();
    /// let s = lstm.zero_state(&mut g)?;
    /// assert_eq!(LstmCell::state_width(5), 10);
    /// assert_eq!(g.shape(s.states[0])?.dims(), &[10]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    fn state_width(h: usize) -> usize;
    /// The hidden output `h` of a state.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore};
    /// use sheaf_nn::{Cell, GruCell, Lstm, LstmCell, RecurrentConfig, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1), 3, RecurrentConfig::new(5))?;
    /// let mut g = Graph::new();
    /// let s = lstm.zero_state(&mut g)?.states[0];
    /// let h = LstmCell::output(&mut g, s)?;
    /// assert_eq!(g.shape(h)?.dims(), &[5]);
    /// // A GRU's state is its output.
    /// let s = g.input(Tensor::from_vec(vec![0.0f32; 5], [5]).unwrap());
    /// assert_eq!(GruCell::output(&mut g, s)?, s);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    fn output(g: &mut Graph, state: Expr) -> Result<Expr>;
    /// Whether `u`'s product has a bias of its own, `b_u` `[G H]` (the
    /// GRU's `r (U_n h + b_un)` needs it inside the cell); otherwise `b`
    /// is the only bias.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Cell, Gru, GruCell, LstmCell, RecurrentConfig, Scope};
    ///
    /// assert_eq!((GruCell::U_BIAS, LstmCell::U_BIAS), (true, false));
    /// let mut store = ParamStore::new();
    /// Gru::new(&mut Scope::new(&mut store, 1).sub("gru")?, 3, RecurrentConfig::new(4))?;
    /// assert_eq!(store.get("gru.l0.fwd.b_u").unwrap().shape().dims(), &[12]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    const U_BIAS: bool = false;
    /// One step from the input part `xw = W x + b` and the previous state
    /// (`prev`: see [`Prev`]), with the unit's recurrent dropout when the
    /// graph is in training mode (see the module docs).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{Cell, Lstm, LstmCell, Prev, RecurrentConfig, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1), 3, RecurrentConfig::new(4))?;
    /// let unit = &lstm.units()[0][0];
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![1.0f32, 0.0, -1.0], [3]).unwrap());
    /// // The input part W x + b, then two steps, the first from the zero state.
    /// let (w, b) = (g.param(&unit.w()), g.param(&unit.b()));
    /// let xw = g.affine(b, &[(w, x)])?;
    /// let s0 = lstm.zero_state(&mut g)?.states[0];
    /// let s1 = LstmCell::step(&mut g, unit, xw, s0, Prev::Zero)?;
    /// let h1 = LstmCell::output(&mut g, s1)?;
    /// let s2 = LstmCell::step(&mut g, unit, xw, s1, Prev::Output(h1))?;
    /// assert_eq!(Sequential::new().forward(&mut g, &store, s2)?.dims(), &[8]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    fn step(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr, prev: Prev) -> Result<Expr>;
}

/// What a step knows of its previous state besides the state itself.
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore, Sequential};
/// use sheaf_nn::{Cell, Lstm, LstmCell, Prev, RecurrentConfig, Scope};
/// use sheaf_tensor::Tensor;
///
/// let mut store = ParamStore::new();
/// let lstm = Lstm::new(&mut Scope::new(&mut store, 1), 3, RecurrentConfig::new(4))?;
/// let unit = &lstm.units()[0][0];
/// let mut g = Graph::new();
/// let x = g.input(Tensor::from_vec(vec![1.0f32, 0.0, -1.0], [3]).unwrap());
/// let (w, b) = (g.param(&unit.w()), g.param(&unit.b()));
/// let xw = g.affine(b, &[(w, x)])?;
/// let s0 = lstm.zero_state(&mut g)?.states[0];
/// let n0 = g.len();
/// let known = LstmCell::step(&mut g, unit, xw, s0, Prev::Zero)?;
/// let n1 = g.len();
/// let unknown = LstmCell::step(&mut g, unit, xw, s0, Prev::Unknown)?;
/// // The same state, without the product `U h` (and its inputs) of a zero `h`.
/// assert!(n1 - n0 < g.len() - n1);
/// let seq = Sequential::new();
/// let a = seq.forward(&mut g, &store, known)?.to_vec::<f32>().unwrap();
/// let b = seq.forward(&mut g, &store, unknown)?.to_vec::<f32>().unwrap();
/// assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-6));
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Prev {
    /// It is zero ([`Recurrent::zero_state`]): the recurrent product
    /// (`U 0`) is left out.
    Zero,
    /// Its output `h` is this node (taken by the previous step): reused,
    /// not taken again.
    Output(Expr),
    /// Nothing more: the output is taken from the state.
    Unknown,
}

/// The LSTM cell (see the module docs).
///
/// ```
/// use sheaf_autodiff::ParamStore;
/// use sheaf_nn::{LstmCell, Recurrent, RecurrentConfig, Scope};
///
/// // `Lstm` is `Recurrent<LstmCell>`.
/// let mut store = ParamStore::new();
/// let cfg = RecurrentConfig::new(4);
/// let lstm = Recurrent::<LstmCell>::new(&mut Scope::new(&mut store, 1), 3, cfg)?;
/// assert_eq!(lstm.units()[0][0].u().shape().dims(), &[16, 4]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct LstmCell;
/// The GRU cell (see the module docs).
///
/// ```
/// use sheaf_autodiff::ParamStore;
/// use sheaf_nn::{GruCell, Recurrent, RecurrentConfig, Scope};
///
/// // `Gru` is `Recurrent<GruCell>`.
/// let mut store = ParamStore::new();
/// let cfg = RecurrentConfig::new(4);
/// let gru = Recurrent::<GruCell>::new(&mut Scope::new(&mut store, 1), 3, cfg)?;
/// assert_eq!(gru.units()[0][0].u().shape().dims(), &[12, 4]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct GruCell;
/// The Elman cell (see the module docs).
///
/// ```
/// use sheaf_autodiff::ParamStore;
/// use sheaf_nn::{Recurrent, RecurrentConfig, RnnCell, Scope};
///
/// // `Rnn` is `Recurrent<RnnCell>`.
/// let mut store = ParamStore::new();
/// let cfg = RecurrentConfig::new(4);
/// let rnn = Recurrent::<RnnCell>::new(&mut Scope::new(&mut store, 1), 3, cfg)?;
/// assert_eq!(rnn.units()[0][0].u().shape().dims(), &[4, 4]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RnnCell;

impl Cell for LstmCell {
    const NAME: &'static str = "Lstm";
    const GATES: usize = 4;
    fn state_width(h: usize) -> usize {
        2 * h
    }
    fn output(g: &mut Graph, state: Expr) -> Result<Expr> {
        g.cell_h(state)
    }
    fn step(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr, prev: Prev) -> Result<Expr> {
        let h = match prev {
            Prev::Zero => None,
            Prev::Output(h) => Some(h),
            Prev::Unknown => Some(g.cell_h(state)?),
        };
        let gates = match h {
            None => xw,
            Some(h) => {
                let u = g.param(&unit.u);
                let hu = g.linear(u, h)?;
                g.add(xw, hu)?
            }
        };
        let Some(p) = unit.active_dropout(g) else {
            return g.lstm_cell(gates, state);
        };
        // The Tree-LSTM cells drop the candidate in their kernel: an LSTM
        // step is a node whose second child has zero memory (its forget
        // gate is then irrelevant), a first step from zero a leaf.
        let hid = unit.hidden();
        let ou = g.slice(gates, 2 * hid, 4 * hid)?;
        if h.is_none() {
            let i = g.slice(gates, 0, hid)?;
            let iou = g.concat(&[i, ou])?;
            return g.tree_lstm_leaf_rd(iou, p);
        }
        let iof = g.slice(gates, 0, 2 * hid)?;
        let none = zeros(g, hid, "Lstm recurrent dropout")?;
        let no_child = zeros(g, 2 * hid, "Lstm recurrent dropout")?;
        let gates = g.concat(&[iof, none, ou])?;
        g.tree_lstm_node_rd(gates, state, no_child, p)
    }
}

impl Cell for GruCell {
    const NAME: &'static str = "Gru";
    const GATES: usize = 3;
    fn state_width(h: usize) -> usize {
        h
    }
    fn output(_: &mut Graph, state: Expr) -> Result<Expr> {
        Ok(state)
    }
    const U_BIAS: bool = true;
    fn step(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr, prev: Prev) -> Result<Expr> {
        let b_u = match unit.b_u {
            Some(b) => g.param(&b),
            None => return Err(GraphError::Params("a GRU unit without b_u".into())),
        };
        // U 0 + b_u is b_u.
        let hu = match prev {
            Prev::Zero => b_u,
            _ => {
                let u = g.param(&unit.u);
                g.affine(b_u, &[(u, state)])?
            }
        };
        match unit.active_dropout(g) {
            None => g.gru_cell(xw, hu, state),
            Some(p) => gru_dropped(g, unit.hidden(), xw, hu, state, p),
        }
    }
}

impl Cell for RnnCell {
    const NAME: &'static str = "Rnn";
    const GATES: usize = 1;
    fn state_width(h: usize) -> usize {
        h
    }
    fn output(_: &mut Graph, state: Expr) -> Result<Expr> {
        Ok(state)
    }
    fn step(g: &mut Graph, unit: &Unit, xw: Expr, state: Expr, prev: Prev) -> Result<Expr> {
        let pre = match prev {
            Prev::Zero => xw,
            _ => {
                let h = match unit.active_dropout(g) {
                    Some(p) => g.dropout(state, p)?,
                    None => state,
                };
                let u = g.param(&unit.u);
                let hu = g.linear(u, h)?;
                g.add(xw, hu)?
            }
        };
        g.tanh(pre)
    }
}

/// A GRU step with its candidate dropped, `h = (1 - z) d(n) + z h_prev`,
/// the fused cell's equations written with graph ops (the cell has no
/// dropout of its own).
fn gru_dropped(g: &mut Graph, h: usize, xw: Expr, hu: Expr, h_prev: Expr, p: f32) -> Result<Expr> {
    let pre = g.add(xw, hu)?;
    let rz = g.slice(pre, 0, 2 * h)?;
    let rz = g.sigmoid(rz)?;
    let r = g.slice(rz, 0, h)?;
    let z = g.slice(rz, h, 2 * h)?;
    let xn = g.slice(xw, 2 * h, 3 * h)?;
    let hn = g.slice(hu, 2 * h, 3 * h)?;
    let rhn = g.cmult(r, hn)?;
    let n = g.add(xn, rhn)?;
    let n = g.tanh(n)?;
    let n = g.dropout(n, p)?;
    // (1 - z) n + z h_prev = n + z (h_prev - n): no constant 1 needed.
    let diff = g.sub(h_prev, n)?;
    let zd = g.cmult(z, diff)?;
    g.add(n, zd)
}

/// A zero vector `[n]` on the graph.
fn zeros(g: &mut Graph, n: usize, what: &str) -> Result<Expr> {
    let t = Tensor::zeros([n], DType::F32, Device::Cpu).map_err(|source| GraphError::Tensor {
        context: what.to_string(),
        source: Box::new(source),
    })?;
    Ok(g.input(t))
}

/// The shape of a recurrent layer.
///
/// ```
/// use sheaf_autodiff::ParamStore;
/// use sheaf_nn::prelude::*;
///
/// let mut store = ParamStore::new();
/// let cfg = RecurrentConfig {
///     layers: 2,
///     bidirectional: true,
///     output_dropout: 0.3,
///     ..RecurrentConfig::new(16)
/// };
/// let enc = Lstm::new(&mut Scope::new(&mut store, 1).sub("enc")?, 8, cfg)?;
/// assert_eq!(enc.output_width(), 32);
/// // The second layer reads both directions of the first.
/// assert_eq!(store.get("enc.l1.fwd.w").unwrap().shape().dims(), &[64, 32]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecurrentConfig {
    /// Hidden size `H` (per direction).
    pub hidden: usize,
    /// Stacked layers (the first reads the input, each next one the
    /// outputs of the one below).
    pub layers: usize,
    /// Also run each layer from the last position to the first and
    /// concatenate both directions' outputs (`[2H]` per position).
    pub bidirectional: bool,
    /// Dropout rate on the inputs of the first layer (training mode).
    pub input_dropout: f32,
    /// Dropout rate on each layer's outputs: between layers, and on the
    /// top layer's outputs that `transduce` returns (`step` leaves the top
    /// output, read with `output`, to the caller).
    pub output_dropout: f32,
    /// Recurrent dropout rate inside every step (training mode): what a
    /// step adds to the memory is dropped, Semeniuta et al. (2016); see
    /// the module docs for each cell.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore};
    /// use sheaf_nn::{Gru, RecurrentConfig, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig { recurrent_dropout: 0.25, ..RecurrentConfig::new(4) };
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1).sub("gru")?, 3, cfg)?;
    /// let count = |train: bool| -> Result<usize, sheaf_autodiff::GraphError> {
    ///     let mut g = Graph::new();
    ///     g.set_train(train);
    ///     let xs: Vec<_> = (0..3)
    ///         .map(|_| g.input(Tensor::from_vec(vec![1.0f32; 3], [3]).unwrap()))
    ///         .collect();
    ///     gru.transduce(&mut g, &xs)?;
    ///     Ok((0..g.len())
    ///         .filter(|&i| g.op_name(sheaf_autodiff::NodeId::from_index(i)) == "dropout")
    ///         .count())
    /// };
    /// // One mask per step in training, none in evaluation.
    /// assert_eq!((count(true)?, count(false)?), (3, 0));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub recurrent_dropout: f32,
}

impl RecurrentConfig {
    /// One unidirectional layer of `hidden` units, no dropout.
    ///
    /// ```
    /// use sheaf_nn::RecurrentConfig;
    ///
    /// let cfg = RecurrentConfig::new(32);
    /// assert_eq!((cfg.hidden, cfg.layers, cfg.bidirectional), (32, 1, false));
    /// assert_eq!([cfg.input_dropout, cfg.output_dropout, cfg.recurrent_dropout], [0.0; 3]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn new(hidden: usize) -> RecurrentConfig {
        RecurrentConfig {
            hidden,
            layers: 1,
            bidirectional: false,
            input_dropout: 0.0,
            output_dropout: 0.0,
            recurrent_dropout: 0.0,
        }
    }
}

/// One direction of one layer: its parameters.
///
/// ```
/// use sheaf_autodiff::ParamStore;
/// use sheaf_nn::{Lstm, RecurrentConfig, Scope};
///
/// let mut store = ParamStore::new();
/// let cfg = RecurrentConfig { bidirectional: true, ..RecurrentConfig::new(4) };
/// let lstm = Lstm::new(&mut Scope::new(&mut store, 1).sub("lstm")?, 3, cfg)?;
/// let bwd = &lstm.units()[0][1];
/// assert_eq!(store.name(bwd.u().id())?, "lstm.l0.bwd.u");
/// assert_eq!(bwd.hidden(), 4);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Unit {
    w: Param,
    u: Param,
    b: Param,
    b_u: Option<Param>,
    inp: usize,
    recurrent_dropout: f32,
}

impl Unit {
    fn new<C: Cell>(scope: &mut Scope<'_>, inp: usize, h: usize, rd: f32) -> Result<Unit> {
        let rows = C::GATES * h;
        Ok(Unit {
            w: scope.matrix("w", rows, inp)?,
            u: scope.matrix("u", rows, h)?,
            b: scope.bias("b", rows)?,
            b_u: C::U_BIAS.then(|| scope.bias("b_u", rows)).transpose()?,
            inp,
            recurrent_dropout: rd,
        })
    }

    /// The input weight `w` `[G H, in]`.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Lstm, RecurrentConfig, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig::new(4);
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1).sub("lstm")?, 3, cfg)?;
    /// let w = lstm.units()[0][0].w();
    /// assert_eq!(w.shape().dims(), &[16, 3]);
    /// assert_eq!(store.name(w.id())?, "lstm.l0.fwd.w");
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn w(&self) -> Param {
        self.w
    }

    /// The recurrent weight `u` `[G H, H]`.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Gru, RecurrentConfig, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1).sub("gru")?, 3, RecurrentConfig::new(4))?;
    /// let u = gru.units()[0][0].u();
    /// assert_eq!(u.shape().dims(), &[12, 4]);
    /// assert_eq!(store.name(u.id())?, "gru.l0.fwd.u");
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn u(&self) -> Param {
        self.u
    }

    /// The bias `b` `[G H]` (added to the input product).
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Lstm, RecurrentConfig, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig::new(4);
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1).sub("lstm")?, 3, cfg)?;
    /// let b = lstm.units()[0][0].b();
    /// assert_eq!(b.shape().dims(), &[16]);
    /// assert_eq!(store.value(&b)?.to_vec::<f32>().unwrap(), vec![0.0; 16]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn b(&self) -> Param {
        self.b
    }

    /// The recurrent product's own bias `b_u` `[G H]` (cells with
    /// [`Cell::U_BIAS`], the GRU).
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Gru, Lstm, RecurrentConfig, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1).sub("gru")?, 3, RecurrentConfig::new(4))?;
    /// assert_eq!(gru.units()[0][0].b_u().unwrap().shape().dims(), &[12]);
    /// let cfg = RecurrentConfig::new(4);
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1).sub("lstm")?, 3, cfg)?;
    /// assert!(lstm.units()[0][0].b_u().is_none());
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn b_u(&self) -> Option<Param> {
        self.b_u
    }

    /// The hidden size `H`.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Rnn, RecurrentConfig, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let rnn = Rnn::new(&mut Scope::new(&mut store, 1), 3, RecurrentConfig::new(7))?;
    /// assert_eq!(rnn.units()[0][0].hidden(), 7);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn hidden(&self) -> usize {
        self.u.shape().dims()[1]
    }

    /// The recurrent dropout rate (0: none).
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Lstm, RecurrentConfig, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let cfg = RecurrentConfig { recurrent_dropout: 0.25, ..RecurrentConfig::new(4) };
    /// let lstm = Lstm::new(&mut Scope::new(&mut store, 1), 3, cfg)?;
    /// assert_eq!(lstm.units()[0][0].recurrent_dropout(), 0.25);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn recurrent_dropout(&self) -> f32 {
        self.recurrent_dropout
    }

    /// The rate a step applies: the unit's, in training mode only.
    fn active_dropout(&self, g: &Graph) -> Option<f32> {
        (self.recurrent_dropout > 0.0 && g.is_train()).then_some(self.recurrent_dropout)
    }

    /// `w`, `u`, `b` (and `b_u` where the cell has one).
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Gru, RecurrentConfig, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1).sub("gru")?, 3, RecurrentConfig::new(4))?;
    /// let names: Vec<_> = gru.units()[0][0]
    ///     .params()
    ///     .iter()
    ///     .map(|p| store.name(p.id()).map(str::to_string))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(names, ["gru.l0.fwd.w", "gru.l0.fwd.u", "gru.l0.fwd.b", "gru.l0.fwd.b_u"]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn params(&self) -> Vec<Param> {
        [self.w, self.u, self.b]
            .into_iter()
            .chain(self.b_u)
            .collect()
    }

    /// `W x + b`.
    fn input_part(&self, g: &mut Graph, x: Expr) -> Result<Expr> {
        let (w, b) = (g.param(&self.w), g.param(&self.b));
        g.affine(b, &[(w, x)])
    }
}

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
    path: String,
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

    fn dirs(&self) -> usize {
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
                let xw: Vec<Expr> = seq
                    .iter()
                    .map(|&x| unit.input_part(g, x))
                    .collect::<Result<_>>()?;
                let mut state = init.states[l * dirs + d];
                let mut prev = init.prev(l * dirs + d);
                let mut h = vec![None; seq.len()];
                let order: Box<dyn Iterator<Item = usize>> = match d {
                    0 => Box::new(0..seq.len()),
                    _ => Box::new((0..seq.len()).rev()),
                };
                for t in order {
                    state = self.run_step(g, (l, d), xw[t], state, prev)?;
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

    fn drop(&self, g: &mut Graph, x: Expr, p: f32) -> Result<Expr> {
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
