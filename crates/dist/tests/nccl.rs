#![cfg(feature = "nccl")]
//! The NCCL backend on one GPU: a one-rank [`Nccl`] (its unique id over
//! [`Local`]) sums and broadcasts CUDA tensors on the device, and its host
//! collectives stage through device buffers; with one rank every result
//! equals the input, bit for bit. [`GradSync`] over it (made to run with
//! one rank: [`GradSync::with_one_rank`]) takes the device route (one flat
//! device bucket per bucket) and gives the gradients that the host route
//! gives over [`Local`].
//!
//! The checks are written for any communicator and device, and run over
//! [`Local`] on the CPU as well (everywhere): the NCCL results must equal
//! those.
//!
//! Each test that needs NCCL starts with [`nccl`], which prints
//! `skipping: <reason>` and returns early where no GPU or no NCCL library
//! is at hand, and FAILS instead under `SHEAF_REQUIRE_GPU=1` (the GPU
//! bundle sets it). The tests hold one lock while they run: the device has
//! one stream.
//!
//! Several ranks (one per GPU, MPI as the bootstrap) are not tested here.

use std::sync::{Mutex, MutexGuard};

use sheaf_autodiff::{Param, ParamStore};
use sheaf_dist::{Communicator, CommunicatorExt, DistError, GradSync, Local, Nccl, SyncStats};
use sheaf_tensor::{DType, Device, Shape, Tensor};

const CUDA: Device = Device::Cuda(0);

/// The device lock and a one-rank NCCL communicator on cuda:0 (dropped
/// before the lock), or `None` with the reason printed (a panic under
/// `SHEAF_REQUIRE_GPU=1`).
fn nccl() -> Option<(MutexGuard<'static, ()>, Nccl)> {
    static LOCK: Mutex<()> = Mutex::new(());
    let lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    match Nccl::init(Local) {
        Ok(comm) => Some((lock, comm)),
        Err(e) if sheaf_tensor::gpu_required() => panic!(
            "{}=1, but NCCL did not start on cuda:0: {e}",
            sheaf_tensor::REQUIRE_GPU_VAR
        ),
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

/// A deterministic value with a rounding-prone mantissa.
fn val(seed: usize, i: usize) -> f32 {
    ((seed * 131 + i) as f32 * 0.377).sin() * 1.7
}

fn values(seed: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| val(seed, i)).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Without a GPU or without libnccl, joining is one clear error naming
/// the rank, never a panic (runs everywhere).
#[test]
fn joining_without_a_gpu_or_nccl_is_an_error_not_a_panic() {
    match Nccl::init(Local) {
        Ok(comm) => {
            assert_eq!((comm.rank(), comm.size(), comm.backend()), (0, 1, "nccl"));
            eprintln!("NCCL is at hand here: {comm:?}");
        }
        Err(DistError::Nccl(why)) => {
            assert!(why.starts_with("rank 0 cannot join: "), "{why}");
            assert!(!why.contains('\n'), "one line: {why}");
            eprintln!("as expected here: {why}");
        }
        Err(other) => panic!("expected DistError::Nccl, got {other}"),
    }
}

/// One rank's tensor all-reduce and broadcast on `device` leave the
/// tensor unchanged, bit for bit.
fn check_tensor_collectives(comm: &dyn Communicator, device: Device) {
    for dims in [&[37usize, 53][..], &[1], &[0, 4], &[3, 5, 7]] {
        let shape = Shape::new(dims).unwrap();
        let want = values(dims.len(), shape.numel().unwrap());
        let mut t = Tensor::from_slice(&want, shape)
            .unwrap()
            .to_device(device)
            .unwrap();
        comm.all_reduce_sum_tensor(&mut t).unwrap();
        assert_eq!(t.device(), device);
        assert_eq!(bits(&t.to_vec::<f32>().unwrap()), bits(&want), "{dims:?}");
        comm.broadcast_tensor(&mut t, 0).unwrap();
        assert_eq!(bits(&t.to_vec::<f32>().unwrap()), bits(&want), "{dims:?}");
    }
    // A view of rows of a shared tensor: only the view's words, and the
    // original is left alone (copy-on-write).
    let whole = Tensor::from_slice(&values(9, 24), [6, 4])
        .unwrap()
        .to_device(device)
        .unwrap();
    let mut rows = whole.rows(1..3).unwrap();
    comm.all_reduce_sum_tensor(&mut rows).unwrap();
    assert_eq!(rows.to_vec::<f32>().unwrap(), values(9, 24)[4..12]);
    assert_eq!(whole.to_vec::<f32>().unwrap(), values(9, 24));
    // A host tensor goes through host memory.
    let mut h = Tensor::from_slice(&values(3, 10), [10]).unwrap();
    comm.all_reduce_sum_tensor(&mut h).unwrap();
    assert_eq!(h.as_slice::<f32>().unwrap(), values(3, 10));
    // Bad roots and dtypes are usage errors.
    let mut t = Tensor::zeros([4], DType::F32, device).unwrap();
    assert!(matches!(
        comm.broadcast_tensor(&mut t, 1),
        Err(DistError::Usage(_))
    ));
    let mut ints = Tensor::zeros([4], DType::I32, device).unwrap();
    assert!(matches!(
        comm.all_reduce_sum_tensor(&mut ints),
        Err(DistError::Usage(_))
    ));
}

#[test]
fn one_rank_sums_and_broadcasts_a_cuda_tensor_in_place_unchanged() {
    let Some((_lock, comm)) = nccl() else { return };
    assert!(comm.reduces_on(CUDA) && !comm.reduces_on(Device::Cpu));
    assert_eq!(comm.device(), CUDA);
    check_tensor_collectives(&comm, CUDA);
}

/// One rank's host collectives give back what they were given.
fn check_host_collectives(comm: &dyn Communicator) {
    let want = values(1, 1000);
    let mut v = want.clone();
    comm.all_reduce_sum(&mut v).unwrap();
    assert_eq!(bits(&v), bits(&want));
    comm.broadcast(&mut v, 0).unwrap();
    assert_eq!(bits(&v), bits(&want));
    assert!(matches!(
        comm.broadcast(&mut v, 1),
        Err(DistError::Usage(_))
    ));
    let mut w: Vec<f64> = (0..100).map(|i| f64::from(i) * 0.1).collect();
    let want64 = w.clone();
    comm.all_reduce_sum_f64(&mut w).unwrap();
    assert_eq!(w, want64);
    assert_eq!(
        comm.all_gather_bytes(b"seven b").unwrap(),
        [b"seven b".to_vec()]
    );
    assert_eq!(comm.all_gather_bytes(&[]).unwrap(), [Vec::<u8>::new()]);
    assert_eq!(
        comm.all_gather(&[3u64, 1 << 40]).unwrap(),
        [vec![3u64, 1 << 40]]
    );
    comm.barrier().unwrap();
}

#[test]
fn one_rank_host_collectives_stage_through_the_device_unchanged() {
    let Some((_lock, comm)) = nccl() else { return };
    check_host_collectives(&comm);
}

/// (name, dims, is a table).
type Spec = (&'static str, &'static [usize], bool);

const SPEC: &[Spec] = &[
    ("w1", &[40, 30], false),
    ("b1", &[30], false),
    ("w2", &[30, 7], false),
    ("untouched", &[5, 5], false),
    ("scalar", &[], false),
    // Few rows written: exchanged as (ids, rows).
    ("emb", &[50, 8], true),
    // Most rows written: summed densely, its row list kept.
    ("small_emb", &[4, 3], true),
];

/// A store of [`SPEC`] with gradients as a backward would leave them
/// (dense ones, rows of the tables), on `device`.
fn store_with_grads(device: Device) -> (ParamStore, Vec<Param>) {
    let mut store = ParamStore::new();
    let params: Vec<Param> = SPEC
        .iter()
        .enumerate()
        .map(|(k, &(name, dims, table))| {
            let shape = Shape::new(dims).unwrap();
            let v = Tensor::from_slice(&values(k, shape.numel().unwrap()), shape).unwrap();
            match table {
                true => store.add_table(name, v).unwrap(),
                false => store.add(name, v).unwrap(),
            }
        })
        .collect();
    for (k, p) in params.iter().enumerate() {
        let mut acc = store.lock_grad(p.id(), "test").unwrap();
        let cols = p.shape().row_len().unwrap();
        let g = acc.grad.as_mut_slice::<f32>().unwrap();
        match SPEC[k] {
            ("untouched", ..) => {}
            (_, _, false) => {
                g.copy_from_slice(&values(100 + k, g.len()));
                acc.dense = true;
            }
            (_, _, true) => {
                let rows: Vec<u32> = match SPEC[k].0 {
                    "emb" => vec![7, 3, 7, 41],
                    _ => vec![0, 2, 3],
                };
                for &r in &rows {
                    let at = r as usize * cols;
                    g[at..at + cols].copy_from_slice(&values(200 + k + r as usize, cols));
                }
                acc.rows = rows;
            }
        }
    }
    store.to_device(device).unwrap();
    (store, params)
}

/// (gradient, rows, dense) of every parameter, on the host.
fn grads(store: &ParamStore, params: &[Param]) -> Vec<(Vec<u32>, Vec<u32>, bool)> {
    params
        .iter()
        .map(|p| {
            let acc = store.lock_grad(p.id(), "test").unwrap();
            (
                bits(&acc.grad.to_vec::<f32>().unwrap()),
                acc.rows.clone(),
                acc.dense,
            )
        })
        .collect()
}

/// GradSync over `comm` on a store on `device` gives the gradients (and
/// counts) that it gives over [`Local`] on the CPU; with one rank those are
/// the rank's own, the tables' rows sorted and deduplicated.
fn check_grad_sync(comm: &dyn Communicator, device: Device) {
    // Every parameter a bucket of its own, a few per bucket, one bucket.
    for bucket_bytes in [4, 4 * 1300, sheaf_dist::DEFAULT_BUCKET_BYTES] {
        let sync = GradSync::with_bucket_bytes(bucket_bytes).with_one_rank(true);
        let (host, params) = store_with_grads(Device::Cpu);
        let (dev, dev_params) = store_with_grads(device);
        let before = grads(&host, &params);
        let on_host = sync.sync(&Local, &host).unwrap();
        let on_dev = sync.sync(comm, &dev).unwrap();
        // The same bytes; a table's rows (host memory) stay out of the
        // device's buckets, so the device may take more buckets.
        assert_eq!(
            (on_dev.dense_bytes, on_dev.sparse_bytes),
            (on_host.dense_bytes, on_host.sparse_bytes),
            "bucket_bytes {bucket_bytes}"
        );
        assert!(on_host.buckets > 0 && on_dev.buckets >= on_host.buckets);
        let (h, d) = (grads(&host, &params), grads(&dev, &dev_params));
        for (k, ((h, d), b)) in h.iter().zip(&d).zip(&before).enumerate() {
            let name = SPEC[k].0;
            assert_eq!(d, h, "{name}: {} vs local, {bucket_bytes}", comm.backend());
            assert_eq!(d.0, b.0, "{name}: changed by a one-rank sum");
            let mut rows = b.1.clone();
            rows.sort_unstable();
            rows.dedup();
            assert_eq!(d.1, rows, "{name}: rows");
        }
        for p in &dev_params {
            let acc = dev.lock_grad(p.id(), "test").unwrap();
            assert_eq!(acc.grad.device(), device, "gradients stay on the device");
        }
    }
}

#[test]
fn grad_sync_over_nccl_equals_grad_sync_over_the_one_process_backend() {
    let Some((_lock, comm)) = nccl() else { return };
    check_grad_sync(&comm, CUDA);
}

/// The checks above over the one-process backend on the CPU (what the NCCL
/// results must equal), so that they run everywhere.
#[test]
fn the_checks_pass_over_the_one_process_backend_on_the_cpu() {
    check_tensor_collectives(&Local, Device::Cpu);
    check_host_collectives(&Local);
    check_grad_sync(&Local, Device::Cpu);
    let stats = GradSync::new().sync(&Local, &store_with_grads(Device::Cpu).0);
    assert_eq!(
        stats.unwrap(),
        SyncStats::default(),
        "one rank: nothing done"
    );
}

/// What the test below runs in a child process: the helper, under
/// whatever `SHEAF_REQUIRE_GPU` the child was given.
#[test]
fn probe_the_nccl_helper() {
    let _ = nccl();
}

/// Where NCCL does not start, the tests skip, unless `SHEAF_REQUIRE_GPU=1`:
/// then they FAIL, naming the reason.
#[test]
fn required_gpu_without_nccl_fails_the_tests() {
    if Nccl::init(Local).is_ok() {
        eprintln!("not run: NCCL starts here");
        return;
    }
    let probe = |require: bool| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "probe_the_nccl_helper", "--test-threads=1"]);
        cmd.env_remove(sheaf_tensor::REQUIRE_GPU_VAR);
        if require {
            cmd.env(sheaf_tensor::REQUIRE_GPU_VAR, "1");
        }
        let out = cmd.output().expect("rerun this test binary");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = probe(true);
    assert!(!ok, "passed although a GPU was required:\n{text}");
    assert!(
        text.contains("SHEAF_REQUIRE_GPU=1, but NCCL did not start on cuda:0"),
        "{text}"
    );
    let (ok, text) = probe(false);
    assert!(ok, "failed without SHEAF_REQUIRE_GPU:\n{text}");
}
