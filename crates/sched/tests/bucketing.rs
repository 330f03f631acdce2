//! Length bucketing: bucket boundaries, errors, plan reuse, and padding
//! invariance: a GRU over random length mixes, bucketed and padded, gives
//! the loss and parameter gradients of the same instances run unpadded by
//! the sequential executor (a property test).

mod common;

use common::{assert_close, full, tensor, Lcg};
use proptest::prelude::*;
use sheaf_autodiff::{Expr, Graph, Param, ParamStore, Sequential};
use sheaf_sched::{Bucket, Bucketing, SchedError};
use sheaf_tensor::Tensor;

const F: usize = 3;
const H: usize = 4;

struct Gru {
    w: Param,
    bw: Param,
    u: Param,
    bu: Param,
    wo: Param,
    bo: Param,
}

fn gru(store: &mut ParamStore, seed: u64) -> Gru {
    let mut rng = Lcg(seed);
    let mut add =
        |name: &str, shape: &[usize]| store.add(name, tensor(&mut rng, shape, 0.5)).unwrap();
    Gru {
        w: add("w", &[3 * H, F]),
        bw: add("bw", &[3 * H]),
        u: add("u", &[3 * H, H]),
        bu: add("bu", &[3 * H]),
        wo: add("wo", &[1, H]),
        bo: add("bo", &[1]),
    }
}

/// Steps of instance `i` (its own values), zero rows past `len` up to
/// `padded`.
fn steps(i: usize, len: usize, padded: usize) -> Vec<Tensor> {
    (0..padded)
        .map(|t| {
            if t < len {
                let v: Vec<f32> = (0..F)
                    .map(|k| ((i * 7 + t * 3 + k) as f32 * 0.37).sin())
                    .collect();
                Tensor::from_vec(v, [F]).unwrap()
            } else {
                full(0.0, &[F])
            }
        })
        .collect()
}

/// The model for ONE instance at padded length `padded`: a GRU, the last
/// valid state -> linear -> squared loss, plus a masked per-step loss
/// (`sequence_sum` over the stacked per-step outputs). `bug` reads the
/// last PADDED state instead: the mistake the masking exists to prevent.
fn model(
    g: &mut Graph,
    m: &Gru,
    i: usize,
    len: usize,
    padded: usize,
    bug: bool,
) -> sheaf_autodiff::Result<Expr> {
    let (w, bw, u, bu) = (g.param(&m.w), g.param(&m.bw), g.param(&m.u), g.param(&m.bu));
    let (wo, bo) = (g.param(&m.wo), g.param(&m.bo));
    let mut h = g.input(full(0.0, &[H]));
    let mut hs = Vec::new();
    let mut outs = Vec::new();
    for x in steps(i, len, padded) {
        let x = g.input(x);
        let xw = g.affine(bw, &[(w, x)])?;
        let hu = g.affine(bu, &[(u, h)])?;
        h = g.gru_cell(xw, hu, h)?;
        hs.push(h);
        outs.push(g.affine(bo, &[(wo, h)])?);
    }
    let seq = g.concat(&hs)?;
    let seq = g.reshape(seq, [padded, H])?;
    let last = g.sequence_last(seq, if bug { padded } else { len })?;
    let y = g.affine(bo, &[(wo, last)])?;
    let target = g.input(full(i as f32 * 0.1, &[1]));
    let l1 = g.squared_distance(y, target)?;
    let per_step = g.concat(&outs)?;
    let l2 = g.sequence_sum(per_step, len)?;
    g.sum(&[l1, l2])
}

/// (loss, gradients of every parameter) of a run.
fn grads(store: &ParamStore, m: &Gru) -> Vec<Vec<f32>> {
    [&m.w, &m.bw, &m.u, &m.bu, &m.wo, &m.bo]
        .iter()
        .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
        .collect()
}

fn unpadded(store: &mut ParamStore, m: &Gru, lens: &[usize]) -> (f32, Vec<Vec<f32>>) {
    store.zero_grads().unwrap();
    let mut total = 0.0;
    for (i, &len) in lens.iter().enumerate() {
        let mut g = Graph::new();
        let loss = model(&mut g, m, i, len, len, false).unwrap();
        total += Sequential::new()
            .forward(&mut g, store, loss)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()[0];
        Sequential::new().backward(&mut g, store, loss).unwrap();
    }
    (total, grads(store, m))
}

fn bucketed(
    store: &mut ParamStore,
    m: &Gru,
    b: &mut Bucketing,
    lens: &[usize],
    bug: bool,
) -> (f32, Vec<Vec<f32>>) {
    store.zero_grads().unwrap();
    let mut g = Graph::new();
    let loss = b
        .step(&mut g, store, lens, |g, i, t| {
            model(g, m, i, lens[i], t, bug)
        })
        .unwrap();
    (loss, grads(store, m))
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-4 * (1.0 + a.abs().max(b.abs()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn bucketed_equals_unpadded_sequential(
        lens in prop::collection::vec(1usize..=20, 1..8),
        spacing in prop::sample::select(vec![1.5f64, 2.0, 3.0]),
    ) {
        let mut store = ParamStore::new();
        let m = gru(&mut store, 7);
        let (want_loss, want) = unpadded(&mut store, &m, &lens);
        let mut b = Bucketing::new(spacing).unwrap();
        let (loss, got) = bucketed(&mut store, &m, &mut b, &lens, false);
        prop_assert!(close(loss, want_loss), "loss {loss} vs {want_loss}");
        for (g, w) in got.iter().zip(&want) {
            for (x, y) in g.iter().zip(w) {
                prop_assert!(close(*x, *y), "gradient {x} vs {y}");
            }
        }
        let padded: usize = lens.iter().map(|&l| b.bucket_len(l).unwrap() - l).sum();
        prop_assert_eq!(b.stats().padded_steps, padded);
    }
}

/// The test can fail: reading the last padded state changes the loss.
#[test]
fn reading_padding_is_caught() {
    let lens = [3, 5, 2];
    let mut store = ParamStore::new();
    let m = gru(&mut store, 7);
    let (want, _) = unpadded(&mut store, &m, &lens);
    let mut b = Bucketing::new(2.0).unwrap();
    let (got, _) = bucketed(&mut store, &m, &mut b, &lens, true);
    assert!(!close(got, want), "{got} vs {want}");
}

#[test]
fn one_kernel_per_step_and_cached_plans() {
    let lens = [5, 7, 8, 6];
    let mut store = ParamStore::new();
    let m = gru(&mut store, 3);
    let mut b = Bucketing::new(2.0).unwrap();
    bucketed(&mut store, &m, &mut b, &lens, false);
    let s = b.stats().clone();
    // One bucket of length 8, four members: every GRU step is one batch of 4.
    assert_eq!(s.per_op["gru_cell"], (8, 32));
    assert_eq!(s.total_steps, 32);
    // Lengths 5, 7, 8, 6 padded to 8.
    assert_eq!(s.padded_steps, 6);
    assert!((s.padding_fraction() - 6.0 / 32.0).abs() < 1e-12);
    assert_eq!(s.plan_cache_hits, 0);
    // The same bucket again reuses the plan, with the same results.
    let (l1, g1) = bucketed(&mut store, &m, &mut b, &lens, false);
    assert_eq!(b.stats().plan_cache_hits, 1);
    let mut fresh = Bucketing::new(2.0).unwrap();
    let (l2, g2) = bucketed(&mut store, &m, &mut fresh, &lens, false);
    assert_eq!(l1, l2);
    for (a, c) in g1.iter().zip(&g2) {
        assert_close(a, c, "cached plan");
    }
}

#[test]
fn bucket_boundaries() {
    let b = Bucketing::new(2.0).unwrap();
    assert_eq!(b.bucket_len(1).unwrap(), 1);
    for k in 0..20 {
        assert_eq!(b.bucket_len(1 << k).unwrap(), 1 << k, "exact power 2^{k}");
        assert_eq!(b.bucket_len((1 << k) + 1).unwrap(), 2 << k);
    }
    assert_eq!(b.bucket_len(1_000_000_000).unwrap(), 1 << 30);
    let b15 = Bucketing::new(1.5).unwrap();
    let bounds: Vec<usize> = (1..=41).map(|l| b15.bucket_len(l).unwrap()).collect();
    let mut distinct = bounds.clone();
    distinct.dedup();
    assert_eq!(distinct, [1, 2, 3, 4, 6, 8, 12, 18, 26, 39, 58]);
    assert_eq!(
        b.buckets(&[3, 1, 4, 9, 2]).unwrap(),
        [
            Bucket {
                len: 1,
                members: vec![1]
            },
            Bucket {
                len: 2,
                members: vec![4]
            },
            Bucket {
                len: 4,
                members: vec![0, 2]
            },
            Bucket {
                len: 16,
                members: vec![3]
            },
        ]
    );
}

#[test]
fn bucketing_errors() {
    let b = Bucketing::new(2.0).unwrap();
    let err = b.buckets(&[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bucketing: no sequences to bucket (empty batch)"
    );
    let err = b.buckets(&[4, 0]).unwrap_err();
    assert!(matches!(err, SchedError::Bucket { .. }));
    assert!(
        err.to_string()
            .starts_with("bucketing: instance 1: bucketing: a sequence of length 0"),
        "{err}"
    );
    for s in [1.0, 0.5, f64::NAN, f64::INFINITY] {
        assert!(Bucketing::new(s).is_err(), "spacing {s}");
    }
    assert!(b.bucket_len(u32::MAX as usize + 1).is_err());
}
