//! Plans cached with `Executor::cache_plans_as` are reused only where they
//! fit: a graph with the same node count and the same signature per node
//! but other wiring (a node reading another of its own cached batch) must
//! plan afresh, never run a batch before its arguments.

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

fn x() -> Tensor {
    Tensor::from_vec(vec![0.5, -1.0, 2.0], [3]).unwrap()
}

/// Within the SIMD tanh's documented accuracy (a few ulps) of std's.
fn close(got: &[f32], want: &[f32], strategy: Strategy) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
            "{strategy:?}: {got:?} vs {want:?}"
        );
    }
}

#[test]
fn a_cached_plan_is_not_reused_across_other_wiring() {
    let store = ParamStore::new();
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut e = Executor::new(strategy);
        e.cache_plans_as(Some(7));

        // Two independent tanh of one input: one batch of two.
        let mut g = Graph::new();
        let x1 = g.input(x());
        let _a = g.tanh(x1).unwrap();
        let b = g.tanh(x1).unwrap();
        e.forward(&mut g, &store, b).unwrap();
        assert_eq!(e.stats().plan_cache_hits, 0);

        // Same node count and signatures, but the second reads the first.
        let mut g = Graph::new();
        let x1 = g.input(x());
        let a = g.tanh(x1).unwrap();
        let b = g.tanh(a).unwrap();
        let got: Vec<f32> = e.forward(&mut g, &store, b).unwrap().to_vec().unwrap();
        assert_eq!(
            e.stats().plan_cache_hits,
            0,
            "{strategy:?}: reused a plan that does not fit"
        );
        let want: Vec<f32> = x()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.tanh().tanh())
            .collect();
        close(&got, &want, strategy);

        // The same wiring again does reuse its plan.
        let mut g = Graph::new();
        let x1 = g.input(x());
        let a = g.tanh(x1).unwrap();
        let b = g.tanh(a).unwrap();
        let again: Vec<f32> = e.forward(&mut g, &store, b).unwrap().to_vec().unwrap();
        assert_eq!(e.stats().plan_cache_hits, 1, "{strategy:?}");
        close(&again, &want, strategy);
    }
}
