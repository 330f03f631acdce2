//! [`Pipeline`]: builds the next minibatch's graph while the current one
//! runs. Building a graph is host work on one core (a Tree-LSTM minibatch
//! of 64 trees: ~15k nodes, ~1.5% of a W1 step on one thread); with more
//! than one thread it can overlap the current step's kernels, most of
//! which do not use every core (the small products and cells of the tree
//! tops run on one).
//!
//! Same results as building and running in turn: each graph is built from
//! its own item alone, and a step sees the parameters as the previous
//! step left them (building reads no parameter values: they are read when
//! the graph runs).

use sheaf_autodiff::Graph;

/// Two graphs taking turns: while one runs, the next item's graph is built
/// in the other on the current rayon pool (see the module documentation).
#[derive(Default)]
pub struct Pipeline {
    graphs: [Graph; 2],
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Two empty graphs.
    pub fn new() -> Self {
        Self::default()
    }

    /// For each of `items` in order: `build(graph, &item)` adds the item's
    /// targets to a cleared graph (its loss: an `Expr`, or whatever `run`
    /// needs), then `run(graph, targets, item)` runs it (forward, backward,
    /// an update) on the calling thread. Item `n + 1` is built while item
    /// `n` runs, as a job on the rayon pool (the current one, or the
    /// global one when called from outside a pool) that the first idle
    /// thread takes: another thread, or the calling thread itself while
    /// `run` waits inside rayon (a `join`, a parallel kernel), or after
    /// `run` returns. So `build` must not wait for a lock that `run`
    /// holds. The iterator is read one item ahead (item `n + 1` before
    /// `run` of item `n`). A graph is cleared after its run returns, so
    /// that the executor's next step reuses its memory.
    ///
    /// `build` gets each graph freshly cleared: set its mode and seed
    /// there (`Graph::set_train`, `Graph::set_seed`). `run` may update the
    /// parameters after its backward, before or after clearing the graph:
    /// a graph lets go of parameter values when backward is done.
    ///
    /// # Errors
    /// The first error in the order the work would have run in turn: the
    /// run of item `n` before the build of item `n + 1`. Items after an
    /// error are neither built further nor run.
    pub fn run<T, X, E, I, B, R>(&mut self, items: I, build: B, mut run: R) -> Result<(), E>
    where
        I: IntoIterator<Item = T>,
        T: Sync,
        X: Send,
        E: Send,
        B: Fn(&mut Graph, &T) -> Result<X, E> + Sync,
        R: FnMut(&mut Graph, X, T) -> Result<(), E>,
    {
        let mut items = items.into_iter();
        let Some(mut item) = items.next() else {
            return Ok(());
        };
        let [cur, next] = &mut self.graphs;
        let (mut cur, mut next) = (cur, next);
        let build = &build;
        let built = |g: &mut Graph, item: &T| {
            g.clear();
            build(g, item)
        };
        let mut target = built(cur, &item)?;
        loop {
            let following = items.next();
            let (ran, next_target) = match &following {
                Some(f) => {
                    let next_graph = &mut *next;
                    let mut next_target = None;
                    let ran = rayon::in_place_scope(|s| {
                        s.spawn(|_| next_target = Some(built(next_graph, f)));
                        let ran = run(cur, target, item);
                        cur.clear();
                        ran
                    });
                    (ran, next_target)
                }
                None => {
                    let ran = run(cur, target, item);
                    cur.clear();
                    (ran, None)
                }
            };
            ran?;
            match (following, next_target) {
                (Some(f), Some(t)) => {
                    target = t?;
                    item = f;
                    std::mem::swap(&mut cur, &mut next);
                }
                _ => return Ok(()),
            }
        }
    }
}
