//! W5 of `shared/BENCHMARKS.md`: two stacked weave modules (Kearnes et
//! al. 2016) on ESOL, training. The model is the weave example's, written
//! with blocks ([`sheaf_examples::weave::Weave::blocks`]), with W5's
//! settings: hidden 50, 32 molecules per update (mean squared error, as
//! the example trains), Adam lr 1e-3, the training part of the example's
//! random 80/10/10 split (seed 0).

use std::path::Path;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sheaf_autodiff::{Adam, Expr, Graph, Optimizer, ParamStore};
use sheaf_blocks::{Block, Compiled, Loss};
use sheaf_examples::molecules::{read_molecules, Featurizer, Molecule, PAIR_FEATURES};
use sheaf_examples::weave::{Weave, WeaveVertex};
use sheaf_sched::{Executor, Strategy};

/// Hidden size of the weave modules.
pub const HIDDEN: usize = 50;
/// Molecules per update.
pub const BATCH: usize = 32;

/// The training molecules (the first 80% of the example's split, seed 0)
/// and the atom feature count.
pub fn training_set(path: &Path) -> Result<(Vec<Molecule>, usize), String> {
    let raw = read_molecules(path).map_err(|e| e.to_string())?;
    let feat = Featurizer::fit(&raw);
    let mut all: Vec<Molecule> = raw.iter().map(|m| feat.featurize(m)).collect();
    all.shuffle(&mut StdRng::seed_from_u64(0));
    all.truncate(all.len() * 8 / 10);
    Ok((all, feat.atom_features()))
}

/// Useful training FLOPs of one molecule (`atom_in` atom features):
/// every product of the two modules and the head, times 3. With `n`
/// atoms and `p = n (n - 1)` ordered pairs, `d` = [`HIDDEN`], `f` =
/// [`PAIR_FEATURES`]: module 1 has `A→A` n·2·atom_in·d, `P→A` p·2·f·d,
/// `A` n·2·2d·d, `A→P` p·2·2·atom_in·d, `P→P` p·2·f·d, `P` p·2·2d·d;
/// module 2 (atoms only) `A→A` n·2·d·d, `P→A` p·2·d·d, `A` n·2·2d·d; the
/// head 2·d. `A→P` counts one product per ordered pair: the model adds
/// `W[a_i; a_j]` and `W[a_j; a_i]` for pair `ij`, and pair `ji` needs the
/// same two, so the example's second pair of products is not useful work.
pub fn train_flops(m: &Molecule, atom_in: usize) -> f64 {
    let n = m.atoms.len() as f64;
    let p = n * (n - 1.0);
    let (a, f, d) = (atom_in as f64, PAIR_FEATURES as f64, HIDDEN as f64);
    let module1 = n * 2.0 * a * d
        + p * 2.0 * f * d
        + n * 4.0 * d * d
        + p * 4.0 * a * d
        + p * 2.0 * f * d
        + p * 4.0 * d * d;
    let module2 = n * 2.0 * d * d + p * 2.0 * d * d + n * 4.0 * d * d;
    3.0 * (module1 + module2 + 2.0 * d)
}

/// The model (seeded) and its blocks compiled for `strategy`.
pub fn model(
    store: &mut ParamStore,
    atom_in: usize,
    strategy: Strategy,
    seed: u64,
) -> Result<Compiled<impl Block<In = Molecule, Out = Expr>>, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let weave = Weave::new(store, atom_in, HIDDEN, &mut rng).map_err(|e| e.to_string())?;
    let block = weave.blocks().map_err(|e| e.to_string())?;
    Ok(Compiled::new(block)
        .map_err(|e| e.to_string())?
        .with_strategy(strategy))
}

/// W5's model written with vertex functions ([`WeaveVertex`]), with the
/// graph and executor it trains in.
pub struct VertexModel {
    fns: WeaveVertex,
    graph: Graph,
    exec: Executor,
}

impl VertexModel {
    /// The plan statistics of the last update.
    pub fn stats(&self) -> &sheaf_sched::PlanStats {
        self.exec.stats()
    }
}

/// The model with vertex functions, with the same parameter values as
/// [`model`] for the same seed.
pub fn vertex_model(
    store: &mut ParamStore,
    atom_in: usize,
    strategy: Strategy,
    seed: u64,
) -> Result<VertexModel, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let weave = Weave::new(store, atom_in, HIDDEN, &mut rng).map_err(|e| e.to_string())?;
    Ok(VertexModel {
        fns: weave.vertex_functions().map_err(|e| e.to_string())?,
        graph: Graph::new(),
        exec: Executor::new(strategy),
    })
}

/// [`train_step`] for the vertex form: the batch's mean squared error
/// built with the vertex functions, forward, backward, the Adam step.
pub fn train_step_vertex(
    m: &mut VertexModel,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    batch: &[Molecule],
) -> Result<f32, String> {
    let g = &mut m.graph;
    g.clear();
    let err = |e: sheaf_autodiff::GraphError| e.to_string();
    let losses: Vec<Expr> = m
        .fns
        .build(g, batch)
        .map_err(err)?
        .into_iter()
        .map(|(_, loss)| loss)
        .collect();
    let total = g.sum(&losses).map_err(err)?;
    let mean = g.scale(total, 1.0 / batch.len() as f32).map_err(err)?;
    let loss = m.exec.forward(g, store, mean).map_err(|e| e.to_string())?;
    m.exec.backward(g, store, mean).map_err(|e| e.to_string())?;
    opt.step(store).map_err(|e| e.to_string())?;
    loss.item::<f32>().map_err(|e| e.to_string())
}

/// Adam with lr 1e-3, as W5 prescribes.
pub fn optimizer() -> Optimizer {
    Optimizer::adam(Adam {
        lr: 1e-3,
        ..Adam::default()
    })
}

/// One update on `batch`: the mean squared error's forward and backward
/// in one graph, then the Adam step. Returns the loss.
pub fn train_step<B: Block<In = Molecule, Out = Expr>>(
    c: &mut Compiled<B>,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    batch: &[Molecule],
) -> Result<f32, String> {
    let loss = c
        .backward(store, batch, &Loss::outputs().mean())
        .map_err(|e| e.to_string())?;
    opt.step(store).map_err(|e| e.to_string())?;
    Ok(loss)
}

/// The strategies W5 reports (`sequential` is the scheduler's
/// one-node-per-call plan, which the compiled blocks run).
pub fn strategies() -> [(&'static str, Strategy); 3] {
    [
        ("sequential", Strategy::Sequential),
        ("depth", Strategy::Depth),
        ("agenda", Strategy::Agenda),
    ]
}
