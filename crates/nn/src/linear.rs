//! Feed-forward layers: [`Linear`], [`Embedding`], [`Mlp`].

use sheaf_autodiff::{Expr, Graph, GraphError, Param, Result};

use crate::scope::Scope;

/// `y = W x + b` (`W` `[out, in]`, `b` `[out]`, optional): one
/// [`Graph::affine`] node, so every call on a graph batches into one
/// product.
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore, Sequential};
/// use sheaf_nn::{Linear, Scope};
/// use sheaf_tensor::Tensor;
///
/// let mut store = ParamStore::new();
/// let fc = Linear::new(&mut Scope::new(&mut store, 1).sub("fc")?, 3, 2, true)?;
/// let mut g = Graph::new();
/// let x = g.input(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap());
/// let y = fc.forward(&mut g, x)?;
/// assert_eq!(Sequential::new().forward(&mut g, &store, y)?.dims(), &[2]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Linear {
    w: Param,
    b: Option<Param>,
}

impl Linear {
    /// Parameters `w` (and `b` when `bias`) in `scope`.
    pub fn new(scope: &mut Scope<'_>, inp: usize, out: usize, bias: bool) -> Result<Linear> {
        let w = scope.matrix("w", out, inp)?;
        let b = bias.then(|| scope.bias("b", out)).transpose()?;
        Ok(Linear { w, b })
    }

    /// The weight `[out, in]`.
    pub fn weight(&self) -> Param {
        self.w
    }

    /// The bias `[out]`, if any.
    pub fn bias(&self) -> Option<Param> {
        self.b
    }

    /// Input width.
    pub fn inp(&self) -> usize {
        self.w.shape().dims()[1]
    }

    /// Output width.
    pub fn out(&self) -> usize {
        self.w.shape().dims()[0]
    }

    /// `W x + b` for `x` `[in]`.
    pub fn forward(&self, g: &mut Graph, x: Expr) -> Result<Expr> {
        let w = g.param(&self.w);
        match self.b {
            Some(b) => {
                let b = g.param(&b);
                g.affine(b, &[(w, x)])
            }
            None => g.linear(w, x),
        }
    }
}

/// A lookup table `[vocab, dim]` with sparse row gradients: a lazy sparse
/// optimizer updates only the rows a step looked up.
#[derive(Debug, Clone, Copy)]
pub struct Embedding {
    table: Param,
}

impl Embedding {
    /// The table `table` in `scope` (the scope's table initializer).
    pub fn new(scope: &mut Scope<'_>, vocab: usize, dim: usize) -> Result<Embedding> {
        Ok(Embedding {
            table: scope.table("table", vocab, dim)?,
        })
    }

    /// The table parameter.
    pub fn table(&self) -> Param {
        self.table
    }

    /// Rows in the table.
    pub fn vocab(&self) -> usize {
        self.table.shape().dims()[0]
    }

    /// The vector size.
    pub fn dim(&self) -> usize {
        self.table.shape().dims()[1]
    }

    /// Row `id` as `[dim]`. Errors: `id` past the table, naming both.
    pub fn forward(&self, g: &mut Graph, id: u32) -> Result<Expr> {
        let t = g.param(&self.table);
        g.lookup(t, id)
    }
}

/// An elementwise nonlinearity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// `tanh`.
    #[default]
    Tanh,
    /// `max(0, x)`.
    Relu,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// The identity.
    Identity,
}

impl Activation {
    /// `self(x)` on the graph.
    pub fn apply(self, g: &mut Graph, x: Expr) -> Result<Expr> {
        match self {
            Activation::Tanh => g.tanh(x),
            Activation::Relu => g.relu(x),
            Activation::Sigmoid => g.sigmoid(x),
            Activation::Identity => Ok(x),
        }
    }
}

/// A multilayer perceptron: `Linear` layers of the given sizes, the
/// activation after every layer but the last, dropout (rate `dropout`, in
/// training mode) before every layer but the first.
#[derive(Debug, Clone)]
pub struct Mlp {
    layers: Vec<Linear>,
    activation: Activation,
    dropout: f32,
}

impl Mlp {
    /// Layers `l0`, `l1`, ... in `scope`, mapping `sizes[0]` to
    /// `sizes[last]`. Errors: fewer than two sizes; `dropout` outside
    /// `[0, 1)`.
    pub fn new(
        scope: &mut Scope<'_>,
        sizes: &[usize],
        activation: Activation,
        dropout: f32,
    ) -> Result<Mlp> {
        if sizes.len() < 2 {
            return Err(GraphError::Params(format!(
                "an Mlp needs an input and an output size, got {sizes:?}"
            )));
        }
        if !(0.0..1.0).contains(&dropout) {
            return Err(GraphError::Params(format!(
                "Mlp dropout must lie in [0, 1), it is {dropout}"
            )));
        }
        let layers = sizes
            .windows(2)
            .enumerate()
            .map(|(i, w)| Linear::new(&mut scope.sub(&format!("l{i}"))?, w[0], w[1], true))
            .collect::<Result<_>>()?;
        Ok(Mlp {
            layers,
            activation,
            dropout,
        })
    }

    /// The layers.
    pub fn layers(&self) -> &[Linear] {
        &self.layers
    }

    /// The output for `x` `[sizes[0]]`.
    pub fn forward(&self, g: &mut Graph, x: Expr) -> Result<Expr> {
        let mut h = x;
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            if i > 0 && self.dropout > 0.0 {
                h = g.dropout(h, self.dropout)?;
            }
            h = layer.forward(g, h)?;
            if i < last {
                h = self.activation.apply(g, h)?;
            }
        }
        Ok(h)
    }
}
