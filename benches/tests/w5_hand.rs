//! W5 hand-batched: on real ESOL molecules (a 1-atom one among them) the
//! hand step's loss, gradients and Adam updates equal those of the blocks
//! model run node by node (`Strategy::Sequential`); bad batches are errors.
//!
//! Tolerance: relative 1e-4 of the largest magnitude of each compared
//! tensor (loss: of the loss). Both sides compute in f32 the same sums in
//! other orders (one GEMM over all rows against per-node products, a
//! segment sum against a tree of adds), which moves results by a few
//! ulps, ~1e-6 relative; 1e-4 leaves room for that and still catches any
//! wrong term (a missed pair, a wrong index, a missing mask moves
//! gradients by far more).

use sheaf_autodiff::{Param, ParamStore};
use sheaf_benches::w5::{model, optimizer, training_set};
use sheaf_benches::w5_hand::{self, WeaveHand};
use sheaf_blocks::Loss;
use sheaf_examples::molecules::{default_path, Molecule, PAIR_FEATURES};
use sheaf_sched::Strategy;

const SEED: u64 = 7;
const TOL: f32 = 1e-4;

/// ESOL's training molecules and atom feature count.
fn esol() -> (Vec<Molecule>, usize) {
    training_set(&default_path()).expect("the repository's ESOL file")
}

/// A 1-atom molecule: ESOL's if the training part has one, else the first
/// atom of the first molecule alone.
fn one_atom(train: &[Molecule]) -> Molecule {
    train
        .iter()
        .find(|m| m.atoms.len() == 1)
        .cloned()
        .unwrap_or_else(|| Molecule {
            atoms: vec![train[0].atoms[0].clone()],
            pairs: vec![vec![]],
            target: -0.6,
        })
}

/// `got` within `TOL` of `want`, relative to `want`'s largest magnitude.
fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        err <= TOL * scale,
        "{what}: max error {err:e} against magnitude {scale:e}"
    );
}

fn values(store: &ParamStore, p: &Param) -> Vec<f32> {
    store.value(p).unwrap().to_vec::<f32>().unwrap()
}

/// Trains the graph model (sequential) and the hand step side by side,
/// one update per batch of `batches`, comparing the loss and every
/// gradient at each update and the parameters after each. Returns the
/// parameters' names and their values before the first update and after
/// each.
fn side_by_side(batches: &[&[Molecule]], atom_in: usize) -> (Vec<String>, Vec<Vec<Vec<f32>>>) {
    let mut gs = ParamStore::new();
    let mut c = model(&mut gs, atom_in, Strategy::Sequential, SEED).unwrap();
    let mut opt = optimizer();
    let mut hs = ParamStore::new();
    let mut hand = w5_hand::model(&mut hs, atom_in, SEED).unwrap();
    let params = hand.params().to_vec();
    assert_eq!(params.len(), 20);
    let names: Vec<String> = params
        .iter()
        .map(|p| hs.name(p.id()).unwrap().to_owned())
        .collect();
    let twins: Vec<Param> = names
        .iter()
        .map(|n| gs.get(n).unwrap_or_else(|| panic!("no {n} in the graph")))
        .collect();
    let snapshot =
        |hs: &ParamStore| -> Vec<Vec<f32>> { params.iter().map(|p| values(hs, p)).collect() };
    let mut seen = vec![snapshot(&hs)];
    for (p, v) in twins.iter().zip(&seen[0]) {
        assert_eq!(&values(&gs, p), v, "same seed, same weights");
    }
    for (u, batch) in batches.iter().enumerate() {
        let lg = c.backward(&gs, *batch, &Loss::outputs().mean()).unwrap();
        let lh = hand.gradients(&hs, batch).unwrap();
        assert_close(&format!("loss of update {u}"), &[lh], &[lg]);
        for (i, (name, twin)) in names.iter().zip(&twins).enumerate() {
            let want = gs.grad(twin).unwrap().to_vec::<f32>().unwrap();
            match hand.grad(i) {
                Some(g) => assert_close(
                    &format!("gradient of {name}, update {u}"),
                    &g.to_vec::<f32>().unwrap(),
                    &want,
                ),
                // Untouched: the graph's gradient is the zero it started as.
                None => assert!(want.iter().all(|&v| v == 0.0), "{name} untouched"),
            }
        }
        opt.step(&mut gs).unwrap();
        hand.update(&mut hs).unwrap();
        let now = snapshot(&hs);
        for ((name, twin), v) in names.iter().zip(&twins).zip(&now) {
            assert_close(&format!("{name} after update {u}"), v, &values(&gs, twin));
        }
        seen.push(now);
    }
    (names, seen)
}

#[test]
fn hand_step_equals_the_graph_on_esol() {
    let (train, atom_in) = esol();
    let mut batch = vec![one_atom(&train)];
    batch.extend(
        train
            .iter()
            .filter(|m| (2..=12).contains(&m.atoms.len()))
            .take(7)
            .cloned(),
    );
    assert_eq!(batch.len(), 8);
    assert_eq!(batch[0].atoms.len(), 1);
    let (names, seen) = side_by_side(&[batch.as_slice(); 3], atom_in);
    // Every parameter moved (a batch with pairs uses all of them).
    for (i, name) in names.iter().enumerate() {
        assert!(seen[3][i] != seen[0][i], "{name} did not move");
    }
}

#[test]
fn pair_layers_stay_untouched_without_pairs() {
    let (train, atom_in) = esol();
    let one = one_atom(&train);
    let mut other = one.clone();
    other.target += 1.5;
    let with_pairs: Vec<Molecule> = train
        .iter()
        .filter(|m| (2..=6).contains(&m.atoms.len()))
        .take(3)
        .cloned()
        .collect();
    let without = [one, other];
    // The first update gives every parameter Adam moments; the next two
    // must leave the pair layers alone all the same.
    let (names, seen) = side_by_side(&[&with_pairs, &without, &without], atom_in);
    let pair_layers = [
        "weave1.pa",
        "weave1.ap",
        "weave1.pp",
        "weave1.p",
        "weave2.pa",
    ];
    for (i, name) in names.iter().enumerate() {
        let layer = name.rsplit_once('.').map_or(name.as_str(), |(l, _)| l);
        assert!(seen[1][i] != seen[0][i], "{name} moved in the first update");
        let moved = seen[3][i] != seen[1][i];
        assert_eq!(moved, !pair_layers.contains(&layer), "{name}");
    }
}

#[test]
fn bad_batches_are_errors() {
    let (train, atom_in) = esol();
    let mut hs = ParamStore::new();
    let mut hand = w5_hand::model(&mut hs, atom_in, SEED).unwrap();
    let good = train.iter().find(|m| m.atoms.len() == 3).cloned().unwrap();
    let with = |f: &dyn Fn(&mut Molecule)| {
        let mut m = good.clone();
        f(&mut m);
        m
    };
    let cases: Vec<(Vec<Molecule>, String)> = vec![
        (vec![], "the batch has no molecules".into()),
        (
            vec![good.clone(), with(&|m| m.atoms[1].push(0.0))],
            format!(
                "molecule 1 of the batch has {} features for atom 1, the model reads {atom_in}",
                atom_in + 1
            ),
        ),
        (
            vec![with(&|m| {
                m.pairs[2][0].pop();
            })],
            format!(
                "molecule 0 of the batch has a pair of {} features, the model reads {PAIR_FEATURES}",
                PAIR_FEATURES - 1
            ),
        ),
        (
            vec![with(&|m| {
                m.pairs.pop();
            })],
            "molecule 0 of the batch has 3 atoms but not 3 rows of 2 pairs".into(),
        ),
        (
            vec![Molecule {
                atoms: vec![],
                pairs: vec![],
                target: 0.0,
            }],
            "molecule 0 of the batch has no atoms".into(),
        ),
    ];
    for (batch, want) in cases {
        let before: Vec<Vec<f32>> = hand.params().iter().map(|p| values(&hs, p)).collect();
        let got = hand.step(&mut hs, &batch).unwrap_err();
        assert_eq!(got, format!("W5 hand-batched: {want}"));
        let after: Vec<Vec<f32>> = hand.params().iter().map(|p| values(&hs, p)).collect();
        assert_eq!(before, after, "a refused batch changes nothing");
    }
    // The step still works after the errors.
    hand.step(&mut hs, &[good]).unwrap();
    // Parameters that are not the weave model's.
    let too_few = hand.params()[..19].to_vec();
    let e = WeaveHand::new(&hs, &too_few).unwrap_err();
    assert_eq!(e, "W5 hand-batched: 19 parameters, the weave model has 20");
}
