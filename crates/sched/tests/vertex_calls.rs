//! Vertex functions under every strategy: a Tree-LSTM whose cells are
//! calls (mixed with plain lookups, copies, output layers and losses)
//! gives under Depth, Agenda and Auto the loss and gradients of the same
//! model inlined under Sequential; calls of one function batch (one kernel
//! call per depth for Depth); dropout inside a function draws the same
//! masks under every executor; on a GPU (skipped without one), called
//! cells under Depth and Agenda give the CPU's inlined loss and gradients.

mod common;

use sheaf_autodiff::{Expr, Graph, Param, ParamStore, Result, VertexFn};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::{Device, Shape, Tensor};

const V: usize = 7;
const E: usize = 5;
const H: usize = 4;
const C: usize = 3;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn unit(&mut self) -> f32 {
        (self.next() % 20001) as f32 / 10000.0 - 1.0
    }
}

#[derive(Clone, Copy)]
struct Model {
    emb: Param,
    w: Param,
    bl: Param,
    u: Param,
    b: Param,
    wo: Param,
    bo: Param,
}

fn model(store: &mut ParamStore) -> Model {
    let mut rng = Lcg(3);
    let mut t = |dims: &[usize], scale: f32| {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.unit() * scale).collect();
        Tensor::from_vec(v, Shape::new(dims).unwrap()).unwrap()
    };
    Model {
        emb: store.add_table("emb", t(&[V, E], 0.5)).unwrap(),
        w: store.add("w", t(&[3 * H, E], 0.4)).unwrap(),
        bl: store.add("bl", t(&[3 * H], 0.1)).unwrap(),
        u: store.add("u", t(&[5 * H, 2 * H], 0.4)).unwrap(),
        b: store.add("b", t(&[5 * H], 0.1)).unwrap(),
        wo: store.add("wo", t(&[C, H], 0.4)).unwrap(),
        bo: store.add("bo", t(&[C], 0.1)).unwrap(),
    }
}

impl Model {
    fn params(&self) -> Vec<Param> {
        vec![self.emb, self.w, self.bl, self.u, self.b, self.wo, self.bo]
    }

    fn leaf(&self, g: &mut Graph, x: Expr) -> Result<Expr> {
        let (w, bl) = (g.param(&self.w), g.param(&self.bl));
        let gates = g.affine(bl, &[(w, x)])?;
        g.tree_lstm_leaf(gates)
    }

    fn node(&self, g: &mut Graph, l: Expr, r: Expr) -> Result<Expr> {
        let (hl, hr) = (g.cell_h(l)?, g.cell_h(r)?);
        let hh = g.concat(&[hl, hr])?;
        let (u, b) = (g.param(&self.u), g.param(&self.b));
        let gates = g.affine(b, &[(u, hh)])?;
        g.tree_lstm_node(gates, l, r)
    }
}

/// Post-order nodes of a random tree: a word id at a leaf, children.
enum Node {
    Leaf(u32),
    Inner(usize, usize),
}

fn forest(rng: &mut Lcg, trees: usize) -> Vec<Vec<Node>> {
    (0..trees)
        .map(|_| {
            let leaves = 1 + (rng.next() % 9) as usize;
            let (mut nodes, mut stack, mut pushed) = (Vec::new(), Vec::new(), 0);
            while pushed < leaves || stack.len() > 1 {
                if pushed < leaves && (stack.len() < 2 || rng.next().is_multiple_of(2)) {
                    nodes.push(Node::Leaf((rng.next() % V as u64) as u32));
                    pushed += 1;
                } else {
                    let r = stack.pop().unwrap();
                    let l = stack.pop().unwrap();
                    nodes.push(Node::Inner(l, r));
                }
                stack.push(nodes.len() - 1);
            }
            nodes
        })
        .collect()
}

/// The loss of every node of every tree (a label per node), cells called
/// through `fns` or inlined.
fn loss(
    g: &mut Graph,
    m: &Model,
    fns: Option<&(VertexFn, VertexFn)>,
    trees: &[Vec<Node>],
) -> Result<Expr> {
    let mut losses = Vec::new();
    for t in trees {
        let mut states = Vec::new();
        for (i, n) in t.iter().enumerate() {
            let s = match (n, fns) {
                (Node::Leaf(w), _) => {
                    let emb = g.param(&m.emb);
                    let x = g.lookup(emb, *w)?;
                    match fns {
                        Some((leaf, _)) => g.call(leaf, &[x])?[0],
                        None => m.leaf(g, x)?,
                    }
                }
                (Node::Inner(l, r), Some((_, node))) => g.call(node, &[states[*l], states[*r]])?[0],
                (Node::Inner(l, r), None) => m.node(g, states[*l], states[*r])?,
            };
            states.push(s);
            let h = g.cell_h(s)?;
            let (wo, bo) = (g.param(&m.wo), g.param(&m.bo));
            let logits = g.affine(bo, &[(wo, h)])?;
            losses.push(g.pick_neg_log_softmax(logits, (i % C) as u32)?);
        }
    }
    g.sum(&losses)
}

fn functions(m: Model) -> (VertexFn, VertexFn) {
    let leaf = VertexFn::trace("leaf", &[Shape::from([E])], move |g, a| {
        Ok(vec![m.leaf(g, a[0])?])
    });
    let s = Shape::from([2 * H]);
    let node = VertexFn::trace("node", &[s, s], move |g, a| {
        Ok(vec![m.node(g, a[0], a[1])?])
    });
    (leaf.unwrap(), node.unwrap())
}

fn close(what: &str, a: &[f32], b: &[f32]) {
    common::assert_close_within(what, a, b, 1e-5);
}

#[test]
fn called_cells_under_every_strategy_equal_inlined_sequential() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let fns = functions(m);
    let trees = forest(&mut Lcg(11), 12);
    let params = m.params();
    let (want, want_grads) =
        common::loss_and_grads(&mut store, &params, None, |g| loss(g, &m, None, &trees));
    for strategy in [
        None,
        Some(Strategy::Depth),
        Some(Strategy::Agenda),
        Some(Strategy::Auto),
    ] {
        let mut exec = strategy.map(Executor::new);
        // Twice: Auto times both candidates before it chooses.
        for round in 0..3 {
            let (got, grads) = common::loss_and_grads(&mut store, &params, exec.as_mut(), |g| {
                loss(g, &m, Some(&fns), &trees)
            });
            close(&format!("{strategy:?} round {round} loss"), &[got], &[want]);
            for (k, (a, b)) in grads.iter().zip(&want_grads).enumerate() {
                close(&format!("{strategy:?} round {round} gradient {k}"), a, b);
            }
        }
    }
}

/// Inference mode (nothing kept for backward, buffers handed on within
/// the step) computes the same loss with calls, and holds less memory.
#[test]
fn called_cells_in_inference_mode_equal_inlined_sequential() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let fns = functions(m);
    let trees = forest(&mut Lcg(13), 24);
    let params = m.params();
    let (want, _) =
        common::loss_and_grads(&mut store, &params, None, |g| loss(g, &m, None, &trees));
    for strategy in [Strategy::Depth, Strategy::Agenda, Strategy::Auto] {
        let mut peaks = Vec::new();
        for inference in [false, true] {
            let mut exec = Executor::new(strategy);
            exec.set_inference(inference);
            let mut g = Graph::new();
            let l = loss(&mut g, &m, Some(&fns), &trees).unwrap();
            let got = exec.forward(&mut g, &store, l).unwrap().item().unwrap();
            close(
                &format!("{strategy:?} inference {inference}"),
                &[got],
                &[want],
            );
            peaks.push(exec.stats().arena_peak_bytes);
            let back = exec.backward(&mut g, &store, l);
            assert_eq!(back.is_err(), inference, "{strategy:?}: {back:?}");
        }
        assert!(peaks[1] < peaks[0], "{strategy:?}: peak bytes {peaks:?}");
    }
}

#[test]
fn calls_of_one_function_share_kernel_calls() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let fns = functions(m);
    let trees = forest(&mut Lcg(5), 16);
    let mut exec = Executor::new(Strategy::Depth);
    let mut g = Graph::new();
    let l = loss(&mut g, &m, Some(&fns), &trees).unwrap();
    exec.forward(&mut g, &store, l).unwrap();
    let stats = exec.stats();
    let leaves = trees
        .iter()
        .flatten()
        .filter(|n| matches!(n, Node::Leaf(_)))
        .count();
    let inner = trees.iter().flatten().count() - leaves;
    let height = trees.iter().map(|t| height(t, t.len() - 1)).max().unwrap();
    // Every leaf call in one batch (all sit at depth 1, after the
    // lookups); the node calls in one batch per height.
    assert_eq!(stats.per_op.get("leaf"), Some(&(1, leaves)), "{stats:?}");
    assert_eq!(
        stats.per_op.get("node"),
        Some(&(height, inner)),
        "{stats:?}"
    );
}

fn height(t: &[Node], i: usize) -> usize {
    match t[i] {
        Node::Leaf(_) => 0,
        Node::Inner(l, r) => 1 + height(t, l).max(height(t, r)),
    }
}

#[test]
fn dropout_inside_a_function_is_the_same_under_every_executor() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let f = VertexFn::trace("drop", &[Shape::from([E])], |g, a| {
        let y = g.tanh(a[0])?;
        Ok(vec![g.dropout(y, 0.4)?])
    })
    .unwrap();
    let build = |g: &mut Graph| -> Result<Expr> {
        let mut ys = Vec::new();
        for w in 0..V as u32 {
            let emb = g.param(&m.emb);
            let x = g.lookup(emb, w)?;
            ys.push(g.call(&f, &[x])?[0]);
        }
        let s = g.sum(&ys)?;
        let s = g.cmult(s, s)?;
        g.sum_elems(s)
    };
    let params = [m.emb];
    let (want, want_grads) = common::loss_and_grads(&mut store, &params, None, build);
    // Some elements were dropped and some kept.
    let zeros = want_grads[0].iter().filter(|v| **v == 0.0).count();
    assert!(zeros > 0 && zeros < V * E, "{zeros} zero gradients");
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut exec = Executor::new(strategy);
        let (got, grads) = common::loss_and_grads(&mut store, &params, Some(&mut exec), build);
        close(&format!("{strategy:?} loss"), &[got], &[want]);
        close(&format!("{strategy:?} gradient"), &grads[0], &want_grads[0]);
    }
}

#[test]
fn called_cells_on_the_gpu_equal_the_cpu() {
    let Some(gpu) = common::gpu() else { return };
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let fns = functions(m);
    let trees = forest(&mut Lcg(17), 10);
    let params = m.params();
    let (want, want_grads) =
        common::loss_and_grads(&mut store, &params, None, |g| loss(g, &m, None, &trees));
    store.to_device(gpu).unwrap();
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut exec = Executor::on(strategy, gpu).unwrap();
        let (got, grads) = common::loss_and_grads(&mut store, &params, Some(&mut exec), |g| {
            loss(g, &m, Some(&fns), &trees)
        });
        // The device's exp / tanh differ from the CPU's by a few ulp.
        let near = |what: &str, a: &[f32], b: &[f32]| common::assert_close_within(what, a, b, 1e-4);
        near(&format!("{strategy:?} loss"), &[got], &[want]);
        for (k, (a, b)) in grads.iter().zip(&want_grads).enumerate() {
            near(&format!("{strategy:?} gradient {k}"), a, b);
        }
        // Inference mode on the device: the same loss.
        let mut exec = Executor::on(strategy, gpu).unwrap();
        exec.set_inference(true);
        let mut g = Graph::new();
        let l = loss(&mut g, &m, Some(&fns), &trees).unwrap();
        let v = exec.forward(&mut g, &store, l).unwrap();
        let got: f32 = v.to_device(Device::Cpu).unwrap().item().unwrap();
        near(&format!("{strategy:?} inference loss"), &[got], &[want]);
    }
    store.to_device(Device::Cpu).unwrap();
}

/// The model with per-call data: a leaf's lookup inside its function
/// (the word id as the call's data), every node's output layer and loss
/// one call (the label as its data).
fn loss_with_data(
    g: &mut Graph,
    fns: &(VertexFn, VertexFn, VertexFn),
    trees: &[Vec<Node>],
) -> Result<Expr> {
    let (leaf, node, out) = fns;
    let mut losses = Vec::new();
    for t in trees {
        let mut states = Vec::new();
        for (i, n) in t.iter().enumerate() {
            let s = match n {
                Node::Leaf(w) => g.call_with_data(leaf, &[], *w)?,
                Node::Inner(l, r) => g.call_one(node, &[states[*l], states[*r]])?,
            };
            states.push(s);
            losses.push(g.call_with_data(out, &[s], (i % C) as u32)?);
        }
    }
    g.sum(&losses)
}

fn functions_with_data(m: Model) -> (VertexFn, VertexFn, VertexFn) {
    let leaf = VertexFn::trace_with_data("leaf_word", &[], move |g, _, word| {
        let emb = g.param(&m.emb);
        let x = g.lookup(emb, word)?;
        Ok(vec![m.leaf(g, x)?])
    });
    let s = Shape::from([2 * H]);
    let out = VertexFn::trace_with_data("out_loss", &[s], move |g, a, label| {
        let h = g.cell_h(a[0])?;
        let (wo, bo) = (g.param(&m.wo), g.param(&m.bo));
        let logits = g.affine(bo, &[(wo, h)])?;
        Ok(vec![g.pick_neg_log_softmax(logits, label)?])
    });
    let (_, node) = functions(m);
    (leaf.unwrap(), node, out.unwrap())
}

#[test]
fn per_call_data_puts_lookups_and_losses_inside_functions() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let params = m.params();
    let trees = forest(&mut Lcg(21), 12);
    let fns = functions_with_data(m);
    assert!(fns.0.reads_data() && fns.2.reads_data() && !fns.1.reads_data());
    let (want, want_g) =
        common::loss_and_grads(&mut store, &params, None, |g| loss(g, &m, None, &trees));
    let nodes = |with: bool| {
        let mut g = Graph::new();
        match with {
            true => loss_with_data(&mut g, &fns, &trees).unwrap(),
            false => loss(&mut g, &m, None, &trees).unwrap(),
        };
        g.len()
    };
    assert!(
        3 * nodes(true) < nodes(false),
        "{} nodes with per-call data, {} inline",
        nodes(true),
        nodes(false)
    );
    common::every_executor_matches(&mut store, &params, (want, &want_g), |g| {
        loss_with_data(g, &fns, &trees)
    });
}

#[test]
fn per_call_data_errors() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let (leaf, node, _) = functions_with_data(m);
    let mut g = Graph::new();
    let e = g
        .call_with_data(&leaf, &[], V as u32)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("leaf_word") && e.contains(&format!("{V}")) && e.contains("out of range"),
        "{e}"
    );
    let e = g.call_one(&leaf, &[]).unwrap_err().to_string();
    assert!(e.contains("call_with_data"), "{e}");
    let x = g.input(Tensor::zeros([2 * H], sheaf_tensor::DType::F32, Device::Cpu).unwrap());
    let e = g.call_with_data(&node, &[x, x], 0).unwrap_err().to_string();
    assert!(e.contains("reads no per-call data"), "{e}");
}

/// Whole vertices as calls: a leaf's lookup, cell and loss in ONE call
/// (its word and its label as two per-call fields), a node's cell and loss
/// plus its children's in one call; each call's output is its state with
/// its subtree's loss after it (`[2H + 1]`).
fn whole_vertex_functions(m: Model) -> (VertexFn, VertexFn) {
    let own_loss = move |g: &mut Graph, state: Expr, label: u32| {
        let h = g.cell_h(state)?;
        let (wo, bo) = (g.param(&m.wo), g.param(&m.bo));
        let logits = g.affine(bo, &[(wo, h)])?;
        g.pick_neg_log_softmax(logits, label)
    };
    let leaf = VertexFn::trace_with_fields("leaf_whole", &[], 2, move |g, _, f| {
        let emb = g.param(&m.emb);
        let x = g.lookup(emb, f[0])?;
        let s = m.leaf(g, x)?;
        let l = own_loss(g, s, f[1])?;
        Ok(vec![g.concat(&[s, l])?])
    })
    .unwrap();
    let node = VertexFn::trace_with_data(
        "node_whole",
        &[Shape::from([2 * H + 1]); 2],
        move |g, a, label| {
            let (l, r) = (g.slice(a[0], 0, 2 * H)?, g.slice(a[1], 0, 2 * H)?);
            let (ll, lr) = (
                g.slice(a[0], 2 * H, 2 * H + 1)?,
                g.slice(a[1], 2 * H, 2 * H + 1)?,
            );
            let s = m.node(g, l, r)?;
            let own = own_loss(g, s, label)?;
            let children = g.add(ll, lr)?;
            let loss = g.add(own, children)?;
            Ok(vec![g.concat(&[s, loss])?])
        },
    )
    .unwrap();
    (leaf, node)
}

/// [`loss`] with whole vertices as calls: one node per tree node, and a
/// slice of each root's output.
fn loss_whole(g: &mut Graph, fns: &(VertexFn, VertexFn), trees: &[Vec<Node>]) -> Result<Expr> {
    let (leaf, node) = fns;
    let mut losses = Vec::new();
    for t in trees {
        let mut outs = Vec::new();
        for (i, n) in t.iter().enumerate() {
            let label = (i % C) as u32;
            outs.push(match n {
                Node::Leaf(w) => g.call_with_fields(leaf, &[], &[*w, label])?,
                Node::Inner(l, r) => g.call_with_data(node, &[outs[*l], outs[*r]], label)?,
            });
        }
        let root = *outs.last().unwrap();
        losses.push(g.slice(root, 2 * H, 2 * H + 1)?);
    }
    g.sum(&losses)
}

#[test]
fn per_call_fields_make_whole_vertices_one_call() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let params = m.params();
    let trees = forest(&mut Lcg(23), 12);
    let fns = whole_vertex_functions(m);
    assert!(fns.0.reads_data() && fns.1.reads_data());
    let (want, want_g) =
        common::loss_and_grads(&mut store, &params, None, |g| loss(g, &m, None, &trees));
    let tree_nodes: usize = trees.iter().map(Vec::len).sum();
    let mut g = Graph::new();
    loss_whole(&mut g, &fns, &trees).unwrap();
    // A call per tree node, a slice per root, the sum, the parameters.
    assert!(
        g.len() <= tree_nodes + trees.len() + 1 + params.len(),
        "{} nodes for {tree_nodes} tree nodes",
        g.len()
    );
    common::every_executor_matches(&mut store, &params, (want, &want_g), |g| {
        loss_whole(g, &fns, &trees)
    });
}

#[test]
fn per_call_field_errors() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let (leaf, node) = whole_vertex_functions(m);
    let mut g = Graph::new();
    // The label field is out of range: names F, the field and the bound.
    let e = g
        .call_with_fields(&leaf, &[], &[0, C as u32])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("leaf_whole") && e.contains("field 1") && e.contains(&format!("below {C}")),
        "{e}"
    );
    let e = g
        .call_with_fields(&leaf, &[], &[V as u32, 0])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("field 0") && e.contains(&format!("below {V}")),
        "{e}"
    );
    let e = g
        .call_with_fields(&leaf, &[], &[0])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("2 per-call fields") && e.contains("gives 1"),
        "{e}"
    );
    let e = g.call_with_data(&leaf, &[], 0).unwrap_err().to_string();
    assert!(e.contains("call_with_fields"), "{e}");
    let e = g.call_one(&leaf, &[]).unwrap_err().to_string();
    assert!(e.contains("call_with_fields"), "{e}");
    let x = g.input(Tensor::zeros([2 * H + 1], sheaf_tensor::DType::F32, Device::Cpu).unwrap());
    let e = g
        .call_with_fields(&node, &[x, x], &[0])
        .unwrap_err()
        .to_string();
    assert!(e.contains("reads no per-call fields"), "{e}");
    // Too many fields, and bounds that do not fit one word.
    let e = VertexFn::trace_with_fields("five", &[], 5, |_, _, _| unreachable!())
        .unwrap_err()
        .to_string();
    assert!(e.contains("five") && e.contains("at most 4"), "{e}");
    let big = store
        .add_table(
            "big",
            Tensor::zeros([1 << 17, 2], sheaf_tensor::DType::F32, Device::Cpu).unwrap(),
        )
        .unwrap();
    let e = VertexFn::trace_with_fields("wide", &[], 2, move |g, _, f| {
        let t = g.param(&big);
        let (a, b) = (g.lookup(t, f[0])?, g.lookup(t, f[1])?);
        Ok(vec![g.add(a, b)?])
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("wide") && e.contains("u32"), "{e}");
}

/// `3x`, whose backward always fails: where it runs backward shows.
struct NoBackward;

impl sheaf_autodiff::Op for NoBackward {
    fn name(&self) -> &'static str {
        "no_backward"
    }
    fn infer_shape(
        &self,
        args: &[Shape],
        _attr: sheaf_autodiff::Attr,
    ) -> std::result::Result<Shape, sheaf_autodiff::ShapeError> {
        match args {
            [s] => Ok(*s),
            _ => Err(sheaf_autodiff::ShapeError::expected("one argument")),
        }
    }
    fn forward(&self, cx: sheaf_autodiff::Forward<'_>) -> sheaf_tensor::Result<()> {
        let x = cx.args[0].as_slice::<f32>()?;
        let out = cx.out.into_mut_slice::<f32>()?;
        out.iter_mut().zip(x).for_each(|(o, v)| *o = 3.0 * v);
        Ok(())
    }
    fn backward(&self, _cx: &mut sheaf_autodiff::Backward<'_>) -> sheaf_tensor::Result<()> {
        Err(sheaf_tensor::TensorError::InvalidArgument {
            op: "no_backward",
            arg: "x",
            reason: "ran backward",
        })
    }
}

/// A step of F whose gradient reaches nothing that wants one (it reads
/// only inputs) is not run backward; the same step on a value that does
/// need a gradient is (its error comes through).
#[test]
fn steps_no_gradient_needs_are_not_run_backward() {
    let mut store = ParamStore::new();
    let w = store
        .add("w", Tensor::from_vec(vec![0.5f32, -1.0, 2.0], [3]).unwrap())
        .unwrap();
    let op: std::sync::Arc<dyn sheaf_autodiff::Op> = std::sync::Arc::new(NoBackward);
    let s = Shape::from([3]);
    let f = VertexFn::trace("prune", &[s, s], move |g, a| {
        let t = g.apply(&op, &[a[0]], 0)?;
        let p = g.param(&w);
        let y = g.cmult(a[1], p)?;
        Ok(vec![g.add(t, y)?])
    })
    .unwrap();
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        for x_needs_grad in [false, true] {
            let mut g = Graph::new();
            let mut outs = Vec::new();
            for i in 0..4 {
                let v = vec![i as f32, 1.0, -2.0];
                let mut x = g.input(Tensor::from_vec(v.clone(), [3]).unwrap());
                if x_needs_grad {
                    let p = g.param(&w);
                    x = g.cmult(x, p).unwrap();
                }
                let y = g.input(Tensor::from_vec(v, [3]).unwrap());
                outs.push(g.call_one(&f, &[x, y]).unwrap());
            }
            let total = g.sum(&outs).unwrap();
            let loss = g.sum_elems(total).unwrap();
            let mut ex = Executor::new(strategy);
            ex.forward(&mut g, &store, loss).unwrap();
            let r = ex.backward(&mut g, &store, loss);
            store.zero_grads().unwrap();
            match x_needs_grad {
                false => assert!(r.is_ok(), "{strategy:?}: {:?}", r.err()),
                true => {
                    let e = r.unwrap_err().to_string();
                    assert!(e.contains("ran backward"), "{strategy:?}: {e}");
                }
            }
        }
    }
}
