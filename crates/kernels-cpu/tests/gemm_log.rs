//! The product log: every sgemm call inside `record`, on any thread, and
//! nothing outside it. One test per file: the log is per process, and other
//! tests' products would land in it.

use sheaf_kernels_cpu::gemm_log::{record, GemmShape};
use sheaf_kernels_cpu::{CpuKernels, Transpose};

fn product(kern: CpuKernels, ta: Transpose, m: usize, n: usize, k: usize) {
    let a = vec![0.5f32; m * k];
    let b = vec![0.25f32; k * n];
    let mut c = vec![0.0f32; m * n];
    let lda = if ta == Transpose::Yes { m } else { k };
    kern.sgemm(
        ta,
        Transpose::No,
        m,
        n,
        k,
        1.0,
        &a,
        lda,
        &b,
        n,
        0.0,
        &mut c,
        n,
    )
    .expect("valid product");
    assert!(c.iter().all(|&x| (x - 0.125 * k as f32).abs() < 1e-3));
}

#[test]
fn record_counts_every_product_once_per_call() {
    let kern = CpuKernels::new();
    product(kern, Transpose::No, 3, 4, 5); // before: not logged
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    let ((), shapes) = record(|| {
        product(kern, Transpose::No, 2, 3, 4);
        product(kern, Transpose::No, 2, 3, 4);
        product(kern, Transpose::Yes, 7, 5, 3);
        product(kern, Transpose::No, 4, 4, 0); // no work: not logged
                                               // Large enough to split over the pool: still one call.
        pool.install(|| product(kern, Transpose::No, 256, 256, 64));
        // Products on another thread count too.
        std::thread::scope(|s| {
            s.spawn(|| product(kern, Transpose::No, 1, 8, 8));
        });
    });
    product(kern, Transpose::No, 3, 4, 5); // after: not logged
    let shape = |ta, m, n, k| GemmShape {
        ta,
        tb: false,
        m,
        n,
        k,
    };
    assert_eq!(
        shapes,
        vec![
            (shape(false, 1, 8, 8), 1),
            (shape(false, 2, 3, 4), 2),
            (shape(false, 256, 256, 64), 1),
            (shape(true, 7, 5, 3), 1),
        ]
    );
    assert_eq!(shape(false, 2, 3, 4).flops(), 48.0);
}
