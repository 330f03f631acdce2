//! The tape of sheaf: a lazily built [`Graph`] of per-instance nodes, the
//! op set with batched forward and backward rules ([`Op`]), parameters and
//! the [`Sequential`] reference executor.
//!
//! Users build the graph for ONE instance (or many, summed into one loss);
//! nothing is computed while building: each call appends a node, checks its
//! shapes and returns an [`Expr`]. An executor computes values, and the
//! scheduler crate batches nodes of equal signature into single kernel
//! calls, with results equal to [`Sequential`]'s.
#![forbid(unsafe_code)]
// Op kernels return `sheaf_tensor::Result`, whose error keeps its shapes
// inline (see that crate); `GraphError` itself boxes it.
#![allow(clippy::result_large_err)]

mod error;
mod exec;
pub mod gradcheck;
mod graph;
mod id;
mod op;
mod ops;
mod params;
pub mod testing;

pub use error::{GraphError, Result};
pub use exec::Sequential;
pub use graph::{Graph, Node, NodeKind, SigInfo};
pub use id::{Expr, NodeId, OpId, SigId};
pub use op::{ArgRole, Attr, Backward, Cost, Forward, Op, ShapeError};
pub use params::{GradAcc, Param, ParamId, ParamStore};
