//! Appendix A of the TensorFlow Fold paper: feed-forward attention
//! (Raffel & Ellis 2016, "Feed-Forward Networks with Attention Can Solve
//! Some Long-Term Memory Problems"), written with blocks
//! ([`Attention::blocks`]) and directly on the graph with `sheaf-nn` layers
//! ([`AttentionNn::direct`]); both give the same numbers (tested).
//!
//! Per step `h_t = relu(W_f x_t + b_f)`, a score `e_t = tanh(w_a h_t + b_a)`,
//! weights `α = softmax(e)`, the context `c = Σ_t α_t h_t`, then
//! `y = w_o relu(W_g c + b_g) + b_o`. Trained on the paper's addition
//! problem: a sequence of `(value, marker)` pairs, values uniform in
//! `[0, 1]`, exactly two markers set; the target is the sum of the two
//! marked values.

use rand::{Rng, RngExt};
use sheaf_autodiff::{Expr, Graph, GraphError, ParamStore};
use sheaf_blocks::{
    field, Activation, Block, BlockError, Function, Map, Record, Scalar, Tensor, FC,
};
use sheaf_nn::{Linear, Mlp, Scope};

/// One sequence of the addition problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Addition {
    /// `[value, marker]` per step.
    pub steps: Vec<Vec<f32>>,
    /// The sum of the two marked values.
    pub target: f32,
}

impl Addition {
    /// A random sequence of `len >= 2` steps: the markers fall one in each
    /// half, as in the paper.
    pub fn random<R: Rng + ?Sized>(len: usize, rng: &mut R) -> Addition {
        let len = len.max(2);
        let first = rng.random_range(0..len / 2);
        let second = rng.random_range(len / 2..len);
        let mut target = 0.0;
        let steps = (0..len)
            .map(|t| {
                let v: f32 = rng.random();
                let marked = t == first || t == second;
                if marked {
                    target += v;
                }
                vec![v, if marked { 1.0 } else { 0.0 }]
            })
            .collect();
        Addition { steps, target }
    }

    /// `n` sequences of lengths uniform in `min_len..=max_len`.
    pub fn dataset<R: Rng + ?Sized>(
        n: usize,
        min_len: usize,
        max_len: usize,
        rng: &mut R,
    ) -> Vec<Addition> {
        (0..n)
            .map(|_| {
                let len = rng.random_range(min_len..=max_len.max(min_len));
                Addition::random(len, rng)
            })
            .collect()
    }
}

/// The layers of the attention model.
#[derive(Debug, Clone)]
pub struct Attention {
    f: FC,
    a: FC,
    g: FC,
    o: FC,
}

impl Attention {
    /// A model with `hidden` units in `f` and `g`.
    pub fn new<R: Rng + ?Sized>(
        store: &mut ParamStore,
        hidden: usize,
        rng: &mut R,
    ) -> Result<Self, BlockError> {
        Ok(Attention {
            f: FC::new(store, "f", 2, hidden, Activation::Relu, rng)?,
            a: FC::new(store, "a", hidden, 1, Activation::Tanh, rng)?,
            g: FC::new(store, "g", hidden, hidden, Activation::Relu, rng)?,
            o: FC::new(store, "o", hidden, 1, Activation::Identity, rng)?,
        })
    }

    /// Every parameter.
    pub fn params(&self) -> Vec<sheaf_autodiff::Param> {
        [&self.f, &self.a, &self.g, &self.o]
            .iter()
            .flat_map(|l| {
                let (w, b) = l.params();
                [w, b]
            })
            .collect()
    }

    // ---- with blocks -----------------------------------------------------

    /// The prediction for one sequence, and its squared error as output.
    pub fn blocks(&self) -> impl Block<In = Addition, Out = Expr> {
        let h = Map::new(Tensor::new([2]) >> self.f.clone());
        let score = self.a.clone();
        let attend = Function::new("attend", move |g: &mut Graph, hs: Vec<Expr>| {
            attend(g, &hs, |g, h| score.apply(g, h))
        });
        let predict = h >> attend >> self.g.clone() >> self.o.clone();
        let loss = Function::new("loss", |g: &mut Graph, (y, t): (Expr, Expr)| {
            g.squared_distance(y, t)
        });
        Record::new((
            field("steps", |a: &Addition| &a.steps, predict),
            field("target", |a: &Addition| &a.target, Scalar),
        )) >> loss
    }
}

/// The same model from `sheaf-nn` layers, written directly on the graph:
/// `Linear` layers `f` and `a`, and the head `relu(W_g c + b_g)` then
/// `w_o · + b_o` as a two-layer `Mlp`.
///
/// `sheaf_nn::Attention::feed_forward` scores `v · tanh(W h_t + b)`, with
/// a learned `v`; this model's score has none (`tanh(w_a h_t + b_a)`), so
/// the pooling is written out over `a`'s scores, as in the blocks form.
#[derive(Debug, Clone)]
pub struct AttentionNn {
    f: Linear,
    a: Linear,
    head: Mlp,
}

impl AttentionNn {
    /// A model with `hidden` units in `f` and the head, initialised from
    /// `seed`: parameters `f.{w,b}`, `a.{w,b}`, `head.l{0,1}.{w,b}`.
    pub fn new(store: &mut ParamStore, hidden: usize, seed: u64) -> Result<Self, GraphError> {
        let mut root = Scope::new(store, seed);
        let relu = sheaf_nn::Activation::Relu;
        Ok(AttentionNn {
            f: Linear::new(&mut root.sub("f")?, 2, hidden, true)?,
            a: Linear::new(&mut root.sub("a")?, hidden, 1, true)?,
            head: Mlp::new(&mut root.sub("head")?, &[hidden, hidden, 1], relu, 0.0)?,
        })
    }

    /// Every parameter, in the order of [`Attention::params`] (`f`, `a`,
    /// then the head's layers for `g` and `o`, weight before bias).
    pub fn params(&self) -> Vec<sheaf_autodiff::Param> {
        [&self.f, &self.a]
            .into_iter()
            .chain(self.head.layers())
            .flat_map(|l| [l.weight()].into_iter().chain(l.bias()))
            .collect()
    }

    /// Copies every value of the blocks model `m` (in `from`) into this
    /// model (in `to`); the layouts are the same. Errors: a parameter
    /// missing from its store, or of another shape.
    pub fn copy_from(
        &self,
        to: &mut ParamStore,
        m: &Attention,
        from: &ParamStore,
    ) -> Result<(), GraphError> {
        for (mine, theirs) in self.params().iter().zip(m.params()) {
            if mine.shape() != theirs.shape() {
                return Err(GraphError::Params(format!(
                    "AttentionNn::copy_from: shapes {} and {} differ",
                    mine.shape(),
                    theirs.shape()
                )));
            }
            // A copy of its own: a shared buffer would be copied on every
            // update of either model.
            let v = from.value(&theirs)?;
            let v = v.deep_clone().map_err(|e| GraphError::Tensor {
                context: "AttentionNn::copy_from".into(),
                source: Box::new(e),
            })?;
            *to.value_mut(mine)? = v;
        }
        Ok(())
    }

    /// The prediction `[1]` and the squared error `[1]`, node by node.
    pub fn direct(&self, g: &mut Graph, x: &Addition) -> Result<(Expr, Expr), GraphError> {
        let hs = x
            .steps
            .iter()
            .map(|step| {
                let v = g.input(sheaf_tensor::Tensor::from_slice(step, [2]).map_err(tensor_err)?);
                let y = self.f.forward(g, v)?;
                g.relu(y)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let c = attend(g, &hs, |g, h| {
            let e = self.a.forward(g, h)?;
            g.tanh(e)
        })?;
        let y = self.head.forward(g, c)?;
        let t = g.input(sheaf_tensor::Tensor::from_slice(&[x.target], [1]).map_err(tensor_err)?);
        Ok((y, g.squared_distance(y, t)?))
    }
}

fn tensor_err(e: sheaf_tensor::TensorError) -> GraphError {
    GraphError::Tensor {
        context: "addition problem input".into(),
        source: Box::new(e),
    }
}

/// `Σ_t softmax(e)_t h_t` with `e_t = score(h_t)`.
fn attend(
    g: &mut Graph,
    hs: &[Expr],
    score: impl Fn(&mut Graph, Expr) -> Result<Expr, GraphError>,
) -> Result<Expr, GraphError> {
    let es = hs
        .iter()
        .map(|&h| score(g, h))
        .collect::<Result<Vec<_>, _>>()?;
    let e = g.concat(&es)?;
    let alpha = g.softmax(e)?;
    let mut terms = Vec::with_capacity(hs.len());
    for (t, &h) in hs.iter().enumerate() {
        let a = g.pick(alpha, t as u32)?;
        terms.push(g.scale_by(h, a)?);
    }
    g.sum(&terms)
}
