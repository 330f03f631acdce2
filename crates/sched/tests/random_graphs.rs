//! Property: on random graphs mixing every built-in op, the batched executor
//! under `Depth` and `Agenda` computes the same value and gradient for every
//! node and the same gradient for every parameter as the unbatched
//! reference `sheaf_autodiff::Sequential`, within the tolerance documented in
//! `common/mod.rs` (|a - b| <= 1e-4 * (1 + max(|a|, |b|))).
//!
//! Each case builds several instances of one random program (an op list
//! holding every op at least once, in a random order, plus random extra
//! steps) over vectors of different sizes (2, 3 or 4), so some instances
//! batch together and others cannot. Instances of one size share their
//! parameters; instances other than the first skip random steps, so equal
//! ops sit at different depths (where Depth and Agenda plan differently).
//! Arguments are drawn at random from the instance's pool, repeats allowed
//! (`cmult(x, x)`, `tree_lstm_node(g, s, s)`). Dropout runs in training mode
//! with a per-case graph seed. Values stay where every op is defined: `log`
//! takes `sigmoid(..)` or `exp(..)`, `cdiv` divides by `1 + sigmoid(..)`,
//! and results of unbounded ops enter the pool through `tanh`. All instance
//! losses (the sum of each pool, every scalar op's result, every
//! `pick_neg_log_softmax`) are summed into one scalar.

mod common;

use common::{check_all, full, tensor, Lcg};
use proptest::prelude::*;
use sheaf_autodiff::{Expr, Graph, Param, ParamStore};
use sheaf_sched::{Executor, Strategy};

const OPS: usize = 40;
const DIMS: [usize; 3] = [2, 3, 4];
const VOCAB: usize = 6;

/// The parameters of one vector size `d`.
struct Params {
    v: Param,
    w: Param,
    w2: Param,
    b: Param,
    col: Param,
    emb: Param,
    w4: Param,
    u4: Param,
    b4: Param,
    w3: Param,
    u3: Param,
    b3: Param,
    u5: Param,
    b5: Param,
}

fn params(store: &mut ParamStore, rng: &mut Lcg, d: usize) -> Params {
    let emb = store
        .add_table(&format!("emb_{d}"), tensor(rng, &[VOCAB, d], 0.5))
        .unwrap();
    let mut add = |name: &str, shape: &[usize], scale: f32| {
        store
            .add(&format!("{name}_{d}"), tensor(rng, shape, scale))
            .unwrap()
    };
    Params {
        v: add("v", &[d], 0.5),
        w: add("w", &[d, d], 0.5),
        w2: add("w2", &[d, 2 * d], 0.4),
        b: add("b", &[d], 0.2),
        col: add("col", &[d, 1], 0.5),
        emb,
        w4: add("w4", &[4 * d, d], 0.5),
        u4: add("u4", &[4 * d, d], 0.5),
        b4: add("b4", &[4 * d], 0.2),
        w3: add("w3", &[3 * d, d], 0.5),
        u3: add("u3", &[3 * d, d], 0.5),
        b3: add("b3", &[3 * d], 0.2),
        u5: add("u5", &[5 * d, 2 * d], 0.4),
        b5: add("b5", &[5 * d], 0.2),
    }
}

fn model(store: &mut ParamStore, rng: &mut Lcg) -> Vec<Params> {
    DIMS.iter().map(|&d| params(store, rng, d)).collect()
}

/// One instance under construction: its size, its pools and its losses.
struct Instance<'a> {
    d: usize,
    p: &'a Params,
    rng: Lcg,
    /// Values `[d]`.
    pool: Vec<Expr>,
    /// Cell states `[2d]`.
    states: Vec<Expr>,
    /// Scalars `[1]`, each a term of the loss.
    scalars: Vec<Expr>,
}

impl Instance<'_> {
    fn arg(&mut self) -> Expr {
        let i = self.rng.below(self.pool.len() as u64) as usize;
        self.pool[i]
    }
    /// A second argument: a repeat of `first` one time in four.
    fn arg2(&mut self, first: Expr) -> Expr {
        if self.rng.chance(1, 4) {
            first
        } else {
            self.arg()
        }
    }
    fn state(&mut self) -> Expr {
        let i = self.rng.below(self.states.len() as u64) as usize;
        self.states[i]
    }
    fn squash(&mut self, g: &mut Graph, r: Expr) {
        let t = g.tanh(r).unwrap();
        self.pool.push(t);
    }
    /// A scalar `s`: a loss term, and `tanh(col * s)` into the pool
    /// (`matmul` of `[d, 1]` and `[1]`).
    fn scalar(&mut self, g: &mut Graph, s: Expr) {
        self.scalars.push(s);
        let col = g.param(&self.p.col);
        let v = g.matmul(col, s).unwrap();
        self.squash(g, v);
    }

    fn step(&mut self, g: &mut Graph, op: usize) {
        let d = self.d;
        let p = self.p;
        match op {
            // input
            0 => {
                let t = tensor(&mut self.rng, &[d], 1.0);
                let x = g.input(t);
                self.pool.push(x);
            }
            // param
            1 => {
                let v = g.param(&p.v);
                self.pool.push(v);
            }
            // lookup
            2 => {
                let emb = g.param(&p.emb);
                let w = self.rng.below(VOCAB as u64) as u32;
                let x = g.lookup(emb, w).unwrap();
                self.pool.push(x);
            }
            // pick: d picks of one vector, concatenated
            3 => {
                let x = self.arg();
                let picks: Vec<Expr> = (0..d)
                    .map(|_| g.pick(x, self.rng.below(d as u64) as u32).unwrap())
                    .collect();
                let c = g.concat(&picks).unwrap();
                self.pool.push(c);
            }
            // affine with two terms
            4 => {
                let (x, y) = (self.arg(), self.arg());
                let z = self.arg2(y);
                let yz = g.concat(&[y, z]).unwrap();
                let (b, w, w2) = (g.param(&p.b), g.param(&p.w), g.param(&p.w2));
                let r = g.affine(b, &[(w, x), (w2, yz)]).unwrap();
                self.squash(g, r);
            }
            // linear
            5 => {
                let x = self.arg();
                let w = g.param(&p.w);
                let r = g.linear(w, x).unwrap();
                self.squash(g, r);
            }
            // matmul: outer product [d, 1] x [1, d], then times a vector
            6 => {
                let x = self.arg();
                let y = self.arg2(x);
                let z = self.arg();
                let xc = g.reshape(x, [d, 1]).unwrap();
                let yr = g.reshape(y, [1, d]).unwrap();
                let m = g.matmul(xc, yr).unwrap();
                let r = g.matmul(m, z).unwrap();
                self.squash(g, r);
            }
            7 => {
                let x = self.arg();
                let y = self.arg2(x);
                let r = g.add(x, y).unwrap();
                self.squash(g, r);
            }
            8 => {
                let x = self.arg();
                let y = self.arg2(x);
                let r = g.sub(x, y).unwrap();
                self.squash(g, r);
            }
            9 => {
                let x = self.arg();
                let y = self.arg2(x);
                let r = g.cmult(x, y).unwrap();
                self.squash(g, r);
            }
            // cdiv by 1 + sigmoid(y), in (1, 2)
            10 => {
                let x = self.arg();
                let y = self.arg2(x);
                let one = g.input(full(1.0, &[d]));
                let s = g.sigmoid(y).unwrap();
                let den = g.add(one, s).unwrap();
                let r = g.cdiv(x, den).unwrap();
                self.pool.push(r);
            }
            11 => {
                let x = self.arg();
                let alpha = [0.5, -2.0, 3.0][self.rng.below(3) as usize];
                let r = g.scale(x, alpha).unwrap();
                self.squash(g, r);
            }
            12 => {
                let x = self.arg();
                let r = g.tanh(x).unwrap();
                self.pool.push(r);
            }
            13 => {
                let x = self.arg();
                let r = g.sigmoid(x).unwrap();
                self.pool.push(r);
            }
            14 => {
                let x = self.arg();
                let r = g.relu(x).unwrap();
                self.pool.push(r);
            }
            15 => {
                let x = self.arg();
                let r = g.exp(x).unwrap();
                self.squash(g, r);
            }
            // log of sigmoid(x) or of exp(x): always positive arguments
            16 => {
                let x = self.arg();
                let pos = if self.rng.chance(1, 2) {
                    g.sigmoid(x).unwrap()
                } else {
                    g.exp(x).unwrap()
                };
                let r = g.log(pos).unwrap();
                self.squash(g, r);
            }
            // reshape [d] -> [1, d] -> [d]
            17 => {
                let x = self.arg();
                let r = g.reshape(x, [1, d]).unwrap();
                let r = g.reshape(r, [d]).unwrap();
                self.pool.push(r);
            }
            // concat of three, then a random window of d
            18 => {
                let x = self.arg();
                let y = self.arg2(x);
                let z = self.arg();
                let c = g.concat(&[x, y, z]).unwrap();
                let s = self.rng.below(2 * d as u64 + 1) as usize;
                let r = g.slice(c, s, s + d).unwrap();
                self.pool.push(r);
            }
            // slices of two vectors, joined
            19 => {
                let x = self.arg();
                let y = self.arg();
                if d == 1 {
                    let r = g.slice(x, 0, 1).unwrap();
                    self.pool.push(r);
                } else {
                    let k = 1 + self.rng.below(d as u64 - 1) as usize;
                    let a = g.slice(x, 0, k).unwrap();
                    let b = g.slice(y, k, d).unwrap();
                    let r = g.concat(&[a, b]).unwrap();
                    self.pool.push(r);
                }
            }
            20 => {
                let x = self.arg();
                let y = self.arg2(x);
                let z = self.arg();
                let r = g.sum(&[x, y, z]).unwrap();
                self.squash(g, r);
            }
            21 => {
                let x = self.arg();
                let y = self.arg2(x);
                let r = g.mean(&[x, y]).unwrap();
                self.pool.push(r);
            }
            22 => {
                let x = self.arg();
                let s = g.sum_elems(x).unwrap();
                self.scalar(g, s);
            }
            23 => {
                let x = self.arg();
                let s = g.mean_elems(x).unwrap();
                self.scalar(g, s);
            }
            24 => {
                let x = self.arg();
                let y = self.arg2(x);
                let s = g.dot(x, y).unwrap();
                self.scalar(g, s);
            }
            25 => {
                let x = self.arg();
                let y = self.arg2(x);
                let s = g.squared_distance(x, y).unwrap();
                self.scalar(g, s);
            }
            26 => {
                let x = self.arg();
                let r = g.softmax(x).unwrap();
                self.pool.push(r);
            }
            27 => {
                let x = self.arg();
                let r = g.log_softmax(x).unwrap();
                self.squash(g, r);
            }
            28 => {
                let x = self.arg();
                let c = self.rng.below(d as u64) as u32;
                let s = g.pick_neg_log_softmax(x, c).unwrap();
                self.scalars.push(s);
            }
            29 => {
                let x = self.arg();
                let rate = [0.25, 0.5][self.rng.below(2) as usize];
                let r = g.dropout(x, rate).unwrap();
                self.pool.push(r);
            }
            // lstm_cell: gates W x + U y + b, previous state from the pool
            30 => {
                let x = self.arg();
                let y = self.arg2(x);
                let prev = self.state();
                let (b4, w4, u4) = (g.param(&p.b4), g.param(&p.w4), g.param(&p.u4));
                let gates = g.affine(b4, &[(w4, x), (u4, y)]).unwrap();
                let s = g.lstm_cell(gates, prev).unwrap();
                self.states.push(s);
                let h = g.cell_h(s).unwrap();
                self.pool.push(h);
            }
            31 => {
                let x = self.arg();
                let y = self.arg();
                let h = self.arg2(y);
                let (b3, w3, u3) = (g.param(&p.b3), g.param(&p.w3), g.param(&p.u3));
                let xw = g.affine(b3, &[(w3, x)]).unwrap();
                let hu = g.linear(u3, y).unwrap();
                let r = g.gru_cell(xw, hu, h).unwrap();
                self.pool.push(r);
            }
            32 => {
                let x = self.arg();
                let (b3, w3) = (g.param(&p.b3), g.param(&p.w3));
                let gates = g.affine(b3, &[(w3, x)]).unwrap();
                let s = g.tree_lstm_leaf(gates).unwrap();
                self.states.push(s);
                let c = g.cell_c(s).unwrap();
                self.squash(g, c);
            }
            // tree_lstm_node: children may be one state twice
            33 => {
                let x = self.arg();
                let y = self.arg2(x);
                let l = self.state();
                let r = if self.rng.chance(1, 4) {
                    l
                } else {
                    self.state()
                };
                let xy = g.concat(&[x, y]).unwrap();
                let (b5, u5) = (g.param(&p.b5), g.param(&p.u5));
                let gates = g.affine(b5, &[(u5, xy)]).unwrap();
                let s = g.tree_lstm_node(gates, l, r).unwrap();
                self.states.push(s);
                let h = g.cell_h(s).unwrap();
                self.pool.push(h);
            }
            34 => {
                let s = self.state();
                let c = g.cell_c(s).unwrap();
                self.squash(g, c);
            }
            35 => {
                let s = self.state();
                let h = g.cell_h(s).unwrap();
                self.pool.push(h);
            }
            // maximum of two values
            36 => {
                let x = self.arg();
                let y = self.arg2(x);
                let r = g.maximum(x, y).unwrap();
                self.pool.push(r);
            }
            // max over a list of three
            37 => {
                let (x, y, z) = (self.arg(), self.arg(), self.arg());
                let r = g.max(&[x, y, z]).unwrap();
                self.pool.push(r);
            }
            // broadcast a scalar (a dot product) back to a vector
            38 => {
                let (x, y) = (self.arg(), self.arg());
                let s = g.dot(x, y).unwrap();
                let r = g.broadcast(s, d).unwrap();
                self.squash(g, r);
            }
            // scale a vector by a per-instance scalar
            39 => {
                let (x, y) = (self.arg(), self.arg());
                let s = g.sum_elems(y).unwrap();
                let r = g.scale_by(x, s).unwrap();
                self.squash(g, r);
            }
            _ => unreachable!("op {op}"),
        }
    }
}

/// Builds every instance of `program` and returns the summed loss.
fn build(g: &mut Graph, model: &[Params], seed: u64, dims: &[usize], program: &[usize]) -> Expr {
    g.set_train(true);
    g.set_seed(seed);
    let mut losses = Vec::new();
    for (i, &di) in dims.iter().enumerate() {
        let d = DIMS[di];
        let mut rng = Lcg(seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let x0 = g.input(tensor(&mut rng, &[d], 1.0));
        let s0 = g.input(tensor(&mut rng, &[2 * d], 1.0));
        let mut inst = Instance {
            d,
            p: &model[di],
            rng,
            pool: vec![x0],
            states: vec![s0],
            scalars: Vec::new(),
        };
        for &op in program {
            // Instance 0 runs every step, so every op is in every graph.
            if i > 0 && inst.rng.chance(1, 5) {
                continue;
            }
            inst.step(g, op);
        }
        let total = g.sum(&inst.pool).unwrap();
        losses.push(g.sum_elems(total).unwrap());
        losses.extend(inst.scalars);
    }
    g.sum(&losses).unwrap()
}

fn program(seed: u64, extra: &[usize]) -> Vec<usize> {
    let mut rng = Lcg(seed.wrapping_add(17));
    let mut ops: Vec<usize> = (0..OPS).collect();
    for i in (1..ops.len()).rev() {
        ops.swap(i, rng.below(i as u64 + 1) as usize);
    }
    ops.extend_from_slice(extra);
    ops
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn batched_equals_sequential_on_random_graphs(
        seed in any::<u64>(),
        dims in prop::collection::vec(0..DIMS.len(), 2..=5),
        extra in prop::collection::vec(0..OPS, 0..24),
    ) {
        let mut store = ParamStore::new();
        let m = model(&mut store, &mut Lcg(seed.rotate_left(7)));
        let prog = program(seed, &extra);
        check_all(
            &mut store,
            |g| build(g, &m, seed, &dims, &prog),
            "random graph",
        );
        // Not vacuous: the batched runs did batch.
        for st in [Strategy::Depth, Strategy::Agenda] {
            let mut g = Graph::new();
            let loss = build(&mut g, &m, seed, &dims, &prog);
            let mut e = Executor::new(st);
            e.forward(&mut g, &store, loss).unwrap();
            prop_assert!(e.stats().batches < e.stats().nodes, "{st:?}: {}", e.stats());
        }
    }
}

/// Every op index is used by `step` (a guard against a silently unused op).
#[test]
fn program_covers_every_op() {
    let p = program(3, &[]);
    let mut seen = [false; OPS];
    for op in p {
        seen[op] = true;
    }
    assert!(seen.iter().all(|&s| s));
    let mut store = ParamStore::new();
    let m = model(&mut store, &mut Lcg(1));
    let mut g = Graph::new();
    build(&mut g, &m, 3, &[0, 1, 2, 2], &program(3, &[]));
    let mut names: Vec<&str> = (0..g.len())
        .map(|i| g.op_name(sheaf_autodiff::NodeId::from_index(i)))
        .collect();
    names.sort_unstable();
    names.dedup();
    for op in [
        "input",
        "parameter",
        "lookup",
        "pick",
        "affine",
        "linear",
        "matmul",
        "add",
        "sub",
        "cmult",
        "cdiv",
        "scale",
        "tanh",
        "sigmoid",
        "relu",
        "exp",
        "log",
        "reshape",
        "concat",
        "slice",
        "sum",
        "mean",
        "sum_elems",
        "mean_elems",
        "dot",
        "squared_distance",
        "softmax",
        "log_softmax",
        "pick_neg_log_softmax",
        "dropout",
        "lstm_cell",
        "gru_cell",
        "tree_lstm_leaf",
        "tree_lstm_node",
        "cell_c",
        "cell_h",
    ] {
        assert!(names.contains(&op), "{op} is missing from the graph");
    }
}
