//! `Strategy::Auto` times Depth and Agenda on the first graphs, then keeps
//! one; its results equal Sequential's whichever it runs.

use sheaf_autodiff::{Graph, ParamStore, Sequential};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

fn graph(g: &mut Graph, k: usize) -> sheaf_autodiff::Expr {
    let x = g.input(
        Tensor::from_vec(
            (0..6).map(|i| (i + k) as f32 * 0.1).collect::<Vec<_>>(),
            [6],
        )
        .unwrap(),
    );
    let mut parts = Vec::new();
    for j in 0..4 {
        let s = g.scale(x, j as f32 + 0.5).unwrap();
        let t = g.tanh(s).unwrap();
        parts.push(g.sum_elems(t).unwrap());
    }
    g.sum(&parts).unwrap()
}

#[test]
fn auto_tries_both_then_keeps_one_and_equals_sequential() {
    let store = ParamStore::new();
    let mut e = Executor::new(Strategy::Auto);
    let mut seen = Vec::new();
    for k in 0..8 {
        let mut g = Graph::new();
        let loss = graph(&mut g, k);
        let v = e
            .forward(&mut g, &store, loss)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        e.backward(&mut g, &store, loss).unwrap();
        seen.push(e.active_strategy());
        let mut g2 = Graph::new();
        let loss2 = graph(&mut g2, k);
        let r = Sequential::new()
            .forward(&mut g2, &store, loss2)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert!(
            (v[0] - r[0]).abs() <= 1e-5 * (1.0 + r[0].abs()),
            "graph {k}: {} vs {}",
            v[0],
            r[0]
        );
    }
    assert!(
        seen[..4].contains(&Strategy::Depth) && seen[..4].contains(&Strategy::Agenda),
        "{seen:?}"
    );
    let chosen = e.auto_choice().expect("a choice after four timed graphs");
    assert!(seen[5..].iter().all(|&s| s == chosen), "{seen:?}");
}
