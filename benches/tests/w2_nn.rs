//! W2 written with sheaf-nn layers trains like the hand-written model (the
//! same values copied in): the same loss at every step and the same
//! parameters after three SGD steps, under Sequential, Depth and Agenda. Tolerance: the layers' graph
//! differs only in where the zero state comes from and in node order, so
//! results agree to rounding: |a - b| <= 1e-4 (1 + max(|a|, |b|)).

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::w2::{self, optimizer, sentences, Config, Model};
use sheaf_benches::w2_nn::{self, NnModel};
use sheaf_sched::{Executor, Strategy};

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
    let cfg = Config {
        vocab: 30,
        embed: 6,
        hidden: 5,
        classes: 4,
        len: 7,
    };
    let data = sentences(&cfg, 12, 3);
    for strategy in [None, Some(Strategy::Depth), Some(Strategy::Agenda)] {
        let (mut hs, mut ns) = (ParamStore::new(), ParamStore::new());
        let hand = Model::new(&mut hs, cfg, 1).unwrap();
        let nn = NnModel::new(&mut ns, cfg, 2).unwrap();
        nn.copy_from(&mut ns, &hand, &hs);
        let (mut ho, mut no) = (optimizer(), optimizer());
        let (mut hg, mut ng) = (Graph::new(), Graph::new());
        let (mut hx, mut nx) = (strategy.map(Executor::new), strategy.map(Executor::new));
        for (k, batch) in data.chunks(4).enumerate() {
            let a = w2_nn::train_step(&nn, &mut ns, &mut no, &mut ng, nx.as_mut(), batch).unwrap();
            let b = w2::train_step(&hand, &mut hs, &mut ho, &mut hg, hx.as_mut(), batch).unwrap();
            close(&format!("{strategy:?} loss of step {k}"), &[a], &[b]);
        }
        // After three SGD steps every parameter still agrees.
        for (mine, theirs) in nn.pairs(&hand) {
            let name = ns.name(mine.id()).unwrap().to_string();
            close(
                &format!("{strategy:?} {name}"),
                &ns.value(&mine).unwrap().to_vec::<f32>().unwrap(),
                &hs.value(&theirs).unwrap().to_vec::<f32>().unwrap(),
            );
        }
    }
}
