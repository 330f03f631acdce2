//! [`CudaKernels`]: one device's context, stream, cuBLAS handle and loaded
//! kernels, plus the memory operations the tensor crate builds storage on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::CUresult;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr,
    DriverError, LaunchConfig, PinnedHostSlice, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use crate::error::{CudaError, Result};
use crate::ptx;

/// Threads per block of the elementwise and per-row kernels.
pub(crate) const BLOCK: u32 = 256;

/// The kernels of one CUDA device, on device slices.
///
/// Everything runs on ONE stream in issue order, so a kernel sees the
/// results of every kernel launched before it and the host never waits
/// except to read memory ([`CudaKernels::download`], [`CudaKernels::check`]).
/// Index values are checked on the device: a bad one is recorded in an
/// error word and reported by the next [`CudaKernels::check`] (which
/// downloads call), naming the kernel.
pub struct CudaKernels {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    pub(crate) blas: CudaBlas,
    functions: HashMap<&'static str, CudaFunction>,
    /// `[kernel code, index, position, bound]`, zero when clean.
    err: Mutex<CudaSlice<u32>>,
    sms: u32,
    launches: AtomicU64,
    /// Launches per kernel (or copy) name and the host time their driver
    /// calls took (ns), for profiles of a step.
    launches_by_name: Mutex<HashMap<&'static str, (u64, u64)>>,
    deterministic: AtomicBool,
    pub(crate) user: crate::user::UserKernels,
    staging: Mutex<Staging>,
}

/// Page-locked buffers for small uploads (index, label and mask tensors,
/// one or more per batch): a copy from pageable memory may make the host
/// wait for the stream, one from page-locked memory does not. Buffers come
/// in power-of-two sizes, [`STAGING_DEPTH`] per size, used round robin.
/// Each slot records an event after its copy and the next writer of the
/// slot waits for it, so a buffer is never rewritten while its copy is
/// pending (cudarc records the pinned buffer's own event only once a
/// second stream exists; this context has one).
#[derive(Default)]
struct Staging {
    rings: HashMap<usize, (Vec<Slot>, usize)>,
}

/// A staging buffer and the event after its last copy.
struct Slot {
    buf: PinnedHostSlice<f32>,
    copied: Option<CudaEvent>,
}

/// Uploads up to this many elements go through page-locked staging
/// ([`CudaKernels::upload_staged`]).
pub const STAGING_MAX: usize = 1 << 16;
const STAGING_MIN: usize = 1 << 8;
const STAGING_DEPTH: usize = 8;

impl std::fmt::Debug for CudaKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaKernels")
            .field("ordinal", &self.ordinal())
            .field("sms", &self.sms)
            .finish_non_exhaustive()
    }
}

/// Names of the kernel codes written to the error word (see `common.cuh`).
fn kernel_of_code(code: u32) -> &'static str {
    match code {
        1 => "gather_rows",
        2 => "scatter_add_rows",
        3 => "nll_log_softmax",
        4 => "nll_log_softmax_bwd",
        5 => "copy_rows_at",
        6 => "gather_rows_from",
        7 => "scatter_add_rows_to",
        _ => "cuda kernel",
    }
}

/// Whether the CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the shared library by its known names
    // (libloading); no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Number of CUDA devices, or why there are none.
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(CudaError::Unavailable(
            "the CUDA driver library (libcuda) was not found".into(),
        ));
    }
    let n = CudaContext::device_count().map_err(|e| CudaError::Unavailable(e.to_string()))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

impl CudaKernels {
    /// Opens device `ordinal`: its primary context, a stream, a cuBLAS
    /// handle, and the committed PTX of every kernel file.
    pub fn new(ordinal: usize) -> Result<CudaKernels> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaError::Unavailable(format!(
                "no device cuda:{ordinal} ({count} CUDA device(s) found)"
            )));
        }
        // SAFETY: as in `driver_present`, only opens the library.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(CudaError::Unavailable(
                "cuBLAS (libcublas) was not found: add the CUDA toolkit's lib directory to LD_LIBRARY_PATH".into(),
            ));
        }
        const K: &str = "open device";
        let ctx = CudaContext::new(ordinal).map_err(CudaError::driver(K))?;
        // SAFETY: everything of this context runs on its one stream (the
        // default stream below), so cross-stream synchronisation, which the
        // per-allocation events of event tracking exist for, never arises.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone())
            .map_err(|source| CudaError::Blas { kernel: K, source })?;
        let mut functions = HashMap::new();
        for file in ptx::FILES {
            let module = ctx
                .load_module(Ptx::from_src(file.ptx))
                .map_err(CudaError::driver(file.name))?;
            for name in kernel_names(file.ptx) {
                let f = module
                    .load_function(name)
                    .map_err(CudaError::driver(name))?;
                functions.insert(name, f);
            }
        }
        let err = stream.alloc_zeros::<u32>(4).map_err(CudaError::driver(K))?;
        let sms = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(CudaError::driver(K))?;
        Ok(CudaKernels {
            ctx,
            stream,
            blas,
            functions,
            err: Mutex::new(err),
            sms: u32::try_from(sms).unwrap_or(1).max(1),
            launches: AtomicU64::new(0),
            launches_by_name: Mutex::new(HashMap::new()),
            deterministic: AtomicBool::new(false),
            user: crate::user::UserKernels::default(),
            staging: Mutex::new(Staging::default()),
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// The device's name, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub fn device_name(&self) -> String {
        self.ctx
            .name()
            .unwrap_or_else(|_| "unknown CUDA device".into())
    }

    /// The stream every kernel runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Kernel launches (cuBLAS calls and copies included) since creation:
    /// take differences around a step to count its launches.
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    /// Makes `scatter_add_rows` accumulate duplicates in position order,
    /// bit-for-bit like the CPU (slower: a serial loop over the rows),
    /// instead of with atomics in an unspecified order.
    pub fn set_deterministic(&self, on: bool) {
        self.deterministic.store(on, Ordering::Relaxed);
    }

    /// Whether [`CudaKernels::set_deterministic`] is on.
    pub fn deterministic(&self) -> bool {
        self.deterministic.load(Ordering::Relaxed)
    }

    /// The device error word, for kernels that check index values. A
    /// poisoned lock still guards a valid slice: take it.
    pub(crate) fn error_word(&self) -> MutexGuard<'_, CudaSlice<u32>> {
        self.err.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes this device's context current on the calling thread: cuBLAS
    /// calls need it (cudarc binds it itself for launches and copies), and
    /// executors may run on any thread.
    pub(crate) fn bind(&self, kernel: &'static str) -> Result<()> {
        self.ctx.bind_to_thread().map_err(CudaError::driver(kernel))
    }

    /// Counts one launch of `name`; the guard, held over the driver call,
    /// adds the call's host time to the name's when dropped.
    #[must_use = "hold the guard over the driver call it times"]
    pub(crate) fn count_launch(&self, name: &'static str) -> ApiTimer<'_> {
        self.launches.fetch_add(1, Ordering::Relaxed);
        ApiTimer {
            k: self,
            name,
            start: std::time::Instant::now(),
        }
    }

    /// Launches per kernel name since creation, and the host time their
    /// driver calls took (copies as `upload`, `download`, `copy`,
    /// allocations as `alloc_zeros`, cuBLAS as `sgemm`): take differences
    /// around a step to see what it launches and what launching cost.
    pub fn launches_by_name(&self) -> Vec<(&'static str, u64, std::time::Duration)> {
        let by_name = self
            .launches_by_name
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = by_name
            .iter()
            .map(|(&k, &(n, ns))| (k, n, std::time::Duration::from_nanos(ns)))
            .collect();
        v.sort_unstable();
        v
    }

    /// The loaded kernel `name` (a name from the committed PTX).
    pub(crate) fn function(&self, name: &'static str) -> Result<&CudaFunction> {
        self.functions.get(name).ok_or_else(|| CudaError::Invalid {
            kernel: name,
            what: "no such kernel in the loaded PTX".into(),
        })
    }

    /// A grid-stride launch over `n` elements.
    pub(crate) fn elementwise_config(&self, n: usize) -> LaunchConfig {
        let blocks = n
            .div_ceil(BLOCK as usize)
            .clamp(1, (self.sms * 32) as usize);
        LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// One block per row (grid-strided over rows), a power-of-two block
    /// from 32 to 256 threads fitted to the row width.
    pub(crate) fn row_config(&self, rows: usize, cols: usize) -> LaunchConfig {
        let threads = cols.next_power_of_two().clamp(32, BLOCK as usize) as u32;
        let blocks = rows.clamp(1, (self.sms * 64) as usize);
        LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    // ---- Memory.

    /// `len` zeroed elements on the device; out of memory is
    /// [`CudaError::OutOfMemory`] naming the bytes.
    pub fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        if len == 0 {
            return self.alloc_empty();
        }
        let _api = self.count_launch("alloc_zeros");
        self.stream
            .alloc_zeros::<T>(len)
            .map_err(|e| self.alloc_error(e, bytes))
    }

    /// An empty slice backed by one real word. cudarc's `null()` asks
    /// `cuMemAllocAsync` for zero bytes, which some CUDA versions answer
    /// without writing the pointer; the slice would then free whatever the
    /// pointer held when dropped.
    fn alloc_empty<T>(&self) -> Result<CudaSlice<T>> {
        let _api = self.count_launch("alloc_zeros");
        let word = self
            .stream
            .alloc_zeros::<u32>(1)
            .map_err(|e| self.alloc_error(e, 4))?;
        let ptr = word.leak();
        // SAFETY: `ptr` is a live 4-byte allocation of this stream, owned by
        // nothing since `leak`; the slice made of it holds zero elements of
        // `T` (so nothing is ever read or written through it) and frees it
        // on drop, as the slice it came from would have.
        Ok(unsafe { self.stream.upgrade_device_ptr::<T>(ptr, 0) })
    }

    fn alloc_error(&self, e: DriverError, bytes: usize) -> CudaError {
        let free = self.ctx.mem_get_info().map(|(free, _)| free).unwrap_or(0);
        // The stream-ordered allocator may call a request past the device's
        // size an invalid value rather than out of memory: both are
        // "not enough memory" when the request exceeds what is free.
        if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY || bytes > free {
            CudaError::OutOfMemory {
                bytes,
                ordinal: self.ordinal(),
                free,
            }
        } else {
            CudaError::driver("alloc")(e)
        }
    }

    /// A device copy of `data`.
    pub fn upload<T: DeviceRepr + ValidAsZeroBits>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        if data.is_empty() {
            return self.alloc_empty();
        }
        // Allocated uninitialised and copied into: zeroing first would be
        // a second device operation for every index list sent.
        let _api = self.count_launch("upload");
        let bytes = std::mem::size_of_val(data);
        self.stream
            .clone_htod(data)
            .map_err(|e| self.alloc_error(e, bytes))
    }

    /// A device copy of `data` (at most [`STAGING_MAX`] elements) made
    /// through page-locked staging, so that the host does not wait for the
    /// stream. The slice returned holds `data` first and may be longer (its
    /// size class); the rest is unspecified.
    pub fn upload_staged(&self, data: &[f32]) -> Result<CudaSlice<f32>> {
        const K: &str = "upload";
        if data.len() > STAGING_MAX {
            return Err(CudaError::Invalid {
                kernel: K,
                what: format!(
                    "{} elements: staged uploads hold at most {STAGING_MAX}",
                    data.len()
                ),
            });
        }
        let class = data.len().next_power_of_two().max(STAGING_MIN);
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let (ring, next) = staging.rings.entry(class).or_default();
        if ring.len() < STAGING_DEPTH {
            // SAFETY: the buffer is zero-filled right below, before any
            // reference to its elements exists.
            let mut buf =
                unsafe { self.ctx.alloc_pinned::<f32>(class) }.map_err(CudaError::driver(K))?;
            let ptr = buf.as_mut_ptr().map_err(CudaError::driver(K))?;
            // SAFETY: `ptr` addresses `class` f32s of this fresh page-locked
            // allocation, owned by `buf` and aliased by nothing else.
            unsafe { std::ptr::write_bytes(ptr, 0, class) };
            ring.push(Slot { buf, copied: None });
        }
        let slot = *next % ring.len();
        *next = (*next + 1) % STAGING_DEPTH;
        let Slot { buf, copied } = &mut ring[slot];
        // This slot's previous copy must be done before the host rewrites it
        // (normally long done: it was STAGING_DEPTH uploads ago).
        if let Some(ev) = copied.take() {
            ev.synchronize().map_err(CudaError::driver(K))?;
        }
        buf.as_mut_slice().map_err(CudaError::driver(K))?[..data.len()].copy_from_slice(data);
        // SAFETY: the whole allocation is overwritten by the copy below
        // before anything reads it (copies and kernels are ordered on the
        // one stream).
        let mut dst = unsafe { self.stream.alloc::<f32>(class) }
            .map_err(|e| self.alloc_error(e, class * 4))?;
        let _api = self.count_launch("upload");
        self.stream
            .memcpy_htod(&*buf, &mut dst)
            .map_err(CudaError::driver(K))?;
        *copied = Some(
            self.stream
                .record_event(None)
                .map_err(CudaError::driver(K))?,
        );
        Ok(dst)
    }

    /// Copies `src` into `dst` (equal lengths) and waits for it, then
    /// reports any error a kernel recorded ([`CudaKernels::check`]).
    pub fn download<T: DeviceRepr>(&self, src: &CudaView<'_, T>, dst: &mut [T]) -> Result<()> {
        CudaError::check_len("download", "dst", dst.len(), src.len())?;
        if !dst.is_empty() {
            let _api = self.count_launch("download");
            self.stream
                .memcpy_dtoh(src, dst)
                .map_err(CudaError::driver("download"))?;
        }
        self.check()
    }

    /// Device-to-device copy of `src` into `dst` (equal lengths).
    pub fn copy<T: DeviceRepr>(
        &self,
        src: &CudaView<'_, T>,
        dst: &mut CudaViewMut<'_, T>,
    ) -> Result<()> {
        CudaError::check_len("copy", "dst", dst.len(), src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let _api = self.count_launch("copy");
        self.stream
            .memcpy_dtod(src, dst)
            .map_err(CudaError::driver("copy"))
    }

    /// A fresh device copy of `src`.
    pub fn duplicate<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        src: &CudaView<'_, T>,
    ) -> Result<CudaSlice<T>> {
        let mut dst = self.alloc_zeros::<T>(src.len())?;
        self.copy(src, &mut dst.as_view_mut())?;
        Ok(dst)
    }

    /// Waits for all work, then reports (and clears) an index error a
    /// kernel recorded since the last check.
    pub fn check(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(CudaError::driver("synchronize"))?;
        // Errors cudarc could not return (a failed free in a drop).
        self.ctx.check_err().map_err(CudaError::driver("free"))?;
        let mut err = self.error_word();
        let mut word = [0u32; 4];
        self.stream
            .memcpy_dtoh(&*err, &mut word[..])
            .map_err(CudaError::driver("check"))?;
        self.stream
            .synchronize()
            .map_err(CudaError::driver("synchronize"))?;
        if word[0] == 0 {
            return Ok(());
        }
        self.stream
            .memset_zeros(&mut *err)
            .map_err(CudaError::driver("check"))?;
        Err(CudaError::Index {
            kernel: kernel_of_code(word[0]),
            index: word[1] as usize,
            position: word[2] as usize,
            bound: word[3] as usize,
        })
    }
}

/// Makes `slice`'s context current on the calling thread, so that the
/// slice's drop can free it: cudarc frees device memory with
/// `cuMemFreeAsync` without binding the context, and a tensor may be dropped
/// on a thread that never touched the device (a fresh thread, a rayon
/// worker). An error recorded before (a failed free) is kept for the next
/// [`CudaKernels::check`], as is a failure to bind.
pub fn bind_for_drop<T>(slice: &CudaSlice<T>) {
    let ctx = slice.context();
    // `bind_to_thread` first takes (and returns) a recorded error without
    // binding: take it here, bind, and record both again.
    let earlier = ctx.check_err();
    let bound = ctx.bind_to_thread();
    ctx.record_err(earlier);
    ctx.record_err(bound);
}

/// Names of the `.entry` functions in a PTX text.
fn kernel_names(ptx: &'static str) -> impl Iterator<Item = &'static str> {
    ptx.lines().filter_map(|line| {
        let rest = line.trim_start().strip_prefix(".visible .entry ")?;
        let end = rest.find('(').unwrap_or(rest.len());
        Some(rest[..end].trim())
    })
}

/// A view of 32-bit words as `u32`: index tensors share the `f32` storage
/// type.
pub fn as_u32<'a>(view: &CudaView<'a, f32>) -> CudaView<'a, u32> {
    // SAFETY: f32 and u32 have the same size and alignment and every bit
    // pattern is a valid u32, so the same `len` words reinterpret exactly.
    unsafe { view.transmute::<u32>(view.len()) }.expect("same size: transmute cannot fail")
}

/// Elements `start..end` of `view`, for as long as `view` was borrowed
/// (cudarc's `slice_mut` only lends a sub-view for the borrow of the view).
/// Out-of-range bounds are clamped to the view.
pub fn narrow_view_mut(
    view: CudaViewMut<'_, f32>,
    start: usize,
    end: usize,
) -> CudaViewMut<'_, f32> {
    let end = end.min(view.len());
    let start = start.min(end);
    let (_, tail) = split_view_mut(view, start);
    let (mid, _) = split_view_mut(tail, end - start);
    mid
}

/// `view` split at `mid` (clamped to its length) into two disjoint views
/// that live as long as `view` did, like `<[T]>::split_at_mut`.
pub fn split_view_mut(
    mut view: CudaViewMut<'_, f32>,
    mid: usize,
) -> (CudaViewMut<'_, f32>, CudaViewMut<'_, f32>) {
    let mid = mid.min(view.len());
    let (a, b) = view.split_at_mut(mid);
    // SAFETY: `view` is consumed here and never used again; `a` and `b`
    // cover disjoint ranges of the memory `view` had exclusive access to
    // for its whole lifetime, and hold only copies of `view`'s own
    // references (device pointer, events, stream: no Drop). Extending the
    // sub-views' lifetime to the original one is thus exactly the
    // contract of `split_at_mut` on slices.
    unsafe {
        (
            std::mem::transmute::<CudaViewMut<'_, f32>, CudaViewMut<'_, f32>>(a),
            std::mem::transmute::<CudaViewMut<'_, f32>, CudaViewMut<'_, f32>>(b),
        )
    }
}

/// Times one driver call for [`CudaKernels::launches_by_name`].
pub(crate) struct ApiTimer<'a> {
    k: &'a CudaKernels,
    name: &'static str,
    start: std::time::Instant,
}

impl Drop for ApiTimer<'_> {
    fn drop(&mut self) {
        let ns = self.start.elapsed().as_nanos() as u64;
        let mut by_name = self
            .k
            .launches_by_name
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let e = by_name.entry(self.name).or_insert((0, 0));
        e.0 += 1;
        e.1 += ns;
    }
}
