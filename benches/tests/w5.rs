//! W5: the strategies train the same model (first updates' losses agree)
//! and the useful-FLOP count matches a hand count.

use sheaf_autodiff::ParamStore;
use sheaf_benches::w5::{
    model, optimizer, strategies, train_flops, train_step, train_step_vertex, vertex_model, HIDDEN,
};
use sheaf_examples::molecules::{Molecule, PAIR_FEATURES};

/// A molecule of `n` atoms with `a` features each, all features 0.5.
fn molecule(n: usize, a: usize, target: f32) -> Molecule {
    Molecule {
        atoms: vec![vec![0.5; a]; n],
        pairs: (0..n)
            .map(|_| vec![vec![0.5; PAIR_FEATURES]; n - 1])
            .collect(),
        target,
    }
}

#[test]
fn strategies_give_the_same_losses() {
    let a = 6;
    let data: Vec<Molecule> = (1..=5).map(|n| molecule(n, a, n as f32 * 0.3)).collect();
    let mut losses = Vec::new();
    for (name, strategy) in strategies() {
        let mut store = ParamStore::new();
        let mut c = model(&mut store, a, strategy, 3).expect("model");
        let mut opt = optimizer();
        let l: Vec<f32> = (0..2)
            .map(|_| train_step(&mut c, &mut store, &mut opt, &data).expect(name))
            .collect();
        losses.push(l);
    }
    for l in &losses[1..] {
        for (x, y) in l.iter().zip(&losses[0]) {
            assert!(
                (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                "{l:?} vs {:?}",
                losses[0]
            );
        }
    }
    // The second update saw the first one's Adam step.
    assert!(losses[0][0] != losses[0][1]);
}

#[test]
fn vertex_functions_train_like_the_blocks() {
    let a = 6;
    let data: Vec<Molecule> = (1..=5).map(|n| molecule(n, a, n as f32 * 0.3)).collect();
    for (name, strategy) in strategies() {
        let mut store = ParamStore::new();
        let mut c = model(&mut store, a, strategy, 3).expect("model");
        let mut opt = optimizer();
        let mut vstore = ParamStore::new();
        let mut v = vertex_model(&mut vstore, a, strategy, 3).expect("vertex model");
        let mut vopt = optimizer();
        for step in 0..3 {
            let want = train_step(&mut c, &mut store, &mut opt, &data).expect(name);
            let got = train_step_vertex(&mut v, &mut vstore, &mut vopt, &data).expect(name);
            assert!(
                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                "{name} update {step}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn flops_by_hand() {
    // Two atoms of 3 features: n = 2, p = 2, d = HIDDEN, f = 10.
    let (n, p, a, f, d) = (2.0, 2.0, 3.0, PAIR_FEATURES as f64, HIDDEN as f64);
    let products = [
        (n, a, d),       // A->A 1
        (p, f, d),       // P->A 1
        (n, 2.0 * d, d), // A 1
        (p, 2.0 * a, d), // A->P 1 (once per ordered pair)
        (p, f, d),       // P->P 1
        (p, 2.0 * d, d), // P 1
        (n, d, d),       // A->A 2
        (p, d, d),       // P->A 2
        (n, 2.0 * d, d), // A 2
        (1.0, d, 1.0),   // head
    ];
    let want: f64 = 3.0
        * products
            .iter()
            .map(|(rows, i, o)| 2.0 * rows * i * o)
            .sum::<f64>();
    let got = train_flops(&molecule(2, 3, 0.0), 3);
    assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
}
