//! A batch equals its inputs run alone (Fold's `assertBuilds`): random
//! trees through a recursive model with parameters, under every strategy;
//! and a user's `Op` inside a `Function` batches like a built-in.

mod common;

use std::sync::Arc;

use common::{assert_close, rng, vals, STRATEGIES};
use proptest::prelude::*;
use sheaf_autodiff::{Attr, Backward, Expr, Forward, Op, ParamStore, ShapeError};
use sheaf_blocks::*;
use sheaf_tensor::Shape;

#[derive(Debug, Clone)]
enum Tree {
    Leaf(Vec<f32>),
    Node(Box<(Tree, Tree)>),
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop::collection::vec(-1.0f32..1.0, 3).prop_map(Tree::Leaf);
    leaf.prop_recursive(6, 40, 2, |inner| {
        (inner.clone(), inner).prop_map(|(l, r)| Tree::Node(Box::new((l, r))))
    })
}

/// A recursive network: leaves `FC(x)`, nodes `tanh(W [l; r] + b)`.
fn model(store: &mut ParamStore) -> Reference<Tree, Expr> {
    let mut r = rng(9);
    let leaf = Tensor::new([3]) >> FC::new(store, "leaf", 3, 4, Activation::Tanh, &mut r).unwrap();
    let combine = Concat::<(Expr, Expr)>::new()
        >> FC::new(store, "node", 8, 4, Activation::Tanh, &mut r).unwrap();
    let decl = ForwardDeclaration::<Tree, Expr>::new("tree", Ty::tensor([4]));
    let node = Record::new((
        field("left", |p: &(Tree, Tree)| &p.0, decl.reference()),
        field("right", |p: &(Tree, Tree)| &p.1, decl.reference()),
    )) >> combine;
    let t = OneOf::new()
        .case(
            "leaf",
            |t: &Tree| match t {
                Tree::Leaf(x) => Some(x),
                _ => None,
            },
            leaf,
        )
        .case(
            "node",
            |t: &Tree| match t {
                Tree::Node(p) => Some(&**p),
                _ => None,
            },
            node,
        );
    decl.resolve(t).unwrap();
    decl.reference()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_batch_equals_its_inputs_alone(trees in prop::collection::vec(tree(), 1..8)) {
        let mut store = ParamStore::new();
        let m = model(&mut store);
        let mut alone = Compiled::new(m.clone()).unwrap().with_strategy(sheaf_sched::Strategy::Sequential);
        let want: Vec<Vec<f32>> = trees
            .iter()
            .map(|t| vals(&alone.forward(&store, [t]).unwrap()[0]))
            .collect();
        for s in STRATEGIES {
            let mut c = Compiled::new(m.clone()).unwrap().with_strategy(s);
            let got = c.forward(&store, &trees).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_close(&vals(g), w, &format!("{s:?} tree {i}"));
            }
        }
    }
}

/// `y = x * x` elementwise, through the public `Op` trait.
struct Square;

impl Op for Square {
    fn name(&self) -> &'static str {
        "square"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [x] => Ok(*x),
            _ => Err(ShapeError::expected("one argument")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let x = cx.args[0].as_slice::<f32>()?;
        let out = cx.out.into_mut_slice::<f32>()?;
        out.iter_mut().zip(x).for_each(|(o, x)| *o = x * x);
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let (x, dy) = (cx.args[0].as_slice::<f32>()?, cx.dout.as_slice::<f32>()?);
        if let Some(dx) = cx.dargs[0].as_mut() {
            let dx = dx.as_mut_slice::<f32>()?;
            for ((d, x), g) in dx.iter_mut().zip(x).zip(dy) {
                *d += 2.0 * x * g;
            }
        }
        Ok(())
    }
}

#[test]
fn a_user_op_in_a_function_batches() {
    let op: Arc<dyn Op> = Arc::new(Square);
    let model = Map::new(Scalar >> Function::op(&op, 0)) >> Sum::new();
    let store = ParamStore::new();
    let batch = vec![vec![1.0f32, 2.0], vec![3.0], vec![0.5, 0.5, 0.5]];
    let mut c = Compiled::new(model)
        .unwrap()
        .with_strategy(sheaf_sched::Strategy::Depth);
    assert_eq!(c.output_type(), &Ty::tensor([1]));
    let out = c.forward(&store, &batch).unwrap();
    let got: Vec<f32> = out.iter().map(|t| vals(t)[0]).collect();
    assert_eq!(got, vec![5.0, 9.0, 0.75]);
    // All six squares ran as one kernel call.
    assert_eq!(c.stats().per_op["square"], (1, 6));
}
