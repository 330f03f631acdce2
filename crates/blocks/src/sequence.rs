//! Blocks over sequences: [`Map`], [`Fold`] (a left chain), [`Reduce`] (a
//! balanced tree), [`ZipWith`], and the reductions [`Sum`], [`Mean`],
//! [`Max`].

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::OnceLock;

use sheaf_autodiff::Expr;

use crate::block::{impl_shr, recalled, remember, Check, Ctx};
use crate::error::{At, BlockError, ErrorKind, Result};
use crate::types::{Repeat, Value};
use crate::{Block, Ty};

fn item_of<'t>(input: &'t Ty, block: &'static str) -> Result<&'t Ty> {
    input
        .item()
        .ok_or_else(|| BlockError::ty("a sequence", input).within(block))
}

/// The block on every item of a sequence: `Vec<In>` to `Vec<Out>`.
#[derive(Clone)]
pub struct Map<B> {
    block: B,
}

impl<B> Map<B> {
    /// `block` on every item.
    pub fn new(block: B) -> Self {
        Map { block }
    }
}

impl<B> Block for Map<B>
where
    B: Block,
    B::In: Sized,
{
    type In = Vec<B::In>;
    type Out = Vec<B::Out>;
    fn name(&self) -> Cow<'static, str> {
        "Map".into()
    }
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        let item = item_of(input, "Map")?;
        let out = self.block.check(cx, item).map_err(|e| e.within("Map"))?;
        Ok(Ty::seq(out))
    }
    fn eval(&self, cx: &mut Ctx<'_>, xs: &Vec<B::In>) -> Result<Vec<B::Out>> {
        xs.iter()
            .enumerate()
            .map(|(i, x)| {
                self.block
                    .eval(cx, x)
                    .map_err(|e| e.within(format!("Map[{i}]")))
            })
            .collect()
    }
}

/// A left chain over a sequence: `f(...f(f(init, x1), x2)..., xn)`, where
/// `f` reads `(state, item)` and yields the next state, and `init` (read
/// from `()`) yields the first. An RNN is a `Fold` of its cell. The state
/// types of `init` and `f` must agree (the compiler checks the Rust type,
/// compiling the model checks the shapes).
#[derive(Clone)]
pub struct Fold<F, I> {
    f: F,
    init: I,
}

impl<F, I> Fold<F, I> {
    /// The chain of `f` from `init`; their state types must agree.
    pub fn new<S, X>(f: F, init: I) -> Self
    where
        F: Block<In = (S, X), Out = S>,
        I: Block<In = (), Out = S>,
    {
        Fold { f, init }
    }
}

impl<S, X, F, I> Block for Fold<F, I>
where
    S: Clone,
    X: Clone,
    F: Block<In = (S, X), Out = S>,
    I: Block<In = (), Out = S>,
{
    type In = Vec<X>;
    type Out = S;
    fn name(&self) -> Cow<'static, str> {
        "Fold".into()
    }
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        let item = item_of(input, "Fold")?;
        let s0 = self
            .init
            .check(cx, &Ty::Void)
            .map_err(|e| e.within("Fold.init"))?;
        let s1 = self
            .f
            .check(cx, &Ty::Tuple(vec![s0.clone(), item.clone()]))
            .map_err(|e| e.within("Fold.f"))?;
        if s0 != s1 {
            return Err(BlockError::new(ErrorKind::Mismatch {
                what: "the initial state and the state the function yields differ".into(),
                left: s0,
                right: s1,
            })
            .within("Fold"));
        }
        Ok(s0)
    }
    fn eval(&self, cx: &mut Ctx<'_>, xs: &Vec<X>) -> Result<S> {
        let mut s = self.init.eval(cx, &()).map_err(|e| e.within("Fold.init"))?;
        for (i, x) in xs.iter().enumerate() {
            s = self
                .f
                .eval(cx, &(s, x.clone()))
                .map_err(|e| e.within(format!("Fold.f[{i}]")))?;
        }
        Ok(s)
    }
}

/// A balanced binary tree of `f` over a non-empty sequence: items are
/// combined in pairs, level by level, so the depth is `ceil(log2 n)`
/// (footnote 2 of the Fold paper) and every level is one batch. An empty
/// sequence is an error.
#[derive(Clone)]
pub struct Reduce<F> {
    f: F,
}

impl<F> Reduce<F> {
    /// The balanced reduction by `f`, which combines two items into one.
    pub fn new<X>(f: F) -> Self
    where
        F: Block<In = (X, X), Out = X>,
    {
        Reduce { f }
    }
}

impl<X, F> Block for Reduce<F>
where
    X: Clone,
    F: Block<In = (X, X), Out = X>,
{
    type In = Vec<X>;
    type Out = X;
    fn name(&self) -> Cow<'static, str> {
        "Reduce".into()
    }
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        let item = item_of(input, "Reduce")?;
        let out = self
            .f
            .check(cx, &Ty::Tuple(vec![item.clone(), item.clone()]))
            .map_err(|e| e.within("Reduce"))?;
        if out != *item && *item != Ty::Host {
            return Err(BlockError::new(ErrorKind::Mismatch {
                what: "the function must yield the type of the items it combines".into(),
                left: item.clone(),
                right: out,
            })
            .within("Reduce"));
        }
        Ok(out)
    }
    fn eval(&self, cx: &mut Ctx<'_>, xs: &Vec<X>) -> Result<X> {
        if xs.is_empty() {
            return Err(BlockError::data("cannot reduce an empty sequence").within("Reduce"));
        }
        let mut level: Vec<X> = xs.clone();
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            let mut it = level.into_iter();
            while let Some(a) = it.next() {
                match it.next() {
                    Some(b) => next.push(self.f.eval(cx, &(a, b)).map_err(|e| e.within("Reduce"))?),
                    None => next.push(a),
                }
            }
            level = next;
        }
        level
            .pop()
            .ok_or_else(|| BlockError::data("cannot reduce an empty sequence").within("Reduce"))
    }
}

/// A sequence or an endless repetition, as [`ZipWith`] reads them.
pub trait Zippable {
    /// The item type.
    type Item: Clone;
    /// The length; `None` for an endless repetition.
    fn len_hint(&self) -> Option<usize>;
    /// Item `i` (below the length).
    fn item(&self, i: usize) -> Self::Item;
}

impl<T: Clone> Zippable for Vec<T> {
    type Item = T;
    fn len_hint(&self) -> Option<usize> {
        Some(self.len())
    }
    fn item(&self, i: usize) -> T {
        self[i].clone()
    }
}

impl<T: Clone> Zippable for Repeat<T> {
    type Item = T;
    fn len_hint(&self) -> Option<usize> {
        None
    }
    fn item(&self, _i: usize) -> T {
        self.0.clone()
    }
}

/// `f` on the items of two sequences side by side, stopping at the
/// shorter; either may be a [`crate::Broadcast`] value (not both).
#[derive(Clone)]
pub struct ZipWith<F, A, B> {
    f: F,
    _t: PhantomData<fn(A, B)>,
}

impl<F, A, B> ZipWith<F, A, B> {
    /// Zips with `f`.
    pub fn new(f: F) -> Self {
        ZipWith { f, _t: PhantomData }
    }
}

impl<F, A, B> Block for ZipWith<F, A, B>
where
    A: Zippable,
    B: Zippable,
    F: Block<In = (A::Item, B::Item)>,
{
    type In = (A, B);
    type Out = Vec<F::Out>;
    fn name(&self) -> Cow<'static, str> {
        "ZipWith".into()
    }
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        let (a, b) = match input {
            Ty::Tuple(items) if items.len() == 2 => (&items[0], &items[1]),
            Ty::Host => (&Ty::Host, &Ty::Host),
            other => return Err(BlockError::ty("a pair of sequences", other).within("ZipWith")),
        };
        if matches!((a, b), (Ty::Repeat(_), Ty::Repeat(_))) {
            return Err(BlockError::ty("at least one finite sequence", input).within("ZipWith"));
        }
        let (ia, ib) = (item_of(a, "ZipWith")?, item_of(b, "ZipWith")?);
        let out = self
            .f
            .check(cx, &Ty::Tuple(vec![ia.clone(), ib.clone()]))
            .map_err(|e| e.within("ZipWith"))?;
        Ok(Ty::seq(out))
    }
    fn eval(&self, cx: &mut Ctx<'_>, (a, b): &(A, B)) -> Result<Vec<F::Out>> {
        let n = match (a.len_hint(), b.len_hint()) {
            (Some(x), Some(y)) => x.min(y),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => {
                return Err(BlockError::data("both inputs repeat without end").within("ZipWith"))
            }
        };
        (0..n)
            .map(|i| {
                self.f
                    .eval(cx, &(a.item(i), b.item(i)))
                    .map_err(|e| e.within(format!("ZipWith[{i}]")))
            })
            .collect()
    }
}

/// Which reduction a [`Sum`], [`Mean`] or [`Max`] block runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    Sum,
    Mean,
    Max,
}

macro_rules! pooling {
    ($name:ident, $pool:expr, $doc:literal) => {
        #[doc = $doc]
        ///
        /// An empty sequence yields zeros of the item shape (as Fold).
        #[derive(Clone, Default)]
        pub struct $name {
            item: OnceLock<Ty>,
        }

        impl $name {
            /// The reduction over a sequence of tensors of one shape.
            pub fn new() -> Self {
                Self::default()
            }
        }

        impl Block for $name {
            type In = Vec<Expr>;
            type Out = Expr;
            fn name(&self) -> Cow<'static, str> {
                stringify!($name).into()
            }
            fn check(&self, _cx: &mut Check, input: &Ty) -> Result<Ty> {
                let here = stringify!($name);
                let item = item_of(input, here)?;
                if item.shape().is_none() {
                    return Err(BlockError::ty("a sequence of tensors", input).within(here));
                }
                remember(&self.item, item).map_err(|e| e.within(here))?;
                Ok(item.clone())
            }
            fn eval(&self, cx: &mut Ctx<'_>, xs: &Vec<Expr>) -> Result<Expr> {
                let here = stringify!($name);
                if xs.is_empty() {
                    let ty = recalled(&self.item, here)?;
                    return Expr::zeros(ty, cx.graph, 0)
                        .map_err(|e| BlockError::data(e).within(here));
                }
                let g = &mut *cx.graph;
                match $pool {
                    Pool::Sum => g.sum(xs),
                    Pool::Mean => g.mean(xs),
                    Pool::Max => g.max(xs),
                }
                .at(|| here.into())
            }
        }

        impl_shr!([] $name);
    };
}

pooling!(
    Sum,
    Pool::Sum,
    "The elementwise sum of a sequence of tensors."
);
pooling!(
    Mean,
    Pool::Mean,
    "The elementwise mean of a sequence of tensors."
);
pooling!(
    Max,
    Pool::Max,
    "The elementwise maximum of a sequence of tensors."
);

impl_shr!([B,] Map<B>, [F, I,] Fold<F, I>, [F,] Reduce<F>, [F, A, B,] ZipWith<F, A, B>);
