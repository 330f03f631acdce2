//! Parameter initialisation: each distribution's range and moments, seeded
//! reproducibility, invalid arguments and shapes too large for memory as
//! errors (never an abort).

use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{Init, ParamStore};
use sheaf_tensor::Shape;

fn draw(init: Init, shape: &[usize], seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    init.tensor(Shape::new(shape).unwrap(), &mut rng)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

fn mean_std(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var.sqrt())
}

#[test]
fn distributions_have_their_range_and_moments() {
    assert!(draw(Init::Zeros, &[3, 4], 0).iter().all(|&x| x == 0.0));
    assert!(draw(Init::Const(0.5), &[7], 0).iter().all(|&x| x == 0.5));
    let u = draw(
        Init::Uniform {
            low: -0.2,
            high: 0.6,
        },
        &[100, 100],
        1,
    );
    assert!(u.iter().all(|&x| (-0.2..=0.6).contains(&x)));
    let (m, s) = mean_std(&u);
    assert!(
        (m - 0.2).abs() < 0.01 && (s - 0.8 / 12f64.sqrt()).abs() < 0.01,
        "{m} {s}"
    );
    // An odd count: the last pair's second normal is dropped.
    let n = draw(
        Init::Normal {
            mean: 1.0,
            std: 2.0,
        },
        &[10001],
        2,
    );
    let (m, s) = mean_std(&n);
    assert!((m - 1.0).abs() < 0.06 && (s - 2.0).abs() < 0.06, "{m} {s}");
    // Glorot: [out 30, in 70] -> limit sqrt(6 / 100).
    let g = draw(Init::GlorotUniform, &[30, 70], 3);
    let limit = (6.0f32 / 100.0).sqrt();
    assert!(g.iter().all(|&x| x.abs() <= limit));
    assert!(g.iter().any(|&x| x.abs() > 0.9 * limit));
}

#[test]
fn same_seed_same_values() {
    for init in [
        Init::Uniform {
            low: -1.0,
            high: 1.0,
        },
        Init::Normal {
            mean: 0.0,
            std: 1.0,
        },
        Init::GlorotUniform,
    ] {
        assert_eq!(draw(init, &[5, 9], 42), draw(init, &[5, 9], 42));
        assert_ne!(draw(init, &[5, 9], 42), draw(init, &[5, 9], 43));
    }
}

#[test]
fn invalid_arguments_are_errors() {
    let mut rng = StdRng::seed_from_u64(0);
    let e = Init::Uniform {
        low: 1.0,
        high: 0.0,
    }
    .tensor([3], &mut rng)
    .unwrap_err()
    .to_string();
    assert!(e.contains("Init::Uniform needs finite low <= high"), "{e}");
    let e = Init::Normal {
        mean: 0.0,
        std: -1.0,
    }
    .tensor([3], &mut rng)
    .unwrap_err()
    .to_string();
    assert!(e.contains("std >= 0"), "{e}");
}

/// 2^46 f32 (256 TiB) is beyond any machine's memory and address space:
/// an error naming the shape and the bytes, not an abort.
#[test]
fn a_parameter_too_large_for_memory_is_an_error() {
    let mut rng = StdRng::seed_from_u64(0);
    let mut store = ParamStore::new();
    let e = store
        .add_param(
            "huge",
            [1usize << 36, 1 << 10],
            Init::GlorotUniform,
            &mut rng,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("shape [68719476736, 1024]"), "{e}");
    assert!(
        e.contains("failed to allocate 281474976710656 bytes"),
        "{e}"
    );
    let e = store
        .add_lookup("table", 1 << 40, 64, Init::Zeros, &mut rng)
        .unwrap_err()
        .to_string();
    assert!(e.contains("failed to allocate"), "{e}");
    assert!(store.is_empty());
}
