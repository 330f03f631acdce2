//! Appendix A of the TensorFlow Fold paper: feed-forward attention
//! (Raffel & Ellis 2016, "Feed-Forward Networks with Attention Can Solve
//! Some Long-Term Memory Problems"), written with blocks
//! ([`Attention::blocks`]) and directly on the graph
//! ([`Attention::direct`]); both give the same numbers (tested).
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

    // ---- directly on the graph -------------------------------------------

    /// The prediction `[1]` and the squared error `[1]`, node by node.
    pub fn direct(&self, g: &mut Graph, x: &Addition) -> Result<(Expr, Expr), GraphError> {
        let dense = |g: &mut Graph, layer: &FC, x: Expr| {
            let (w, b) = layer.params();
            let (w, b) = (g.param(&w), g.param(&b));
            g.affine(b, &[(w, x)])
        };
        let mut hs = Vec::with_capacity(x.steps.len());
        for step in &x.steps {
            let v = g.input(sheaf_tensor::Tensor::from_slice(step, [2]).map_err(tensor_err)?);
            let y = dense(g, &self.f, v)?;
            hs.push(g.relu(y)?);
        }
        let c = attend(g, &hs, |g, h| {
            let e = dense(g, &self.a, h)?;
            g.tanh(e)
        })?;
        let hidden = dense(g, &self.g, c)?;
        let hidden = g.relu(hidden)?;
        let y = dense(g, &self.o, hidden)?;
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
