//! [`DataParallel`]: data parallelism inside one minibatch. The instances are cut
//! into parts, each with its own graph and [`Executor`], and the parts run
//! side by side on the current rayon pool against one [`ParamStore`]:
//! graph building, planning and every kernel of a part stay on its thread,
//! and the parameter gradients meet in the store (a dense parameter that
//! another part is writing is accumulated apart for the rest of that
//! part's backward and added once at its end, see
//! [`ParamStore::try_lock_grad`]). With few cores this uses them better
//! than splitting each kernel: most of a step is small products and
//! elementwise work that does not split well (W1, Tree-LSTM training, 2
//! cores: `cargo xtask bench W1` reports `agenda` and `agenda/split` side
//! by side).
//!
//! Results equal the unsplit batch's up to the order in which gradients
//! are summed. Each part's graph has its own seed (set it in `build`), so
//! dropout masks depend on how the batch is split.

use std::sync::Barrier;

use sheaf_autodiff::{Expr, Graph, GraphError, ParamStore};

use crate::error::SchedError;
use crate::exec::Executor;
use crate::plan::Strategy;

/// One graph and executor per part of a minibatch (see the module
/// documentation).
pub struct DataParallel {
    parts: Vec<(Graph, Executor)>,
}

impl std::fmt::Debug for DataParallel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataParallel")
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl DataParallel {
    /// `parts` executors of `strategy` (at least one).
    pub fn new(strategy: Strategy, parts: usize) -> Self {
        DataParallel {
            parts: (0..parts.max(1))
                .map(|_| (Graph::new(), Executor::new(strategy)))
                .collect(),
        }
    }

    /// The number of parts.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// The parts' executors (their plan statistics, strategies).
    pub fn executors(&self) -> impl Iterator<Item = &Executor> {
        self.parts.iter().map(|(_, e)| e)
    }

    /// Runs one minibatch: part `k` gets the `k`-th of `items` cut into
    /// `parts()` contiguous chunks (a short batch leaves the last parts
    /// idle); `build(k, graph, chunk)` adds the chunk's loss (one element)
    /// to the part's cleared graph (in training mode if it sets it) and
    /// returns it. All parts then run forward and backward at once (at most
    /// one per thread of the current pool at a time), adding their
    /// parameter gradients to `store`, and the sum of their loss values is
    /// returned. A part's graph is cleared when it is done, and again when
    /// the next step starts.
    ///
    /// Call it from outside other rayon work on the same pool: the parts
    /// of a wave each need a thread to start on.
    ///
    /// # Errors
    /// The first part's error in part order: `build`'s own, or the
    /// executor's (converted into `E`). The parts that succeeded have then
    /// added their gradients to `store`: zero them before another try.
    pub fn backward<T, E, F>(&mut self, store: &ParamStore, items: &[T], build: F) -> Result<f32, E>
    where
        T: Sync,
        E: From<SchedError> + Send,
        F: Fn(usize, &mut Graph, &[T]) -> Result<Expr, E> + Sync,
    {
        if items.is_empty() {
            return Ok(0.0);
        }
        let per = items.len().div_ceil(self.parts.len());
        let run = |k: usize, (g, exec): &mut (Graph, Executor), chunk: &[T]| -> Result<f32, E> {
            g.clear();
            let loss = build(k, g, chunk)?;
            exec.forward(g, store, loss)?;
            exec.backward(g, store, loss)?;
            let value = g
                .value(loss)
                .and_then(|t| {
                    t.to_vec::<f32>().map_err(|e| GraphError::Tensor {
                        context: "reading a part's loss".into(),
                        source: Box::new(e),
                    })
                })
                .map_err(SchedError::from)?;
            g.clear();
            Ok(value.first().copied().unwrap_or(0.0))
        };
        // Parts run in waves of at most one per thread, and every part of a
        // wave waits until all have started: a part still queued could
        // otherwise be picked up by a thread waiting inside another part's
        // kernel while that part holds a parameter's gradient, and then
        // wait for that gradient forever (on the same thread).
        let chunks: Vec<&[T]> = items.chunks(per).collect();
        let wave = rayon::current_num_threads().max(1);
        let mut losses: Vec<Result<f32, E>> = Vec::with_capacity(chunks.len());
        let parts = &mut self.parts[..chunks.len()];
        for (w, (parts, chunks)) in parts.chunks_mut(wave).zip(chunks.chunks(wave)).enumerate() {
            // One job per part (a job holding two parts would wait at the
            // barrier for its own second part).
            let started = Barrier::new(parts.len());
            let mut out: Vec<Option<Result<f32, E>>> = (0..parts.len()).map(|_| None).collect();
            let (run, started) = (&run, &started);
            rayon::scope(|s| {
                for (i, ((part, chunk), slot)) in
                    parts.iter_mut().zip(chunks).zip(out.iter_mut()).enumerate()
                {
                    s.spawn(move |_| {
                        started.wait();
                        *slot = Some(run(w * wave + i, part, chunk));
                    });
                }
            });
            losses.extend(out.into_iter().flatten());
        }
        losses.into_iter().try_fold(0.0, |sum, l| Ok(sum + l?))
    }
}
