//! sgemm: sheaf against matrixmultiply called directly and the `gemm` crate
//! (Parallelism::None), all on one thread; `sheaf-2t` is sheaf in a 2-thread
//! rayon pool. Ids are `<group>/<impl>/<m>x<k>x<n>`; throughput counts
//! 2 m n k flops, so criterion's "elem/s" reads as FLOP/s.
//!
//! Groups: `sgemm` (NN), `sgemm-nt` (B transposed: dx = dy W^T),
//! `sgemm-tn` (A transposed: small-row, and the small-k weight gradient
//! dW = x^T dy).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sheaf_kernels_cpu::{CpuKernels, Transpose};

#[derive(Clone, Copy)]
struct Shape {
    ta: Transpose,
    tb: Transpose,
    m: usize,
    k: usize,
    n: usize,
}

impl Shape {
    fn id(&self) -> String {
        format!("{}x{}x{}", self.m, self.k, self.n)
    }

    /// Row strides of A and B as stored (packed).
    fn lds(&self) -> (usize, usize) {
        let lda = if self.ta == Transpose::No {
            self.k
        } else {
            self.m
        };
        let ldb = if self.tb == Transpose::No {
            self.n
        } else {
            self.k
        };
        (lda, ldb)
    }

    /// (row, column) strides of op(A) and op(B), for the raw-pointer APIs.
    fn strides(&self) -> ((isize, isize), (isize, isize)) {
        let (lda, ldb) = self.lds();
        let sa = if self.ta == Transpose::No {
            (lda as isize, 1)
        } else {
            (1, lda as isize)
        };
        let sb = if self.tb == Transpose::No {
            (ldb as isize, 1)
        } else {
            (1, ldb as isize)
        };
        (sa, sb)
    }
}

fn data(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0 - 0.5
        })
        .collect()
}

fn bench_shapes(c: &mut Criterion, group: &str, shapes: &[Shape], two_threads: bool) {
    let kern = CpuKernels::new();
    let pool1 = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let pool2 = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let mut g = c.benchmark_group(group);
    g.measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(20);
    for s in shapes {
        let (m, k, n) = (s.m, s.k, s.n);
        let (a, b) = (data(m * k, 1), data(k * n, 2));
        let mut cbuf = vec![0.0f32; m * n];
        let (lda, ldb) = s.lds();
        let ((rsa, csa), (rsb, csb)) = s.strides();
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        let mut sheaf = |pool: &rayon::ThreadPool, name: &str, cbuf: &mut Vec<f32>| {
            g.bench_function(BenchmarkId::new(name, s.id()), |bch| {
                pool.install(|| {
                    bch.iter(|| {
                        kern.sgemm(s.ta, s.tb, m, n, k, 1.0, &a, lda, &b, ldb, 0.0, cbuf, n)
                            .unwrap();
                    })
                })
            });
        };
        sheaf(&pool1, "sheaf", &mut cbuf);
        if two_threads {
            sheaf(&pool2, "sheaf-2t", &mut cbuf);
        }
        g.bench_function(BenchmarkId::new("matrixmultiply", s.id()), |bch| {
            bch.iter(|| {
                // SAFETY: a, b, cbuf are m x k, k x n, m x n with the strides given.
                unsafe {
                    matrixmultiply::sgemm(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        rsa,
                        csa,
                        b.as_ptr(),
                        rsb,
                        csb,
                        0.0,
                        cbuf.as_mut_ptr(),
                        n as isize,
                        1,
                    )
                }
            })
        });
        g.bench_function(BenchmarkId::new("gemm-crate", s.id()), |bch| {
            bch.iter(|| {
                // SAFETY: as above; the gemm crate takes (column, row) strides.
                unsafe {
                    gemm::gemm(
                        m,
                        n,
                        k,
                        cbuf.as_mut_ptr(),
                        1,
                        n as isize,
                        false,
                        a.as_ptr(),
                        csa,
                        rsa,
                        b.as_ptr(),
                        csb,
                        rsb,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    )
                }
            })
        });
    }
    g.finish();
}

fn shape(ta: Transpose, tb: Transpose, m: usize, k: usize, n: usize) -> Shape {
    Shape { ta, tb, m, k, n }
}

fn sgemm(c: &mut Criterion) {
    use Transpose::{No, Yes};
    let mut nn = vec![shape(No, No, 1, 300, 600)];
    for n in [450, 750] {
        for m in [1, 2, 4, 8, 16, 64, 256, 2048] {
            nn.push(shape(No, No, m, 300, n));
        }
    }
    nn.push(shape(No, No, 256, 512, 1280));
    bench_shapes(c, "sgemm", &nn, true);

    // dx = dy W^T with W 300 x 600: B is stored n x k.
    let nt: Vec<Shape> = [1, 4, 16].map(|m| shape(No, Yes, m, 600, 300)).into();
    bench_shapes(c, "sgemm-nt", &nt, false);

    // Small-row TN, and dW = x^T dy (300 x 600) over a batch of k = 1, 4, 16.
    let mut tn: Vec<Shape> = [1, 4, 16].map(|m| shape(Yes, No, m, 300, 600)).into();
    tn.extend([1, 4, 16].map(|k| shape(Yes, No, 300, k, 600)));
    bench_shapes(c, "sgemm-tn", &tn, true);
}

criterion_group!(benches, sgemm);
criterion_main!(benches);
