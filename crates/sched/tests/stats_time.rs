//! `PlanStats` splits a step's batch time into the ops' own calls, the
//! executor's data movement and its bookkeeping: each is counted, forward
//! and backward, and they add up to the batch time.

mod common;

use common::{tensor, Lcg};
use sheaf_autodiff::{Graph, ParamStore};
use sheaf_sched::{Executor, Strategy};

#[test]
fn op_calls_moves_and_bookkeeping_add_up_to_the_batch_time() {
    let mut store = ParamStore::new();
    let mut rng = Lcg(5);
    let w = store.add("w", tensor(&mut rng, &[8, 8], 0.5)).unwrap();
    let b = store.add("b", tensor(&mut rng, &[8], 0.5)).unwrap();
    let mut g = Graph::new();
    let (wn, bn) = (g.param(&w), g.param(&b));
    let mut terms = Vec::new();
    let mut lasts = Vec::new();
    for _ in 0..20 {
        let mut h = g.input(tensor(&mut rng, &[8], 1.0));
        for _ in 0..3 {
            let a = g.affine(bn, &[(wn, h)]).unwrap();
            h = g.tanh(a).unwrap();
        }
        terms.push(g.sum_elems(h).unwrap());
        lasts.push(h);
    }
    // Each instance's last value times the next one's: a batch whose
    // second argument's rows sit out of order, so it is gathered (and its
    // gradient scattered back).
    for i in 0..lasts.len() {
        let next = lasts[(i + 1) % lasts.len()];
        let m = g.cmult(lasts[i], next).unwrap();
        terms.push(g.sum_elems(m).unwrap());
    }
    let loss = g.sum(&terms).unwrap();
    let mut e = Executor::new(Strategy::Agenda);
    e.forward(&mut g, &store, loss).unwrap();
    let after_forward = e.stats().op_calls;
    assert!(
        after_forward > std::time::Duration::ZERO,
        "forward op time not counted"
    );
    e.backward(&mut g, &store, loss).unwrap();
    let s = e.stats();
    assert!(s.op_calls > after_forward, "backward op time not counted");
    assert!(
        s.op_calls <= s.kernels,
        "{:?} in the ops of {:?}",
        s.op_calls,
        s.kernels
    );
    assert!(
        s.moves > std::time::Duration::ZERO,
        "gathers not counted:\n{s}"
    );
    assert!(s.gathered_bytes > 0, "{s}");
    assert_eq!(s.bookkeeping() + s.op_calls + s.moves, s.kernels, "{s}");
}
