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
//!
//! # Example
//!
//! A bag-of-words regressor: each input is a list of word ids; the model
//! embeds them, averages the vectors, and scores the average. One call runs
//! a whole batch of lists of different lengths as one graph, every
//! `lookup` of the batch in one kernel call.
//!
//! ```
//! use sheaf_blocks::prelude::*;
//!
//! struct Example { words: Vec<u32>, target: f32 }
//!
//! let mut store = ParamStore::new();
//! let embed = Embedding::new_seeded(&mut store, "emb", 100, 8, Init::Uniform { low: -0.1, high: 0.1 }, 0)?;
//! let score = FC::new_seeded(&mut store, "score", 8, 1, Activation::Identity, 1)?;
//! let loss = Function::new("loss", |g: &mut Graph, (y, t): (Expr, Expr)| g.squared_distance(y, t));
//! let model = Record::new((
//!     field("words", |e: &Example| &e.words, Map::new(embed) >> Mean::new() >> score),
//!     field("target", |e: &Example| &e.target, Scalar),
//! )) >> loss;
//!
//! // Types were checked by rustc; shapes are checked here, once.
//! let mut compiled = Compiled::new(model)?;
//! let batch = [
//!     Example { words: vec![1, 2, 3], target: 1.0 },
//!     Example { words: vec![4], target: -1.0 },
//! ];
//! let mut opt = Optimizer::sgd(Sgd { lr: 0.1, momentum: 0.0, weight_decay: 0.0 });
//! let first = compiled.backward(&store, &batch, &Loss::outputs().mean())?;
//! opt.step(&mut store)?;
//! for _ in 0..50 {
//!     compiled.backward(&store, &batch, &Loss::outputs().mean())?;
//!     opt.step(&mut store)?;
//! }
//! let last = compiled.backward(&store, &batch, &Loss::outputs().mean())?;
//! assert!(last < first);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![allow(clippy::result_large_err)]

mod basic;
mod block;
mod choice;
mod compiled;
mod composition;
mod error;
mod function;
mod layers;
mod recursion;
mod sequence;
mod structure;
mod types;

/// `use sheaf_blocks::prelude::*`: every block and combinator, the
/// graph, parameter, optimizer and tensor types a model needs
/// ([`sheaf_autodiff::prelude`]'s, the executor and minibatch helpers of
/// [`sheaf_sched`]), without clashes: the [`Tensor`] block (a constant)
/// is `TensorBlock` here, so `Tensor` is the tensor type. Its `Result` is
/// [`sheaf_autodiff::Result`], as in the other crates' preludes (so they
/// glob together); this crate's is `sheaf_blocks::Result`.
pub mod prelude {
    pub use crate::basic::Tensor as TensorBlock;
    pub use crate::{
        field, Activation, AllOf, Block, BlockError, BlockExt, BoxBlock, Broadcast, Check,
        Compiled, Composition, Concat, Ctx, Embedding, ErrorKind, Exprs, Field, Fold,
        ForwardDeclaration, Function, GraphFn, Handle, Identity, InputTransform, Loss, Map, Max,
        Mean, Metric, Metrics, OneOf, OpCall, Optional, Pipe, Record, Reduce, Reference, Repeat,
        Scalar, Sources, Sum, Ty, Value, Zeros, ZipWith, Zippable, FC,
    };
    pub use sheaf_autodiff::prelude::*;
    pub use sheaf_sched::{batches, shuffled_batches, Executor, PlanStats, Strategy};
}

pub use basic::{Broadcast, Concat, Identity, InputTransform, Scalar, Tensor, Zeros};
pub use block::{Block, BlockExt, BoxBlock, Check, Ctx, Metrics, Pipe};
pub use choice::{OneOf, Optional};
pub use compiled::{Compiled, Loss};
pub use composition::{Composition, Handle, Sources};
pub use error::{BlockError, ErrorKind, Result};
pub use function::{Function, GraphFn, OpCall};
pub use layers::{Activation, Embedding, Metric, FC};
pub use recursion::{ForwardDeclaration, Reference};
pub use sequence::{Fold, Map, Max, Mean, Reduce, Sum, ZipWith, Zippable};
pub use structure::{field, AllOf, Field, Record};
pub use types::{Exprs, Repeat, Ty, Value};
