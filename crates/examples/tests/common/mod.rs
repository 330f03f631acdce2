//! Helpers shared by the training and CLI tests: temporary directories,
//! the tiny fixture as a data directory, small model settings.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use sheaf_examples::engine::Exec;
use sheaf_examples::model::ModelConfig;
use sheaf_examples::train::TrainConfig;

/// A fixture file of this crate.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A fresh directory under the system's temporary directory, removed when
/// dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "sheaf-sst-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A data directory in `tmp/data` whose train, dev and test files are all
/// the 20 trees of `tiny.txt`.
pub fn tiny_data(tmp: &TempDir) -> PathBuf {
    let dir = tmp.join("data");
    fs::create_dir_all(&dir).unwrap();
    let text = fs::read_to_string(fixture("tiny.txt")).unwrap();
    for f in ["train.txt", "dev.txt", "test.txt"] {
        fs::write(dir.join(f), &text).unwrap();
    }
    dir
}

/// E = 16, H = 8, embeddings in ±0.1, the given dropout.
pub fn small_model(dropout: f32) -> ModelConfig {
    ModelConfig {
        embed_dim: 16,
        hidden: 8,
        embed_init: 0.1,
        dropout_embed: dropout,
        dropout_output: dropout,
        ..ModelConfig::new(0)
    }
}

/// Batches of 6 (the last one short), the given epochs and executor.
pub fn small_train(data: &Path, epochs: usize, exec: Exec) -> TrainConfig {
    TrainConfig {
        epochs,
        batch_size: 6,
        seed: 7,
        exec,
        ..TrainConfig::new(data)
    }
}

/// Asserts `a` and `b` agree elementwise to `tol`, relative to the larger
/// magnitude (absolute near zero).
#[track_caller]
pub fn close_to(tol: f32, a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

/// The accumulated gradient of each of `params`, in order; zeroes the
/// store's gradients afterwards.
pub fn take_grads(
    store: &mut sheaf_autodiff::ParamStore,
    params: &[sheaf_autodiff::Param],
) -> Vec<Vec<f32>> {
    let g = params
        .iter()
        .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
        .collect();
    store.zero_grads().unwrap();
    g
}
