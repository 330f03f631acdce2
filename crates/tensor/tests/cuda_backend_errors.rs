#![cfg(feature = "cuda")]
//! The CUDA backend's errors: device and shape mismatches, index values
//! found on the device, allocation failures, no device.
//!
//! Every `Backend` method
//! runs on `Device::Cuda(0)` and on `Device::Cpu` with the same random
//! inputs (and the same initial outputs, nonzero where a method
//! accumulates), and the results are compared element by element:
//! `|gpu - cpu| <= atol + rtol * |cpu|`.
//!
//! Tolerances:
//! - pure arithmetic (add, scale, axpy, optimizer updates, ...): atol =
//!   rtol = 1e-5 ([`ARITH`]); the two sides may differ in FMA contraction
//!   and in the order of a few additions;
//! - where exp / tanh / log are involved: 2e-5 ([`TRANSC`]), since the CPU
//!   kernels use their own vectorised approximations and CUDA's `expf`,
//!   `tanhf`, `logf` are accurate to a couple of ulps;
//! - reductions over `n` terms (matmul with inner dimension `k`, row and
//!   column sums): the base tolerance times `sqrt(n)` ([`summed`]). The two
//!   backends add in different orders (cuBLAS's blocking vs the CPU's
//!   register tiles; a block tree vs SIMD lanes); for terms of size O(1)
//!   with random signs each partial sum is O(sqrt(i)) and the rounding
//!   errors add up like a random walk, so the difference grows like the
//!   size of the result, about `sqrt(n)`.
//!
//! Every test that needs a device starts with [`gpu`], which returns the
//! CUDA backend or prints `skipping: <reason>` and makes the test return
//! early, so the suite compiles and passes on machines without CUDA and
//! runs for real where there is a device. The GPU tests hold one lock
//! while they run: the device has one stream and one error word for bad
//! index values, so a test that provokes an index error must not have its
//! error picked up by another test's download.

// `TensorError` keeps its shapes inline (about 150 bytes), as the library
// explains at its `allow`; the parity closures return it.
#![allow(clippy::result_large_err)]

#[macro_use]
mod cuda_common;

use cuda_common::*;

// ---- Errors.

#[test]
fn host_tensors_given_to_the_cuda_backend_are_device_mismatches() {
    let Some(gpu) = gpu() else { return };
    let (a, b) = (rand([4, 5], 1), rand([4, 5], 2));
    let (ag, bg) = (up(&a), up(&b));
    let mut yg = up(&rand([4, 5], 3));
    let mut y = rand([4, 5], 3);

    let e = gpu
        .binary(Binary::Add, &a, &bg, yg.view_mut().unwrap())
        .unwrap_err();
    assert_eq!(
        e,
        TensorError::DeviceMismatch {
            op: "add",
            arg: "a",
            expected: CUDA,
            got: Device::Cpu
        }
    );
    let e = gpu
        .binary(Binary::Mul, &ag, &b, yg.view_mut().unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "mul",
                arg: "b",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu
        .unary(Unary::Tanh, &ag, y.view_mut().unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "tanh",
                arg: "y",
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("tanh") && msg.contains("`y`") && msg.contains("cpu"),
        "{msg}"
    );
    let e = gpu
        .matmul(
            &ag,
            NO,
            &b,
            YES,
            1.0,
            0.0,
            up(&rand([4, 4], 4)).view_mut().unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "matmul",
                arg: "b",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu
        .gather_rows(&ag, &idx(&[0, 1]), up(&rand([2, 5], 5)).view_mut().unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "gather_rows",
                arg: "idx",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu
        .sgd_step_rows(
            &sgd(0.0),
            yg.view_mut().unwrap(),
            &[1],
            &rand([1, 5], 6),
            None,
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "sgd_step_rows",
                arg: "grad",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu
        .lstm_fwd(
            &up(&rand([4, 8], 7)),
            &rand([4, 2], 8),
            up(&rand([4, 8], 9)).view_mut().unwrap(),
            up(&rand([4, 2], 10)).view_mut().unwrap(),
            up(&rand([4, 2], 11)).view_mut().unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "lstm_fwd",
                arg: "c_prev",
                ..
            }
        ),
        "{e}"
    );
    let e = gpu.fill(1.0, y.view_mut().unwrap()).unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "fill",
                arg: "out",
                ..
            }
        ),
        "{e}"
    );
    // And the other way round: a device tensor given to the CPU backend.
    let e = cpu()
        .binary(Binary::Add, &ag, &b, y.view_mut().unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::DeviceMismatch {
                op: "add",
                arg: "a",
                ..
            }
        ),
        "{e}"
    );
}

/// Shape errors are the CPU backend's, word for word.
#[test]
fn shape_errors_match_the_cpu_backend() {
    let Some(gpu) = gpu() else { return };
    // Each case runs with host tensors on the CPU and device copies on
    // CUDA, and must fail the same way.
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        Vec<Tensor>,
        Vec<Tensor>,
        Box<dyn Fn(&dyn Backend, &[Tensor], &mut [Tensor]) -> Result<()>>,
    )> = vec![
        (
            "add",
            vec![rand([4, 5], 1), rand([5, 4], 2)],
            vec![rand([4, 5], 3)],
            Box::new(|b, i, o| b.binary(Binary::Add, &i[0], &i[1], o[0].view_mut()?)),
        ),
        (
            "tanh",
            vec![rand([4, 5], 1)],
            vec![rand([4, 6], 3)],
            Box::new(|b, i, o| b.unary(Unary::Tanh, &i[0], o[0].view_mut()?)),
        ),
        (
            "matmul inner",
            vec![rand([4, 5], 1), rand([6, 3], 2)],
            vec![rand([4, 3], 3)],
            Box::new(|b, i, o| b.matmul(&i[0], NO, &i[1], NO, 1.0, 0.0, o[0].view_mut()?)),
        ),
        (
            "matmul out",
            vec![rand([4, 5], 1), rand([5, 3], 2)],
            vec![rand([3, 4], 3)],
            Box::new(|b, i, o| b.matmul(&i[0], NO, &i[1], NO, 1.0, 0.0, o[0].view_mut()?)),
        ),
        (
            "gather_rows",
            vec![rand([10, 5], 1), idx(&[1, 2, 3])],
            vec![rand([2, 5], 3)],
            Box::new(|b, i, o| b.gather_rows(&i[0], &i[1], o[0].view_mut()?)),
        ),
        (
            "copy_rows out of range",
            vec![rand([10, 5], 1)],
            vec![rand([4, 5], 3)],
            Box::new(|b, i, o| b.copy_rows(&i[0], 8, o[0].view_mut()?, 0, 3)),
        ),
        (
            "softmax_rows",
            vec![rand([4, 5], 1)],
            vec![rand([4, 4], 3)],
            Box::new(|b, i, o| b.softmax_rows(&i[0], o[0].view_mut()?)),
        ),
        (
            "nll_log_softmax",
            vec![rand([4, 5], 1), idx(&[0, 1, 2])],
            vec![rand([4, 5], 3), rand([4], 4)],
            Box::new(|b, i, o| {
                let [p, l] = o else { unreachable!() };
                b.nll_log_softmax(&i[0], &i[1], p.view_mut()?, l.view_mut()?)
            }),
        ),
        (
            "lstm_fwd",
            vec![rand([4, 8], 1), rand([4, 2], 2)],
            vec![rand([4, 8], 3), rand([4, 3], 4), rand([4, 2], 5)],
            Box::new(|b, i, o| {
                let [a, c, h] = o else { unreachable!() };
                b.lstm_fwd(&i[0], &i[1], a.view_mut()?, c.view_mut()?, h.view_mut()?)
            }),
        ),
        (
            "sgd_step_rows",
            vec![rand([3, 5], 2)],
            vec![rand([10, 5], 3)],
            Box::new(|b, i, o| b.sgd_step_rows(&sgd(0.0), o[0].view_mut()?, &[1, 2], &i[0], None)),
        ),
        (
            "sgd_step_rows duplicate",
            vec![rand([3, 5], 2)],
            vec![rand([10, 5], 3)],
            Box::new(|b, i, o| {
                b.sgd_step_rows(&sgd(0.0), o[0].view_mut()?, &[1, 4, 1], &i[0], None)
            }),
        ),
        (
            "adagrad_step_rows past the table",
            vec![rand([2, 5], 2)],
            vec![rand([10, 5], 3), rand([10, 5], 4)],
            Box::new(|b, i, o| {
                let [p, a] = o else { unreachable!() };
                b.adagrad_step_rows(&adagrad(), p.view_mut()?, &[3, 10], &i[0], a.view_mut()?)
            }),
        ),
        (
            "gather_rows zero columns",
            vec![rand([10, 0], 1), idx(&[1, 10])],
            vec![rand([2, 0], 3)],
            Box::new(|b, i, o| b.gather_rows(&i[0], &i[1], o[0].view_mut()?)),
        ),
        (
            "scatter_add_rows zero columns",
            vec![rand([2, 0], 1), idx(&[12, 1])],
            vec![rand([10, 0], 3)],
            Box::new(|b, i, o| b.scatter_add_rows(&i[0], &i[1], o[0].view_mut()?)),
        ),
        (
            "adam_step zero",
            vec![rand([3, 5], 2)],
            vec![rand([3, 5], 3), rand([3, 5], 4), rand([3, 5], 5)],
            Box::new(|b, i, o| {
                let [p, m, v] = o else { unreachable!() };
                b.adam_step(
                    &adam(),
                    0,
                    p.view_mut()?,
                    &i[0],
                    m.view_mut()?,
                    v.view_mut()?,
                )
            }),
        ),
        (
            "sgd_step momentum without velocity",
            vec![rand([3, 5], 2)],
            vec![rand([3, 5], 3)],
            Box::new(|b, i, o| b.sgd_step(&sgd(0.9), o[0].view_mut()?, &i[0], None)),
        ),
    ];
    for (name, inputs, outputs, f) in cases {
        let mut cpu_out = outputs.clone();
        let want = f(cpu(), &inputs, &mut cpu_out).expect_err(name);
        let gpu_in: Vec<Tensor> = inputs.iter().map(up).collect();
        let mut gpu_out: Vec<Tensor> = outputs.iter().map(up).collect();
        let got = f(&*gpu, &gpu_in, &mut gpu_out).expect_err(name);
        assert_eq!(got.to_string(), want.to_string(), "{name}");
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn bad_index_values_are_errors_at_the_next_download() {
    let Some(gpu) = gpu() else { return };
    // Gather: the launch succeeds (the device checks the value), the next
    // download reports it, naming the kernel; the one after is clean.
    let src = up(&rand([10, 4], 1));
    let mut dst = up(&rand([3, 4], 2));
    gpu.gather_rows(&src, &up(&idx(&[1, 99, 2])), dst.view_mut().unwrap())
        .unwrap();
    let e = dst.to_vec::<f32>().unwrap_err();
    assert!(matches!(e, TensorError::Cuda { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("gather_rows"), "{msg}");
    assert!(msg.contains("99"), "{msg}");
    assert!(dst.to_vec::<f32>().is_ok(), "the error is reported once");

    // Scatter-add, likewise.
    let mut table = up(&rand([10, 4], 3));
    gpu.scatter_add_rows(
        &up(&rand([2, 4], 4)),
        &up(&idx(&[0, 10])),
        table.view_mut().unwrap(),
    )
    .unwrap();
    let msg = table.to_vec::<f32>().unwrap_err().to_string();
    assert!(msg.contains("scatter_add_rows"), "{msg}");

    // A label not below the class count.
    let (mut probs, mut loss) = (up(&rand([2, 3], 5)), up(&rand([2], 6)));
    gpu.nll_log_softmax(
        &up(&rand([2, 3], 7)),
        &up(&idx(&[0, 3])),
        probs.view_mut().unwrap(),
        loss.view_mut().unwrap(),
    )
    .unwrap();
    let msg = loss.to_vec::<f32>().unwrap_err().to_string();
    assert!(msg.contains("nll_log_softmax"), "{msg}");

    // Sparse optimizer rows are checked on the host before the launch: a
    // duplicate or an id past the table is a Kernel error, nothing changes.
    let p0 = rand([10, 4], 8);
    let mut p = up(&p0);
    let e = gpu
        .sgd_step_rows(
            &sgd(0.0),
            p.view_mut().unwrap(),
            &[2, 5, 2],
            &up(&rand([3, 4], 9)),
            None,
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::Kernel {
                op: "sgd_step_rows",
                ..
            }
        ),
        "{e:?}"
    );
    let e = gpu
        .adam_step_rows(
            &adam(),
            1,
            p.view_mut().unwrap(),
            &[10],
            &up(&rand([1, 4], 10)),
            up(&rand([10, 4], 11)).view_mut().unwrap(),
            up(&rand([10, 4], 12)).view_mut().unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            TensorError::Kernel {
                op: "adam_step_rows",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(host(&p), host(&p0), "rejected sparse steps change nothing");
}

#[test]
fn huge_device_allocation_is_an_error_naming_the_bytes() {
    let Some(_gpu) = gpu() else { return };
    let r = Tensor::zeros([1 << 20, 1 << 20], DType::F32, CUDA);
    let msg = r.expect_err("4 TiB cannot be allocated").to_string();
    let bytes = (4u64 << 40).to_string();
    assert!(msg.contains(&bytes), "{msg}");
    // The device is still usable afterwards.
    let t = Tensor::full_f32(3.0, [2, 2], CUDA).unwrap();
    assert_eq!(host(&t), [3.0; 4]);
}

/// Runs everywhere: without a CUDA driver, asking for a CUDA device is an
/// error saying CUDA is unavailable, never a panic.
#[test]
fn without_a_driver_cuda_devices_are_unavailable() {
    if sheaf_kernels_cuda::driver_present() {
        // With a driver, device 0 may still be missing: then it must be
        // the same kind of error.
        if let Err(e) = Device::Cuda(0).backend() {
            assert!(e.to_string().contains("CUDA is unavailable"), "{e}");
        }
        eprintln!("skipping the no-driver checks: a CUDA driver is present");
        return;
    }
    let unavailable = |e: TensorError| {
        let msg = e.to_string();
        assert!(msg.contains("CUDA is unavailable"), "{msg}");
    };
    unavailable(Device::Cuda(0).backend().map(|_| ()).unwrap_err());
    unavailable(Device::Cuda(3).backend().map(|_| ()).unwrap_err());
    unavailable(Tensor::zeros([2, 3], DType::F32, CUDA).unwrap_err());
    unavailable(Tensor::full_f32(1.0, [2, 3], CUDA).unwrap_err());
    unavailable(rand([2, 3], 1).to_device(CUDA).unwrap_err());
    unavailable(CudaBackend::global(0).map(|_| ()).unwrap_err());
    assert!(!CUDA.is_available());
    // The CPU is unaffected.
    assert!(Device::Cpu.is_available());
}

/// What the test below runs in a child process: the GPU tests' backend
/// helper, under whatever `SHEAF_REQUIRE_GPU` the child was given.
#[test]
fn probe_the_gpu_helper() {
    let _ = gpu();
}

/// Where no device opens, the GPU tests skip, unless `SHEAF_REQUIRE_GPU=1`
/// asks for a device: then they FAIL, naming the reason.
#[test]
fn a_required_device_that_does_not_open_fails_the_tests() {
    if CUDA.is_available() {
        eprintln!("not run: cuda:0 opens here");
        return;
    }
    let probe = |require: bool| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "probe_the_gpu_helper", "--test-threads=1"]);
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
    assert!(!ok, "passed although a device was required:\n{text}");
    assert!(
        text.contains("SHEAF_REQUIRE_GPU=1, but cuda:0 did not open"),
        "{text}"
    );
    let (ok, text) = probe(false);
    assert!(ok, "failed without SHEAF_REQUIRE_GPU:\n{text}");
}

/// Empty device tensors stand on a real one-word allocation (a zero-byte
/// `cuMemAllocAsync` may leave its pointer unwritten, and the drop would
/// free whatever it held): making and dropping many is clean.
#[test]
fn empty_device_tensors_allocate_and_free_cleanly() {
    let Some(gpu) = gpu() else { return };
    for i in 0..1000 {
        let t = Tensor::zeros([0, 5], DType::F32, CUDA).unwrap();
        let u = rand([3, 0], i).to_device(CUDA).unwrap();
        assert_eq!(t.shape(), sh(&[0, 5]));
        assert!(host(&t).is_empty() && host(&u).is_empty());
    }
    gpu.cuda().unwrap().synchronize().unwrap();
}

/// A device tensor dropped on a thread that never used the device is
/// freed there (the drop makes the context current first): 80 tensors of
/// 2 GiB, each dropped on a fresh thread, would run any GPU out of memory
/// if the frees failed.
#[test]
fn device_tensors_dropped_on_fresh_threads_are_freed() {
    let Some(gpu) = gpu() else { return };
    for i in 0..80 {
        let t = Tensor::zeros([1 << 19, 1 << 10], DType::F32, CUDA)
            .unwrap_or_else(|e| panic!("allocation {i} of 2 GiB: {e}"));
        std::thread::spawn(move || drop(t)).join().unwrap();
    }
    gpu.cuda().unwrap().synchronize().unwrap();
}

/// `Tensor::with_cuda_slice_mut` hands out exactly the tensor's device
/// words (a view of rows: those rows), copies shared storage first, and
/// refuses a host tensor.
#[test]
fn cuda_slice_access_covers_the_view_and_copies_shared_storage() {
    let mut on_host = rand([2, 3], 1);
    assert!(matches!(
        on_host.with_cuda_slice_mut(|_, _| ()),
        Err(TensorError::InvalidArgument { .. })
    ));
    let Some(_gpu) = gpu() else { return };
    let values = rand([6, 5], 2);
    let t = values.to_device(CUDA).unwrap();
    let mut rows = t.rows(2..4).unwrap();
    let len = rows
        .with_cuda_slice_mut(|view, stream| {
            stream.memset_zeros(view).unwrap();
            view.len()
        })
        .unwrap();
    assert_eq!(len, 10);
    assert!(
        !rows.shares_storage(&t),
        "written while shared: a copy first"
    );
    assert_eq!(host(&rows), [0.0; 10]);
    assert_eq!(host(&t), host(&values), "the shared original is unchanged");
}
