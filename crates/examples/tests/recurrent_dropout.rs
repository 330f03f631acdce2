//! Recurrent dropout (Semeniuta et al.) on the Tree-LSTM cells of the SST
//! model: the cells with a rate equal the plain ones when nothing is
//! dropped (evaluation), every strategy draws the same masks, and the
//! blocks-written model runs with it under every strategy.

mod common;

use common::close_to;
use sheaf_autodiff::{Graph, ParamStore, Sequential};
use sheaf_blocks::Loss;
use sheaf_examples::model::{leaf_cell, node_cell, ModelConfig, TreeLstm};
use sheaf_examples::sst::{parse_trees, Vocab};
use sheaf_examples::tree_lstm_blocks::{compile_training, Phrase};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

fn v(n: usize, salt: f32) -> Tensor {
    let data: Vec<f32> = (0..n).map(|i| ((i as f32 + salt) * 0.77).sin()).collect();
    Tensor::from_vec(data, [n]).unwrap()
}

#[test]
fn cells_with_a_rate_equal_the_plain_ones_in_evaluation() {
    let h = 4;
    let store = ParamStore::new();
    let run = |p: f32| {
        let mut g = Graph::new();
        g.set_train(false); // dropout is the identity: only the cells' attribute differs
        let gl = g.input(v(3 * h, 0.0));
        let gn = g.input(v(5 * h, 1.0));
        let l = leaf_cell(&mut g, gl, p).unwrap();
        let r = g.input(v(2 * h, 2.0));
        let n = node_cell(&mut g, gn, l, r, p).unwrap();
        let out = Sequential::new().forward(&mut g, &store, n).unwrap();
        let attrs = (g.node(l.node()).attr(), g.node(n.node()).attr());
        (
            g.value(l).unwrap().to_vec::<f32>().unwrap(),
            out.to_vec::<f32>().unwrap(),
            attrs,
        )
    };
    let (plain_leaf, plain_node, plain_attrs) = run(0.0);
    let (leaf, node, attrs) = run(0.5);
    close_to(1e-5, &leaf, &plain_leaf, "leaf");
    close_to(1e-5, &node, &plain_node, "node");
    assert_eq!(plain_attrs, (0, 0), "the plain cells");
    assert_ne!(attrs, (0, 0), "the cells with a rate");
}

fn setup() -> (
    ParamStore,
    TreeLstm,
    Vec<Phrase>,
    Vec<sheaf_examples::sst::Tree>,
    Vec<Vec<u32>>,
) {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny.txt");
    let trees = parse_trees(&std::fs::read_to_string(p).unwrap(), "tiny.txt").unwrap();
    let vocab = Vocab::from_trees(&trees);
    let ids: Vec<Vec<u32>> = trees.iter().map(|t| vocab.encode(t)).collect();
    let phrases = trees
        .iter()
        .zip(&ids)
        .map(|(t, i)| Phrase::from_tree(t, i).unwrap())
        .collect();
    let cfg = ModelConfig {
        embed_dim: 6,
        hidden: 5,
        recurrent_dropout: 0.4,
        ..ModelConfig::new(vocab.len())
    };
    let mut store = ParamStore::new();
    let model = TreeLstm::new(&mut store, &cfg, 2).unwrap();
    (store, model, phrases, trees, ids)
}

#[test]
fn every_strategy_draws_the_same_masks() {
    let (mut store, model, _, trees, ids) = setup();
    let mut results = Vec::new();
    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut g = Graph::new();
        g.set_seed(7);
        let losses: Vec<_> = trees
            .iter()
            .zip(&ids)
            .map(|(t, i)| model.tree_loss(&mut g, t, i).unwrap())
            .collect();
        let total = g.sum(&losses).unwrap();
        let mut e = Executor::new(s);
        e.forward(&mut g, &store, total).unwrap();
        e.backward(&mut g, &store, total).unwrap();
        let loss = g.value(total).unwrap().to_vec::<f32>().unwrap()[0];
        let grads: Vec<Vec<f32>> = model
            .params()
            .iter()
            .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
            .collect();
        store.zero_grads().unwrap();
        results.push((loss, grads));
    }
    for (loss, grads) in &results[1..] {
        close_to(1e-5, &[*loss], &[results[0].0], "loss");
        for (a, b) in grads.iter().zip(&results[0].1) {
            close_to(1e-5, a, b, "gradient");
        }
    }
    // Dropout is active in training and off in evaluation.
    let mut g = Graph::new();
    g.set_train(false);
    let losses: Vec<_> = trees
        .iter()
        .zip(&ids)
        .map(|(t, i)| model.tree_loss(&mut g, t, i).unwrap())
        .collect();
    let total = g.sum(&losses).unwrap();
    let eval = Sequential::new()
        .forward(&mut g, &store, total)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()[0];
    assert!(
        (eval - results[0].0).abs() > 1e-3,
        "{eval} vs {}",
        results[0].0
    );
}

#[test]
fn blocks_model_with_recurrent_dropout_runs_under_every_strategy() {
    let (mut store, model, phrases, _, _) = setup();
    let mut first = None;
    for s in [Strategy::Sequential, Strategy::Agenda] {
        let mut c = compile_training(&model).unwrap().with_strategy(s);
        c.set_seed(3);
        let loss = c.backward(&store, &phrases, &Loss::metric("loss")).unwrap();
        store.zero_grads().unwrap();
        match first {
            None => first = Some(loss),
            Some(l) => close_to(1e-5, &[loss], &[l], "loss"),
        }
    }
}
