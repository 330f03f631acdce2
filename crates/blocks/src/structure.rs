//! Blocks over the fields of a host value ([`Record`]) and several blocks
//! on one input ([`AllOf`]); both yield tuples.

use std::borrow::Cow;
use std::marker::PhantomData;

use crate::block::{impl_shr, Check, Ctx};
use crate::error::Result;
use crate::{Block, Ty};

/// One field of a [`Record`]: a name, how to reach the field from the
/// record (`|p: &Pair| &p.left`), and the block that reads it.
pub struct Field<R: ?Sized, P, B> {
    name: &'static str,
    project: P,
    block: B,
    _r: PhantomData<fn(&R)>,
}

impl<R: ?Sized, P: Clone, B: Clone> Clone for Field<R, P, B> {
    fn clone(&self) -> Self {
        Field {
            name: self.name,
            project: self.project.clone(),
            block: self.block.clone(),
            _r: PhantomData,
        }
    }
}

/// A field of a [`Record`] over records of type `R`. A name the struct
/// lacks in `project` is a compile error, as is a block that cannot read
/// the field's type.
pub fn field<R: ?Sized, B, P>(name: &'static str, project: P, block: B) -> Field<R, P, B>
where
    B: Block,
    P: for<'a> Fn(&'a R) -> &'a B::In + Send + Sync,
{
    Field {
        name,
        project,
        block,
        _r: PhantomData,
    }
}

/// Reads fields of a host record (a struct) with one block each and yields
/// the tuple of their outputs, in field order: `Record::new((field("left",
/// |p: &Pair| &p.left, a), field("right", |p: &Pair| &p.right, b)))`.
#[derive(Clone)]
pub struct Record<F> {
    fields: F,
}

impl<F> Record<F> {
    /// A record of the given tuple of [`field`]s.
    pub fn new(fields: F) -> Self {
        Record { fields }
    }
}

/// Several blocks on one input; yields the tuple of their outputs.
#[derive(Clone)]
pub struct AllOf<T> {
    blocks: T,
}

impl<T> AllOf<T> {
    /// The tuple of blocks, each reading the same input.
    pub fn new(blocks: T) -> Self {
        AllOf { blocks }
    }
}

macro_rules! record_and_all_of {
    ($($p:ident $b:ident $i:tt),+) => {
        impl<R: ?Sized, $($p, $b),+> Block for Record<($(Field<R, $p, $b>,)+)>
        where
            $($b: Block, $p: for<'a> Fn(&'a R) -> &'a $b::In + Send + Sync,)+
        {
            type In = R;
            type Out = ($($b::Out,)+);
            fn name(&self) -> Cow<'static, str> {
                "Record".into()
            }
            fn check(&self, cx: &mut Check, _input: &Ty) -> Result<Ty> {
                Ok(Ty::Tuple(vec![$(
                    self.fields.$i.block.check(cx, &Ty::Host)
                        .map_err(|e| e.within(format!("Record.{}", self.fields.$i.name)))?,
                )+]))
            }
            fn eval(&self, cx: &mut Ctx<'_>, x: &R) -> Result<Self::Out> {
                Ok(($({
                    let f = &self.fields.$i;
                    f.block.eval(cx, (f.project)(x))
                        .map_err(|e| e.within(format!("Record.{}", f.name)))?
                },)+))
            }
        }

        impl<I: ?Sized, $($b),+> Block for AllOf<($($b,)+)>
        where
            $($b: Block<In = I>,)+
        {
            type In = I;
            type Out = ($($b::Out,)+);
            fn name(&self) -> Cow<'static, str> {
                "AllOf".into()
            }
            fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
                Ok(Ty::Tuple(vec![$(
                    self.blocks.$i.check(cx, input)
                        .map_err(|e| e.within(concat!("AllOf.", stringify!($i))))?,
                )+]))
            }
            fn eval(&self, cx: &mut Ctx<'_>, x: &I) -> Result<Self::Out> {
                Ok(($(
                    self.blocks.$i.eval(cx, x)
                        .map_err(|e| e.within(concat!("AllOf.", stringify!($i))))?,
                )+))
            }
        }
    };
}

record_and_all_of!(P0 B0 0);
record_and_all_of!(P0 B0 0, P1 B1 1);
record_and_all_of!(P0 B0 0, P1 B1 1, P2 B2 2);
record_and_all_of!(P0 B0 0, P1 B1 1, P2 B2 2, P3 B3 3);
record_and_all_of!(P0 B0 0, P1 B1 1, P2 B2 2, P3 B3 3, P4 B4 4);
record_and_all_of!(P0 B0 0, P1 B1 1, P2 B2 2, P3 B3 3, P4 B4 4, P5 B5 5);

impl_shr!([F,] Record<F>, [T,] AllOf<T>);
