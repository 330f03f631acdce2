//! Planning cost per node on graphs of about 1M nodes, for Depth and Agenda
//! (target: under 150 ns/node, signature handling included: signatures
//! and depths are computed when nodes are added, so this times the
//! grouping and ordering alone; graph building is benched in `graph.rs`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sheaf_autodiff::Graph;
use sheaf_sched::{Planner, Strategy};
use sheaf_tensor::Tensor;
use std::hint::black_box;

/// Many binary trees of cheap ops: leaves are inputs through tanh, internal
/// nodes add their children and squash them, so depths and signatures vary
/// like a Tree-LSTM's.
fn forest(nodes: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input(Tensor::from_vec(vec![0.1f32; 8], [8]).expect("8 floats"));
    let mut level: Vec<_> = Vec::new();
    while g.len() < nodes {
        level.clear();
        for _ in 0..64 {
            level.push(g.tanh(x).expect("same shape"));
        }
        while level.len() > 1 {
            let next: Vec<_> = level
                .chunks(2)
                .map(|p| {
                    let s = g.add(p[0], p[p.len() - 1]).expect("same shape");
                    g.sigmoid(s).expect("same shape")
                })
                .collect();
            level = next;
        }
    }
    g
}

fn planning(c: &mut Criterion) {
    let g = forest(1_000_000);
    let mut group = c.benchmark_group("plan");
    group.throughput(Throughput::Elements(g.len() as u64));
    // One planner throughout, as an executor keeps one: its working
    // memory is allocated on the first graph only.
    let mut planner = Planner::default();
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        group.bench_function(format!("{}/{}", strategy.name(), g.len()), |b| {
            b.iter(|| black_box(planner.plan(&g, 0, g.len(), strategy)))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(3))
        .sample_size(10);
    targets = planning
}
criterion_main!(benches);
