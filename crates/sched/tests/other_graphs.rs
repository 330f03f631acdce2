//! An executor continuing a graph it did not start: the nodes another
//! executor (or Sequential) evaluated are read from the graph, never
//! through the homes of the executor's previous graph (which silently
//! gave that graph's values); backward on a graph whose forward the
//! executor did not run is an error.

mod common;

use common::{tanh_chains, tensor, Lcg};
use sheaf_autodiff::{Expr, Graph, ParamStore, Sequential};
use sheaf_sched::{Executor, SchedError, Strategy};

const D: usize = 4;

/// A second half reading every chain.
fn second_half(g: &mut Graph, ts: &[Expr]) -> Expr {
    let parts: Vec<Expr> = ts
        .iter()
        .map(|&t| {
            let s = g.sigmoid(t).unwrap();
            g.sum_elems(s).unwrap()
        })
        .collect();
    g.sum(&parts).unwrap()
}

#[test]
fn continuing_a_graph_started_elsewhere_reads_its_values() {
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut store = ParamStore::new();
        let w = store.add("w", tensor(&mut Lcg(5), &[D], 0.9)).unwrap();
        let mut exec = Executor::new(strategy);

        // Graph A, run whole by `exec`: its homes cover more nodes than B's
        // first half, with other values.
        let mut a = Graph::new();
        let ts = tanh_chains(&mut a, &w, 8, &mut Lcg(1));
        let la = second_half(&mut a, &ts);
        exec.forward(&mut a, &store, la).unwrap();

        // Graph B: first half by Sequential, the rest by `exec`.
        let mut b = Graph::new();
        let ts = tanh_chains(&mut b, &w, 5, &mut Lcg(2));
        Sequential::new()
            .forward(&mut b, &store, *ts.last().unwrap())
            .unwrap();
        let lb = second_half(&mut b, &ts);
        let got = exec
            .forward(&mut b, &store, lb)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();

        let mut c = Graph::new();
        let ts = tanh_chains(&mut c, &w, 5, &mut Lcg(2));
        let lc = second_half(&mut c, &ts);
        let want = Sequential::new()
            .forward(&mut c, &store, lc)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert!(
            (got[0] - want[0]).abs() <= 1e-5 * want[0].abs().max(1.0),
            "{strategy:?}: {got:?} vs {want:?}"
        );

        // Backward on A, whose batches `exec` no longer holds.
        let e = exec.backward(&mut a, &store, la).unwrap_err();
        assert!(matches!(e, SchedError::OtherGraph), "{e}");
        assert!(e.to_string().contains("another graph"), "{e}");
    }
}
