//! `weave`: two stacked weave modules (Kearnes et al. 2016; the Fold
//! paper's Appendix B), written with sheaf's blocks, trained on ESOL
//! solubility (W5 of the benchmark notes): random 80/10/10 split, Adam,
//! early stopping on the validation RMSE, test RMSE of the best epoch.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sheaf_autodiff::{Adam, Optimizer, ParamStore};
use sheaf_blocks::{Block, Compiled, Loss};
use sheaf_examples::engine::Exec;
use sheaf_examples::molecules::{default_path, read_molecules, Featurizer, Molecule};
use sheaf_examples::weave::Weave;
use sheaf_tensor::Tensor;

#[derive(Parser, Debug)]
#[command(about = "Weave modules (blocks) on ESOL solubility")]
struct Args {
    /// The molecules, JSON lines [default: the repository's
    /// data/molecules/esol.jsonl].
    #[arg(long)]
    data: Option<PathBuf>,
    /// Hidden size of the weave modules.
    #[arg(long, default_value_t = 50)]
    hidden: usize,
    /// Molecules per update.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f32,
    /// Most epochs.
    #[arg(long, default_value_t = 100)]
    epochs: usize,
    /// Stop after this many epochs without a better validation RMSE.
    #[arg(long, default_value_t = 10)]
    patience: usize,
    /// How graphs are executed.
    #[arg(long, value_enum, default_value = "agenda")]
    strategy: Exec,
    /// Seed of the split.
    #[arg(long, default_value_t = 0)]
    split_seed: u64,
    /// Seed of the initialisation and the epoch order.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() {
    sheaf_examples::logging::init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("weave: {e}");
        std::process::exit(1);
    }
}

/// Root mean squared error over `data` (the model's outputs are squared
/// errors).
fn rmse<B: Block<In = Molecule, Out = sheaf_autodiff::Expr>>(
    c: &mut Compiled<B>,
    store: &ParamStore,
    data: &[Molecule],
) -> Result<f64, String> {
    let mut sum = 0.0f64;
    for chunk in data.chunks(64) {
        let out: Vec<Tensor> = c.forward(store, chunk).map_err(|e| e.to_string())?;
        for t in out {
            sum += f64::from(t.to_vec::<f32>().map_err(|e| e.to_string())?[0]);
        }
    }
    Ok((sum / data.len().max(1) as f64).sqrt())
}

fn run(a: Args) -> Result<(), String> {
    if a.batch_size == 0 || a.epochs == 0 {
        return Err("--batch-size and --epochs must be positive".into());
    }
    let raw =
        read_molecules(&a.data.clone().unwrap_or_else(default_path)).map_err(|e| e.to_string())?;
    let feat = Featurizer::fit(&raw);
    let mut all: Vec<Molecule> = raw.iter().map(|m| feat.featurize(m)).collect();
    all.shuffle(&mut StdRng::seed_from_u64(a.split_seed));
    let (n_train, n_val) = (all.len() * 8 / 10, all.len() / 10);
    let test = all.split_off(n_train + n_val);
    let val = all.split_off(n_train);
    let train = all;
    println!(
        "weave: {} molecules ({} train, {} validation, {} test, split seed {}), {} atom features, hidden {}, {}",
        raw.len(),
        train.len(),
        val.len(),
        test.len(),
        a.split_seed,
        feat.atom_features(),
        a.hidden,
        a.strategy.name()
    );
    let mut rng = StdRng::seed_from_u64(a.seed);
    let mut store = ParamStore::new();
    let model = Weave::new(&mut store, feat.atom_features(), a.hidden, &mut rng)
        .map_err(|e| e.to_string())?;
    let block = || model.blocks().map_err(|e| e.to_string());
    let mut c = Compiled::new(block()?)
        .map_err(|e| e.to_string())?
        .with_strategy(a.strategy.strategy());
    let mut eval = Compiled::new(block()?)
        .map_err(|e| e.to_string())?
        .with_strategy(a.strategy.strategy());
    let mut opt = Optimizer::adam(Adam {
        lr: a.lr,
        ..Adam::default()
    });
    let mut order: Vec<usize> = (0..train.len()).collect();
    let (mut best, mut best_epoch, mut snapshot) = (f64::INFINITY, 0usize, Vec::new());
    let (mut seen, mut secs) = (0usize, 0.0f64);
    for epoch in 1..=a.epochs {
        order.shuffle(&mut rng);
        let t0 = Instant::now();
        let mut loss = 0.0f64;
        for chunk in order.chunks(a.batch_size) {
            let batch: Vec<&Molecule> = chunk.iter().map(|&i| &train[i]).collect();
            loss += f64::from(
                c.backward(&store, batch.iter().copied(), &Loss::outputs().mean())
                    .map_err(|e| e.to_string())?,
            ) * batch.len() as f64;
            opt.step(&mut store).map_err(|e| e.to_string())?;
        }
        secs += t0.elapsed().as_secs_f64();
        seen += train.len();
        let v = rmse(&mut eval, &store, &val)?;
        println!(
            "epoch {epoch}: train RMSE {:.3}, validation RMSE {v:.3}, {:.0} molecules/s",
            (loss / train.len() as f64).sqrt(),
            seen as f64 / secs
        );
        if v < best {
            best = v;
            best_epoch = epoch;
            // Copies, not shared handles: the next update then writes the
            // parameters in place (sharing would make it copy them).
            snapshot = store
                .params()
                .iter()
                .map(|p| {
                    let v = store.value(p).map_err(|e| e.to_string())?;
                    v.deep_clone().map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, _>>()?;
        } else if epoch - best_epoch >= a.patience {
            break;
        }
    }
    for (p, v) in store.params().iter().zip(snapshot) {
        *store.value_mut(p).map_err(|e| e.to_string())? = v;
    }
    let t = rmse(&mut eval, &store, &test)?;
    println!(
        "best epoch {best_epoch}: validation RMSE {best:.3}, test RMSE {t:.3}; training {:.0} molecules/s",
        seen as f64 / secs
    );
    Ok(())
}
