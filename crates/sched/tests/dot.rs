//! `Plan::to_dot` groups nodes by batch.

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

#[test]
fn dot_export_groups_batches() {
    let store = ParamStore::new();
    let mut g = Graph::new();
    let x = g.input(Tensor::from_vec(vec![0.5f32, -0.5], [2]).unwrap());
    let a = g.tanh(x).unwrap();
    let b = g.tanh(x).unwrap();
    let s = g.add(a, b).unwrap();
    let mut e = Executor::new(Strategy::Depth);
    e.forward(&mut g, &store, s).unwrap();
    let dot = e.plans()[0].to_dot(&g);
    assert!(dot.starts_with("digraph plan {"), "{dot}");
    assert!(dot.contains("label=\"batch 0: tanh x2\""), "{dot}");
    assert!(dot.contains("label=\"batch 1: add x1\""), "{dot}");
    assert!(
        dot.contains("n0 -> n1;") && dot.contains("n1 -> n3;") && dot.contains("n2 -> n3;"),
        "{dot}"
    );
    assert!(
        dot.contains("n0 [label=\"input #0 [2]\", style=dashed];"),
        "{dot}"
    );
}
