//! Helpers of the layer tests: data, parameter values, f64 references.
#![allow(dead_code)]

use sheaf_autodiff::{Expr, Graph, NodeId, Param, ParamStore, Sequential};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

pub fn vals(store: &ParamStore, p: &Param) -> Vec<f64> {
    let v = store.value(p).unwrap().to_vec::<f32>().unwrap();
    v.into_iter().map(f64::from).collect()
}

pub fn input(g: &mut Graph, v: &[f32]) -> Expr {
    g.input(Tensor::from_vec(v.to_vec(), [v.len()]).unwrap())
}

/// `n` values in [-1, 1) from a small LCG, seeded.
pub fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Gives every parameter nonzero values (biases start at zero).
pub fn randomize(store: &mut ParamStore) {
    for (k, p) in store.params().iter().enumerate() {
        let n = p.shape().numel().unwrap();
        *store.value_mut(p).unwrap() =
            Tensor::from_vec(data(n, 100 + k as u64), p.shape()).unwrap();
    }
}

/// `m [rows, cols] * x` in f64.
pub fn mv(m: &[f64], x: &[f64]) -> Vec<f64> {
    m.chunks(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

pub fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

pub fn close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

pub fn run(g: &mut Graph, store: &ParamStore, e: Expr) -> Vec<f32> {
    Sequential::new()
        .forward(g, store, e)
        .unwrap()
        .to_vec()
        .unwrap()
}

/// Every node's op name and attribute, in order.
pub fn ops(g: &Graph) -> Vec<(&'static str, u64)> {
    (0..g.len())
        .map(|i| {
            let n = NodeId::from_index(i);
            (g.op_name(n), g.node(n).attr())
        })
        .collect()
}

pub fn count(g: &Graph, name: &str) -> usize {
    ops(g).iter().filter(|(n, _)| *n == name).count()
}

/// Runs the sum of `outs` under `exec` (None: Sequential); their values and
/// every parameter's gradient.
pub fn run_all(
    g: &mut Graph,
    store: &mut ParamStore,
    outs: &[Expr],
    exec: Option<Strategy>,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    store.zero_grads().unwrap();
    let sums: Vec<Expr> = outs.iter().map(|&o| g.sum_elems(o).unwrap()).collect();
    let loss = g.sum(&sums).unwrap();
    match exec {
        None => Sequential::new().backward(g, store, loss).unwrap(),
        Some(s) => {
            let mut x = Executor::new(s);
            x.forward(g, store, loss).unwrap();
            x.backward(g, store, loss).unwrap();
        }
    }
    let values = outs.iter().map(|&o| g.value(o).unwrap().to_vec().unwrap());
    let params = store.params();
    let grads = params
        .iter()
        .map(|p| store.grad(p).unwrap().to_vec().unwrap());
    (values.collect(), grads.collect())
}
