//! [`Communicator`]: the collectives data parallelism needs, and the two
//! backends that need no system package: [`Local`] (one process, one rank)
//! and [`Threads`] (ranks as threads of one process, for tests and for
//! trying a multi-rank setup without MPI).

use std::sync::{Arc, Condvar, Mutex};

use bytemuck::Pod;
use sheaf_tensor::{DType, Device, Tensor};

use crate::error::{DistError, Result};

/// The collectives of a group of ranks. Every rank must call the same
/// collectives in the same order with matching lengths (as in MPI); a
/// mismatch is an error where the backend can see it, otherwise undefined.
///
/// Required: rank, size, [`Communicator::all_gather_bytes`] and
/// [`Communicator::abort`]. Everything else has a default built on the
/// all-gather; a backend with native collectives (MPI) overrides them. The
/// tensor collectives stage device tensors through host memory, unless the
/// backend reduces on the device ([`Communicator::reduces_on`]: NCCL).
pub trait Communicator {
    /// This process's rank, `0..size`.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn size(&self) -> usize;

    /// The backend's name, for logs (`local`, `threads`, `mpi`).
    fn backend(&self) -> &'static str;

    /// Every rank's `mine`, in rank order (lengths may differ by rank).
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Ends every rank of the job with exit code `code` (MPI_Abort): the
    /// way one rank's error stops the others instead of leaving them
    /// waiting in a collective.
    fn abort(&self, code: i32) -> !;

    /// Sums `buf` over the ranks, in place; every rank gets the same bits.
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        sum_in_rank_order(self, buf)
    }

    /// [`Communicator::all_reduce_sum`] from `send` into `recv` (of as many
    /// elements): a backend that sums out of place (MPI) saves the copy.
    fn all_reduce_sum_into(&self, send: &[f32], recv: &mut [f32]) -> Result<()> {
        same_len_into(send, recv)?;
        recv.copy_from_slice(send);
        self.all_reduce_sum(recv)
    }

    /// [`Communicator::all_reduce_sum`] for `f64`.
    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        sum_in_rank_order(self, buf)
    }

    /// Overwrites `buf` on every rank with `root`'s.
    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<()> {
        let all = self.all_gather(&*buf)?;
        let theirs = all.get(root).ok_or(DistError::Usage(format!(
            "broadcast from rank {root} in a group of {} ranks",
            self.size()
        )))?;
        if theirs.len() != buf.len() {
            return Err(mismatch("broadcast", root, theirs.len(), buf.len()));
        }
        buf.copy_from_slice(theirs);
        Ok(())
    }

    /// Waits until every rank got here.
    fn barrier(&self) -> Result<()> {
        self.all_gather_bytes(&[]).map(|_| ())
    }

    /// Whether [`Communicator::all_reduce_sum_tensor`] and
    /// [`Communicator::broadcast_tensor`] work on tensors on `device`
    /// where they are, without a host copy (NCCL, on its rank's device).
    /// [`crate::GradSync`] then sums dense gradients on the device.
    fn reduces_on(&self, device: Device) -> bool {
        let _ = device;
        false
    }

    /// Sums an `f32` tensor over the ranks, in place (every rank passes
    /// one of as many elements). By default through host memory: a device
    /// tensor is downloaded, summed with [`Communicator::all_reduce_sum`]
    /// and uploaded again.
    fn all_reduce_sum_tensor(&self, t: &mut Tensor) -> Result<()> {
        with_host_values(t, "all_reduce_sum_tensor", |v| self.all_reduce_sum(v))
    }

    /// Overwrites an `f32` tensor on every rank with `root`'s (through
    /// host memory by default, as [`Communicator::all_reduce_sum_tensor`]).
    fn broadcast_tensor(&self, t: &mut Tensor, root: usize) -> Result<()> {
        with_host_values(t, "broadcast_tensor", |v| self.broadcast(v, root))
    }
}

/// Runs `f` on an `f32` tensor's values: in place on the host, or on a host
/// copy uploaded afterwards where the tensor lives on a device.
pub(crate) fn with_host_values(
    t: &mut Tensor,
    op: &'static str,
    f: impl FnOnce(&mut [f32]) -> Result<()>,
) -> Result<()> {
    check_f32(t, op)?;
    match t.device() {
        Device::Cpu => f(t.as_mut_slice::<f32>().map_err(DistError::tensor(op))?),
        device => {
            let mut values = t.to_vec::<f32>().map_err(DistError::tensor(op))?;
            f(&mut values)?;
            let on_host = Tensor::from_slice(&values, t.shape()).map_err(DistError::tensor(op))?;
            *t = on_host.to_device(device).map_err(DistError::tensor(op))?;
            Ok(())
        }
    }
}

/// A [`DistError::Usage`] unless `t` holds `f32`s.
pub(crate) fn check_f32(t: &Tensor, op: &'static str) -> Result<()> {
    match t.dtype() {
        DType::F32 => Ok(()),
        other => Err(DistError::Usage(format!(
            "{op}: the tensor holds {other} values, not f32"
        ))),
    }
}

impl<C: Communicator + ?Sized> CommunicatorExt for C {}

/// Typed all-gathers on any [`Communicator`].
pub trait CommunicatorExt: Communicator {
    /// Every rank's `mine`, in rank order (lengths may differ by rank).
    fn all_gather<T: Pod>(&self, mine: &[T]) -> Result<Vec<Vec<T>>> {
        let all = self.all_gather_bytes(bytemuck::cast_slice(mine))?;
        all.iter()
            .enumerate()
            .map(|(rank, bytes)| {
                if bytes.len() % std::mem::size_of::<T>() != 0 {
                    return Err(DistError::Usage(format!(
                        "rank {rank} sent {} bytes, not a whole number of {}-byte values",
                        bytes.len(),
                        std::mem::size_of::<T>()
                    )));
                }
                // The bytes may be unaligned for T: read each value.
                Ok(bytes
                    .chunks_exact(std::mem::size_of::<T>())
                    .map(bytemuck::pod_read_unaligned)
                    .collect())
            })
            .collect()
    }
}

/// A sum over ranks computed from an all-gather, added in rank order so
/// that every rank gets the same bits.
fn sum_in_rank_order<C, T>(comm: &C, buf: &mut [T]) -> Result<()>
where
    C: Communicator + ?Sized,
    T: Pod + std::ops::AddAssign + Default,
{
    let all = comm.all_gather(&*buf)?;
    for (rank, theirs) in all.iter().enumerate() {
        if theirs.len() != buf.len() {
            return Err(mismatch("all_reduce_sum", rank, theirs.len(), buf.len()));
        }
    }
    for (i, out) in buf.iter_mut().enumerate() {
        let mut s = T::default();
        for theirs in &all {
            s += theirs[i];
        }
        *out = s;
    }
    Ok(())
}

/// `send` and `recv` of [`Communicator::all_reduce_sum_into`] hold as many
/// values (checked on the calling rank, before any collective).
pub(crate) fn same_len_into(send: &[f32], recv: &[f32]) -> Result<()> {
    match send.len() == recv.len() {
        true => Ok(()),
        false => Err(DistError::Usage(format!(
            "all_reduce_sum_into: {} values sent into {}",
            send.len(),
            recv.len()
        ))),
    }
}

fn mismatch(op: &'static str, rank: usize, theirs: usize, mine: usize) -> DistError {
    DistError::Usage(format!(
        "{op}: rank {rank} gave {theirs} values where this rank gave {mine} \
         (the ranks run different models or steps?)"
    ))
}

/// One process alone: rank 0 of 1. Code written for several ranks runs
/// unchanged on it; every collective is a no-op.
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl Communicator for Local {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn backend(&self) -> &'static str {
        "local"
    }
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![mine.to_vec()])
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
    fn all_reduce_sum(&self, _: &mut [f32]) -> Result<()> {
        Ok(())
    }
    fn all_reduce_sum_f64(&self, _: &mut [f64]) -> Result<()> {
        Ok(())
    }
    fn broadcast(&self, _: &mut [f32], root: usize) -> Result<()> {
        match root {
            0 => Ok(()),
            _ => Err(DistError::Usage(format!(
                "broadcast from rank {root} in a group of 1 rank"
            ))),
        }
    }
    fn barrier(&self) -> Result<()> {
        Ok(())
    }
    fn all_reduce_sum_tensor(&self, t: &mut Tensor) -> Result<()> {
        check_f32(t, "all_reduce_sum_tensor")
    }
    fn broadcast_tensor(&self, t: &mut Tensor, root: usize) -> Result<()> {
        check_f32(t, "broadcast_tensor")?;
        self.broadcast(&mut [], root)
    }
}

/// Ranks as threads of one process: [`Threads::group`] makes `n`
/// communicators, one for each thread. The collectives meet in shared
/// memory; sums are added in rank order, as MPI's would be for two ranks.
/// For tests of multi-rank code without MPI, and to try a setup out.
#[derive(Debug, Clone)]
pub struct Threads {
    rank: usize,
    shared: Arc<Meeting>,
}

/// The meeting point of one group's collectives.
#[derive(Debug)]
struct Meeting {
    size: usize,
    state: Mutex<Round>,
    turn: Condvar,
}

/// One collective in progress: what each rank brought, and how many have
/// read the result. Rounds are numbered so that a fast rank cannot enter
/// the next collective before every rank has left this one.
#[derive(Debug, Default)]
struct Round {
    number: u64,
    brought: Vec<Option<Vec<u8>>>,
    read: usize,
    /// Set by [`Threads::abort`]: every waiting rank gives up.
    aborted: Option<i32>,
}

impl Threads {
    /// `size` communicators of one group, rank `i` at position `i`.
    pub fn group(size: usize) -> Vec<Threads> {
        let shared = Arc::new(Meeting {
            size,
            state: Mutex::new(Round {
                brought: vec![None; size],
                ..Round::default()
            }),
            turn: Condvar::new(),
        });
        (0..size)
            .map(|rank| Threads {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }
}

impl Communicator for Threads {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.shared.size
    }
    fn backend(&self) -> &'static str {
        "threads"
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let m = &*self.shared;
        let lock = || m.state.lock().unwrap_or_else(|p| p.into_inner());
        let aborted = |code| DistError::Aborted {
            rank: self.rank,
            code,
        };
        let mut st = lock();
        // Wait for the previous round to be read by every rank.
        while st.brought[self.rank].is_some() {
            if let Some(code) = st.aborted {
                return Err(aborted(code));
            }
            st = m.turn.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        let number = st.number;
        st.brought[self.rank] = Some(mine.to_vec());
        m.turn.notify_all();
        while st.number == number && st.brought.iter().any(Option::is_none) {
            if let Some(code) = st.aborted {
                return Err(aborted(code));
            }
            st = m.turn.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        let all: Vec<Vec<u8>> = st.brought.iter().flatten().cloned().collect();
        st.read += 1;
        if st.read == m.size {
            // The last reader closes the round.
            st.brought.iter_mut().for_each(|b| *b = None);
            st.read = 0;
            st.number += 1;
            m.turn.notify_all();
        }
        Ok(all)
    }

    /// Wakes every rank waiting in a collective with
    /// [`DistError::Aborted`] (threads cannot end the others, so this
    /// unwinds the calling thread instead of exiting the process).
    fn abort(&self, code: i32) -> ! {
        let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        st.aborted = Some(code);
        self.shared.turn.notify_all();
        drop(st);
        panic!("rank {} aborted the group with code {code}", self.rank)
    }
}
