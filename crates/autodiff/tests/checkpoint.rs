//! Checkpoints: bit-exact round trips of parameters and optimizer state,
//! training resumed from a checkpoint equal to uninterrupted training, and
//! every kind of bad file (truncated, flipped bytes, missing tensors, wrong
//! shapes and dtypes) reported as an error, never a panic.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use common::Lookup;
use rand::rngs::StdRng;
use rand::SeedableRng;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use sheaf_autodiff::{
    Adagrad, Adam, Graph, Init, Op, Optimizer, Param, ParamStore, Sequential, Sgd,
};
use sheaf_tensor::Tensor;

struct Model {
    emb: Param,
    w: Param,
    b: Param,
}

fn model(store: &mut ParamStore, seed: u64) -> Model {
    let mut rng = StdRng::seed_from_u64(seed);
    Model {
        emb: store
            .add_lookup("emb", 8, 3, Init::GlorotUniform, &mut rng)
            .unwrap(),
        w: store
            .add_param(
                "w",
                [3],
                Init::Normal {
                    mean: 0.0,
                    std: 0.5,
                },
                &mut rng,
            )
            .unwrap(),
        b: store.add_param("b", [1], Init::Zeros, &mut rng).unwrap(),
    }
}

/// One deterministic training step k: y = tanh(sum(E[r] * w) + b) for two
/// rows r chosen by k, squared error against targets chosen by k.
fn train_step(store: &mut ParamStore, m: &Model, opt: &mut Optimizer, k: u32) {
    let lookup: Arc<dyn Op> = Arc::new(Lookup);
    let mut g = Graph::new();
    let (e, w, b) = (g.param(&m.emb), g.param(&m.w), g.param(&m.b));
    let mut total = None;
    for (r, target) in [(k % 8, 0.5), ((3 * k + 1) % 8, -0.25)] {
        let x = g.apply_with_data(&lookup, &[e], 0, r).unwrap();
        let p = g.cmult(x, w).unwrap();
        let s = g.sum_elems(p).unwrap();
        let s = g.add(s, b).unwrap();
        let y = g.tanh(s).unwrap();
        let t = g.input(Tensor::from_slice(&[target], [1]).unwrap());
        let d = g.sub(y, t).unwrap();
        let l = g.cmult(d, d).unwrap();
        total = Some(match total {
            None => l,
            Some(a) => g.add(a, l).unwrap(),
        });
    }
    Sequential::new()
        .backward(&mut g, store, total.unwrap())
        .unwrap();
    opt.step(store).unwrap();
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn snapshot(store: &ParamStore) -> Vec<Vec<u32>> {
    store
        .params()
        .iter()
        .map(|p| bits(store.value(p).unwrap()))
        .collect()
}

fn state_bits(opt: &Optimizer, store: &ParamStore) -> Vec<(String, Vec<u32>)> {
    let mut out = Vec::new();
    for p in store.params() {
        for (buf, t) in opt.state(&p) {
            out.push((format!("{}/{buf}", store.name(p.id()).unwrap()), bits(t)));
        }
    }
    out
}

fn optimizers() -> Vec<Optimizer> {
    vec![
        Optimizer::sgd(Sgd {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 1e-3,
        }),
        Optimizer::adagrad(Adagrad {
            lr: 0.1,
            ..Adagrad::default()
        })
        .with_clip_norm(0.5),
        Optimizer::adam(Adam {
            lr: 0.01,
            weight_decay: 1e-4,
            ..Adam::default()
        })
        .with_clip_norm(1.0),
    ]
}

/// A trained store and optimizer saved to `path`.
fn saved(path: &Path) -> (ParamStore, Model, Optimizer) {
    let mut store = ParamStore::new();
    let m = model(&mut store, 1);
    let mut opt = Optimizer::adam(Adam::default());
    for k in 0..4 {
        train_step(&mut store, &m, &mut opt, k);
    }
    opt.save(&store, path).unwrap();
    (store, m, opt)
}

#[test]
fn round_trip_is_bit_exact_and_training_resumes_identically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.safetensors");
    for mut opt in optimizers() {
        let name = opt.method().name();
        let mut a = ParamStore::new();
        let ma = model(&mut a, 1);
        for k in 0..5 {
            train_step(&mut a, &ma, &mut opt, k);
        }
        opt.save(&a, &path).unwrap();
        let saved_params = snapshot(&a);
        let saved_state = state_bits(&opt, &a);
        assert!(!saved_state.is_empty() || name == "sgd");
        for k in 5..10 {
            train_step(&mut a, &ma, &mut opt, k);
        }

        // A fresh process: same architecture, different initial values.
        let mut b = ParamStore::new();
        let mb = model(&mut b, 99);
        let mut opt_b = Optimizer::load(&mut b, &path).unwrap();
        assert_eq!(snapshot(&b), saved_params, "{name}");
        assert_eq!(state_bits(&opt_b, &b), saved_state, "{name}");
        assert_eq!(opt_b.steps(), 5);
        assert_eq!(opt_b.method(), opt.method());
        assert_eq!(opt_b.clip_norm(), opt.clip_norm());
        for k in 5..10 {
            train_step(&mut b, &mb, &mut opt_b, k);
        }
        assert_eq!(
            snapshot(&b),
            snapshot(&a),
            "{name}: resumed training differs"
        );
        assert_eq!(state_bits(&opt_b, &b), state_bits(&opt, &a), "{name}");
    }
}

#[test]
fn param_store_round_trip_is_atomic_and_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("params.safetensors");
    let mut a = ParamStore::new();
    model(&mut a, 3);
    a.save(&path).unwrap();
    // Saving again replaces the file; no temporary file is left behind.
    let mut a2 = ParamStore::new();
    model(&mut a2, 4);
    a2.save(&path).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["params.safetensors"]);
    let mut b = ParamStore::new();
    model(&mut b, 5);
    b.load(&path).unwrap();
    assert_eq!(snapshot(&b), snapshot(&a2));

    // Parameters alone load from a checkpoint that also holds optimizer state.
    let (trained, _, _) = saved(&path);
    b.load(&path).unwrap();
    assert_eq!(snapshot(&b), snapshot(&trained));

    // A parameter-only file has no optimizer.
    a.save(&path).unwrap();
    let err = Optimizer::load(&mut b, &path).unwrap_err().to_string();
    assert!(err.contains("no optimizer in this checkpoint"), "{err}");

    let err = a
        .save(dir.path().join("no/such/dir/x.safetensors"))
        .unwrap_err();
    assert!(err.to_string().contains("writing failed"), "{err}");
    let err = b.load(dir.path().join("absent.safetensors")).unwrap_err();
    assert!(err.to_string().contains("reading failed"), "{err}");
}

#[test]
fn truncated_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    let (_, _, _) = saved(&path);
    let bytes = std::fs::read(&path).unwrap();
    let mut store = ParamStore::new();
    model(&mut store, 7);
    let before = snapshot(&store);
    let bad = dir.path().join("bad.safetensors");
    let n = bytes.len();
    for len in [0, 1, 7, 8, 9, 20, n / 2, n - 4, n - 1] {
        std::fs::write(&bad, &bytes[..len]).unwrap();
        let err = Optimizer::load(&mut store, &bad).unwrap_err().to_string();
        assert!(
            err.contains("bad.safetensors: corrupted or not a safetensors file"),
            "{len}: {err}"
        );
        assert!(store.load(&bad).is_err());
        assert_eq!(snapshot(&store), before, "a failed load changed the store");
    }
}

#[test]
fn every_flipped_byte_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    let (_, _, _) = saved(&path);
    let bytes = std::fs::read(&path).unwrap();
    let header = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut store = ParamStore::new();
    model(&mut store, 7);
    let before = snapshot(&store);
    let bad = dir.path().join("bad.safetensors");
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0xFF;
        std::fs::write(&bad, &b).unwrap();
        let err = match Optimizer::load(&mut store, &bad) {
            Ok(_) => panic!("flipping byte {i} went unnoticed"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("corrupted or not a safetensors file"),
            "{i}: {err}"
        );
        if i >= header {
            assert!(err.contains("checksum mismatch"), "{i}: {err}");
        }
        if i % 16 == 0 {
            assert!(store.load(&bad).is_err(), "{i}");
        }
    }
    assert_eq!(snapshot(&store), before);
}

#[test]
fn every_name_and_shape_mismatch_is_listed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    saved(&path);
    // The file has emb [8, 3], w [3], b [1]; this store has w [4], no b,
    // and an extra c.
    let mut store = ParamStore::new();
    let mut rng = StdRng::seed_from_u64(0);
    store
        .add_lookup("emb", 8, 3, Init::Zeros, &mut rng)
        .unwrap();
    store.add_param("w", [4], Init::Zeros, &mut rng).unwrap();
    store.add_param("c", [1], Init::Zeros, &mut rng).unwrap();
    let before = snapshot(&store);
    let err = Optimizer::load(&mut store, &path).unwrap_err().to_string();
    for want in [
        "7 mismatches (nothing was loaded)",
        "param/w: shape [3] in the file, [4] expected",
        "param/c: missing from the file",
        "param/b: in the file but not in the store",
        "optim/b/m: state of parameter \"b\", which is not in the store",
        "optim/w/m: shape [3] in the file, [4] expected",
        "optim/w/v: shape [3] in the file, [4] expected",
    ] {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }
    let err = store.load(&path).unwrap_err().to_string();
    assert!(err.contains("3 mismatches"), "{err}");
    assert_eq!(snapshot(&store), before, "a failed load changed the store");
}

/// Rewrites a checkpoint through `edit` as a plain safetensors file (no
/// sheaf format or checksum, as another tool would write it).
fn rewrite(
    path: &Path,
    out: &Path,
    edit: impl Fn(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>, &mut HashMap<String, String>),
) {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = header.metadata().clone().unwrap_or_default();
    meta.remove("checksum");
    meta.remove("format");
    let mut tensors: Vec<_> = st
        .iter()
        .map(|(n, v)| {
            (
                n.to_string(),
                v.dtype(),
                v.shape().to_vec(),
                v.data().to_vec(),
            )
        })
        .collect();
    edit(&mut tensors, &mut meta);
    let views: Vec<_> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(out, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

#[test]
fn wrong_dtypes_and_missing_state_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    let (trained, _, opt) = saved(&path);
    let foreign = dir.path().join("foreign.safetensors");

    // Unverified foreign files load when they match.
    rewrite(&path, &foreign, |_, _| {});
    let mut store = ParamStore::new();
    model(&mut store, 8);
    let loaded = Optimizer::load(&mut store, &foreign).unwrap();
    assert_eq!(snapshot(&store), snapshot(&trained));
    assert_eq!(loaded.steps(), opt.steps());

    // w stored as i32.
    rewrite(&path, &foreign, |ts, _| {
        for t in ts.iter_mut().filter(|t| t.0 == "param/w") {
            t.1 = Dtype::I32;
        }
    });
    let mut store = ParamStore::new();
    model(&mut store, 8);
    let before = snapshot(&store);
    let err = store.load(&foreign).unwrap_err().to_string();
    assert!(
        err.contains("param/w: dtype I32 in the file, F32 expected"),
        "{err}"
    );
    assert_eq!(snapshot(&store), before);

    // Adam's v of the table missing, a corrupt step count.
    rewrite(&path, &foreign, |ts, meta| {
        ts.retain(|t| t.0 != "optim/emb/v");
        for t in ts.iter_mut().filter(|t| t.0 == "optim/w/m") {
            t.0 = "optim/w/velocity".into();
        }
        meta.insert("steps".into(), "four".into());
    });
    let err = Optimizer::load(&mut store, &foreign)
        .unwrap_err()
        .to_string();
    assert!(err.contains("optim/w/m: missing from the file"), "{err}");
    assert!(
        err.contains("optim/w/velocity: adam keeps no buffer \"velocity\" (it keeps m, v)"),
        "{err}"
    );
    assert!(err.contains("optim/emb/v: missing from the file"), "{err}");
    assert!(err.contains("steps is missing or not a count"), "{err}");
    assert_eq!(snapshot(&store), before);

    // An unknown optimizer kind and a sheaf file without its checksum.
    rewrite(&path, &foreign, |_, meta| {
        meta.insert("optimizer".into(), "lbfgs".into());
    });
    let err = Optimizer::load(&mut store, &foreign)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown optimizer \"lbfgs\""), "{err}");
    rewrite(&path, &foreign, |_, meta| {
        meta.insert("format".into(), "sheaf-checkpoint".into());
    });
    let err = store.load(&foreign).unwrap_err().to_string();
    assert!(err.contains("the checksum is missing"), "{err}");
}
