//! Feed-forward layers: [`Linear`], [`Embedding`], [`Mlp`].

use sheaf_autodiff::{Expr, Graph, GraphError, Param, Result};

use crate::scope::{check_sizes, layer_path, Scope};

/// `[rows, cols]` of a parameter that must be a matrix with both sizes
/// positive; the error names the layer, the role and the shape.
fn matrix_dims(layer: &str, role: &str, p: &Param) -> Result<(usize, usize)> {
    match p.shape().dims() {
        &[r, c] if r > 0 && c > 0 => Ok((r, c)),
        _ => Err(GraphError::Params(format!(
            "{layer}: the {role} has shape {}, it must be a matrix with both sizes positive",
            p.shape()
        ))),
    }
}

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
    /// Parameters `w` (and `b` when `bias`) in `scope`. Errors: a zero
    /// size (naming the layer and both sizes).
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Linear, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let e = Linear::new(&mut root.sub("out")?, 0, 2, true).unwrap_err();
    /// assert!(e.to_string().contains("Linear \"out\": input width 0"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn new(scope: &mut Scope<'_>, inp: usize, out: usize, bias: bool) -> Result<Linear> {
        let path = layer_path("Linear", scope);
        check_sizes(&path, &[("input width", inp), ("output width", out)])?;
        let w = scope.matrix("w", out, inp)?;
        let b = bias.then(|| scope.bias("b", out)).transpose()?;
        Ok(Linear { w, b })
    }

    /// A layer over existing parameters: `w` `[out, in]` and, if given,
    /// `b` `[out]` (parameters made elsewhere, e.g. with their own
    /// generator or names). Errors: a weight that is not a matrix with
    /// both sizes positive, a bias of another shape, naming the shapes.
    ///
    /// ```
    /// use rand::SeedableRng;
    /// use sheaf_autodiff::{Init, ParamStore};
    /// use sheaf_nn::Linear;
    ///
    /// let mut store = ParamStore::new();
    /// let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    /// let w = store.add_param("fc.w", [2, 3], Init::GlorotUniform, &mut rng)?;
    /// let b = store.add_param("fc.b", [2], Init::Zeros, &mut rng)?;
    /// let fc = Linear::from_params(w, Some(b))?;
    /// assert_eq!((fc.inp(), fc.out()), (3, 2));
    /// let e = Linear::from_params(w, Some(w)).unwrap_err();
    /// assert!(e.to_string().contains("bias has shape [2, 3]"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn from_params(w: Param, b: Option<Param>) -> Result<Linear> {
        let (out, _) = matrix_dims("Linear", "weight", &w)?;
        if let Some(b) = b {
            if b.shape().dims() != [out] {
                return Err(GraphError::Params(format!(
                    "Linear: the bias has shape {}, the weight {} needs [{out}]",
                    b.shape(),
                    w.shape()
                )));
            }
        }
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
    /// Errors: a zero size (naming the layer and both sizes).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{Embedding, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let emb = Embedding::new(&mut Scope::new(&mut store, 1).sub("emb")?, 10, 4)?;
    /// let mut g = Graph::new();
    /// let x = emb.forward(&mut g, 7)?;
    /// assert_eq!(Sequential::new().forward(&mut g, &store, x)?.dims(), &[4]);
    /// let e = Embedding::new(&mut Scope::new(&mut store, 1).sub("none")?, 10, 0).unwrap_err();
    /// assert!(e.to_string().contains("Embedding \"none\": vocabulary 10, dim 0"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn new(scope: &mut Scope<'_>, vocab: usize, dim: usize) -> Result<Embedding> {
        let path = layer_path("Embedding", scope);
        check_sizes(&path, &[("vocabulary", vocab), ("dim", dim)])?;
        Ok(Embedding {
            table: scope.table("table", vocab, dim)?,
        })
    }

    /// A layer over an existing table `[vocab, dim]`. Errors: a table
    /// that is not a matrix with both sizes positive, naming its shape.
    ///
    /// ```
    /// use rand::SeedableRng;
    /// use sheaf_autodiff::{Init, ParamStore};
    /// use sheaf_nn::Embedding;
    ///
    /// let mut store = ParamStore::new();
    /// let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    /// let table = store.add_lookup("words", 100, 8, Init::Zeros, &mut rng)?;
    /// let emb = Embedding::from_param(table)?;
    /// assert_eq!((emb.vocab(), emb.dim()), (100, 8));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn from_param(table: Param) -> Result<Embedding> {
        matrix_dims("Embedding", "table", &table)?;
        Ok(Embedding { table })
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
    /// `sizes[last]`. Errors: fewer than two sizes, a zero size, `dropout`
    /// outside `[0, 1)`.
    pub fn new(
        scope: &mut Scope<'_>,
        sizes: &[usize],
        activation: Activation,
        dropout: f32,
    ) -> Result<Mlp> {
        let path = layer_path("Mlp", scope);
        if sizes.len() < 2 {
            return Err(GraphError::Params(format!(
                "{path}: needs an input and an output size, got {sizes:?}"
            )));
        }
        if sizes.contains(&0) {
            return Err(GraphError::Params(format!(
                "{path}: sizes {sizes:?} must all be positive"
            )));
        }
        if !(0.0..1.0).contains(&dropout) {
            return Err(GraphError::Params(format!(
                "{path}: dropout must lie in [0, 1), it is {dropout}"
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

    /// The output for `x` `[sizes[0]]`. Dropout nodes only in training
    /// mode ([`Graph::is_train`]): in evaluation they would be identities.
    pub fn forward(&self, g: &mut Graph, x: Expr) -> Result<Expr> {
        let mut h = x;
        let last = self.layers.len() - 1;
        let drop = self.dropout > 0.0 && g.is_train();
        for (i, layer) in self.layers.iter().enumerate() {
            if i > 0 && drop {
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
