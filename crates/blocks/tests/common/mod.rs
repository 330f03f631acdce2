//! Helpers of the blocks tests: parameters, runs under every strategy,
//! comparisons with tolerance.
#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{Param, ParamStore};
use sheaf_sched::Strategy;

/// The strategies every model must agree under.
pub const STRATEGIES: [Strategy; 3] = [Strategy::Sequential, Strategy::Depth, Strategy::Agenda];

/// A seeded generator for parameter initialisation.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// The values of a tensor as `f32`.
pub fn vals(t: &sheaf_tensor::Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Asserts two float lists agree to `1e-5` relative / absolute.
#[track_caller]
pub fn assert_close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let tol = 1e-5 * (1.0 + x.abs().max(y.abs()));
        assert!((x - y).abs() <= tol, "{what}[{i}]: {x} vs {y}");
    }
}

/// Every parameter's accumulated gradient, then zeroes them.
pub fn take_grads(store: &mut ParamStore, params: &[Param]) -> Vec<Vec<f32>> {
    let g = params
        .iter()
        .map(|p| vals(&store.grad(p).unwrap()))
        .collect();
    store.zero_grads().unwrap();
    g
}
