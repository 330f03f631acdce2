//! Blocks that make tensors from host data ([`Scalar`], [`Tensor`],
//! [`Zeros`]), transform host data ([`InputTransform`]), concatenate graph
//! values ([`Concat`]) or pass a value on ([`Identity`], [`Broadcast`]).
//! [`crate::Function`] has a file of its own.

use std::borrow::Cow;
use std::marker::PhantomData;

use sheaf_autodiff::{Expr, GraphError};
use sheaf_tensor::{DType, Device, Shape};

use crate::block::{impl_shr, Check, Ctx};
use crate::error::{At, BlockError, Result};
use crate::types::{Exprs, Repeat, Value};
use crate::{Block, Ty};

/// A host `f32` as a tensor `[1]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scalar;

impl Block for Scalar {
    type In = f32;
    type Out = Expr;
    fn name(&self) -> Cow<'static, str> {
        "Scalar".into()
    }
    fn check(&self, _cx: &mut Check, _input: &Ty) -> Result<Ty> {
        Ok(Ty::tensor([1]))
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &f32) -> Result<Expr> {
        let t = sheaf_tensor::Tensor::from_vec(vec![*x], [1]).map_err(tensor_error("Scalar"))?;
        Ok(cx.graph.input(t))
    }
}

fn tensor_error(what: &'static str) -> impl Fn(sheaf_tensor::TensorError) -> BlockError {
    move |source| {
        BlockError::from(GraphError::Tensor {
            context: what.into(),
            source: Box::new(source),
        })
        .within(what)
    }
}

/// A host array (`Vec<f32>`, row-major) as a tensor of a fixed shape; an
/// array of another length is an error naming both.
#[derive(Debug, Clone, Copy)]
pub struct Tensor {
    shape: Shape,
}

impl Tensor {
    /// Host arrays of `shape`.
    pub fn new(shape: impl Into<Shape>) -> Self {
        Tensor {
            shape: shape.into(),
        }
    }
}

impl Block for Tensor {
    type In = Vec<f32>;
    type Out = Expr;
    fn name(&self) -> Cow<'static, str> {
        format!("Tensor{}", self.shape).into()
    }
    fn check(&self, _cx: &mut Check, _input: &Ty) -> Result<Ty> {
        Ok(Ty::Tensor(self.shape))
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &Vec<f32>) -> Result<Expr> {
        let n = self.shape.numel().unwrap_or(usize::MAX);
        if x.len() != n {
            return Err(BlockError::data(format!(
                "a host array of {} values cannot fill a tensor {} ({n} values)",
                x.len(),
                self.shape
            ))
            .within(self.name()));
        }
        let t = sheaf_tensor::Tensor::from_slice(x, self.shape).map_err(tensor_error("Tensor"))?;
        Ok(cx.graph.input(t))
    }
}

/// A tensor of zeros of a fixed shape, whatever the input (the initial
/// state of a [`crate::Fold`] reads `()`).
pub struct Zeros<I: ?Sized = ()> {
    shape: Shape,
    _in: PhantomData<fn(&I)>,
}

impl<I: ?Sized> Clone for Zeros<I> {
    fn clone(&self) -> Self {
        Zeros {
            shape: self.shape,
            _in: PhantomData,
        }
    }
}

impl<I: ?Sized> Zeros<I> {
    /// Zeros of `shape`.
    pub fn new(shape: impl Into<Shape>) -> Self {
        Zeros {
            shape: shape.into(),
            _in: PhantomData,
        }
    }
}

impl<I: ?Sized> Block for Zeros<I> {
    type In = I;
    type Out = Expr;
    fn name(&self) -> Cow<'static, str> {
        format!("Zeros{}", self.shape).into()
    }
    fn check(&self, _cx: &mut Check, _input: &Ty) -> Result<Ty> {
        Ok(Ty::Tensor(self.shape))
    }
    fn eval(&self, cx: &mut Ctx<'_>, _x: &I) -> Result<Expr> {
        let t = sheaf_tensor::Tensor::zeros(self.shape, DType::F32, Device::Cpu)
            .map_err(tensor_error("Zeros"))?;
        Ok(cx.graph.input(t))
    }
}

/// Passes its input on unchanged.
pub struct Identity<T> {
    _t: PhantomData<fn(T) -> T>,
}

impl<T> Identity<T> {
    /// The identity on `T`.
    pub fn new() -> Self {
        Identity { _t: PhantomData }
    }
}

impl<T> Default for Identity<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for Identity<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T: Clone> Block for Identity<T> {
    type In = T;
    type Out = T;
    fn name(&self) -> Cow<'static, str> {
        "Identity".into()
    }
    fn check(&self, _cx: &mut Check, input: &Ty) -> Result<Ty> {
        Ok(input.clone())
    }
    fn eval(&self, _cx: &mut Ctx<'_>, x: &T) -> Result<T> {
        Ok(x.clone())
    }
}

/// Host pre-processing: any Rust function of the (borrowed) input, e.g.
/// splitting a sentence into words or mapping a word to its id.
pub struct InputTransform<A: ?Sized, B, F> {
    name: Cow<'static, str>,
    f: F,
    _t: PhantomData<fn(&A) -> B>,
}

impl<A: ?Sized, B, F: Clone> Clone for InputTransform<A, B, F> {
    fn clone(&self) -> Self {
        InputTransform {
            name: self.name.clone(),
            f: self.f.clone(),
            _t: PhantomData,
        }
    }
}

impl<A: ?Sized, B, F> InputTransform<A, B, F>
where
    F: Fn(&A) -> B + Send + Sync,
{
    /// The transform `f`, called `name` in error paths.
    pub fn new(name: impl Into<Cow<'static, str>>, f: F) -> Self {
        InputTransform {
            name: name.into(),
            f,
            _t: PhantomData,
        }
    }
}

impl<A: ?Sized, B, F> Block for InputTransform<A, B, F>
where
    F: Fn(&A) -> B + Send + Sync,
{
    type In = A;
    type Out = B;
    fn name(&self) -> Cow<'static, str> {
        format!("InputTransform({})", self.name).into()
    }
    fn check(&self, _cx: &mut Check, _input: &Ty) -> Result<Ty> {
        Ok(Ty::Host)
    }
    fn eval(&self, _cx: &mut Ctx<'_>, x: &A) -> Result<B> {
        Ok((self.f)(x))
    }
}

/// Vectors of a tuple, one after another: `(a [n], b [m])` gives `[n + m]`.
pub struct Concat<I> {
    _t: PhantomData<fn(I)>,
}

impl<I> Concat<I> {
    /// Concatenation of the tuple's vectors.
    pub fn new() -> Self {
        Concat { _t: PhantomData }
    }
}

impl<I> Default for Concat<I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I> Clone for Concat<I> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<I: Exprs> Block for Concat<I> {
    type In = I;
    type Out = Expr;
    fn name(&self) -> Cow<'static, str> {
        "Concat".into()
    }
    fn check(&self, _cx: &mut Check, input: &Ty) -> Result<Ty> {
        let bad = || BlockError::ty("a tuple of vectors", input).within("Concat");
        let Ty::Tuple(items) = input else {
            return Err(bad());
        };
        let mut n = 0;
        for t in items {
            match t.shape().map(|s| s.dims().to_vec()).as_deref() {
                Some([k]) => n += k,
                _ => return Err(bad()),
            }
        }
        Ok(Ty::tensor([n]))
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &I) -> Result<Expr> {
        cx.graph.concat(&x.exprs()).at(|| "Concat".into())
    }
}

/// One value as an endless sequence of itself, for [`crate::ZipWith`]
/// next to a finite sequence (Fold's `Broadcast`).
pub struct Broadcast<T> {
    _t: PhantomData<fn(T)>,
}

impl<T> Broadcast<T> {
    /// Repeats its input.
    pub fn new() -> Self {
        Broadcast { _t: PhantomData }
    }
}

impl<T> Default for Broadcast<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for Broadcast<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T: Value> Block for Broadcast<T> {
    type In = T;
    type Out = Repeat<T>;
    fn name(&self) -> Cow<'static, str> {
        "Broadcast".into()
    }
    fn check(&self, _cx: &mut Check, input: &Ty) -> Result<Ty> {
        Ok(Ty::Repeat(Box::new(input.clone())))
    }
    fn eval(&self, _cx: &mut Ctx<'_>, x: &T) -> Result<Repeat<T>> {
        Ok(Repeat(x.clone()))
    }
}

impl_shr!(
    [] Scalar,
    [] Tensor,
    [I: ?Sized,] Zeros<I>,
    [T,] Identity<T>,
    [A: ?Sized, B, F,] InputTransform<A, B, F>,
    [I,] Concat<I>,
    [T,] Broadcast<T>,
);
