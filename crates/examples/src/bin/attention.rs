//! `attention`: the feed-forward attention model of the Fold paper's
//! Appendix A (Raffel & Ellis 2016), written with sheaf's blocks, trained
//! on their addition problem. Fresh training sequences every step (as the
//! paper), a held-out test set from another seed; accuracy is the share of
//! test sequences predicted within 0.04 of the target (the paper's
//! criterion).

use std::time::Instant;

use clap::Parser;
use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{Adam, Optimizer, ParamStore};
use sheaf_blocks::{Compiled, Loss};
use sheaf_examples::attention::{Addition, Attention};
use sheaf_examples::engine::Exec;

#[derive(Parser, Debug)]
#[command(about = "Feed-forward attention (blocks) on the addition problem")]
struct Args {
    /// Shortest sequence.
    #[arg(long, default_value_t = 50)]
    min_len: usize,
    /// Longest sequence.
    #[arg(long, default_value_t = 55)]
    max_len: usize,
    /// Hidden units of the step and output layers.
    #[arg(long, default_value_t = 100)]
    hidden: usize,
    /// Sequences per update.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f32,
    /// Most updates.
    #[arg(long, default_value_t = 3000)]
    steps: usize,
    /// Updates between evaluations.
    #[arg(long, default_value_t = 250)]
    eval_every: usize,
    /// Stop once the test accuracy reaches this share.
    #[arg(long, default_value_t = 0.99)]
    target_accuracy: f64,
    /// Held-out sequences.
    #[arg(long, default_value_t = 1000)]
    test_size: usize,
    /// How graphs are executed.
    #[arg(long, value_enum, default_value = "agenda")]
    strategy: Exec,
    /// Seed of the initialisation and the training data (the test set
    /// uses seed + 1000).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() {
    sheaf_examples::logging::init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("attention: {e}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> Result<(), String> {
    if a.min_len < 2 || a.max_len < a.min_len || a.batch_size == 0 || a.eval_every == 0 {
        return Err(
            "need 2 <= --min-len <= --max-len and positive --batch-size, --eval-every".into(),
        );
    }
    let mut rng = StdRng::seed_from_u64(a.seed);
    let test = Addition::dataset(
        a.test_size,
        a.min_len,
        a.max_len,
        &mut StdRng::seed_from_u64(a.seed + 1000),
    );
    let mut store = ParamStore::new();
    let model = Attention::new(&mut store, a.hidden, &mut rng).map_err(|e| e.to_string())?;
    let mut train = Compiled::new(model.blocks())
        .map_err(|e| e.to_string())?
        .with_strategy(a.strategy.strategy());
    let mut eval = Compiled::new(model.blocks())
        .map_err(|e| e.to_string())?
        .with_strategy(a.strategy.strategy());
    let mut opt = Optimizer::adam(Adam {
        lr: a.lr,
        ..Adam::default()
    });
    println!(
        "attention: lengths {}..={}, hidden {}, batch {}, Adam lr {}, {}",
        a.min_len,
        a.max_len,
        a.hidden,
        a.batch_size,
        a.lr,
        a.strategy.name()
    );
    let start = Instant::now();
    let (mut seen, mut train_time) = (0usize, 0.0f64);
    for step in 1..=a.steps {
        let batch = Addition::dataset(a.batch_size, a.min_len, a.max_len, &mut rng);
        let t0 = Instant::now();
        train
            .backward(&store, &batch, &Loss::outputs().mean())
            .map_err(|e| e.to_string())?;
        opt.step(&mut store).map_err(|e| e.to_string())?;
        train_time += t0.elapsed().as_secs_f64();
        seen += batch.len();
        if step % a.eval_every == 0 || step == a.steps {
            // The model's output is the squared error: its root is |error|.
            let errors = eval.forward(&store, &test).map_err(|e| e.to_string())?;
            let (mut hits, mut mse) = (0usize, 0.0f64);
            for e in &errors {
                let sq = f64::from(e.to_vec::<f32>().map_err(|e| e.to_string())?[0]);
                mse += sq;
                hits += usize::from(sq.sqrt() < 0.04);
            }
            let acc = hits as f64 / test.len() as f64;
            println!(
                "step {step}: test MSE {:.5}, accuracy {:.1}% (|error| < 0.04), {:.0} sequences/s, {:.0} s",
                mse / test.len() as f64,
                100.0 * acc,
                seen as f64 / train_time,
                start.elapsed().as_secs_f64()
            );
            if acc >= a.target_accuracy {
                println!("reached {:.1}% after {step} updates", 100.0 * acc);
                break;
            }
        }
    }
    Ok(())
}
