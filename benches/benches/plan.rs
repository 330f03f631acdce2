//! Planning cost per node on graphs of about 1M nodes, for Depth and Agenda
//! (target: under 150 ns/node, signature handling included: signatures
//! and depths are computed when nodes are added, so this times the
//! grouping and ordering alone; building the same graph is benched in
//! `graph.rs`, `graph_build/forest`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sheaf_autodiff::Graph;
use sheaf_benches::forest::build_forest;
use sheaf_sched::{Planner, Strategy};
use std::hint::black_box;

fn forest(nodes: usize) -> Graph {
    let mut g = Graph::new();
    build_forest(&mut g, nodes);
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
