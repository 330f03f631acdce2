//! W1's split step (the batch as independent graphs side by side) trains
//! the same model as the one-graph step: equal loss and equal parameters
//! after a few updates, up to summation order.

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::measure::with_threads;
use sheaf_benches::w1::{model, optimizer, train_step, train_step_split};
use sheaf_examples::sst::{parse_trees, Vocab};
use sheaf_sched::{DataParallel, Executor, Strategy};

const TREES: &str = "(3 (2 (2 The) (2 movie)) (3 (2 was) (4 (3 very) (4 good))))
(1 (2 It) (1 (1 (2 is) (1 bad)) (2 .)))
(2 (2 A) (2 film))
(4 (3 (3 Truly) (4 great)) (2 (2 work) (2 !)))
(0 (1 Awful) (2 .))";

#[test]
fn split_step_equals_one_graph_step() {
    let trees = parse_trees(TREES, "inline").unwrap();
    let vocab = Vocab::from_trees(&trees);
    let ids: Vec<Vec<u32>> = trees.iter().map(|t| vocab.encode(t)).collect();
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let (mut whole, mut split) = (ParamStore::new(), ParamStore::new());
        let m1 = model(&mut whole, vocab.len(), 3).unwrap();
        let m2 = model(&mut split, vocab.len(), 3).unwrap();
        let (mut o1, mut o2) = (optimizer(), optimizer());
        let (mut g, mut exec) = (Graph::new(), Executor::new(strategy));
        let mut parts = DataParallel::new(strategy, 2);
        for _ in 0..3 {
            let l1 = train_step(
                &m1,
                &mut whole,
                &mut o1,
                &mut g,
                Some(&mut exec),
                &trees,
                &ids,
            )
            .unwrap();
            let l2 = with_threads(2, || {
                train_step_split(&m2, &mut split, &mut o2, &mut parts, &trees, &ids)
            })
            .unwrap();
            assert!((l1 - l2).abs() <= 1e-5 * l1.abs(), "{l1} vs {l2}");
        }
        for (p, q) in whole.params().iter().zip(split.params()) {
            let a = whole.value(p).unwrap().to_vec::<f32>().unwrap();
            let b = split.value(&q).unwrap().to_vec::<f32>().unwrap();
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{x} vs {y}");
            }
        }
    }
}
