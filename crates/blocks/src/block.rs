//! The [`Block`] trait, the contexts blocks are checked and evaluated in,
//! and composition ([`Pipe`], written `a >> b`).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::OnceLock;

use sheaf_autodiff::{Expr, Graph};

use crate::error::{BlockError, Result};
use crate::Ty;

/// A piece of a model over structured input: it reads an input of type
/// `In` and adds the nodes that compute its `Out` to a graph.
///
/// `In` is a host value (any Rust value, borrowed: a parse tree, a string)
/// or a graph value ([`crate::Value`]); `Out` is what the next block reads.
/// Composing blocks whose types disagree does not compile: `a >> b` needs
/// `b`'s `In` to be `a`'s `Out`.
///
/// Shapes, which Rust types do not carry, are checked by [`Block::check`]
/// once when the model is compiled ([`crate::Compiled::new`]).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a block",
    label = "expected a block (Map, Fold, Function, ...)"
)]
pub trait Block: Send + Sync {
    /// What the block reads.
    type In: ?Sized;
    /// What the block yields.
    type Out;

    /// The block's name in error paths: `Map`, `Function(fc)`.
    fn name(&self) -> Cow<'static, str>;

    /// The output type for an input of type `input`; errors name what does
    /// not fit. Called once per use when the model is compiled.
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty>;

    /// Adds the nodes for one input to `cx.graph`.
    fn eval(&self, cx: &mut Ctx<'_>, input: &Self::In) -> Result<Self::Out>;
}

impl<B: Block + ?Sized> Block for Box<B> {
    type In = B::In;
    type Out = B::Out;
    fn name(&self) -> Cow<'static, str> {
        (**self).name()
    }
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        (**self).check(cx, input)
    }
    fn eval(&self, cx: &mut Ctx<'_>, input: &Self::In) -> Result<Self::Out> {
        (**self).eval(cx, input)
    }
}

/// A block behind a pointer, its concrete type erased (for recursion, for
/// cases of a [`crate::OneOf`], for storing blocks of one signature).
pub type BoxBlock<I, O> = Box<dyn Block<In = I, Out = O>>;

/// Where blocks add their nodes.
pub struct Ctx<'a> {
    /// The graph being built (one per batch).
    pub graph: &'a mut Graph,
    pub(crate) metrics: &'a mut Metrics,
    pub(crate) instance: usize,
    /// Functions run inline even where compiled to vertex functions
    /// ([`crate::Compiled::inline_functions`]).
    pub(crate) inline_functions: bool,
}

impl<'a> Ctx<'a> {
    /// A context over `graph`, recording metrics into `metrics`, for input
    /// number `instance` of a batch.
    pub fn new(graph: &'a mut Graph, metrics: &'a mut Metrics, instance: usize) -> Self {
        Ctx {
            graph,
            metrics,
            instance,
            inline_functions: false,
        }
    }

    /// The same context with every `Function` run inline (`yes`), or as
    /// compiled (vertex functions where they could be traced).
    pub fn with_inline_functions(mut self, yes: bool) -> Self {
        self.inline_functions = yes;
        self
    }

    /// The position of the input being built in its batch.
    pub fn instance(&self) -> usize {
        self.instance
    }
}

/// Values recorded by [`crate::Metric`] blocks: per name, `(input number
/// in the batch, value)` in the order they were built.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    pub(crate) by_name: BTreeMap<String, Vec<(usize, Expr)>>,
}

impl Metrics {
    /// The values recorded under `name`.
    pub fn get(&self, name: &str) -> &[(usize, Expr)] {
        self.by_name.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The names recorded.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    pub(crate) fn record(&mut self, name: &str, instance: usize, value: Expr) {
        if let Some(v) = self.by_name.get_mut(name) {
            v.push((instance, value));
        } else {
            self.by_name
                .insert(name.to_owned(), vec![(instance, value)]);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.by_name.values_mut().for_each(Vec::clear);
    }
}

/// What checking blocks needs: a scratch graph on which a `Function` is
/// tried with placeholder inputs, and the forward declarations whose
/// definition is being checked (so recursion stops).
pub struct Check {
    pub(crate) scratch: Graph,
    pub(crate) declarations: HashSet<usize>,
}

impl Check {
    pub(crate) fn new() -> Self {
        Check {
            scratch: Graph::new(),
            declarations: HashSet::new(),
        }
    }

    /// The scratch graph (cleared by the caller when it wants).
    pub fn scratch(&mut self) -> &mut Graph {
        &mut self.scratch
    }
}

/// Records the type a block was checked with, so evaluation can use it (a
/// zero value for `None`, the item shape of an empty sequence); a block
/// used in two places must be used with one type.
pub(crate) fn remember(slot: &OnceLock<Ty>, ty: &Ty) -> Result<()> {
    match slot.get() {
        Some(old) if old != ty => Err(BlockError::new(crate::ErrorKind::Mismatch {
            what: "the block is used with two types (a block has one type, as in Fold; \
                   build a second block for the second use)"
                .into(),
            left: old.clone(),
            right: ty.clone(),
        })),
        Some(_) => Ok(()),
        None => {
            let _ = slot.set(ty.clone());
            Ok(())
        }
    }
}

/// The type recorded by [`remember`], or an error if the block was never
/// checked.
pub(crate) fn recalled<'t>(slot: &'t OnceLock<Ty>, block: &str) -> Result<&'t Ty> {
    slot.get().ok_or_else(|| {
        BlockError::usage(format!(
            "{block} was evaluated before it was checked: run models through Compiled::new"
        ))
    })
}

/// `a >> b`: `b` reads what `a` yields.
#[derive(Clone)]
pub struct Pipe<A, B> {
    first: A,
    second: B,
}

impl<A, B> Pipe<A, B> {
    /// `first`, then `second` on its output.
    pub fn new(first: A, second: B) -> Self {
        Pipe { first, second }
    }
}

impl<A, B> Block for Pipe<A, B>
where
    A: Block,
    B: Block<In = A::Out>,
{
    type In = A::In;
    type Out = B::Out;
    fn name(&self) -> Cow<'static, str> {
        format!("{} >> {}", self.first.name(), self.second.name()).into()
    }
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        let mid = self.first.check(cx, input)?;
        self.second.check(cx, &mid)
    }
    fn eval(&self, cx: &mut Ctx<'_>, input: &A::In) -> Result<B::Out> {
        let mid = self.first.eval(cx, input)?;
        self.second.eval(cx, &mid)
    }
}

/// Methods every block has.
pub trait BlockExt: Block + Sized {
    /// `self >> next`, for blocks of other crates (the `>>` operator is
    /// implemented for this crate's blocks).
    fn then<N: Block<In = Self::Out>>(self, next: N) -> Pipe<Self, N> {
        Pipe::new(self, next)
    }

    /// The block behind a pointer, its type erased.
    fn boxed(self) -> BoxBlock<Self::In, Self::Out>
    where
        Self: 'static,
    {
        Box::new(self)
    }
}

impl<B: Block> BlockExt for B {}

/// Implements `>>` for block types: `[generics] Type`.
macro_rules! impl_shr {
    ($([$($g:tt)*] $t:ty),* $(,)?) => {$(
        impl<$($g)* Next> std::ops::Shr<Next> for $t
        where
            $t: $crate::Block,
            Next: $crate::Block<In = <$t as $crate::Block>::Out>,
        {
            type Output = $crate::Pipe<$t, Next>;
            fn shr(self, next: Next) -> Self::Output {
                $crate::Pipe::new(self, next)
            }
        }
    )*};
}
pub(crate) use impl_shr;

impl_shr!([A, B,] Pipe<A, B>);
