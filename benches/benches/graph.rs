//! Cost of building graph nodes (no computation): shape inference,
//! signature interning and depth, per node. Target: well under 1 µs.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sheaf_autodiff::Graph;
use sheaf_benches::forest::build_forest;
use sheaf_tensor::Tensor;
use std::hint::black_box;

fn build_nodes(c: &mut Criterion) {
    let mut group = c.benchmark_group("graph_build");
    let n = 10_000u64;
    group.throughput(Throughput::Elements(n));
    let x = Tensor::from_vec(vec![0.5f32; 150], [150]).expect("150 floats");
    let mut g = Graph::new();
    group.bench_function("tanh_chain/10000", |b| {
        b.iter(|| {
            g.clear();
            let mut e = g.input(x.clone());
            for _ in 0..n {
                e = g.tanh(e).expect("same shape");
            }
            black_box(e)
        })
    });
    group.bench_function("mixed/10000", |b| {
        b.iter(|| {
            g.clear();
            let a = g.input(x.clone());
            let mut e = a;
            for i in 0..n / 4 {
                let t = g.sigmoid(e).expect("same shape");
                let s = g.scale(t, (i % 3) as f32).expect("same shape");
                let m = g.cmult(s, a).expect("same shape");
                e = g.add(m, e).expect("same shape");
            }
            black_box(e)
        })
    });
    group.finish();
    // The plan bench's graph of about 1M nodes, built into a cleared graph
    // (its allocations kept, as a training loop does): building plus
    // planning per node is this plus `plan/*` (the same node count).
    g.clear();
    build_forest(&mut g, 1_000_000);
    let mut group = c.benchmark_group("graph_build_forest");
    group.throughput(Throughput::Elements(g.len() as u64));
    group.sample_size(10);
    group.bench_function(format!("{}", g.len()), |b| {
        b.iter(|| {
            g.clear();
            build_forest(&mut g, 1_000_000);
            black_box(g.len())
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1))
        .sample_size(20);
    targets = build_nodes
}
criterion_main!(benches);
