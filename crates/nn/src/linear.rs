//! Feed-forward layers: [`Linear`], [`Embedding`], [`Mlp`].

use sheaf_autodiff::{Expr, Graph, GraphError, Param, Result};
use sheaf_tensor::Unary;

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
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Linear, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let fc = Linear::new(&mut Scope::new(&mut store, 1).sub("fc")?, 3, 2, true)?;
    /// assert_eq!(fc.weight().shape().dims(), &[2, 3]);
    /// assert_eq!(store.name(fc.weight().id())?, "fc.w");
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn weight(&self) -> Param {
        self.w
    }

    /// The bias `[out]`, if any.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Linear, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let fc = Linear::new(&mut Scope::new(&mut store, 1).sub("fc")?, 3, 2, true)?;
    /// assert_eq!(store.name(fc.bias().unwrap().id())?, "fc.b");
    /// let proj = Linear::new(&mut Scope::new(&mut store, 1).sub("proj")?, 3, 2, false)?;
    /// assert!(proj.bias().is_none());
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn bias(&self) -> Option<Param> {
        self.b
    }

    /// Input width.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Linear, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let fc = Linear::new(&mut Scope::new(&mut store, 1).sub("fc")?, 3, 2, true)?;
    /// assert_eq!(fc.inp(), 3);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn inp(&self) -> usize {
        self.w.shape().dims()[1]
    }

    /// Output width.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Linear, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let l1 = Linear::new(&mut root.sub("l1")?, 3, 16, true)?;
    /// // The next layer reads what this one writes.
    /// let l2 = Linear::new(&mut root.sub("l2")?, l1.out(), 2, true)?;
    /// assert_eq!((l1.out(), l2.inp()), (16, 16));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn out(&self) -> usize {
        self.w.shape().dims()[0]
    }

    /// `W x + b` for `x` `[in]`.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, Init, ParamStore, Sequential};
    /// use sheaf_nn::{Linear, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let w = root.param("w", [2, 3], Init::Const(1.0))?;
    /// let b = root.param("b", [2], Init::Const(0.5))?;
    /// let fc = Linear::from_params(w, Some(b))?;
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap());
    /// let y = fc.forward(&mut g, x)?;
    /// let y = Sequential::new().forward(&mut g, &store, y)?;
    /// assert_eq!(y.to_vec::<f32>().unwrap(), vec![6.5, 6.5]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
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

    /// `act(self(x))`: with a bias and an activation, ONE node
    /// ([`Graph::affine_act`]: the activation in place on the product);
    /// otherwise [`Linear::forward`] then [`Activation::apply`].
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, Init, ParamStore, Sequential};
    /// use sheaf_nn::{Activation, Linear, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let w = root.param("w", [2, 3], Init::Const(1.0))?;
    /// let b = root.param("b", [2], Init::Const(-6.5))?;
    /// let fc = Linear::from_params(w, Some(b))?;
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![1.0f32, 2.0, 4.0], [3]).unwrap());
    /// let y = fc.forward_act(&mut g, x, Activation::Relu)?;
    /// assert_eq!(g.op_name(y.node()), "affine_relu");
    /// let y = Sequential::new().forward(&mut g, &store, y)?;
    /// assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.5, 0.5]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn forward_act(&self, g: &mut Graph, x: Expr, act: Activation) -> Result<Expr> {
        match (self.b, act.fused()) {
            (Some(b), Some(op)) => {
                let (w, b) = (g.param(&self.w), g.param(&b));
                g.affine_act(op, b, &[(w, x)])
            }
            _ => {
                let y = self.forward(g, x)?;
                act.apply(g, y)
            }
        }
    }
}

/// A lookup table `[vocab, dim]` with sparse row gradients: a lazy sparse
/// optimizer updates only the rows a step looked up.
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore, Sequential};
/// use sheaf_nn::prelude::*;
///
/// let mut store = ParamStore::new();
/// let emb = Embedding::new(&mut Scope::new(&mut store, 1).sub("emb")?, 1000, 16)?;
/// assert!(store.get("emb.table").is_some_and(|t| t.is_table()));
/// let mut g = Graph::new();
/// let xs = [4, 8, 15]
///     .iter()
///     .map(|&w| emb.forward(&mut g, w))
///     .collect::<Result<Vec<_>, _>>()?;
/// let bag = g.sum(&xs)?;
/// assert_eq!(Sequential::new().forward(&mut g, &store, bag)?.dims(), &[16]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
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
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Embedding, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let emb = Embedding::new(&mut Scope::new(&mut store, 1).sub("emb")?, 10, 4)?;
    /// assert!(emb.table().is_table());
    /// assert_eq!(store.name(emb.table().id())?, "emb.table");
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn table(&self) -> Param {
        self.table
    }

    /// Rows in the table.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Embedding, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let emb = Embedding::new(&mut Scope::new(&mut store, 1).sub("emb")?, 10, 4)?;
    /// assert_eq!(emb.vocab(), 10);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn vocab(&self) -> usize {
        self.table.shape().dims()[0]
    }

    /// The vector size.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::{Embedding, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let emb = Embedding::new(&mut Scope::new(&mut store, 1).sub("emb")?, 10, 4)?;
    /// assert_eq!(emb.dim(), 4);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn dim(&self) -> usize {
        self.table.shape().dims()[1]
    }

    /// Row `id` as `[dim]`. Errors: `id` past the table, naming both.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::Embedding;
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let rows = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0], [3, 2]).unwrap();
    /// let emb = Embedding::from_param(store.add_table("t", rows)?)?;
    /// let mut g = Graph::new();
    /// let x = emb.forward(&mut g, 2)?;
    /// let x = Sequential::new().forward(&mut g, &store, x)?;
    /// assert_eq!(x.to_vec::<f32>().unwrap(), vec![4.0, 5.0]);
    /// let e = emb.forward(&mut g, 3).unwrap_err();
    /// assert!(e.to_string().contains("word id 3 is out of range for a table of 3 rows"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn forward(&self, g: &mut Graph, id: u32) -> Result<Expr> {
        let t = g.param(&self.table);
        g.lookup(t, id)
    }
}

/// An elementwise nonlinearity.
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore, Sequential};
/// use sheaf_nn::Activation;
/// use sheaf_tensor::Tensor;
///
/// assert_eq!(Activation::default(), Activation::Tanh);
/// let store = ParamStore::new();
/// let mut g = Graph::new();
/// let x = g.input(Tensor::from_vec(vec![0.0f32], [1]).unwrap());
/// let mut at_zero = Vec::new();
/// for a in [Activation::Tanh, Activation::Relu, Activation::Sigmoid, Activation::Identity] {
///     let y = a.apply(&mut g, x)?;
///     at_zero.push(Sequential::new().forward(&mut g, &store, y)?.to_vec::<f32>().unwrap()[0]);
/// }
/// let want = [0.0, 0.0, 0.5, 0.0];
/// assert!(at_zero.iter().zip(want).all(|(v, w)| (v - w).abs() < 1e-6));
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
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
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::Activation;
    /// use sheaf_tensor::Tensor;
    ///
    /// let store = ParamStore::new();
    /// let mut g = Graph::new();
    /// let x = g.input(Tensor::from_vec(vec![-1.0f32, 0.0, 2.0], [3]).unwrap());
    /// let y = Activation::Relu.apply(&mut g, x)?;
    /// let y = Sequential::new().forward(&mut g, &store, y)?;
    /// assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 2.0]);
    /// // The identity adds no node.
    /// assert_eq!(Activation::Identity.apply(&mut g, x)?, x);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn apply(self, g: &mut Graph, x: Expr) -> Result<Expr> {
        match self {
            Activation::Tanh => g.tanh(x),
            Activation::Relu => g.relu(x),
            Activation::Sigmoid => g.sigmoid(x),
            Activation::Identity => Ok(x),
        }
    }

    /// The elementwise map an affine layer can run in place
    /// ([`Graph::affine_act`]); `None` for the identity.
    pub fn fused(self) -> Option<Unary> {
        match self {
            Activation::Tanh => Some(Unary::Tanh),
            Activation::Relu => Some(Unary::Relu),
            Activation::Sigmoid => Some(Unary::Sigmoid),
            Activation::Identity => None,
        }
    }
}

/// A multilayer perceptron: `Linear` layers of the given sizes, the
/// activation after every layer but the last, dropout (rate `dropout`, in
/// training mode) before every layer but the first.
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore, Sequential};
/// use sheaf_nn::prelude::*;
/// use sheaf_tensor::Tensor;
///
/// let mut store = ParamStore::new();
/// let mut scope = Scope::new(&mut store, 1);
/// let mlp = Mlp::new(&mut scope.sub("mlp")?, &[4, 16, 3], Activation::Relu, 0.2)?;
/// assert!(store.get("mlp.l1.w").is_some());
/// let mut g = Graph::new();
/// let x = g.input(Tensor::from_vec(vec![0.5f32; 4], [4]).unwrap());
/// let y = mlp.forward(&mut g, x)?;
/// assert_eq!(Sequential::new().forward(&mut g, &store, y)?.dims(), &[3]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
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
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::prelude::*;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// Mlp::new(&mut root.sub("mlp")?, &[4, 8, 2], Activation::Tanh, 0.0)?;
    /// let e = Mlp::new(&mut root.sub("one")?, &[4], Activation::Tanh, 0.0).unwrap_err();
    /// assert!(e.to_string().contains("Mlp \"one\": needs an input and an output size, got [4]"));
    /// let e = Mlp::new(&mut root.sub("p")?, &[4, 2], Activation::Tanh, 1.0).unwrap_err();
    /// assert!(e.to_string().contains("dropout must lie in [0, 1), it is 1"));
    /// let names = ["mlp.l0.w", "mlp.l0.b", "mlp.l1.w", "mlp.l1.b"];
    /// assert!(names.iter().all(|n| store.get(n).is_some()) && store.len() == 4);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
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
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::prelude::*;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let mlp = Mlp::new(&mut root.sub("mlp")?, &[4, 16, 3], Activation::Tanh, 0.0)?;
    /// let widths: Vec<_> = mlp.layers().iter().map(|l| (l.inp(), l.out())).collect();
    /// assert_eq!(widths, vec![(4, 16), (16, 3)]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn layers(&self) -> &[Linear] {
        &self.layers
    }

    /// The output for `x` `[sizes[0]]`. Dropout nodes only in training
    /// mode ([`Graph::is_train`]): in evaluation they would be identities.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, GraphError, NodeId, ParamStore};
    /// use sheaf_nn::prelude::*;
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let mlp = Mlp::new(&mut root.sub("mlp")?, &[4, 8, 8, 2], Activation::Tanh, 0.5)?;
    /// let dropouts = |train: bool| -> Result<usize, GraphError> {
    ///     let mut g = Graph::new();
    ///     g.set_train(train);
    ///     let x = g.input(Tensor::from_vec(vec![1.0f32; 4], [4]).unwrap());
    ///     let y = mlp.forward(&mut g, x)?;
    ///     assert_eq!(g.shape(y)?.dims(), &[2]);
    ///     Ok((0..g.len()).filter(|&i| g.op_name(NodeId::from_index(i)) == "dropout").count())
    /// };
    /// // Before the second and the third layer, in training only.
    /// assert_eq!((dropouts(true)?, dropouts(false)?), (2, 0));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn forward(&self, g: &mut Graph, x: Expr) -> Result<Expr> {
        let mut h = x;
        let last = self.layers.len() - 1;
        let drop = self.dropout > 0.0 && g.is_train();
        for (i, layer) in self.layers.iter().enumerate() {
            if i > 0 && drop {
                h = g.dropout(h, self.dropout)?;
            }
            h = match i < last {
                true => layer.forward_act(g, h, self.activation)?,
                false => layer.forward(g, h)?,
            };
        }
        Ok(h)
    }
}
