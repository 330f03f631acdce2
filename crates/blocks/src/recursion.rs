//! [`ForwardDeclaration`]: recursive models over arbitrary trees.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use crate::block::{impl_shr, BoxBlock, Check, Ctx};
use crate::error::{BlockError, ErrorKind, Result};
use crate::{Block, Ty};

/// Below this much stack left, a recursive call continues on a new heap
/// segment of [`STACK_SEGMENT`] bytes, so trees thousands of levels deep
/// build without overflowing the thread's stack.
const STACK_RED_ZONE: usize = 128 * 1024;
const STACK_SEGMENT: usize = 4 * 1024 * 1024;

struct Declaration<I: ?Sized, O> {
    name: String,
    out: Ty,
    block: OnceLock<BoxBlock<I, O>>,
}

/// A block declared before it is defined, so that it can refer to itself:
/// declare it with its output type, use [`ForwardDeclaration::reference`]
/// inside its own definition, then [`ForwardDeclaration::resolve`] it.
///
/// ```
/// use sheaf_autodiff::{Expr, Graph};
/// use sheaf_blocks::*;
///
/// enum Tree { Leaf(f32), Node(Box<Pair>) }
/// struct Pair { left: Tree, right: Tree }
///
/// // The sum of a tree's leaves, recursively.
/// let decl = ForwardDeclaration::<Tree, Expr>::new("tree", Ty::tensor([1]));
/// let add = Function::new("add", |g: &mut Graph, (a, b): (Expr, Expr)| g.add(a, b));
/// let node = Record::new((
///     field("left", |p: &Pair| &p.left, decl.reference()),
///     field("right", |p: &Pair| &p.right, decl.reference()),
/// )) >> add;
/// let tree = OneOf::new()
///     .case("leaf", |t: &Tree| match t { Tree::Leaf(x) => Some(x), _ => None }, Scalar)
///     .case("node", |t: &Tree| match t { Tree::Node(p) => Some(&**p), _ => None }, node);
/// decl.resolve(tree)?;
/// # Ok::<(), BlockError>(())
/// ```
///
/// References hold the declaration, and its definition holds references:
/// the blocks of a recursive model stay alive as long as the model (a
/// reference cycle of a few hundred bytes, never freed).
pub struct ForwardDeclaration<I: ?Sized, O> {
    decl: Arc<Declaration<I, O>>,
}

impl<I: ?Sized, O> Clone for ForwardDeclaration<I, O> {
    fn clone(&self) -> Self {
        ForwardDeclaration {
            decl: Arc::clone(&self.decl),
        }
    }
}

impl<I: ?Sized + 'static, O: 'static> ForwardDeclaration<I, O> {
    /// A declaration `name` whose definition will yield `out`.
    pub fn new(name: &str, out: Ty) -> Self {
        ForwardDeclaration {
            decl: Arc::new(Declaration {
                name: name.to_owned(),
                out,
                block: OnceLock::new(),
            }),
        }
    }

    /// A block that runs the definition (usable before it is given).
    pub fn reference(&self) -> Reference<I, O> {
        Reference {
            decl: Arc::clone(&self.decl),
        }
    }

    /// Gives the definition; a second definition is an error.
    pub fn resolve<B: Block<In = I, Out = O> + 'static>(&self, block: B) -> Result<()> {
        self.decl.block.set(Box::new(block)).map_err(|_| {
            BlockError::usage(format!(
                "the forward declaration `{}` is already resolved",
                self.decl.name
            ))
        })
    }
}

/// A use of a [`ForwardDeclaration`].
pub struct Reference<I: ?Sized, O> {
    decl: Arc<Declaration<I, O>>,
}

impl<I: ?Sized, O> Clone for Reference<I, O> {
    fn clone(&self) -> Self {
        Reference {
            decl: Arc::clone(&self.decl),
        }
    }
}

impl<I: ?Sized, O> Reference<I, O> {
    fn definition(&self) -> Result<&BoxBlock<I, O>> {
        self.decl.block.get().ok_or_else(|| {
            BlockError::usage(format!(
                "the forward declaration `{}` was never resolved",
                self.decl.name
            ))
        })
    }

    fn segment(&self) -> String {
        format!("ForwardDeclaration({})", self.decl.name)
    }
}

impl<I: ?Sized, O> Block for Reference<I, O> {
    type In = I;
    type Out = O;
    fn name(&self) -> Cow<'static, str> {
        self.segment().into()
    }
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        let key = Arc::as_ptr(&self.decl) as *const () as usize;
        // Inside its own definition the declared type stands for the
        // result; the definition itself is checked once, at the first use.
        if cx.declarations.insert(key) {
            let def = self.definition().map_err(|e| e.within(self.segment()))?;
            let ty = def.check(cx, input).map_err(|e| e.within(self.segment()))?;
            if ty != self.decl.out {
                return Err(BlockError::new(ErrorKind::Mismatch {
                    what: "the declared type and the definition's differ".into(),
                    left: self.decl.out.clone(),
                    right: ty,
                })
                .within(self.segment()));
            }
        }
        Ok(self.decl.out.clone())
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &I) -> Result<O> {
        let def = self.definition().map_err(|e| e.within(self.segment()))?;
        stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || def.eval(cx, x))
            .map_err(|e| e.within(self.segment()))
    }
}

impl_shr!([I: ?Sized, O,] Reference<I, O>);
