//! A Tree-LSTM over random binary trees: Depth and Agenda equal Sequential
//! (values and gradients), and run the internal cell in max-height batches.

use rand_free::Lcg;
use sheaf_autodiff::{Expr, Graph, Optimizer, Param, ParamStore, Sequential};
use sheaf_kernels_cpu::{CpuKernels, Isa};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::{Adagrad, Device, Sgd, Tensor};

mod common;

mod rand_free {
    /// A tiny deterministic generator, so the test needs no RNG crate.
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
        pub fn unit(&mut self) -> f32 {
            (self.next() % 20001) as f32 / 10000.0 - 1.0
        }
    }
}

enum Tree {
    Leaf(u32),
    Node(Box<Tree>, Box<Tree>),
}

fn random_tree(rng: &mut Lcg, leaves: usize, vocab: u64) -> Tree {
    if leaves == 1 {
        return Tree::Leaf(rng.below(vocab) as u32);
    }
    let left = 1 + rng.below(leaves as u64 - 1) as usize;
    Tree::Node(
        Box::new(random_tree(rng, left, vocab)),
        Box::new(random_tree(rng, leaves - left, vocab)),
    )
}

fn height(t: &Tree) -> usize {
    match t {
        Tree::Leaf(_) => 0,
        Tree::Node(l, r) => 1 + height(l).max(height(r)),
    }
}

struct Model {
    emb: Param,
    w_leaf: Param,
    b_leaf: Param,
    u: Param,
    b_int: Param,
    w_out: Param,
    b_out: Param,
}

fn tensor(rng: &mut Lcg, shape: &[usize], scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n).map(|_| rng.unit() * scale).collect::<Vec<_>>(),
        sheaf_tensor::Shape::new(shape).unwrap(),
    )
    .unwrap()
}

fn model(store: &mut ParamStore, rng: &mut Lcg, vocab: usize, e: usize, h: usize) -> Model {
    Model {
        emb: store
            .add_table("emb", tensor(rng, &[vocab, e], 0.5))
            .unwrap(),
        w_leaf: store.add("w_leaf", tensor(rng, &[3 * h, e], 0.3)).unwrap(),
        b_leaf: store.add("b_leaf", tensor(rng, &[3 * h], 0.1)).unwrap(),
        u: store.add("u", tensor(rng, &[5 * h, 2 * h], 0.3)).unwrap(),
        b_int: store.add("b_int", tensor(rng, &[5 * h], 0.1)).unwrap(),
        w_out: store.add("w_out", tensor(rng, &[5, h], 0.3)).unwrap(),
        b_out: store.add("b_out", tensor(rng, &[5], 0.1)).unwrap(),
    }
}

/// Builds one tree; returns its state and pushes a loss per node.
fn build(g: &mut Graph, m: &Model, t: &Tree, label: u32, losses: &mut Vec<Expr>) -> Expr {
    build_rd(g, m, t, label, losses, 0.0)
}

/// [`build`] with recurrent dropout of rate `p` in every cell.
fn build_rd(
    g: &mut Graph,
    m: &Model,
    t: &Tree,
    label: u32,
    losses: &mut Vec<Expr>,
    p: f32,
) -> Expr {
    let state = match t {
        Tree::Leaf(w) => {
            let (emb, wl, bl) = (g.param(&m.emb), g.param(&m.w_leaf), g.param(&m.b_leaf));
            let x = g.lookup(emb, *w).unwrap();
            let gates = g.affine(bl, &[(wl, x)]).unwrap();
            g.tree_lstm_leaf_rd(gates, p).unwrap()
        }
        Tree::Node(l, r) => {
            let sl = build_rd(g, m, l, (label + 1) % 5, losses, p);
            let sr = build_rd(g, m, r, (label + 2) % 5, losses, p);
            let (hl, hr) = (g.cell_h(sl).unwrap(), g.cell_h(sr).unwrap());
            let hh = g.concat(&[hl, hr]).unwrap();
            let (u, bi) = (g.param(&m.u), g.param(&m.b_int));
            let gates = g.affine(bi, &[(u, hh)]).unwrap();
            g.tree_lstm_node_rd(gates, sl, sr, p).unwrap()
        }
    };
    let h = g.cell_h(state).unwrap();
    let (wo, bo) = (g.param(&m.w_out), g.param(&m.b_out));
    let logits = g.affine(bo, &[(wo, h)]).unwrap();
    losses.push(g.pick_neg_log_softmax(logits, label).unwrap());
    state
}

/// Every test first fixes the GEMM crossovers (`SHEAF_GEMM_CROSSOVER=
/// fixed`, under which the SIMD kernels always pack a weight), so that
/// the packed products run whatever a timing on a busy machine would
/// decide. The `Once` sets it before any test reads it.
fn fixed_crossovers() {
    static SET: std::sync::Once = std::sync::Once::new();
    SET.call_once(|| std::env::set_var("SHEAF_GEMM_CROSSOVER", "fixed"));
}

fn close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-4 * (1.0 + x.abs().max(y.abs())),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

#[test]
fn batched_tree_lstm_equals_sequential() {
    fixed_crossovers();
    batched_equals_sequential(0.0);
}

/// With recurrent dropout every node draws its mask from its own seed, so
/// the batched executors still compute what Sequential does.
#[test]
fn batched_tree_lstm_with_recurrent_dropout_equals_sequential() {
    fixed_crossovers();
    batched_equals_sequential(0.3);
}

/// Values, parameter gradients, states and their gradients of a batch of
/// random trees (recurrent dropout rate `p`, training mode, seed 5) under
/// Depth and Agenda equal Sequential's.
fn batched_equals_sequential(p: f32) {
    let mut rng = Lcg(7);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng, 50, 12, 7);
    let trees: Vec<Tree> = (0..12)
        .map(|i| random_tree(&mut rng, 1 + i * 3 % 17, 50))
        .collect();
    let run = |strategy: Option<Strategy>, store: &mut ParamStore| {
        store.zero_grads().unwrap();
        let mut g = Graph::new();
        g.set_seed(5);
        let mut losses = Vec::new();
        let mut states = Vec::new();
        for (i, t) in trees.iter().enumerate() {
            states.push(build_rd(&mut g, &m, t, i as u32 % 5, &mut losses, p));
        }
        let loss = g.sum(&losses).unwrap();
        let values: Vec<f32> = match strategy {
            None => {
                let s = Sequential::new();
                s.backward(&mut g, store, loss).unwrap();
                s.forward(&mut g, store, loss).unwrap().to_vec().unwrap()
            }
            Some(st) => {
                let mut e = Executor::new(st);
                e.forward(&mut g, store, loss).unwrap();
                e.backward(&mut g, store, loss).unwrap();
                g.value(loss).unwrap().to_vec().unwrap()
            }
        };
        let mut grads = Vec::new();
        for p in store.params() {
            grads.push(store.grad(&p).unwrap().to_vec::<f32>().unwrap());
        }
        let mut state_vals = Vec::new();
        for s in &states {
            state_vals.extend(g.value(*s).unwrap().to_vec::<f32>().unwrap());
            state_vals.extend(g.grad(*s).unwrap().to_vec::<f32>().unwrap());
        }
        (values, grads, state_vals)
    };
    let reference = run(None, &mut store);
    for st in [Strategy::Depth, Strategy::Agenda] {
        let got = run(Some(st), &mut store);
        close(&got.0, &reference.0, &format!("{st:?} loss"));
        for (i, (a, b)) in got.1.iter().zip(&reference.1).enumerate() {
            close(a, b, &format!("{st:?} grad of param {i}"));
        }
        close(
            &got.2,
            &reference.2,
            &format!("{st:?} states and their grads"),
        );
    }
}

/// Training steps update the weights in place between steps; products
/// with more than 16 rows and inner and outer sizes above 16 read them
/// packed (`sheaf_tensor`'s `cpu/packed.rs`), a copy dropped by every
/// update. Five SGD steps batched follow five steps of Sequential (whose
/// one-row products never pack), loss by loss and in the final weights: a
/// packed copy outliving an update would run a step on old weights.
#[test]
fn training_steps_with_packed_weights_follow_sequential() {
    fixed_crossovers();
    let train = |strategy: Option<Strategy>| -> (Vec<f32>, Vec<Vec<f32>>) {
        let mut rng = Lcg(23);
        let mut store = ParamStore::new();
        let m = model(&mut store, &mut rng, 60, 24, 20);
        let trees: Vec<Tree> = (0..10)
            .map(|i| random_tree(&mut rng, 6 + i * 7 % 11, 60))
            .collect();
        let mut opt = Optimizer::sgd(Sgd {
            lr: 0.02,
            momentum: 0.0,
            weight_decay: 0.0,
        });
        let mut exec = strategy.map(Executor::new);
        let mut losses_per_step = Vec::new();
        for _ in 0..5 {
            let mut g = Graph::new();
            let mut losses = Vec::new();
            for (i, t) in trees.iter().enumerate() {
                build(&mut g, &m, t, i as u32 % 5, &mut losses);
            }
            let loss = g.sum(&losses).unwrap();
            match exec.as_mut() {
                Some(e) => {
                    e.forward(&mut g, &store, loss).unwrap();
                    e.backward(&mut g, &store, loss).unwrap();
                }
                None => Sequential::new().backward(&mut g, &store, loss).unwrap(),
            }
            losses_per_step.push(g.value(loss).unwrap().to_vec::<f32>().unwrap()[0]);
            drop(g);
            if strategy.is_some() {
                // The leaf batch (111 rows) packed its weight (with fixed
                // crossovers the SIMD kernels always do).
                let packs = CpuKernels::new().isa() != Isa::Scalar;
                let held = store.value(&m.w_leaf).unwrap().packed_bytes();
                assert_eq!(held > 0, packs, "{held} bytes packed");
            }
            opt.step(&mut store).unwrap();
        }
        let weights = store
            .params()
            .iter()
            .map(|p| store.value(p).unwrap().to_vec::<f32>().unwrap())
            .collect();
        (losses_per_step, weights)
    };
    let reference = train(None);
    assert!(
        reference.0[4] < reference.0[0] * 0.998,
        "the steps train: {:?}",
        reference.0
    );
    for st in [Strategy::Depth, Strategy::Agenda] {
        let got = train(Some(st));
        close(&got.0, &reference.0, &format!("{st:?} losses"));
        for (i, (a, b)) in got.1.iter().zip(&reference.1).enumerate() {
            close(a, b, &format!("{st:?} weights of param {i} after 5 steps"));
        }
    }
}

#[test]
fn depth_runs_internal_cells_in_max_height_batches() {
    fixed_crossovers();
    let mut rng = Lcg(11);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng, 30, 6, 4);
    let trees: Vec<Tree> = (0..64).map(|_| random_tree(&mut rng, 128, 30)).collect();
    let max_h = trees.iter().map(height).max().unwrap();
    let mut g = Graph::new();
    let mut losses = Vec::new();
    for t in &trees {
        build(&mut g, &m, t, 1, &mut losses);
    }
    let loss = g.sum(&losses).unwrap();
    let mut e = Executor::new(Strategy::Depth);
    e.forward(&mut g, &store, loss).unwrap();
    let (batches, nodes) = e.stats().per_op["tree_lstm_node"];
    assert_eq!(nodes, 64 * 127);
    assert_eq!(batches, max_h, "one batch per height");
    let (leaf_batches, _) = e.stats().per_op["tree_lstm_leaf"];
    assert_eq!(leaf_batches, 1);
}

#[test]
fn output_layer_reads_states_in_place() {
    fixed_crossovers();
    let mut rng = Lcg(13);
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut rng, 30, 6, 4);
    let trees: Vec<Tree> = (0..24)
        .map(|i| random_tree(&mut rng, 2 + i * 5 % 23, 30))
        .collect();
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut g = Graph::new();
        let mut losses = Vec::new();
        for t in &trees {
            build(&mut g, &m, t, 1, &mut losses);
        }
        let loss = g.sum(&losses).unwrap();
        let mut e = Executor::new(strategy);
        e.forward(&mut g, &store, loss).unwrap();
        // Each `cell_h` batch mixes the nodes' own h (read by the output
        // layer) with their parents' reads of it; laid out by consumer, the
        // output layer's rows form one run, read in place, as are the
        // logits by the loss and the gates by the cells.
        let stats = e.stats();
        for op in ["affine", "pick_neg_log_softmax", "tree_lstm_leaf", "lookup"] {
            assert_eq!(
                stats.gathered_per_op.get(op).copied().unwrap_or(0),
                0,
                "{strategy:?}: {op} inputs were copied\n{stats}"
            );
        }
    }
}

/// On a GPU (skipped without one): 20 Adagrad steps of the Tree-LSTM with
/// recurrent dropout on the device follow the same steps on the CPU. Every
/// parameter agrees within 1e-3 relative after the 20 steps: one step
/// agrees to ~1e-6 (different reduction orders in cuBLAS and the CPU
/// kernels, different exp / tanh), and Adagrad's normalised updates keep
/// those differences from growing by more than a few times per step.
#[test]
fn twenty_training_steps_on_the_gpu_follow_the_cpu() {
    fixed_crossovers();
    let Some(gpu) = common::gpu() else { return };
    let train = |device: Device| -> Vec<Vec<f32>> {
        let mut rng = Lcg(11);
        let mut store = ParamStore::new();
        let m = model(&mut store, &mut rng, 40, 12, 8);
        let trees: Vec<Tree> = (0..16)
            .map(|i| random_tree(&mut rng, 1 + i * 5 % 13, 40))
            .collect();
        store.to_device(device).unwrap();
        let mut opt = Optimizer::adagrad(Adagrad {
            lr: 0.05,
            ..Adagrad::default()
        })
        .with_clip_norm(5.0);
        let mut exec = Executor::on(Strategy::Agenda, device).unwrap();
        for step in 0..20 {
            let mut g = Graph::new();
            g.set_seed(100 + step);
            let mut losses = Vec::new();
            for (i, t) in trees.iter().enumerate() {
                build_rd(&mut g, &m, t, i as u32 % 5, &mut losses, 0.25);
            }
            let loss = g.sum(&losses).unwrap();
            exec.forward(&mut g, &store, loss).unwrap();
            exec.backward(&mut g, &store, loss).unwrap();
            opt.step(&mut store).unwrap();
        }
        store
            .params()
            .iter()
            .map(|p| store.value(p).unwrap().to_vec::<f32>().unwrap())
            .collect()
    };
    let cpu = train(Device::Cpu);
    let dev = train(gpu);
    for (i, (a, b)) in dev.iter().zip(&cpu).enumerate() {
        assert_eq!(a.len(), b.len());
        for (j, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-3 * (1.0 + x.abs().max(y.abs())),
                "parameter {i}[{j}]: {x} on the GPU vs {y} on the CPU"
            );
        }
    }
}
