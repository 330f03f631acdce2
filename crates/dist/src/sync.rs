//! Keeping the ranks' parameters equal: the gradient sum after each
//! backward ([`GradSync`]), the broadcast from rank 0 at the start
//! ([`broadcast_params`]), the periodic comparison ([`check_in_sync`]) and
//! the check that every rank runs the same model ([`check_same_model`]).
//!
//! Gradients of parameters on a device are staged through host memory,
//! except where the communicator reduces on that device
//! ([`Communicator::reduces_on`]: NCCL): dense buckets are then summed
//! there, copied into one flat device buffer per bucket and back with
//! device copies.

use std::sync::Mutex;
use std::time::Instant;

use sheaf_autodiff::{GradAcc, Param, ParamStore};
use sheaf_tensor::{Backend, DType, Device, Shape, Tensor};

use crate::comm::{Communicator, CommunicatorExt};
use crate::error::{DistError, Result};

/// PyTorch DDP's default bucket size, the starting point here.
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// What one [`GradSync::sync`] moved and how long it took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SyncStats {
    /// All-reduce buckets (dense gradients and tables' rows).
    pub buckets: usize,
    /// Bytes summed densely (per rank).
    pub dense_bytes: usize,
    /// Bytes of lookup-table rows exchanged as (ids, rows): this rank's
    /// ids (8-byte words), and the rows of every rank's ids that it puts
    /// into a bucket.
    pub sparse_bytes: usize,
    /// Seconds spent in the exchange (collectives and staging).
    pub seconds: f64,
}

impl std::ops::AddAssign for SyncStats {
    fn add_assign(&mut self, o: SyncStats) {
        self.buckets += o.buckets;
        self.dense_bytes += o.dense_bytes;
        self.sparse_bytes += o.sparse_bytes;
        self.seconds += o.seconds;
    }
}

/// Sums the gradients accumulated by every rank's backward, so that every
/// rank then holds the gradient of the whole minibatch and its optimizer
/// takes the same step.
///
/// - Dense parameters touched on some rank are summed with one all-reduce
///   per bucket of at most [`GradSync::bucket_bytes`] (several parameters
///   flattened into one buffer), and marked touched on every rank.
/// - Lookup tables written only by rows (embeddings) exchange those rows
///   as (ids, rows): the ids travel with the bookkeeping, and the rows of
///   their union (sorted) are summed in a bucket, unless the union covers
///   the whole table: then the table is summed densely. Either way every
///   rank lists the union of the rows, so a sparse optimizer updates
///   exactly the rows the whole minibatch touched.
///
/// Whole gradients on a device the communicator reduces on
/// ([`Communicator::reduces_on`]: NCCL on its GPU) are summed there, in
/// buckets of their own: copied into one flat device buffer, summed in
/// place, and copied back, all on the device's stream. Other buckets (and
/// tables' rows always) go through host memory.
///
/// With one rank it does nothing (unless [`GradSync::with_one_rank`]).
/// Where the loss is a mean over the minibatch, each rank scales its loss
/// by the GLOBAL instance count before its backward; the sum is then the
/// gradient of the mean.
#[derive(Debug)]
pub struct GradSync {
    bucket_bytes: usize,
    one_rank: bool,
    /// The host bucket, kept from step to step: a fresh buffer of
    /// megabytes each step is paid again in page faults. Rank threads that
    /// share one `GradSync` (the `Threads` backend) find it taken and use
    /// their own.
    flat: Mutex<Flat>,
}

/// A host bucket's values as sent and as summed.
#[derive(Debug, Default)]
struct Flat {
    send: Vec<f32>,
    sum: Vec<f32>,
}

impl Clone for GradSync {
    fn clone(&self) -> Self {
        GradSync {
            bucket_bytes: self.bucket_bytes,
            one_rank: self.one_rank,
            flat: Mutex::default(),
        }
    }
}

impl Default for GradSync {
    fn default() -> Self {
        GradSync {
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            one_rank: false,
            flat: Mutex::default(),
        }
    }
}

/// How one parameter's gradient crosses the ranks this step.
#[derive(Debug, Clone, PartialEq)]
enum Route {
    /// Touched by no rank: nothing to do.
    Untouched,
    /// Summed densely in a bucket.
    Dense,
    /// A table written by rows only: the rows of the union of every rank's
    /// ids (sorted) summed in a bucket.
    Rows(Vec<u32>),
    /// A table written by rows only, summed densely (the rows of all ranks
    /// would outweigh the table); its row list becomes the union.
    RowsAsDense(Vec<u32>),
}

impl Route {
    /// The values this route puts into a bucket.
    fn len(&self, p: &Param) -> usize {
        match self {
            Route::Untouched => 0,
            Route::Rows(union) => union.len() * row_len(p),
            Route::Dense | Route::RowsAsDense(_) => numel(p),
        }
    }
}

impl GradSync {
    /// Buckets of [`DEFAULT_BUCKET_BYTES`].
    pub fn new() -> GradSync {
        GradSync::default()
    }

    /// Buckets of at most `bytes` (at least one parameter per bucket).
    pub fn with_bucket_bytes(bytes: usize) -> GradSync {
        GradSync {
            bucket_bytes: bytes.max(4),
            ..GradSync::default()
        }
    }

    /// Runs the whole exchange even with one rank (`on`), where it would
    /// otherwise return at once: the buckets, copies and collectives of a
    /// backend run for real, which is how a backend is tested on one
    /// device (NCCL on one GPU). The gradients come out unchanged.
    pub fn with_one_rank(mut self, on: bool) -> GradSync {
        self.one_rank = on;
        self
    }

    /// The bucket size in bytes.
    pub fn bucket_bytes(&self) -> usize {
        self.bucket_bytes
    }

    /// Sums the gradients of `store` over the ranks of `comm` (see the
    /// type's docs). Every rank must call it after its backward, before its
    /// optimizer step, with a store of the same parameters.
    ///
    /// Two collectives in all (with buckets under the size limit): one
    /// all-gather of every rank's bookkeeping (which parameters it wrote
    /// densely, which table rows), from which every rank computes the same
    /// routes and row unions; then one all-reduce per bucket, which carries
    /// the dense gradients and the tables' union rows alike.
    pub fn sync(&self, comm: &dyn Communicator, store: &ParamStore) -> Result<SyncStats> {
        let mut stats = SyncStats::default();
        if comm.size() == 1 && !self.one_rank {
            return Ok(stats);
        }
        let start = Instant::now();
        let params = store.params();
        // [parameter count, hash of their shapes; per parameter: written
        // densely, distinct rows written; then every parameter's distinct
        // rows in order].
        let mut mine = Vec::with_capacity(HEADER + params.len() * 2);
        let dims = params.iter().flat_map(|p| {
            let d = p.shape().dims().to_vec();
            std::iter::once(d.len() as u64).chain(d.into_iter().map(|x| x as u64))
        });
        mine.extend([params.len() as u64, fnv(dims)]);
        let mut own_rows = Vec::with_capacity(params.len());
        for p in &params {
            let acc = store.lock_grad(p.id(), "distributed sync")?;
            let mut rows = acc.rows.clone();
            rows.sort_unstable();
            rows.dedup();
            mine.extend([u64::from(acc.dense), rows.len() as u64]);
            own_rows.push(rows);
        }
        mine.extend(own_rows.iter().flatten().map(|&r| u64::from(r)));
        let all = comm.all_gather(&mine)?;
        let ids = rows_of_every_rank(&all, store, &params)?;
        let routes: Vec<Route> = params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let dense = all.iter().any(|t| t[HEADER + 2 * i] != 0);
                let mut union: Vec<u32> = ids
                    .iter()
                    .flat_map(|rank| rank[i].iter())
                    .copied()
                    .collect();
                union.sort_unstable();
                union.dedup();
                match (dense, union.is_empty()) {
                    (false, true) => Route::Untouched,
                    (true, _) => Route::Dense,
                    // The union's rows against the whole table, in a bucket
                    // (the ids travel in the bookkeeping either way).
                    (false, false) if union.len() * row_len(p) < numel(p) => Route::Rows(union),
                    (false, false) => Route::RowsAsDense(union),
                }
            })
            .collect();
        for ((p, route), own) in params.iter().zip(&routes).zip(&own_rows) {
            match route {
                Route::Dense | Route::RowsAsDense(_) => stats.dense_bytes += numel(p) * 4,
                // The ids travel as 8-byte words.
                Route::Rows(_) => stats.sparse_bytes += own.len() * 8 + route.len(p) * 4,
                Route::Untouched => {}
            }
        }
        self.buckets(comm, store, &params, &routes, &own_rows, &mut stats)?;
        stats.seconds = start.elapsed().as_secs_f64();
        Ok(stats)
    }

    /// Every touched parameter in buckets of whole parameters (a table's
    /// union rows count as one), each summed by one all-reduce.
    fn buckets(
        &self,
        comm: &dyn Communicator,
        store: &ParamStore,
        params: &[Param],
        routes: &[Route],
        own_rows: &[Vec<u32>],
        stats: &mut SyncStats,
    ) -> Result<()> {
        let mut touched = Vec::with_capacity(params.len());
        for ((param, route), own) in params.iter().zip(routes).zip(own_rows) {
            if *route == Route::Untouched {
                continue;
            }
            let device = store
                .lock_grad(param.id(), "distributed sync")?
                .grad
                .device();
            // Whole gradients on a device the communicator reduces on are
            // summed there; a table's rows go through host memory.
            let whole = !matches!(route, Route::Rows(_));
            touched.push(Segment {
                param,
                route,
                own,
                len: route.len(param),
                on: (whole && comm.reduces_on(device)).then_some(device),
            });
        }
        let words = self.bucket_bytes / 4;
        let mut start = 0;
        while start < touched.len() {
            // At least one parameter per bucket, then as many as fit of
            // those summed in the same place (so that rows on the host
            // never pull a device bucket through host memory).
            let on = touched[start].on;
            let mut end = start + 1;
            let mut len = touched[start].len;
            while end < touched.len() && touched[end].on == on && len + touched[end].len <= words {
                len += touched[end].len;
                end += 1;
            }
            let bucket = &touched[start..end];
            match on {
                Some(device) => device_bucket(comm, store, bucket, len, device)?,
                None => {
                    let (mut fresh, mut kept) = (Flat::default(), self.flat.try_lock());
                    let flat = kept.as_deref_mut().unwrap_or(&mut fresh);
                    host_bucket(comm, store, bucket, len, flat)?
                }
            }
            stats.buckets += 1;
            start = end;
        }
        Ok(())
    }
}

/// One parameter's share of a bucket.
struct Segment<'a> {
    param: &'a Param,
    route: &'a Route,
    /// This rank's distinct rows (tables).
    own: &'a [u32],
    /// Values it puts into the bucket.
    len: usize,
    /// The device it is summed on, if not through host memory.
    on: Option<Device>,
}

/// Words before the per-parameter ones in the gathered bookkeeping: the
/// parameter count and a hash of the parameters' shapes.
const HEADER: usize = 2;

/// Every rank's distinct rows per parameter, read out of the gathered
/// bookkeeping (see [`GradSync::sync`]) and checked: the same parameter
/// count and shapes as rank 0 (buckets of different lengths on two ranks
/// would not sum), the ids that the counts announce, rows inside their
/// tables. Every rank finds the same fault at once, so that none fails
/// alone while the others wait.
fn rows_of_every_rank(
    all: &[Vec<u64>],
    store: &ParamStore,
    params: &[Param],
) -> Result<Vec<Vec<Vec<u32>>>> {
    let n = params.len();
    let count = |t: &Vec<u64>| t.first().copied().unwrap_or(0);
    // This rank's own count is among them: the first that differs from
    // rank 0's is the same rank everywhere.
    if let Some((rank, theirs)) = all
        .iter()
        .enumerate()
        .find(|(_, t)| count(t) != count(&all[0]))
    {
        return Err(DistError::ModelMismatch {
            rank,
            what: format!(
                "{} parameters where rank 0 has {}",
                count(theirs),
                count(&all[0])
            ),
        });
    }
    let shapes = |t: &Vec<u64>| t.get(1).copied();
    if let Some((rank, _)) = all
        .iter()
        .enumerate()
        .find(|(_, t)| shapes(t) != shapes(&all[0]))
    {
        return Err(DistError::ModelMismatch {
            rank,
            what: "parameters of other shapes than rank 0's".into(),
        });
    }
    all.iter()
        .enumerate()
        .map(|(rank, theirs)| {
            let header = theirs
                .get(..HEADER + 2 * n)
                .ok_or_else(|| DistError::ModelMismatch {
                    rank,
                    what: format!("{} bookkeeping words for {n} parameters", theirs.len()),
                })?;
            let mut at = HEADER + 2 * n;
            (0..n)
                .map(|i| {
                    let k = header[HEADER + 1 + 2 * i] as usize;
                    let ids = at
                        .checked_add(k)
                        .and_then(|end| theirs.get(at..end))
                        .ok_or_else(|| DistError::ModelMismatch {
                            rank,
                            what: format!("{k} row ids announced, fewer sent"),
                        })?;
                    at += k;
                    let p = &params[i];
                    if let Some(&r) = ids.iter().find(|&&r| r as usize >= p.shape().rows()) {
                        return Err(DistError::Usage(format!(
                            "rank {rank} wrote the gradient of row {r} of {:?}, which has {} rows",
                            store.name(p.id())?,
                            p.shape().rows()
                        )));
                    }
                    Ok(ids.iter().map(|&r| r as u32).collect())
                })
                .collect()
        })
        .collect()
}

/// Sums one bucket of `len` values through host memory: gathered into
/// `flat.send`, summed by [`Communicator::all_reduce_sum_into`] into
/// `flat.sum`, written back. A gradient on a device is downloaded once
/// (a table's copy then takes the summed rows and goes back up whole; a
/// whole gradient's sum is uploaded as it is).
fn host_bucket(
    comm: &dyn Communicator,
    store: &ParamStore,
    bucket: &[Segment],
    len: usize,
    flat: &mut Flat,
) -> Result<()> {
    let Flat { send: flat, sum } = flat;
    flat.clear();
    flat.reserve(len);
    let mut copies: Vec<Option<Vec<f32>>> = Vec::with_capacity(bucket.len());
    for s in bucket {
        let p = s.param;
        let acc = store.lock_grad(p.id(), "distributed sync")?;
        let copy = match acc.grad.device() {
            // Straight from host memory, without a copy of its own.
            Device::Cpu => None,
            _ => Some(host(&acc.grad, store, p)?),
        };
        let grad = match &copy {
            Some(c) => c.as_slice(),
            None => acc
                .grad
                .as_slice::<f32>()
                .map_err(DistError::tensor(context(
                    store,
                    p,
                    "reading the gradient of",
                )))?,
        };
        match s.route {
            Route::Rows(union) => {
                // The union's rows; a row this rank did not write is zero
                // in its gradient (a table's gradient is zero outside the
                // rows it lists), and sent as zeros without reading it.
                let cols = row_len(p);
                for &r in union {
                    match s.own.binary_search(&r) {
                        Ok(_) => flat.extend_from_slice(&grad[r as usize * cols..][..cols]),
                        Err(_) => flat.resize(flat.len() + cols, 0.0),
                    }
                }
            }
            _ => flat.extend_from_slice(grad),
        }
        copies.push(copy.filter(|_| matches!(s.route, Route::Rows(_))));
    }
    sum.resize(flat.len(), 0.0);
    comm.all_reduce_sum_into(flat, sum)?;
    let mut at = 0;
    for (s, copy) in bucket.iter().zip(copies) {
        let (p, n) = (s.param, s.len);
        let mut acc = store.lock_grad(p.id(), "distributed sync")?;
        let sum = &sum[at..at + n];
        let err = || DistError::tensor(context(store, p, "writing the gradient of"));
        let (shape, device) = (acc.grad.shape(), acc.grad.device());
        match (device, s.route, copy) {
            (Device::Cpu, route, _) => {
                let grad = acc.grad.as_mut_slice::<f32>().map_err(err())?;
                match route {
                    Route::Rows(union) => write_rows(grad, union, sum, row_len(p)),
                    _ => grad.copy_from_slice(sum),
                }
            }
            (_, Route::Rows(union), Some(mut values)) => {
                write_rows(&mut values, union, sum, row_len(p));
                acc.grad = upload(&values, shape, device).map_err(err())?;
            }
            _ => acc.grad = upload(sum, shape, device).map_err(err())?,
        }
        mark(&mut acc, s.route);
        at += n;
    }
    Ok(())
}

/// Overwrites rows `union` of `grad` (`cols` wide) with `sum`'s, in order.
fn write_rows(grad: &mut [f32], union: &[u32], sum: &[f32], cols: usize) {
    for (&r, row) in union.iter().zip(sum.chunks_exact(cols.max(1))) {
        grad[r as usize * cols..][..cols].copy_from_slice(row);
    }
}

/// Sums one bucket of `len` values of whole parameters on `device`: the
/// gradients copied into one flat device buffer, summed in place by
/// [`Communicator::all_reduce_sum_tensor`], copied back (device copies, all
/// on the device's stream; the host does not wait).
fn device_bucket(
    comm: &dyn Communicator,
    store: &ParamStore,
    bucket: &[Segment],
    len: usize,
    device: Device,
) -> Result<()> {
    let summing = || format!("summing a gradient bucket on {device}");
    let backend = device.backend().map_err(DistError::tensor(summing()))?;
    let mut flat =
        Tensor::zeros([len], DType::F32, device).map_err(DistError::tensor(summing()))?;
    let mut at = 0;
    for s in bucket {
        let (p, n) = (s.param, s.len);
        let acc = store.lock_grad(p.id(), "distributed sync")?;
        copy_flat(backend, &acc.grad, 0, &mut flat, at, n).map_err(DistError::tensor(context(
            store,
            p,
            "reading the gradient of",
        )))?;
        at += n;
    }
    comm.all_reduce_sum_tensor(&mut flat)?;
    let mut at = 0;
    for s in bucket {
        let (p, n) = (s.param, s.len);
        let mut acc = store.lock_grad(p.id(), "distributed sync")?;
        copy_flat(backend, &flat, at, &mut acc.grad, 0, n).map_err(DistError::tensor(context(
            store,
            p,
            "writing the gradient of",
        )))?;
        mark(&mut acc, s.route);
        at += n;
    }
    Ok(())
}

/// Copies `n` values of `src` from `src_at` into `dst` from `dst_at`, both
/// seen as flat vectors (a device copy on a device).
#[allow(clippy::result_large_err)]
fn copy_flat(
    backend: &dyn Backend,
    src: &Tensor,
    src_at: usize,
    dst: &mut Tensor,
    dst_at: usize,
    n: usize,
) -> sheaf_tensor::Result<()> {
    let src = src.reshape([src.numel()])?;
    let len = dst.numel();
    backend.copy_rows(&src, src_at, dst.view_mut()?.reshape([len])?, dst_at, n)
}

/// What every rank's accumulator says after the sum: written densely if
/// some rank did; a table's rows, the union of every rank's.
fn mark(acc: &mut GradAcc, route: &Route) {
    match route {
        Route::Dense => acc.dense = true,
        Route::Rows(union) | Route::RowsAsDense(union) => acc.rows.clone_from(union),
        Route::Untouched => {}
    }
}

/// A gradient's values on the host.
fn host(t: &Tensor, store: &ParamStore, p: &Param) -> Result<Vec<f32>> {
    match t.device() {
        Device::Cpu => t.as_slice::<f32>().map(<[f32]>::to_vec),
        _ => t.to_vec::<f32>(),
    }
    .map_err(DistError::tensor(context(
        store,
        p,
        "reading the gradient of",
    )))
}

/// A parameter's element count (its value exists, so the count fits).
fn numel(p: &Param) -> usize {
    p.shape().numel().unwrap_or(0)
}

/// A parameter's row length (its value exists, so the length fits).
fn row_len(p: &Param) -> usize {
    p.shape().row_len().unwrap_or(0)
}

/// A device copy of host `values`.
// `TensorError` keeps its shapes inline; this crate boxes it in its own.
#[allow(clippy::result_large_err)]
fn upload(values: &[f32], shape: Shape, device: Device) -> sheaf_tensor::Result<Tensor> {
    Tensor::from_slice(values, shape)?.to_device(device)
}

fn context(store: &ParamStore, p: &Param, what: &str) -> String {
    format!(
        "{what} {:?}",
        store.name(p.id()).unwrap_or("a parameter of another store")
    )
}

/// Overwrites every parameter of `store` with rank 0's, so that all ranks
/// start (or resume) from the same values whatever each one read or drew.
pub fn broadcast_params(comm: &dyn Communicator, store: &mut ParamStore) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    check_same_model(comm, store, 0)?;
    for p in store.params() {
        if comm.reduces_on(store.value(&p)?.device()) {
            comm.broadcast_tensor(store.value_mut(&p)?, 0)?;
            continue;
        }
        let mut values = host(store.value(&p)?, store, &p)?;
        comm.broadcast(&mut values, 0)?;
        let err = DistError::tensor(context(store, &p, "writing"));
        let v = store.value_mut(&p)?;
        match v.device() {
            Device::Cpu => v
                .as_mut_slice::<f32>()
                .map_err(err)?
                .copy_from_slice(&values),
            device => *v = upload(&values, v.shape(), device).map_err(err)?,
        }
    }
    Ok(())
}

/// FNV-1a over 64-bit words: a checksum of a parameter's bits.
fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ w).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Compares a checksum of every parameter's bits with rank 0's; the first
/// parameter (in store order) that differs on some rank is a
/// [`DistError::Diverged`] on EVERY rank, so they all stop together.
/// `step` only labels the error.
pub fn check_in_sync(comm: &dyn Communicator, store: &ParamStore, step: u64) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let params = store.params();
    let mut sums = Vec::with_capacity(params.len());
    for p in &params {
        let v = host(store.value(p)?, store, p)?;
        sums.push(fnv(v.iter().map(|x| u64::from(x.to_bits()))));
    }
    let all = comm.all_gather(&sums)?;
    for (i, p) in params.iter().enumerate() {
        for (rank, theirs) in all.iter().enumerate().skip(1) {
            let (t, o) = (
                theirs.get(i).copied().unwrap_or(0),
                all[0].get(i).copied().unwrap_or(0),
            );
            if t != o {
                return Err(DistError::Diverged {
                    step,
                    param: store.name(p.id())?.to_string(),
                    rank,
                    theirs: t,
                    ours: o,
                });
            }
        }
    }
    Ok(())
}

/// Checks that every rank has the parameters of rank 0 (names, shapes,
/// kinds, in order) and the same `config_hash` (a hash of whatever else
/// must agree: the model's settings, the training settings): a
/// [`DistError::ModelMismatch`] on every rank otherwise, naming the first
/// difference.
pub fn check_same_model(
    comm: &dyn Communicator,
    store: &ParamStore,
    config_hash: u64,
) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let params = store.params();
    let describe = |p: &Param| -> Result<String> {
        Ok(format!(
            "{:?} {:?}{}",
            store.name(p.id())?,
            p.shape(),
            if p.is_table() { " (table)" } else { "" }
        ))
    };
    let mut mine = vec![config_hash, params.len() as u64];
    for p in &params {
        mine.push(fnv(describe(p)?.bytes().map(u64::from)));
    }
    let all = comm.all_gather(&mine)?;
    for (rank, theirs) in all.iter().enumerate().skip(1) {
        let ours = &all[0];
        if theirs.len() < 2 || theirs[1] != ours[1] {
            let n = theirs.get(1).copied().unwrap_or(0);
            return Err(DistError::ModelMismatch {
                rank,
                what: format!("{n} parameters, rank 0 has {}", ours[1]),
            });
        }
        if let Some(i) = (2..ours.len()).find(|&i| theirs[i] != ours[i]) {
            // Every rank but `rank` holds rank 0's parameter there.
            let what = match comm.rank() == rank {
                true => format!("its parameter {} is {}", i - 2, describe(&params[i - 2])?),
                false => format!(
                    "parameter {} of rank 0 is {} there",
                    i - 2,
                    describe(&params[i - 2])?
                ),
            };
            return Err(DistError::ModelMismatch { rank, what });
        }
        if theirs[0] != ours[0] {
            return Err(DistError::ModelMismatch {
                rank,
                what: format!(
                    "its configuration hash is {:#018x}, rank 0's {:#018x} (another \
                     model or training setting)",
                    theirs[0], ours[0]
                ),
            });
        }
    }
    Ok(())
}
