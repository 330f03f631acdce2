//! The trainer across ranks (`Trainer::set_distributed`): each rank takes
//! its shard of every minibatch, runs it as one graph, the gradients are
//! summed over the ranks ([`GradSync`]) and every rank takes the same
//! update. Rank 0 alone writes checkpoints.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use sheaf_autodiff::Graph;
use sheaf_dist::{balanced_shard, check_in_sync, shard, Communicator, GradSync, SyncStats};

use super::step::{dropout_seed, finish_step, minibatch_loss};
use super::{mix, prepare_dir, Event, ModelConfig, Reduction, TrainConfig, Trainer};
use crate::error::{Error, Result};
use crate::eval::{evaluate, Scores};
use crate::state::STATE;

/// What a distributed trainer keeps.
pub(super) struct Distributed {
    pub(super) comm: Rc<dyn Communicator>,
    sync: GradSync,
    /// Compare parameter checksums every this many steps (0 = never).
    check_every: u64,
    /// This rank's graph, reused from step to step.
    graph: Graph,
    /// Totals of the gradient exchanges so far.
    pub(super) stats: SyncStats,
}

/// Default interval of the parameter comparison.
pub const DEFAULT_CHECK_EVERY: u64 = 100;

impl Distributed {
    pub(super) fn new(comm: Rc<dyn Communicator>, sync: GradSync, check_every: u64) -> Self {
        Distributed {
            comm,
            sync,
            check_every,
            graph: Graph::new(),
            stats: SyncStats::default(),
        }
    }
}

impl Trainer {
    /// [`Trainer::new`] on one rank of a distributed run
    /// ([`Trainer::set_distributed`] follows): rank 0 prepares the
    /// directory and writes the run's files, the other ranks build the
    /// same run in memory and write nothing.
    pub fn new_distributed(
        dir: &Path,
        model: ModelConfig,
        cfg: TrainConfig,
        overwrite: bool,
        (comm, sync, check_every): (Rc<dyn Communicator>, GradSync, u64),
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<Trainer> {
        let rank0 = comm.rank() == 0;
        if rank0 && !overwrite && dir.join(STATE).exists() {
            prepare_dir(dir, false)?;
        }
        // Checked (ranks, models) before anything is written: a refused
        // start leaves the directory as it was.
        let mut t = Trainer::create(dir, model, cfg, overwrite, false, on)?;
        t.set_distributed(comm, sync, check_every)?;
        if rank0 {
            t.write_new_run(overwrite)?;
        }
        Ok(t)
    }

    /// Trains as one rank of `comm` from now on: each step this rank runs
    /// its shard of the minibatch ([`sheaf_dist::balanced_shard`] by node
    /// count), `sync` sums the gradients over the ranks and every rank
    /// takes the same update;
    /// every `check_every` steps (0 = never) the ranks compare parameter
    /// checksums. Checks first that every rank runs the same model and
    /// settings, then copies rank 0's parameters to every rank. Only rank 0
    /// writes checkpoints (create the other ranks' trainers with
    /// [`Trainer::new_distributed`], or resume them from rank 0's
    /// directory). Needs the hand-written model and one graph per step.
    pub fn set_distributed(
        &mut self,
        comm: Rc<dyn Communicator>,
        sync: GradSync,
        check_every: u64,
    ) -> Result<()> {
        let size = comm.size();
        let refuse = |why: String| Err(Error::Config(format!("--distributed: {why}")));
        if self.blocks.is_some() {
            return refuse("the model written with blocks is not supported across ranks".into());
        }
        if self.parallel.is_some() {
            return refuse("--parallel splits a rank's shard again; run more ranks instead".into());
        }
        if size > self.state.train.batch_size {
            return refuse(format!(
                "{size} ranks but minibatches of {} trees: each rank needs at least one \
                 tree (use at most {} ranks, or a larger --batch-size)",
                self.state.train.batch_size, self.state.train.batch_size
            ));
        }
        sheaf_dist::check_same_model(&*comm, &self.store, self.settings_hash())?;
        sheaf_dist::broadcast_params(&*comm, &mut self.store)?;
        self.dist = Some(Distributed::new(comm, sync, check_every));
        Ok(())
    }

    /// A hash of the settings every rank must share: the model, the
    /// training settings but the paths (machines may differ), and where
    /// the run stands (epochs done, step). Ranks that differ in the epoch
    /// count or patience, or resumed from different checkpoints, would
    /// otherwise stop at different epochs and leave the others waiting in
    /// a collective.
    fn settings_hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut train = self.state.train.clone();
        train.data_dir = PathBuf::new();
        train.embeddings = None;
        let at = (self.state.epochs_done, self.state.step);
        let text = serde_json::to_string(&(&self.state.model, &train, at)).unwrap_or_default();
        let mut h = std::hash::DefaultHasher::new();
        text.hash(&mut h);
        h.finish()
    }

    /// Whether this trainer writes the run's files (not a distributed
    /// run's ranks other than 0).
    pub(super) fn writes(&self) -> bool {
        self.dist.as_ref().is_none_or(|d| d.comm.rank() == 0)
    }

    /// The gradient exchanges of a distributed run so far (zero otherwise).
    pub fn sync_stats(&self) -> SyncStats {
        self.dist.as_ref().map(|d| d.stats).unwrap_or_default()
    }

    /// One update on the minibatch at positions `batch`, of which this rank
    /// runs its shard; returns the minibatch's summed loss (over all ranks)
    /// and node count.
    pub(super) fn distributed_step(&mut self, batch: &[usize]) -> Result<(f64, usize)> {
        let Trainer {
            state,
            model,
            store,
            opt,
            embed_opt,
            engine,
            train,
            dist,
            ..
        } = self;
        let d = dist
            .as_mut()
            .ok_or_else(|| Error::Config("a distributed step without a communicator".into()))?;
        let (rank, size) = (d.comm.rank(), d.comm.size());
        // Shards of equal size and close node counts: the ranks then reach
        // the gradient sum at about the same time.
        let nodes: Vec<u64> = batch.iter().map(|&i| train.nodes(&[i]) as u64).collect();
        let part: Vec<usize> = balanced_shard(&nodes, rank, size)
            .into_iter()
            .map(|k| batch[k])
            .collect();
        let part = &part[..];
        let mean = state.train.reduction == Reduction::Mean;
        let mut value = [0.0f64];
        if !part.is_empty() {
            let g = &mut d.graph;
            g.set_train(true);
            // Each rank's own dropout stream (rank 0's is the one-process
            // run's): masks depend on the rank count, as with --parallel.
            g.set_seed(match rank {
                0 => dropout_seed(state.train.seed, state.step),
                r => mix(dropout_seed(state.train.seed, state.step), r as u64),
            });
            // Scaled by the WHOLE minibatch's size: the ranks' gradients
            // then sum to the gradient of the minibatch's mean loss.
            let (total, loss) = minibatch_loss(model, train, g, part, mean, batch.len())?;
            engine.backward(g, store, loss)?;
            value[0] = f64::from(
                g.value(total)?
                    .to_vec::<f32>()
                    .map_err(|e| Error::Config(format!("reading the loss: {e}")))?[0],
            );
            // Cleared before the update, so that it writes in place.
            g.clear();
        }
        d.stats += d.sync.sync(&*d.comm, store)?;
        d.comm.all_reduce_sum_f64(&mut value)?;
        let step = &mut state.step;
        finish_step(value[0] as f32, step, model, store, opt, embed_opt.as_mut())?;
        if d.check_every > 0 && *step % d.check_every == 0 {
            check_in_sync(&*d.comm, store, *step)?;
        }
        Ok((value[0], train.nodes(batch)))
    }

    /// [`Trainer::evaluate_dev`] across the ranks: each scores its
    /// contiguous part of the dev set ([`sheaf_dist::shard`]), then the
    /// four counts are summed over the ranks (exact: integers well below
    /// 2^53), so every rank gets the scores of the whole set.
    pub(super) fn evaluate_dev_distributed(&mut self) -> Result<Scores> {
        let d = self.dist.as_ref().ok_or_else(|| {
            Error::Config("a distributed evaluation without a communicator".into())
        })?;
        let (rank, size) = (d.comm.rank(), d.comm.size());
        let mine = evaluate(
            &self.model,
            &self.store,
            &mut self.engine,
            shard(&self.dev.trees, rank, size),
            shard(&self.dev.ids, rank, size),
        );
        // A rank that failed still joins the sum (with a flag), so that
        // the others do not wait for it; then every rank stops with its
        // error or the failed rank's.
        let s = mine.as_ref().copied().unwrap_or_default();
        let mut counts = [
            s.fine_correct as f64,
            s.fine_total as f64,
            s.binary_correct as f64,
            s.binary_total as f64,
            f64::from(u8::from(mine.is_err())),
        ];
        d.comm.all_reduce_sum_f64(&mut counts)?;
        mine?;
        if counts[4] > 0.0 {
            return Err(Error::Config(format!(
                "evaluating the dev set failed on {} other rank(s)",
                counts[4]
            )));
        }
        Ok(Scores {
            fine_correct: counts[0] as usize,
            fine_total: counts[1] as usize,
            binary_correct: counts[2] as usize,
            binary_total: counts[3] as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use sheaf_dist::Threads;

    use super::super::step::tests::tiny_data as data;
    use super::super::*;
    use super::*;
    use crate::engine::Exec;

    fn settings(data: &Path, exec: Exec, optimizer: OptimizerKind) -> (ModelConfig, TrainConfig) {
        let model = ModelConfig {
            embed_dim: 12,
            hidden: 8,
            // No dropout: masks depend on the rank count.
            dropout_embed: 0.0,
            dropout_output: 0.0,
            ..ModelConfig::new(0)
        };
        let cfg = TrainConfig {
            epochs: 2,
            batch_size: 4,
            seed: 5,
            exec,
            optimizer,
            lr: optimizer.default_lr() * 10.0,
            // Sparse SGD rows on the embedding table besides the dense rule.
            embed_lr: Some(0.1),
            ..TrainConfig::new(data)
        };
        (model, cfg)
    }

    /// Every parameter's values, in store order.
    fn values(t: &Trainer) -> Vec<(String, Vec<f32>)> {
        let s = t.store();
        s.params()
            .iter()
            .map(|p| {
                let name = s.name(p.id()).unwrap().to_string();
                (name, s.value(p).unwrap().to_vec().unwrap())
            })
            .collect()
    }

    /// Two and three ranks (threads) train to the same losses and
    /// parameters as one process on the whole minibatch, 10 steps (two
    /// epochs of 5), under depth and agenda, with Adagrad and Adam state
    /// and a sparse embedding update. Tolerance: the ranks' gradients are
    /// summed in another order than one graph's, so results differ by
    /// rounding: |a - b| <= 1e-4 (1 + max(|a|, |b|)), far below the effect
    /// of a lost or doubled shard (the first step alone moves parameters
    /// by ~1e-2 at these rates).
    #[test]
    fn ranks_train_like_one_process() {
        let dir = std::env::temp_dir().join(format!("sheaf-dist-train-{}", std::process::id()));
        let data = data(&dir);
        for exec in [Exec::Depth, Exec::Agenda] {
            for opt in [OptimizerKind::Adagrad, OptimizerKind::Adam] {
                let (model, cfg) = settings(&data, exec, opt);
                let name = format!("{exec:?}-{opt:?}");
                let mut one = Trainer::new(
                    &dir.join(format!("one-{name}")),
                    model.clone(),
                    cfg.clone(),
                    true,
                    &mut |_| {},
                )
                .unwrap();
                one.run(&mut |_| {}).unwrap();
                for size in [2, 3] {
                    let ranks = std::thread::scope(|s| {
                        let handles: Vec<_> = Threads::group(size)
                            .into_iter()
                            .map(|comm| {
                                let (model, cfg) = (model.clone(), cfg.clone());
                                let dir = dir.join(format!("ranks{size}-{name}"));
                                s.spawn(move || {
                                    let comm: Rc<dyn Communicator> = Rc::new(comm);
                                    let sync = GradSync::with_bucket_bytes(4096);
                                    let mut t = Trainer::new_distributed(
                                        &dir,
                                        model,
                                        cfg,
                                        true,
                                        (comm, sync, 1),
                                        &mut |_| {},
                                    )
                                    .unwrap();
                                    t.run(&mut |_| {}).unwrap();
                                    // Scored in parts across the ranks, and
                                    // whole on this rank alone.
                                    let split = t.evaluate_dev().unwrap();
                                    let (dev, model, store) = (&t.dev, &t.model, &t.store);
                                    let whole =
                                        evaluate(model, store, &mut t.engine, &dev.trees, &dev.ids)
                                            .unwrap();
                                    let scores = (split, whole, dev.trees.len());
                                    (t.state().clone(), values(&t), t.sync_stats(), scores)
                                })
                            })
                            .collect();
                        handles
                            .into_iter()
                            .map(|h| h.join().unwrap())
                            .collect::<Vec<_>>()
                    });
                    let close =
                        |a: f64, b: f64| (a - b).abs() <= 1e-4 * (1.0 + a.abs().max(b.abs()));
                    for (rank, (state, params, stats, scores)) in ranks.iter().enumerate() {
                        let what = format!("{name}, {size} ranks, rank {rank}");
                        assert_eq!(state.step, 10, "{what}");
                        let (split, whole, dev) = scores;
                        assert_eq!(split, whole, "{what}: dev scores in parts vs whole");
                        assert_eq!(split.fine_total, *dev, "{what}");
                        assert!(
                            stats.buckets >= 2 && stats.sparse_bytes > 0,
                            "{what}: {stats:?}"
                        );
                        for (e, (a, b)) in
                            state.history.iter().zip(&one.state().history).enumerate()
                        {
                            assert!(
                                close(a.train_loss, b.train_loss),
                                "{what}: epoch {} loss {} vs {}",
                                e + 1,
                                a.train_loss,
                                b.train_loss
                            );
                        }
                        // Every rank holds the same bits (checked every step too).
                        assert_eq!(params, &ranks[0].1, "{what}: differs from rank 0");
                        for ((name, a), (_, b)) in params.iter().zip(&values(&one)) {
                            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                                assert!(
                                    close(f64::from(*x), f64::from(*y)),
                                    "{what}: {name}[{i}] {x} vs {y} in one process"
                                );
                            }
                        }
                    }
                    // Only rank 0 wrote the run's files.
                    assert!(dir
                        .join(format!("ranks{size}-{name}"))
                        .join("state.json")
                        .exists());
                }
            }
        }
        let _ = fs::remove_dir_all(&dir);
    }

    /// Starts `size` thread ranks with `cfg_of(rank)` (a distributed start
    /// that must fail) and returns each rank's error.
    fn start_errors(
        dir: &Path,
        model: &ModelConfig,
        size: usize,
        cfg_of: impl Fn(usize) -> TrainConfig + Sync,
    ) -> Vec<String> {
        std::thread::scope(|s| {
            let handles: Vec<_> = Threads::group(size)
                .into_iter()
                .map(|comm| {
                    let (model, cfg, dir) = (model.clone(), cfg_of(comm.rank()), dir.join("run"));
                    s.spawn(move || {
                        let comm: Rc<dyn Communicator> = Rc::new(comm);
                        Trainer::new_distributed(
                            &dir,
                            model,
                            cfg,
                            true,
                            (comm, GradSync::new(), 0),
                            &mut |_| {},
                        )
                        .map(|_| ())
                        .unwrap_err()
                        .to_string()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Ranks given different epoch counts are refused at the start on
    /// every rank (they would stop at different epochs, and the rank that
    /// trains on would wait for the others for ever).
    #[test]
    fn ranks_with_other_epoch_counts_are_refused() {
        let dir = std::env::temp_dir().join(format!("sheaf-dist-epochs-{}", std::process::id()));
        let data = data(&dir);
        let (model, cfg) = settings(&data, Exec::Agenda, OptimizerKind::Adagrad);
        let errors = start_errors(&dir, &model, 2, |rank| TrainConfig {
            epochs: cfg.epochs + rank,
            ..cfg.clone()
        });
        for e in errors {
            assert!(
                e.contains("rank 1") && e.contains("configuration hash"),
                "{e}"
            );
        }
        let _ = fs::remove_dir_all(&dir);
    }

    /// More ranks than trees per minibatch is refused, naming both.
    #[test]
    fn more_ranks_than_a_minibatch_is_refused() {
        let dir = std::env::temp_dir().join(format!("sheaf-dist-refuse-{}", std::process::id()));
        let data = data(&dir);
        let (model, mut cfg) = settings(&data, Exec::Agenda, OptimizerKind::Adagrad);
        cfg.batch_size = 2;
        for e in start_errors(&dir, &model, 3, |_| cfg.clone()) {
            assert!(e.contains("3 ranks but minibatches of 2 trees"), "{e}");
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
