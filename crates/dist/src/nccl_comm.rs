//! [`Nccl`]: the [`Communicator`] over NCCL, one rank per GPU (feature
//! `nccl`).
//!
//! Tensors on the rank's device are summed and broadcast where they are,
//! on the stream their kernels run on ([`Communicator::reduces_on`]), so
//! [`crate::GradSync`] sums dense gradient buckets on the device. The host
//! collectives (the all-gathers of the gradient sync's bookkeeping, sparse
//! rows) stage through device buffers. The NCCL unique id travels from rank
//! 0 to the others over a bootstrap communicator (MPI across processes,
//! [`crate::Local`] for one rank), which [`Nccl`] keeps for
//! [`Communicator::abort`].

use sheaf_kernels_cuda::{
    check_nccl, nccl_unique_id, CudaError, CudaKernels, DeviceRepr, NcclComm, NcclType,
    ValidAsZeroBits, NCCL_ID_BYTES,
};
use sheaf_tensor::{CudaBackend, Device, Tensor};

use crate::comm::{check_f32, with_host_values, Communicator};
use crate::error::{DistError, Result};

/// One rank of an NCCL group, on one GPU.
///
/// Not `Send`: make it, and call its collectives, on one thread (the
/// trainer's). Dropping it waits for the device's queued work (so that a
/// pending collective completes) and then releases the NCCL communicator
/// and the bootstrap communicator, in that order.
pub struct Nccl {
    comm: NcclComm,
    kernels: &'static CudaKernels,
    ordinal: usize,
    // Declared last: dropped (MPI_Finalize, say) after the NCCL communicator.
    bootstrap: Box<dyn Communicator>,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .field("device", &self.device())
            .field("bootstrap", &self.bootstrap.backend())
            .finish()
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // cudarc releases the communicator with ncclCommAbort, which would
        // cut short a collective still queued on the stream.
        let _ = self.comm.stream().synchronize();
    }
}

/// Maps an error of the kernel crate's NCCL layer.
fn nccl(e: CudaError) -> DistError {
    DistError::Nccl(e.to_string())
}

/// This host's name, as ranks on one machine share it ("" if unknown).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

/// This rank's place among the ranks on its host (by host name), in rank
/// order: its GPU's ordinal when every host runs one rank per GPU.
pub fn local_rank(comm: &dyn Communicator) -> Result<usize> {
    let host = hostname();
    let all = comm.all_gather_bytes(host.as_bytes())?;
    Ok(all
        .iter()
        .take(comm.rank())
        .filter(|h| h.as_slice() == host.as_bytes())
        .count())
}

/// Opens `cuda:ordinal` for NCCL, or says why not (one line).
fn open(ordinal: usize) -> std::result::Result<&'static CudaKernels, String> {
    match sheaf_kernels_cuda::device_count() {
        Ok(n) if ordinal >= n => {
            return Err(format!(
                "it takes cuda:{ordinal}, and its host has {n} GPU(s): start one rank per GPU"
            ))
        }
        Err(e) => return Err(e.to_string()),
        Ok(_) => {}
    }
    check_nccl().map_err(|e| e.to_string())?;
    CudaBackend::global(ordinal)
        .map(CudaBackend::kernels)
        .map_err(|e| e.to_string())
}

impl Nccl {
    /// Joins the NCCL group of `bootstrap`'s ranks, this rank on the GPU of
    /// its local rank ([`local_rank`]: ranks on one host take devices 0,
    /// 1, ... in rank order). Every rank of `bootstrap` must call it.
    ///
    /// Where some rank has no GPU of that ordinal or no NCCL library, every
    /// rank gets the same [`DistError::Nccl`] naming that rank and why.
    pub fn init(bootstrap: impl Communicator + 'static) -> Result<Nccl> {
        let ordinal = local_rank(&bootstrap)?;
        Nccl::init_on(bootstrap, ordinal)
    }

    /// [`Nccl::init`] on GPU `cuda:ordinal` (each rank its own).
    pub fn init_on(bootstrap: impl Communicator + 'static, ordinal: usize) -> Result<Nccl> {
        let (rank, size) = (bootstrap.rank(), bootstrap.size());
        // Every rank opens its device first and tells the others whether it
        // could, so that none waits in NCCL's setup for a rank that failed.
        let opened = open(ordinal);
        let why = opened.as_ref().err().cloned().unwrap_or_default();
        let all = bootstrap.all_gather_bytes(why.as_bytes())?;
        if let Some((r, why)) = all.iter().enumerate().find(|(_, w)| !w.is_empty()) {
            return Err(DistError::Nccl(format!(
                "rank {r} cannot join: {}",
                String::from_utf8_lossy(why)
            )));
        }
        let kernels = opened.map_err(DistError::Nccl)?;
        // Rank 0's unique id (or why it has none) to every rank.
        let mine = match rank {
            0 => match nccl_unique_id() {
                Ok(id) => [&[0u8][..], &id].concat(),
                Err(e) => [&[1u8][..], e.to_string().as_bytes()].concat(),
            },
            _ => Vec::new(),
        };
        let all = bootstrap.all_gather_bytes(&mine)?;
        let id: [u8; NCCL_ID_BYTES] = match all.first().map(|v| v.split_first()) {
            Some(Some((0, id))) => id.try_into().map_err(|_| {
                DistError::Nccl(format!(
                    "rank 0 sent a unique id of {} bytes, not {NCCL_ID_BYTES}",
                    id.len()
                ))
            })?,
            Some(Some((_, why))) => {
                return Err(DistError::Nccl(format!(
                    "rank 0 has no unique id: {}",
                    String::from_utf8_lossy(why)
                )))
            }
            _ => return Err(DistError::Nccl("rank 0 sent no unique id".into())),
        };
        let comm = NcclComm::new(kernels, rank, size, &id).map_err(nccl)?;
        Ok(Nccl {
            comm,
            kernels,
            ordinal,
            bootstrap: Box::new(bootstrap),
        })
    }

    /// This rank's device.
    pub fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    /// The communicator the unique id travelled over (host collectives
    /// over MPI, say, without a trip through the device).
    pub fn bootstrap(&self) -> &dyn Communicator {
        &*self.bootstrap
    }

    /// `f` on a device copy of `buf`, which is then copied back.
    fn staged<T>(
        &self,
        buf: &mut [T],
        f: impl FnOnce(&mut sheaf_kernels_cuda::CudaViewMut<'_, T>) -> Result<()>,
    ) -> Result<()>
    where
        T: DeviceRepr + ValidAsZeroBits,
    {
        let mut dev = self.kernels.upload(buf).map_err(nccl)?;
        f(&mut dev.as_view_mut())?;
        self.kernels.download(&dev.as_view(), buf).map_err(nccl)
    }

    /// Every rank's `mine` (equal lengths), in rank order, flat.
    fn gather<T>(&self, mine: &[T]) -> Result<Vec<T>>
    where
        T: NcclType + DeviceRepr + ValidAsZeroBits + Default + Clone,
    {
        let send = self.kernels.upload(mine).map_err(nccl)?;
        let n = mine.len() * self.size();
        let mut recv = self.kernels.alloc_zeros::<T>(n).map_err(nccl)?;
        let stream = self.kernels.stream();
        self.comm
            .all_gather(&send.as_view(), &mut recv.as_view_mut(), stream)
            .map_err(nccl)?;
        let mut out = vec![T::default(); n];
        self.kernels
            .download(&recv.as_view(), &mut out)
            .map_err(nccl)?;
        Ok(out)
    }

    fn check_root(&self, op: &str, root: usize) -> Result<()> {
        match root < self.size() {
            true => Ok(()),
            false => Err(DistError::Usage(format!(
                "{op} from rank {root} in a group of {} ranks",
                self.size()
            ))),
        }
    }
}

impl Communicator for Nccl {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn size(&self) -> usize {
        self.comm.size()
    }

    fn backend(&self) -> &'static str {
        "nccl"
    }

    /// Two NCCL all-gathers through device buffers: the lengths, then
    /// every rank's bytes padded to the longest.
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let lens = self.gather(&[mine.len() as u64])?;
        let longest = lens.iter().copied().max().unwrap_or(0) as usize;
        if longest == 0 {
            return Ok(vec![Vec::new(); self.size()]);
        }
        let mut padded = mine.to_vec();
        padded.resize(longest, 0);
        let all = self.gather(&padded)?;
        Ok(lens
            .iter()
            .zip(all.chunks_exact(longest))
            .map(|(&len, theirs)| theirs[..len as usize].to_vec())
            .collect())
    }

    /// The bootstrap communicator's abort (MPI_Abort ends every rank).
    fn abort(&self, code: i32) -> ! {
        self.bootstrap.abort(code)
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        let stream = self.kernels.stream();
        self.staged(buf, |d| self.comm.all_reduce_sum(d, stream).map_err(nccl))
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        let stream = self.kernels.stream();
        self.staged(buf, |d| self.comm.all_reduce_sum(d, stream).map_err(nccl))
    }

    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<()> {
        self.check_root("broadcast", root)?;
        let stream = self.kernels.stream();
        self.staged(buf, |d| self.comm.broadcast(d, root, stream).map_err(nccl))
    }

    /// An all-reduce of one value, waited for.
    fn barrier(&self) -> Result<()> {
        self.all_reduce_sum(&mut [0.0])
    }

    fn reduces_on(&self, device: Device) -> bool {
        device == self.device()
    }

    /// On this rank's device: NCCL on the tensor's memory and stream, no
    /// host copy and no host wait. Elsewhere through host memory.
    fn all_reduce_sum_tensor(&self, t: &mut Tensor) -> Result<()> {
        const OP: &str = "all_reduce_sum_tensor";
        if t.device() != self.device() {
            return with_host_values(t, OP, |v| self.all_reduce_sum(v));
        }
        check_f32(t, OP)?;
        t.with_cuda_slice_mut(|view, stream| self.comm.all_reduce_sum(view, stream))
            .map_err(DistError::tensor(OP))?
            .map_err(nccl)
    }

    /// As [`Communicator::all_reduce_sum_tensor`].
    fn broadcast_tensor(&self, t: &mut Tensor, root: usize) -> Result<()> {
        const OP: &str = "broadcast_tensor";
        self.check_root(OP, root)?;
        if t.device() != self.device() {
            return with_host_values(t, OP, |v| self.broadcast(v, root));
        }
        check_f32(t, OP)?;
        t.with_cuda_slice_mut(|view, stream| self.comm.broadcast(view, root, stream))
            .map_err(DistError::tensor(OP))?
            .map_err(nccl)
    }
}
