//! The batched [`Executor`]: plans the not-yet-evaluated part of a graph
//! with a [`Strategy`] and runs each batch as ONE call of its op's batched
//! forward; backward replays the plans in reverse with the batched rules.

use std::sync::MutexGuard;
use std::time::Instant;

use sheaf_autodiff::{
    ArgRole, Backward, Expr, Forward, GradAcc, Graph, GraphError, NodeId, NodeKind, Op, ParamStore,
};
use sheaf_tensor::{Backend, DType, Device, Shape, Tensor, TensorError};

use crate::error::{Result, SchedError};
use crate::plan::{plan, Batch, Plan, Strategy};
use crate::stats::PlanStats;

/// Where a node's value lives: row `row` of batch output buffer `buffer`.
#[derive(Debug, Clone, Copy)]
struct Home {
    buffer: u32,
    row: u32,
}

/// How `Strategy::Auto` decides: each candidate runs this many graphs,
/// alternating, and the one with less time per node wins.
const AUTO_TRIALS: u32 = 2;

/// The state of `Strategy::Auto`'s timing.
#[derive(Debug, Clone, Default)]
struct AutoTuner {
    /// Seconds and nodes measured per candidate (Depth, Agenda).
    totals: [(f64, usize); 2],
    runs: [u32; 2],
    /// The candidate timing the current graph.
    current: Option<usize>,
    started: Option<Instant>,
    chosen: Option<Strategy>,
}

const CANDIDATES: [Strategy; 2] = [Strategy::Depth, Strategy::Agenda];

impl AutoTuner {
    /// Ends the measurement of the previous graph (of `nodes` nodes).
    fn finish(&mut self, nodes: usize) {
        if let (Some(c), Some(t)) = (self.current.take(), self.started.take()) {
            self.totals[c].0 += t.elapsed().as_secs_f64();
            self.totals[c].1 += nodes;
            self.runs[c] += 1;
        }
        if self.chosen.is_none() && self.runs.iter().all(|&r| r >= AUTO_TRIALS) {
            let per_node = |c: usize| self.totals[c].0 / self.totals[c].1.max(1) as f64;
            self.chosen = Some(if per_node(0) <= per_node(1) {
                CANDIDATES[0]
            } else {
                CANDIDATES[1]
            });
        }
    }

    /// The strategy for the next graph.
    fn next(&mut self) -> Strategy {
        if let Some(s) = self.chosen {
            return s;
        }
        let c = if self.runs[0] <= self.runs[1] { 0 } else { 1 };
        self.current = Some(c);
        self.started = Some(Instant::now());
        CANDIDATES[c]
    }
}

/// Runs graphs in batches. One executor serves one graph at a time: a
/// forward on a graph with nothing evaluated (new, or cleared) starts over.
pub struct Executor {
    strategy: Strategy,
    /// The concrete strategy of the current graph (resolves `Auto`).
    active: Strategy,
    auto: AutoTuner,
    backend: &'static dyn Backend,
    plans: Vec<Plan>,
    homes: Vec<Option<Home>>,
    buffers: Vec<Tensor>,
    aux_buffers: Vec<Option<Tensor>>,
    /// Each batch's stacked arguments, kept from forward for backward (views
    /// cost nothing; gathered copies are not made twice).
    batch_inputs: Vec<Vec<Tensor>>,
    stats: PlanStats,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("strategy", &self.strategy)
            .field("plans", &self.plans.len())
            .finish()
    }
}

fn batch_err<'a>(op: &'static str, nodes: &'a [NodeId]) -> impl Fn(TensorError) -> SchedError + 'a {
    move |source| SchedError::Batch {
        op,
        nodes: nodes.to_vec(),
        source: Box::new(source),
    }
}

fn zeros(shape: Shape) -> sheaf_tensor::Result<Tensor> {
    Tensor::zeros(shape, DType::F32, Device::Cpu)
}

fn first_non_finite(t: &Tensor) -> Option<f32> {
    t.as_slice::<f32>()
        .ok()
        .and_then(|s| s.iter().copied().find(|v| !v.is_finite()))
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
            buffers: Vec::new(),
            aux_buffers: Vec::new(),
            batch_inputs: Vec::new(),
            stats: PlanStats::default(),
        }
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

    /// Statistics of the forwards since the graph was last cleared.
    pub fn stats(&self) -> &PlanStats {
        &self.stats
    }

    /// The plans run since the graph was last cleared.
    pub fn plans(&self) -> &[Plan] {
        &self.plans
    }

    fn reset(&mut self) {
        if self.strategy == Strategy::Auto {
            self.auto.finish(self.stats.nodes);
            self.active = self.auto.next();
        }
        self.plans.clear();
        self.homes.clear();
        self.buffers.clear();
        self.aux_buffers.clear();
        self.batch_inputs.clear();
        self.stats = PlanStats::default();
    }

    /// Computes every not-yet-evaluated node up to `target` in batches and
    /// returns `target`'s value. Only the new part of the graph is planned,
    /// so a model may read values mid-build and extend the graph.
    pub fn forward(&mut self, g: &mut Graph, store: &ParamStore, target: Expr) -> Result<Tensor> {
        let end = g.check(target, "forward")?.index() + 1;
        let start = g.evaluated();
        if start == 0 {
            self.reset();
        }
        if end > start {
            g.prepare_storage();
            self.homes.resize(g.len(), None);
            for i in start..end {
                let n = NodeId::from_index(i);
                match g.node(n).kind() {
                    NodeKind::Input(k) => {
                        if let Some(v) = g.input_value(k).cloned() {
                            g.set_value(n, v);
                        }
                    }
                    NodeKind::Param(p) => {
                        let v = store.value_of(p)?.clone();
                        g.set_value(n, v);
                    }
                    NodeKind::Op => {}
                }
            }
            let t0 = Instant::now();
            let _span = tracing::debug_span!("plan", strategy = self.active.name()).entered();
            let p = plan(g, start, end, self.active);
            drop(_span);
            self.stats.planning += t0.elapsed();
            let t1 = Instant::now();
            for batch in &p.batches {
                self.run_forward(g, batch)?;
            }
            self.stats.kernels += t1.elapsed();
            g.set_evaluated(end);
            self.plans.push(p);
        }
        Ok(g.value(target)?.clone())
    }

    /// Stacks the values of `args` (one per batch row) into `[b, ...]`:
    /// a view when they sit contiguous and in order in one batch output,
    /// one gather when they sit in one output in another order, row copies
    /// otherwise.
    fn stack(&mut self, g: &Graph, args: &[NodeId]) -> sheaf_tensor::Result<Tensor> {
        let b = args.len();
        let shape = g.node(args[0]).shape();
        let row_bytes = shape.numel()? * 4;
        let homes: Option<Vec<Home>> = args.iter().map(|a| self.homes[a.index()]).collect();
        if let Some(h) = homes.as_ref() {
            let buf = h[0].buffer;
            if h.iter().all(|x| x.buffer == buf) {
                let r0 = h[0].row;
                let src = &self.buffers[buf as usize];
                if h.iter().enumerate().all(|(i, x)| x.row == r0 + i as u32) {
                    self.stats.avoided_bytes += b * row_bytes;
                    let view = src.rows(r0 as usize..r0 as usize + b)?;
                    return view.reshape(Shape::stack(b, shape)?);
                }
                let idx: Vec<u32> = h.iter().map(|x| x.row).collect();
                let idx = Tensor::from_vec(idx, [b])?;
                let mut out = zeros(src.shape().with_rows(b))?;
                self.backend.gather_rows(src, &idx, out.view_mut()?)?;
                self.stats.gathered_bytes += b * row_bytes;
                return out.reshape(Shape::stack(b, shape)?);
            }
        }
        let stacked = Shape::stack(b, shape)?;
        let mut out = zeros(stacked)?;
        {
            let mut view = out.view_mut()?;
            for (r, a) in args.iter().enumerate() {
                let v = g.value_of(*a).ok_or(TensorError::InvalidArgument {
                    op: "stack",
                    arg: "args",
                    reason: "has an argument without a value",
                })?;
                let v = v.reshape(Shape::stack(1, shape)?)?;
                self.backend.copy_rows(&v, 0, view.reborrow(), r, 1)?;
            }
        }
        self.stats.gathered_bytes += b * row_bytes;
        Ok(out)
    }

    fn batch_args(
        &mut self,
        g: &Graph,
        op: &dyn Op,
        nodes: &[NodeId],
    ) -> sheaf_tensor::Result<Vec<Tensor>> {
        let n = g.args(nodes[0]).len();
        let mut args = Vec::with_capacity(n);
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
                }
                ArgRole::Stack => {
                    col.clear();
                    col.extend(nodes.iter().map(|&x| g.args(x)[j]));
                    args.push(self.stack(g, &col)?);
                }
            }
        }
        Ok(args)
    }

    fn run_forward(&mut self, g: &mut Graph, batch: &Batch) -> Result<()> {
        let nodes = &batch.nodes;
        let first = nodes[0];
        let op = g.op_shared(first);
        let name = op.name();
        let node = g.node(first).clone();
        let b = nodes.len();
        let _span = tracing::trace_span!("batch", op = name, size = b).entered();
        let err = batch_err(name, nodes);
        let args = self.batch_args(g, op.as_ref(), nodes).map_err(&err)?;
        let arg_shapes: Vec<Shape> = g.args(first).iter().map(|&a| g.node(a).shape()).collect();
        let out_shape = Shape::stack(b, node.shape()).map_err(&err)?;
        let mut out = zeros(out_shape).map_err(&err)?;
        let aux_shape = op.aux_shape(&node.shape(), &arg_shapes, node.attr());
        let mut aux = match aux_shape {
            Some(s) => Some(zeros(Shape::stack(b, s).map_err(&err)?).map_err(&err)?),
            None => None,
        };
        let data: Vec<u32> = nodes.iter().map(|&x| g.node(x).data()).collect();
        let seeds: Vec<u64> = nodes.iter().map(|&x| g.node_seed(x)).collect();
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
        })
        .map_err(&err)?;
        if g.checks_finite() {
            if let Some(value) = first_non_finite(&out) {
                let row = out
                    .as_slice::<f32>()
                    .ok()
                    .and_then(|s| s.iter().position(|v| !v.is_finite()))
                    .map(|i| i / out.row_len().max(1))
                    .unwrap_or(0);
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
            let v = out
                .rows(r..r + 1)
                .and_then(|t| t.reshape(node.shape()))
                .map_err(&err)?;
            g.set_value(x, v);
            if let (Some(a), Some(s)) = (aux.as_ref(), aux_shape) {
                let v = a.rows(r..r + 1).and_then(|t| t.reshape(s)).map_err(&err)?;
                g.set_aux(x, v);
            }
            self.homes[x.index()] = Some(Home {
                buffer,
                row: r as u32,
            });
        }
        self.buffers.push(out);
        self.aux_buffers.push(aux);
        self.batch_inputs.push(args);
        let stats = &mut self.stats;
        stats.nodes += b;
        stats.batches += 1;
        stats.max_batch = stats.max_batch.max(b);
        let e = stats.per_op.entry(name).or_insert((0, 0));
        e.0 += 1;
        e.1 += b;
        if !op.batchable() {
            stats.unbatchable += b;
        }
        Ok(())
    }
}

/// Where the gradient of one shared argument goes during a batch backward.
enum Shared<'s> {
    Skip,
    Param(MutexGuard<'s, GradAcc>),
    Scratch(Tensor),
}

impl Executor {
    /// Back-propagates from `loss` (one element) through the batches of
    /// every forward since the graph was last cleared, in reverse. Node
    /// gradients are kept in the graph; parameter gradients are ADDED to
    /// the store's accumulators, once per batch.
    pub fn backward(&mut self, g: &mut Graph, store: &ParamStore, loss: Expr) -> Result<()> {
        let loss_id = g.check(loss, "backward")?;
        if loss_id.index() >= g.evaluated() {
            self.forward(g, store, loss)?;
        }
        let shape = g.node(loss_id).shape();
        if shape.numel().unwrap_or(0) != 1 {
            return Err(GraphError::LossNotScalar {
                op: g.op_name(loss_id),
                node: loss_id,
                shape,
            }
            .into());
        }
        let _span = tracing::debug_span!("backward", strategy = self.strategy.name()).entered();
        let t0 = Instant::now();
        g.reset_grads();
        let one = Tensor::full_f32(1.0, shape, Device::Cpu)
            .map_err(batch_err(g.op_name(loss_id), &[loss_id]))?;
        g.set_grad(loss_id, one);
        let plans = std::mem::take(&mut self.plans);
        let result = plans
            .iter()
            .rev()
            .flat_map(|p| p.batches.iter().rev())
            .try_for_each(|batch| self.run_backward(g, store, batch));
        self.plans = plans;
        self.stats.kernels += t0.elapsed();
        result
    }

    fn accumulate(
        &self,
        g: &mut Graph,
        store: &ParamStore,
        a: NodeId,
        grad: &Tensor,
        op: &'static str,
    ) -> Result<()> {
        let err = |source| SchedError::Batch {
            op,
            nodes: vec![a],
            source: Box::new(source),
        };
        match g.node(a).kind() {
            NodeKind::Input(_) => {}
            NodeKind::Param(p) => {
                let mut acc = store.lock_grad(p, op)?;
                let dst = acc.grad.view_mut().map_err(err)?;
                self.backend.axpy(1.0, grad, dst).map_err(err)?;
                acc.dense = true;
            }
            NodeKind::Op => {
                let shape = g.node(a).shape();
                let t = match g.take_grad(a) {
                    Some(mut t) => {
                        self.backend
                            .axpy(1.0, grad, t.view_mut().map_err(err)?)
                            .map_err(err)?;
                        t
                    }
                    None => grad
                        .reshape(shape)
                        .and_then(|t| t.deep_clone())
                        .map_err(err)?,
                };
                if g.checks_finite() {
                    if let Some(value) = first_non_finite(&t) {
                        return Err(SchedError::NonFinite {
                            op,
                            node: a,
                            what: "gradient (of its argument)",
                            value,
                        });
                    }
                }
                g.set_grad(a, t);
            }
        }
        Ok(())
    }

    fn run_backward(&mut self, g: &mut Graph, store: &ParamStore, batch: &Batch) -> Result<()> {
        let nodes = &batch.nodes;
        if nodes.iter().all(|&x| g.grad_of(x).is_none()) {
            return Ok(());
        }
        let first = nodes[0];
        let op = g.op_shared(first);
        let name = op.name();
        let node = g.node(first).clone();
        let err = batch_err(name, nodes);
        let home = self.homes[first.index()].ok_or_else(|| {
            err(TensorError::InvalidArgument {
                op: name,
                arg: "batch",
                reason: "was not run by this executor",
            })
        })?;
        let out = self.buffers[home.buffer as usize].clone();
        let aux = self.aux_buffers[home.buffer as usize].clone();
        let args = self.batch_inputs[home.buffer as usize].clone();
        // Gradient arriving at the batch's outputs, one row per node.
        let mut dout = zeros(out.shape()).map_err(&err)?;
        {
            let mut view = dout.view_mut().map_err(&err)?;
            for (r, &x) in nodes.iter().enumerate() {
                if let Some(d) = g.grad_of(x) {
                    let d = d
                        .reshape(Shape::stack(1, node.shape()).map_err(&err)?)
                        .map_err(&err)?;
                    self.backend
                        .copy_rows(&d, 0, view.reborrow(), r, 1)
                        .map_err(&err)?;
                }
            }
        }
        let n = args.len();
        let arg_nodes: Vec<Vec<NodeId>> = (0..n)
            .map(|j| nodes.iter().map(|&x| g.args(x)[j]).collect())
            .collect();
        let mut stacked: Vec<Option<Tensor>> = Vec::with_capacity(n);
        let mut shared: Vec<Shared<'_>> = Vec::with_capacity(n);
        for j in 0..n {
            let role = op.arg_role(j, n);
            let needs = arg_nodes[j]
                .iter()
                .any(|&a| !matches!(g.node(a).kind(), NodeKind::Input(_)));
            match role {
                ArgRole::Stack => {
                    stacked.push(if needs {
                        Some(zeros(args[j].shape()).map_err(&err)?)
                    } else {
                        None
                    });
                    shared.push(Shared::Skip);
                }
                ArgRole::Share => {
                    stacked.push(None);
                    let a = arg_nodes[j][0];
                    let repeated =
                        (0..j).any(|k| op.arg_role(k, n) == ArgRole::Share && arg_nodes[k][0] == a);
                    shared.push(match g.node(a).kind() {
                        NodeKind::Input(_) => Shared::Skip,
                        NodeKind::Param(p) if !repeated => Shared::Param(store.lock_grad(p, name)?),
                        _ => Shared::Scratch(zeros(g.node(a).shape()).map_err(&err)?),
                    });
                }
            }
        }
        let data: Vec<u32> = nodes.iter().map(|&x| g.node(x).data()).collect();
        let seeds: Vec<u64> = nodes.iter().map(|&x| g.node_seed(x)).collect();
        let touched = {
            let mut dargs = Vec::with_capacity(n);
            for (s, sh) in stacked.iter_mut().zip(shared.iter_mut()) {
                let t = match (s, sh) {
                    (Some(t), _) => Some(t),
                    (None, Shared::Param(acc)) => Some(&mut acc.grad),
                    (None, Shared::Scratch(t)) => Some(t),
                    (None, Shared::Skip) => None,
                };
                dargs.push(match t {
                    Some(t) => Some(t.view_mut().map_err(&err)?),
                    None => None,
                });
            }
            let mut cx = Backward::new(
                self.backend,
                &args,
                &data,
                node.attr(),
                &seeds,
                &out,
                aux.as_ref(),
                &dout,
                dargs,
            );
            op.backward(&mut cx).map_err(&err)?;
            cx.touched_rows().to_vec()
        };
        // Shared arguments: mark how parameters were written; release locks
        // before stacked gradients (which may reach the same parameters).
        let mut scratch = Vec::new();
        for (j, sh) in shared.into_iter().enumerate() {
            match sh {
                Shared::Skip => {}
                Shared::Param(mut acc) => match touched.iter().find(|(a, _)| *a == j) {
                    Some((_, rows)) => acc.rows.extend_from_slice(rows),
                    None => acc.dense = true,
                },
                Shared::Scratch(t) => scratch.push((arg_nodes[j][0], t)),
            }
        }
        for (a, t) in scratch {
            self.accumulate(g, store, a, &t, name)?;
        }
        for (j, s) in stacked.into_iter().enumerate() {
            let Some(t) = s else { continue };
            for (r, &a) in arg_nodes[j].iter().enumerate() {
                let row = t
                    .rows(r..r + 1)
                    .and_then(|x| x.reshape(g.node(a).shape()))
                    .map_err(&err)?;
                self.accumulate(g, store, a, &row, name)?;
            }
        }
        Ok(())
    }
}
