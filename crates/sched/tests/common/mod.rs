//! Shared helpers of the scheduler's equality tests: a tiny deterministic
//! generator, random tensors, and a snapshot of everything a run computed
//! (the value and gradient of every node, the gradient of every parameter)
//! compared within one documented tolerance.
//!
//! TOLERANCE. Batched and unbatched runs execute the same formulas, but not
//! in the same floating-point order: a batch runs one matrix product over
//! all its rows (a blocked gemm) where the reference runs one gemv per node,
//! and gradients reaching a node or a parameter from several consumers are
//! summed in batch order rather than node order. f32 addition is not
//! associative, so results differ by a few ulps per reduction (eps = 1.2e-7;
//! the longest reductions here are a few hundred terms). We therefore accept
//! `|a - b| <= 1e-4 * (1 + max(|a|, |b|))`: relative 1e-4 for values of
//! magnitude above 1 (about 800 ulps, far above rounding noise yet far below
//! any real bug such as a wrong row, a dropped or doubled gradient
//! contribution, or a wrong mask, which change results at the 1e-1 scale),
//! absolute 1e-4 near zero, where gradients that cancel (sums of terms of
//! opposite sign) have no meaningful relative error.
#![allow(dead_code)]

use sheaf_autodiff::exec::GraphExec;
use sheaf_autodiff::{Expr, Graph, NodeId, NodeKind, Param, ParamStore, Sequential};
use sheaf_sched::{Executor, SchedError, Strategy};
use sheaf_tensor::{Device, Shape, Tensor};

/// Relative (and, near zero, absolute) tolerance; see the module docs.
pub const TOL: f32 = 1e-4;

/// A tiny deterministic generator, so tests need no RNG crate.
#[derive(Debug, Clone)]
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [-1, 1].
    pub fn unit(&mut self) -> f32 {
        (self.next() % 20001) as f32 / 10000.0 - 1.0
    }
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// A tensor of `shape` with elements uniform in `[-scale, scale]`.
pub fn tensor(rng: &mut Lcg, shape: &[usize], scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n).map(|_| rng.unit() * scale).collect::<Vec<_>>(),
        Shape::new(shape).unwrap(),
    )
    .unwrap()
}

/// A tensor of `shape` with every element `v`.
pub fn full(v: f32, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(vec![v; n], Shape::new(shape).unwrap()).unwrap()
}

/// Which executor runs a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// `sheaf_autodiff::Sequential`, the reference.
    Reference,
    /// `sheaf_sched::Executor` with a strategy.
    Batched(Strategy),
    /// On a device (the store moved there and back): the batching
    /// executor with a strategy, or `Sequential` for `None`.
    Device(Option<Strategy>, Device),
}

/// The CUDA device the GPU tests run on, or `None` (and why, printed) where
/// this build or machine has none: the tests then pass without running,
/// except under `SHEAF_REQUIRE_GPU=1`, where they fail.
pub fn gpu() -> Option<Device> {
    let d = Device::Cuda(0);
    match d.check_available() {
        Ok(()) => Some(d),
        Err(e) if sheaf_tensor::gpu_required() => {
            panic!(
                "{}=1, but {d} did not open: {e}",
                sheaf_tensor::REQUIRE_GPU_VAR
            )
        }
        Err(e) => {
            eprintln!("skipping the GPU part: {e}");
            None
        }
    }
}

impl Run {
    pub const BATCHED: [Run; 2] = [
        Run::Batched(Strategy::Depth),
        Run::Batched(Strategy::Agenda),
    ];
}

/// Everything one run computed.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Value of every node, in node order.
    pub values: Vec<Vec<f32>>,
    /// Gradient of every node; a node the loss does not reach (no gradient
    /// stored) reads as zeros of its size, which is its gradient.
    pub grads: Vec<Vec<f32>>,
    /// Gradient of every parameter of the store, in store order.
    pub params: Vec<Vec<f32>>,
}

/// Reads every node's value and gradient and every parameter's gradient.
pub fn snapshot(g: &Graph, store: &ParamStore) -> Snapshot {
    let mut values = Vec::with_capacity(g.len());
    let mut grads = Vec::with_capacity(g.len());
    for i in 0..g.len() {
        let n = NodeId::from_index(i);
        // Graphs let go of parameter values after backward: the store's.
        let v = match g.node(n).kind() {
            NodeKind::Param(p) => store.value_of(p).ok(),
            _ => g.value_of(n),
        };
        let v = v.unwrap_or_else(|| panic!("node {i} ({}) has no value", g.op_name(n)));
        values.push(v.to_vec::<f32>().unwrap());
        let size = g.node(n).shape().numel().unwrap();
        grads.push(match g.grad_of(n) {
            Some(t) => t.to_vec::<f32>().unwrap(),
            None => vec![0.0; size],
        });
    }
    let params = store
        .params()
        .iter()
        .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
        .collect();
    Snapshot {
        values,
        grads,
        params,
    }
}

/// Zeroes the store's gradients, runs forward then backward from `loss`
/// with `run`, and snapshots the result.
pub fn run(g: &mut Graph, store: &mut ParamStore, loss: Expr, run: Run) -> Snapshot {
    store.zero_grads().unwrap();
    match run {
        Run::Reference => {
            let s = Sequential::new();
            s.forward(g, store, loss).unwrap();
            s.backward(g, store, loss).unwrap();
        }
        Run::Batched(st) => {
            let mut e = Executor::new(st);
            e.forward(g, store, loss).unwrap();
            e.backward(g, store, loss).unwrap();
        }
        Run::Device(st, device) => {
            store.to_device(device).unwrap();
            store.zero_grads().unwrap();
            match st {
                None => {
                    let s = Sequential::on(device).unwrap();
                    s.forward(g, store, loss).unwrap();
                    s.backward(g, store, loss).unwrap();
                }
                Some(st) => {
                    let mut e = Executor::on(st, device).unwrap();
                    e.forward(g, store, loss).unwrap();
                    e.backward(g, store, loss).unwrap();
                }
            }
            let snap = snapshot(g, store);
            store.to_device(Device::Cpu).unwrap();
            return snap;
        }
    }
    snapshot(g, store)
}

/// Whether two numbers agree within [`TOL`].
pub fn near(x: f32, y: f32) -> bool {
    (x - y).abs() <= TOL * (1.0 + x.abs().max(y.abs()))
}

/// Asserts two slices agree elementwise within [`TOL`].
pub fn assert_close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(near(*x, *y), "{what}[{i}]: {x} vs {y} (reference)");
    }
}

/// Asserts two slices agree elementwise within a relative `tol` (the
/// GPU's transcendental functions differ from the CPU's by a few ulp).
pub fn assert_close_within(what: &str, a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

/// The loss `build` gives and every gradient of `params` (on the host),
/// run with `exec` (None: Sequential), gradients zeroed first.
pub fn loss_and_grads(
    store: &mut ParamStore,
    params: &[Param],
    exec: Option<&mut Executor>,
    build: impl Fn(&mut Graph) -> sheaf_autodiff::Result<Expr>,
) -> (f32, Vec<Vec<f32>>) {
    store.zero_grads().unwrap();
    let mut g = Graph::new();
    let loss = build(&mut g).unwrap();
    let value = match exec {
        None => {
            let ex = Sequential::new();
            let v = ex.forward(&mut g, store, loss).unwrap();
            ex.backward(&mut g, store, loss).unwrap();
            v
        }
        Some(ex) => {
            let v = ex.forward(&mut g, store, loss).unwrap();
            ex.backward(&mut g, store, loss).unwrap();
            v
        }
    };
    let host = |t: &Tensor| t.to_device(Device::Cpu).unwrap();
    let grads = params
        .iter()
        .map(|p| host(&store.grad(p).unwrap()).to_vec::<f32>().unwrap())
        .collect();
    (host(&value).item::<f32>().unwrap(), grads)
}

/// Sequential, Depth, Agenda and Auto (twice each: Auto times both
/// candidates first) give `want`'s loss and gradients for `build`'s graph.
pub fn every_executor_matches(
    store: &mut ParamStore,
    params: &[Param],
    (want, want_g): (f32, &[Vec<f32>]),
    build: impl Fn(&mut Graph) -> sheaf_autodiff::Result<Expr>,
) {
    let mut execs: Vec<Option<Executor>> = vec![None];
    for s in [Strategy::Depth, Strategy::Agenda, Strategy::Auto] {
        execs.push(Some(Executor::new(s)));
    }
    for mut ex in execs {
        let what = ex
            .as_ref()
            .map_or("Sequential".into(), |e| format!("{:?}", e.strategy()));
        for round in 0..2 {
            let (v, grads) = loss_and_grads(store, params, ex.as_mut(), &build);
            assert_close_within(&format!("{what} round {round} loss"), &[v], &[want], 1e-5);
            for (k, (a, b)) in grads.iter().zip(want_g).enumerate() {
                assert_close_within(&format!("{what} round {round} gradient {k}"), a, b, 1e-5);
            }
        }
    }
}

/// Asserts two snapshots agree: every node value and gradient, every
/// parameter gradient. `g` (either graph) names the ops in messages.
pub fn assert_same(got: &Snapshot, reference: &Snapshot, g: &Graph, what: &str) {
    assert_eq!(
        got.values.len(),
        reference.values.len(),
        "{what}: node count"
    );
    assert_eq!(
        got.params.len(),
        reference.params.len(),
        "{what}: param count"
    );
    for i in 0..got.values.len() {
        let op = g.op_name(NodeId::from_index(i));
        assert_close(
            &got.values[i],
            &reference.values[i],
            &format!("{what}: value of node {i} ({op})"),
        );
        assert_close(
            &got.grads[i],
            &reference.grads[i],
            &format!("{what}: gradient of node {i} ({op})"),
        );
    }
    for (i, (a, b)) in got.params.iter().zip(&reference.params).enumerate() {
        assert_close(a, b, &format!("{what}: gradient of parameter {i}"));
    }
}

/// Builds a fresh graph with `build` for the CPU reference and for each
/// run of `runs`, runs forward and backward, and asserts all agree.
pub fn check_runs<F>(store: &mut ParamStore, build: F, runs: &[Run], what: &str)
where
    F: Fn(&mut Graph) -> Expr,
{
    let mut g = Graph::new();
    let loss = build(&mut g);
    let reference = run(&mut g, store, loss, Run::Reference);
    for &r in runs {
        let mut g2 = Graph::new();
        let loss = build(&mut g2);
        let got = run(&mut g2, store, loss, r);
        assert_same(&got, &reference, &g2, &format!("{what} {r:?}"));
    }
}

/// Builds a fresh graph with `build` for the reference and for each batched
/// strategy, runs forward and backward, and asserts all agree. Returns the
/// reference snapshot.
pub fn check_all<F>(store: &mut ParamStore, build: F, what: &str) -> Snapshot
where
    F: Fn(&mut Graph) -> Expr,
{
    let mut g = Graph::new();
    let loss = build(&mut g);
    let reference = run(&mut g, store, loss, Run::Reference);
    for r in Run::BATCHED {
        let mut g2 = Graph::new();
        let loss = build(&mut g2);
        assert_eq!(g2.len(), g.len(), "{what}: the build is not deterministic");
        let got = run(&mut g2, store, loss, r);
        assert_same(&got, &reference, &g2, &format!("{what} {r:?}"));
    }
    for r in Run::BATCHED {
        let Run::Batched(strategy) = r else { continue };
        check_inference(store, &build, strategy, &reference, what);
    }
    reference
}

/// Runs a fresh graph's forward in inference mode: every node's value
/// equals the reference's, and backward is refused.
pub fn check_inference<F>(
    store: &ParamStore,
    build: F,
    strategy: Strategy,
    reference: &Snapshot,
    what: &str,
) where
    F: Fn(&mut Graph) -> Expr,
{
    let mut g = Graph::new();
    let loss = build(&mut g);
    let mut exec = Executor::new(strategy);
    exec.set_inference(true);
    exec.forward(&mut g, store, loss).unwrap();
    for (i, want) in reference.values.iter().enumerate() {
        let n = NodeId::from_index(i);
        let v = match g.node(n).kind() {
            NodeKind::Param(p) => store.value_of(p).ok(),
            _ => g.value_of(n),
        };
        let v = v.unwrap_or_else(|| panic!("{what}: node {i} has no value in inference mode"));
        let what = format!("{what} {strategy:?} inference, node {i} ({})", g.op_name(n));
        assert_close(&v.to_vec::<f32>().unwrap(), want, &what);
    }
    let refused = exec.backward(&mut g, store, loss);
    assert!(
        matches!(refused, Err(SchedError::Inference)),
        "{what}: backward after an inference forward gave {refused:?}"
    );
}

/// `n` chains `tanh(w * x_i)` on random `[w's width]` inputs: a graph's
/// first half, for tests that run it apart from the rest.
pub fn tanh_chains(g: &mut Graph, w: &Param, n: usize, rng: &mut Lcg) -> Vec<Expr> {
    let width = w.shape().dims()[0];
    let w = g.param(w);
    (0..n)
        .map(|_| {
            let x = g.input(tensor(rng, &[width], 1.0));
            let a = g.cmult(x, w).unwrap();
            g.tanh(a).unwrap()
        })
        .collect()
}
