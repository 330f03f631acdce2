//! One training step's parts, shared by the trainer's ways of running a
//! step (one graph through a `Pipeline`, parts side by side, blocks).

use sheaf_autodiff::{Expr, Graph, Optimizer, ParamStore};

use super::{mix, Split};
use crate::error::{Error, Result};
use crate::model::TreeLstm;

/// The losses of the training trees at positions `batch` added to `g` and
/// summed: `(total, loss)`, the loss the total divided by `n` (the whole
/// minibatch's size, of which `batch` may be a part) when `mean`.
pub(super) fn minibatch_loss(
    model: &TreeLstm,
    train: &Split,
    g: &mut Graph,
    batch: &[usize],
    mean: bool,
    n: usize,
) -> Result<(Expr, Expr)> {
    let losses = batch
        .iter()
        .map(|&i| model.tree_loss(g, &train.trees[i], &train.ids[i]))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let total = g.sum(&losses)?;
    let loss = match mean {
        true => g.scale(total, 1.0 / n as f32)?,
        false => total,
    };
    Ok((total, loss))
}

/// Ends a step whose summed loss is `value`: refuses a loss that is not
/// finite, applies the gradients ([`update`]) and counts the step in `step`
/// (the steps done before this one).
pub(super) fn finish_step(
    value: f32,
    step: &mut u64,
    model: &TreeLstm,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    embed_opt: Option<&mut Optimizer>,
) -> Result<()> {
    if !value.is_finite() {
        return Err(Error::Config(format!(
            "training diverged: the loss of step {} is {value} (try a lower --lr or --clip-norm)",
            *step + 1
        )));
    }
    update(model, store, opt, embed_opt)?;
    *step += 1;
    Ok(())
}

/// Tag that separates the dropout seeds from the shuffling seeds.
const DROPOUT_STREAM: u64 = 0x6472_6f70_6f75_7421;

/// The dropout seed of step `step` of a run seeded `seed`.
pub(super) fn dropout_seed(seed: u64, step: u64) -> u64 {
    mix(seed ^ DROPOUT_STREAM, step)
}

/// Applies the accumulated gradients: all parameters with `opt`, or, with
/// an embedding optimizer, the table's gradient is set aside while `opt`
/// updates the rest and then applied alone by `embed_opt`.
fn update(
    model: &TreeLstm,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    embed_opt: Option<&mut Optimizer>,
) -> Result<()> {
    let Some(embed_opt) = embed_opt else {
        opt.step(store)?;
        return Ok(());
    };
    let emb = model.embeddings().id();
    let (rows, dense) = {
        let mut acc = store.lock_grad(emb, "train")?;
        (
            std::mem::take(&mut acc.rows),
            std::mem::replace(&mut acc.dense, false),
        )
    };
    // The table's accumulator now reads as untouched, so this step
    // leaves the table (and its gradient) alone.
    opt.step(store)?;
    {
        let mut acc = store.lock_grad(emb, "train")?;
        acc.rows = rows;
        acc.dense = dense;
    }
    embed_opt.step(store)?;
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use std::fs;
    use std::path::Path;

    use super::super::*;
    use super::*;

    /// `dir/data` with the tiny fixture as every split.
    pub(in crate::train) fn tiny_data(dir: &Path) -> std::path::PathBuf {
        let data = dir.join("data");
        fs::create_dir_all(&data).unwrap();
        let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny.txt");
        for f in ["train.txt", "dev.txt", "test.txt"] {
            fs::copy(&tiny, data.join(f)).unwrap();
        }
        data
    }

    #[test]
    fn pipelined_steps_equal_a_plain_loop_of_steps() {
        // The same minibatches (with dropout) through `one_graph_steps` and
        // through a loop that builds and runs each graph in turn: the
        // step's seeds, order and update must agree bit for bit.
        let dir = std::env::temp_dir().join(format!("sheaf-train-unit-{}", std::process::id()));
        let data = tiny_data(&dir);
        let model = ModelConfig {
            embed_dim: 16,
            hidden: 8,
            dropout_embed: 0.3,
            dropout_output: 0.3,
            ..ModelConfig::new(0)
        };
        let cfg = TrainConfig {
            epochs: 1,
            batch_size: 6,
            seed: 7,
            exec: Exec::Agenda,
            ..TrainConfig::new(&data)
        };
        let new = |name: &str| {
            Trainer::new(
                &dir.join(name),
                model.clone(),
                cfg.clone(),
                true,
                &mut |_| {},
            )
            .unwrap()
        };
        let (mut piped, mut plain) = (new("piped"), new("plain"));
        let order = permutation(piped.train.len(), 99);
        let mut losses = Vec::new();
        piped
            .one_graph_steps(order.chunks(6), &mut |loss, _, _| losses.push(loss))
            .unwrap();
        let t = &mut plain;
        for (k, chunk) in order.chunks(6).enumerate() {
            let mut g = Graph::new();
            g.set_train(true);
            g.set_seed(dropout_seed(cfg.seed, k as u64));
            let mean = cfg.reduction == Reduction::Mean;
            let (total, loss) =
                minibatch_loss(&t.model, &t.train, &mut g, chunk, mean, chunk.len()).unwrap();
            t.engine.backward(&mut g, &t.store, loss).unwrap();
            let value = g.value(total).unwrap().to_vec::<f32>().unwrap()[0];
            assert_eq!(value as f64, losses[k], "loss of step {k}");
            g.clear();
            update(&t.model, &mut t.store, &mut t.opt, t.embed_opt.as_mut()).unwrap();
        }
        assert_eq!(piped.state.step, losses.len() as u64);
        let values = |t: &Trainer| -> Vec<Vec<f32>> {
            let s = &t.store;
            let ps = s.params();
            ps.iter()
                .map(|p| s.value(p).unwrap().to_vec().unwrap())
                .collect()
        };
        assert_eq!(values(&piped), values(&plain));
        let _ = fs::remove_dir_all(&dir);
    }
}
