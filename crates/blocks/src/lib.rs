//! TensorFlow Fold's block combinators (Looks et al., ICLR 2017) for
//! sheaf, with block types checked by the Rust compiler.
//!
//! A [`Block`] reads an input (a host value such as a parse tree, or graph
//! values) and adds the nodes computing its output to a graph. Blocks
//! compose into models over structured input: [`Map`] over sequences,
//! [`Fold`] and [`Reduce`] chains, [`Record`] fields, [`OneOf`] dispatch,
//! [`ForwardDeclaration`] for recursion over arbitrary trees. A model is
//! written for ONE input; [`Compiled`] builds one graph for a whole batch
//! and the scheduler batches equal operations across inputs.
//!
//! Block types are Rust types: composing a block that yields a sequence
//! with one that expects a tensor does not compile. Shapes are checked
//! once when the model is compiled, with errors naming the block path
//! (`Record.left > Map > Function(fc)`).
#![forbid(unsafe_code)]
#![allow(clippy::result_large_err)]

mod basic;
mod block;
mod choice;
mod compiled;
mod composition;
mod error;
mod layers;
mod recursion;
mod sequence;
mod structure;
mod types;

pub use basic::{
    Broadcast, Concat, Function, GraphFn, Identity, InputTransform, OpCall, Scalar, Tensor, Zeros,
};
pub use block::{Block, BlockExt, BoxBlock, Check, Ctx, Metrics, Pipe};
pub use choice::{OneOf, Optional};
pub use compiled::{Compiled, Loss};
pub use composition::{Composition, Handle, Sources};
pub use error::{BlockError, ErrorKind, Result};
pub use layers::{Activation, Embedding, Metric, FC};
pub use recursion::{ForwardDeclaration, Reference};
pub use sequence::{Fold, Map, Max, Mean, Reduce, Sum, ZipWith, Zippable};
pub use structure::{field, AllOf, Field, Record};
pub use types::{Exprs, Repeat, Ty, Value};
