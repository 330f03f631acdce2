//! Row gather / scatter / copy (GB/s of memory touched), the fused recurrent
//! cells (rows x H per second) and the optimizer steps.
//!
//! `cargo bench -p sheaf-benches --bench rows`; `SHEAF_ISA=scalar` runs the
//! scalar kernels instead of the best ISA.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sheaf_kernels_cpu::optim::{Adagrad, Adam, Sgd};
use sheaf_kernels_cpu::CpuKernels;

const F: u64 = std::mem::size_of::<f32>() as u64;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn indices(n: usize, rows: usize, seed: u64) -> Vec<u32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 33) % rows as u64) as u32
        })
        .collect()
}

fn rows(c: &mut Criterion) {
    let k = CpuKernels::new();
    const TABLE: usize = 20_000;
    for (n, cols) in [(64, 300), (2048, 150), (2048, 300)] {
        let table = values(TABLE * cols, 1);
        let idx = indices(n, TABLE, 2);
        let src = values(n * cols, 3);
        let mut dst = vec![0.0f32; n * cols];
        let id = format!("{n}x{cols}");
        let bytes = (n * cols) as u64 * F;

        let mut g = c.benchmark_group("gather_rows");
        g.throughput(Throughput::Bytes(2 * bytes)); // read a row, write a row
        g.bench_function(&id, |b| {
            b.iter(|| {
                k.gather_rows(black_box(&table), cols, &idx, &mut dst)
                    .unwrap()
            })
        });
        g.finish();

        let mut tab = table.clone();
        let mut g = c.benchmark_group("scatter_add_rows");
        g.throughput(Throughput::Bytes(3 * bytes)); // read src, read + write dst
        g.bench_function(&id, |b| {
            b.iter(|| {
                k.scatter_add_rows(black_box(&src), cols, &idx, &mut tab)
                    .unwrap()
            })
        });
        g.finish();

        let mut g = c.benchmark_group("copy_rows");
        g.throughput(Throughput::Bytes(2 * bytes));
        g.bench_function(&id, |b| {
            b.iter(|| {
                k.copy_rows(black_box(&src), 0, &mut dst, 0, n, cols)
                    .unwrap()
            })
        });
        g.finish();

        let mut g = c.benchmark_group("broadcast_row");
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function(&id, |b| {
            b.iter(|| k.broadcast_row(black_box(&src[..cols]), &mut dst).unwrap())
        });
        g.finish();
    }
}

fn cells(c: &mut Criterion) {
    let k = CpuKernels::new();
    for (b, h) in [(64, 150), (64, 256), (512, 150), (512, 256)] {
        let id = format!("{b}x{h}");
        let n = b * h;
        let x5 = values(5 * n, 1);
        let (c_l, c_r, dc, dh) = (values(n, 2), values(n, 3), values(n, 4), values(n, 5));
        let mut act = vec![0.0f32; 5 * n];
        let (mut cc, mut hh) = (vec![0.0f32; n], vec![0.0f32; n]);
        let mut dg = vec![0.0f32; 5 * n];
        let (mut d1, mut d2, mut d3) = (vec![0.0f32; 3 * n], vec![0.0f32; n], vec![0.0f32; n]);
        let mut bench = |name: &str, f: &mut dyn FnMut()| {
            let mut g = c.benchmark_group(name);
            g.throughput(Throughput::Elements(n as u64));
            g.bench_function(&id, |bch| bch.iter(&mut *f));
            g.finish();
        };
        bench("lstm_fwd", &mut || {
            k.lstm_fwd(&x5[..4 * n], &c_l, h, &mut act[..4 * n], &mut cc, &mut hh)
                .unwrap()
        });
        bench("lstm_bwd", &mut || {
            k.lstm_bwd(
                &act[..4 * n],
                &c_l,
                &c_r,
                &dc,
                &dh,
                h,
                &mut dg[..4 * n],
                &mut d2,
            )
            .unwrap()
        });
        bench("gru_fwd", &mut || {
            k.gru_fwd(
                &x5[..3 * n],
                &x5[2 * n..],
                &c_l,
                h,
                &mut act[..3 * n],
                &mut hh,
            )
            .unwrap()
        });
        bench("gru_bwd", &mut || {
            let dhu = &mut dg[..3 * n];
            k.gru_bwd(
                &act[..3 * n],
                &x5[..3 * n],
                &c_l,
                &dh,
                h,
                &mut d1,
                dhu,
                &mut d2,
            )
            .unwrap()
        });
        bench("tree_lstm_leaf_fwd", &mut || {
            k.tree_lstm_leaf_fwd(&x5[..3 * n], h, &mut act[..3 * n], &mut cc, &mut hh)
                .unwrap()
        });
        bench("tree_lstm_leaf_bwd", &mut || {
            k.tree_lstm_leaf_bwd(&act[..3 * n], &c_l, &dc, &dh, h, &mut d1)
                .unwrap()
        });
        bench("tree_lstm_node_fwd", &mut || {
            k.tree_lstm_node_fwd(&x5, &c_l, &c_r, h, &mut act, &mut cc, &mut hh)
                .unwrap()
        });
        bench("tree_lstm_node_bwd", &mut || {
            k.tree_lstm_node_bwd(
                &act, &c_l, &c_r, &cc, &dc, &dh, h, &mut dg, &mut d2, &mut d3,
            )
            .unwrap()
        });
    }
}

fn optim(c: &mut Criterion) {
    let k = CpuKernels::new();
    let n = 300_000;
    let grad = values(n, 1);
    let (mut p, mut s1, mut s2) = (values(n, 2), vec![0.0f32; n], vec![0.0f32; n]);
    let sgd = Sgd {
        momentum: 0.9,
        ..Sgd::default()
    };
    let mut g = c.benchmark_group("optim");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("sgd_momentum/300000", |b| {
        b.iter(|| k.sgd_step(&sgd, &mut p, black_box(&grad), &mut s1).unwrap())
    });
    g.bench_function("adagrad/300000", |b| {
        b.iter(|| {
            k.adagrad_step(&Adagrad::default(), &mut p, black_box(&grad), &mut s1)
                .unwrap()
        })
    });
    g.bench_function("adam/300000", |b| {
        b.iter(|| {
            k.adam_step(
                &Adam::default(),
                7,
                &mut p,
                black_box(&grad),
                &mut s1,
                &mut s2,
            )
            .unwrap()
        })
    });
    g.finish();
    // Embedding-table updates: 512 distinct rows of a 20000 x 300 table.
    let (table, cols, nr) = (20_000, 300, 512);
    let mut rows: Vec<u32> = indices(nr, table, 5);
    rows.sort_unstable();
    rows.dedup();
    let grad = values(rows.len() * cols, 6);
    let (mut p, mut m, mut v) = (
        values(table * cols, 7),
        vec![0.0f32; table * cols],
        vec![0.0f32; table * cols],
    );
    let mut g = c.benchmark_group("optim_rows");
    g.throughput(Throughput::Elements(grad.len() as u64));
    g.bench_function(format!("adam/{}x{cols}", rows.len()), |b| {
        b.iter(|| {
            k.adam_step_rows(
                &Adam::default(),
                7,
                &mut p,
                cols,
                &rows,
                black_box(&grad),
                &mut m,
                &mut v,
            )
            .unwrap()
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = rows, cells, optim
}
criterion_main!(benches);
