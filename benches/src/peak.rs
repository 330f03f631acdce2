//! The machine's sgemm peak, measured in the same run as every other figure:
//! matrixmultiply at 1024^3, as `shared/BENCHMARKS.md` defines it.

use crate::measure::{random_vec, seconds_per_call, with_threads, Budget};

/// Size of the peak product.
pub const PEAK_N: usize = 1024;

/// matrixmultiply's sgemm on row-major `c = a b` (m x k times k x n),
/// single-threaded (the crate is built without its `threading` feature).
pub fn matrixmultiply_sgemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: the assert above proves that a (m x k, row stride k), b (k x n,
    // row stride n) and c (m x n, row stride n) lie inside their slices, and
    // c is borrowed mutably so nothing else aliases it.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// matrixmultiply on `threads` rayon threads: C is split into `threads`
/// row blocks, each one single-threaded matrixmultiply call.
pub fn matrixmultiply_sgemm_threads(
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
) {
    if threads <= 1 {
        return matrixmultiply_sgemm(m, n, k, a, b, c);
    }
    let rows_per = m.div_ceil(threads).max(1);
    rayon::scope(|s| {
        for (i, c_block) in c[..m * n].chunks_mut(rows_per * n).enumerate() {
            let rows = c_block.len() / n;
            let a_block = &a[i * rows_per * k..(i * rows_per + rows) * k];
            s.spawn(move |_| matrixmultiply_sgemm(rows, n, k, a_block, b, c_block));
        }
    });
}

/// Peak sgemm GFLOP/s at `threads` threads (matrixmultiply, 1024^3).
pub fn sgemm_peak_gflops(threads: usize, budget: Budget) -> f64 {
    let n = PEAK_N;
    let a = random_vec(n * n, 1);
    let b = random_vec(n * n, 2);
    let mut c = vec![0.0f32; n * n];
    let secs = with_threads(threads, || {
        seconds_per_call(budget, || {
            matrixmultiply_sgemm_threads(threads, n, n, n, &a, &b, &mut c)
        })
    });
    2.0 * (n * n * n) as f64 / secs / 1e9
}
