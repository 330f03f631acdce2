//! text2vec written with blocks equals the same model written on the
//! graph (loss and every gradient), under every strategy; unknown words
//! embed as zeros; a few training steps lower the loss.

mod common;

use common::{close_to, take_grads};
use sheaf_autodiff::{Adagrad, Graph, Optimizer, ParamStore, Sequential};
use sheaf_blocks::{Compiled, Loss};
use sheaf_examples::sst::parse_trees;
use sheaf_examples::text2vec::{word_index, Sentence, Text2Vec};
use sheaf_sched::Strategy;

fn sentences() -> Vec<Sentence> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny.txt");
    let trees = parse_trees(&std::fs::read_to_string(p).unwrap(), "tiny.txt").unwrap();
    trees
        .iter()
        .map(|t| Sentence::from_tree(t).unwrap())
        .collect()
}

fn model(store: &mut ParamStore, s: &[Sentence]) -> Text2Vec {
    use rand::SeedableRng;
    // min_count 2: words seen once are unknown, so both paths of the
    // Optional run.
    Text2Vec::new(
        store,
        word_index(s, 2),
        6,
        5,
        &mut rand::rngs::StdRng::seed_from_u64(3),
    )
    .unwrap()
}

#[test]
fn blocks_equal_the_direct_model() {
    let data = sentences();
    let mut store = ParamStore::new();
    let m = model(&mut store, &data);
    assert!(data.iter().any(|s| s
        .text
        .split(' ')
        .any(|w| !word_index(&data, 2).contains_key(w))));

    let mut g = Graph::new();
    let losses: Vec<_> = data
        .iter()
        .map(|s| m.direct_loss(&mut g, s).unwrap().0)
        .collect();
    let total = g.sum(&losses).unwrap();
    Sequential::new().backward(&mut g, &store, total).unwrap();
    let want_loss = g.value(total).unwrap().to_vec::<f32>().unwrap()[0];
    let want = take_grads(&mut store, &m.params());
    assert!(want[0].iter().any(|&x| x != 0.0));

    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut c = Compiled::new(m.blocks()).unwrap().with_strategy(s);
        let loss = c.backward(&store, &data, &Loss::metric("loss")).unwrap();
        close_to(1e-5, &[loss], &[want_loss], &format!("{s:?} loss"));
        for (k, (a, b)) in take_grads(&mut store, &m.params())
            .iter()
            .zip(&want)
            .enumerate()
        {
            close_to(1e-5, a, b, &format!("{s:?} gradient of parameter {k}"));
        }
    }
}

#[test]
fn training_lowers_the_loss() {
    let data = sentences();
    let mut store = ParamStore::new();
    let m = model(&mut store, &data);
    let mut c = Compiled::new(m.blocks())
        .unwrap()
        .with_strategy(Strategy::Agenda);
    let mut opt = Optimizer::adagrad(Adagrad {
        lr: 0.1,
        eps: 1e-8,
        weight_decay: 0.0,
    });
    let first = c.backward(&store, &data, &Loss::metric("loss")).unwrap();
    opt.step(&mut store).unwrap();
    let mut last = first;
    for _ in 0..30 {
        last = c.backward(&store, &data, &Loss::metric("loss")).unwrap();
        opt.step(&mut store).unwrap();
    }
    assert!(last < 0.5 * first, "{first} -> {last}");
}
