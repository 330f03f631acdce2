//! [`NcclComm`]: NCCL collectives on device memory (feature `nccl`).
//!
//! One communicator per rank, each rank on its own device. Rank 0 makes a
//! unique id ([`nccl_unique_id`]), the others receive it out of band (over
//! MPI, say), and every rank then calls [`NcclComm::new`] with it. Every
//! collective is queued on the stream of the [`CudaKernels`] the
//! communicator was made from, the one stream every sheaf kernel of that
//! device runs on: a collective follows the kernels that wrote its buffer
//! and precedes those that read it, and the host does not wait for it.
//!
//! cudarc loads libnccl at run time, as it does the driver: this module
//! builds without NCCL, and where the library is missing
//! [`nccl_unique_id`] and [`NcclComm::new`] are
//! [`CudaError::Unavailable`], never a panic.

use std::ffi::c_char;
use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut};
use cudarc::nccl::result::NcclError;
use cudarc::nccl::{Comm, Id, ReduceOp};

use crate::context::CudaKernels;
use crate::error::{CudaError, Result};

/// The element types NCCL reduces and moves (`f32`, `f64`, `u8`, `u32`,
/// `u64`, ...).
pub use cudarc::nccl::NcclType;

/// Bytes of an NCCL unique id, as sent from rank 0 to the others.
pub const NCCL_ID_BYTES: usize = 128;

/// Why NCCL is unavailable when its library cannot be loaded.
const NO_NCCL: &str = "no NCCL library: cudarc loads libnccl.so (not libnccl.so.2); install \
    libnccl-dev, or link libnccl.so to libnccl.so.2 in a directory on LD_LIBRARY_PATH";

/// Whether the NCCL library can be loaded on this machine.
pub fn nccl_present() -> bool {
    // SAFETY: only tries to open the shared library by its known names
    // (libloading); no symbol is called.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// Ok where the NCCL library can be loaded, else
/// [`CudaError::Unavailable`] saying what to install.
pub fn check_nccl() -> Result<()> {
    match nccl_present() {
        true => Ok(()),
        false => Err(CudaError::Unavailable(NO_NCCL.into())),
    }
}

/// A fresh NCCL unique id (rank 0 makes it; every rank passes the same one
/// to [`NcclComm::new`]).
pub fn nccl_unique_id() -> Result<[u8; NCCL_ID_BYTES]> {
    check_nccl()?;
    let id = Id::new().map_err(nccl_err("ncclGetUniqueId"))?;
    Ok(id.internal().map(|c| c.to_ne_bytes()[0]))
}

/// Maps an NCCL error of `op`.
fn nccl_err(op: &'static str) -> impl Fn(NcclError) -> CudaError {
    move |e| {
        // SAFETY: for any result code, ncclGetErrorString returns a pointer
        // to a static NUL-terminated string (checked for null all the
        // same); the library is loaded, since a call just returned `e`.
        let text = unsafe { cudarc::nccl::sys::ncclGetErrorString(e.0) };
        let what = match text.is_null() {
            true => String::new(),
            // SAFETY: non-null, static and NUL-terminated (above).
            false => unsafe { std::ffi::CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned(),
        };
        CudaError::Nccl {
            op,
            what: format!("{:?} ({what})", e.0),
        }
    }
}

/// One rank's NCCL communicator, on one device's stream.
///
/// Not `Send`: create and use it on one thread (the trainer's).
pub struct NcclComm {
    comm: Comm,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclComm")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .field("ordinal", &self.ordinal())
            .finish()
    }
}

impl NcclComm {
    /// Rank `rank` of `size` on `kernels`' device and stream, joining the
    /// other ranks that pass the same `id`: blocks until all `size` ranks
    /// have joined.
    pub fn new(
        kernels: &CudaKernels,
        rank: usize,
        size: usize,
        id: &[u8; NCCL_ID_BYTES],
    ) -> Result<NcclComm> {
        const K: &str = "ncclCommInitRank";
        if rank >= size || i32::try_from(size).is_err() {
            return Err(CudaError::Invalid {
                kernel: K,
                what: format!("rank {rank} in a group of {size} ranks"),
            });
        }
        check_nccl()?;
        // NCCL makes the communicator on the calling thread's current device.
        kernels.bind(K)?;
        let id = Id::uninit(id.map(|b| c_char::from_ne_bytes([b])));
        let stream = kernels.stream().clone();
        let comm = Comm::from_rank(stream.clone(), rank, size, id).map_err(nccl_err(K))?;
        Ok(NcclComm { comm, stream })
    }

    /// This rank, `0..size`.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.comm.world_size()
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.stream.context().ordinal()
    }

    /// The stream the collectives run on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Checks that `stream`, the one a buffer's writers run on, is this
    /// communicator's, and makes its context current.
    fn ready(&self, op: &'static str, stream: &Arc<CudaStream>) -> Result<()> {
        if !Arc::ptr_eq(stream, &self.stream) {
            return Err(CudaError::Invalid {
                kernel: op,
                what: format!(
                    "the buffer's stream is not the communicator's (cuda:{})",
                    self.ordinal()
                ),
            });
        }
        self.stream
            .context()
            .bind_to_thread()
            .map_err(CudaError::driver(op))
    }

    fn root(&self, op: &'static str, root: usize) -> Result<i32> {
        match i32::try_from(root) {
            Ok(r) if root < self.size() => Ok(r),
            _ => Err(CudaError::Invalid {
                kernel: op,
                what: format!("root {root} in a group of {} ranks", self.size()),
            }),
        }
    }

    /// Sums `buf` over the ranks, in place (every rank passes as many
    /// elements). `stream` is the stream `buf`'s writers run on: it must be
    /// this communicator's ([`CudaError::Invalid`] otherwise).
    pub fn all_reduce_sum<T: NcclType>(
        &self,
        buf: &mut CudaViewMut<'_, T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        const K: &str = "ncclAllReduce";
        self.ready(K, stream)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.comm
            .all_reduce_in_place(buf, &ReduceOp::Sum)
            .map(drop)
            .map_err(nccl_err(K))
    }

    /// Overwrites `buf` on every rank with `root`'s (as
    /// [`NcclComm::all_reduce_sum`] for `stream`).
    pub fn broadcast<T: NcclType>(
        &self,
        buf: &mut CudaViewMut<'_, T>,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        const K: &str = "ncclBroadcast";
        let root = self.root(K, root)?;
        self.ready(K, stream)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.comm
            .broadcast_in_place(buf, root)
            .map(drop)
            .map_err(nccl_err(K))
    }

    /// Every rank's `send` (equal lengths), in rank order, into `recv` of
    /// `size * send.len()` elements.
    pub fn all_gather<T: NcclType>(
        &self,
        send: &CudaView<'_, T>,
        recv: &mut CudaViewMut<'_, T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        const K: &str = "ncclAllGather";
        CudaError::check_len(K, "recv", recv.len(), send.len() * self.size())?;
        self.ready(K, stream)?;
        if send.is_empty() {
            return Ok(());
        }
        self.comm
            .all_gather(send, recv)
            .map(drop)
            .map_err(nccl_err(K))
    }
}
