//! Elementwise and softmax kernels, every supported ISA, one thread.
//!
//! Ids are `<op>/sheaf-<isa>/<elements>` (`<rows>x<cols>` for the row
//! kernels), throughput in elements; for GB/s multiply by the bytes moved
//! per element: 12 for add / mul / axpy (two reads, one write), 16 for
//! tanh_bwd. Sizes: 4096 (the three slices of a binary op just overflow
//! L1) and 65536 (L2). The global rayon pool is set to one thread, so the
//! kernels never split: these are per-core figures.
//!
//! `cargo bench -p sheaf-benches --bench elementwise` (about 2 minutes).

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use sheaf_kernels_cpu::{CpuKernels, Isa};

const SIZES: [usize; 2] = [4096, 65536];

fn data(n: usize, lo: f32, hi: f32) -> Vec<f32> {
    // a cheap LCG: the benches need spread-out values, not quality
    let mut s = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    g
}

fn kernels() -> Vec<CpuKernels> {
    Isa::supported()
        .into_iter()
        .rev()
        .filter_map(CpuKernels::with_isa)
        .collect()
}

fn id(k: &CpuKernels, n: usize) -> String {
    format!("sheaf-{}/{n}", k.isa().name())
}

type Unary = fn(&CpuKernels, &[f32], &mut [f32]) -> sheaf_kernels_cpu::Result<()>;
type Binary = fn(&CpuKernels, &[f32], &[f32], &mut [f32]) -> sheaf_kernels_cpu::Result<()>;

fn unary(c: &mut Criterion) {
    let ops: [(&str, Unary, f32, f32); 5] = [
        ("tanh", CpuKernels::tanh, -4.0, 4.0),
        ("sigmoid", CpuKernels::sigmoid, -8.0, 8.0),
        ("exp", CpuKernels::exp, -20.0, 20.0),
        ("log", CpuKernels::log, 0.0, 100.0),
        ("relu", CpuKernels::relu, -1.0, 1.0),
    ];
    for (name, f, lo, hi) in ops {
        let mut g = group(c, name);
        for n in SIZES {
            let x = data(n, lo, hi);
            let mut y = vec![0.0; n];
            g.throughput(Throughput::Elements(n as u64));
            for k in kernels() {
                g.bench_function(id(&k, n), |b| {
                    b.iter(|| f(&k, black_box(&x), black_box(&mut y)).unwrap())
                });
            }
        }
        g.finish();
    }
    // The fused cells' use: in place on a short gate block (W1's H = 150).
    for name in ["tanh_inplace", "sigmoid_inplace"] {
        let mut g = group(c, name);
        for n in [150, 600] {
            let x0 = data(n, -4.0, 4.0);
            let mut x = x0.clone();
            g.throughput(Throughput::Elements(n as u64));
            for k in kernels() {
                g.bench_function(id(&k, n), |b| {
                    b.iter(|| {
                        x.copy_from_slice(&x0);
                        match name {
                            "tanh_inplace" => k.tanh_inplace(black_box(&mut x)),
                            _ => k.sigmoid_inplace(black_box(&mut x)),
                        }
                        .unwrap()
                    })
                });
            }
        }
        g.finish();
    }
}

fn binary(c: &mut Criterion) {
    let ops: [(&str, Binary); 3] = [
        ("add", CpuKernels::add),
        ("mul", CpuKernels::mul),
        ("tanh_bwd", CpuKernels::tanh_bwd),
    ];
    for (name, f) in ops {
        let mut g = group(c, name);
        for n in SIZES {
            let (a, b) = (data(n, -1.0, 1.0), data(n, 0.5, 2.0));
            let mut y = vec![0.0; n];
            g.throughput(Throughput::Elements(n as u64));
            for k in kernels() {
                g.bench_function(id(&k, n), |bch| {
                    bch.iter(|| f(&k, black_box(&a), black_box(&b), black_box(&mut y)).unwrap())
                });
            }
        }
        g.finish();
    }
    let mut g = group(c, "axpy");
    for n in SIZES {
        let x = data(n, -1.0, 1.0);
        let mut y = vec![0.0; n];
        g.throughput(Throughput::Elements(n as u64));
        for k in kernels() {
            g.bench_function(id(&k, n), |b| {
                b.iter(|| {
                    k.axpy(black_box(1e-3), black_box(&x), black_box(&mut y))
                        .unwrap()
                })
            });
        }
    }
    g.finish();
}

fn softmax(c: &mut Criterion) {
    // 32 x 128 and 4096 rows of 5 classes (SST sentiment), 4096 x 300 classes.
    let shapes = [(32usize, 128usize), (4096, 5), (64, 300)];
    for name in ["softmax_rows", "log_softmax_rows", "nll_log_softmax"] {
        let mut g = group(c, name);
        for (rows, cols) in shapes {
            let n = rows * cols;
            let x = data(n, -6.0, 6.0);
            let labels: Vec<u32> = (0..rows as u32).map(|r| r % cols as u32).collect();
            let (mut y, mut loss) = (vec![0.0; n], vec![0.0; rows]);
            g.throughput(Throughput::Elements(n as u64));
            for k in kernels() {
                let bid = format!("sheaf-{}/{rows}x{cols}", k.isa().name());
                g.bench_function(bid, |b| {
                    b.iter(|| match name {
                        "softmax_rows" => k.softmax_rows(black_box(&x), cols, &mut y).unwrap(),
                        "log_softmax_rows" => {
                            k.log_softmax_rows(black_box(&x), cols, &mut y).unwrap()
                        }
                        _ => k
                            .nll_log_softmax(black_box(&x), cols, &labels, &mut y, &mut loss)
                            .unwrap(),
                    })
                });
            }
        }
        g.finish();
    }
    let mut g = group(c, "col_sums_acc");
    let (rows, cols) = (64usize, 600usize);
    let x = data(rows * cols, -1.0, 1.0);
    let mut out = vec![0.0; cols];
    g.throughput(Throughput::Elements((rows * cols) as u64));
    for k in kernels() {
        g.bench_function(format!("sheaf-{}/{rows}x{cols}", k.isa().name()), |b| {
            b.iter(|| k.col_sums_acc(black_box(&x), cols, &mut out).unwrap())
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    // One thread: these are per-core figures (the kernels see a 1-thread
    // pool and never split; the thresholds were tuned separately).
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global();
    unary(c);
    binary(c);
    softmax(c);
}

criterion_group!(elementwise, benches);
criterion_main!(elementwise);
