//! [`Function`]: a computation on graph values, TensorFlow Fold's
//! `td.Function`, and like Fold's a static function of its input: where
//! its input is a fixed set of tensors and its output one tensor, it is
//! compiled to a vertex function ([`VertexFn`], traced once when the block
//! is checked), so each input adds ONE call node instead of one node per
//! op, and batches of calls run its ops as batched kernels. Functions over
//! sequences or host data, with several outputs, of one op, or that read
//! values run inline, as does every function of a block compiled with
//! [`crate::Compiled::inline_functions`] or made with [`Function::inline`].

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use sheaf_autodiff::{Attr, Expr, Graph, GraphError, Op, VertexFn};

use crate::block::{impl_shr, Check, Ctx};
use crate::error::{At, BlockError, Result};
use crate::types::{Exprs, Value};
use crate::{Block, Ty};

/// Items of the placeholder sequences a [`Function`] is checked with: two,
/// so a function over pairs of items (`i != j`) yields items too.
pub(crate) const PLACEHOLDER_ITEMS: usize = 2;

/// What a [`Function`] runs: a closure `Fn(&mut Graph, I) -> Result<O>`
/// over graph values, or a built-in / user [`Op`] ([`Function::op`]).
pub trait GraphFn<I, O>: Send + Sync {
    /// Adds the nodes computing the output.
    fn call(&self, g: &mut Graph, x: I) -> std::result::Result<O, GraphError>;
}

impl<I, O, F> GraphFn<I, O> for F
where
    F: Fn(&mut Graph, I) -> std::result::Result<O, GraphError> + Send + Sync,
{
    fn call(&self, g: &mut Graph, x: I) -> std::result::Result<O, GraphError> {
        self(g, x)
    }
}

/// One op applied to a list of tensors (see [`Function::op`]).
#[derive(Clone)]
pub struct OpCall {
    op: Arc<dyn Op>,
    attr: Attr,
}

impl<I: Exprs> GraphFn<I, Expr> for OpCall {
    fn call(&self, g: &mut Graph, x: I) -> std::result::Result<Expr, GraphError> {
        g.apply(&self.op, &x.exprs(), self.attr)
    }
}

/// A function traced for both modes (dropout, and closures that ask
/// `Graph::is_train`, may differ), with its output type.
struct Traced {
    train: VertexFn,
    eval: VertexFn,
    input: Ty,
    output: Ty,
}

/// Any computation on graph values: a closure over graph expressions
/// (built-in ops, several nodes, parameters) or one op. Its shapes are
/// checked when the model is compiled by running it once on placeholder
/// inputs (zeros of the input type; sequences with two items, so that
/// pairs of items exist). See the module docs for when it runs as a
/// vertex function.
pub struct Function<I, O, F> {
    name: Cow<'static, str>,
    f: F,
    inline: bool,
    traced: Arc<OnceLock<Option<Traced>>>,
    /// Set when the block was checked with a second input type: the
    /// traced function no longer fits every use, so every use runs inline.
    mixed: Arc<AtomicBool>,
    _t: PhantomData<fn(I) -> O>,
}

impl<I, O, F: Clone> Clone for Function<I, O, F> {
    fn clone(&self) -> Self {
        Function {
            name: self.name.clone(),
            f: self.f.clone(),
            inline: self.inline,
            traced: Arc::clone(&self.traced),
            mixed: Arc::clone(&self.mixed),
            _t: PhantomData,
        }
    }
}

impl<I: Value, O: Value, F: GraphFn<I, O>> Function<I, O, F> {
    /// `f`, called `name` in error paths (`Function(name)`).
    pub fn new(name: impl Into<Cow<'static, str>>, f: F) -> Self {
        Function {
            name: name.into(),
            f,
            inline: false,
            traced: Arc::new(OnceLock::new()),
            mixed: Arc::new(AtomicBool::new(false)),
            _t: PhantomData,
        }
    }

    /// This function run inline (its ops added one by one for every
    /// input), never as a vertex function: for comparison, or for a
    /// closure whose structure must follow something traced once cannot
    /// see.
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }

    /// Whether the function was compiled to a vertex function (known once
    /// its block has been checked, e.g. by [`crate::Compiled::new`]).
    pub fn is_vertex_function(&self) -> bool {
        self.vertex().is_some()
    }

    fn vertex(&self) -> Option<&Traced> {
        if self.inline || self.mixed.load(Ordering::Relaxed) {
            return None;
        }
        self.traced.get().and_then(Option::as_ref)
    }

    /// Traces `f` on placeholders of `input` in one mode; `None` where it
    /// is not a static function of a fixed set of tensors, or is one op.
    fn trace(&self, input: &Ty, output: &Ty, train: bool) -> Option<VertexFn> {
        let shapes = input.tensor_shapes()?;
        // One output: several are one concatenated call output cut apart
        // by a slice node each, which cost more than they save (the
        // Tree-LSTM blocks with (state, h) cells ran at 0.93x of inline).
        if output.tensor_shapes()?.len() != 1 {
            return None;
        }
        let name: &'static str = match &self.name {
            Cow::Borrowed(s) => s,
            // Names live as long as the function: leak the few made at
            // run time rather than copying per call.
            Cow::Owned(s) => Box::leak(s.clone().into_boxed_str()),
        };
        let f = VertexFn::trace(name, &shapes, |g, args| {
            g.set_train(train);
            let mut it = args.iter().copied();
            let x = I::from_nodes(input, &mut it).ok_or_else(|| {
                GraphError::Params(format!("Function({name}): input is not a set of tensors"))
            })?;
            let y = self.f.call(g, x)?;
            let mut out = Vec::new();
            y.nodes(&mut out);
            Ok(out)
        })
        .ok()?;
        (f.ops() >= 2).then_some(f)
    }
}

impl<I: Exprs> Function<I, Expr, OpCall> {
    /// One op (built-in or a user's [`Op`]) on the input tensors, with
    /// attribute bits `attr`. Nodes of one `Arc` share batches.
    pub fn op(op: &Arc<dyn Op>, attr: Attr) -> Self {
        Function {
            name: op.name().into(),
            f: OpCall {
                op: Arc::clone(op),
                attr,
            },
            // One op: nothing to gain from a call.
            inline: true,
            traced: Arc::new(OnceLock::new()),
            mixed: Arc::new(AtomicBool::new(false)),
            _t: PhantomData,
        }
    }
}

impl<I: Value, O: Value, F: GraphFn<I, O>> Block for Function<I, O, F> {
    type In = I;
    type Out = O;
    fn name(&self) -> Cow<'static, str> {
        format!("Function({})", self.name).into()
    }
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        let g = &mut cx.scratch;
        g.clear();
        let x = I::zeros(input, g, PLACEHOLDER_ITEMS)
            .map_err(|e| BlockError::data(e).within(self.name()))?;
        let y = self.f.call(g, x).at(|| self.name())?;
        let output = y.ty_of(g).at(|| self.name())?;
        if !self.inline {
            let traced = self.traced.get_or_init(|| {
                let train = self.trace(input, &output, true)?;
                let eval = self.trace(input, &output, false)?;
                Some(Traced {
                    train,
                    eval,
                    input: input.clone(),
                    output: output.clone(),
                })
            });
            if traced.as_ref().is_some_and(|t| t.input != *input) {
                self.mixed.store(true, Ordering::Relaxed);
            }
        }
        Ok(output)
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &I) -> Result<O> {
        if let (Some(t), false) = (self.vertex(), cx.inline_functions) {
            let f = match cx.graph.is_train() {
                true => &t.train,
                false => &t.eval,
            };
            let mut args = Vec::new();
            x.nodes(&mut args);
            let built = match t.output {
                // One tensor out: the call node itself, no vector.
                Ty::Tensor(_) => {
                    let y = cx.graph.call_one(f, &args).at(|| self.name())?;
                    O::from_nodes(&t.output, &mut std::iter::once(y))
                }
                _ => {
                    let outs = cx.graph.call(f, &args).at(|| self.name())?;
                    O::from_nodes(&t.output, &mut outs.into_iter())
                }
            };
            return built.ok_or_else(|| {
                BlockError::usage(format!(
                    "the vertex function's outputs do not make a value of type {}",
                    t.output
                ))
                .within(self.name())
            });
        }
        self.f.call(cx.graph, x.clone()).at(|| self.name())
    }
}

impl_shr!([I, O, F,] Function<I, O, F>);
