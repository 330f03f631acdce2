//! A recurrent layer's shape ([`RecurrentConfig`]) and the parameters of
//! one of its layers and directions ([`Unit`]).

use sheaf_autodiff::{Expr, Graph, Param, Result};

use crate::cells::Cell;
use crate::scope::Scope;

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
    pub(crate) inp: usize,
    recurrent_dropout: f32,
}

impl Unit {
    pub(crate) fn new<C: Cell>(
        scope: &mut Scope<'_>,
        inp: usize,
        h: usize,
        rd: f32,
    ) -> Result<Unit> {
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
    pub(crate) fn active_dropout(&self, g: &Graph) -> Option<f32> {
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
    pub(crate) fn input_part(&self, g: &mut Graph, x: Expr) -> Result<Expr> {
        let (w, b) = (g.param(&self.w), g.param(&self.b));
        g.affine(b, &[(w, x)])
    }
}
