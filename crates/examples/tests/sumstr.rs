//! The W6 example: data generation, one model run bucketed and unpadded,
//! and a quick training run that learns.

use sheaf_autodiff::ParamStore;
use sheaf_examples::sumstr::{generate, train, Config, Example, Mode, Model, Runner};
use sheaf_sched::Strategy;

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
