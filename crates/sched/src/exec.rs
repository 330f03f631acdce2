//! The batched [`Executor`]: plans the not-yet-evaluated part of a graph
//! with a [`Strategy`] and runs each batch as ONE call of its op's batched
//! forward (backward, in `backward.rs`, replays the plans in reverse).
//!
//! Memory: each batch writes its `[b, ...]` outputs into one buffer from the
//! step's [`Arena`]; a node's value is a row view of it. Backward mirrors
//! this with one gradient buffer per batch, so a batch's output gradient is
//! read in place and the gradient of an input that was used in place goes
//! straight into its producer's gradient rows.

use std::time::Instant;

use sheaf_autodiff::exec::GraphExec;
use sheaf_autodiff::{ArgRole, Expr, Forward, Graph, Keep, NodeId, NodeKind, Op, ParamStore};
use sheaf_tensor::{Backend, Shape, Tensor, TensorError};

use crate::arena::Arena;
use crate::auto::AutoTuner;
use crate::backward::PrivateGrad;
use crate::error::{Result, SchedError};
use crate::plan::{Batch, Plan, Planner, Strategy};
use crate::rows::RowsBack;
use crate::stats::PlanStats;

/// Where a node's value lives: row `row` of batch output buffer `buffer`
/// (or of leaf buffer `buffer & !LEAF`, for an input: see `leaves.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Home {
    pub(crate) buffer: u32,
    pub(crate) row: u32,
}

/// How a batch's stacked argument was assembled in forward, so that
/// backward sends its gradient back the same way.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A shared (not stacked) argument.
    Shared,
    /// Rows `row0..row0 + b` of batch buffer `buffer`, used in place.
    View { buffer: u32, row0: u32 },
    /// Rows `idx` of batch buffer `buffer`, gathered.
    Gather { buffer: u32, idx: Tensor },
    /// Assembled from several buffers (one indexed copy each) or leaves;
    /// where its rows' gradients go (shared: backward may run twice).
    Rows(std::sync::Arc<RowsBack>),
    /// A column of a many-argument batch stacked as one block (see
    /// `block.rs`); backward sends all columns back together.
    Block,
    /// The one source of a sum added where its terms lie (see
    /// `summed.rs`): where each output row's gradient goes.
    Summed(std::sync::Arc<RowsBack>),
}

/// What backward needs of one forward batch besides its output buffer.
pub(crate) struct Record {
    /// Stacked arguments; `None` for shared ones, which are read from the
    /// graph again in backward so that no parameter stays referenced after
    /// the step (the optimizer would copy it on write).
    pub(crate) inputs: Vec<Option<Tensor>>,
    pub(crate) sources: Vec<Source>,
    /// What the op's forward kept for its backward ([`Keep`]).
    pub(crate) kept: Vec<Tensor>,
    /// The nodes' per-instance data and seeds as forward read them
    /// (backward would otherwise read every node again: a cache miss each).
    pub(crate) data: Vec<u32>,
    pub(crate) seeds: Vec<u64>,
}

/// Runs graphs in batches. One executor serves one graph at a time: a
/// forward on a graph with nothing evaluated (new, or cleared) starts over
/// and reuses the previous step's memory.
pub struct Executor {
    pub(crate) strategy: Strategy,
    /// The concrete strategy of the current graph (resolves `Auto`).
    active: Strategy,
    auto: AutoTuner,
    pub(crate) backend: &'static dyn Backend,
    pub(crate) plans: Vec<Plan>,
    pub(crate) homes: Vec<Option<Home>>,
    /// The graph (`GraphExec::identity`) the batches, homes and records
    /// belong to.
    pub(crate) started: Option<(u32, u32)>,
    /// One output buffer per batch, in run order.
    pub(crate) buffers: Vec<Tensor>,
    /// The forwards' inputs stacked by shape (see `leaves.rs`); homes in
    /// them carry the `LEAF` bit.
    pub(crate) leaf_buffers: Vec<Tensor>,
    pub(crate) aux_buffers: Vec<Option<Tensor>>,
    pub(crate) records: Vec<Record>,
    /// Gradient of each batch's outputs, allocated when one first arrives.
    pub(crate) grads: Vec<Option<Tensor>>,
    /// Gradients of dense parameters that another executor was writing
    /// when this one needed them, kept for the whole backward and added to
    /// the store once at its end (see `backward.rs`).
    pub(crate) private_grads: Vec<PrivateGrad>,
    pub(crate) arena: Arena,
    /// `gather_rows` / `scatter_grads`' working memory.
    pub(crate) row_scratch: crate::rows::RowScratch,
    /// Time this step spent copying rows and gradients outside the ops
    /// (with the arena's zero fills, `PlanStats::moves`).
    pub(crate) moved: std::time::Duration,
    /// Planning's working memory, kept from graph to graph.
    planner: Planner,
    pub(crate) stats: PlanStats,
    /// Plans kept by [`Executor::cache_plans_as`]: (key, nodes) -> plan.
    plan_cache: rustc_hash::FxHashMap<(u64, usize), Plan>,
    cache_key: Option<u64>,
    /// Forwards keep nothing for backward (see [`Executor::set_inference`]).
    inference: bool,
    /// A forward of the current graph ran in inference mode: it has no
    /// records, so no backward.
    pub(crate) unrecorded: bool,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("strategy", &self.strategy)
            .field("plans", &self.plans.len())
            .finish()
    }
}

pub(crate) fn batch_err<'a>(
    op: &'static str,
    nodes: &'a [NodeId],
) -> impl Fn(TensorError) -> SchedError + 'a {
    move |source| SchedError::Batch {
        op,
        nodes: nodes.to_vec(),
        source: Box::new(source),
    }
}

/// The first non-finite element of `t` and its row.
pub(crate) fn first_non_finite(t: &Tensor) -> Option<(usize, f32)> {
    // A download on a device: the finiteness check is a debugging aid.
    let host = t.to_device(sheaf_tensor::Device::Cpu).ok()?;
    let s = host.as_slice::<f32>().ok()?;
    let i = s.iter().position(|v| !v.is_finite())?;
    Some((i / t.row_len().max(1), s[i]))
}

static CPU: std::sync::LazyLock<sheaf_tensor::CpuBackend> =
    std::sync::LazyLock::new(sheaf_tensor::CpuBackend::new);

impl Executor {
    /// An executor with the given strategy, on the CPU backend.
    pub fn new(strategy: Strategy) -> Self {
        Executor {
            strategy,
            active: strategy,
            auto: AutoTuner::default(),
            backend: &*CPU,
            plans: Vec::new(),
            homes: Vec::new(),
            started: None,
            buffers: Vec::new(),
            leaf_buffers: Vec::new(),
            aux_buffers: Vec::new(),
            records: Vec::new(),
            grads: Vec::new(),
            private_grads: Vec::new(),
            arena: Arena::default(),
            row_scratch: Default::default(),
            moved: std::time::Duration::ZERO,
            planner: Planner::default(),
            stats: PlanStats::default(),
            plan_cache: rustc_hash::FxHashMap::default(),
            cache_key: None,
            inference: false,
            unrecorded: false,
        }
    }

    /// An executor with the given strategy on `device`'s backend: batch
    /// buffers and gradients live there, parameters must be there
    /// ([`ParamStore::to_device`]), inputs are copied there when read.
    /// Errors if the device is unavailable in this build or machine.
    pub fn on(strategy: Strategy, device: sheaf_tensor::Device) -> sheaf_tensor::Result<Self> {
        let mut e = Executor::new(strategy);
        e.backend = device.backend()?;
        e.arena.device = device;
        Ok(e)
    }

    /// The device this executor runs on.
    pub fn device(&self) -> sheaf_tensor::Device {
        self.backend.device()
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The strategy the current graph runs with (for `Auto`, the candidate
    /// being timed or the one chosen).
    pub fn active_strategy(&self) -> Strategy {
        self.active
    }

    /// For `Auto`: the strategy chosen, once the timing is done.
    pub fn auto_choice(&self) -> Option<Strategy> {
        self.auto.chosen
    }

    /// Statistics of the forwards (and backwards) since the graph was last
    /// cleared.
    pub fn stats(&self) -> &PlanStats {
        &self.stats
    }

    /// The plans run since the graph was last cleared.
    pub fn plans(&self) -> &[Plan] {
        &self.plans
    }

    /// Inference mode (`on`): forwards keep only what later batches read,
    /// the batches' outputs. Stacked arguments, the ops' auxiliary buffers
    /// and what they keep for backward, and where argument rows came from
    /// go back to the arena as soon as their batch has run, so a step holds
    /// less memory and the arena hands the same buffers out again within
    /// it. Values are the same as without it; backward of a graph whose
    /// forward ran in inference mode is [`SchedError::Inference`]. Off by
    /// default; takes effect from the next forward.
    ///
    /// ```
    /// use sheaf_sched::prelude::*;
    ///
    /// let (mut g, store) = (Graph::new(), ParamStore::new());
    /// let x = g.input(Tensor::from_vec(vec![0.5f32, -1.0], [2]).unwrap());
    /// let y = g.tanh(x)?;
    /// let loss = g.sum_elems(y)?;
    /// let mut exec = Executor::new(Strategy::Agenda);
    /// exec.set_inference(true);
    /// let v: f32 = exec.forward(&mut g, &store, loss)?.item().unwrap();
    /// assert!((v - (0.5f32.tanh() - 1.0f32.tanh())).abs() < 1e-6);
    /// assert!(matches!(exec.backward(&mut g, &store, loss), Err(SchedError::Inference)));
    /// # Ok::<(), SchedError>(())
    /// ```
    pub fn set_inference(&mut self, on: bool) {
        self.inference = on;
    }

    /// Whether forwards run in inference mode ([`Executor::set_inference`]).
    pub fn inference(&self) -> bool {
        self.inference
    }

    /// Reuses plans across graphs of one structure: while a key is set,
    /// the plan of a whole graph (a forward from an unevaluated graph) is
    /// kept under (key, node count), and a later graph with the same key
    /// and node count runs that plan instead of planning again, after a
    /// linear check that the plan still fits (every computed node in one
    /// batch with its signature, after the batches of its arguments; a
    /// mismatch plans afresh). Bucketing keys by bucket length, so the
    /// unrolled plan of a length is made once. `None` turns it off.
    pub fn cache_plans_as(&mut self, key: Option<u64>) {
        self.cache_key = key;
    }

    /// The cached plan for this graph, if one fits it: every computed node
    /// of the graph is in exactly one batch, carries that batch's
    /// signature, and reads only leaves and nodes of earlier batches. A
    /// graph with the same signatures but other wiring (a node reading
    /// another of its cached batch) plans afresh.
    fn cached_plan(&self, g: &Graph, end: usize) -> Option<Plan> {
        let p = self.plan_cache.get(&(self.cache_key?, end))?;
        const UNSEEN: u32 = u32::MAX;
        let mut batch_of = vec![UNSEEN; end];
        let is_op = |n: NodeId| g.node(n).kind() == NodeKind::Op;
        for (bi, b) in p.batches.iter().enumerate() {
            let bi = u32::try_from(bi).ok()?;
            for &n in &b.nodes {
                let fits = n.index() < end
                    && batch_of[n.index()] == UNSEEN
                    && is_op(n)
                    && g.node(n).sig() == b.sig
                    && g.args(n)
                        .iter()
                        .all(|&a| !is_op(a) || batch_of[a.index()] < bi);
                if !fits {
                    return None;
                }
                batch_of[n.index()] = bi;
            }
        }
        let every_op_planned =
            (0..end).all(|i| batch_of[i] != UNSEEN || !is_op(NodeId::from_index(i)));
        every_op_planned.then(|| p.clone())
    }

    /// Starts a new graph: the last step's buffers go back to the arena
    /// (those nobody else still views).
    fn reset(&mut self) {
        if self.strategy == Strategy::Auto {
            self.auto.finish(self.stats.nodes);
            self.active = self.auto.next();
        }
        self.plans.clear();
        self.homes.clear();
        // Inputs first: views among them hold the buffers they view.
        for r in self.records.drain(..) {
            for t in r.inputs.into_iter().flatten().chain(r.kept) {
                self.arena.recycle(t);
            }
        }
        for t in self.grads.drain(..).flatten() {
            self.arena.recycle(t);
        }
        for t in self.aux_buffers.drain(..).flatten() {
            self.arena.recycle(t);
        }
        for t in self.buffers.drain(..) {
            self.arena.recycle(t);
        }
        for t in self.leaf_buffers.drain(..) {
            self.arena.recycle(t);
        }
        self.arena.end_step();
        self.unrecorded = false;
        self.moved = std::time::Duration::ZERO;
        self.stats = PlanStats::default();
    }

    /// Copies the arena's counters into the stats.
    pub(crate) fn note_memory(&mut self) {
        self.stats.arena_bytes = self.arena.in_use();
        self.stats.arena_fresh_bytes = self.arena.fresh();
        self.stats.arena_peak_bytes = self.arena.peak();
        self.stats.arena_zeroed_bytes = self.arena.zeroed();
        self.stats.moves = self.moved + self.arena.zeroing();
    }

    pub(crate) fn note_gather(&mut self, op: &'static str, bytes: usize) {
        self.stats.gathered_bytes += bytes;
        *self.stats.gathered_per_op.entry(op).or_insert(0) += bytes;
    }

    /// Computes every not-yet-evaluated node up to `target` in batches and
    /// returns `target`'s value (a one-element loss reads as a number with
    /// [`Tensor::item`]). Only the new part of the graph is planned, so a
    /// model may read values mid-build and extend the graph. If the
    /// store's values changed since the graph ran (an optimizer step),
    /// every node is computed again with the new values.
    pub fn forward(&mut self, g: &mut Graph, store: &ParamStore, target: Expr) -> Result<Tensor> {
        sheaf_tensor::denormals::prepare();
        let end = g.check(target, "forward")?.index() + 1;
        g.restore_params(store)?;
        let start = g.evaluated();
        // A graph this executor did not start (or one cleared since) has
        // none of its batches here: its evaluated nodes are read from the
        // graph as leaves, never through the homes of another graph's.
        if start == 0 || self.started != Some(g.identity()) {
            self.reset();
            self.started = Some(g.identity());
        }
        if end > start {
            self.unrecorded |= self.inference;
            g.prepare_storage();
            self.homes.resize(g.len(), None);
            for i in start..end {
                let n = NodeId::from_index(i);
                if let NodeKind::Param(p) = g.node(n).kind() {
                    let v = store.value_of(p)?.clone();
                    if v.device() != self.device() {
                        return Err(sheaf_autodiff::GraphError::Params(format!(
                            "parameter {:?} is on {}, the executor on {}: move the store with ParamStore::to_device",
                            store.name(p)?,
                            v.device(),
                            self.device()
                        ))
                        .into());
                    }
                    g.set_value(n, v);
                }
            }
            self.place_inputs(g, start, end)?;
            let t0 = Instant::now();
            let _span = tracing::debug_span!("plan", strategy = self.active.name()).entered();
            let cached = if start == 0 {
                self.cached_plan(g, end)
            } else {
                None
            };
            let p = match cached {
                Some(p) => {
                    self.stats.plan_cache_hits += 1;
                    p
                }
                None => {
                    let p = self.planner.plan(g, start, end, self.active);
                    if let (0, Some(key)) = (start, self.cache_key) {
                        self.plan_cache.insert((key, end), p.clone());
                    }
                    p
                }
            };
            drop(_span);
            self.stats.planning += t0.elapsed();
            let (t1, l1) = (Instant::now(), self.backend.launches());
            let marks = (self.buffers.len(), self.records.len());
            for batch in &p.batches {
                let l2 = self.backend.launches();
                if let Err(e) = self.run_forward(g, batch) {
                    // The plan is not kept: neither are the batches of it
                    // that ran, so that a later forward (which plans these
                    // nodes again) and backward pair plans and records
                    // as they were.
                    self.drop_batches_from(marks);
                    return Err(e);
                }
                let op = g.op_name(batch.nodes[0]);
                let launched = self.backend.launches() - l2;
                if launched > 0 {
                    *self.stats.launches_per_op.entry(op).or_insert(0) += launched;
                }
            }
            self.stats.kernels += t1.elapsed();
            self.stats.launches += self.backend.launches() - l1;
            g.set_evaluated(end);
            self.plans.push(p);
            self.note_memory();
        }
        Ok(g.value(target)?.clone())
    }

    /// Forgets the batches run since the executor held `buffers` buffers
    /// and `records` records (their buffers back to the arena; their
    /// nodes' homes are rewritten when they run again).
    fn drop_batches_from(&mut self, (buffers, records): (usize, usize)) {
        self.records.truncate(records);
        let aux = self.aux_buffers.split_off(buffers).into_iter().flatten();
        for t in self.buffers.split_off(buffers).into_iter().chain(aux) {
            self.arena.recycle(t);
        }
    }

    /// Stacks the values of `args` (one per batch row) into `[b, ...]`:
    /// a view when they sit contiguous and in order in one batch output,
    /// one gather when they sit in one output in another order, one
    /// indexed copy per output when they come from several (leaves copied
    /// row by row).
    fn stack(
        &mut self,
        g: &Graph,
        op: &'static str,
        args: &[NodeId],
    ) -> sheaf_tensor::Result<(Tensor, Source)> {
        let b = args.len();
        let shape = g.node(args[0]).shape();
        let stacked = Shape::stack(b, shape)?;
        let row_bytes = shape.numel()? * 4;
        let first = self.homes[args[0].index()];
        if let Some(h0) = first {
            let same_buffer = args
                .iter()
                .all(|a| self.homes[a.index()].is_some_and(|h| h.buffer == h0.buffer));
            if same_buffer {
                let src = self.buffer_of(h0.buffer).clone();
                let in_order = args.iter().enumerate().all(|(i, a)| {
                    self.homes[a.index()].is_some_and(|h| h.row == h0.row + i as u32)
                });
                if in_order {
                    self.stats.avoided_bytes += b * row_bytes;
                    let view = src.rows(h0.row as usize..h0.row as usize + b)?;
                    let source = Source::View {
                        buffer: h0.buffer,
                        row0: h0.row,
                    };
                    return Ok((view.reshape(stacked)?, source));
                }
                let idx: Vec<u32> = args
                    .iter()
                    .filter_map(|a| self.homes[a.index()].map(|h| h.row))
                    .collect();
                let idx = Tensor::from_vec(idx, [b])?.to_device(self.device())?;
                let mut out = self.arena.overwritten(src.shape().with_rows(b))?;
                let t = Instant::now();
                self.backend.gather_rows(&src, &idx, out.view_mut()?)?;
                self.moved += t.elapsed();
                self.note_gather(op, b * row_bytes);
                let source = Source::Gather {
                    buffer: h0.buffer,
                    idx,
                };
                return Ok((out.reshape(stacked)?, source));
            }
        }
        // Rows of several batch outputs and leaves' values: one call.
        let mut out = self.arena.overwritten(stacked)?;
        // Where the rows came from, for backward (none in inference mode).
        let mut back = match self.inference {
            true => None,
            false => Some(RowsBack::with_capacity(b)),
        };
        self.gather_rows(
            g,
            args.iter().enumerate().map(|(r, &a)| (a, r as u32)),
            &mut out,
            back.as_mut(),
        )?;
        self.note_gather(op, b * row_bytes);
        let source = match back {
            Some(back) => Source::Rows(std::sync::Arc::new(back)),
            // Never read: inference mode records no sources.
            None => Source::Shared,
        };
        Ok((out, source))
    }

    /// The batch's arguments (shared ones read from the graph, stacked ones
    /// assembled by [`Executor::stack`]) and how each was assembled.
    fn batch_args(
        &mut self,
        g: &Graph,
        op: &dyn Op,
        nodes: &[NodeId],
    ) -> sheaf_tensor::Result<(Vec<Tensor>, Vec<Source>, Option<Tensor>)> {
        if self.stacks_as_block(g, op, nodes) {
            let (args, sources, block) = self.stack_block(g, op.name(), nodes)?;
            return Ok((args, sources, Some(block)));
        }
        let n = g.args(nodes[0]).len();
        let mut args = Vec::with_capacity(n);
        let mut sources = Vec::with_capacity(n);
        let mut col = Vec::with_capacity(nodes.len());
        for j in 0..n {
            match op.arg_role(j, n) {
                ArgRole::Share => {
                    let a = g.args(nodes[0])[j];
                    args.push(g.value_of(a).cloned().ok_or(TensorError::InvalidArgument {
                        op: op.name(),
                        arg: "shared argument",
                        reason: "has no value",
                    })?);
                    sources.push(Source::Shared);
                }
                ArgRole::Stack => {
                    col.clear();
                    col.extend(nodes.iter().map(|&x| g.args(x)[j]));
                    let (t, source) = self.stack(g, op.name(), &col)?;
                    args.push(t);
                    sources.push(source);
                }
            }
        }
        Ok((args, sources, None))
    }

    fn run_forward(&mut self, g: &mut Graph, batch: &Batch) -> Result<()> {
        let nodes = &batch.nodes;
        let first = nodes[0];
        let op = g.op_shared(first);
        let name = op.name();
        let node = g.node(first);
        let b = nodes.len();
        let _span = tracing::trace_span!("batch", op = name, size = b).entered();
        let err = batch_err(name, nodes);
        let out_shape = Shape::stack(b, node.shape()).map_err(&err)?;
        // A sum of rows of one buffer is added into `out` where they lie;
        // anything else stacks its arguments first.
        let summed = self.sum_rows(g, op.as_ref(), nodes);
        let in_place = summed.is_some();
        let (args, sources, block, mut out) = match summed {
            Some(rows) => {
                let mut out = self.arena.overwritten(out_shape).map_err(&err)?;
                match self.sum_in_place(rows, &mut out) {
                    Ok(source) => (Vec::new(), vec![source], None, out),
                    Err(e) => {
                        self.arena.recycle(out);
                        return Err(err(e));
                    }
                }
            }
            None => {
                let (args, sources, block) = {
                    let _span = tracing::trace_span!("gather").entered();
                    self.batch_args(g, op.as_ref(), nodes).map_err(&err)?
                };
                // Forward overwrites `out` and `aux` (the `Op` contract).
                let out = self.arena.overwritten(out_shape).map_err(&err)?;
                (args, sources, block, out)
            }
        };
        let arg_shapes: Vec<Shape> = g.args(first).iter().map(|&a| g.node(a).shape()).collect();
        let aux_shape = op.aux_shape(&node.shape(), &arg_shapes, node.attr());
        let mut aux = match aux_shape {
            Some(s) => Some(
                self.arena
                    .overwritten(Shape::stack(b, s).map_err(&err)?)
                    .map_err(&err)?,
            ),
            None => None,
        };
        let data: Vec<u32> = nodes.iter().map(|&x| g.node(x).data()).collect();
        let seeds: Vec<u64> = nodes.iter().map(|&x| g.node_seed(x)).collect();
        let mut kept = Vec::new();
        if !in_place {
            let _span = tracing::trace_span!("kernel").entered();
            let t_op = Instant::now();
            let arena = &mut self.arena;
            let mut alloc = |s: Shape| arena.overwritten(s);
            op.forward(Forward {
                backend: self.backend,
                args: &args,
                data: &data,
                attr: node.attr(),
                seeds: &seeds,
                train: g.is_train(),
                out: out.view_mut().map_err(&err)?,
                aux: match aux.as_mut() {
                    Some(a) => Some(a.view_mut().map_err(&err)?),
                    None => None,
                },
                block: block.as_ref(),
                keep: Keep::new(&mut alloc, &mut kept),
            })
            .map_err(&err)?;
            self.stats.op_calls += t_op.elapsed();
        }
        if g.checks_finite() {
            if let Some((row, value)) = first_non_finite(&out) {
                return Err(SchedError::NonFinite {
                    op: name,
                    node: nodes[row.min(b - 1)],
                    what: "value",
                    value,
                });
            }
        }
        let buffer = self.buffers.len() as u32;
        for (r, &x) in nodes.iter().enumerate() {
            self.homes[x.index()] = Some(Home {
                buffer,
                row: r as u32,
            });
        }
        // One batch tensor per kind; a node's row view is made only if
        // someone reads it.
        g.set_value_rows(nodes, out.clone());
        self.buffers.push(out);
        if self.inference {
            // Nothing of it is read again: its memory serves later batches.
            for t in args.into_iter().chain(kept).chain(aux) {
                self.arena.recycle(t);
            }
            self.aux_buffers.push(None);
        } else {
            if let (Some(a), Some(s)) = (aux.as_ref(), aux_shape) {
                g.set_aux_rows(nodes, a.clone(), s);
            }
            self.aux_buffers.push(aux);
            self.record(args, sources, kept, data, seeds);
        }
        self.note_batch(name, b, op.batchable());
        Ok(())
    }

    /// Keeps what backward needs of the batch just run.
    fn record(
        &mut self,
        args: Vec<Tensor>,
        sources: Vec<Source>,
        kept: Vec<Tensor>,
        data: Vec<u32>,
        seeds: Vec<u64>,
    ) {
        let inputs = args
            .into_iter()
            .zip(&sources)
            .map(|(t, s)| (!matches!(s, Source::Shared)).then_some(t))
            .collect();
        self.records.push(Record {
            inputs,
            sources,
            kept,
            data,
            seeds,
        });
    }

    /// Counts a batch of `b` nodes of op `name` in the stats.
    fn note_batch(&mut self, name: &'static str, b: usize, batchable: bool) {
        let stats = &mut self.stats;
        stats.nodes += b;
        stats.batches += 1;
        stats.max_batch = stats.max_batch.max(b);
        let e = stats.per_op.entry(name).or_insert((0, 0));
        e.0 += 1;
        e.1 += b;
        if !batchable {
            stats.unbatchable += b;
        }
    }
}
