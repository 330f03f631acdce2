//! The layers of the Fold paper's examples: [`Embedding`] (a lookup
//! table), [`FC`] (a fully connected layer), and [`Metric`] (records a
//! value, e.g. a loss, per input). `Embedding` and `FC` are blocks over
//! sheaf-nn's [`sheaf_nn::Embedding`] and [`sheaf_nn::Linear`]: the same
//! graph ops, with Fold's names (`name`, `name.w`, `name.b`) and
//! parameters drawn from the caller's generator.

use std::borrow::Cow;

use rand::Rng;
use sheaf_autodiff::{Expr, Graph, GraphError, Init, Param, ParamStore};
use sheaf_nn::Linear;

use crate::block::{impl_shr, Check, Ctx};
use crate::error::{At, BlockError, Result};
use crate::{Block, Ty};

/// Row `id` of a lookup table `[vocab, dim]` for a host id; its gradient
/// touches only the rows looked up (sparse optimizers update only those).
/// Clones share the table.
#[derive(Debug, Clone)]
pub struct Embedding {
    name: String,
    table: Param,
    /// The layer, or why `table` cannot be one (reported at build time).
    layer: std::result::Result<sheaf_nn::Embedding, GraphError>,
}

impl Embedding {
    /// A new table `name` of `vocab` rows of `dim`, drawn from `init` with
    /// `rng` (a generator of [`sheaf_autodiff::rand`], or use
    /// [`Embedding::new_seeded`]). Errors: a zero size (naming the block),
    /// a name taken.
    pub fn new<R: Rng + ?Sized>(
        store: &mut ParamStore,
        name: &str,
        vocab: usize,
        dim: usize,
        init: Init,
        rng: &mut R,
    ) -> Result<Self> {
        let sizes = [("vocabulary", vocab), ("dim", dim)];
        positive(&sizes).map_err(|e| e.within(format!("Embedding({name})")))?;
        let table = store.add_lookup(name, vocab, dim, init, rng)?;
        Ok(Self::from_param(name, table))
    }

    /// [`Embedding::new`] with a generator seeded by `seed` (the same seed,
    /// the same table).
    pub fn new_seeded(
        store: &mut ParamStore,
        name: &str,
        vocab: usize,
        dim: usize,
        init: Init,
        seed: u64,
    ) -> Result<Self> {
        let sizes = [("vocabulary", vocab), ("dim", dim)];
        positive(&sizes).map_err(|e| e.within(format!("Embedding({name})")))?;
        let table = store.add_lookup_seeded(name, vocab, dim, init, seed)?;
        Ok(Self::from_param(name, table))
    }

    /// A block over an existing table `[vocab, dim]` (a table of another
    /// shape is an error when the block is built into a [`crate::Compiled`]).
    pub fn from_param(name: &str, table: Param) -> Self {
        Embedding {
            name: name.to_owned(),
            table,
            layer: sheaf_nn::Embedding::from_param(table),
        }
    }

    /// The table.
    pub fn table(&self) -> Param {
        self.table
    }
}

impl Block for Embedding {
    type In = u32;
    type Out = Expr;
    fn name(&self) -> Cow<'static, str> {
        format!("Embedding({})", self.name).into()
    }
    fn check(&self, _cx: &mut Check, _input: &Ty) -> Result<Ty> {
        match &self.layer {
            Ok(layer) => Ok(Ty::tensor([layer.dim()])),
            Err(e) => Err(BlockError::from(e.clone()).within(self.name())),
        }
    }
    fn eval(&self, cx: &mut Ctx<'_>, id: &u32) -> Result<Expr> {
        match &self.layer {
            Ok(layer) => layer.forward(cx.graph, *id).at(|| self.name()),
            Err(e) => Err(BlockError::from(e.clone()).within(self.name())),
        }
    }
}

/// Refuses zero sizes, before any parameter is made.
fn positive(sizes: &[(&str, usize)]) -> Result<()> {
    if sizes.iter().all(|&(_, n)| n > 0) {
        return Ok(());
    }
    let list: Vec<String> = sizes
        .iter()
        .map(|(what, n)| format!("{what} {n}"))
        .collect();
    Err(BlockError::usage(format!(
        "sizes must be positive: {}",
        list.join(", ")
    )))
}

/// The nonlinearity of an [`FC`] layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// None: an affine layer.
    Identity,
    /// `tanh`.
    Tanh,
    /// The logistic sigmoid.
    Sigmoid,
    /// `max(0, x)`.
    #[default]
    Relu,
}

impl Activation {
    /// The same nonlinearity in sheaf-nn.
    fn nn(self) -> sheaf_nn::Activation {
        match self {
            Activation::Identity => sheaf_nn::Activation::Identity,
            Activation::Tanh => sheaf_nn::Activation::Tanh,
            Activation::Sigmoid => sheaf_nn::Activation::Sigmoid,
            Activation::Relu => sheaf_nn::Activation::Relu,
        }
    }
}

/// A fully connected layer `act(W x + b)` on vectors `[in]`, `W` Glorot
/// uniform, `b` zero: a [`sheaf_nn::Linear`] and the activation. Clones
/// share the parameters.
#[derive(Debug, Clone)]
pub struct FC {
    name: String,
    layer: Linear,
    b: Param,
    act: Activation,
}

impl FC {
    /// A new layer `name` (parameters `name.w`, `name.b`) from `[input]` to
    /// `[output]`, its weight drawn with `rng` (a generator of
    /// [`sheaf_autodiff::rand`], or use [`FC::new_seeded`]). Errors: a zero
    /// size (naming the layer), a name taken.
    pub fn new<R: Rng + ?Sized>(
        store: &mut ParamStore,
        name: &str,
        input: usize,
        output: usize,
        act: Activation,
        rng: &mut R,
    ) -> Result<Self> {
        let sizes = [("input", input), ("output", output)];
        positive(&sizes).map_err(|e| e.within(format!("FC({name})")))?;
        let w = store.add_param(
            &format!("{name}.w"),
            [output, input],
            Init::GlorotUniform,
            rng,
        )?;
        let b = store.add_param(&format!("{name}.b"), [output], Init::Zeros, rng)?;
        Ok(FC {
            name: name.to_owned(),
            layer: Linear::from_params(w, Some(b))?,
            b,
            act,
        })
    }

    /// [`FC::new`] with a generator seeded by `seed` (the same seed, the
    /// same weights).
    pub fn new_seeded(
        store: &mut ParamStore,
        name: &str,
        input: usize,
        output: usize,
        act: Activation,
        seed: u64,
    ) -> Result<Self> {
        use sheaf_autodiff::rand::{rngs::StdRng, SeedableRng};
        Self::new(
            store,
            name,
            input,
            output,
            act,
            &mut StdRng::seed_from_u64(seed),
        )
    }

    /// The weight `[output, input]` and bias `[output]`.
    pub fn params(&self) -> (Param, Param) {
        (self.layer.weight(), self.b)
    }

    /// The layer on `x` directly (inside a `Function`'s closure).
    pub fn apply(&self, g: &mut Graph, x: Expr) -> std::result::Result<Expr, GraphError> {
        self.layer.forward_act(g, x, self.act.nn())
    }
}

impl Block for FC {
    type In = Expr;
    type Out = Expr;
    fn name(&self) -> Cow<'static, str> {
        format!("FC({})", self.name).into()
    }
    fn check(&self, _cx: &mut Check, input: &Ty) -> Result<Ty> {
        let (out, inp) = (self.layer.out(), self.layer.inp());
        if input.shape().map(|s| s.dims().to_vec()) != Some(vec![inp]) {
            return Err(BlockError::ty(format!("a vector [{inp}]"), input).within(self.name()));
        }
        Ok(Ty::tensor([out]))
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &Expr) -> Result<Expr> {
        self.apply(cx.graph, *x).at(|| self.name())
    }
}

/// Records its input under a name, per input of the batch, and yields
/// nothing (Fold's `Metric`): losses to train on, predictions to read.
/// See [`crate::Compiled::metric`].
#[derive(Debug, Clone)]
pub struct Metric {
    name: String,
}

impl Metric {
    /// Records under `name`.
    pub fn new(name: &str) -> Self {
        Metric {
            name: name.to_owned(),
        }
    }
}

impl Block for Metric {
    type In = Expr;
    type Out = ();
    fn name(&self) -> Cow<'static, str> {
        format!("Metric({})", self.name).into()
    }
    fn check(&self, _cx: &mut Check, input: &Ty) -> Result<Ty> {
        match input {
            Ty::Tensor(_) => Ok(Ty::Void),
            other => Err(BlockError::ty("a tensor", other).within(self.name())),
        }
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &Expr) -> Result<()> {
        let instance = cx.instance;
        cx.metrics.record(&self.name, instance, *x);
        Ok(())
    }
}

impl_shr!([] Embedding, [] FC, [] Metric);
