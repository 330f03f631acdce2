//! The SST Tree-LSTM from sheaf-nn layers (`sheaf_examples::model`) trains
//! like the hand-written model it replaced (the same values copied in):
//! the same loss at every step and the same parameters after three SGD
//! steps of W1, under Sequential, Depth and Agenda. The two graphs have the
//! same ops in the same order, so they agree to rounding:
//! |a - b| <= 1e-5 (1 + max(|a|, |b|)).

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::w1::{self, optimizer};
use sheaf_benches::w1_hand::{self, HandTreeLstm};
use sheaf_examples::sst::parse_trees;
use sheaf_sched::{Executor, Strategy};

const TREES: &str = "(3 (2 (2 The) (2 movie)) (3 (2 was) (4 (3 very) (4 good))))
(1 (2 The) (1 (1 (2 movie) (1 stinks)) (2 .)))
(2 (2 A) (2 (2 very) (2 .)))
(4 great)";

fn close(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-5 * (1.0 + x.abs().max(y.abs())),
            "{what}[{i}]: {x} (layers) vs {y} (hand-written)"
        );
    }
}

#[test]
fn the_layers_model_trains_like_the_hand_written_one() {
    let trees = parse_trees(TREES, "inline").unwrap();
    let mut vocab: Vec<&str> = Vec::new();
    let ids: Vec<Vec<u32>> = trees
        .iter()
        .map(|t| {
            t.words
                .iter()
                .map(|w| match vocab.iter().position(|v| v == w) {
                    Some(i) => i as u32,
                    None => {
                        vocab.push(w);
                        vocab.len() as u32 - 1
                    }
                })
                .collect()
        })
        .collect();
    for strategy in [None, Some(Strategy::Depth), Some(Strategy::Agenda)] {
        let (mut hs, mut ns) = (ParamStore::new(), ParamStore::new());
        let hand = HandTreeLstm::new(&mut hs, vocab.len(), 1).unwrap();
        let nn = w1::model(&mut ns, vocab.len(), 2).unwrap();
        hand.copy_into(&hs, &nn, &mut ns);
        let (mut ho, mut no) = (optimizer(), optimizer());
        let (mut hg, mut ng) = (Graph::new(), Graph::new());
        let (mut hx, mut nx) = (strategy.map(Executor::new), strategy.map(Executor::new));
        for k in 0..3 {
            let a = w1::train_step(&nn, &mut ns, &mut no, &mut ng, nx.as_mut(), &trees, &ids);
            let b =
                w1_hand::train_step(&hand, &mut hs, &mut ho, &mut hg, hx.as_mut(), &trees, &ids);
            close(
                &format!("{strategy:?} loss of step {k}"),
                &[a.unwrap()],
                &[b.unwrap()],
            );
        }
        for (mine, theirs) in nn.params().into_iter().zip(hand.params()) {
            let name = ns.name(mine.id()).unwrap().to_string();
            close(
                &format!("{strategy:?} {name}"),
                &ns.value(&mine).unwrap().to_vec::<f32>().unwrap(),
                &hs.value(&theirs).unwrap().to_vec::<f32>().unwrap(),
            );
        }
        // Every parameter learned: none is still at its starting value.
        let mut start = ParamStore::new();
        let again = HandTreeLstm::new(&mut start, vocab.len(), 1).unwrap();
        for (p, q) in nn.params().into_iter().zip(again.params()) {
            let now = ns.value(&p).unwrap().to_vec::<f32>().unwrap();
            let was = start.value(&q).unwrap().to_vec::<f32>().unwrap();
            assert_ne!(now, was, "{strategy:?} {}", ns.name(p.id()).unwrap());
        }
    }
}

#[test]
fn both_models_build_the_same_ops() {
    let trees = parse_trees(TREES, "inline").unwrap();
    let ids: Vec<Vec<u32>> = trees.iter().map(|t| vec![0; t.words.len()]).collect();
    let (mut hs, mut ns) = (ParamStore::new(), ParamStore::new());
    let hand = HandTreeLstm::new(&mut hs, 3, 1).unwrap();
    let nn = w1::model(&mut ns, 3, 2).unwrap();
    let (mut hg, mut ng) = (Graph::new(), Graph::new());
    let ops = |g: &Graph| -> Vec<&'static str> {
        (0..g.len())
            .map(|i| g.op_name(sheaf_autodiff::NodeId::from_index(i)))
            .collect()
    };
    for (t, i) in trees.iter().zip(&ids) {
        hand.tree_loss(&mut hg, t, i).unwrap();
        nn.tree_loss(&mut ng, t, i).unwrap();
    }
    let (mut a, mut b) = (ops(&ng), ops(&hg));
    assert_eq!(a.len(), b.len());
    a.sort();
    b.sort();
    assert_eq!(a, b);
}
