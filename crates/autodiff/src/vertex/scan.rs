//! A vertex function scanned over a sequence ([`Graph::scan`]): ONE node
//! per sequence runs a step function `F(x_t, state) -> state'` over every
//! position, and a batch of such nodes runs F once per position over the
//! sequences still running, each time as F's batched kernels. A recurrent
//! layer then costs the host one node per sequence instead of one (or
//! several) per position, and the executor one batch instead of one per
//! position.
//!
//! Sequences are padded to a common length `T` (part of the signature, so
//! sequences of one `T` batch together whatever their true lengths) and
//! each node's true length is its data: the scan sorts a batch by length,
//! so the sequences running at position `t` are a prefix, and stops each
//! one at its length. Positions past it read nothing and output zeros, so
//! the result does not depend on the padding (tested).
//!
//! The ops of F that read only the input `x` (and parameters), such as the
//! input product of a recurrent cell, do not depend on the position's
//! state: they run ONCE, before the loop, over the real positions of every
//! sequence (one product over all of them instead of one per position),
//! and their backward once after it.

use std::sync::Arc;

use sheaf_tensor::{Backend, Shape, Tensor, TensorMut};

mod order;

use super::call::{step_seed, CallOp};
use super::{params_err, Src, Template, VertexFn};
use crate::error::{GraphError, Result};
use crate::graph::Graph;
use crate::id::Expr;
use crate::op::{ArgRole, Attr, Backward, Cost, Forward, Op, ShapeError};
use crate::pool;
use order::{flat, flat_mut, lengths, positions, positions_mut, rows, Order};

/// The op of a scan node: F scanned over `steps` positions.
pub(super) struct ScanOp {
    pub(super) call: CallOp,
    pub(super) steps: usize,
    /// The steps of F run once for all positions (see the module docs).
    hoisted: Vec<bool>,
}

impl ScanOp {
    fn new(call: CallOp, steps: usize) -> ScanOp {
        let hoisted = hoistable(&call.0);
        ScanOp {
            call,
            steps,
            hoisted,
        }
    }

    fn template(&self) -> &Arc<Template> {
        &self.call.0
    }

    /// Tensors kept per position: F's own, the new state and, where F has
    /// one, its auxiliary buffer.
    fn per_step(&self) -> usize {
        let t = self.template();
        t.keeps + 1 + usize::from(t.aux_len > 0)
    }

    /// The hoisted steps, in order.
    fn hoisted(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.hoisted.len()).filter(|&j| self.hoisted[j])
    }

    /// Where position `step`'s kept tensors start.
    fn at(&self, step: usize) -> usize {
        1 + self.hoisted().count() + step * self.per_step()
    }

    /// Whether a step run per position reads `x` itself.
    fn reads_x_per_step(&self) -> bool {
        let t = self.template();
        t.steps
            .iter()
            .zip(&self.hoisted)
            .any(|(s, &h)| !h && s.args.contains(&Src::Arg(0)))
    }
}

/// Which steps of F can run once for all positions: every step but the
/// last that reads `x`, parameters, shared constants and such steps only,
/// each source once, with no auxiliary buffer and nothing kept of its own.
fn hoistable(t: &Template) -> Vec<bool> {
    let mut h = vec![false; t.steps.len()];
    let last = t.steps.len().saturating_sub(1);
    for j in 0..last {
        let s = &t.steps[j];
        let mut reads_x = false;
        let mut ok = s.aux.is_none() && s.op.keeps() == 0;
        for (k, (&src, &role)) in s.args.iter().zip(&s.roles).enumerate() {
            ok &= !s.args[..k].contains(&src);
            ok &= match src {
                Src::Arg(0) => {
                    reads_x = true;
                    true
                }
                Src::Step(m) => {
                    reads_x |= h[m];
                    h[m]
                }
                Src::Param(_) | Src::Const(_) => role == ArgRole::Share,
                // Hoisted steps take whole parameters only.
                Src::Arg(_) | Src::Block(_) | Src::Feed(_) => false,
            };
        }
        h[j] = ok && reads_x;
    }
    h
}

impl ScanOp {
    /// The value of a hoisted step's source over all real positions.
    fn hoisted_arg(
        &self,
        be: &dyn Backend,
        xs: &Tensor,
        args: &[Tensor],
        values: &[Option<Tensor>],
        src: Src,
    ) -> sheaf_tensor::Result<Tensor> {
        let missing = sheaf_tensor::TensorError::MissingArgument {
            op: "scan",
            arg: "a hoisted step's value",
            when: "a later hoisted step reads it",
        };
        match src {
            Src::Arg(_) => Ok(xs.clone()),
            Src::Param(i) => Ok(args[2 + i].clone()),
            Src::Const(i) => self.template().consts[i].to_device(be.device()),
            Src::Step(m) => values[m].clone().ok_or(missing),
            Src::Block(_) | Src::Feed(_) => Err(sheaf_tensor::TensorError::InvalidArgument {
                op: "scan",
                arg: "a hoisted step's argument",
                reason: "is a column block or a feed's row, which hoisted steps never read",
            }),
        }
    }
}

impl Op for ScanOp {
    fn name(&self) -> &'static str {
        self.template().name
    }

    fn arg_role(&self, i: usize, _n: usize) -> ArgRole {
        match i < 2 {
            true => ArgRole::Stack,
            false => ArgRole::Share,
        }
    }

    fn infer_shape(&self, args: &[Shape], attr: Attr) -> Result<Shape, ShapeError> {
        let t = self.template();
        let (Some(xs), Some(&state)) = (args.first(), args.get(1)) else {
            return Err(ShapeError::expected(
                "a sequence, an initial state and F's parameters",
            ));
        };
        let x = Shape::stack(self.steps, t.arg_shapes[0])
            .map_err(|e| ShapeError::expected(e.to_string()))?;
        if *xs != x {
            return Err(ShapeError::expected(format!(
                "a sequence of shape {x} (padded length {} of F's argument 0), not {xs}",
                self.steps
            )));
        }
        let mut inner = vec![t.arg_shapes[0], state];
        inner.extend_from_slice(&args[2..]);
        self.call.infer_shape(&inner, attr)?;
        Shape::stack(self.steps, t.out_shape).map_err(|e| ShapeError::expected(e.to_string()))
    }

    fn batchable(&self) -> bool {
        self.call.batchable()
    }

    fn cost(&self) -> Cost {
        Cost::Heavy
    }

    fn keeps(&self) -> usize {
        self.at(self.steps)
    }

    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let t = self.template();
        let (steps, b) = (self.steps, cx.batch());
        let Forward {
            backend: be,
            args,
            data,
            seeds,
            train,
            mut out,
            mut keep,
            ..
        } = cx;
        lengths(data, steps)?;
        let order = Order::new(data, steps);
        // The real positions of every sequence, packed position-major
        // (position t's running sequences are rows offsets[t].., sorted),
        // one buffer kept for backward.
        let mut xs = keep.buffer(Shape::stack(order.total, t.arg_shapes[0])?)?;
        let packed: Vec<u32> = (0..order.total as u32).collect();
        be.copy_rows_at(
            &positions(&args[0], steps)?,
            &order.all_rows(steps),
            flat_mut(xs.view_mut()?)?,
            &packed,
            false,
        )?;
        keep.push(xs.clone());
        // The steps that read x only: once, over every real position.
        let mut hoisted: Vec<Option<Tensor>> = vec![None; t.steps.len()];
        for j in self.hoisted() {
            let s = &t.steps[j];
            let inner = s
                .args
                .iter()
                .map(|&src| self.hoisted_arg(be, &xs, args, &hoisted, src))
                .collect::<sheaf_tensor::Result<Vec<_>>>()?;
            let mut v = keep.buffer(Shape::stack(order.total, s.shape)?)?;
            s.op.forward(Forward {
                backend: be,
                args: &inner,
                data: &vec![s.data; order.total],
                attr: s.attr,
                seeds: &order.hoisted_seeds(seeds, steps, j),
                train,
                out: v.view_mut()?,
                aux: None,
                block: None,
                keep: keep.reborrow(),
            })?;
            keep.push(v.clone());
            hoisted[j] = Some(v);
        }
        let init = sorted_init(be, &args[1], &order, t.out_shape)?;
        let mut states: Vec<Tensor> = Vec::with_capacity(steps);
        let zeros = vec![0u32; b];
        // Lists every position refills.
        let (mut pre, mut call_args, mut step_seeds) = (Vec::new(), Vec::new(), Vec::new());
        for step in 0..steps {
            let (n, at) = (order.running[step], order.offsets[step]);
            if n == 0 {
                // Nothing runs: placeholders keep the count fixed.
                for _ in 0..self.per_step() {
                    let empty = keep.buffer(Shape::from([0]))?;
                    keep.push(empty);
                }
                continue;
            }
            pre.clear();
            for v in &hoisted {
                pre.push(v.as_ref().map(|v| rows(v, at, n)).transpose()?);
            }
            let state = states.last().unwrap_or(&init);
            call_args.clear();
            call_args.extend([rows(&xs, at, n)?, rows(state, 0, n)?]);
            call_args.extend(args[2..].iter().cloned());
            order.seeds_at(seeds, step, &mut step_seeds);
            let mut next = keep.buffer(Shape::stack(n, t.out_shape)?)?;
            let mut aux = match t.aux_len {
                0 => None,
                m => Some(keep.buffer(Shape::from([n, m]))?),
            };
            self.call.run_forward(
                Forward {
                    backend: be,
                    args: &call_args,
                    data: &zeros[..n],
                    attr: 0,
                    seeds: &step_seeds,
                    train,
                    out: next.view_mut()?,
                    aux: match &mut aux {
                        Some(a) => Some(a.view_mut()?),
                        None => None,
                    },
                    block: None,
                    keep: keep.reborrow(),
                },
                &pre,
            )?;
            keep.push(next.clone());
            if let Some(a) = aux {
                keep.push(a);
            }
            states.push(next);
        }
        pool::give(init);
        // The output: every running position's state at its sequence's
        // row, zeros past each length.
        be.fill(0.0, out.reborrow())?;
        let (mut from, mut to) = (Vec::new(), Vec::new());
        for step in 0..states.len() {
            for (r, row) in order.rows_at(step, steps).enumerate() {
                from.push((step as u32, r as u32));
                to.push(row);
            }
        }
        let flats = states
            .iter()
            .map(flat)
            .collect::<sheaf_tensor::Result<Vec<_>>>()?;
        let srcs: Vec<&Tensor> = flats.iter().collect();
        be.gather_rows_from(&srcs, &from, positions_mut(out, steps)?, &to)
    }

    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let t = self.template();
        let (steps, b, be) = (self.steps, cx.batch(), cx.backend);
        let (args, data, seeds, dout) = (cx.args, cx.data, cx.seeds, cx.dout);
        let kept = cx.kept();
        if kept.len() != self.keeps() {
            return Err(sheaf_tensor::TensorError::InvalidArgument {
                op: "scan",
                arg: "kept tensors",
                reason: "backward was not given the tensors its forward kept",
            });
        }
        lengths(data, steps)?;
        let order = Order::new(data, steps);
        let xs = &kept[0];
        let mut hoisted: Vec<Option<Tensor>> = vec![None; t.steps.len()];
        for (k, j) in self.hoisted().enumerate() {
            hoisted[j] = Some(kept[1 + k].clone());
        }
        // The gradients reaching the hoisted steps, over every position:
        // each position's rows written once (unzeroed buffers; the rows of
        // positions no gradient reached are zeroed after the loop).
        let mut hoisted_grads: Vec<Option<Tensor>> = vec![None; t.steps.len()];
        let mut written: Vec<Vec<bool>> = vec![Vec::new(); t.steps.len()];
        for j in self.hoisted() {
            let shape = Shape::stack(order.total, t.steps[j].shape)?;
            hoisted_grads[j] = Some(pool::take(shape, false, be.device())?);
            written[j] = vec![false; steps];
        }
        let per = self.per_step();
        let state_at = |step: usize| -> sheaf_tensor::Result<Tensor> {
            match step {
                0 => sorted_init(be, &args[1], &order, t.out_shape),
                _ => Ok(kept[self.at(step - 1) + t.keeps].clone()),
            }
        };
        // The output's gradient at every real position, packed like x: one
        // gather for all positions.
        let mut douts = pool::take(Shape::stack(order.total, t.out_shape)?, false, be.device())?;
        let packed: Vec<u32> = (0..order.total as u32).collect();
        be.copy_rows_at(
            &positions(dout, steps)?,
            &order.all_rows(steps),
            flat_mut(douts.view_mut()?)?,
            &packed,
            false,
        )?;
        let zeros = vec![0u32; b];
        let wants_x = cx.dargs.first().is_some_and(|d| d.is_some());
        // x's gradient, packed like x.
        let mut dxs = match wants_x {
            true => Some(pool::take(
                Shape::stack(order.total, t.arg_shapes[0])?,
                true,
                be.device(),
            )?),
            false => None,
        };
        let x_per_step = wants_x && self.reads_x_per_step();
        // The gradient reaching the state after `step` from later steps.
        let mut carry: Option<Tensor> = None;
        let (mut call_args, mut step_seeds) = (Vec::new(), Vec::new());
        for step in (0..steps).rev() {
            let (n, at) = (order.running[step], order.offsets[step]);
            if n == 0 {
                continue;
            }
            let k = self.at(step);
            debug_assert!(k + per <= kept.len());
            let next = &kept[k + t.keeps];
            let aux = (t.aux_len > 0).then(|| &kept[k + t.keeps + 1]);
            if let Some(c) = carry.take() {
                let m = c.shape().rows();
                let part = douts.view_mut()?.into_split_rows(at)?.1;
                be.axpy(1.0, &c, part.into_split_rows(m)?.0)?;
                pool::give(c);
            }
            let dnext = rows(&douts, at, n)?;
            let state = state_at(step)?;
            call_args.clear();
            call_args.extend([rows(xs, at, n)?, rows(&state, 0, n)?]);
            call_args.extend(args[2..].iter().cloned());
            let wants_state = step > 0 || cx.dargs.get(1).is_some_and(|d| d.is_some());
            let mut dstate = match wants_state {
                true => Some(pool::take(
                    Shape::stack(n, t.out_shape)?,
                    true,
                    be.device(),
                )?),
                false => None,
            };
            let touched = {
                let mut dargs: Vec<Option<TensorMut<'_>>> = Vec::with_capacity(call_args.len());
                dargs.push(match (&mut dxs, x_per_step) {
                    (Some(d), true) => {
                        Some(d.view_mut()?.into_split_rows(at)?.1.into_split_rows(n)?.0)
                    }
                    _ => None,
                });
                dargs.push(match &mut dstate {
                    Some(d) => Some(d.view_mut()?),
                    None => None,
                });
                for d in cx.dargs[2..].iter_mut() {
                    dargs.push(d.as_mut().map(|d| d.reborrow()));
                }
                order.seeds_at(seeds, step, &mut step_seeds);
                let mut inner = Backward::new(
                    be,
                    &call_args,
                    &zeros[..n],
                    0,
                    &step_seeds,
                    next,
                    aux,
                    &dnext,
                    dargs,
                )
                .with_kept(&kept[k..k + t.keeps]);
                let (grads, written) = (&mut hoisted_grads, &mut written);
                self.call
                    .run_backward(&mut inner, &self.hoisted, &mut |j, g| {
                        let Some(dst) = grads[j].as_mut() else {
                            return Ok(());
                        };
                        let part = dst.view_mut()?.into_split_rows(at)?.1.into_split_rows(n)?.0;
                        // F's backward hands each step's gradient over once.
                        match std::mem::replace(&mut written[j][step], true) {
                            false => be.scale(1.0, g, part),
                            true => be.axpy(1.0, g, part),
                        }
                    })?;
                inner.touched_rows().to_vec()
            };
            for (a, rows) in touched {
                cx.touch_rows(a, &rows);
            }
            drop(dnext);
            if step == 0 {
                pool::give(state);
            }
            carry = dstate;
        }
        // What reached the initial states, back in batch order.
        if let (Some(c), Some(Some(d))) = (carry.take(), cx.dargs.get_mut(1)) {
            let sorted: Vec<u32> = (0..b as u32).collect();
            be.copy_rows_at(
                &flat(&c)?,
                &sorted,
                flat_mut(d.reborrow())?,
                &order.perm,
                true,
            )?;
            pool::give(c);
        }
        for (j, done) in written.iter().enumerate() {
            let Some(dst) = hoisted_grads[j].as_mut() else {
                continue;
            };
            for (step, _) in done.iter().enumerate().filter(|(_, &w)| !w) {
                let (n, at) = (order.running[step], order.offsets[step]);
                if n > 0 {
                    let part = dst.view_mut()?.into_split_rows(at)?.1.into_split_rows(n)?.0;
                    be.fill(0.0, part)?;
                }
            }
        }
        // The hoisted steps' backward, once over every position, last first.
        let hoisted_order: Vec<usize> = self.hoisted().collect();
        for &j in hoisted_order.iter().rev() {
            let s = &t.steps[j];
            let Some(dstep) = hoisted_grads[j].take() else {
                continue;
            };
            let inner_args = s
                .args
                .iter()
                .map(|&src| self.hoisted_arg(be, xs, args, &hoisted, src))
                .collect::<sheaf_tensor::Result<Vec<_>>>()?;
            let mut taken: Vec<(usize, Tensor)> = Vec::new();
            for &src in &s.args {
                if let Src::Step(m) = src {
                    if let Some(g) = hoisted_grads[m].take() {
                        taken.push((m, g));
                    }
                }
            }
            let touched = {
                let mut dargs: Vec<Option<TensorMut<'_>>> = Vec::with_capacity(s.args.len());
                let mut pending: Vec<(usize, &mut Tensor)> =
                    taken.iter_mut().map(|(m, g)| (*m, g)).collect();
                let mut x_grad = dxs.as_mut();
                let mut outer: Vec<Option<&mut TensorMut<'_>>> =
                    cx.dargs.iter_mut().map(|d| d.as_mut()).collect();
                for &src in &s.args {
                    dargs.push(match src {
                        Src::Arg(_) => match x_grad.take() {
                            Some(d) => Some(d.view_mut()?),
                            None => None,
                        },
                        Src::Param(i) => outer
                            .get_mut(2 + i)
                            .and_then(|d| d.take())
                            .map(|d| d.reborrow()),
                        Src::Const(_) | Src::Block(_) | Src::Feed(_) => None,
                        Src::Step(m) => match pending.iter().position(|(k, _)| *k == m) {
                            Some(p) => Some(pending.swap_remove(p).1.view_mut()?),
                            None => None,
                        },
                    });
                }
                let value =
                    hoisted[j]
                        .clone()
                        .ok_or(sheaf_tensor::TensorError::MissingArgument {
                            op: "scan",
                            arg: "a hoisted step's value",
                            when: "its backward runs",
                        })?;
                let step_seeds = order.hoisted_seeds(seeds, steps, j);
                let step_data = vec![s.data; order.total];
                let mut inner = Backward::new(
                    be,
                    &inner_args,
                    &step_data,
                    s.attr,
                    &step_seeds,
                    &value,
                    None,
                    &dstep,
                    dargs,
                );
                s.op.backward(&mut inner)?;
                inner.touched_rows().to_vec()
            };
            for (a, rows) in touched {
                if let Some(Src::Param(i)) = s.args.get(a) {
                    cx.touch_rows(2 + i, &rows);
                }
            }
            for (m, g) in taken {
                hoisted_grads[m] = Some(g);
            }
            pool::give(dstep);
        }
        hoisted_grads.into_iter().flatten().for_each(pool::give);
        // x's gradient back to each sequence's rows.
        pool::give(douts);
        if let (Some(dx), Some(Some(d))) = (dxs, cx.dargs.first_mut()) {
            be.copy_rows_at(
                &flat(&dx)?,
                &packed,
                positions_mut(d.reborrow(), steps)?,
                &order.all_rows(steps),
                true,
            )?;
            pool::give(dx);
        }
        Ok(())
    }
}

/// The initial states `[b, ...state]` in sorted order (a pooled buffer).
fn sorted_init(
    be: &dyn Backend,
    init: &Tensor,
    order: &Order,
    state: Shape,
) -> sheaf_tensor::Result<Tensor> {
    let b = order.perm.len();
    let mut s = pool::take(Shape::stack(b, state)?, false, be.device())?;
    let all: Vec<u32> = (0..b as u32).collect();
    be.copy_rows_at(
        &flat(init)?,
        &order.perm,
        flat_mut(s.view_mut()?)?,
        &all,
        false,
    )?;
    Ok(s)
}

impl Graph {
    /// F scanned over a sequence: `states[t] = F(xs[t], states[t - 1])`
    /// from `states[-1] = init` for `t < len`, as ONE node `[T, ...state]`
    /// (zeros at `t >= len`). `f` takes `(x, state)` and returns the new
    /// state (one output of the state's shape); `xs` is `[T, ...x]`, the
    /// sequence padded to `T` positions, of which the first `len` are
    /// real. A recurrent layer over a sequence is then one graph node,
    /// and every executor batches the scans of one `f` and `T` (whatever
    /// their lengths) into one batch that runs F's ops once per position
    /// over the sequences still running. Values and gradients equal the
    /// unrolled calls (`len` calls of [`Graph::call_one`]; tested), with
    /// each step's dropout drawn from the scan node's seed and the
    /// position.
    ///
    /// Errors: `f` not of that form or reading per-call data; `xs` or
    /// `init` of other shapes (naming F and both shapes); `len` 0 or
    /// above `T` ([`GraphError::Data`]).
    pub fn scan(&mut self, f: &VertexFn, xs: Expr, init: Expr, len: usize) -> Result<Expr> {
        let t = &f.template;
        if t.arg_shapes.len() != 2 || t.outputs.len() != 1 || t.arg_shapes[1] != t.out_shape {
            return Err(params_err(
                t.name,
                format!(
                    "a scan needs F(x, state) -> state (two arguments, one output of the                      second's shape); F takes {} argument(s) and returns {}",
                    t.arg_shapes.len(),
                    t.out_shape
                ),
            ));
        }
        if t.data_below.is_some() {
            return Err(params_err(
                t.name,
                "reads per-call data, which a scan does not give".into(),
            ));
        }
        let shape = self.shape(xs)?;
        let steps = match shape.dims() {
            [steps, ..] if shape.rank() == t.arg_shapes[0].rank() + 1 => *steps,
            _ => {
                return Err(params_err(
                    t.name,
                    format!(
                        "a scan reads a sequence [T, ...{}], not {shape}",
                        t.arg_shapes[0]
                    ),
                ))
            }
        };
        if len == 0 || len > steps {
            return Err(GraphError::Data {
                op: t.name,
                what: format!("a scan of length {len} over a sequence padded to {steps} positions"),
            });
        }
        let op = f.scan_op(steps);
        let mut all = Vec::with_capacity(2 + t.params.len());
        all.extend([xs, init]);
        for p in &t.params {
            all.push(self.param(p));
        }
        self.apply_with_data(&op, &all, 0, len as u32)
    }
}

impl VertexFn {
    /// The op of scans of this function over `steps` positions: one per
    /// length, shared by every clone, so that scans batch together.
    fn scan_op(&self, steps: usize) -> Arc<dyn Op> {
        let mut ops = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, op)) = ops.iter().find(|(s, _)| *s == steps) {
            return Arc::clone(op);
        }
        let op: Arc<dyn Op> = Arc::new(ScanOp::new(CallOp(Arc::clone(&self.template)), steps));
        ops.push((steps, Arc::clone(&op)));
        op
    }
}

#[cfg(test)]
mod tests {
    use sheaf_tensor::{Shape, Tensor};

    use super::hoistable;
    use crate::{ParamStore, VertexFn};

    /// The input product of a GRU-like step (x only) is hoisted; the
    /// product reading the state, the cell, and a product reading both x
    /// and the state (an LSTM's one affine) are not.
    #[test]
    fn only_steps_of_x_alone_are_hoisted() {
        let mut store = ParamStore::new();
        let t = |dims: &[usize]| {
            Tensor::zeros(
                Shape::new(dims).unwrap(),
                sheaf_tensor::DType::F32,
                sheaf_tensor::Device::Cpu,
            )
            .unwrap()
        };
        let (w, u, b) = (
            store.add("w", t(&[6, 3])).unwrap(),
            store.add("u", t(&[6, 2])).unwrap(),
            store.add("b", t(&[6])).unwrap(),
        );
        let shapes = [Shape::from([3]), Shape::from([2])];
        let gru = VertexFn::trace("gru", &shapes, |g, a| {
            let (w, u, b) = (g.param(&w), g.param(&u), g.param(&b));
            let xw = g.affine(b, &[(w, a[0])])?;
            let xt = g.tanh(xw)?;
            let hu = g.affine(b, &[(u, a[1])])?;
            let both = g.add(xt, hu)?;
            Ok(vec![g.slice(both, 0, 2)?])
        })
        .unwrap();
        assert_eq!(hoistable(&gru.template), [true, true, false, false, false]);
        let lstm = VertexFn::trace("lstm", &shapes, |g, a| {
            let (w, u, b) = (g.param(&w), g.param(&u), g.param(&b));
            let y = g.affine(b, &[(w, a[0]), (u, a[1])])?;
            Ok(vec![g.slice(y, 0, 2)?])
        })
        .unwrap();
        assert_eq!(hoistable(&lstm.template), [false, false]);
    }
}
