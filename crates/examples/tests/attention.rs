//! Feed-forward attention written with blocks equals the same model on the
//! graph from `sheaf-nn` layers (loss and every gradient) under every
//! strategy, and that equals the raw-op model it replaced; training on the
//! addition problem lowers the loss.

mod common;

use common::{close_to, take_grads};
use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{Adam, Expr, Graph, GraphError, Optimizer, Param, ParamStore};
use sheaf_blocks::{Compiled, Loss};
use sheaf_examples::attention::{Addition, Attention, AttentionNn};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::Tensor;

#[test]
fn addition_data_has_two_markers() {
    let mut rng = StdRng::seed_from_u64(1);
    for x in Addition::dataset(50, 5, 9, &mut rng) {
        assert!((5..=9).contains(&x.steps.len()));
        let marked: Vec<f32> = x
            .steps
            .iter()
            .filter(|s| s[1] == 1.0)
            .map(|s| s[0])
            .collect();
        assert_eq!(marked.len(), 2);
        assert!((marked[0] + marked[1] - x.target).abs() < 1e-6);
    }
}

/// The direct model as written before `sheaf-nn`, on raw graph ops over
/// the blocks model's parameters: the reference the layers' model must
/// equal.
fn reference(m: &Attention, g: &mut Graph, x: &Addition) -> Result<(Expr, Expr), GraphError> {
    let p: Vec<Expr> = m.params().iter().map(|p| g.param(p)).collect();
    let dense = |g: &mut Graph, k: usize, x: Expr| g.affine(p[2 * k + 1], &[(p[2 * k], x)]);
    let mut hs = Vec::with_capacity(x.steps.len());
    for step in &x.steps {
        let v = g.input(Tensor::from_slice(step, [2]).unwrap());
        let y = dense(g, 0, v)?;
        hs.push(g.relu(y)?);
    }
    let mut es = Vec::with_capacity(hs.len());
    for &h in &hs {
        let e = dense(g, 1, h)?;
        es.push(g.tanh(e)?);
    }
    let e = g.concat(&es)?;
    let alpha = g.softmax(e)?;
    let mut terms = Vec::with_capacity(hs.len());
    for (t, &h) in hs.iter().enumerate() {
        let a = g.pick(alpha, t as u32)?;
        terms.push(g.scale_by(h, a)?);
    }
    let c = g.sum(&terms)?;
    let hidden = dense(g, 2, c)?;
    let hidden = g.relu(hidden)?;
    let y = dense(g, 3, hidden)?;
    let t = g.input(Tensor::from_slice(&[x.target], [1]).unwrap());
    Ok((y, g.squared_distance(y, t)?))
}

/// The blocks model, the layers' model given its values, and data.
fn models(
    hidden: usize,
) -> (
    Attention,
    ParamStore,
    AttentionNn,
    ParamStore,
    Vec<Addition>,
) {
    let mut rng = StdRng::seed_from_u64(2);
    let (mut bs, mut ns) = (ParamStore::new(), ParamStore::new());
    let m = Attention::new(&mut bs, hidden, &mut rng).unwrap();
    let nn = AttentionNn::new(&mut ns, hidden, 5).unwrap();
    nn.copy_from(&mut ns, &m, &bs).unwrap();
    (m, bs, nn, ns, Addition::dataset(7, 3, 8, &mut rng))
}

/// The summed loss of `data` by `build` run under `strategy`, and every
/// gradient of `params` (taken from the store).
fn run(
    strategy: Strategy,
    store: &mut ParamStore,
    params: &[Param],
    data: &[Addition],
    build: impl Fn(&mut Graph, &Addition) -> Result<(Expr, Expr), GraphError>,
) -> (f32, Vec<Vec<f32>>) {
    let mut g = Graph::new();
    let losses: Vec<_> = data.iter().map(|x| build(&mut g, x).unwrap().1).collect();
    let total = g.sum(&losses).unwrap();
    let mut exec = Executor::new(strategy);
    let loss = exec
        .forward(&mut g, store, total)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()[0];
    exec.backward(&mut g, store, total).unwrap();
    (loss, take_grads(store, params))
}

#[test]
fn blocks_equal_the_direct_model() {
    let (m, mut bs, nn, mut ns, data) = models(6);
    let (want_loss, want) = run(
        Strategy::Sequential,
        &mut ns,
        &nn.params(),
        &data,
        |g, x| nn.direct(g, x),
    );
    assert!(
        want.iter().all(|g| g.iter().any(|&x| x != 0.0)),
        "every parameter gets a gradient"
    );

    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let mut c = Compiled::new(m.blocks()).unwrap().with_strategy(s);
        let loss = c.backward(&bs, &data, &Loss::outputs()).unwrap();
        close_to(1e-5, &[loss], &[want_loss], &format!("{s:?} loss"));
        for (k, (a, b)) in take_grads(&mut bs, &m.params())
            .iter()
            .zip(&want)
            .enumerate()
        {
            close_to(1e-5, a, b, &format!("{s:?} gradient of parameter {k}"));
        }
    }
}

/// The layers' model, given the blocks model's values, equals the raw-op
/// model it replaced (on those values) in loss and every gradient, under
/// every strategy.
#[test]
fn layers_model_equals_the_raw_op_reference() {
    let (m, mut bs, nn, mut ns, data) = models(6);
    let (want_loss, want) = run(Strategy::Sequential, &mut bs, &m.params(), &data, |g, x| {
        reference(&m, g, x)
    });
    assert_eq!(want.len(), 8);
    assert!(want.iter().all(|g| g.iter().any(|&x| x != 0.0)));
    for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
        let (loss, got) = run(s, &mut ns, &nn.params(), &data, |g, x| nn.direct(g, x));
        close_to(1e-5, &[loss], &[want_loss], &format!("{s:?} loss"));
        assert_eq!(got.len(), want.len());
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            close_to(1e-5, a, b, &format!("{s:?} gradient of parameter {k}"));
        }
    }
}

#[test]
fn training_lowers_the_loss() {
    let mut rng = StdRng::seed_from_u64(3);
    let mut store = ParamStore::new();
    let m = Attention::new(&mut store, 16, &mut rng).unwrap();
    let data = Addition::dataset(32, 6, 10, &mut rng);
    let mut c = Compiled::new(m.blocks())
        .unwrap()
        .with_strategy(Strategy::Agenda);
    let mut opt = Optimizer::adam(Adam {
        lr: 1e-2,
        ..Adam::default()
    });
    let first = c.backward(&store, &data, &Loss::outputs().mean()).unwrap();
    opt.step(&mut store).unwrap();
    let mut last = first;
    for _ in 0..60 {
        last = c.backward(&store, &data, &Loss::outputs().mean()).unwrap();
        opt.step(&mut store).unwrap();
    }
    assert!(last < 0.5 * first, "{first} -> {last}");
}
