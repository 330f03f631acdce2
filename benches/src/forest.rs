//! The planning benchmarks' graph: many binary trees of cheap ops, built
//! in the `graph` bench and planned in the `plan` bench, so that building
//! plus planning per node is measured on one graph of about 1M nodes.

use sheaf_autodiff::Graph;
use sheaf_tensor::Tensor;

/// Adds trees of 64 leaves to `g` until it has at least `nodes` nodes:
/// leaves are an input through tanh, internal nodes add their children
/// and squash them, so depths and signatures vary like a Tree-LSTM's.
pub fn build_forest(g: &mut Graph, nodes: usize) {
    let x = g.input(Tensor::from_vec(vec![0.1f32; 8], [8]).expect("8 floats"));
    let mut level = Vec::new();
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
}
