//! The hand-batched W2 step trains the same model as the graph: equal loss
//! and equal parameters after two updates, against the reference executor
//! and both batching strategies; a corrupted parameter makes them differ.

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::w2::{optimizer, sentences, train_step, Config, Model, LR};
use sheaf_benches::w2_manual::Manual;
use sheaf_sched::{Executor, Strategy};

const SMALL: Config = Config {
    vocab: 23,
    embed: 6,
    hidden: 5,
    classes: 7,
    len: 4,
};

fn params(store: &ParamStore) -> Vec<Vec<f32>> {
    store
        .params()
        .iter()
        .map(|p| store.value(p).unwrap().to_vec::<f32>().unwrap())
        .collect()
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs() / (1.0 + x.abs()))
        .fold(0.0, f32::max)
}

#[test]
fn manual_step_equals_the_graph() {
    let data = sentences(&SMALL, 6, 9);
    for strategy in [None, Some(Strategy::Depth), Some(Strategy::Agenda)] {
        let (mut a, mut b) = (ParamStore::new(), ParamStore::new());
        let ma = Model::new(&mut a, SMALL, 5).unwrap();
        let mb = Model::new(&mut b, SMALL, 5).unwrap();
        let mut opt = optimizer();
        let mut g = Graph::new();
        let mut exec = strategy.map(Executor::new);
        let mut manual = Manual::new().unwrap();
        for batch in data.chunks(3) {
            let la = train_step(&ma, &mut a, &mut opt, &mut g, exec.as_mut(), batch).unwrap();
            let lb = manual.step(&mut b, &mb, batch, LR).unwrap();
            assert!(
                (la - lb).abs() <= 1e-5 * la.abs(),
                "{strategy:?}: {la} vs {lb}"
            );
        }
        let d = max_diff(&params(&a), &params(&b));
        assert!(d < 1e-5, "{strategy:?}: parameters differ by {d}");
    }
}

#[test]
fn a_wrong_parameter_is_caught() {
    let data = sentences(&SMALL, 3, 9);
    let (mut a, mut b) = (ParamStore::new(), ParamStore::new());
    let ma = Model::new(&mut a, SMALL, 5).unwrap();
    let mb = Model::new(&mut b, SMALL, 5).unwrap();
    // Perturb one recurrent weight of the second layer's backward direction.
    let u = b.value_mut(&mb.layers[1][1].u).unwrap();
    let mut v = u.to_vec::<f32>().unwrap();
    v[3] += 1e-2;
    *u = sheaf_tensor::Tensor::from_vec(v, u.shape()).unwrap();
    let mut g = Graph::new();
    let la = train_step(&ma, &mut a, &mut optimizer(), &mut g, None, &data).unwrap();
    let lb = Manual::new().unwrap().step(&mut b, &mb, &data, LR).unwrap();
    assert!((la - lb).abs() > 1e-6 || max_diff(&params(&a), &params(&b)) > 1e-4);
}

#[test]
fn unequal_lengths_are_an_error() {
    let mut store = ParamStore::new();
    let m = Model::new(&mut store, SMALL, 1).unwrap();
    let mut data = sentences(&SMALL, 2, 1);
    data[1].words.pop();
    data[1].tags.pop();
    let e = Manual::new()
        .unwrap()
        .step(&mut store, &m, &data, LR)
        .unwrap_err();
    assert!(e.contains("of one length"), "{e}");
}

#[test]
fn w2_counts_640_mflop_per_sentence() {
    let f = Config::w2().train_flops(40) / 1e6;
    assert!((f - 638.5).abs() < 0.1, "{f}");
}
