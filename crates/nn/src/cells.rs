//! The recurrent cells ([`LstmCell`], [`GruCell`], the Elman [`RnnCell`]):
//! what differs between the layers of [`crate::Recurrent`], one step each
//! (equations and weight layout: the `recurrent` module docs).

use sheaf_autodiff::{Expr, Graph, GraphError, Result};
use sheaf_tensor::{DType, Device, Tensor};

use crate::recurrent::Unit;

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
    /// It is zero ([`crate::Recurrent::zero_state`]): the recurrent product
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
                let u = g.param(&unit.u());
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
        let b_u = match unit.b_u() {
            Some(b) => g.param(&b),
            None => return Err(GraphError::Params("a GRU unit without b_u".into())),
        };
        // U 0 + b_u is b_u.
        let hu = match prev {
            Prev::Zero => b_u,
            _ => {
                let u = g.param(&unit.u());
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
                let u = g.param(&unit.u());
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
