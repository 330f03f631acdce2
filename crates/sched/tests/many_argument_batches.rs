//! Batches of many-argument nodes (a loss summed over every node of a
//! tree) are stacked as one block, forward and backward (`block.rs`), or,
//! for sums of batch outputs and inputs, added where the terms lie
//! (`summed.rs`). They
//! must equal the unbatched reference on every node value and gradient and
//! every parameter gradient, whatever the terms are: results of different
//! batches, at different depths, in any order, the same node twice in one
//! sum, a parameter, a graph input; and the sums themselves of several
//! arities. Also on a GPU (skipped without one), against the CPU.

mod common;

use common::{check_all, check_runs, tensor, Lcg, Run};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sheaf_autodiff::{Attr, Backward, Expr, Forward, Graph, Op, Param, ParamStore, ShapeError};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Shape;

const D: usize = 4;

struct Model {
    w: Param,
    u: Param,
    b: Param,
    v: Param,
}

fn model(store: &mut ParamStore) -> Model {
    let mut rng = Lcg(3);
    let mut add =
        |name: &str, shape: &[usize]| store.add(name, tensor(&mut rng, shape, 0.5)).unwrap();
    Model {
        w: add("w", &[D, D]),
        u: add("u", &[D, D]),
        b: add("b", &[D]),
        v: add("v", &[D]),
    }
}

/// Instance `i`: a chain of `3 + i % 4` tanh-affine steps from an input,
/// and a sum of terms taken from every depth of it (reversed for odd `i`,
/// so the columns of one batch come from different batches), the first
/// step twice, the input itself and (`with_param`) the parameter `v`; 3 + i % 3
/// terms, one more with `v` (so sums of several arities batch apart).
fn instance(g: &mut Graph, m: &Model, i: usize, rng: &mut Lcg, with_param: bool) -> Expr {
    let x = g.input(tensor(rng, &[D], 1.0));
    let (w, u, b, v) = (g.param(&m.w), g.param(&m.u), g.param(&m.b), g.param(&m.v));
    let mut chain = Vec::new();
    let mut h = x;
    for step in 0..3 + i % 4 {
        let wx = if step % 2 == 0 { w } else { u };
        let a = g.affine(b, &[(wx, h)]).unwrap();
        h = g.tanh(a).unwrap();
        chain.push(h);
    }
    if i % 2 == 1 {
        chain.reverse();
    }
    let mut terms = vec![chain[0], chain[0], x];
    if with_param {
        terms.push(v);
    }
    terms.extend(chain.iter().skip(1).take(i % 3));
    let s = g.sum(&terms).unwrap();
    let t = g.tanh(s).unwrap();
    g.sum_elems(t).unwrap()
}

fn build(g: &mut Graph, m: &Model, with_param: bool) -> Expr {
    let mut rng = Lcg(11);
    let losses: Vec<Expr> = (0..12)
        .map(|i| instance(g, m, i, &mut rng, with_param))
        .collect();
    g.sum(&losses).unwrap()
}

#[test]
fn many_argument_sums_equal_the_reference() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    check_all(&mut store, |g| build(g, &m, true), "many-argument sums");
}

/// Sums whose terms are all batch outputs or inputs (several batches in
/// one sum, in any order, a node twice) are added where the terms lie,
/// forward and backward, and equal the reference.
#[test]
fn sums_added_in_place_equal_the_reference() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    check_all(&mut store, |g| build(g, &m, false), "sums in place");
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut g = Graph::new();
        let loss = build(&mut g, &m, false);
        let mut exec = Executor::new(strategy);
        exec.forward(&mut g, &store, loss).unwrap();
        exec.backward(&mut g, &store, loss).unwrap();
        // Every term of the 12 instances' sums (3 + i % 3 each) and the
        // 12 losses.
        let terms: usize = (0..12).map(|i| 3 + i % 3).sum::<usize>() + 12;
        assert_eq!(exec.stats().summed_in_place, terms, "{strategy:?}");
    }
}

/// A user's op of many terms (a weighted sum, `sum_j (j + 1) · x_j`) that
/// takes the block forms, counting when it gets them.
struct WeightedSum;

static BLOCK_FORWARDS: AtomicUsize = AtomicUsize::new(0);
static BLOCK_BACKWARDS: AtomicUsize = AtomicUsize::new(0);

impl Op for WeightedSum {
    fn name(&self) -> &'static str {
        "weighted_sum"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [first, rest @ ..] if rest.iter().all(|s| s == first) => Ok(*first),
            _ => Err(ShapeError::expected("arguments of one shape")),
        }
    }
    fn grads_as_block(&self) -> bool {
        true
    }
    fn forward(&self, mut cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        if let Some(block) = cx.block {
            BLOCK_FORWARDS.fetch_add(1, Ordering::Relaxed);
            // The block's rows j·b.. are argument j: read them from it.
            let b = cx.out.num_rows();
            cx.backend.fill(0.0, cx.out.reborrow())?;
            for j in 0..cx.args.len() {
                let x = block
                    .rows(j * b..(j + 1) * b)?
                    .reshape(cx.args[j].shape())?;
                cx.backend.axpy((j + 1) as f32, &x, cx.out.reborrow())?;
            }
            return Ok(());
        }
        cx.backend.fill(0.0, cx.out.reborrow())?;
        for (j, x) in cx.args.iter().enumerate() {
            cx.backend.axpy((j + 1) as f32, x, cx.out.reborrow())?;
        }
        Ok(())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let b = cx.dout.num_rows();
        if let Some(mut block) = cx.take_grad_block() {
            BLOCK_BACKWARDS.fetch_add(1, Ordering::Relaxed);
            assert!(cx.dargs.iter().all(Option::is_none), "dargs beside a block");
            // Unspecified values (NaN in debug builds): written, every row.
            for j in 0..cx.args.len() {
                let mut d = block
                    .rows_mut(j * b..(j + 1) * b)?
                    .reshape(cx.dout.shape())?;
                cx.backend.fill(0.0, d.reborrow())?;
                cx.backend.axpy((j + 1) as f32, cx.dout, d)?;
            }
            return Ok(());
        }
        for (j, d) in cx.dargs.iter_mut().enumerate() {
            if let Some(d) = d {
                cx.backend.axpy((j + 1) as f32, cx.dout, d.reborrow())?;
            }
        }
        Ok(())
    }
}

/// The block forms reach an op that takes them, and give the reference's
/// results; sums of one node (nothing to stack) take the plain forms.
#[test]
fn an_op_taking_the_block_forms_equals_the_reference() {
    let op: Arc<dyn Op> = Arc::new(WeightedSum);
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let build = |g: &mut Graph| {
        let mut rng = Lcg(5);
        let losses: Vec<Expr> = (0..8)
            .map(|i| {
                let x = g.input(tensor(&mut rng, &[D], 1.0));
                let (w, b, v) = (g.param(&m.w), g.param(&m.b), g.param(&m.v));
                let mut terms = vec![v, x];
                let mut h = x;
                for _ in 0..2 + i % 3 {
                    let a = g.affine(b, &[(w, h)]).unwrap();
                    h = g.tanh(a).unwrap();
                    terms.push(h);
                }
                terms.truncate(4);
                if i % 2 == 1 {
                    terms.reverse();
                }
                let s = g.apply(&op, &terms, 0).unwrap();
                g.sum_elems(s).unwrap()
            })
            .collect();
        g.sum(&losses).unwrap()
    };
    BLOCK_FORWARDS.store(0, Ordering::Relaxed);
    BLOCK_BACKWARDS.store(0, Ordering::Relaxed);
    check_all(&mut store, build, "a user's op of many terms");
    assert!(
        BLOCK_FORWARDS.load(Ordering::Relaxed) > 0,
        "no forward got the block"
    );
    assert!(
        BLOCK_BACKWARDS.load(Ordering::Relaxed) > 0,
        "no backward got the block"
    );
}

#[test]
fn many_argument_sums_on_the_gpu_equal_the_cpu() {
    let Some(gpu) = common::gpu() else { return };
    let mut store = ParamStore::new();
    let m = model(&mut store);
    // With the parameter among the terms (stacked as blocks) and
    // without (added where they lie).
    for with_param in [true, false] {
        check_runs(
            &mut store,
            |g| build(g, &m, with_param),
            &[
                Run::Device(Some(Strategy::Agenda), gpu),
                Run::Device(Some(Strategy::Depth), gpu),
            ],
            "many-argument sums on the GPU",
        );
    }
}
