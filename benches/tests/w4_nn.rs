//! W4 written with sheaf-nn layers trains like the hand-written model (the
//! same values copied in): the same loss at every step and the same
//! parameters after two SGD steps, under Sequential, Depth and Agenda.
//! The sentences mix looked-up and spelled words, and one rare word has a
//! single character (a one-step run in both directions). Tolerance as in
//! `w2_nn.rs`: |a - b| <= 1e-4 (1 + max(|a|, |b|)).

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::w2::optimizer;
use sheaf_benches::w4::{self, CharModel, Data, Word};
use sheaf_benches::w4_nn::{self, NnCharModel};
use sheaf_examples::sst::parse_trees;
use sheaf_sched::{Executor, Strategy};

const TREES: &str = "(3 (2 (2 The) (2 movie)) (3 (2 was) (4 (3 very) (4 good))))
(1 (2 The) (1 (1 (2 movie) (1 stinks)) (2 .)))
(2 (2 A) (2 (2 very) (2 !)))";

fn close(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-4 * (1.0 + x.abs().max(y.abs())),
            "{what}[{i}]: {x} (layers) vs {y} (hand-written)"
        );
    }
}

#[test]
fn the_layers_model_trains_like_the_hand_written_one() {
    let d = Data::new(&parse_trees(TREES, "inline").unwrap(), 5, 3);
    let words = d.sentences.iter().flat_map(|s| &s.words);
    assert!(words
        .clone()
        .any(|w| matches!(w, Word::Rare(c) if c.len() == 1)));
    assert!(words.clone().any(|w| matches!(w, Word::Frequent(_))));
    for strategy in [None, Some(Strategy::Depth), Some(Strategy::Agenda)] {
        let (mut hs, mut ns) = (ParamStore::new(), ParamStore::new());
        let hand = CharModel::new(&mut hs, &d, 1).unwrap();
        let nn = NnCharModel::new(&mut ns, &d, 2).unwrap();
        nn.copy_from(&mut ns, &hand, &hs);
        let u_of = |l: &sheaf_nn::Lstm| ns.value(&l.params()[1]).unwrap().to_vec::<f32>().unwrap();
        let (fwd_u, bwd_u) = (u_of(&nn.fwd), u_of(&nn.bwd));
        let (mut ho, mut no) = (optimizer(), optimizer());
        let (mut hg, mut ng) = (Graph::new(), Graph::new());
        let (mut hx, mut nx) = (strategy.map(Executor::new), strategy.map(Executor::new));
        for k in 0..2 {
            let batch = &d.sentences;
            let a = w4_nn::train_step(&nn, &mut ns, &mut no, &mut ng, nx.as_mut(), batch).unwrap();
            let b = w4::train_step(&hand, &mut hs, &mut ho, &mut hg, hx.as_mut(), batch).unwrap();
            close(&format!("{strategy:?} loss of step {k}"), &[a], &[b]);
        }
        for (mine, theirs) in nn.pairs(&hand) {
            let name = ns.name(mine.id()).unwrap().to_string();
            close(
                &format!("{strategy:?} {name}"),
                &ns.value(&mine).unwrap().to_vec::<f32>().unwrap(),
                &hs.value(&theirs).unwrap().to_vec::<f32>().unwrap(),
            );
        }
        // The character weights took part: both directions' U moved.
        for (lstm, start) in [(&nn.fwd, &fwd_u), (&nn.bwd, &bwd_u)] {
            let u = ns
                .value(&lstm.params()[1])
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            assert!(u.iter().zip(start).any(|(a, b)| a != b), "{strategy:?}");
        }
    }
}
