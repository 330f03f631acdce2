//! Initializers and optimizers: training an elementwise MLP on XOR with
//! each rule, lazy sparse-row updates of lookup tables, clipping by global
//! norm, weight decay and learning-rate changes.

mod common;

use std::sync::Arc;

use common::{vec_t, Lookup};
use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{
    Adagrad, Adam, Expr, Graph, Init, Op, Optimizer, Param, ParamStore, Sequential, Sgd,
};
use sheaf_tensor::{Shape, Tensor};

fn vals(store: &ParamStore, p: &Param) -> Vec<f32> {
    store.value(p).unwrap().to_vec::<f32>().unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

// ----- initializers -----

#[test]
fn initializers_are_seeded_bounded_and_checked() {
    let draw = |init: Init, seed| {
        init.tensor([30, 20], &mut StdRng::seed_from_u64(seed))
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    let g = draw(Init::GlorotUniform, 7);
    assert_eq!(bits(&g), bits(&draw(Init::GlorotUniform, 7)));
    assert_ne!(bits(&g), bits(&draw(Init::GlorotUniform, 8)));
    let limit = (6.0f32 / 50.0).sqrt();
    assert!(g.iter().all(|v| v.abs() <= limit));
    assert!(g.iter().any(|v| v.abs() > 0.9 * limit));

    let u = draw(
        Init::Uniform {
            low: 2.0,
            high: 3.0,
        },
        1,
    );
    assert!(u.iter().all(|v| (2.0..=3.0).contains(v)));
    assert!(draw(Init::Zeros, 1).iter().all(|&v| v == 0.0));
    assert!(draw(Init::Const(1.5), 1).iter().all(|&v| v == 1.5));

    let n = Init::Normal {
        mean: 1.0,
        std: 2.0,
    }
    .tensor([20001], &mut StdRng::seed_from_u64(3))
    .unwrap()
    .to_vec::<f32>()
    .unwrap();
    let mean = n.iter().map(|&v| v as f64).sum::<f64>() / n.len() as f64;
    let var = n.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n.len() as f64;
    assert!((mean - 1.0).abs() < 0.05, "mean {mean}");
    assert!((var.sqrt() - 2.0).abs() < 0.05, "std {}", var.sqrt());

    let err = Init::Uniform {
        low: 1.0,
        high: 0.0,
    }
    .tensor([2], &mut StdRng::seed_from_u64(0))
    .unwrap_err();
    assert!(err.to_string().contains("low <= high"), "{err}");

    let mut store = ParamStore::new();
    let mut rng = StdRng::seed_from_u64(0);
    let w = store
        .add_param("w", [3, 4], Init::GlorotUniform, &mut rng)
        .unwrap();
    let e = store
        .add_lookup(
            "emb",
            10,
            4,
            Init::Normal {
                mean: 0.0,
                std: 0.1,
            },
            &mut rng,
        )
        .unwrap();
    assert!(!w.is_table() && e.is_table());
    assert_eq!(e.shape(), Shape::from([10, 4]));
}

#[test]
fn seeded_constructors_draw_what_a_seeded_generator_of_the_reexported_rand_draws() {
    use sheaf_autodiff::rand::{rngs::StdRng as Std, SeedableRng as _};
    let mut store = ParamStore::new();
    let init = Init::Normal {
        mean: 0.0,
        std: 1.0,
    };
    let a = store
        .add_param("a", [5, 3], init, &mut Std::seed_from_u64(9))
        .unwrap();
    let b = store.add_param_seeded("b", [5, 3], init, 9).unwrap();
    let c = store.add_param_seeded("c", [5, 3], init, 10).unwrap();
    assert_eq!(vals(&store, &a), vals(&store, &b));
    assert_ne!(vals(&store, &a), vals(&store, &c));
    let t = store.add_lookup_seeded("t", 4, 2, init, 9).unwrap();
    assert!(t.is_table());
    assert_eq!(vals(&store, &t), vals(&store, &a)[..8].to_vec());
}

// ----- XOR with an elementwise MLP -----

const HIDDEN: usize = 6;

struct Mlp {
    w: Vec<Param>,
    b: Vec<Param>,
    v: Vec<Param>,
    c: Param,
}

fn mlp(store: &mut ParamStore, seed: u64) -> Mlp {
    let mut rng = StdRng::seed_from_u64(seed);
    let u = Init::Uniform {
        low: -1.0,
        high: 1.0,
    };
    let mut p = |name: String, n: usize| store.add_param(&name, [n], u, &mut rng).unwrap();
    Mlp {
        w: (0..HIDDEN).map(|j| p(format!("w{j}"), 2)).collect(),
        b: (0..HIDDEN).map(|j| p(format!("b{j}"), 1)).collect(),
        v: (0..HIDDEN).map(|j| p(format!("v{j}"), 1)).collect(),
        c: p("c".into(), 1),
    }
}

/// Sum over the four XOR cases of (y - t)^2, y = c + sum_j v_j tanh(w_j . x + b_j).
fn xor_loss(g: &mut Graph, m: &Mlp) -> Expr {
    let cases = [
        ([0.0, 0.0], 0.0),
        ([0.0, 1.0], 1.0),
        ([1.0, 0.0], 1.0),
        ([1.0, 1.0], 0.0),
    ];
    let mut total = None;
    for (x, target) in cases {
        let x = g.input(vec_t(&x));
        let mut y = g.param(&m.c);
        for j in 0..HIDDEN {
            let w = g.param(&m.w[j]);
            let b = g.param(&m.b[j]);
            let v = g.param(&m.v[j]);
            let wx = g.cmult(w, x).unwrap();
            let u = g.sum_elems(wx).unwrap();
            let u = g.add(u, b).unwrap();
            let h = g.tanh(u).unwrap();
            let o = g.cmult(v, h).unwrap();
            y = g.add(y, o).unwrap();
        }
        let tt = g.input(vec_t(&[target]));
        let d = g.sub(y, tt).unwrap();
        let l = g.cmult(d, d).unwrap();
        total = Some(match total {
            None => l,
            Some(s) => g.add(s, l).unwrap(),
        });
    }
    total.unwrap()
}

fn train_xor(mut opt: Optimizer, steps: usize) -> f32 {
    let mut store = ParamStore::new();
    let m = mlp(&mut store, 42);
    let exec = Sequential::new();
    let mut g = Graph::new();
    let mut last = f32::NAN;
    for _ in 0..steps {
        let loss = xor_loss(&mut g, &m);
        exec.backward(&mut g, &store, loss).unwrap();
        last = g.value(loss).unwrap().to_vec::<f32>().unwrap()[0];
        g.clear();
        opt.step(&mut store).unwrap();
    }
    assert_eq!(opt.steps(), steps as u64);
    assert_eq!(opt.shared_copies(), 0, "updated in place");
    last
}

#[test]
fn updates_count_the_parameters_they_had_to_copy() {
    // A graph lets go of parameters when backward is done: updating before
    // clearing it copies nothing. A clone of a value kept by the user
    // still shares its buffer: that parameter is copied (counted, warned
    // about once), and the clone keeps the old values.
    let mut store = ParamStore::new();
    let m = mlp(&mut store, 42);
    let exec = Sequential::new();
    let mut opt = Optimizer::sgd(Sgd {
        lr: 0.1,
        momentum: 0.0,
        weight_decay: 0.0,
    });
    let mut g = Graph::new();
    let loss = xor_loss(&mut g, &m);
    exec.backward(&mut g, &store, loss).unwrap();
    let before = vals(&store, &m.c);
    opt.step(&mut store).unwrap();
    assert_eq!(opt.shared_copies(), 0, "the graph held no parameter");
    assert_ne!(vals(&store, &m.c), before, "updated");
    g.clear();

    let kept = store.value(&m.c).unwrap().clone();
    let kept_values = kept.to_vec::<f32>().unwrap();
    let loss = xor_loss(&mut g, &m);
    exec.backward(&mut g, &store, loss).unwrap();
    opt.step(&mut store).unwrap();
    assert_eq!(opt.shared_copies(), 1, "only the kept parameter copied");
    assert_eq!(
        kept.to_vec::<f32>().unwrap(),
        kept_values,
        "the clone kept its values"
    );
    assert_ne!(vals(&store, &m.c), kept_values, "the store's value updated");
}

#[test]
fn sgd_with_momentum_learns_xor() {
    let loss = train_xor(
        Optimizer::sgd(Sgd {
            lr: 0.02,
            momentum: 0.9,
            weight_decay: 0.0,
        }),
        600,
    );
    assert!(loss < 0.01, "final loss {loss}");
}

#[test]
fn adagrad_learns_xor() {
    let loss = train_xor(
        Optimizer::adagrad(Adagrad {
            lr: 0.3,
            ..Adagrad::default()
        }),
        600,
    );
    assert!(loss < 0.01, "final loss {loss}");
}

#[test]
fn adam_learns_xor_with_weight_decay_and_clipping() {
    let loss = train_xor(
        Optimizer::adam(Adam {
            lr: 0.05,
            weight_decay: 1e-5,
            ..Adam::default()
        })
        .with_clip_norm(5.0),
        400,
    );
    assert!(loss < 0.01, "final loss {loss}");
}

// ----- sparse rows -----

/// loss = sum(T[2] * w) + sum(T[5] * w) + sum(T[2] * x): gradient rows
/// T[2] = w + x, T[5] = w; w's gradient T[2] + T[5].
fn sparse_backward(store: &ParamStore, table: &Param, w: &Param, rows: &[u32]) {
    let lookup: Arc<dyn Op> = Arc::new(Lookup);
    let mut g = Graph::new();
    let tb = g.param(table);
    let wv = g.param(w);
    let x = g.input(vec_t(&[0.5, -1.0, 2.0]));
    let mut total = None;
    for (k, &r) in rows.iter().enumerate() {
        let e = g.apply_with_data(&lookup, &[tb], 0, r).unwrap();
        let other = if k == 2 { x } else { wv };
        let p = g.cmult(e, other).unwrap();
        let s = g.sum_elems(p).unwrap();
        total = Some(match total {
            None => s,
            Some(a) => g.add(a, s).unwrap(),
        });
    }
    Sequential::new()
        .backward(&mut g, store, total.unwrap())
        .unwrap();
}

#[test]
fn sparse_updates_touch_only_used_rows() {
    let sgd = Sgd {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 0.01,
    };
    let opts = [
        Optimizer::sgd(sgd),
        Optimizer::adagrad(Adagrad::default()),
        Optimizer::adam(Adam::default()),
    ];
    for mut opt in opts {
        let name = opt.method().name();
        let mut store = ParamStore::new();
        let mut rng = StdRng::seed_from_u64(5);
        let table = store
            .add_lookup("emb", 8, 3, Init::GlorotUniform, &mut rng)
            .unwrap();
        let w = store
            .add_param("w", [3], Init::GlorotUniform, &mut rng)
            .unwrap();
        let before = vals(&store, &table);
        let w_before = vals(&store, &w);

        sparse_backward(&store, &table, &w, &[2, 5, 2]);
        {
            let acc = store.lock_grad(table.id(), "test").unwrap();
            assert!(!acc.dense);
            assert_eq!(acc.rows, [2, 5, 2]);
        }
        opt.step(&mut store).unwrap();
        let after = vals(&store, &table);
        for r in 0..8 {
            let (b, a) = (&before[r * 3..r * 3 + 3], &after[r * 3..r * 3 + 3]);
            if r == 2 || r == 5 {
                assert!(b.iter().zip(a).all(|(x, y)| x != y), "{name}: row {r}");
            } else {
                assert_eq!(bits(b), bits(a), "{name}: row {r} must be untouched");
            }
        }
        assert_ne!(bits(&w_before), bits(&vals(&store, &w)), "{name}");
        // State exists only on the touched rows; gradients are zeroed.
        for (buf, s) in opt.state(&table) {
            let s = s.to_vec::<f32>().unwrap();
            for r in [0, 1, 3, 4, 6, 7] {
                assert!(
                    s[r * 3..r * 3 + 3].iter().all(|&v| v == 0.0),
                    "{name} {buf}"
                );
            }
            assert!(s[6..9].iter().any(|&v| v != 0.0), "{name} {buf}");
        }
        assert!(store
            .grad(&table)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|&v| v == 0.0));
        assert!(!store.lock_grad(table.id(), "test").unwrap().is_touched());

        // Lazy: a step touching only row 5 leaves row 2 and its state as is.
        let row2 = bits(&vals(&store, &table)[6..9]);
        let state2: Vec<Vec<u32>> = opt
            .state(&table)
            .iter()
            .map(|(_, s)| bits(&s.to_vec::<f32>().unwrap()[6..9]))
            .collect();
        sparse_backward(&store, &table, &w, &[5]);
        opt.step(&mut store).unwrap();
        assert_eq!(row2, bits(&vals(&store, &table)[6..9]), "{name}");
        let state2_after: Vec<Vec<u32>> = opt
            .state(&table)
            .iter()
            .map(|(_, s)| bits(&s.to_vec::<f32>().unwrap()[6..9]))
            .collect();
        assert_eq!(state2, state2_after, "{name}");
    }
}

#[test]
fn sparse_sgd_step_matches_the_formula() {
    let mut store = ParamStore::new();
    let mut rng = StdRng::seed_from_u64(9);
    let table = store
        .add_lookup("emb", 8, 3, Init::GlorotUniform, &mut rng)
        .unwrap();
    let w = store
        .add_param("w", [3], Init::GlorotUniform, &mut rng)
        .unwrap();
    let (tv, wv) = (vals(&store, &table), vals(&store, &w));
    let (lr, wd) = (0.5f32, 0.1f32);
    let mut opt = Optimizer::sgd(Sgd {
        lr,
        momentum: 0.0,
        weight_decay: wd,
    });
    sparse_backward(&store, &table, &w, &[2, 5, 2]);
    opt.step(&mut store).unwrap();
    let x = [0.5f32, -1.0, 2.0];
    let after = vals(&store, &table);
    for c in 0..3 {
        let g2 = wv[c] + x[c];
        let want2 = tv[6 + c] - lr * (g2 + wd * tv[6 + c]);
        let g5 = wv[c];
        let want5 = tv[15 + c] - lr * (g5 + wd * tv[15 + c]);
        assert!((after[6 + c] - want2).abs() < 1e-6);
        assert!((after[15 + c] - want5).abs() < 1e-6);
    }
}

#[test]
fn a_densely_written_table_is_updated_densely() {
    let mut store = ParamStore::new();
    let table = store
        .add_table(
            "emb",
            Tensor::full_f32(1.0, [4, 2], sheaf_tensor::Device::Cpu).unwrap(),
        )
        .unwrap();
    let mut g = Graph::new();
    let tb = g.param(&table);
    let sq = g.cmult(tb, tb).unwrap();
    let loss = g.sum_elems(sq).unwrap();
    Sequential::new().backward(&mut g, &store, loss).unwrap();
    let mut opt = Optimizer::sgd(Sgd {
        lr: 0.25,
        ..Sgd::default()
    });
    opt.step(&mut store).unwrap();
    // d/dT sum(T*T) = 2T = 2, so every element becomes 1 - 0.25 * 2.
    assert!(vals(&store, &table).iter().all(|&v| v == 0.5));
}

// ----- clipping, weight decay, learning rate -----

#[test]
fn clipping_scales_gradients_to_the_global_norm() {
    let mut store = ParamStore::new();
    let table = store
        .add_table(
            "emb",
            Tensor::full_f32(1.0, [6, 2], sheaf_tensor::Device::Cpu).unwrap(),
        )
        .unwrap();
    let w = store.add("w", vec_t(&[1.0, 1.0])).unwrap();
    let build = |store: &ParamStore| {
        let lookup: Arc<dyn Op> = Arc::new(Lookup);
        let mut g = Graph::new();
        let tb = g.param(&table);
        let e = g.apply_with_data(&lookup, &[tb], 0, 1).unwrap();
        let e = g.scale(e, 3.0).unwrap();
        let a = g.sum_elems(e).unwrap();
        let wv = g.param(&w);
        let x = g.input(vec_t(&[4.0, 0.0]));
        let p = g.cmult(wv, x).unwrap();
        let b = g.sum_elems(p).unwrap();
        let loss = g.add(a, b).unwrap();
        Sequential::new().backward(&mut g, store, loss).unwrap();
        // Junk in an untouched row of the table's gradient must not count.
        let mut acc = store.lock_grad(table.id(), "test").unwrap();
        acc.grad.as_mut_slice::<f32>().unwrap()[6..8].fill(100.0);
    };
    // Gradients: table row 1 = [3, 3], w = [4, 0]; norm sqrt(34).
    let norm = 34f32.sqrt();
    let mut opt = Optimizer::sgd(Sgd {
        lr: 1.0,
        ..Sgd::default()
    })
    .with_clip_norm(1.0);
    build(&store);
    opt.step(&mut store).unwrap();
    assert!((opt.last_grad_norm().unwrap() - norm).abs() < 1e-5);
    let tv = vals(&store, &table);
    let wv = vals(&store, &w);
    let moved: f32 = tv
        .iter()
        .chain(&wv)
        .zip(std::iter::repeat_n(&1.0f32, 14))
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f32>()
        .sqrt();
    assert!((moved - 1.0).abs() < 1e-5, "update norm {moved}");
    assert!((tv[2] - (1.0 - 3.0 / norm)).abs() < 1e-6);
    assert!((wv[0] - (1.0 - 4.0 / norm)).abs() < 1e-6 && wv[1] == 1.0);
    assert!(tv[6..8].iter().all(|&v| v == 1.0), "untouched row moved");

    // Below the threshold nothing is scaled.
    let mut opt = Optimizer::sgd(Sgd {
        lr: 1.0,
        ..Sgd::default()
    })
    .with_clip_norm(100.0);
    let before = vals(&store, &w);
    build(&store);
    opt.step(&mut store).unwrap();
    assert_eq!(vals(&store, &w)[0], before[0] - 4.0);

    // A non-finite norm under clipping is an error and changes nothing.
    build(&store);
    store
        .lock_grad(w.id(), "test")
        .unwrap()
        .grad
        .as_mut_slice::<f32>()
        .unwrap()[1] = f32::NAN;
    let before = vals(&store, &w);
    let err = opt.step(&mut store).unwrap_err();
    assert!(
        err.to_string().contains("global gradient norm is NaN"),
        "{err}"
    );
    assert_eq!(bits(&before), bits(&vals(&store, &w)));
    opt.set_clip_norm(Some(-1.0));
    let err = opt.step(&mut store).unwrap_err();
    assert!(err.to_string().contains("positive and finite"), "{err}");
}

#[test]
fn weight_decay_and_learning_rate_changes() {
    let mut store = ParamStore::new();
    let w = store.add("w", vec_t(&[1.0, 2.0])).unwrap();
    let grad = |store: &ParamStore| {
        let mut g = Graph::new();
        let wv = g.param(&w);
        let loss = g.sum_elems(wv).unwrap();
        Sequential::new().backward(&mut g, store, loss).unwrap();
    };
    let mut opt = Optimizer::sgd(Sgd {
        lr: 0.5,
        momentum: 0.0,
        weight_decay: 0.1,
    });
    grad(&store);
    opt.step(&mut store).unwrap();
    let mut want: Vec<f32> = [1.0f32, 2.0]
        .iter()
        .map(|p| p - 0.5 * (1.0 + 0.1 * p))
        .collect();
    assert_eq!(vals(&store, &w), want);
    opt.set_lr(0.25);
    assert_eq!(opt.lr(), 0.25);
    grad(&store);
    opt.step(&mut store).unwrap();
    want = want.iter().map(|p| p - 0.25 * (1.0 + 0.1 * p)).collect();
    assert_eq!(vals(&store, &w), want);
    // Untouched parameters are skipped: another step changes nothing.
    opt.step(&mut store).unwrap();
    assert_eq!(vals(&store, &w), want);
    assert_eq!(opt.steps(), 3);
}

#[test]
fn an_optimizer_is_bound_to_its_store() {
    let mut a = ParamStore::new();
    let mut b = ParamStore::new();
    a.add("w", vec_t(&[1.0])).unwrap();
    b.add("w", vec_t(&[1.0])).unwrap();
    let mut opt = Optimizer::adam(Adam::default());
    opt.step(&mut a).unwrap();
    let err = opt.step(&mut b).unwrap_err();
    assert!(err.to_string().contains("another parameter store"), "{err}");
    opt.reset();
    opt.step(&mut b).unwrap();
    let mut bad = Optimizer::adam(Adam {
        beta1: 1.0,
        ..Adam::default()
    });
    let err = bad.step(&mut a).unwrap_err();
    assert!(err.to_string().contains("beta1"), "{err}");
}
