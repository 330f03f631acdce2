//! Dropout: reproducible per-instance masks, evaluation mode, gradients.

mod common;

use common::{check, vec_t, wavy};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{Graph, GraphError, ParamStore, Sequential, ShapeError};
use sheaf_tensor::Shape;

/// Output of `dropout(x, p)` on a fresh graph with the given seed and mode.
fn run(x: &[f32], p: f32, seed: u64, train: bool) -> Vec<f32> {
    let store = ParamStore::new();
    let mut g = Graph::new();
    g.set_seed(seed);
    g.set_train(train);
    let xe = g.input(vec_t(x));
    let y = g.dropout(xe, p).unwrap();
    Sequential::new()
        .forward(&mut g, &store, y)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

#[test]
fn masks_are_reproducible_and_keep_about_one_minus_p() {
    let n = 10_000;
    let ones = vec![1.0f32; n];
    for p in [0.3f32, 0.5, 0.9] {
        let a = run(&ones, p, 7, true);
        assert_eq!(a, run(&ones, p, 7, true), "same seed, same mask");
        assert_ne!(a, run(&ones, p, 8, true), "another seed, another mask");
        let keep = 1.0 / (1.0 - p);
        assert!(a.iter().all(|&v| v == 0.0 || v == keep), "p = {p}");
        let kept = a.iter().filter(|&&v| v != 0.0).count() as f32 / n as f32;
        // Binomial standard deviation <= 0.005; allow 4 of them.
        assert!((kept - (1.0 - p)).abs() < 0.02, "p = {p}: kept {kept}");
    }
    assert_eq!(run(&ones, 0.0, 7, true), ones, "p = 0 keeps everything");
}

#[test]
fn evaluation_mode_is_the_identity() {
    let x = wavy(1000, 0.5);
    assert_eq!(run(&x, 0.5, 3, false), x);
    // ... and so is its gradient.
    let mut store = ParamStore::new();
    let px = store.add("x", vec_t(&x)).unwrap();
    let mut g = Graph::new();
    g.set_train(false);
    let xe = g.param(&px);
    let y = g.dropout(xe, 0.5).unwrap();
    let w = g.input(vec_t(&wavy(1000, 4.0)));
    let h = g.cmult(y, w).unwrap();
    let loss = g.sum_elems(h).unwrap();
    Sequential::new().backward(&mut g, &store, loss).unwrap();
    assert_eq!(
        store.grad(&px).unwrap().to_vec::<f32>().unwrap(),
        wavy(1000, 4.0)
    );
}

#[test]
fn two_dropout_nodes_draw_different_masks() {
    let store = ParamStore::new();
    let mut g = Graph::new();
    let x = g.input(vec_t(&[1.0f32; 256]));
    let a = g.dropout(x, 0.5).unwrap();
    let b = g.dropout(x, 0.5).unwrap();
    let exec = Sequential::new();
    exec.forward(&mut g, &store, b).unwrap();
    assert_ne!(g.value(a).unwrap().to_vec::<f32>().unwrap(), {
        g.value(b).unwrap().to_vec::<f32>().unwrap()
    });
    assert_eq!(g.node(a.node()).sig(), g.node(b.node()).sig());
    let c = g.dropout(x, 0.25).unwrap();
    assert_ne!(
        g.node(a.node()).sig(),
        g.node(c.node()).sig(),
        "the rate is part of the signature"
    );
}

#[test]
fn gradient_is_mask_times_dy() {
    let n = 500;
    let p = 0.4f32;
    let xs: Vec<f32> = wavy(n, 1.0).iter().map(|v| v + 2.0).collect();
    let ws = wavy(n, 3.0);
    let mut store = ParamStore::new();
    let px = store.add("x", vec_t(&xs)).unwrap();
    let mut g = Graph::new();
    g.set_seed(11);
    let x = g.param(&px);
    let y = g.dropout(x, p).unwrap();
    let w = g.input(vec_t(&ws));
    let h = g.cmult(y, w).unwrap();
    let loss = g.sum_elems(h).unwrap();
    Sequential::new().backward(&mut g, &store, loss).unwrap();
    let out = g.value(y).unwrap().to_vec::<f32>().unwrap();
    let dx = store.grad(&px).unwrap().to_vec::<f32>().unwrap();
    let keep = 1.0 / (1.0 - p);
    for i in 0..n {
        // x > 0 everywhere, so the mask is visible in the output.
        let mask = if out[i] != 0.0 { keep } else { 0.0 };
        assert_eq!(out[i], xs[i] * mask, "element {i}");
        assert_eq!(dx[i], ws[i] * mask, "element {i}");
    }
}

#[test]
fn dropout_gradients_match_finite_differences() {
    // Gradient checks run every graph with seed 0: the masks repeat.
    check(
        &move |g, p| {
            let y = g.dropout(p[0], 0.5)?;
            let h = g.tanh(y)?;
            let h = g.cmult(h, p[0])?;
            g.sum_elems(h)
        },
        &[&wavy(40, 0.2)],
    );
}

#[test]
fn dropout_batches_like_single_calls() {
    let instances: Vec<Instance> = (0..5u64)
        .map(|k| Instance {
            args: vec![vec_t(&wavy(64, k as f32))],
            data: 0,
            seed: 1000 + k * 17,
        })
        .collect();
    let mut g = Graph::new();
    let x = g.input(vec_t(&wavy(64, 0.0)));
    for p in [0.0f32, 0.3, 0.75] {
        let e = g.dropout(x, p).unwrap();
        let node = e.node();
        for b in 3..=5 {
            check_batching(g.op(node), &instances[..b], g.node(node).attr(), 0.0)
                .unwrap_or_else(|m| panic!("{m}"));
        }
    }
    // Rank-2 instances too: the mask covers the whole instance.
    let mats: Vec<Instance> = instances
        .iter()
        .map(|i| Instance {
            args: vec![i.args[0].reshape([8, 8]).unwrap()],
            ..i.clone()
        })
        .collect();
    let m = g.input(mats[0].args[0].clone());
    let e = g.dropout(m, 0.5).unwrap();
    check_batching(g.op(e.node()), &mats, g.node(e.node()).attr(), 0.0)
        .unwrap_or_else(|m| panic!("{m}"));
}

#[test]
fn dropout_errors() {
    let mut g = Graph::new();
    let x = g.input(vec_t(&[1.0, 2.0]));
    for (p, text) in [
        (1.0f32, "dropout: rate 1 is outside [0, 1)"),
        (-0.1, "dropout: rate -0.1 is outside [0, 1)"),
        (f32::NAN, "dropout: rate NaN is outside [0, 1)"),
    ] {
        let err = g.dropout(x, p).unwrap_err();
        assert!(
            matches!(err, GraphError::Data { op: "dropout", .. }),
            "{err}"
        );
        assert_eq!(err.to_string(), text);
    }
    let e = g.dropout(x, 0.5).unwrap();
    let s = Shape::from([2]);
    assert_eq!(
        g.op(e.node()).infer_shape(&[s, s], 0),
        Err(ShapeError::expected("one argument"))
    );
    // A bad rate given to the op directly is an error, not a wrong mask.
    let inst = [Instance {
        args: vec![vec_t(&[1.0, 2.0])],
        data: 0,
        seed: 0,
    }];
    let err = check_batching(g.op(e.node()), &inst, 1.5f32.to_bits() as u64, 0.0).unwrap_err();
    assert_eq!(
        err,
        "dropout forward: dropout: argument `attr` is not a dropout rate in [0, 1)"
    );
}
