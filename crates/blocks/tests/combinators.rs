//! Each combinator on one input, on a batch of identical inputs and on a
//! mixed batch, under every strategy, against the same model written
//! directly on the graph (values and gradients).

mod common;

use common::{assert_close, rng, take_grads, vals, STRATEGIES};
use sheaf_autodiff::{Expr, Graph, Init, ParamStore, Sequential};
use sheaf_blocks::*;
use sheaf_tensor::Tensor as HostTensor;

fn vector(v: &[f32]) -> HostTensor {
    HostTensor::from_slice(v, [v.len()]).unwrap()
}

/// Sequences of 3-vectors of lengths 0..=4 (a mixed batch) or all of
/// length 3 (identical shapes).
fn sequences(mixed: bool) -> Vec<Vec<Vec<f32>>> {
    (0..6)
        .map(|k| {
            let len = if mixed { k % 5 } else { 3 };
            (0..len)
                .map(|t| {
                    (0..3)
                        .map(|j| ((k * 7 + t * 3 + j) as f32 * 0.37).sin())
                        .collect()
                })
                .collect()
        })
        .collect()
}

#[test]
fn map_fc_sum_equals_the_direct_model() {
    let mut store = ParamStore::new();
    let fc = FC::new(&mut store, "fc", 3, 4, Activation::Tanh, &mut rng(1)).unwrap();
    let (w, b) = fc.params();
    let model = Map::new(Tensor::new([3]) >> fc) >> Sum::new();
    for mixed in [false, true] {
        let data = sequences(mixed);
        // Direct: one graph, the same nodes by hand.
        let mut g = Graph::new();
        let mut direct = Vec::new();
        for seq in &data {
            let mut hs = Vec::new();
            for x in seq {
                let x = g.input(vector(x));
                let (wn, bn) = (g.param(&w), g.param(&b));
                let y = g.affine(bn, &[(wn, x)]).unwrap();
                hs.push(g.tanh(y).unwrap());
            }
            let s = if hs.is_empty() {
                g.input(
                    HostTensor::zeros([4], sheaf_tensor::DType::F32, sheaf_tensor::Device::Cpu)
                        .unwrap(),
                )
            } else {
                g.sum(&hs).unwrap()
            };
            direct.push(s);
        }
        let last = *direct.iter().max_by_key(|e| e.node()).unwrap();
        Sequential::new().forward(&mut g, &store, last).unwrap();
        for s in STRATEGIES {
            let mut c = Compiled::new(model.clone()).unwrap().with_strategy(s);
            assert_eq!(c.output_type(), &Ty::tensor([4]));
            let out = c.forward(&store, &data).unwrap();
            for (i, (o, d)) in out.iter().zip(&direct).enumerate() {
                assert_close(
                    &vals(o),
                    &vals(g.value(*d).unwrap()),
                    &format!("{s:?} mixed={mixed} #{i}"),
                );
            }
        }
        // One input alone gives what it gives in the batch.
        let mut c = Compiled::new(model.clone()).unwrap();
        let alone = c.forward(&store, &data[2..3]).unwrap();
        assert_close(
            &vals(&alone[0]),
            &vals(g.value(direct[2]).unwrap()),
            "alone",
        );
    }
}

/// An RNN as a Fold of its cell, trained through `Loss`: gradients equal
/// the hand-written RNN's under every strategy.
#[test]
fn fold_rnn_gradients_equal_the_direct_model() {
    let mut store = ParamStore::new();
    let mut r = rng(2);
    let wp = store
        .add_param("w", [4, 4], Init::GlorotUniform, &mut r)
        .unwrap();
    let up = store
        .add_param("u", [4, 3], Init::GlorotUniform, &mut r)
        .unwrap();
    let bp = store
        .add_param(
            "b",
            [4],
            Init::Uniform {
                low: -0.1,
                high: 0.1,
            },
            &mut r,
        )
        .unwrap();
    let params = [wp, up, bp];
    let cell = Function::new("cell", move |g: &mut Graph, (s, x): (Expr, Expr)| {
        let (w, u, b) = (g.param(&wp), g.param(&up), g.param(&bp));
        let y = g.affine(b, &[(w, s), (u, x)])?;
        g.tanh(y)
    });
    let loss = Function::new("loss", |g: &mut Graph, s: Expr| g.sum_elems(s));
    let model = Map::new(Tensor::new([3])) >> Fold::new(cell, Zeros::new([4])) >> loss;
    let data = sequences(true);

    // Direct.
    let mut g = Graph::new();
    let mut losses = Vec::new();
    for seq in &data {
        let mut s = g.input(
            HostTensor::zeros([4], sheaf_tensor::DType::F32, sheaf_tensor::Device::Cpu).unwrap(),
        );
        for x in seq {
            let x = g.input(vector(x));
            let (w, u, b) = (g.param(&wp), g.param(&up), g.param(&bp));
            let y = g.affine(b, &[(w, s), (u, x)]).unwrap();
            s = g.tanh(y).unwrap();
        }
        losses.push(g.sum_elems(s).unwrap());
    }
    let total = g.sum(&losses).unwrap();
    Sequential::new().backward(&mut g, &store, total).unwrap();
    let want_loss = vals(g.value(total).unwrap())[0];
    let want = take_grads(&mut store, &params);

    for s in STRATEGIES {
        let mut c = Compiled::new(model.clone()).unwrap().with_strategy(s);
        let l = c.backward(&store, &data, &Loss::outputs()).unwrap();
        assert_close(&[l], &[want_loss], "loss");
        let got = take_grads(&mut store, &params);
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_close(a, b, &format!("{s:?} grad {k}"));
        }
        // Mean over the batch divides by its size.
        let lm = c.backward(&store, &data, &Loss::outputs().mean()).unwrap();
        assert_close(&[lm], &[want_loss / data.len() as f32], "mean loss");
        store.zero_grads().unwrap();
    }
}

#[test]
fn reduce_is_balanced_and_sums() {
    let add = Function::new("add", |g: &mut Graph, (a, b): (Expr, Expr)| g.add(a, b));
    let model = Map::new(Scalar) >> Reduce::new(add);
    let store = ParamStore::new();
    for n in [1usize, 2, 3, 7, 8, 9] {
        let xs: Vec<f32> = (0..n).map(|i| i as f32 + 1.0).collect();
        let mut c = Compiled::new(model.clone()).unwrap();
        let out = c.forward(&store, [&xs]).unwrap();
        assert_eq!(vals(&out[0]), vec![(n * (n + 1) / 2) as f32], "n = {n}");
        // Depth of the result: ceil(log2 n) additions above the leaves.
        let root = c.build([&xs]).unwrap()[0];
        let depth = c.graph().node(root.node()).depth();
        let want = (n as f64).log2().ceil() as u32;
        assert_eq!(depth, want, "n = {n}");
    }
    let mut c = Compiled::new(model).unwrap();
    let err = c.forward(&store, [&Vec::<f32>::new()]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "input 0 > Reduce: cannot reduce an empty sequence"
    );
}

#[test]
fn zip_with_broadcast_stops_at_the_finite_side() {
    let mul = Function::new("mul", |g: &mut Graph, (a, b): (Expr, Expr)| g.cmult(a, b));
    let model = AllOf::new((
        Map::new(Scalar),
        InputTransform::new("first", |v: &Vec<f32>| v[0]) >> Scalar >> Broadcast::new(),
    )) >> ZipWith::new(mul)
        >> Sum::new();
    let store = ParamStore::new();
    let mut c = Compiled::new(model).unwrap();
    assert_eq!(c.output_type(), &Ty::tensor([1]));
    let out = c.forward(&store, [&vec![2.0f32, 3.0, 4.0]]).unwrap();
    // 2 * (2 + 3 + 4)
    assert_eq!(vals(&out[0]), vec![18.0]);
}

#[test]
fn zip_with_two_sequences_stops_at_the_shorter() {
    let sub = Function::new("sub", |g: &mut Graph, (a, b): (Expr, Expr)| g.sub(a, b));
    let model = Record::new((
        field("a", |p: &(Vec<f32>, Vec<f32>)| &p.0, Map::new(Scalar)),
        field("b", |p: &(Vec<f32>, Vec<f32>)| &p.1, Map::new(Scalar)),
    )) >> ZipWith::new(sub);
    let store = ParamStore::new();
    let mut c = Compiled::new(model).unwrap();
    let out = c
        .forward(&store, [&(vec![5.0f32, 6.0, 7.0], vec![1.0f32, 1.0])])
        .unwrap();
    let got: Vec<Vec<f32>> = out[0].iter().map(vals).collect();
    assert_eq!(got, vec![vec![4.0], vec![5.0]]);
}

struct Word {
    text: String,
    id: Option<u32>,
}

#[test]
fn record_optional_embedding_concat() {
    let mut store = ParamStore::new();
    let emb = Embedding::new(
        &mut store,
        "emb",
        5,
        2,
        Init::Uniform {
            low: -1.0,
            high: 1.0,
        },
        &mut rng(3),
    )
    .unwrap();
    let table = vals(store.value(&emb.table()).unwrap());
    let model = Record::new((
        field("id", |w: &Word| &w.id, Optional::new(emb)),
        field(
            "len",
            |w: &Word| &w.text,
            InputTransform::new("len", |s: &String| s.len() as f32) >> Scalar,
        ),
    )) >> Concat::new();
    let words = [
        Word {
            text: "abc".into(),
            id: Some(4),
        },
        Word {
            text: "hello".into(),
            id: None,
        },
    ];
    for s in STRATEGIES {
        let mut c = Compiled::new(model.clone()).unwrap().with_strategy(s);
        assert_eq!(c.output_type(), &Ty::tensor([3]));
        let out = c.forward(&store, &words).unwrap();
        assert_eq!(vals(&out[0]), vec![table[8], table[9], 3.0]);
        assert_eq!(vals(&out[1]), vec![0.0, 0.0, 5.0]);
    }
}

#[derive(Clone)]
enum Tree {
    Leaf(f32),
    Node(Box<Pair>),
}

#[derive(Clone)]
struct Pair {
    left: Tree,
    right: Tree,
}

/// Sum of leaves times 2 per level: recursion through a declaration.
fn tree_model() -> Reference<Tree, Expr> {
    let decl = ForwardDeclaration::<Tree, Expr>::new("tree", Ty::tensor([1]));
    let combine = Function::new("combine", |g: &mut Graph, (a, b): (Expr, Expr)| {
        let s = g.add(a, b)?;
        g.scale(s, 0.5)
    });
    let node = Record::new((
        field("left", |p: &Pair| &p.left, decl.reference()),
        field("right", |p: &Pair| &p.right, decl.reference()),
    )) >> combine;
    let tree = OneOf::new()
        .case(
            "leaf",
            |t: &Tree| match t {
                Tree::Leaf(x) => Some(x),
                _ => None,
            },
            Scalar,
        )
        .case(
            "node",
            |t: &Tree| match t {
                Tree::Node(p) => Some(&**p),
                _ => None,
            },
            node,
        );
    decl.resolve(tree).unwrap();
    decl.reference()
}

fn eval_tree(t: &Tree) -> f32 {
    match t {
        Tree::Leaf(x) => *x,
        Tree::Node(p) => 0.5 * (eval_tree(&p.left) + eval_tree(&p.right)),
    }
}

fn random_tree(seed: &mut u64, depth: u32) -> Tree {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    if depth == 0 || (*seed >> 33).is_multiple_of(3) {
        Tree::Leaf(((*seed >> 40) % 100) as f32 / 10.0)
    } else {
        Tree::Node(Box::new(Pair {
            left: random_tree(seed, depth - 1),
            right: random_tree(seed, depth - 1),
        }))
    }
}

#[test]
fn forward_declaration_recurses_over_trees() {
    let store = ParamStore::new();
    let mut seed = 7;
    let trees: Vec<Tree> = (0..20).map(|_| random_tree(&mut seed, 6)).collect();
    for s in STRATEGIES {
        let mut c = Compiled::new(tree_model()).unwrap().with_strategy(s);
        let out = c.forward(&store, &trees).unwrap();
        for (t, o) in trees.iter().zip(&out) {
            assert_close(&vals(o), &[eval_tree(t)], "tree");
        }
    }
    // Depth batching: one batch of `combine` calls (the function compiled
    // to a vertex function), or of its `add` run inline, per tree level
    // (height at most 6), whatever the number of trees.
    for (inline, op) in [(false, "combine"), (true, "add")] {
        let mut c = Compiled::new(tree_model())
            .unwrap()
            .inline_functions(inline);
        c.forward(&store, &trees).unwrap();
        let (batches, nodes) = c.stats().per_op[op];
        assert!(batches <= 6, "{batches} {op} batches for {nodes} nodes");
        assert!(
            nodes > 3 * batches,
            "{batches} {op} batches for {nodes} nodes"
        );
        if !inline {
            assert!(
                !c.stats().per_op.contains_key("add"),
                "the vertex function's add ran as a node of its own"
            );
        }
    }
}

#[test]
fn deep_recursion_grows_the_stack() {
    // A left spine 50 000 levels deep: the recursion continues on heap
    // stack segments instead of overflowing the test thread's stack.
    let mut t = Tree::Leaf(1.0);
    for _ in 0..50_000 {
        t = Tree::Node(Box::new(Pair {
            left: t,
            right: Tree::Leaf(1.0),
        }));
    }
    let store = ParamStore::new();
    let mut c = Compiled::new(tree_model())
        .unwrap()
        .with_strategy(sheaf_sched::Strategy::Agenda);
    let out = c.forward(&store, [&t]).unwrap();
    assert_close(&vals(&out[0]), &[1.0], "deep");
    // Trees drop recursively too; take it apart iteratively.
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        if let Tree::Node(p) = t {
            let Pair { left, right } = *p;
            stack.push(left);
            stack.push(right);
        }
    }
}

#[test]
fn composition_wires_a_dag() {
    let mut c = Composition::<f32, Expr>::new("triple");
    let x = c.add("x", Scalar);
    let twice = c.add(
        "twice",
        Function::new("2x", |g: &mut Graph, x: Expr| g.scale(x, 2.0)),
    );
    let sum = c.add(
        "sum",
        Function::new("add", |g: &mut Graph, (a, b): (Expr, Expr)| g.add(a, b)),
    );
    c.reads_input(&x).unwrap();
    c.reads(&twice, &x).unwrap();
    c.reads(&sum, (&x, &twice)).unwrap();
    c.output(&sum).unwrap();
    let store = ParamStore::new();
    let mut m = Compiled::new(c).unwrap();
    let out = m.forward(&store, &[1.5f32, -2.0]).unwrap();
    assert_eq!(vals(&out[0]), vec![4.5]);
    assert_eq!(vals(&out[1]), vec![-6.0]);
}

#[test]
fn metrics_are_recorded_per_input_and_train() {
    let mut store = ParamStore::new();
    let p = store.add("p", vector(&[0.5])).unwrap();
    let model = AllOf::new((
        Scalar
            >> Function::new("loss", move |g: &mut Graph, x: Expr| {
                let w = g.param(&p);
                g.squared_distance(x, w)
            })
            >> Metric::new("loss"),
        Scalar >> Metric::new("target"),
    ));
    let mut c = Compiled::new(model).unwrap();
    let l = c
        .backward(&store, &[1.0f32, 2.0], &Loss::metric("loss"))
        .unwrap();
    assert_close(&[l], &[0.25 + 2.25], "loss");
    // d/dp sum (x - p)^2 = -2 sum (x - p) = -2 * 2.0
    assert_close(&vals(&store.grad(&p).unwrap()), &[-4.0], "grad");
    c.forward(&store, &[1.0f32, 2.0]).unwrap();
    let t = c.metric("target").unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!((t[1].0, vals(&t[1].1)), (1, vec![2.0]));
    let err = c
        .backward(&store, &[1.0f32], &Loss::metric("nope"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "loss: no metric `nope` was recorded in the batch"
    );
}

#[test]
fn a_block_used_twice_shares_its_parameters() {
    let mut store = ParamStore::new();
    let fc = FC::new(&mut store, "fc", 1, 1, Activation::Identity, &mut rng(4)).unwrap();
    let n = store.len();
    let model = Scalar >> fc.clone() >> fc;
    assert_eq!(store.len(), n, "clones add no parameters");
    let (w, _) = model_params(&store);
    let mut c = Compiled::new(model).unwrap();
    let out = c.forward(&store, [&1.0f32]).unwrap();
    assert_close(&vals(&out[0]), &[w * w], "w (w x) with b = 0");
}

fn model_params(store: &ParamStore) -> (f32, f32) {
    let w = store.get("fc.w").unwrap();
    let b = store.get("fc.b").unwrap();
    (
        vals(store.value(&w).unwrap())[0],
        vals(store.value(&b).unwrap())[0],
    )
}

#[test]
fn sum_mean_max_pool_sequences_and_give_zeros_when_empty() {
    let store = ParamStore::new();
    let data: Vec<Vec<Vec<f32>>> = vec![
        vec![vec![1.0, -2.0], vec![3.0, -1.0], vec![0.5, 4.0]],
        vec![],
    ];
    let want = [
        ([4.5f32, 1.0], [1.5f32, 1.0 / 3.0], [3.0f32, 4.0]),
        ([0.0, 0.0], [0.0, 0.0], [0.0, 0.0]),
    ];
    let items = || Map::new(Tensor::new([2]));
    let mut sum = Compiled::new(items() >> Sum::new()).unwrap();
    let mut mean = Compiled::new(items() >> Mean::new()).unwrap();
    let mut max = Compiled::new(items() >> Max::new()).unwrap();
    let (s, m, x) = (
        sum.forward(&store, &data).unwrap(),
        mean.forward(&store, &data).unwrap(),
        max.forward(&store, &data).unwrap(),
    );
    for (i, (ws, wm, wx)) in want.iter().enumerate() {
        assert_close(&vals(&s[i]), ws, "sum");
        assert_close(&vals(&m[i]), wm, "mean");
        assert_close(&vals(&x[i]), wx, "max");
    }
}
