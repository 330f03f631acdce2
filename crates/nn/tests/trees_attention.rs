//! The child-sum and N-ary Tree-LSTMs and attention pooling against their
//! equations computed here in f64 (within 1e-5: the CPU's sigmoid, tanh
//! and exp approximations), batched against sequential (within
//! 1e-4 (1 + |x|)), and finite-difference gradient checks.

use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::{Expr, Graph, GraphError, Param, ParamStore, Sequential};
use sheaf_nn::prelude::*;
use sheaf_sched::{Executor, Strategy};

mod common;
use common::*;

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// `c = σ(i) tanh(u) + sum σ(f_k) c_k`, `h = σ(o) tanh(c)`: `[c | h]`.
fn state(i: &[f64], o: &[f64], u: &[f64], forgets: &[(Vec<f64>, Vec<f64>)]) -> Vec<f64> {
    let c: Vec<f64> = (0..i.len())
        .map(|j| {
            sig(i[j]) * u[j].tanh() + forgets.iter().map(|(f, c)| sig(f[j]) * c[j]).sum::<f64>()
        })
        .collect();
    let h: Vec<f64> = (0..i.len()).map(|j| sig(o[j]) * c[j].tanh()).collect();
    c.into_iter().chain(h).collect()
}

#[test]
fn child_sum_tree_lstm_follows_tai_et_al() {
    let (inp, h) = (3, 2);
    let mut store = ParamStore::new();
    let cell = ChildSumTreeLstm::new(&mut Scope::new(&mut store, 1), inp, h).unwrap();
    randomize(&mut store);
    let [w_iou, u_iou, b_iou, w_f, u_f, b_f] = cell.params().map(|p| vals(&store, &p));
    let xs: Vec<Vec<f32>> = (0..4).map(|k| data(inp, k)).collect();
    let mut g = Graph::new();
    let xe: Vec<Expr> = xs.iter().map(|x| input(&mut g, x)).collect();
    // Three leaves under one root with its own input.
    let leaves: Vec<Expr> = (0..3)
        .map(|k| cell.node(&mut g, xe[k], &[]).unwrap())
        .collect();
    let root = cell.node(&mut g, xe[3], &leaves).unwrap();
    let got = run(&mut g, &store, root);
    let leaf = |x: &[f64]| {
        let iou = add(&mv(&w_iou, x), &b_iou);
        state(&iou[..h], &iou[h..2 * h], &iou[2 * h..], &[])
    };
    let kids: Vec<Vec<f64>> = xs.iter().take(3).map(|x| leaf(&f64s(x))).collect();
    let x = f64s(&xs[3]);
    let h_sum: Vec<f64> = (0..h)
        .map(|j| kids.iter().map(|s| s[h + j]).sum())
        .collect();
    let iou = add(&add(&mv(&w_iou, &x), &mv(&u_iou, &h_sum)), &b_iou);
    let wx = add(&mv(&w_f, &x), &b_f);
    let forgets: Vec<(Vec<f64>, Vec<f64>)> = kids
        .iter()
        .map(|s| (add(&wx, &mv(&u_f, &s[h..])), s[..h].to_vec()))
        .collect();
    let want = state(&iou[..h], &iou[h..2 * h], &iou[2 * h..], &forgets);
    close("child-sum root [c | h]", &got, &want, 1e-5);
}

#[test]
fn nary_tree_lstm_follows_tai_et_al() {
    let (inp, h, n) = (3, 2, 3);
    let mut store = ParamStore::new();
    let cell = NaryTreeLstm::new(&mut Scope::new(&mut store, 2), inp, h, n).unwrap();
    randomize(&mut store);
    let [w, u, b] = [0, 1, 2].map(|k| vals(&store, &cell.params()[k]));
    let xs: Vec<Vec<f32>> = (0..3).map(|k| data(inp, 10 + k)).collect();
    let mut g = Graph::new();
    let xe: Vec<Expr> = xs.iter().map(|x| input(&mut g, x)).collect();
    let l0 = cell.node(&mut g, Some(xe[0]), &[]).unwrap();
    let l2 = cell.node(&mut g, Some(xe[1]), &[]).unwrap();
    // Slot 1 empty: a zero child.
    let root = cell
        .node(&mut g, Some(xe[2]), &[Some(l0), None, Some(l2)])
        .unwrap();
    let got = run(&mut g, &store, root);
    let zero = vec![0.0; n * h];
    let gates = |x: &[f64], hh: &[f64]| add(&add(&mv(&w, x), &mv(&u, hh)), &b);
    let leaf = |x: &[f64]| {
        let gt = gates(x, &zero);
        state(&gt[..h], &gt[h..2 * h], &gt[2 * h..3 * h], &[])
    };
    let (s0, s2) = (leaf(&f64s(&xs[0])), leaf(&f64s(&xs[1])));
    let hh: Vec<f64> = s0[h..]
        .iter()
        .chain(&vec![0.0; h])
        .chain(&s2[h..])
        .copied()
        .collect();
    let gt = gates(&f64s(&xs[2]), &hh);
    let forgets = vec![
        (gt[3 * h..4 * h].to_vec(), s0[..h].to_vec()),
        (gt[5 * h..6 * h].to_vec(), s2[..h].to_vec()),
    ];
    let want = state(&gt[..h], &gt[h..2 * h], &gt[2 * h..3 * h], &forgets);
    close("n-ary root [c | h]", &got, &want, 1e-5);
    // Mistakes.
    let e = cell.node(&mut g, None, &[]).unwrap_err().to_string();
    assert!(e.contains("reads an input"), "{e}");
    let e = cell
        .node(&mut g, Some(xe[0]), &[None, None, None, None])
        .unwrap_err()
        .to_string();
    assert!(e.contains("4 children for 3 slots"), "{e}");
    // A child that is not a state of this cell.
    let e = cell
        .node(&mut g, Some(xe[0]), &[Some(xe[1])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("child 0 has shape [3]"), "{e}");
}

/// A forest of child-sum trees of several shapes in one graph: depth and
/// agenda equal sequential in the roots' values and every gradient.
#[test]
fn child_sum_trees_batch_like_sequential() {
    let (inp, h) = (4, 3);
    let mut store = ParamStore::new();
    let cell = ChildSumTreeLstm::new(&mut Scope::new(&mut store, 3), inp, h).unwrap();
    randomize(&mut store);
    // Trees as child lists, children before parents.
    let shapes: [&[&[usize]]; 3] = [
        &[&[], &[], &[0, 1]],
        &[&[], &[], &[], &[0, 1, 2], &[], &[3, 4]],
        &[&[], &[0], &[1]],
    ];
    let run_with = |exec: Option<Strategy>| {
        store.zero_grads_for_test();
        let mut g = Graph::new();
        let mut roots = Vec::new();
        for (t, tree) in shapes.iter().enumerate() {
            let mut states: Vec<Expr> = Vec::new();
            for (k, kids) in tree.iter().enumerate() {
                let x = input(&mut g, &data(inp, (100 * t + k) as u64));
                let children: Vec<Expr> = kids.iter().map(|&c| states[c]).collect();
                states.push(cell.node(&mut g, x, &children).unwrap());
            }
            roots.push(*states.last().unwrap());
        }
        let sums: Vec<Expr> = roots.iter().map(|&r| g.sum_elems(r).unwrap()).collect();
        let loss = g.sum(&sums).unwrap();
        match exec {
            None => {
                Sequential::new().backward(&mut g, &store, loss).unwrap();
            }
            Some(s) => {
                let mut x = Executor::new(s);
                x.forward(&mut g, &store, loss).unwrap();
                x.backward(&mut g, &store, loss).unwrap();
            }
        }
        let mut out: Vec<Vec<f32>> = roots
            .iter()
            .map(|&r| g.value(r).unwrap().to_vec().unwrap())
            .collect();
        out.extend(
            cell.params()
                .iter()
                .map(|p| store.grad(p).unwrap().to_vec().unwrap()),
        );
        out
    };
    let reference = run_with(None);
    for s in [Strategy::Depth, Strategy::Agenda] {
        for (k, (a, b)) in run_with(Some(s)).iter().zip(&reference).enumerate() {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-4 * (1.0 + x.abs().max(y.abs())),
                    "{s:?} output {k}[{i}]: {x} vs {y}"
                );
            }
        }
    }
}

/// Zeroes every gradient of a store shared by reference (the tests run
/// several executors over one store).
trait ZeroGrads {
    fn zero_grads_for_test(&self);
}

impl ZeroGrads for ParamStore {
    fn zero_grads_for_test(&self) {
        for p in self.params() {
            let mut acc = self.lock_grad(p.id(), "test").unwrap();
            acc.grad = sheaf_tensor::Tensor::zeros(
                p.shape(),
                sheaf_tensor::DType::F32,
                sheaf_tensor::Device::Cpu,
            )
            .unwrap();
            acc.dense = false;
            acc.rows.clear();
        }
    }
}

#[test]
fn attention_pools_with_softmax_weights() {
    let (d, hid, q) = (3, 4, 2);
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 4);
    let dot = Attention::dot(&mut root.sub("dot").unwrap(), d).unwrap();
    let ff = Attention::feed_forward(&mut root.sub("ff").unwrap(), d, hid).unwrap();
    let add_att = Attention::additive(&mut root.sub("add").unwrap(), d, q, hid).unwrap();
    randomize(&mut store);
    let get = |name: &str| vals(&store, &store.get(name).unwrap());
    let hs: Vec<Vec<f32>> = (0..4).map(|t| data(d, 20 + t)).collect();
    let s = data(q, 30);
    let mut g = Graph::new();
    let he: Vec<Expr> = hs.iter().map(|h| input(&mut g, h)).collect();
    let se = input(&mut g, &s);
    let outs = [
        dot.pool(&mut g, &he).unwrap(),
        ff.pool(&mut g, &he).unwrap(),
        add_att.pool_with(&mut g, &he, se).unwrap(),
    ];
    let hs64: Vec<Vec<f64>> = hs.iter().map(|h| f64s(h)).collect();
    let pool = |e: Vec<f64>| -> Vec<f64> {
        let m = e.iter().cloned().fold(f64::MIN, f64::max);
        let z: f64 = e.iter().map(|x| (x - m).exp()).sum();
        (0..d)
            .map(|j| {
                e.iter()
                    .zip(&hs64)
                    .map(|(x, h)| (x - m).exp() / z * h[j])
                    .sum()
            })
            .collect()
    };
    let dotv = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let tanh_v = |v: Vec<f64>| v.into_iter().map(f64::tanh).collect::<Vec<f64>>();
    let q = get("dot.q");
    let want_dot = pool(hs64.iter().map(|h| dotv(&q, h)).collect());
    let (w, b, v) = (get("ff.w"), get("ff.b"), get("ff.v"));
    let want_ff = pool(
        hs64.iter()
            .map(|h| dotv(&v, &tanh_v(add(&mv(&w, h), &b))))
            .collect(),
    );
    let (w, u, b, v) = (get("add.w"), get("add.u"), get("add.b"), get("add.v"));
    let us = mv(&u, &f64s(&s));
    let want_add = pool(
        hs64.iter()
            .map(|h| dotv(&v, &tanh_v(add(&add(&mv(&w, h), &b), &us))))
            .collect(),
    );
    for (what, e, want) in [
        ("dot", outs[0], &want_dot),
        ("feed-forward", outs[1], &want_ff),
        ("additive", outs[2], &want_add),
    ] {
        close(what, &run(&mut g, &store, e), want, 1e-5);
    }
    // Mistakes.
    let e = add_att.pool(&mut g, &he).unwrap_err().to_string();
    assert!(e.contains("need a query state"), "{e}");
    let e = dot.pool(&mut g, &[]).unwrap_err().to_string();
    assert!(e.contains("empty sequence"), "{e}");
    let wrong = input(&mut g, &[1.0, 2.0]);
    let e = dot.pool(&mut g, &[he[0], wrong]).unwrap_err().to_string();
    assert!(e.contains("vector 1 has shape [2]"), "{e}");
}

#[test]
fn gradients_through_trees_and_attention_match_finite_differences() {
    let (inp, h) = (2, 2);
    let mut store = ParamStore::new();
    let mut root = Scope::new(&mut store, 5);
    let cs = ChildSumTreeLstm::new(&mut root.sub("cs").unwrap(), inp, h).unwrap();
    let nary = NaryTreeLstm::new(&mut root.sub("nary").unwrap(), 0, h, 2).unwrap();
    let att = Attention::additive(&mut root.sub("att").unwrap(), 2 * h, h, 3).unwrap();
    randomize(&mut store);
    let params: Vec<Param> = store.params();
    let build = |g: &mut Graph, _: &[Expr]| -> Result<Expr, GraphError> {
        let xs: Vec<Expr> = (0..3).map(|k| input(g, &data(inp, 50 + k))).collect();
        let l0 = cs.node(g, xs[0], &[])?;
        let l1 = cs.node(g, xs[1], &[])?;
        let r = cs.node(g, xs[2], &[l0, l1])?;
        let top = nary.node(g, None, &[Some(l0), Some(r)])?;
        let q = nary.h(g, top)?;
        let pooled = att.pool_with(g, &[l0, l1, r, top], q)?;
        g.dot(pooled, pooled)
    };
    check_gradients(&mut store, &params, &build, GradCheck::default()).unwrap();
}
