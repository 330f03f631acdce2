//! Dispatch on the input ([`OneOf`]) and missing values ([`Optional`]).

use std::borrow::Cow;
use std::sync::OnceLock;

use crate::block::{impl_shr, recalled, remember, Check, Ctx};
use crate::error::{BlockError, ErrorKind, Result};
use crate::types::Value;
use crate::{Block, Ty};

/// A case of a [`OneOf`], its block's type erased.
trait Case<I: ?Sized, O>: Send + Sync {
    fn name(&self) -> &'static str;
    fn check(&self, cx: &mut Check) -> Result<Ty>;
    /// `None` if the case does not match `x`.
    fn try_eval(&self, cx: &mut Ctx<'_>, x: &I) -> Option<Result<O>>;
}

struct CaseOf<S, B> {
    name: &'static str,
    select: S,
    block: B,
}

impl<I: ?Sized, S, B> Case<I, B::Out> for CaseOf<S, B>
where
    B: Block,
    S: for<'a> Fn(&'a I) -> Option<&'a B::In> + Send + Sync,
{
    fn name(&self) -> &'static str {
        self.name
    }
    fn check(&self, cx: &mut Check) -> Result<Ty> {
        self.block.check(cx, &Ty::Host)
    }
    fn try_eval(&self, cx: &mut Ctx<'_>, x: &I) -> Option<Result<B::Out>> {
        (self.select)(x).map(|y| self.block.eval(cx, y))
    }
}

/// Dispatch on the input: the first case whose selector matches runs, on
/// the part of the input the selector returns (for an enum, the variant's
/// payload). Every case yields the same Rust type (checked by the
/// compiler) and the same shapes (checked when compiled).
///
/// ```
/// # use sheaf_blocks::{OneOf, Scalar, Zeros};
/// enum Leaf { Known(f32), Unknown }
/// let b = OneOf::<Leaf, _>::new()
///     .case("known", |l: &Leaf| match l { Leaf::Known(x) => Some(x), _ => None }, Scalar)
///     .case("unknown", |l: &Leaf| match l { Leaf::Unknown => Some(&()), _ => None }, Zeros::new([1]));
/// ```
pub struct OneOf<I: ?Sized, O> {
    cases: Vec<Box<dyn Case<I, O>>>,
}

impl<I: ?Sized, O> Default for OneOf<I, O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: ?Sized, O> OneOf<I, O> {
    /// No cases yet.
    pub fn new() -> Self {
        OneOf { cases: Vec::new() }
    }

    /// Adds a case: `select` returns the part of the input `block` reads,
    /// or `None` when the case does not apply.
    pub fn case<B, S>(mut self, name: &'static str, select: S, block: B) -> Self
    where
        I: 'static,
        B: Block<Out = O> + 'static,
        S: for<'a> Fn(&'a I) -> Option<&'a B::In> + Send + Sync + 'static,
    {
        self.cases.push(Box::new(CaseOf {
            name,
            select,
            block,
        }));
        self
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.cases.iter().map(|c| c.name()).collect();
        names.join(", ")
    }
}

impl<I: ?Sized, O> Block for OneOf<I, O> {
    type In = I;
    type Out = O;
    fn name(&self) -> Cow<'static, str> {
        "OneOf".into()
    }
    fn check(&self, cx: &mut Check, _input: &Ty) -> Result<Ty> {
        let mut first: Option<(&str, Ty)> = None;
        for c in &self.cases {
            let ty = c
                .check(cx)
                .map_err(|e| e.within(format!("OneOf[{}]", c.name())))?;
            match &first {
                None => first = Some((c.name(), ty)),
                Some((name, t)) if *t != ty => {
                    return Err(BlockError::new(ErrorKind::Mismatch {
                        what: format!("cases `{name}` and `{}` yield different types", c.name()),
                        left: t.clone(),
                        right: ty,
                    })
                    .within("OneOf"))
                }
                Some(_) => {}
            }
        }
        first
            .map(|(_, t)| t)
            .ok_or_else(|| BlockError::usage("a OneOf needs at least one case").within("OneOf"))
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &I) -> Result<O> {
        for c in &self.cases {
            if let Some(r) = c.try_eval(cx, x) {
                return r.map_err(|e| e.within(format!("OneOf[{}]", c.name())));
            }
        }
        Err(BlockError::data(format!(
            "no case matches the input (cases: {})",
            self.names()
        ))
        .within("OneOf"))
    }
}

/// A block on an `Option`: `Some(x)` runs the block on `x`, `None` yields
/// zeros of the block's output type (empty sequences), as Fold's
/// `Optional`.
#[derive(Clone)]
pub struct Optional<B> {
    block: B,
    ty: OnceLock<Ty>,
}

impl<B> Optional<B> {
    /// `block` on present values, zeros for missing ones.
    pub fn new(block: B) -> Self {
        Optional {
            block,
            ty: OnceLock::new(),
        }
    }
}

impl<B> Block for Optional<B>
where
    B: Block,
    B::In: Sized,
    B::Out: Value,
{
    type In = Option<B::In>;
    type Out = B::Out;
    fn name(&self) -> Cow<'static, str> {
        "Optional".into()
    }
    fn check(&self, cx: &mut Check, _input: &Ty) -> Result<Ty> {
        let ty = self
            .block
            .check(cx, &Ty::Host)
            .map_err(|e| e.within("Optional"))?;
        remember(&self.ty, &ty).map_err(|e| e.within("Optional"))?;
        Ok(ty)
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &Option<B::In>) -> Result<B::Out> {
        match x {
            Some(x) => self.block.eval(cx, x).map_err(|e| e.within("Optional")),
            None => {
                let ty = recalled(&self.ty, "Optional")?;
                B::Out::zeros(ty, cx.graph, 0).map_err(|e| BlockError::data(e).within("Optional"))
            }
        }
    }
}

impl_shr!([I: ?Sized, O,] OneOf<I, O>, [B,] Optional<B>);
