//! The SST Tree-LSTM with its cells as vertex functions
//! (`TreeLstm::with_vertex_functions`) gives the loss and every gradient of
//! the same model built op by op, under Sequential, Depth and Agenda, on
//! trees of every shape in a few SST sentences; fewer graph nodes per tree
//! (one per tree node: its cell, output layer and loss in one call).

use sheaf_autodiff::{Graph, ParamStore, Sequential};
use sheaf_examples::model::{ModelConfig, TreeLstm};
use sheaf_examples::sst::parse_trees;
use sheaf_sched::{Executor, Strategy};

const TREES: &str = "(3 (2 (2 The) (2 movie)) (3 (2 was) (4 (3 very) (4 good))))
(1 (2 The) (1 (1 (2 movie) (1 stinks)) (2 .)))
(4 great)
(2 (2 A) (2 (2 (2 very) (2 long)) (2 .)))";

#[test]
fn vertex_cells_equal_the_cells_built_op_by_op() {
    let trees = parse_trees(TREES, "inline").unwrap();
    let ids: Vec<Vec<u32>> = trees
        .iter()
        .map(|t| (0..t.words.len() as u32).map(|i| i % 9).collect())
        .collect();
    let cfg = ModelConfig {
        embed_dim: 6,
        hidden: 4,
        ..ModelConfig::new(9)
    };
    let mut store = ParamStore::new();
    let inline = TreeLstm::new(&mut store, &cfg, 3).unwrap();
    let called = inline.clone().with_vertex_functions().unwrap();
    let mut run = |m: &TreeLstm, strategy: Option<Strategy>| {
        store.zero_grads().unwrap();
        let mut g = Graph::new();
        let losses: Vec<_> = trees
            .iter()
            .zip(&ids)
            .map(|(t, i)| m.tree_loss(&mut g, t, i).unwrap())
            .collect();
        let loss = g.sum(&losses).unwrap();
        let value = match strategy {
            None => {
                let ex = Sequential::new();
                let v = ex
                    .forward(&mut g, &store, loss)
                    .unwrap()
                    .item::<f32>()
                    .unwrap();
                ex.backward(&mut g, &store, loss).unwrap();
                v
            }
            Some(s) => {
                let mut ex = Executor::new(s);
                let v = ex
                    .forward(&mut g, &store, loss)
                    .unwrap()
                    .item::<f32>()
                    .unwrap();
                ex.backward(&mut g, &store, loss).unwrap();
                v
            }
        };
        let grads: Vec<Vec<f32>> = m
            .params()
            .iter()
            .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
            .collect();
        (value, grads, g.len())
    };
    let (want, want_grads, inline_nodes) = run(&inline, None);
    for strategy in [None, Some(Strategy::Depth), Some(Strategy::Agenda)] {
        let (got, grads, nodes) = run(&called, strategy);
        assert!(
            (got - want).abs() <= 1e-5 * want.abs(),
            "{strategy:?}: {got} vs {want}"
        );
        for (k, (a, b)) in grads.iter().zip(&want_grads).enumerate() {
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
                    "{strategy:?} parameter {k}: {x} vs {y}"
                );
            }
        }
        // Without dropout, every tree node is one call (a leaf's lookup,
        // its cell, output layer and loss; an inner node's with its
        // children's subtree losses added) where inline it is six nodes
        // (lookup or concat, affine, cell, cell_h, affine, loss); a tree
        // takes its root's loss out of the root's output (a slice) where
        // inline it sums its nodes' losses.
        let (leaves, inner) = (14, 10);
        assert_eq!(inline_nodes - nodes, 5 * (leaves + inner), "{strategy:?}");
    }

    // With dropout: evaluation builds no dropout (the evaluation trace
    // equals the inlined model); training draws masks per call, still one
    // call per tree node where inline adds a dropout node per word and
    // per output.
    let cfg = ModelConfig {
        dropout_embed: 0.2,
        dropout_output: 0.2,
        ..cfg
    };
    let mut store = ParamStore::new();
    let inline = TreeLstm::new(&mut store, &cfg, 3).unwrap();
    let called = inline.clone().with_vertex_functions().unwrap();
    let total = |m: &TreeLstm, train: bool| {
        let mut g = Graph::new();
        g.set_train(train);
        let losses: Vec<_> = trees
            .iter()
            .zip(&ids)
            .map(|(t, i)| m.tree_loss(&mut g, t, i).unwrap())
            .collect();
        let loss = g.sum(&losses).unwrap();
        let mut ex = Executor::new(Strategy::Agenda);
        let v = ex
            .forward(&mut g, &store, loss)
            .unwrap()
            .item::<f32>()
            .unwrap();
        (v, g.len())
    };
    let ((want, _), (got, _)) = (total(&inline, false), total(&called, false));
    assert!(
        (got - want).abs() <= 1e-5 * want.abs(),
        "evaluation: {got} vs {want}"
    );
    let ((_, inline_nodes), (dropped, called_nodes)) = (total(&inline, true), total(&called, true));
    assert_eq!(inline_nodes - called_nodes, 7 * 14 + 6 * 10);
    assert!(
        dropped.is_finite() && dropped != got,
        "training drops: {dropped} vs {got}"
    );
}

/// Node lists that are not one tree: a node read by two parents (its
/// subtree loss would count twice, so every node's own loss is summed)
/// and two roots (their subtree losses are summed). The vertex form gives
/// the inlined loss on both.
#[test]
fn shared_nodes_and_several_roots_lose_nothing_and_count_nothing_twice() {
    use sheaf_examples::sst::{Node, Tree};
    let leaf = |word, label| Node::Leaf { word, label };
    let inner = |left, right, label| Node::Inner { left, right, label };
    let words: Vec<String> = ["a", "b", "c"].iter().map(|w| w.to_string()).collect();
    let shapes = [
        // Node 0 is read by nodes 2 and 3.
        vec![leaf(0, 1), leaf(1, 3), inner(0, 1, 2), inner(0, 2, 4)],
        // Roots 2 and 3.
        vec![leaf(0, 1), leaf(1, 3), inner(0, 1, 2), leaf(2, 0)],
    ];
    let cfg = ModelConfig {
        embed_dim: 6,
        hidden: 4,
        ..ModelConfig::new(3)
    };
    let mut store = ParamStore::new();
    let inline = TreeLstm::new(&mut store, &cfg, 5).unwrap();
    let called = inline.clone().with_vertex_functions().unwrap();
    for nodes in shapes {
        let tree = Tree {
            nodes,
            words: words.clone(),
        };
        let ids = [0, 1, 2];
        let loss = |m: &TreeLstm| {
            let mut g = Graph::new();
            let l = m.tree_loss(&mut g, &tree, &ids).unwrap();
            let v = Sequential::new().forward(&mut g, &store, l).unwrap();
            v.item::<f32>().unwrap()
        };
        let (want, got) = (loss(&inline), loss(&called));
        assert!(
            (got - want).abs() <= 1e-5 * want.abs(),
            "{:?}: {got} vs {want}",
            tree.nodes
        );
    }
}
