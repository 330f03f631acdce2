//! text2vec written with blocks equals the same model written on the
//! graph from `sheaf-nn` layers (loss and every gradient), under every
//! strategy, and that equals the raw-op model it replaced; unknown words
//! embed as zeros; a few training steps lower the loss.

mod common;

use std::collections::HashMap;

use common::{close_to, take_grads};
use sheaf_autodiff::{Adagrad, Expr, Graph, GraphError, Optimizer, Param, ParamStore};
use sheaf_blocks::{Compiled, Loss};
use sheaf_examples::sst::parse_trees;
use sheaf_examples::text2vec::{word_index, Sentence, Text2Vec, Text2VecNn};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::{DType, Device, Tensor};

fn sentences() -> Vec<Sentence> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny.txt");
    let trees = parse_trees(&std::fs::read_to_string(p).unwrap(), "tiny.txt").unwrap();
    trees
        .iter()
        .map(|t| Sentence::from_tree(t).unwrap())
        .collect()
}

const EMBED: usize = 6;
const STATE: usize = 5;

fn model(store: &mut ParamStore, s: &[Sentence]) -> Text2Vec {
    use rand::SeedableRng;
    // min_count 2: words seen once are unknown, so both paths of the
    // Optional run.
    Text2Vec::new(
        store,
        word_index(s, 2),
        EMBED,
        STATE,
        &mut rand::rngs::StdRng::seed_from_u64(3),
    )
    .unwrap()
}

/// The blocks model (in `bs`) and the layers' model given its values (in
/// `ns`).
fn models(data: &[Sentence]) -> (Text2Vec, ParamStore, Text2VecNn, ParamStore) {
    let (mut bs, mut ns) = (ParamStore::new(), ParamStore::new());
    let m = model(&mut bs, data);
    let nn = Text2VecNn::new(&mut ns, word_index(data, 2), EMBED, STATE, 9).unwrap();
    nn.copy_from(&mut ns, &m, &bs).unwrap();
    (m, bs, nn, ns)
}

/// The direct model as written before `sheaf-nn`, on raw graph ops over
/// the blocks model's parameters: the reference the layers' model must
/// equal.
fn reference(
    m: &Text2Vec,
    words: &HashMap<String, u32>,
    g: &mut Graph,
    s: &Sentence,
) -> Result<(Expr, Expr), GraphError> {
    let [table, cw, cb, ow, ob] = m.params()[..] else {
        panic!("five parameters")
    };
    let table = g.param(&table);
    let mut state = g.input(Tensor::zeros([STATE], DType::F32, Device::Cpu).unwrap());
    for w in s.text.split(' ') {
        let x = match words.get(w) {
            Some(&id) => g.lookup(table, id)?,
            None => g.input(Tensor::zeros([EMBED], DType::F32, Device::Cpu).unwrap()),
        };
        let sx = g.concat(&[state, x])?;
        let (w, b) = (g.param(&cw), g.param(&cb));
        let y = g.affine(b, &[(w, sx)])?;
        state = g.tanh(y)?;
    }
    let (w, b) = (g.param(&ow), g.param(&ob));
    let logits = g.affine(b, &[(w, state)])?;
    Ok((g.pick_neg_log_softmax(logits, s.label)?, logits))
}

/// The layers' model's gradients `[table, w, u, b, out w, out b]` in the
/// blocks model's layout `[table, [u | w], b, out w, out b]`.
fn as_blocks_layout(grads: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let [table, w, u, b, ow, ob] = grads else {
        panic!("six gradients, got {}", grads.len())
    };
    let cell = u
        .chunks(STATE)
        .zip(w.chunks(EMBED))
        .flat_map(|(u, w)| u.iter().chain(w).copied())
        .collect();
    vec![table.clone(), cell, b.clone(), ow.clone(), ob.clone()]
}

/// The summed loss of `data` by `build` run under `strategy`, and every
/// gradient of `params` (taken from the store).
fn run(
    strategy: Strategy,
    store: &mut ParamStore,
    params: &[Param],
    data: &[Sentence],
    build: impl Fn(&mut Graph, &Sentence) -> Result<(Expr, Expr), GraphError>,
) -> (f32, Vec<Vec<f32>>) {
    let mut g = Graph::new();
    let losses: Vec<_> = data.iter().map(|s| build(&mut g, s).unwrap().0).collect();
    let total = g.sum(&losses).unwrap();
    let mut exec = Executor::new(strategy);
    let loss = exec
        .forward(&mut g, store, total)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()[0];
    exec.backward(&mut g, store, total).unwrap();
    (loss, take_grads(store, params))
}

#[test]
fn blocks_equal_the_direct_model() {
    let data = sentences();
    let (m, mut bs, nn, mut ns) = models(&data);
    assert!(data.iter().any(|s| s
        .text
        .split(' ')
        .any(|w| !word_index(&data, 2).contains_key(w))));

    let (want_loss, want) = run(
        Strategy::Sequential,
        &mut ns,
        &nn.params(),
        &data,
        |g, s| nn.direct_loss(g, s),
    );
    let want = as_blocks_layout(&want);
    assert!(want.iter().all(|g| g.iter().any(|&x| x != 0.0)));

    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut c = Compiled::new(m.blocks()).unwrap().with_strategy(s);
        let loss = c.backward(&bs, &data, &Loss::metric("loss")).unwrap();
        close_to(1e-5, &[loss], &[want_loss], &format!("{s:?} loss"));
        for (k, (a, b)) in take_grads(&mut bs, &m.params())
            .iter()
            .zip(&want)
            .enumerate()
        {
            close_to(1e-5, a, b, &format!("{s:?} gradient of parameter {k}"));
        }
    }
}

/// The layers' model, given the blocks model's values, equals the raw-op
/// model it replaced (on those values) in loss and every gradient, under
/// every strategy.
#[test]
fn layers_model_equals_the_raw_op_reference() {
    let data = sentences();
    let words = word_index(&data, 2);
    let (m, mut bs, nn, mut ns) = models(&data);
    let (want_loss, want) = run(Strategy::Sequential, &mut bs, &m.params(), &data, |g, s| {
        reference(&m, &words, g, s)
    });
    assert_eq!(want.len(), 5);
    assert!(want.iter().all(|g| g.iter().any(|&x| x != 0.0)));
    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let (loss, got) = run(s, &mut ns, &nn.params(), &data, |g, s| nn.direct_loss(g, s));
        close_to(1e-5, &[loss], &[want_loss], &format!("{s:?} loss"));
        for (k, (a, b)) in as_blocks_layout(&got).iter().zip(&want).enumerate() {
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
