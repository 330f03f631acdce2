//! Backward: replays every forward's batches in reverse with the ops'
//! batched gradient rules.
//!
//! Gradients live in one buffer per batch, shaped like its output buffer,
//! so a batch reads its output gradient in place. Each stacked argument's
//! gradient goes back the way forward assembled the argument: written
//! straight into the producer's gradient rows when forward used them in
//! place, scatter-added when forward gathered them, row by row otherwise.
//! Parameter gradients accumulate into the store once per batch.

use std::sync::MutexGuard;
use std::time::Instant;

use sheaf_autodiff::exec::GraphExec;
use sheaf_autodiff::{
    ArgRole, Backward, Expr, GradAcc, Graph, GraphError, NodeId, NodeKind, ParamId, ParamStore,
};
use sheaf_tensor::{Shape, Tensor, TensorError, TensorMut};

use crate::error::{Result, SchedError};
use crate::exec::{batch_err, first_non_finite, Executor, Source};
use crate::plan::Batch;

/// A failed add of parameter `p`'s private gradient into the store.
fn tensor_err(p: ParamId, source: TensorError) -> SchedError {
    SchedError::from(GraphError::Tensor {
        context: format!("adding the private gradient of parameter {p:?} to the store"),
        source: Box::new(source),
    })
}

/// Where the gradient of one argument of a batch goes.
enum Dst<'s> {
    /// Nothing to compute (inputs).
    Skip,
    /// Into rows `row0..` of the producer's gradient buffer `buffer`, which
    /// is taken out of the executor for the call.
    Direct { buffer: u32, row0: u32, t: Tensor },
    /// Into a temporary, sent on afterwards.
    Temp(Tensor),
    /// Into column `j`'s rows of the batch's one gradient block (the
    /// argument was stacked as a block), sent on with all columns.
    Block,
    /// Into a parameter's accumulator (shared arguments).
    Param(MutexGuard<'s, GradAcc>),
    /// Into this executor's private gradient `k` of a parameter (taken out
    /// for the call), added to the store at the end of the backward.
    Private(usize, Tensor),
}

/// A dense parameter's gradient summed apart from the store: another
/// executor held the store's accumulator when this one first needed it
/// (executors side by side on one store). One buffer per parameter and
/// backward, so a busy parameter costs one zeroing and one add per step,
/// not per batch, and nobody waits for a lock in the middle of a step.
pub(crate) struct PrivateGrad {
    param: ParamId,
    grad: Option<Tensor>,
    /// Rows written sparsely, and whether some op wrote densely.
    rows: Vec<u32>,
    dense: bool,
}

impl Executor {
    /// Back-propagates from `loss` (one element) through the batches of
    /// every forward since the graph was last cleared, in reverse. Node
    /// gradients are kept in the graph; parameter gradients are ADDED to
    /// the store's accumulators, once per batch. The graph then lets go of
    /// the parameters' values, so that an optimizer step writes them in
    /// place whether or not the graph is cleared first.
    pub fn backward(&mut self, g: &mut Graph, store: &ParamStore, loss: Expr) -> Result<()> {
        sheaf_tensor::denormals::prepare();
        let result = self.backward_inner(g, store, loss);
        g.release_params();
        result
    }

    fn backward_inner(&mut self, g: &mut Graph, store: &ParamStore, loss: Expr) -> Result<()> {
        let loss_id = g.check(loss, "backward")?;
        g.restore_params(store)?;
        if loss_id.index() >= g.evaluated() {
            self.forward(g, store, loss)?;
        }
        if self.started != Some(g.identity()) {
            return Err(SchedError::OtherGraph);
        }
        if self.unrecorded {
            return Err(SchedError::Inference);
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
        let (t0, l0) = (Instant::now(), self.backend.launches());
        g.reset_grads();
        for t in self.grads.drain(..).flatten() {
            self.arena.recycle(t);
        }
        // Left over only by a backward that panicked: its partial sums
        // must not reach this step's gradients.
        for e in self.private_grads.drain(..) {
            if let Some(t) = e.grad {
                self.arena.recycle(t);
            }
        }
        self.grads.resize(self.buffers.len(), None);
        let err = batch_err(g.op_name(loss_id), std::slice::from_ref(&loss_id));
        let home = match g.node(loss_id).kind() {
            NodeKind::Op => self.homes[loss_id.index()],
            _ => None,
        };
        let Some(home) = home else {
            // A leaf as the loss: nothing to propagate.
            let one = Tensor::full_f32(1.0, shape, self.device()).map_err(&err)?;
            g.set_grad(loss_id, one);
            return Ok(());
        };
        let backend = self.backend;
        self.with_grad(home.buffer, |seed| {
            // The first element of the loss's row: one fill, on any device.
            let (at, numel) = (home.row as usize * seed.row_len(), seed.numel());
            let one = seed.view_mut()?.reshape([numel, 1])?;
            backend.fill(1.0, one.into_rows_mut(at..at + 1)?)
        })
        .map_err(&err)?;

        let plans = std::mem::take(&mut self.plans);
        let mut index = self.buffers.len();
        let mut result = Ok(());
        'all: for p in plans.iter().rev() {
            for batch in p.batches.iter().rev() {
                index -= 1;
                let l1 = self.backend.launches();
                let ran = self.run_backward(g, store, index, batch);
                let op = g.op_name(batch.nodes[0]);
                let launched = self.backend.launches() - l1;
                if launched > 0 {
                    *self.stats.launches_per_op.entry(op).or_insert(0) += launched;
                }
                if let Err(e) = ran {
                    result = Err(e);
                    break 'all;
                }
            }
        }
        // Added even after an error, so that no buffer is lost; the store's
        // gradients are then partial either way.
        let flushed = self.add_private_grads(store);
        if result.is_ok() {
            result = flushed.and_then(|()| self.publish_grads(g, &plans));
        }
        self.plans = plans;
        self.stats.kernels += t0.elapsed();
        self.stats.launches += self.backend.launches() - l0;
        self.note_memory();
        result
    }

    /// The gradient buffer of batch `buffer`, taken out of the executor
    /// (zeros from the arena if no gradient has reached it yet).
    pub(crate) fn grad_buffer(&mut self, buffer: u32) -> sheaf_tensor::Result<Tensor> {
        match self.grads[buffer as usize].take() {
            Some(t) => Ok(t),
            None => {
                let shape = self.buffers[buffer as usize].shape();
                self.arena.zeros(shape)
            }
        }
    }

    /// Runs `f` on the gradient buffer of batch `buffer` (zeros from the
    /// arena on first use) and puts the buffer back, whatever `f` returns.
    pub(crate) fn with_grad<R>(
        &mut self,
        buffer: u32,
        f: impl FnOnce(&mut Tensor) -> sheaf_tensor::Result<R>,
    ) -> sheaf_tensor::Result<R> {
        let mut t = self.grad_buffer(buffer)?;
        let result = f(&mut t);
        self.grads[buffer as usize] = Some(t);
        result
    }

    /// Adds `src` (`n` rows, in any shape) to rows `row..row + n` of batch
    /// `buffer`'s gradient.
    fn add_to_grad_rows(
        &mut self,
        buffer: u32,
        row: usize,
        n: usize,
        src: &Tensor,
    ) -> sheaf_tensor::Result<()> {
        let be = self.backend;
        let (start, zeroing) = (Instant::now(), self.arena.zeroing());
        let added = self.with_grad(buffer, |t| {
            let dst = t
                .view_mut()?
                .into_rows_mut(row..row + n)?
                .reshape(src.shape())?;
            be.axpy(1.0, src, dst)
        });
        self.note_moved(start, zeroing);
        added
    }

    /// Adds the time since `start` to the data moved, less the zero fills
    /// in it (the arena counts those: `zeroing` is its count at `start`).
    fn note_moved(&mut self, start: Instant, zeroing: std::time::Duration) {
        let filled = self.arena.zeroing().saturating_sub(zeroing);
        self.moved += start.elapsed().saturating_sub(filled);
    }

    /// After a failed call: the batch's output gradient, the producers'
    /// gradient buffers and the private gradients taken out for it go back
    /// where they were (locks and temporaries are dropped), so that the
    /// private sums of earlier batches are still added.
    fn put_back(&mut self, index: usize, dout: Tensor, dsts: Vec<Dst<'_>>) {
        self.grads[index] = Some(dout);
        for dst in dsts {
            match dst {
                Dst::Direct { buffer, t, .. } => self.grads[buffer as usize] = Some(t),
                Dst::Private(k, t) => self.private_grads[k].grad = Some(t),
                Dst::Temp(t) => self.arena.recycle(t),
                Dst::Skip | Dst::Param(_) | Dst::Block => {}
            }
        }
    }

    /// Adds the private parameter gradients to the store (each buffer is
    /// zero outside the rows written, so adding all of it adds exactly
    /// what writing into the store would have) and recycles them. Holds
    /// one lock at a time.
    fn add_private_grads(&mut self, store: &ParamStore) -> Result<()> {
        let mut result = Ok(());
        for e in std::mem::take(&mut self.private_grads) {
            let Some(t) = e.grad else { continue };
            if result.is_ok() {
                result = (|| {
                    let mut acc = store.lock_grad(e.param, "backward")?;
                    let dst = acc.grad.view_mut().map_err(|s| tensor_err(e.param, s))?;
                    self.backend
                        .axpy(1.0, &t, dst)
                        .map_err(|s| tensor_err(e.param, s))?;
                    acc.rows.extend_from_slice(&e.rows);
                    acc.dense |= e.dense;
                    Ok(())
                })();
            }
            self.arena.recycle(t);
        }
        result
    }

    /// Makes every node's gradient readable from the graph: row views of
    /// the gradient buffers.
    fn publish_grads(&self, g: &mut Graph, plans: &[crate::plan::Plan]) -> Result<()> {
        let batches = plans.iter().flat_map(|p| p.batches.iter());
        for (grad, batch) in self.grads.iter().zip(batches) {
            if let Some(grad) = grad {
                g.set_grad_rows(&batch.nodes, grad.clone());
            }
        }
        Ok(())
    }

    /// Adds `src` (shaped like node `a`) to `a`'s gradient: its row of its
    /// batch's gradient buffer, or its parameter's accumulator.
    pub(crate) fn accumulate_row(
        &mut self,
        g: &Graph,
        store: &ParamStore,
        a: NodeId,
        src: &Tensor,
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
                let start = Instant::now();
                self.backend.axpy(1.0, src, dst).map_err(err)?;
                self.moved += start.elapsed();
                acc.dense = true;
            }
            NodeKind::Op => {
                let home = self.homes[a.index()].ok_or_else(|| {
                    err(TensorError::InvalidArgument {
                        op,
                        arg: "argument",
                        reason: "was not computed by this executor",
                    })
                })?;
                self.add_to_grad_rows(home.buffer, home.row as usize, 1, src)
                    .map_err(err)?;
            }
        }
        Ok(())
    }

    fn run_backward(
        &mut self,
        g: &Graph,
        store: &ParamStore,
        index: usize,
        batch: &Batch,
    ) -> Result<()> {
        let Some(dout) = self.grads[index].take() else {
            return Ok(());
        };
        let nodes = &batch.nodes;
        let b = nodes.len();
        let first = nodes[0];
        let op = g.op_shared(first);
        let name = op.name();
        let node = g.node(first);
        let err = batch_err(name, nodes);
        let _span = tracing::trace_span!("batch_backward", op = name, size = b).entered();
        if g.checks_finite() {
            if let Some((row, value)) = first_non_finite(&dout) {
                self.grads[index] = Some(dout);
                return Err(SchedError::NonFinite {
                    op: name,
                    node: nodes[row.min(b - 1)],
                    what: "gradient",
                    value,
                });
            }
        }
        if let Some(Source::Summed(back)) = self.records[index].sources.first() {
            // Every term's gradient is the output's: its rows added into
            // the terms' producers' gradient rows where forward read them.
            let back = back.clone();
            let sent = self.send_back_rows(g, store, &dout, &back, name, nodes);
            self.grads[index] = Some(dout);
            return sent;
        }
        let out = self.buffers[index].clone();
        let aux = self.aux_buffers[index].clone();
        let record = &self.records[index];
        let sources = record.sources.clone();
        let kept = record.kept.clone();
        let n = sources.len();
        let mut args = Vec::with_capacity(n);
        for (j, input) in record.inputs.iter().enumerate() {
            args.push(match input {
                Some(t) => t.clone(),
                None => g.value_of(g.args(first)[j]).cloned().ok_or_else(|| {
                    err(TensorError::InvalidArgument {
                        op: name,
                        arg: "shared argument",
                        reason: "has no value",
                    })
                })?,
            });
        }
        // Where each argument's gradient goes; bit j of `write`: handed
        // over unzeroed for the op to write (see `Op::backward_writes`).
        let mut dsts: Vec<Dst<'_>> = Vec::with_capacity(n);
        let mut write = 0u64;
        // A batch stacked as one block gets its arguments' gradients in
        // one block too (every column is added back): unzeroed where the
        // op takes it whole (it writes every element), else zeroed.
        let mut block = match sources.iter().any(|s| matches!(s, Source::Block)) {
            true => {
                let shape = Shape::stack(n * b, g.node(g.args(first)[0]).shape()).map_err(&err)?;
                let t = match op.grads_as_block() {
                    true => self.arena.overwritten(shape),
                    false => self.arena.zeros(shape),
                };
                Some(t.map_err(&err)?)
            }
            false => None,
        };
        let mut build = |this: &mut Self| -> Result<()> {
            let mut taken: Vec<u32> = Vec::new();
            for j in 0..n {
                let role = op.arg_role(j, n);
                let writes = j < 64 && op.backward_writes(j, n, node.attr());
                // A buffer for argument j's gradient alone: unzeroed if the
                // op writes it.
                let mut temp = |this: &mut Self, shape: Shape| match writes {
                    true => {
                        write |= 1 << j;
                        this.arena.overwritten(shape)
                    }
                    false => this.arena.zeros(shape),
                };
                let dst = match role {
                    ArgRole::Stack => {
                        let needed = nodes
                            .iter()
                            .any(|&x| !matches!(g.node(g.args(x)[j]).kind(), NodeKind::Input(_)));
                        match &sources[j] {
                            Source::Block => Dst::Block,
                            _ if !needed => Dst::Skip,
                            Source::View { buffer, row0 }
                                if *buffer as usize != index && !taken.contains(buffer) =>
                            {
                                taken.push(*buffer);
                                let at = *buffer as usize;
                                // The first gradient to reach a buffer, over
                                // all of its rows, may be written unzeroed.
                                let whole = *row0 == 0 && this.buffers[at].num_rows() == b;
                                let t = match this.grads[at].take() {
                                    Some(t) => Ok(t),
                                    None if whole => temp(this, this.buffers[at].shape()),
                                    None => this.arena.zeros(this.buffers[at].shape()),
                                };
                                Dst::Direct {
                                    buffer: *buffer,
                                    row0: *row0,
                                    t: t.map_err(&err)?,
                                }
                            }
                            _ => Dst::Temp(temp(this, args[j].shape()).map_err(&err)?),
                        }
                    }
                    ArgRole::Share => {
                        let a = g.args(first)[j];
                        let repeated = (0..j)
                            .any(|k| op.arg_role(k, n) == ArgRole::Share && g.args(first)[k] == a);
                        match g.node(a).kind() {
                            NodeKind::Input(_) => Dst::Skip,
                            NodeKind::Param(p) if !repeated => {
                                match this.private_grads.iter().position(|e| e.param == p) {
                                    // Put back after every call: empty only after
                                    // an error has already ended this backward.
                                    Some(k) => match this.private_grads[k].grad.take() {
                                        Some(t) => Dst::Private(k, t),
                                        None => Dst::Private(
                                            k,
                                            this.arena.zeros(g.node(a).shape()).map_err(&err)?,
                                        ),
                                    },
                                    None => match store.try_lock_grad(p, name)? {
                                        Some(acc) => Dst::Param(acc),
                                        None => {
                                            let t = this
                                                .arena
                                                .zeros(g.node(a).shape())
                                                .map_err(&err)?;
                                            this.private_grads.push(PrivateGrad {
                                                param: p,
                                                grad: None,
                                                rows: Vec::new(),
                                                dense: false,
                                            });
                                            Dst::Private(this.private_grads.len() - 1, t)
                                        }
                                    },
                                }
                            }
                            _ => Dst::Temp(temp(this, g.node(a).shape()).map_err(&err)?),
                        }
                    }
                };
                dsts.push(dst);
            }
            Ok(())
        };
        if let Err(e) = build(self) {
            self.put_back(index, dout, dsts);
            return Err(e);
        }
        // Lent by the record for the call, put back after it.
        let data = std::mem::take(&mut self.records[index].data);
        let seeds = std::mem::take(&mut self.records[index].seeds);
        let ran = (|| -> Result<Vec<(usize, Vec<u32>)>> {
            let mut dargs: Vec<Option<TensorMut<'_>>> = Vec::with_capacity(n);
            // The block whole, for an op that takes it so; else its
            // columns, in order, as disjoint views.
            let mut whole = None;
            let mut columns = match block.as_mut() {
                Some(t) if op.grads_as_block() => {
                    whole = Some(t.view_mut().map_err(&err)?);
                    Vec::new().into_iter()
                }
                Some(t) => {
                    let mut rest = t.view_mut().map_err(&err)?;
                    let mut cols = Vec::with_capacity(n);
                    for _ in 0..n {
                        let (col, tail) = rest.into_split_rows(b).map_err(&err)?;
                        cols.push(col);
                        rest = tail;
                    }
                    cols.into_iter()
                }
                None => Vec::new().into_iter(),
            };
            for (dst, arg) in dsts.iter_mut().zip(&args) {
                dargs.push(match dst {
                    Dst::Skip => None,
                    Dst::Block if whole.is_some() => None,
                    Dst::Block => Some(
                        columns
                            .next()
                            .ok_or_else(|| {
                                err(TensorError::InvalidArgument {
                                    op: name,
                                    arg: "gradient block",
                                    reason: "has fewer columns than the batch has arguments",
                                })
                            })?
                            .reshape(arg.shape())
                            .map_err(&err)?,
                    ),
                    Dst::Direct { row0, t, .. } => {
                        let r = *row0 as usize;
                        Some(
                            t.view_mut()
                                .and_then(|v| v.into_rows_mut(r..r + b))
                                .and_then(|v| v.reshape(arg.shape()))
                                .map_err(&err)?,
                        )
                    }
                    Dst::Temp(t) => Some(t.view_mut().map_err(&err)?),
                    Dst::Param(acc) => Some(acc.grad.view_mut().map_err(&err)?),
                    Dst::Private(_, t) => Some(t.view_mut().map_err(&err)?),
                });
            }
            let _span = tracing::trace_span!("kernel").entered();
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
            )
            .writing(write)
            .with_kept(&kept);
            if let Some(w) = whole {
                cx = cx.with_grad_block(w);
            }
            let t_op = Instant::now();
            let ran = op.backward(&mut cx);
            self.stats.op_calls += t_op.elapsed();
            ran.map_err(&err)?;
            Ok(cx.touched_rows().to_vec())
        })();
        let record = &mut self.records[index];
        (record.data, record.seeds) = (data, seeds);
        let touched = match ran {
            Ok(touched) => touched,
            Err(e) => {
                self.put_back(index, dout, dsts);
                return Err(e);
            }
        };
        self.grads[index] = Some(dout);
        // Parameters first, releasing their locks before temporaries are
        // sent on (which may reach the same parameters).
        let mut temps = Vec::new();
        for (j, dst) in dsts.into_iter().enumerate() {
            let rows = touched.iter().find(|(a, _)| *a == j).map(|(_, r)| r);
            match dst {
                Dst::Skip => {}
                Dst::Param(mut acc) => match rows {
                    Some(rows) => acc.rows.extend_from_slice(rows),
                    None => acc.dense = true,
                },
                Dst::Private(k, t) => {
                    let e = &mut self.private_grads[k];
                    e.grad = Some(t);
                    match rows {
                        Some(rows) => e.rows.extend_from_slice(rows),
                        None => e.dense = true,
                    }
                }
                Dst::Direct { buffer, t, .. } => self.grads[buffer as usize] = Some(t),
                Dst::Temp(t) => temps.push((j, t)),
                Dst::Block => {}
            }
        }
        if let Some(t) = block {
            self.send_back_block(g, store, batch, &t, name)?;
            self.arena.recycle(t);
        }
        for (j, t) in temps {
            self.send_back(g, store, batch, j, &sources[j], &t, name)?;
            self.arena.recycle(t);
        }
        Ok(())
    }

    /// Adds the temporary gradient `t` of argument `j` of `batch` to where
    /// the argument came from.
    #[allow(clippy::too_many_arguments)]
    fn send_back(
        &mut self,
        g: &Graph,
        store: &ParamStore,
        batch: &Batch,
        j: usize,
        source: &Source,
        t: &Tensor,
        op: &'static str,
    ) -> Result<()> {
        let nodes = &batch.nodes;
        let err = batch_err(op, nodes);
        match source {
            Source::Shared => {
                let a = g.args(nodes[0])[j];
                self.accumulate_row(g, store, a, t, op)
            }
            Source::View { buffer, row0 } => self
                .add_to_grad_rows(*buffer, *row0 as usize, nodes.len(), t)
                .map_err(&err),
            Source::Gather { buffer, idx } => {
                let be = self.backend;
                let (start, zeroing) = (Instant::now(), self.arena.zeroing());
                let added = self.with_grad(*buffer, |dst| {
                    let src = t.reshape(Shape::stack(nodes.len(), dst.shape().row_shape())?)?;
                    be.scatter_add_rows(&src, idx, dst.view_mut()?)
                });
                self.note_moved(start, zeroing);
                added.map_err(&err)
            }
            // Sent back with every column by `send_back_block`; a sum in
            // place is sent back before its op would run.
            Source::Block | Source::Summed(_) => Ok(()),
            // Rows of batch outputs and leaves: one call, where forward
            // found them.
            Source::Rows(back) => self.send_back_rows(g, store, t, back, op, nodes),
        }
    }
}
