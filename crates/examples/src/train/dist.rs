//! The trainer across ranks (`Trainer::set_distributed`): each rank takes
//! its shard of every minibatch, runs it as one graph, the gradients are
//! summed over the ranks ([`GradSync`]) and every rank takes the same
//! update. Rank 0 alone writes checkpoints.

use std::rc::Rc;

use sheaf_autodiff::Graph;
use sheaf_dist::{check_in_sync, shard, Communicator, GradSync, SyncStats};

use super::step::{dropout_seed, finish_step, minibatch_loss};
use super::{mix, Reduction, Trainer};
use crate::error::{Error, Result};

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
        let part = shard(batch, rank, size);
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
}
