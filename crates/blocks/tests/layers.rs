//! `FC` and `Embedding` over sheaf-nn's `Linear` and `Embedding`: the
//! same parameter names and values as before (drawn from the caller's
//! generator in the same order), the same outputs as the nn layers, and
//! errors that name the block.

mod common;

use common::{assert_close, rng, vals};
use sheaf_autodiff::{Graph, Init, ParamStore, Sequential};
use sheaf_blocks::*;

fn message<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn fc_and_embedding_keep_their_parameter_names_and_values() {
    let mut store = ParamStore::new();
    let fc = FC::new(&mut store, "fc", 3, 4, Activation::Tanh, &mut rng(1)).unwrap();
    let emb = Embedding::new(&mut store, "emb", 5, 2, Init::GlorotUniform, &mut rng(2)).unwrap();
    // The parameters as the layers made them before they wrapped sheaf-nn.
    let mut want = ParamStore::new();
    let mut r = rng(1);
    let w = want
        .add_param("fc.w", [4, 3], Init::GlorotUniform, &mut r)
        .unwrap();
    let b = want.add_param("fc.b", [4], Init::Zeros, &mut r).unwrap();
    let t = want
        .add_lookup("emb", 5, 2, Init::GlorotUniform, &mut rng(2))
        .unwrap();
    let (fw, fb) = fc.params();
    assert_eq!(store.get("fc.w"), Some(fw));
    assert_eq!(store.get("fc.b"), Some(fb));
    assert_eq!(store.get("emb"), Some(emb.table()));
    assert_eq!(store.params().len(), 3);
    for (got, want_p) in [(fw, w), (fb, b), (emb.table(), t)] {
        assert_eq!(
            vals(store.value(&got).unwrap()),
            vals(want.value(&want_p).unwrap())
        );
    }
    assert!(store.value(&emb.table()).is_ok() && emb.table().is_table());
}

#[test]
fn fc_computes_nn_linear_and_its_activation() {
    let mut store = ParamStore::new();
    let acts = [
        (Activation::Identity, sheaf_nn::Activation::Identity),
        (Activation::Tanh, sheaf_nn::Activation::Tanh),
        (Activation::Sigmoid, sheaf_nn::Activation::Sigmoid),
        (Activation::Relu, sheaf_nn::Activation::Relu),
    ];
    let x = vec![0.5f32, -1.0, 2.0];
    for (k, (act, nn_act)) in acts.into_iter().enumerate() {
        let fc = FC::new(&mut store, &format!("fc{k}"), 3, 4, act, &mut rng(k as u64)).unwrap();
        let (w, b) = fc.params();
        let mut c = Compiled::new(Tensor::new([3]) >> fc).unwrap();
        let got = c.forward(&store, std::slice::from_ref(&x)).unwrap();
        let mut g = Graph::new();
        let xe = g.input(sheaf_tensor::Tensor::from_vec(x.clone(), [3]).unwrap());
        let y = sheaf_nn::Linear::from_params(w, Some(b))
            .unwrap()
            .forward(&mut g, xe)
            .unwrap();
        let y = nn_act.apply(&mut g, y).unwrap();
        let want = Sequential::new().forward(&mut g, &store, y).unwrap();
        assert_close(&vals(&got[0]), &vals(&want), &format!("{act:?}"));
    }
}

#[test]
fn embedding_looks_up_like_nn_embedding() {
    let mut store = ParamStore::new();
    let uniform = Init::Uniform {
        low: -1.0,
        high: 1.0,
    };
    let emb = Embedding::new(&mut store, "emb", 6, 3, uniform, &mut rng(5)).unwrap();
    let nn = sheaf_nn::Embedding::from_param(emb.table()).unwrap();
    let mut c = Compiled::new(emb).unwrap();
    assert_eq!(c.output_type(), &Ty::tensor([3]));
    let got = c.forward(&store, &[4u32, 0]).unwrap();
    for (k, id) in [4u32, 0].into_iter().enumerate() {
        let mut g = Graph::new();
        let y = nn.forward(&mut g, id).unwrap();
        let want = Sequential::new().forward(&mut g, &store, y).unwrap();
        assert_eq!(vals(&got[k]), vals(&want), "id {id}");
    }
}

#[test]
fn layer_mistakes_are_errors_naming_the_block() {
    let mut store = ParamStore::new();
    let e = message(FC::new(
        &mut store,
        "fc",
        0,
        2,
        Activation::Relu,
        &mut rng(1),
    ));
    assert_eq!(e, "FC(fc): sizes must be positive: input 0, output 2");
    let e = message(Embedding::new(
        &mut store,
        "emb",
        5,
        0,
        Init::Zeros,
        &mut rng(1),
    ));
    assert_eq!(
        e,
        "Embedding(emb): sizes must be positive: vocabulary 5, dim 0"
    );
    // Nothing was made before the check.
    assert!(store.params().is_empty());
    // A table that is not a matrix: an error when the model is built.
    let flat = store
        .add_param("flat", [4], Init::Zeros, &mut rng(1))
        .unwrap();
    let e = message(Compiled::new(Embedding::from_param("flat", flat)));
    assert_eq!(
        e,
        "Embedding(flat): Embedding: the table has shape [4], it must be a matrix with both sizes positive"
    );
}
