//! Batches of many-argument nodes (a loss summed over every node of a
//! tree) are stacked as one block, forward and backward (`block.rs`), or,
//! for sums of rows of one batch's output (or of inputs), added where the
//! terms lie (`summed.rs`). They
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
    for with_param in [true, false] {
        check_all(
            &mut store,
            |g| build(g, &m, with_param),
            "many-argument sums",
        );
    }
}

/// Sums whose terms all lie in one batch's output (the first steps of
/// several chains, in any order, one of them twice) or are all inputs,
/// and the sum of the losses: added where the terms lie (`summed.rs`).
fn build_in_place(g: &mut Graph, m: &Model) -> Expr {
    let mut rng = Lcg(13);
    let (w, b) = (g.param(&m.w), g.param(&m.b));
    let xs: Vec<Expr> = (0..12)
        .map(|_| g.input(tensor(&mut rng, &[D], 1.0)))
        .collect();
    let first: Vec<Expr> = xs
        .iter()
        .map(|&x| {
            let a = g.affine(b, &[(w, x)]).unwrap();
            g.tanh(a).unwrap()
        })
        .collect();
    let losses: Vec<Expr> = (0..12)
        .map(|i| {
            let mut terms = vec![first[i], first[(i + 5) % 12], first[i]];
            terms.extend((0..i % 3).map(|k| first[(i + 7 * k + 1) % 12]));
            let s = g.sum(&terms).unwrap();
            let inputs = g.sum(&[xs[(i + 1) % 12], xs[i]]).unwrap();
            let both = g.add(s, inputs).unwrap();
            let t = g.tanh(both).unwrap();
            g.sum_elems(t).unwrap()
        })
        .collect();
    g.sum(&losses).unwrap()
}

/// The terms a forward and backward of `build`'s graph with `strategy`
/// added in place.
fn summed_in_place(
    store: &ParamStore,
    strategy: Strategy,
    build: impl Fn(&mut Graph) -> Expr,
) -> usize {
    let mut g = Graph::new();
    let loss = build(&mut g);
    let mut exec = Executor::new(strategy);
    exec.forward(&mut g, store, loss).unwrap();
    exec.backward(&mut g, store, loss).unwrap();
    exec.stats().summed_in_place
}

#[test]
fn sums_added_in_place_equal_the_reference() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    check_all(&mut store, |g| build_in_place(g, &m), "sums in place");
    // The first steps' sums (3 + i % 3 terms), the inputs' (2), the
    // losses' (12).
    let terms: usize = (0..12).map(|i| 3 + i % 3 + 2).sum::<usize>() + 12;
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let summed = summed_in_place(&store, strategy, |g| build_in_place(g, &m));
        assert_eq!(summed, terms, "{strategy:?}");
    }
    // Terms from several batches (and inputs) are stacked instead: under
    // Agenda only the losses' sum (its terms one batch) is added in place.
    let summed = summed_in_place(&store, Strategy::Agenda, |g| build(g, &m, false));
    assert_eq!(summed, 12);
}

/// A sum in place adds each sum's terms in argument order, as the op
/// does: terms of very different sizes (where the order shows in the
/// bits) give every sum bit for bit what the sequential executor gives.
#[test]
fn sums_in_place_add_in_argument_order() {
    let values = [1e8f32, 1.0, -1e8, 1.0, 3e-8, -1.0];
    let build = |g: &mut Graph| {
        let xs: Vec<Expr> = values
            .iter()
            .map(|&v| g.input(sheaf_tensor::Tensor::from_vec(vec![v; D], [D]).unwrap()))
            .collect();
        // Sums of 4 terms, each a rotation of the inputs: one batch.
        let sums: Vec<Expr> = (0..values.len())
            .map(|r| {
                let terms: Vec<Expr> = (0..4).map(|k| xs[(r + k) % xs.len()]).collect();
                g.sum(&terms).unwrap()
            })
            .collect();
        let each: Vec<Expr> = sums.iter().map(|&s| g.sum_elems(s).unwrap()).collect();
        (sums, g.sum(&each).unwrap())
    };
    let store = ParamStore::new();
    let values_of = |g: &Graph, sums: &[Expr]| -> Vec<Vec<f32>> {
        sums.iter()
            .map(|&s| g.value(s).unwrap().to_vec::<f32>().unwrap())
            .collect()
    };
    let mut g = Graph::new();
    let (sums, loss) = build(&mut g);
    sheaf_autodiff::Sequential::new()
        .forward(&mut g, &store, loss)
        .unwrap();
    let reference = values_of(&g, &sums);
    for strategy in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut g = Graph::new();
        let (sums, loss) = build(&mut g);
        let mut exec = Executor::new(strategy);
        exec.forward(&mut g, &store, loss).unwrap();
        assert!(
            exec.stats().summed_in_place >= 4 * values.len(),
            "{strategy:?}"
        );
        assert_eq!(values_of(&g, &sums), reference, "{strategy:?}");
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
    // Terms from several batches and a parameter (stacked as blocks), and
    // terms from one batch (added where they lie).
    let runs = [
        Run::Device(Some(Strategy::Agenda), gpu),
        Run::Device(Some(Strategy::Depth), gpu),
    ];
    check_runs(
        &mut store,
        |g| build(g, &m, true),
        &runs,
        "many-argument sums on the GPU",
    );
    check_runs(
        &mut store,
        |g| build_in_place(g, &m),
        &runs,
        "sums in place on the GPU",
    );
}
