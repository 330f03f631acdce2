//! W3's hand-batched Tree-LSTM gives the graph's root states: the same
//! parameters and trees through `Manual` and through the autodiff graph
//! (reference executor and agenda), on random and on same-shape trees.

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::w3::{infer_flops, infer_graph, trees, Manual, Model, RandomTree, TreeNode};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

const H: usize = 16;

/// Largest absolute difference between the manual roots `[b, 2H]` and
/// the graph's roots.
fn max_diff(manual: &Tensor, graph: &[Tensor]) -> f32 {
    let m = manual.to_vec::<f32>().expect("manual roots");
    assert_eq!(m.len(), graph.len() * 2 * H);
    m.chunks(2 * H)
        .zip(graph)
        .flat_map(|(row, g)| {
            let g = g.to_vec::<f32>().expect("graph root");
            assert_eq!(g.len(), 2 * H);
            row.iter()
                .zip(g)
                .map(|(a, b)| (a - b).abs())
                .collect::<Vec<_>>()
        })
        .fold(0.0, f32::max)
}

fn setup() -> (ParamStore, Model) {
    let mut store = ParamStore::new();
    let model = Model::new(&mut store, H, 7).expect("model");
    (store, model)
}

fn graph_roots(
    store: &ParamStore,
    model: &Model,
    ts: &[RandomTree],
    strategy: Option<Strategy>,
) -> Vec<Tensor> {
    let mut g = Graph::new();
    let mut exec = strategy.map(Executor::new);
    infer_graph(&mut g, exec.as_mut(), store, model, ts).expect("graph inference")
}

#[test]
fn manual_equals_the_graph() {
    let (store, model) = setup();
    let mut manual = Manual::new().expect("backend");
    for same in [false, true] {
        let ts = trees(5, same, 3);
        // Twice, so the kept buffers are reused once.
        for _ in 0..2 {
            let roots = manual.infer(&store, &model, &ts).expect("manual");
            for strategy in [None, Some(Strategy::Agenda), Some(Strategy::Depth)] {
                let g = graph_roots(&store, &model, &ts, strategy);
                let d = max_diff(&roots, &g);
                assert!(d < 1e-5, "same shape {same}, {strategy:?}: differs by {d}");
            }
        }
    }
}

#[test]
fn swapped_children_are_caught() {
    let (store, model) = setup();
    let ts = trees(3, false, 5);
    let swapped: Vec<RandomTree> = ts
        .iter()
        .map(|t| RandomTree {
            nodes: t
                .nodes
                .iter()
                .map(|n| match *n {
                    TreeNode::Inner { left, right } => TreeNode::Inner {
                        left: right,
                        right: left,
                    },
                    leaf => leaf,
                })
                .collect(),
        })
        .collect();
    let mut manual = Manual::new().expect("backend");
    let wrong = manual.infer(&store, &model, &swapped).expect("manual");
    let g = graph_roots(&store, &model, &ts, None);
    assert!(max_diff(&wrong, &g) > 1e-3);
}

#[test]
fn trees_have_128_leaves_and_varying_heights() {
    let ts = trees(8, false, 1);
    let mut heights = Vec::new();
    for t in &ts {
        let leaves = t
            .nodes
            .iter()
            .filter(|n| matches!(n, TreeNode::Leaf { .. }))
            .count();
        assert_eq!(leaves, 128);
        assert_eq!(t.nodes.len(), 255);
        heights.push(t.levels().expect("levels").last().copied());
    }
    heights.sort();
    heights.dedup();
    assert!(heights.len() > 1, "all heights equal: {heights:?}");
    // BENCHMARKS.md: 216.8 useful MFLOP per tree at state 256.
    let mflop = infer_flops(&ts[0], 256) / 1e6;
    assert!((mflop - 216.8).abs() < 0.05, "{mflop} MFLOP");
}

#[test]
fn bad_trees_are_errors() {
    let (store, model) = setup();
    let bad = RandomTree {
        nodes: vec![
            TreeNode::Leaf { word: 1 },
            TreeNode::Inner { left: 0, right: 2 },
        ],
    };
    let mut manual = Manual::new().expect("backend");
    assert!(manual
        .infer(&store, &model, std::slice::from_ref(&bad))
        .is_err());
    let mut g = Graph::new();
    assert!(infer_graph(&mut g, None, &store, &model, &[bad]).is_err());
}
