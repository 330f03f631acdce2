//! W4: rare words go through the characters, and every strategy trains
//! the same model as the reference executor.

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::w2::optimizer;
use sheaf_benches::w4::{train_flops, train_step, CharModel, Data, Word};
use sheaf_examples::sst::parse_trees;
use sheaf_sched::{Executor, Strategy};

const TREES: &str = "(3 (2 (2 The) (2 movie)) (3 (2 was) (4 (3 very) (4 good))))
(1 (2 The) (1 (1 (2 movie) (1 stinks)) (2 .)))
(2 (2 A) (2 (2 very) (2 .)))";

fn data() -> Data {
    Data::new(&parse_trees(TREES, "inline").unwrap(), 300, 3)
}

#[test]
fn rare_words_are_spelled() {
    let d = data();
    let first = &d.sentences[0].words;
    // "The" (twice in training) is looked up, "was" (once) is spelled.
    assert!(matches!(first[0], Word::Frequent(_)));
    assert_eq!(first[2], Word::Rare(vec![0, 1, 2]));
    assert!(d.rare_share > 0.3 && d.rare_share < 0.7, "{}", d.rare_share);
    // Rare words add their character products to the count.
    let s = &d.sentences[0];
    let frequent_only = sheaf_benches::w4::config(1).train_flops(s.words.len());
    assert!(train_flops(s) > frequent_only);
}

#[test]
fn strategies_train_the_same_model() {
    let d = data();
    let mut results = Vec::new();
    for strategy in [None, Some(Strategy::Depth), Some(Strategy::Agenda)] {
        let mut store = ParamStore::new();
        let m = CharModel::new(&mut store, &d, 4).unwrap();
        let (mut opt, mut g) = (optimizer(), Graph::new());
        let mut exec = strategy.map(Executor::new);
        let mut losses = Vec::new();
        for _ in 0..2 {
            losses.push(
                train_step(
                    &m,
                    &mut store,
                    &mut opt,
                    &mut g,
                    exec.as_mut(),
                    &d.sentences,
                )
                .unwrap(),
            );
        }
        let u = store.value(&m.fwd.u).unwrap().to_vec::<f32>().unwrap();
        results.push((losses, u));
    }
    let (l0, u0) = &results[0];
    for (l, u) in &results[1..] {
        for (a, b) in l0.iter().zip(l) {
            assert!((a - b).abs() <= 1e-4 * a.abs(), "{a} vs {b}");
        }
        for (a, b) in u0.iter().zip(u) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{a} vs {b}");
        }
    }
    // The character weights did learn: the first update changed them.
    let mut fresh = ParamStore::new();
    let m = CharModel::new(&mut fresh, &d, 4).unwrap();
    let u = fresh.value(&m.fwd.u).unwrap().to_vec::<f32>().unwrap();
    assert!(u.iter().zip(u0).any(|(a, b)| a != b));
}
