//! [`Mpi`]: the [`Communicator`] over MPI (rsmpi, Open MPI).
//!
//! MPI is initialised with `MPI_THREAD_FUNNELED`: every MPI call must come
//! from the thread that created the [`Mpi`] (the trainer's thread; the
//! rayon workers that run kernels never call MPI). Dropping it finalises
//! MPI.

use std::sync::Mutex;

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::{Threading, Universe};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, CommunicatorCollectives, Root};
use mpi::Count;

use crate::comm::Communicator;
use crate::error::{DistError, Result};

/// The world communicator of an MPI job.
pub struct Mpi {
    world: SimpleCommunicator,
    /// The send side of [`Communicator::all_reduce_sum`] (rsmpi has no
    /// in-place all-reduce), kept from call to call: a fresh buffer of
    /// megabytes each step is paid again in page faults.
    send: Mutex<Vec<f32>>,
    // Declared last: dropped (MPI_Finalize) after the communicator.
    _universe: Universe,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

/// Whether this process was started by an MPI launcher (`mpirun`,
/// `mpiexec`, `srun`): the variables Open MPI, PMIx and PMI set for their
/// ranks. A process started alone would be a job of one rank, which is
/// rarely what `--distributed` means.
pub fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

impl Mpi {
    /// Initialises MPI (once per process) and returns the world.
    pub fn init() -> Result<Mpi> {
        let (universe, got) = mpi::initialize_with_threading(Threading::Funneled)
            .ok_or_else(|| DistError::Mpi("MPI is already initialised in this process".into()))?;
        if got < Threading::Funneled {
            return Err(DistError::Mpi(format!(
                "the MPI library offers {got:?} threading; sheaf needs Funneled"
            )));
        }
        Ok(Mpi {
            world: universe.world(),
            send: Mutex::new(Vec::new()),
            _universe: universe,
        })
    }
}

fn count(n: usize, what: &str) -> Result<Count> {
    Count::try_from(n)
        .map_err(|_| DistError::Usage(format!("{what}: {n} elements exceed MPI's count")))
}

impl Communicator for Mpi {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn backend(&self) -> &'static str {
        "mpi"
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = count(mine.len(), "all_gather")?;
        let mut counts = vec![0 as Count; self.size()];
        self.world.all_gather_into(&n, &mut counts[..]);
        let mut displs = Vec::with_capacity(counts.len());
        let mut total: usize = 0;
        for &c in &counts {
            displs.push(count(total, "all_gather")?);
            total += c as usize;
        }
        let mut recv = vec![0u8; total];
        {
            let mut part = PartitionMut::new(&mut recv[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(mine, &mut part);
        }
        Ok(counts
            .iter()
            .zip(&displs)
            .map(|(&c, &d)| recv[d as usize..(d + c) as usize].to_vec())
            .collect())
    }

    fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        let mut fresh = Vec::new();
        // Only this thread calls MPI (Funneled): the lock is free.
        let mut kept = self.send.try_lock();
        let send = kept.as_deref_mut().unwrap_or(&mut fresh);
        send.clear();
        send.extend_from_slice(buf);
        self.world
            .all_reduce_into(&send[..], buf, SystemOperation::sum());
        Ok(())
    }

    fn all_reduce_sum_into(&self, send: &[f32], recv: &mut [f32]) -> Result<()> {
        crate::comm::same_len_into(send, recv)?;
        self.world
            .all_reduce_into(send, recv, SystemOperation::sum());
        Ok(())
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        let send = buf.to_vec();
        self.world
            .all_reduce_into(&send[..], buf, SystemOperation::sum());
        Ok(())
    }

    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(DistError::Usage(format!(
                "broadcast from rank {root} in a group of {} ranks",
                self.size()
            )));
        }
        self.world.process_at_rank(root as i32).broadcast_into(buf);
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        self.world.barrier();
        Ok(())
    }
}
