//! Data parallelism across processes and machines for sheaf.
//!
//! Each rank (a process, started by `mpirun`) runs the model on its
//! [`shard`] of every minibatch with any strategy, then [`GradSync`] sums
//! the gradients over the ranks (dense parameters in fused all-reduce
//! buckets, embedding rows as (ids, rows)), and every rank takes the same
//! optimizer step. Parameters start equal ([`broadcast_params`] from rank
//! 0), [`check_same_model`] refuses ranks that run another model, and
//! [`check_in_sync`] compares checksums every few steps so that ranks that
//! drifted apart stop with an error naming the parameter.
//!
//! The collectives go through the small [`Communicator`] seam:
//! - [`Local`]: one process, rank 0 of 1 (code written for several ranks
//!   runs unchanged);
//! - [`Threads`]: ranks as threads of one process (tests, trying it out);
//! - `Mpi` (feature `mpi`): MPI through rsmpi over the system's Open MPI,
//!   for processes on one machine or many. Building it needs Open MPI and
//!   libclang (Debian: `libopenmpi-dev openmpi-bin libclang-dev`);
//! - `Nccl` (feature `nccl`): NCCL, one rank per GPU; tensors on the
//!   rank's GPU are summed and broadcast on the device, so [`GradSync`]
//!   sums dense gradients there. Its unique id travels over one of the
//!   others (MPI across processes, [`Local`] for one rank). cudarc loads
//!   libcuda and libnccl at run time: it builds without either.
//!
//! No feature is on by default.
//!
//! ```
//! use sheaf_dist::{shard, Communicator, Local};
//! let comm = Local;
//! let batch = [10, 11, 12, 13, 14];
//! assert_eq!(shard(&batch, comm.rank(), comm.size()), &batch);
//! ```

mod comm;
mod error;
#[cfg(feature = "mpi")]
mod mpi_comm;
#[cfg(feature = "nccl")]
mod nccl_comm;
mod shard;
mod sync;

pub use comm::{Communicator, CommunicatorExt, Local, Threads};
pub use error::{DistError, Result};
#[cfg(feature = "mpi")]
pub use mpi_comm::{launched_by_mpirun, Mpi};
#[cfg(feature = "nccl")]
pub use nccl_comm::{local_rank, Nccl};
pub use shard::{balanced_shard, shard};
pub use sync::{
    broadcast_params, check_in_sync, check_same_model, GradSync, SyncStats, DEFAULT_BUCKET_BYTES,
};
