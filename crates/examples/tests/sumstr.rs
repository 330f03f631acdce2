//! The W6 example: data generation, one model run bucketed and unpadded,
//! the `sheaf-nn` model equal to the raw-op model it replaced, and a quick
//! training run that learns.

mod common;

use common::close_to;
use sheaf_autodiff::{Adam, Optimizer, Param, ParamStore};
use sheaf_examples::sumstr::{generate, train, Config, Example, Mode, Model, Runner};
use sheaf_sched::Strategy;

/// The model as written before `sheaf-nn`, on raw graph ops: the
/// reference the layers' model must equal.
mod reference {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use sheaf_autodiff::{Expr, Graph, Param, ParamStore};
    use sheaf_examples::error::{Error, Result};
    use sheaf_examples::sumstr::{Example, SYMBOLS};
    use sheaf_tensor::Tensor;

    struct Layer {
        w: Param,
        bw: Param,
        u: Param,
        bu: Param,
    }

    pub struct Model {
        layers: [Layer; 2],
        wo: Param,
        bo: Param,
        hidden: usize,
    }

    fn init(rng: &mut StdRng, shape: &[usize], fan_in: usize) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let a = (1.0 / fan_in as f32).sqrt();
        let v: Vec<f32> = (0..n).map(|_| rng.random_range(-a..a)).collect();
        Tensor::from_vec(v, sheaf_tensor::Shape::new(shape).map_err(cfg_err)?).map_err(cfg_err)
    }

    fn cfg_err(e: impl std::fmt::Display) -> Error {
        Error::Config(e.to_string())
    }

    impl Model {
        pub fn new(store: &mut ParamStore, h: usize, seed: u64) -> Result<Self> {
            let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
            let mut layer = |store: &mut ParamStore, k: usize, input: usize| -> Result<Layer> {
                let mut add = |name: &str, t: Tensor| store.add(&format!("l{k}_{name}"), t);
                Ok(Layer {
                    w: add("w", init(&mut rng, &[3 * h, input], h)?)?,
                    bw: add("bw", init(&mut rng, &[3 * h], h)?)?,
                    u: add("u", init(&mut rng, &[3 * h, h], h)?)?,
                    bu: add("bu", init(&mut rng, &[3 * h], h)?)?,
                })
            };
            let layers = [layer(store, 0, SYMBOLS)?, layer(store, 1, h)?];
            let wo = store.add("wo", init(&mut rng, &[1, h], h)?)?;
            let bo = store.add("bo", Tensor::from_vec(vec![0.0f32], [1]).map_err(cfg_err)?)?;
            Ok(Model {
                layers,
                wo,
                bo,
                hidden: h,
            })
        }

        /// In the order of the layers' model: per layer `w`, `u`, the
        /// input bias, the recurrent bias; then the output's.
        pub fn params(&self) -> Vec<Param> {
            let mut ps: Vec<Param> = self
                .layers
                .iter()
                .flat_map(|l| [l.w, l.u, l.bw, l.bu])
                .collect();
            ps.extend([self.wo, self.bo]);
            ps
        }

        fn predict(&self, g: &mut Graph, ex: &Example, padded: usize) -> Result<Expr> {
            let h = self.hidden;
            let mut xs = Vec::with_capacity(padded);
            for t in 0..padded {
                let mut v = vec![0.0f32; SYMBOLS];
                if let Some(&c) = ex.chars.get(t) {
                    v[usize::from(c)] = 1.0;
                }
                xs.push(g.input(Tensor::from_vec(v, [SYMBOLS]).map_err(cfg_err)?));
            }
            for layer in &self.layers {
                let (w, bw) = (g.param(&layer.w), g.param(&layer.bw));
                let (u, bu) = (g.param(&layer.u), g.param(&layer.bu));
                let mut state = g.input(Tensor::from_vec(vec![0.0f32; h], [h]).map_err(cfg_err)?);
                let mut hs = Vec::with_capacity(padded);
                for &x in &xs {
                    let xw = g.affine(bw, &[(w, x)])?;
                    let hu = g.affine(bu, &[(u, state)])?;
                    state = g.gru_cell(xw, hu, state)?;
                    hs.push(state);
                }
                xs = hs;
            }
            let seq = g.concat(&xs)?;
            let seq = g.reshape(seq, [padded, h])?;
            let last = g.sequence_last(seq, ex.chars.len())?;
            let (wo, bo) = (g.param(&self.wo), g.param(&self.bo));
            Ok(g.affine(bo, &[(wo, last)])?)
        }

        pub fn loss(&self, g: &mut Graph, ex: &Example, padded: usize) -> Result<Expr> {
            let y = self.predict(g, ex, padded)?;
            let target = g.input(Tensor::from_vec(vec![ex.sum / 10.0], [1]).map_err(cfg_err)?);
            Ok(g.squared_distance(y, target)?)
        }
    }
}

/// The accumulated gradients of `params`, left in the store for the
/// optimizer.
fn grads(store: &ParamStore, params: &[Param]) -> Vec<Vec<f32>> {
    params
        .iter()
        .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
        .collect()
}

/// The `sheaf-nn` model, given the raw-op model's values (the same GRU
/// layout: rows `r, z, n`, input and recurrent biases apart), trains like
/// it: the same loss and every gradient at each of three Adam steps, under
/// every strategy `sumstr` runs (bucketed at two spacings, sequential,
/// depth, agenda), with its steps inline, as vertex functions, and each
/// layer one scan per string.
#[test]
fn layers_model_equals_the_raw_op_reference() {
    let data = generate(24, 7, 3, 25);
    let modes = [
        Mode::Bucket(1.5),
        Mode::Bucket(2.0),
        Mode::Dynamic(Strategy::Sequential),
        Mode::Dynamic(Strategy::Depth),
        Mode::Dynamic(Strategy::Agenda),
    ];
    let forms = ["inline", "vertex", "scan"];
    for (mode, form) in modes.into_iter().flat_map(|m| forms.map(|f| (m, f))) {
        let (mut rs, mut ns) = (ParamStore::new(), ParamStore::new());
        let hand = reference::Model::new(&mut rs, 8, 1).unwrap();
        let model = Model::new(&mut ns, 8, 2).unwrap();
        let model = match form {
            "vertex" => model.with_vertex_functions().unwrap(),
            "scan" => model.with_scans().unwrap(),
            _ => model,
        };
        let (theirs, mine) = (hand.params(), model.params());
        assert_eq!(theirs.len(), mine.len());
        for (m, t) in mine.iter().zip(&theirs) {
            assert_eq!(m.shape(), t.shape(), "{}", ns.name(m.id()).unwrap());
            let v = rs.value(t).unwrap().deep_clone().unwrap();
            *ns.value_mut(m).unwrap() = v;
        }
        let adam = || {
            Optimizer::adam(Adam {
                lr: 0.01,
                ..Adam::default()
            })
            .with_clip_norm(5.0)
        };
        let (mut ro, mut no) = (adam(), adam());
        let (mut rr, mut nr) = (Runner::new(mode).unwrap(), Runner::new(mode).unwrap());
        for (k, chunk) in data.chunks(8).enumerate() {
            let batch: Vec<&Example> = chunk.iter().collect();
            let want = rr
                .run_with(&rs, &batch, |g, ex, t| hand.loss(g, ex, t))
                .unwrap();
            let got = nr.run(&model, &ns, &batch).unwrap();
            let what = format!("{mode:?} {form} step {k}");
            close_to(1e-5, &[got], &[want], &format!("{what} loss"));
            let (want, got) = (grads(&rs, &theirs), grads(&ns, &mine));
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(b.iter().any(|&x| x != 0.0), "{what}: no gradient {i}");
                let name = ns.name(mine[i].id()).unwrap();
                close_to(1e-5, a, b, &format!("{what} gradient of {name}"));
            }
            ro.step(&mut rs).unwrap();
            no.step(&mut ns).unwrap();
        }
    }
}

#[test]
fn data_is_deterministic_and_in_range() {
    let a = generate(300, 5, 3, 41);
    assert_eq!(a, generate(300, 5, 3, 41));
    assert_ne!(a, generate(300, 6, 3, 41));
    for ex in &a {
        let n = ex.chars.len();
        assert!((3..=41).contains(&n) && n % 2 == 1, "{}", ex.text());
        let want: u32 = ex
            .text()
            .split('+')
            .map(|d| d.parse::<u32>().unwrap())
            .sum();
        assert_eq!(ex.sum, want as f32, "{}", ex.text());
    }
    let lens: std::collections::BTreeSet<usize> = a.iter().map(|e| e.chars.len()).collect();
    assert!(lens.contains(&3) && lens.contains(&41), "{lens:?}");
}

/// The bucketed loss of a batch equals the unpadded one, under every
/// strategy, with the same parameters.
#[test]
fn bucketed_loss_equals_unpadded() {
    let data = generate(24, 3, 3, 41);
    let batch: Vec<&Example> = data.iter().collect();
    let mut losses = Vec::new();
    for mode in [
        Mode::Bucket(1.5),
        Mode::Bucket(2.0),
        Mode::Dynamic(Strategy::Agenda),
        Mode::Dynamic(Strategy::Sequential),
    ] {
        let mut store = ParamStore::new();
        let model = Model::new(&mut store, 8, 1).unwrap();
        let mut r = Runner::new(mode).unwrap();
        losses.push(r.run(&model, &store, &batch).unwrap());
    }
    for l in &losses[..3] {
        assert!(
            (l - losses[3]).abs() <= 1e-4 * losses[3].abs(),
            "{losses:?}"
        );
    }
}

/// A small configuration learns in seconds: the held-out error falls well
/// below that of predicting the mean.
#[test]
fn quick_training_learns() {
    let cfg = Config {
        hidden: 16,
        train: 800,
        test: 200,
        epochs: 4,
        max_len: 11,
        ..Config::default()
    };
    let report = train(&cfg, |_, _| {}).unwrap();
    let (first, last) = (report.mae[0], *report.mae.last().unwrap());
    assert!(last < first, "{:?}", report.mae);
    assert!(last < 1.5, "{:?}", report.mae);
    assert!(report.padding_fraction > 0.0 && report.padding_fraction < 0.5);
}

#[test]
fn bad_settings_are_errors() {
    let cfg = Config {
        batch: 0,
        ..Config::default()
    };
    assert!(train(&cfg, |_, _| {}).is_err());
    let cfg = Config {
        mode: Mode::Bucket(1.0),
        train: 10,
        test: 10,
        ..Config::default()
    };
    let err = train(&cfg, |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("spacing"), "{err}");
}
