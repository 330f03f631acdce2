//! The weave model written with blocks equals the same model on the graph
//! (loss and every gradient) under every strategy, on real ESOL molecules
//! including a one-atom one; featurisation and reader errors.

mod common;

use common::{close_to, take_grads};
use std::path::Path;

use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{Graph, ParamStore, Sequential};
use sheaf_blocks::{Compiled, Loss};
use sheaf_examples::molecules::{
    default_path, parse_molecules, read_molecules, Featurizer, PAIR_FEATURES,
};
use sheaf_examples::weave::Weave;
use sheaf_sched::Strategy;

#[test]
fn features_follow_w5() {
    let raw = read_molecules(&default_path()).unwrap();
    assert_eq!(raw.len(), 1128);
    let f = Featurizer::fit(&raw);
    // Atomic numbers 6 7 8 9 15 16 17 35 53, H counts 0-4, four raw fields.
    assert_eq!(f.atom_features(), 9 + 5 + 4);
    let ethanol = parse_molecules(
        r#"{"name": "ethanol", "smiles": "CCO", "target": 1.1, "atoms": [[6, 1, 0, 0, 3, 0], [6, 2, 0, 0, 2, 0], [8, 1, 0, 0, 1, 0]], "bonds": [[0, 1, 1], [1, 2, 1]]}"#,
        Path::new("inline"),
    )
    .unwrap();
    let m = f.featurize(&ethanol[0]);
    assert_eq!(m.atoms[2][2], 1.0, "oxygen is the third atomic number");
    assert_eq!(m.pairs.len(), 3);
    assert!(m
        .pairs
        .iter()
        .all(|row| row.len() == 2 && row.iter().all(|p| p.len() == PAIR_FEATURES)));
    // (0, 1): single bond, distance 1; (0, 2): no bond, distance 2.
    assert_eq!(m.pairs[0][0], vec![0., 1., 0., 0., 0., 1., 0., 0., 0., 0.]);
    assert_eq!(m.pairs[0][1], vec![1., 0., 0., 0., 0., 0., 1., 0., 0., 0.]);
}

#[test]
fn reader_errors_name_file_and_line() {
    let e = parse_molecules("\n{\"name\": 3}\n", Path::new("m.jsonl")).unwrap_err();
    assert!(e.to_string().starts_with("m.jsonl:2: invalid type"), "{e}");
    let e = parse_molecules(
        r#"{"name": "x", "smiles": "C", "target": 0.0, "atoms": [[6, 0, 0, 0, 4, 0]], "bonds": [[0, 1, 1]]}"#,
        Path::new("m.jsonl"),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.jsonl:1: molecule `x`: bond [0, 1, 1] is not [i, j, type] with atoms i != j below 1 and type 1-4"
    );
    let e = read_molecules(Path::new("/nonexistent/esol.jsonl")).unwrap_err();
    assert!(
        e.to_string().starts_with("/nonexistent/esol.jsonl: "),
        "{e}"
    );
}

#[test]
fn blocks_equal_the_direct_model() {
    let raw = read_molecules(&default_path()).unwrap();
    let f = Featurizer::fit(&raw);
    let one_atom = raw.iter().position(|m| m.atoms.len() == 1).unwrap();
    let picks = [0, 5, one_atom, 17];
    let data: Vec<_> = picks.iter().map(|&i| f.featurize(&raw[i])).collect();
    let mut store = ParamStore::new();
    let model = Weave::new(
        &mut store,
        f.atom_features(),
        5,
        &mut StdRng::seed_from_u64(4),
    )
    .unwrap();

    let mut g = Graph::new();
    let losses: Vec<_> = data
        .iter()
        .map(|m| model.direct(&mut g, m).unwrap().1)
        .collect();
    let total = g.sum(&losses).unwrap();
    Sequential::new().backward(&mut g, &store, total).unwrap();
    let want_loss = g.value(total).unwrap().to_vec::<f32>().unwrap()[0];
    let want = take_grads(&mut store, &model.params());

    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut c = Compiled::new(model.blocks().unwrap())
            .unwrap()
            .with_strategy(s);
        let loss = c.backward(&store, &data, &Loss::outputs()).unwrap();
        close_to(1e-4, &[loss], &[want_loss], &format!("{s:?} loss"));
        for (k, (a, b)) in take_grads(&mut store, &model.params())
            .iter()
            .zip(&want)
            .enumerate()
        {
            close_to(1e-4, a, b, &format!("{s:?} gradient of parameter {k}"));
        }
    }
}

#[test]
fn vertex_functions_equal_the_direct_model() {
    let raw = read_molecules(&default_path()).unwrap();
    let f = Featurizer::fit(&raw);
    let one_atom = raw.iter().position(|m| m.atoms.len() == 1).unwrap();
    let picks = [0, 5, one_atom, 17, 40];
    let data: Vec<_> = picks.iter().map(|&i| f.featurize(&raw[i])).collect();
    let mut store = ParamStore::new();
    let model = Weave::new(
        &mut store,
        f.atom_features(),
        6,
        &mut StdRng::seed_from_u64(9),
    )
    .unwrap();

    let mut g = Graph::new();
    let losses: Vec<_> = data
        .iter()
        .map(|m| model.direct(&mut g, m).unwrap().1)
        .collect();
    let total = g.sum(&losses).unwrap();
    Sequential::new().backward(&mut g, &store, total).unwrap();
    let want_loss = g.value(total).unwrap().to_vec::<f32>().unwrap()[0];
    let want = take_grads(&mut store, &model.params());
    let inline_nodes = g.len();

    let fns = model.vertex_functions().unwrap();
    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut g = Graph::new();
        let built = fns.build(&mut g, &data).unwrap();
        let losses: Vec<_> = built.iter().map(|(_, loss)| *loss).collect();
        let total = g.sum(&losses).unwrap();
        assert!(
            g.len() * 4 < inline_nodes,
            "{} nodes with vertex functions, {inline_nodes} inline",
            g.len()
        );
        let mut e = sheaf_sched::Executor::new(s);
        e.forward(&mut g, &store, total).unwrap();
        e.backward(&mut g, &store, total).unwrap();
        let loss = g.value(total).unwrap().to_vec::<f32>().unwrap()[0];
        close_to(1e-4, &[loss], &[want_loss], &format!("{s:?} loss"));
        for (k, (a, b)) in take_grads(&mut store, &model.params())
            .iter()
            .zip(&want)
            .enumerate()
        {
            close_to(1e-4, a, b, &format!("{s:?} gradient of parameter {k}"));
        }
    }
}
