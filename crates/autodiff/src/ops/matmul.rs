//! Matrix products: `matmul` (a product of two per-instance values) and
//! `affine` / `linear` (`b + sum_i W_i x_i` with shared weights, one matrix
//! product per term over the whole batch), also with an activation fused
//! in (`affine_relu`, `affine_tanh`, `affine_sigmoid`).

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, TensorError, TensorMut, Transpose, Unary};

use crate::error::Result;
use crate::op::{ArgRole, Attr, Backward, Cost, Forward, Op, ShapeError};
use crate::{Expr, Graph};

/// An affine backward whose two products (the input's and the weight's
/// gradient) have fewer multiply-adds than this runs them one after the
/// other instead of side by side: a join wakes a sleeping thread (a futex
/// call each way), which costs more than it saves on a few microseconds of
/// products. W1 on the 2-core Xeon, 2 threads: the unbatched executor's
/// one-row products (225k multiply-adds) ran 25% slower joined (317-332
/// against 438-452 trees/s with any limit from 2^18 to 2^22); the batched
/// runs, one graph or split, were level within noise at 2^18 (median
/// ratios 0.99-1.01 over five alternating pairs) and 1-2% slower at 2^20,
/// where the products of two- to four-node batches at the tops of trees
/// stop running side by side.
const JOIN_MIN_WORK: usize = 1 << 18;

static MATMUL: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(MatMul));
static AFFINE: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Affine::new(true, None)));
static LINEAR: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Affine::new(false, None)));
static AFFINE_RELU: LazyLock<Arc<dyn Op>> =
    LazyLock::new(|| Arc::new(Affine::new(true, Some(Unary::Relu))));
static AFFINE_TANH: LazyLock<Arc<dyn Op>> =
    LazyLock::new(|| Arc::new(Affine::new(true, Some(Unary::Tanh))));
static AFFINE_SIGMOID: LazyLock<Arc<dyn Op>> =
    LazyLock::new(|| Arc::new(Affine::new(true, Some(Unary::Sigmoid))));

/// `a * b` for a matrix `a` `[m, k]` and a matrix `b` `[k, n]` (out
/// `[m, n]`) or a vector `b` `[k]` (out `[m]`), both per instance. A batch
/// runs one product per instance.
pub(crate) struct MatMul;

/// Per-instance dimensions of a matmul: `(m, k, n)`, `b` a vector if its
/// rank is 1 (then `n = 1`).
fn matmul_dims(a: Shape, b: Shape) -> Option<(usize, usize, usize)> {
    match (a.dims(), b.dims()) {
        ([m, k], [kb, n]) if k == kb => Some((*m, *k, *n)),
        ([m, k], [kb]) if k == kb => Some((*m, *k, 1)),
        _ => None,
    }
}

fn bad_args(op: &'static str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        arg: "args",
        reason: "do not have the shapes the node was built with",
    }
}

impl Op for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        let expected =
            || ShapeError::expected("a matrix [m, k] and a matrix [k, n] or a vector [k]");
        match args {
            [a, b] => {
                let (m, _, n) = matmul_dims(*a, *b).ok_or_else(expected)?;
                Ok(if b.rank() == 1 {
                    Shape::from([m])
                } else {
                    Shape::from([m, n])
                })
            }
            _ => Err(expected()),
        }
    }
    fn cost(&self) -> Cost {
        Cost::Heavy
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let [a, b] = cx.args else {
            return Err(bad_args("matmul"));
        };
        let (m, k, n) =
            matmul_dims(a.shape().row_shape(), b.shape().row_shape()).ok_or(bad_args("matmul"))?;
        let mut out = cx.out;
        for r in 0..out.num_rows() {
            let ar = a.row(r)?;
            let br = b.row(r)?.reshape([k, n])?;
            let o = out.rows_mut(r..r + 1)?.reshape([m, n])?;
            cx.backend
                .matmul(&ar, Transpose::No, &br, Transpose::No, 1.0, 0.0, o)?;
        }
        Ok(())
    }
    fn backward_writes(&self, _i: usize, _n: usize, _attr: Attr) -> bool {
        // Each instance's product writes its whole gradient block.
        true
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let [a, b] = cx.args else {
            return Err(bad_args("matmul"));
        };
        let (m, k, n) =
            matmul_dims(a.shape().row_shape(), b.shape().row_shape()).ok_or(bad_args("matmul"))?;
        let be = cx.backend;
        // Beta 0 writes a gradient the executor handed over unzeroed.
        let beta = |j| if cx.writes(j) { 0.0 } else { 1.0 };
        let (beta_a, beta_b) = (beta(0), beta(1));
        let (da, db) = match cx.dargs.as_mut_slice() {
            [da, db] => (da, db),
            _ => return Err(bad_args("matmul")),
        };
        for r in 0..cx.dout.num_rows() {
            let dy = cx.dout.row(r)?.reshape([m, n])?;
            let ar = a.row(r)?;
            let br = b.row(r)?.reshape([k, n])?;
            // dA = dY B^T, dB = A^T dY.
            if let Some(da) = da {
                let d = da.rows_mut(r..r + 1)?.reshape([m, k])?;
                be.matmul(&dy, Transpose::No, &br, Transpose::Yes, 1.0, beta_a, d)?;
            }
            if let Some(db) = db {
                let d = db.rows_mut(r..r + 1)?.reshape([k, n])?;
                be.matmul(&ar, Transpose::Yes, &dy, Transpose::No, 1.0, beta_b, d)?;
            }
        }
        Ok(())
    }
}

/// A stacked `[b, ..., n]` as the matrix `[rows, n]` of its last axis (a
/// shared weight or bias stays as it is).
fn as_rows(t: &sheaf_tensor::Tensor) -> sheaf_tensor::Result<sheaf_tensor::Tensor> {
    match t.shape().dims() {
        [.., n] if t.shape().rank() > 2 => t.reshape([t.numel() / (*n).max(1), *n]),
        _ => Ok(t.clone()),
    }
}

fn as_rows_mut(t: TensorMut<'_>) -> sheaf_tensor::Result<TensorMut<'_>> {
    match t.shape().dims() {
        [.., n] if t.shape().rank() > 2 => {
            let n = *n;
            let all = t.numel();
            t.reshape([all / n.max(1), n])
        }
        _ => Ok(t),
    }
}

/// `bias + sum_i W_i x_i` (with `bias`) or `sum_i W_i x_i` (without): the
/// weights `W_i` `[out, in_i]` and the bias `[out]` are shared by a batch,
/// the inputs `x_i` `[in_i]` (or rows `[T, in_i]`) are stacked, so each term
/// is ONE matrix product `X_i W_i^T` over the batch's rows. Arguments:
/// `[bias,] W_1, x_1, W_2, x_2, ...`.
///
/// With `act`, the activation runs in place on the products' output (one
/// node and one buffer instead of two, and no second pass over memory); its
/// derivative is read off the output, which relu, tanh and sigmoid allow.
pub(crate) struct Affine {
    bias: bool,
    act: Option<Unary>,
}

impl Affine {
    fn new(bias: bool, act: Option<Unary>) -> Affine {
        Affine { bias, act }
    }

    /// Index of the first weight among the arguments.
    fn first(&self) -> usize {
        usize::from(self.bias)
    }

    /// The (weight, input) argument pairs, by argument index.
    fn terms(&self, n: usize) -> impl Iterator<Item = (usize, usize)> {
        (self.first()..n.saturating_sub(1))
            .step_by(2)
            .map(|w| (w, w + 1))
    }

    fn name_of(&self) -> &'static str {
        match (self.bias, self.act) {
            (_, Some(Unary::Relu)) => "affine_relu",
            (_, Some(Unary::Tanh)) => "affine_tanh",
            (_, Some(Unary::Sigmoid)) => "affine_sigmoid",
            (_, Some(_)) => "affine_act",
            (true, None) => "affine",
            (false, None) => "linear",
        }
    }
}

impl Op for Affine {
    fn name(&self) -> &'static str {
        self.name_of()
    }
    fn arg_role(&self, i: usize, _n: usize) -> ArgRole {
        if i < self.first() || (i - self.first()).is_multiple_of(2) {
            ArgRole::Share
        } else {
            ArgRole::Stack
        }
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        let first = self.first();
        if args.len() < first + 2 || !(args.len() - first).is_multiple_of(2) {
            return Err(ShapeError::expected(if self.bias {
                "a bias [out] and at least one (weight [out, in], input [in]) pair"
            } else {
                "at least one (weight [out, in], input [in]) pair"
            }));
        }
        let out = if self.bias {
            match args[0].dims() {
                [out] => *out,
                _ => return Err(ShapeError::expected("a bias vector [out]")),
            }
        } else {
            match args[0].dims() {
                [out, _] => *out,
                _ => return Err(ShapeError::expected("weight 1 of shape [out, in]")),
            }
        };
        let from = if self.bias { "the bias" } else { "weight 1" };
        for (t, (w, x)) in self.terms(args.len()).enumerate() {
            let t = t + 1;
            let cols = match args[w].dims() {
                [rows, cols] if *rows == out => *cols,
                _ => {
                    return Err(ShapeError::expected(format!(
                        "weight {t} of shape [{out}, in] (out = {out}, from {from})"
                    )))
                }
            };
            // A vector, or rows of one (every input with the same rows).
            let lead = &args[self.first() + 1].dims()[..args[self.first() + 1].rank().max(1) - 1];
            let dims = args[x].dims();
            let fits = match dims {
                [c] => *c == cols && lead.is_empty(),
                [rows @ .., c] => *c == cols && rows == lead && dims.len() == 2,
                [] => false,
            };
            if !fits {
                return Err(ShapeError::expected(match lead {
                    [] => format!("input {t} of shape [{cols}] (the columns of weight {t})"),
                    _ => format!(
                        "input {t} of shape {lead:?} + [{cols}] (rows as input 1's, the columns of weight {t})"
                    ),
                }));
            }
        }
        match args[self.first() + 1].dims() {
            [rows, _] => Ok(Shape::from([*rows, out])),
            _ => Ok(Shape::from([out])),
        }
    }
    fn cost(&self) -> Cost {
        Cost::Heavy
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        // Inputs of rows `[b, T, in]` are one product over `b * T` rows.
        let args: Vec<_> = cx
            .args
            .iter()
            .map(as_rows)
            .collect::<sheaf_tensor::Result<_>>()?;
        let mut out = as_rows_mut(cx.out)?;
        let mut beta = 0.0;
        let mut terms = self.terms(args.len());
        if self.bias {
            let bias = cx.args.first().ok_or(bad_args(self.name_of()))?;
            let (w, x) = terms.next().ok_or(bad_args(self.name_of()))?;
            // out [b, out] = X [b, in] W^T + bias, the bias added by the
            // product itself where the backend can.
            cx.backend.matmul_bias(
                &args[x],
                Transpose::No,
                &cx.args[w],
                Transpose::Yes,
                bias,
                out.reborrow(),
            )?;
            beta = 1.0;
        }
        for (w, x) in terms {
            // out [b, out] (+)= X [b, in] W^T.
            cx.backend.matmul(
                &args[x],
                Transpose::No,
                &cx.args[w],
                Transpose::Yes,
                1.0,
                beta,
                out.reborrow(),
            )?;
            beta = 1.0;
        }
        if let Some(act) = self.act {
            cx.backend.unary_inplace(act, out)?;
        }
        Ok(())
    }
    fn product_terms_from(&self) -> Option<usize> {
        Some(self.first())
    }
    fn backward_writes(&self, i: usize, n: usize, _attr: Attr) -> bool {
        // An input's gradient is one product, written with beta 0.
        self.arg_role(i, n) == ArgRole::Stack
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let be = cx.backend;
        // With an activation: the gradient before it, dY * act'(Y), read
        // off the output Y (act(Y) > 0 exactly where its input was, for
        // relu).
        let before_act = match self.act {
            None => None,
            Some(act) => {
                // Zeroed: `unary_bwd` adds. From the scratch pool, given
                // back below.
                let mut d = crate::pool::take(cx.dout.shape(), true, be.device())?;
                be.unary_bwd(act, cx.out, cx.out, cx.dout, d.view_mut()?)?;
                Some(d)
            }
        };
        let dy_rows = as_rows(before_act.as_ref().unwrap_or(cx.dout))?;
        let dy = &dy_rows;
        if self.bias {
            if let Some(Some(db)) = cx.dargs.first_mut() {
                be.col_sums_acc(dy, db.reborrow())?;
            }
        }
        for (w, x) in self.terms(cx.args.len()) {
            let (wt, xt) = (&cx.args[w], &as_rows(&cx.args[x])?);
            // Beta 0 writes an input gradient handed over unzeroed.
            let beta_x = if cx.writes(x) { 0.0 } else { 1.0 };
            // w < x, so the split gives both gradients mutably at once.
            let (head, tail) = cx.dargs.split_at_mut(x);
            let (dw, dx) = (head[w].as_mut(), tail[0].as_mut());
            // dX [b, in] += dY [b, out] W [out, in].
            let input_grad = |dx: Option<&mut TensorMut<'_>>| match dx {
                Some(dx) => be.matmul(
                    dy,
                    Transpose::No,
                    wt,
                    Transpose::No,
                    1.0,
                    beta_x,
                    as_rows_mut(dx.reborrow())?,
                ),
                None => Ok(()),
            };
            // dW [out, in] += dY^T X.
            let weight_grad = |dw: Option<&mut TensorMut<'_>>| match dw {
                Some(dw) => be.matmul(
                    dy,
                    Transpose::Yes,
                    xt,
                    Transpose::No,
                    1.0,
                    1.0,
                    dw.reborrow(),
                ),
                None => Ok(()),
            };
            // The two products are independent: with two threads they run
            // side by side (each still splits itself when large), which is
            // what keeps the second core busy on the small batches at the
            // tops of trees. Not below JOIN_MIN_WORK: waking the second
            // thread would cost more than it saves.
            let inputs = wt.shape().dims().get(1).copied().unwrap_or(1);
            let work = dy.shape().numel().unwrap_or(0).saturating_mul(inputs);
            if work >= JOIN_MIN_WORK {
                let (a, b) = rayon::join(|| input_grad(dx), || weight_grad(dw));
                a?;
                b?;
            } else {
                input_grad(dx)?;
                weight_grad(dw)?;
            }
        }
        // `dy` may share `before_act`'s buffer: dropped first, so the pool
        // can keep it (a shared buffer is not kept).
        drop(dy_rows);
        if let Some(d) = before_act {
            crate::pool::give(d);
        }
        Ok(())
    }
}

/// Matrix products. Each checks shapes when called and computes nothing.
impl Graph {
    /// The product `a * b` of a matrix `a` `[m, k]` and a matrix `b`
    /// `[k, n]` (giving `[m, n]`) or a vector `b` `[k]` (giving `[m]`).
    /// Both are per-instance values: a batch runs one product per instance.
    /// For a parameter matrix times a vector use [`Graph::linear`] or
    /// [`Graph::affine`], which batch into one product.
    pub fn matmul(&mut self, a: Expr, b: Expr) -> Result<Expr> {
        self.apply_with_data(&MATMUL, &[a, b], 0, 0)
    }

    /// `bias + sum_i W_i x_i` for `terms = [(W_1, x_1), (W_2, x_2), ...]`:
    /// weights `W_i` `[out, in_i]` and `bias` `[out]` are shared by every
    /// node of a batch (normally parameters), inputs `x_i` are vectors
    /// `[in_i]`; the result is `[out]`. Inputs may also be rows `[T, in_i]`
    /// (every input the same `T`: a sequence's positions), each row taken
    /// as a vector: the result is `[T, out]`, and a batch runs one product
    /// over all its nodes' rows. Nodes share a batch when they use
    /// the same bias and weight nodes and equal input shapes; a batch runs
    /// one matrix product per term.
    pub fn affine(&mut self, bias: Expr, terms: &[(Expr, Expr)]) -> Result<Expr> {
        let mut args = Vec::with_capacity(1 + 2 * terms.len());
        args.push(bias);
        args.extend(terms.iter().flat_map(|&(w, x)| [w, x]));
        self.apply_with_data(&AFFINE, &args, 0, 0)
    }

    /// `act(bias + sum_i W_i x_i)` as ONE node: [`Graph::affine`] with the
    /// activation applied in place on the product (no node, buffer or pass
    /// of its own, in forward or backward). `act` is [`Unary::Relu`],
    /// [`Unary::Tanh`] or [`Unary::Sigmoid`] (their derivatives are read off
    /// the output); others are an error. Equal to `self.affine` followed
    /// by the activation's op.
    pub fn affine_act(&mut self, act: Unary, bias: Expr, terms: &[(Expr, Expr)]) -> Result<Expr> {
        let op = match act {
            Unary::Relu => &AFFINE_RELU,
            Unary::Tanh => &AFFINE_TANH,
            Unary::Sigmoid => &AFFINE_SIGMOID,
            other => {
                return Err(crate::GraphError::Data {
                    op: "affine_act",
                    what: format!(
                        "{other} cannot be fused into an affine (relu, tanh and sigmoid can)"
                    ),
                })
            }
        };
        let mut args = Vec::with_capacity(1 + 2 * terms.len());
        args.push(bias);
        args.extend(terms.iter().flat_map(|&(w, x)| [w, x]));
        self.apply_with_data(op, &args, 0, 0)
    }

    /// `W x` for a shared weight `W` `[out, in]` and a vector `x` `[in]`:
    /// [`Graph::affine`] without a bias and with one term.
    pub fn linear(&mut self, w: Expr, x: Expr) -> Result<Expr> {
        self.apply_with_data(&LINEAR, &[w, x], 0, 0)
    }

    /// `sum_i W_i x_i` for `terms = [(W_1, x_1), ...]`: [`Graph::affine`]
    /// without a bias.
    pub fn linear_sum(&mut self, terms: &[(Expr, Expr)]) -> Result<Expr> {
        let args: Vec<Expr> = terms.iter().flat_map(|&(w, x)| [w, x]).collect();
        self.apply_with_data(&LINEAR, &args, 0, 0)
    }
}
