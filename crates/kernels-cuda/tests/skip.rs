//! Runs everywhere: without CUDA, opening a device is an error, never a
//! panic (the parity tests rely on it to skip).

use sheaf_kernels_cuda::{device_count, driver_present, CudaError, CudaKernels};

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
