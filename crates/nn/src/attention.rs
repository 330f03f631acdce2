//! Attention pooling: a weighted sum of a sequence's vectors, the weights
//! a softmax over scores (dot with a query, additive, or feed-forward).

use sheaf_autodiff::{Expr, Graph, GraphError, Param, Result};

use crate::scope::{check_sizes, layer_path, Scope};

/// How [`Attention`] scores a vector `h_t` `[D]`.
#[derive(Debug, Clone, Copy)]
enum Score {
    /// `q . h_t` with a learned query `q` `[D]`.
    Dot { q: Param },
    /// Bahdanau et al.: `v . tanh(W h_t + U s + b)` for a query state `s`.
    Additive {
        w: Param,
        u: Param,
        b: Param,
        v: Param,
    },
    /// Raffel & Ellis (2015): `v . tanh(W h_t + b)`, no query.
    FeedForward { w: Param, b: Param, v: Param },
}

/// Attention pooling over a sequence of `[D]` vectors: `c = sum_t a_t
/// h_t`, `a = softmax(e)`, `e_t` the score of `h_t`.
///
/// ```
/// use sheaf_autodiff::{Graph, ParamStore, Sequential};
/// use sheaf_nn::prelude::*;
/// use sheaf_tensor::Tensor;
///
/// // A sentence vector: attention over a GRU's outputs, then a classifier.
/// let mut store = ParamStore::new();
/// let mut root = Scope::new(&mut store, 1);
/// let enc = Gru::new(&mut root.sub("enc")?, 2, RecurrentConfig::new(4))?;
/// let att = Attention::feed_forward(&mut root.sub("att")?, enc.output_width(), 8)?;
/// let out = Linear::new(&mut root.sub("out")?, enc.output_width(), 3, true)?;
/// let mut g = Graph::new();
/// let xs: Vec<_> = (0..5)
///     .map(|t| g.input(Tensor::from_vec(vec![t as f32, 1.0], [2]).unwrap()))
///     .collect();
/// let hs = enc.transduce(&mut g, &xs)?;
/// let c = att.pool(&mut g, &hs)?;
/// let logits = out.forward(&mut g, c)?;
/// assert_eq!(Sequential::new().forward(&mut g, &store, logits)?.dims(), &[3]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Attention {
    score: Score,
    dim: usize,
}

impl Attention {
    /// Scores `q . h_t` with a learned query `q` (`q` in `scope`).
    /// Errors: a zero size (naming the layer).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{Attention, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let att = Attention::dot(&mut Scope::new(&mut store, 1).sub("att")?, 2)?;
    /// let mut g = Graph::new();
    /// let hs: Vec<_> = (0..3)
    ///     .map(|t| g.input(Tensor::from_vec(vec![t as f32, 1.0], [2]).unwrap()))
    ///     .collect();
    /// let c = att.pool(&mut g, &hs)?;
    /// assert_eq!(Sequential::new().forward(&mut g, &store, c)?.dims(), &[2]);
    /// let e = Attention::dot(&mut Scope::new(&mut store, 1).sub("bad")?, 0).unwrap_err();
    /// assert!(e.to_string().contains("Attention \"bad\": vector width 0"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn dot(scope: &mut Scope<'_>, dim: usize) -> Result<Attention> {
        check_sizes(&layer_path("Attention", scope), &[("vector width", dim)])?;
        Ok(Attention {
            score: Score::Dot {
                q: scope.param("q", [dim], scope.inits().matrix)?,
            },
            dim,
        })
    }

    /// Bahdanau et al.'s additive scores `v . tanh(W h_t + U s + b)` for a
    /// query state `s` `[query]` given to [`Attention::pool_with`];
    /// `W` `[hidden, dim]`, `U` `[hidden, query]`, `b`, `v` `[hidden]`.
    /// Errors: a zero size (naming the layer and every size).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{Attention, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let att = Attention::additive(&mut Scope::new(&mut store, 1).sub("att")?, 4, 3, 8)?;
    /// assert_eq!(store.get("att.u").unwrap().shape().dims(), &[8, 3]);
    /// let mut g = Graph::new();
    /// let hs: Vec<_> = (0..5)
    ///     .map(|t| g.input(Tensor::from_vec(vec![t as f32; 4], [4]).unwrap()))
    ///     .collect();
    /// // E.g. a decoder's state.
    /// let s = g.input(Tensor::from_vec(vec![1.0f32, 0.0, -1.0], [3]).unwrap());
    /// let c = att.pool_with(&mut g, &hs, s)?;
    /// assert_eq!(Sequential::new().forward(&mut g, &store, c)?.dims(), &[4]);
    /// let mut bad = Scope::new(&mut store, 1);
    /// let e = Attention::additive(&mut bad.sub("bad")?, 4, 0, 8).unwrap_err();
    /// assert!(e.to_string().contains("query width 0"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn additive(
        scope: &mut Scope<'_>,
        dim: usize,
        query: usize,
        hidden: usize,
    ) -> Result<Attention> {
        let sizes = [
            ("vector width", dim),
            ("query width", query),
            ("hidden", hidden),
        ];
        check_sizes(&layer_path("Attention", scope), &sizes)?;
        Ok(Attention {
            score: Score::Additive {
                w: scope.matrix("w", hidden, dim)?,
                u: scope.matrix("u", hidden, query)?,
                b: scope.bias("b", hidden)?,
                v: scope.param("v", [hidden], scope.inits().matrix)?,
            },
            dim,
        })
    }

    /// Raffel & Ellis's feed-forward attention `v . tanh(W h_t + b)`.
    /// Errors: a zero size (naming the layer and both sizes).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore};
    /// use sheaf_nn::{Attention, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let att = Attention::feed_forward(&mut Scope::new(&mut store, 1).sub("att")?, 4, 8)?;
    /// assert_eq!(store.get("att.w").unwrap().shape().dims(), &[8, 4]);
    /// assert_eq!(store.get("att.v").unwrap().shape().dims(), &[8]);
    /// let mut g = Graph::new();
    /// let h = g.input(Tensor::from_vec(vec![1.0f32; 4], [4]).unwrap());
    /// // No query state.
    /// let e = att.pool_with(&mut g, &[h], h).unwrap_err();
    /// assert!(e.to_string().contains("only additive scores read a query state"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn feed_forward(scope: &mut Scope<'_>, dim: usize, hidden: usize) -> Result<Attention> {
        let sizes = [("vector width", dim), ("hidden", hidden)];
        check_sizes(&layer_path("Attention", scope), &sizes)?;
        Ok(Attention {
            score: Score::FeedForward {
                w: scope.matrix("w", hidden, dim)?,
                b: scope.bias("b", hidden)?,
                v: scope.param("v", [hidden], scope.inits().matrix)?,
            },
            dim,
        })
    }

    /// The pooled vector `[D]` of `hs` (dot and feed-forward scores).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{Attention, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let att = Attention::dot(&mut Scope::new(&mut store, 1), 2)?;
    /// let mut g = Graph::new();
    /// let hs: Vec<_> = (0..3)
    ///     .map(|t| g.input(Tensor::from_vec(vec![t as f32, 1.0], [2]).unwrap()))
    ///     .collect();
    /// let c = att.pool(&mut g, &hs)?;
    /// // A convex combination of the vectors.
    /// let c = Sequential::new().forward(&mut g, &store, c)?.to_vec::<f32>().unwrap();
    /// assert!((0.0..=2.0).contains(&c[0]) && (c[1] - 1.0).abs() < 1e-5);
    /// let e = att.pool(&mut g, &[]).unwrap_err();
    /// assert!(e.to_string().contains("Attention: an empty sequence"));
    /// let wide = g.input(Tensor::from_vec(vec![0.0f32; 3], [3]).unwrap());
    /// let e = att.pool(&mut g, &[hs[0], wide]).unwrap_err();
    /// assert!(e.to_string().contains("vector 1 has shape [3], the layer pools [2]"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn pool(&self, g: &mut Graph, hs: &[Expr]) -> Result<Expr> {
        self.pool_inner(g, hs, None)
    }

    /// The pooled vector `[D]` of `hs` for the query state `s` (additive
    /// scores).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{Attention, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let att = Attention::additive(&mut Scope::new(&mut store, 1), 2, 3, 4)?;
    /// let mut g = Graph::new();
    /// let hs: Vec<_> = (0..3)
    ///     .map(|t| g.input(Tensor::from_vec(vec![t as f32, 1.0], [2]).unwrap()))
    ///     .collect();
    /// let s = g.input(Tensor::from_vec(vec![0.5f32; 3], [3]).unwrap());
    /// let c = att.pool_with(&mut g, &hs, s)?;
    /// assert_eq!(Sequential::new().forward(&mut g, &store, c)?.dims(), &[2]);
    /// let e = att.pool(&mut g, &hs).unwrap_err();
    /// assert!(e.to_string().contains("additive scores need a query state (pool_with)"));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn pool_with(&self, g: &mut Graph, hs: &[Expr], s: Expr) -> Result<Expr> {
        self.pool_inner(g, hs, Some(s))
    }

    /// The attention weights `[T]` of `hs` (and `s` for additive scores).
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::{Attention, Scope};
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let att = Attention::feed_forward(&mut Scope::new(&mut store, 1), 2, 4)?;
    /// let mut g = Graph::new();
    /// let h = g.input(Tensor::from_vec(vec![1.0f32, -1.0], [2]).unwrap());
    /// let other = g.input(Tensor::from_vec(vec![3.0f32, 0.5], [2]).unwrap());
    /// let a = att.weights(&mut g, &[h, other, h], None)?;
    /// let a = Sequential::new().forward(&mut g, &store, a)?.to_vec::<f32>().unwrap();
    /// // A distribution over the positions; equal vectors weigh the same.
    /// assert_eq!(a.len(), 3);
    /// assert!((a.iter().sum::<f32>() - 1.0).abs() < 1e-5 && a[0] == a[2]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn weights(&self, g: &mut Graph, hs: &[Expr], s: Option<Expr>) -> Result<Expr> {
        if hs.is_empty() {
            return Err(GraphError::Params("Attention: an empty sequence".into()));
        }
        let mut scores = Vec::with_capacity(hs.len());
        let query = match (self.score, s) {
            (Score::Additive { u, .. }, Some(s)) => {
                let u = g.param(&u);
                Some(g.linear(u, s)?)
            }
            (Score::Additive { .. }, None) => {
                return Err(GraphError::Params(
                    "Attention: additive scores need a query state (pool_with)".into(),
                ))
            }
            (_, Some(_)) => {
                return Err(GraphError::Params(
                    "Attention: only additive scores read a query state".into(),
                ))
            }
            _ => None,
        };
        for (t, &h) in hs.iter().enumerate() {
            let shape = g.shape(h)?;
            if shape.dims() != [self.dim] {
                return Err(GraphError::Params(format!(
                    "Attention: vector {t} has shape {shape}, the layer pools [{}]",
                    self.dim
                )));
            }
            let e = match self.score {
                Score::Dot { q } => {
                    let q = g.param(&q);
                    g.dot(q, h)?
                }
                Score::Additive { w, b, v, .. } => {
                    let (w, b, v) = (g.param(&w), g.param(&b), g.param(&v));
                    let a = g.affine(b, &[(w, h)])?;
                    let a = match query {
                        Some(us) => g.add(a, us)?,
                        None => a,
                    };
                    let a = g.tanh(a)?;
                    g.dot(v, a)?
                }
                Score::FeedForward { w, b, v } => {
                    let (w, b, v) = (g.param(&w), g.param(&b), g.param(&v));
                    let a = g.affine(b, &[(w, h)])?;
                    let a = g.tanh(a)?;
                    g.dot(v, a)?
                }
            };
            scores.push(e);
        }
        let e = g.concat(&scores)?;
        g.softmax(e)
    }

    fn pool_inner(&self, g: &mut Graph, hs: &[Expr], s: Option<Expr>) -> Result<Expr> {
        let a = self.weights(g, hs, s)?;
        let terms = hs
            .iter()
            .enumerate()
            .map(|(t, &h)| {
                let at = g.pick(a, t as u32)?;
                g.scale_by(h, at)
            })
            .collect::<Result<Vec<_>>>()?;
        match terms.len() {
            1 => Ok(terms[0]),
            _ => g.sum(&terms),
        }
    }
}
