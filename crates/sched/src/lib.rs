//! The scheduler of sheaf: finds the nodes of a graph that can run as ONE
//! kernel call (equal signature) and runs them, forward and backward, with
//! results equal to the unbatched [`sheaf_autodiff::Sequential`] executor.
//!
//! Strategies ([`Strategy`]): `Depth` (TensorFlow Fold: equal signature at
//! equal depth) and `Agenda` (DyNet: a ready-node agenda that runs the
//! signature with the lowest mean depth). Switching strategy changes no
//! model code: it is one argument of [`Executor::new`].
//!
//! Bucketing (MXNet / Wolfram) is the third strategy, but a runner,
//! [`Bucketing`], rather than a [`Strategy`] variant: it decides how graphs
//! are BUILT (instances grouped by length into logarithmic buckets and
//! padded), not how a built graph is planned. The model is one function of
//! (instance, padded length); padding-invariant sequence ops keep results
//! equal to the unpadded run. See the `bucket` module docs.
//!
//! [`DataParallel`] runs the parts of one minibatch side by side (one graph and
//! executor per thread, one parameter store): data parallelism for CPUs
//! with a few cores. [`Pipeline`] builds the next minibatch's graph while
//! the current one runs. [`shuffled_batches`] and [`batches`] cut a data
//! set's indices into minibatches.
#![forbid(unsafe_code)]
#![allow(clippy::result_large_err)]

mod arena;
mod auto;
mod backward;
mod batches;
mod block;
mod bucket;
mod data_parallel;
mod dot;
mod error;
mod exec;
mod leaves;
mod pipeline;
mod plan;
mod rows;
mod stats;
mod summed;

/// `use sheaf_sched::prelude::*`: [`sheaf_autodiff::prelude`] (graphs,
/// parameters, optimizers, tensors, `Result`) and this crate's runners:
/// [`Executor`], [`Strategy`], [`PlanStats`], [`SchedError`],
/// [`DataParallel`], [`Pipeline`], [`Bucketing`] and the minibatch helpers.
pub mod prelude {
    pub use crate::{
        batches, shuffled_batches, Bucketing, DataParallel, Executor, Pipeline, PlanStats,
        SchedError, Strategy,
    };
    pub use sheaf_autodiff::prelude::*;
}

pub use batches::{batches, shuffled_batches};
pub use bucket::{Bucket, Bucketing};
pub use data_parallel::DataParallel;
pub use error::{Result, SchedError};
pub use exec::Executor;
pub use pipeline::Pipeline;
pub use plan::{plan, Batch, Plan, Planner, Strategy};
pub use stats::PlanStats;
