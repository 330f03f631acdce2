//! Vertex functions: a call of a traced function equals the same ops
//! inlined (values and every gradient), its op batches like any op
//! (`check_batching`), gradients through it match finite differences,
//! calls nest, and mistakes are errors naming the function.

mod common;

use common::tensor;
use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{Expr, Graph, Param, ParamStore, Result, Sequential, VertexFn};
use sheaf_tensor::{Shape, Tensor};

const E: usize = 3;
const H: usize = 2;

/// A binary Tree-LSTM's parameters and a readout vector.
#[derive(Clone, Copy)]
struct Cell {
    w: Param,
    bl: Param,
    u: Param,
    b: Param,
    v: Param,
}

fn cell(store: &mut ParamStore) -> Cell {
    let mut add =
        |name: &str, dims: &[usize], salt: f32| store.add(name, tensor(dims, salt)).unwrap();
    Cell {
        w: add("w", &[3 * H, E], 1.0),
        bl: add("bl", &[3 * H], 2.0),
        u: add("u", &[5 * H, 2 * H], 3.0),
        b: add("b", &[5 * H], 4.0),
        v: add("v", &[H], 5.0),
    }
}

impl Cell {
    fn params(&self) -> Vec<Param> {
        vec![self.w, self.bl, self.u, self.b, self.v]
    }

    /// A leaf's ops: `[state, h]`.
    fn leaf(&self, g: &mut Graph, x: Expr) -> Result<Vec<Expr>> {
        let (w, bl) = (g.param(&self.w), g.param(&self.bl));
        let gates = g.affine(bl, &[(w, x)])?;
        let s = g.tree_lstm_leaf(gates)?;
        let h = g.cell_h(s)?;
        Ok(vec![s, h])
    }

    /// An internal node's ops from its children's states: `[state, h]`.
    fn node(&self, g: &mut Graph, l: Expr, r: Expr) -> Result<Vec<Expr>> {
        let (hl, hr) = (g.cell_h(l)?, g.cell_h(r)?);
        let hh = g.concat(&[hl, hr])?;
        let (u, b) = (g.param(&self.u), g.param(&self.b));
        let gates = g.affine(b, &[(u, hh)])?;
        let s = g.tree_lstm_node(gates, l, r)?;
        let h = g.cell_h(s)?;
        Ok(vec![s, h])
    }

    fn leaf_fn(self) -> VertexFn {
        VertexFn::trace("tree_leaf", &[Shape::from([E])], move |g, a| {
            self.leaf(g, a[0])
        })
        .unwrap()
    }

    fn node_fn(self) -> VertexFn {
        let s = Shape::from([2 * H]);
        VertexFn::trace("tree_node", &[s, s], move |g, a| self.node(g, a[0], a[1])).unwrap()
    }
}

/// A tree as post-order nodes: `None` a leaf, `Some((l, r))` children.
fn tree(leaves: usize, salt: usize) -> Vec<Option<(usize, usize)>> {
    let mut nodes = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut pushed = 0;
    let mut k = salt;
    while pushed < leaves || stack.len() > 1 {
        k = k
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if pushed < leaves && (stack.len() < 2 || (k >> 33).is_multiple_of(2)) {
            nodes.push(None);
            stack.push(nodes.len() - 1);
            pushed += 1;
        } else {
            let r = stack.pop().unwrap();
            let l = stack.pop().unwrap();
            nodes.push(Some((l, r)));
            stack.push(nodes.len() - 1);
        }
    }
    nodes
}

/// The summed readout `v . h` of every node of `trees`, with the cells
/// inlined or called.
fn forest_loss(
    g: &mut Graph,
    c: &Cell,
    fns: Option<(&VertexFn, &VertexFn)>,
    trees: &[Vec<Option<(usize, usize)>>],
) -> Result<Expr> {
    let v = g.param(&c.v);
    let mut losses = Vec::new();
    for (t, nodes) in trees.iter().enumerate() {
        let mut states: Vec<Expr> = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let out = match (n, fns) {
                (None, _) => {
                    let x = g.input(tensor(&[E], (t * 31 + i) as f32));
                    match fns {
                        Some((leaf, _)) => g.call(leaf, &[x])?,
                        None => c.leaf(g, x)?,
                    }
                }
                (Some((l, r)), Some((_, node))) => g.call(node, &[states[*l], states[*r]])?,
                (Some((l, r)), None) => c.node(g, states[*l], states[*r])?,
            };
            states.push(out[0]);
            let y = g.cmult(out[1], v)?;
            losses.push(g.sum_elems(y)?);
        }
    }
    g.sum(&losses)
}

/// Loss and every parameter's gradient under Sequential.
fn run(
    store: &mut ParamStore,
    params: &[Param],
    build: impl Fn(&mut Graph) -> Result<Expr>,
) -> (f32, Vec<Vec<f32>>) {
    store.zero_grads().unwrap();
    let mut g = Graph::new();
    let loss = build(&mut g).unwrap();
    let ex = Sequential::new();
    let value = ex
        .forward(&mut g, store, loss)
        .unwrap()
        .item::<f32>()
        .unwrap();
    ex.backward(&mut g, store, loss).unwrap();
    let grads = params
        .iter()
        .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
        .collect();
    (value, grads)
}

fn close(what: &str, a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())),
            "{what}[{i}]: {x} (called) vs {y} (inlined)"
        );
    }
}

#[test]
fn calls_equal_the_inlined_ops_in_values_and_gradients() {
    let mut store = ParamStore::new();
    let c = cell(&mut store);
    let (leaf, node) = (c.leaf_fn(), c.node_fn());
    // The cells' ops and one concatenation of the two outputs each; on
    // large batches the node's concatenation of its children's h is not
    // made (its product reads them over column blocks of U).
    assert_eq!((leaf.ops(), node.ops()), (4, 7));
    assert_eq!((leaf.split_ops(), node.split_ops()), (None, Some(6)));
    let trees: Vec<_> = (0..4).map(|k| tree(2 + 2 * k, k)).collect();
    let params = c.params();
    let (a, ga) = run(&mut store, &params, |g| {
        forest_loss(g, &c, Some((&leaf, &node)), &trees)
    });
    let (b, gb) = run(&mut store, &params, |g| forest_loss(g, &c, None, &trees));
    close("loss", &[a], &[b], 1e-6);
    for (k, (x, y)) in ga.iter().zip(&gb).enumerate() {
        close(&format!("gradient of parameter {k}"), x, y, 1e-6);
        assert!(x.iter().any(|v| *v != 0.0), "parameter {k} got no gradient");
    }
    // Per tree node: one call and its two output views where the inlined
    // cells add three (leaf) or six (inner) nodes; the readout is the same.
    let (mut g, mut inlined) = (Graph::new(), Graph::new());
    forest_loss(&mut g, &c, Some((&leaf, &node)), &trees).unwrap();
    forest_loss(&mut inlined, &c, None, &trees).unwrap();
    let (n, leaves) = (
        trees.iter().map(Vec::len).sum::<usize>(),
        trees.iter().map(|t| t.len().div_ceil(2)).sum::<usize>(),
    );
    assert_eq!(
        inlined.len() - g.len(),
        3 * (n - leaves),
        "{n} nodes, {leaves} leaves"
    );
}

#[test]
fn a_call_op_batches_like_its_calls_one_by_one() {
    let mut store = ParamStore::new();
    let c = cell(&mut store);
    let node = c.node_fn();
    let p = |q: &Param| store.value(q).unwrap().clone();
    let instances: Vec<Instance> = (0..5)
        .map(|k| Instance {
            args: vec![
                tensor(&[2 * H], k as f32),
                tensor(&[2 * H], 10.0 + k as f32),
                p(&c.u),
                p(&c.b),
            ],
            data: 0,
            seed: k,
        })
        .collect();
    check_batching(node.op().as_ref(), &instances, 0, 1e-5).unwrap();
}

#[test]
fn gradients_through_a_call_match_finite_differences() {
    let mut store = ParamStore::new();
    let c = cell(&mut store);
    let (leaf, node) = (c.leaf_fn(), c.node_fn());
    let trees = vec![tree(3, 1)];
    let build = move |g: &mut Graph, _: &[Expr]| forest_loss(g, &c, Some((&leaf, &node)), &trees);
    check_gradients(&mut store, &c.params(), &build, GradCheck::default()).unwrap();
}

#[test]
fn calls_nest_and_read_parameters_per_call_and_twice() {
    let mut store = ParamStore::new();
    let c = cell(&mut store);
    let leaf = c.leaf_fn();
    let bias = store.add("bias", tensor(&[H], 6.0)).unwrap();
    // F reads a parameter where the op takes one value per call (`add`),
    // uses one value twice (`cmult(h, h)`), and calls the leaf function.
    let inner = |g: &mut Graph, x: Expr, call: Option<&VertexFn>| -> Result<Vec<Expr>> {
        let h = match call {
            Some(f) => g.call(f, &[x])?[1],
            None => c.leaf(g, x)?[1],
        };
        let b = g.param(&bias);
        let y = g.add(b, h)?;
        let y = g.cmult(y, y)?;
        Ok(vec![g.tanh(y)?])
    };
    let leaf2 = leaf.clone();
    let outer = VertexFn::trace("outer", &[Shape::from([E])], move |g, a| {
        inner(g, a[0], Some(&leaf2))
    })
    .unwrap();
    assert_eq!(outer.params().len(), 3);
    let mut params = c.params();
    params.push(bias);
    let build = |g: &mut Graph, called: bool| -> Result<Expr> {
        let mut ys = Vec::new();
        for k in 0..4 {
            let x = g.input(tensor(&[E], k as f32));
            ys.push(match called {
                true => g.call(&outer, &[x])?[0],
                false => inner(g, x, None)?[0],
            });
        }
        let v = g.param(&c.v);
        let s = g.sum(&ys)?;
        let y = g.cmult(s, v)?;
        g.sum_elems(y)
    };
    let (a, ga) = run(&mut store, &params, |g| build(g, true));
    let (b, gb) = run(&mut store, &params, |g| build(g, false));
    close("loss", &[a], &[b], 1e-6);
    for (k, (x, y)) in ga.iter().zip(&gb).enumerate() {
        close(&format!("gradient of parameter {k}"), x, y, 1e-6);
    }
    assert!(ga[5].iter().any(|v| *v != 0.0), "the bias got no gradient");
}

#[test]
fn lookups_inside_a_function_send_their_rows_to_the_table() {
    let mut store = ParamStore::new();
    let table = store.add_table("table", tensor(&[6, H], 1.0)).unwrap();
    let f = VertexFn::trace("lookup", &[Shape::from([H])], move |g, a| {
        let t = g.param(&table);
        let row = g.lookup(t, 4)?;
        Ok(vec![g.cmult(row, a[0])?])
    })
    .unwrap();
    let build = |g: &mut Graph, called: bool| -> Result<Expr> {
        let mut ys = Vec::new();
        for k in 0..3 {
            let x = g.input(tensor(&[H], k as f32));
            ys.push(match called {
                true => g.call(&f, &[x])?[0],
                false => {
                    let t = g.param(&table);
                    let row = g.lookup(t, 4)?;
                    g.cmult(row, x)?
                }
            });
        }
        let s = g.sum(&ys)?;
        g.sum_elems(s)
    };
    let (a, ga) = run(&mut store, &[table], |g| build(g, true));
    let (b, gb) = run(&mut store, &[table], |g| build(g, false));
    close("loss", &[a], &[b], 1e-6);
    close("table gradient", &ga[0], &gb[0], 1e-6);
    assert!(ga[0][4 * H..5 * H].iter().all(|v| *v != 0.0));
}

fn err(r: Result<impl std::fmt::Debug>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn mistakes_are_errors_naming_the_function() {
    let mut store = ParamStore::new();
    let c = cell(&mut store);
    let node = c.node_fn();
    let mut g = Graph::new();
    let small =
        g.input(Tensor::zeros([H], sheaf_tensor::DType::F32, sheaf_tensor::Device::Cpu).unwrap());
    let state = g.input(tensor(&[2 * H], 1.0));
    let e = err(g.call(&node, &[state, small]));
    assert!(
        e.contains("tree_node")
            && e.contains("argument 1")
            && e.contains("[4]")
            && e.contains("[2]"),
        "{e}"
    );
    let e = err(g.call(&node, &[state]));
    assert!(
        e.contains("`tree_node`") && e.contains("1 argument(s), traced with 2"),
        "{e}"
    );
    // Reading a value while tracing.
    let e = err(VertexFn::trace("peek", &[Shape::from([H])], |g, a| {
        let v = g.value(a[0])?.to_vec::<f32>().unwrap();
        Ok(vec![g.scale(a[0], v[0])?])
    }));
    assert!(e.contains("`peek`") && e.contains("static"), "{e}");
    // F must compute something.
    let e = err(VertexFn::trace("same", &[Shape::from([H])], |_, a| {
        Ok(vec![a[0]])
    }));
    assert!(
        e.contains("`same`") && e.contains("computes nothing"),
        "{e}"
    );
    // A per-call value where the op needs one for the whole batch.
    let e = err(VertexFn::trace(
        "weights",
        &[Shape::from([H, H]), Shape::from([H])],
        |g, a| Ok(vec![g.linear(a[0], a[1])?]),
    ));
    assert!(
        e.contains("`weights`") && e.contains("differs from call to call"),
        "{e}"
    );
}
