//! W1 of `shared/BENCHMARKS.md`: Tree-LSTM training on SST. The model is
//! the SST example's ([`sheaf_examples::model::TreeLstm`]) with W1's
//! settings: E = 300, H = 150, C = 5, embeddings uniform in ±0.05, no
//! dropout; softmax cross-entropy at every node summed over the tree, 64
//! trees per update with their losses summed, plain SGD lr 0.05.

use sheaf_autodiff::{Expr, Graph, Optimizer, ParamStore, Sgd};
use sheaf_blocks::Loss;
use sheaf_examples::model::{ModelConfig, TreeLstm};
use sheaf_examples::sst::{Node, Tree, CLASSES};
use sheaf_examples::tree_lstm_blocks::{Phrase, TrainingModel};
use sheaf_sched::{DataParallel, Executor, Pipeline, Strategy};

use crate::step::backward_and_step;

/// Embedding size.
pub const E: usize = 300;
/// State size.
pub const H: usize = 150;
/// Classes.
pub const C: usize = CLASSES;

/// W1's model for a vocabulary of `vocab` rows (seeded initialisation):
/// E = 300, H = 150, embeddings uniform in ±0.05, matrices Glorot
/// uniform, biases zero, no dropout.
pub fn model(store: &mut ParamStore, vocab: usize, seed: u64) -> sheaf_autodiff::Result<TreeLstm> {
    let cfg = ModelConfig {
        embed_dim: E,
        hidden: H,
        embed_init: 0.05,
        dropout_embed: 0.0,
        dropout_output: 0.0,
        ..ModelConfig::new(vocab)
    };
    TreeLstm::new(store, &cfg, seed)
}

/// Useful model FLOPs of training on one tree (BENCHMARKS.md): leaf
/// 2·E·3H, internal 2·2H·5H, output 2·H·C per node, times 3.
pub fn train_flops(tree: &Tree) -> f64 {
    let per_node: f64 = tree
        .nodes
        .iter()
        .map(|n| match n {
            Node::Leaf { .. } => 2.0 * (E * 3 * H) as f64,
            Node::Inner { .. } => 2.0 * (2 * H * 5 * H) as f64,
        } + 2.0 * (H * C) as f64)
        .sum();
    3.0 * per_node
}

/// The summed loss of `trees` added to `g` (the graph of one step).
pub fn build_loss(
    model: &TreeLstm,
    g: &mut Graph,
    trees: &[Tree],
    ids: &[Vec<u32>],
) -> Result<Expr, String> {
    let mut losses = Vec::with_capacity(trees.len());
    for (t, ids) in trees.iter().zip(ids) {
        losses.push(model.tree_loss(g, t, ids).map_err(|e| e.to_string())?);
    }
    g.sum(&losses).map_err(|e| e.to_string())
}

/// One training step on `trees` (`ids[i]`: the vocabulary ids of
/// `trees[i]`'s words) with `strategy` (None = Sequential): all losses
/// summed into one graph, one forward, one backward, one update.
pub fn train_step(
    model: &TreeLstm,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    g: &mut Graph,
    exec: Option<&mut Executor>,
    trees: &[Tree],
    ids: &[Vec<u32>],
) -> Result<f32, String> {
    g.clear();
    let loss = build_loss(model, g, trees, ids)?;
    backward_and_step(g, store, opt, exec, loss)
}

/// [`train_step`] on each minibatch of `batch` trees in turn, the next
/// minibatch's graph built while the current one runs ([`Pipeline`]).
#[allow(clippy::too_many_arguments)]
pub fn train_steps_pipelined(
    model: &TreeLstm,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    pipeline: &mut Pipeline,
    mut exec: Option<&mut Executor>,
    trees: &[Tree],
    ids: &[Vec<u32>],
    batch: usize,
) -> Result<(), String> {
    pipeline.run(
        trees.chunks(batch).zip(ids.chunks(batch)),
        |g, &(trees, ids)| build_loss(model, g, trees, ids),
        |g, loss, _| backward_and_step(g, store, opt, exec.as_deref_mut(), loss).map(|_| ()),
    )
}

/// One training step with the batch split into `split.parts()` parts
/// ([`DataParallel`]), each built into its own graph and run by its own executor
/// side by side on the current rayon pool (the trees are independent
/// sub-graphs, as DL.scala runs them); the backwards accumulate into the
/// one store, then one update. The same sum of losses and gradients as
/// [`train_step`], in another summation order.
pub fn train_step_split(
    model: &TreeLstm,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    split: &mut DataParallel,
    trees: &[Tree],
    ids: &[Vec<u32>],
) -> Result<f32, String> {
    let items: Vec<(&Tree, &Vec<u32>)> = trees.iter().zip(ids).collect();
    let total = split
        .backward(store, &items, |_, g, chunk| -> Result<_, SplitError> {
            let losses = chunk
                .iter()
                .map(|(t, ids)| model.tree_loss(g, t, ids))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            Ok(g.sum(&losses).map_err(|e| e.to_string())?)
        })
        .map_err(|e| e.0)?;
    opt.step(store).map_err(|e| e.to_string())?;
    Ok(total)
}

/// A step's error as text (what the benches report).
struct SplitError(String);

impl From<String> for SplitError {
    fn from(e: String) -> Self {
        SplitError(e)
    }
}

impl From<sheaf_sched::SchedError> for SplitError {
    fn from(e: sheaf_sched::SchedError) -> Self {
        SplitError(e.to_string())
    }
}

/// SGD with lr 0.05, as W1 prescribes.
pub fn optimizer() -> Optimizer {
    Optimizer::sgd(Sgd {
        lr: 0.05,
        momentum: 0.0,
        weight_decay: 0.0,
    })
}

/// The strategies W1 reports.
pub fn strategies() -> [(&'static str, Option<Strategy>); 3] {
    [
        ("sequential", None),
        ("depth", Some(Strategy::Depth)),
        ("agenda", Some(Strategy::Agenda)),
    ]
}

/// The W1 model written with blocks, compiled for training.
pub type BlocksModel = TrainingModel;

/// One training step of the blocks-written model (the same graph as
/// [`train_step`]'s, built through the blocks): forward, backward, update.
pub fn train_step_blocks(
    compiled: &mut BlocksModel,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    phrases: &[Phrase],
) -> Result<f32, String> {
    let loss = compiled
        .backward(store, phrases, &Loss::metric("loss"))
        .map_err(|e| e.to_string())?;
    opt.step(store).map_err(|e| e.to_string())?;
    Ok(loss)
}
