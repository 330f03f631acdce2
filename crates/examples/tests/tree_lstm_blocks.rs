//! The SST Tree-LSTM written with blocks equals the hand-written model:
//! the same loss and the same gradient of every parameter on the tiny
//! fixture's trees, under every strategy.

mod common;

use common::{close_to, take_grads};
use sheaf_autodiff::{Graph, ParamStore, Sequential};
use sheaf_blocks::{Compiled, Loss};
use sheaf_examples::model::{ModelConfig, TreeLstm};
use sheaf_examples::sst::{parse_trees, Vocab};
use sheaf_examples::tree_lstm_blocks::{blocks, compile_training, root_logits, Phrase};
use sheaf_sched::Strategy;

fn fixture() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny.txt");
    std::fs::read_to_string(p).unwrap()
}

fn setup(
    dropout: f32,
) -> (
    ParamStore,
    TreeLstm,
    Vec<sheaf_examples::sst::Tree>,
    Vec<Vec<u32>>,
    Vec<Phrase>,
) {
    let trees = parse_trees(&fixture(), "tiny.txt").unwrap();
    let vocab = Vocab::from_trees(&trees);
    let ids: Vec<Vec<u32>> = trees.iter().map(|t| vocab.encode(t)).collect();
    let phrases = trees
        .iter()
        .zip(&ids)
        .map(|(t, i)| Phrase::from_tree(t, i).unwrap())
        .collect();
    let cfg = ModelConfig {
        embed_dim: 8,
        hidden: 6,
        dropout_embed: dropout,
        dropout_output: dropout,
        ..ModelConfig::new(vocab.len())
    };
    let mut store = ParamStore::new();
    let model = TreeLstm::new(&mut store, &cfg, 5).unwrap();
    (store, model, trees, ids, phrases)
}

/// Phrases in a tree (its words and inner nodes).
fn count(p: &Phrase) -> usize {
    match p {
        Phrase::Word(_) => 1,
        Phrase::Inner(i) => 1 + count(&i.left) + count(&i.right),
    }
}

#[test]
fn blocks_model_equals_the_hand_written_one() {
    let (mut store, model, trees, ids, phrases) = setup(0.0);
    let mut g = Graph::new();
    let losses: Vec<_> = trees
        .iter()
        .zip(&ids)
        .map(|(t, i)| model.tree_loss(&mut g, t, i).unwrap())
        .collect();
    let total = g.sum(&losses).unwrap();
    Sequential::new().backward(&mut g, &store, total).unwrap();
    let want_loss = g.value(total).unwrap().to_vec::<f32>().unwrap()[0];
    let want = take_grads(&mut store, &model.params());

    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        // The cells compiled to vertex functions (the default), and inline.
        for inline in [false, true] {
            let mut c = compile_training(&model)
                .unwrap()
                .with_strategy(s)
                .inline_functions(inline);
            let loss = c.backward(&store, &phrases, &Loss::metric("loss")).unwrap();
            let what = format!("{s:?} (inline {inline})");
            close_to(1e-5, &[loss], &[want_loss], &format!("{what} loss"));
            let got = take_grads(&mut store, &model.params());
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                close_to(1e-5, a, b, &format!("{what} grad of parameter {k}"));
            }
            // Inline: the nodes of the hand-written graph less its per-tree
            // sums (blocks sum all losses in one node), plus one `cell_h`
            // per child (a parent reads its children's states and takes
            // their `h` itself, so that each cell has one output); as
            // vertex functions, each cell one call node instead of its ops.
            let children = phrases.iter().map(count).sum::<usize>() - phrases.len();
            let hand = g.len() - trees.len();
            let got = c.graph().len();
            match inline {
                true => assert_eq!(got, hand + children, "{what}"),
                false => assert!(got < hand, "{what}: {got} nodes, {hand} by hand"),
            }
        }
    }
}

#[test]
fn root_logits_equal_the_hand_written_ones() {
    let (store, model, trees, ids, phrases) = setup(0.5);
    let mut c = Compiled::new(root_logits(&model).unwrap()).unwrap();
    c.set_train(false);
    c.forward(&store, &phrases).unwrap();
    let got = c.metric("logits").unwrap();
    assert_eq!(got.len(), trees.len());
    for ((t, i), (k, v)) in trees.iter().zip(&ids).zip(&got) {
        let mut g = Graph::new();
        g.set_train(false);
        let r = model.root_logits(&mut g, t, i).unwrap();
        let want = Sequential::new().forward(&mut g, &store, r).unwrap();
        close_to(
            1e-5,
            &v.to_vec::<f32>().unwrap(),
            &want.to_vec::<f32>().unwrap(),
            &format!("tree {k}"),
        );
    }
}

#[test]
fn with_dropout_every_strategy_agrees() {
    let (mut store, model, _, _, phrases) = setup(0.3);
    let mut first: Option<(f32, Vec<Vec<f32>>)> = None;
    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut c = compile_training(&model).unwrap().with_strategy(s);
        c.set_seed(11);
        let loss = c.backward(&store, &phrases, &Loss::metric("loss")).unwrap();
        let gr = take_grads(&mut store, &model.params());
        match &first {
            None => first = Some((loss, gr)),
            Some((l0, g0)) => {
                close_to(1e-5, &[loss], &[*l0], "loss");
                for (a, b) in gr.iter().zip(g0) {
                    close_to(1e-5, a, b, "grad");
                }
            }
        }
    }
    // Dropout is on: the loss differs from an evaluation-mode one.
    let mut c = compile_training(&model).unwrap();
    c.set_train(false);
    let eval = c.backward(&store, &phrases, &Loss::metric("loss")).unwrap();
    assert!((eval - first.unwrap().0).abs() > 1e-3);
    let _ = blocks(&model, true).unwrap();
}

#[test]
fn deep_phrases_build_and_drop_without_recursion() {
    // A left-branching tree 100 000 levels deep, as the parser accepts.
    let n = 100_000;
    let mut text = String::new();
    for _ in 0..n {
        text.push_str("(2 ");
    }
    text.push_str("(2 a)");
    for _ in 0..n {
        text.push_str(" (2 b))");
    }
    let trees = parse_trees(&text, "deep").unwrap();
    let vocab = Vocab::from_trees(&trees);
    let p = Phrase::from_tree(&trees[0], &vocab.encode(&trees[0])).unwrap();
    drop(p);
}
