//! `text2vec`: §3.3 of the TensorFlow Fold paper, written with sheaf's
//! blocks, trained on the SST sentences' root labels (the words only, no
//! tree structure): an RNN over the words, unknown words as zeros.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sheaf_autodiff::{Adagrad, Optimizer, ParamStore};
use sheaf_blocks::{Compiled, Loss};
use sheaf_examples::engine::Exec;
use sheaf_examples::sst::read_trees;
use sheaf_examples::text2vec::{word_index, Sentence, Text2Vec};

#[derive(Parser, Debug)]
#[command(about = "Fold's text2vec (an RNN over words, with blocks) on SST root labels")]
struct Args {
    /// Directory with train.txt, dev.txt, test.txt [default: the
    /// repository's data/sst].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Passes over the training sentences.
    #[arg(long, default_value_t = 6)]
    epochs: usize,
    /// Sentences per update.
    #[arg(long, default_value_t = 25)]
    batch_size: usize,
    /// Adagrad learning rate.
    #[arg(long, default_value_t = 0.02)]
    lr: f32,
    /// Embedding size.
    #[arg(long, default_value_t = 50)]
    embed_dim: usize,
    /// RNN state size.
    #[arg(long, default_value_t = 50)]
    state: usize,
    /// Words seen fewer times in training are unknown (zero vectors).
    #[arg(long, default_value_t = 2)]
    min_count: usize,
    /// How graphs are executed.
    #[arg(long, value_enum, default_value = "depth")]
    strategy: Exec,
    /// Seed of the initialisation and the epoch order.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() {
    sheaf_examples::logging::init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("text2vec: {e}");
        std::process::exit(1);
    }
}

fn sentences(dir: &Path, split: &str) -> Result<Vec<Sentence>, String> {
    let trees = read_trees(&dir.join(format!("{split}.txt"))).map_err(|e| e.to_string())?;
    Ok(trees.iter().filter_map(Sentence::from_tree).collect())
}

/// Fine-grained and binary accuracy (%) of the model's class scores.
fn accuracy<B>(
    c: &mut Compiled<B>,
    store: &ParamStore,
    data: &[Sentence],
) -> Result<(f64, f64), String>
where
    B: sheaf_blocks::Block<In = Sentence, Out = ((), ())>,
{
    c.set_train(false);
    let (mut fine, mut bin, mut bin_n) = (0usize, 0usize, 0usize);
    for chunk in data.chunks(256) {
        c.forward(store, chunk).map_err(|e| e.to_string())?;
        for (i, logits) in c.metric("logits").map_err(|e| e.to_string())? {
            let l = logits.to_vec::<f32>().map_err(|e| e.to_string())?;
            let gold = chunk[i].label as usize;
            let best = (0..l.len())
                .max_by(|&a, &b| l[a].total_cmp(&l[b]))
                .unwrap_or(0);
            fine += usize::from(best == gold);
            if gold != 2 {
                let p: Vec<f64> = l.iter().map(|&x| f64::from(x).exp()).collect();
                let positive = p[3] + p[4] > p[0] + p[1];
                bin += usize::from(positive == (gold > 2));
                bin_n += 1;
            }
        }
    }
    c.set_train(true);
    Ok((
        100.0 * fine as f64 / data.len().max(1) as f64,
        100.0 * bin as f64 / bin_n.max(1) as f64,
    ))
}

fn run(a: Args) -> Result<(), String> {
    let dir = a
        .data_dir
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/sst"));
    let (train, dev, test) = (
        sentences(&dir, "train")?,
        sentences(&dir, "dev")?,
        sentences(&dir, "test")?,
    );
    if a.batch_size == 0 || a.epochs == 0 {
        return Err("--batch-size and --epochs must be positive".into());
    }
    let words = word_index(&train, a.min_count);
    println!(
        "text2vec: {} training sentences, {} words seen >= {} times, embed {}, state {}, {}",
        train.len(),
        words.len(),
        a.min_count,
        a.embed_dim,
        a.state,
        a.strategy.name()
    );
    let mut rng = StdRng::seed_from_u64(a.seed);
    let mut store = ParamStore::new();
    let model = Text2Vec::new(&mut store, words, a.embed_dim, a.state, &mut rng)
        .map_err(|e| e.to_string())?;
    let mut c = Compiled::new(model.blocks())
        .map_err(|e| e.to_string())?
        .with_strategy(a.strategy.strategy());
    let mut opt = Optimizer::adagrad(Adagrad {
        lr: a.lr,
        eps: 1e-8,
        weight_decay: 0.0,
    });
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut best = (f64::MIN, 0usize, Vec::new());
    for epoch in 1..=a.epochs {
        order.shuffle(&mut rng);
        let start = Instant::now();
        let mut total = 0.0f64;
        for chunk in order.chunks(a.batch_size) {
            let batch: Vec<&Sentence> = chunk.iter().map(|&i| &train[i]).collect();
            total += f64::from(
                c.backward(&store, batch.iter().copied(), &Loss::metric("loss").mean())
                    .map_err(|e| e.to_string())?,
            ) * batch.len() as f64;
            opt.step(&mut store).map_err(|e| e.to_string())?;
        }
        let secs = start.elapsed().as_secs_f64();
        let (fine, binary) = accuracy(&mut c, &store, &dev)?;
        println!(
            "epoch {epoch}: loss {:.4}, {:.0} sentences/s, dev fine {fine:.2}% binary {binary:.2}%",
            total / train.len() as f64,
            train.len() as f64 / secs
        );
        if fine > best.0 {
            // Copies, not shared handles: the next update then writes the
            // parameters in place (sharing would make it copy them).
            let snapshot = model
                .params()
                .iter()
                .map(|p| {
                    let v = store.value(p).map_err(|e| e.to_string())?;
                    v.deep_clone().map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, _>>()?;
            best = (fine, epoch, snapshot);
        }
    }
    for (p, v) in model.params().iter().zip(&best.2) {
        *store.value_mut(p).map_err(|e| e.to_string())? = v.clone();
    }
    let (fine, binary) = accuracy(&mut c, &store, &test)?;
    println!(
        "best dev epoch {}: test fine {fine:.2}% binary {binary:.2}%",
        best.1
    );
    Ok(())
}
