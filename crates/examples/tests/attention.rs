//! Feed-forward attention written with blocks equals the same model on the
//! graph (loss and every gradient) under every strategy; training on the
//! addition problem lowers the loss.

mod common;

use common::{close_to, take_grads};
use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{Adam, Graph, Optimizer, ParamStore, Sequential};
use sheaf_blocks::{Compiled, Loss};
use sheaf_examples::attention::{Addition, Attention};
use sheaf_sched::Strategy;

#[test]
fn addition_data_has_two_markers() {
    let mut rng = StdRng::seed_from_u64(1);
    for x in Addition::dataset(50, 5, 9, &mut rng) {
        assert!((5..=9).contains(&x.steps.len()));
        let marked: Vec<f32> = x
            .steps
            .iter()
            .filter(|s| s[1] == 1.0)
            .map(|s| s[0])
            .collect();
        assert_eq!(marked.len(), 2);
        assert!((marked[0] + marked[1] - x.target).abs() < 1e-6);
    }
}

#[test]
fn blocks_equal_the_direct_model() {
    let mut rng = StdRng::seed_from_u64(2);
    let mut store = ParamStore::new();
    let m = Attention::new(&mut store, 6, &mut rng).unwrap();
    let data = Addition::dataset(7, 3, 8, &mut rng);

    let mut g = Graph::new();
    let losses: Vec<_> = data
        .iter()
        .map(|x| m.direct(&mut g, x).unwrap().1)
        .collect();
    let total = g.sum(&losses).unwrap();
    Sequential::new().backward(&mut g, &store, total).unwrap();
    let want_loss = g.value(total).unwrap().to_vec::<f32>().unwrap()[0];
    let want = take_grads(&mut store, &m.params());
    assert!(
        want.iter().all(|g| g.iter().any(|&x| x != 0.0)),
        "every parameter gets a gradient"
    );

    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut c = Compiled::new(m.blocks()).unwrap().with_strategy(s);
        let loss = c.backward(&store, &data, &Loss::outputs()).unwrap();
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
    let mut rng = StdRng::seed_from_u64(3);
    let mut store = ParamStore::new();
    let m = Attention::new(&mut store, 16, &mut rng).unwrap();
    let data = Addition::dataset(32, 6, 10, &mut rng);
    let mut c = Compiled::new(m.blocks())
        .unwrap()
        .with_strategy(Strategy::Agenda);
    let mut opt = Optimizer::adam(Adam {
        lr: 1e-2,
        ..Adam::default()
    });
    let first = c.backward(&store, &data, &Loss::outputs().mean()).unwrap();
    opt.step(&mut store).unwrap();
    let mut last = first;
    for _ in 0..60 {
        last = c.backward(&store, &data, &Loss::outputs().mean()).unwrap();
        opt.step(&mut store).unwrap();
    }
    assert!(last < 0.5 * first, "{first} -> {last}");
}
