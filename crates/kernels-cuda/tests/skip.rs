//! Runs everywhere: without CUDA, opening a device is an error, never a
//! panic (the parity tests rely on it to skip).

use sheaf_kernels_cuda::{device_count, driver_present, CudaError, CudaKernels};

mod common;

#[test]
fn opening_a_device_without_cuda_is_unavailable_never_a_panic() {
    let first = CudaKernels::new(0);
    if driver_present() {
        eprintln!(
            "libcuda is present: CudaKernels::new(0) gave {}",
            match &first {
                Ok(k) => format!("{k:?}"),
                Err(e) => e.to_string(),
            }
        );
    } else {
        match first {
            Err(CudaError::Unavailable(why)) => assert!(why.contains("libcuda"), "{why}"),
            Err(other) => panic!("expected CudaError::Unavailable, got {other}"),
            Ok(k) => panic!("opened {k:?} without a CUDA driver"),
        }
        assert!(matches!(device_count(), Err(CudaError::Unavailable(_))));
    }
    // No machine has device 999: with or without CUDA, a clean error.
    match CudaKernels::new(999) {
        Err(CudaError::Unavailable(_)) => {}
        Err(other) => panic!("expected CudaError::Unavailable for cuda:999, got {other}"),
        Ok(k) => panic!("opened {k:?} as cuda:999"),
    }
}

/// What the test below runs in a child process: the parity tests' device
/// helper, under whatever `SHEAF_REQUIRE_GPU` the child was given.
#[test]
fn probe_the_parity_helper() {
    let _ = common::gpu();
}

/// Where no device opens, the parity helper skips, unless
/// `SHEAF_REQUIRE_GPU=1` asks for a device: then the test FAILS, naming
/// the reason, so that a GPU run with a broken device cannot pass.
#[test]
fn a_required_device_that_does_not_open_fails_the_tests() {
    if CudaKernels::new(0).is_ok() {
        eprintln!("not run: cuda:0 opens here");
        return;
    }
    let probe = |require: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "probe_the_parity_helper", "--test-threads=1"]);
        cmd.env_remove(sheaf_kernels_cuda::REQUIRE_GPU_VAR);
        if let Some(v) = require {
            cmd.env(sheaf_kernels_cuda::REQUIRE_GPU_VAR, v);
        }
        let out = cmd.output().expect("rerun this test binary");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = probe(Some("1"));
    assert!(!ok, "passed although a device was required:\n{text}");
    assert!(
        text.contains("SHEAF_REQUIRE_GPU=1, but cuda:0 did not open"),
        "{text}"
    );
    for require in [None, Some("0")] {
        let (ok, text) = probe(require);
        assert!(ok, "failed with SHEAF_REQUIRE_GPU={require:?}:\n{text}");
    }
}
