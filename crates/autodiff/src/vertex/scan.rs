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

use std::sync::Arc;

use sheaf_tensor::{Backend, Shape, Tensor, TensorMut};

use super::call::{step_seed, CallOp};
use super::{params_err, Template, VertexFn};
use crate::error::{GraphError, Result};
use crate::graph::Graph;
use crate::id::Expr;
use crate::op::{ArgRole, Attr, Backward, Cost, Forward, Op, ShapeError};
use crate::pool;

/// The op of a scan node: F scanned over `steps` positions.
pub(super) struct ScanOp {
    pub(super) call: CallOp,
    pub(super) steps: usize,
}

impl ScanOp {
    fn template(&self) -> &Arc<Template> {
        &self.call.0
    }

    /// Tensors kept per position: F's own, the new state and, where F has
    /// one, its auxiliary buffer.
    fn per_step(&self) -> usize {
        let t = self.template();
        t.keeps + 1 + usize::from(t.aux_len > 0)
    }
}

/// The batch sorted by length, longest first (ties in batch order), and
/// how many sequences run at each position.
struct Order {
    perm: Vec<u32>,
    running: Vec<usize>,
}

impl Order {
    fn new(lens: &[u32], steps: usize) -> Order {
        let mut perm: Vec<u32> = (0..lens.len() as u32).collect();
        perm.sort_by_key(|&i| std::cmp::Reverse(lens[i as usize]));
        let running = (0..steps)
            .map(|t| lens.iter().filter(|&&l| l as usize > t).count())
            .collect();
        Order { perm, running }
    }

    /// Rows `seq * steps + t` of the `[b * steps, ...]` flattened sequences
    /// for the sequences running at `t`, in sorted order.
    fn rows_at(&self, t: usize, steps: usize) -> Vec<u32> {
        self.perm[..self.running[t]]
            .iter()
            .map(|&i| i * steps as u32 + t as u32)
            .collect()
    }

    /// Per-step seeds of the sequences running at `t`.
    fn seeds_at(&self, seeds: &[u64], t: usize) -> Vec<u64> {
        self.perm[..self.running[t]]
            .iter()
            .map(|&i| step_seed(seeds[i as usize], t))
            .collect()
    }
}

/// `[n, ...row]` view of rows `start..start + n` of a `[rows, ...]` tensor.
fn rows(t: &Tensor, start: usize, n: usize) -> sheaf_tensor::Result<Tensor> {
    t.rows(start..start + n)
}

/// A tensor `[m, ...row]` seen as `[m, row numel]`.
fn flat(t: &Tensor) -> sheaf_tensor::Result<Tensor> {
    let m = t.shape().rows();
    t.reshape([m, t.numel() / m.max(1)])
}

fn flat_mut(t: TensorMut<'_>) -> sheaf_tensor::Result<TensorMut<'_>> {
    let m = t.shape().rows();
    let n = t.numel();
    t.reshape([m, n / m.max(1)])
}

/// A batch of sequences `[b, T, ...]` seen as `[b * T, row numel]`.
fn positions(t: &Tensor, steps: usize) -> sheaf_tensor::Result<Tensor> {
    let m = t.shape().rows() * steps;
    t.reshape([m, t.numel() / m.max(1)])
}

fn positions_mut(t: TensorMut<'_>, steps: usize) -> sheaf_tensor::Result<TensorMut<'_>> {
    let m = t.shape().rows() * steps;
    let n = t.numel();
    t.reshape([m, n / m.max(1)])
}

fn lengths(data: &[u32], steps: usize) -> sheaf_tensor::Result<()> {
    match data.iter().all(|&l| l >= 1 && l as usize <= steps) {
        true => Ok(()),
        false => Err(sheaf_tensor::TensorError::InvalidArgument {
            op: "scan",
            arg: "lengths",
            reason: "a sequence length is 0 or above the padded length",
        }),
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
        1 + self.steps * self.per_step()
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
        // The inputs time-major (position t's running sequences are rows
        // t*b.., in sorted order), one buffer kept for backward.
        let mut xs = keep.buffer(Shape::stack(steps * b, t.arg_shapes[0])?)?;
        let x_flat = positions(&args[0], steps)?;
        {
            let (mut src, mut dst) = (Vec::new(), Vec::new());
            for step in 0..steps {
                src.extend(order.rows_at(step, steps));
                dst.extend((0..order.running[step]).map(|r| (step * b + r) as u32));
            }
            be.copy_rows_at(&x_flat, &src, flat_mut(xs.view_mut()?)?, &dst, false)?;
        }
        keep.push(xs.clone());
        let init = sorted_init(be, &args[1], &order, t.out_shape)?;
        let mut states: Vec<Tensor> = Vec::with_capacity(steps);
        let zeros = vec![0u32; b];
        for step in 0..steps {
            let n = order.running[step];
            if n == 0 {
                // Nothing runs: placeholders keep the count fixed.
                for _ in 0..self.per_step() {
                    let empty = keep.buffer(Shape::from([0]))?;
                    keep.push(empty);
                }
                continue;
            }
            let state = states.last().unwrap_or(&init);
            let mut call_args = vec![rows(&xs, step * b, n)?, rows(state, 0, n)?];
            call_args.extend(args[2..].iter().cloned());
            let mut next = keep.buffer(Shape::stack(n, t.out_shape)?)?;
            let mut aux = match t.aux_len {
                0 => None,
                m => Some(keep.buffer(Shape::from([n, m]))?),
            };
            self.call.forward(Forward {
                backend: be,
                args: &call_args,
                data: &zeros[..n],
                attr: 0,
                seeds: &order.seeds_at(seeds, step),
                train,
                out: next.view_mut()?,
                aux: match &mut aux {
                    Some(a) => Some(a.view_mut()?),
                    None => None,
                },
                block: None,
                keep: keep.reborrow(),
            })?;
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
        for (step, _) in states.iter().enumerate() {
            for (r, row) in order.rows_at(step, steps).into_iter().enumerate() {
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
        let per = self.per_step();
        let at = |step: usize| 1 + step * per;
        let state_at = |step: usize| -> sheaf_tensor::Result<Tensor> {
            match step {
                0 => sorted_init(be, &args[1], &order, t.out_shape),
                _ => Ok(kept[at(step - 1) + t.keeps].clone()),
            }
        };
        let dout_flat = positions(dout, steps)?;
        let zeros = vec![0u32; b];
        // The gradient reaching the state after `step` from later steps.
        let mut carry: Option<Tensor> = None;
        for step in (0..steps).rev() {
            let n = order.running[step];
            if n == 0 {
                continue;
            }
            let k = at(step);
            let next = &kept[k + t.keeps];
            let aux = (t.aux_len > 0).then(|| &kept[k + t.keeps + 1]);
            let mut dnext = pool::take(Shape::stack(n, t.out_shape)?, false, be.device())?;
            let sorted: Vec<u32> = (0..n as u32).collect();
            be.copy_rows_at(
                &dout_flat,
                &order.rows_at(step, steps),
                flat_mut(dnext.view_mut()?)?,
                &sorted,
                false,
            )?;
            if let Some(c) = carry.take() {
                let m = c.shape().rows();
                let (head, _) = dnext.view_mut()?.into_split_rows(m)?;
                be.axpy(1.0, &c, head)?;
                pool::give(c);
            }
            let state = state_at(step)?;
            let mut call_args = vec![rows(xs, step * b, n)?, rows(&state, 0, n)?];
            call_args.extend(args[2..].iter().cloned());
            let wants_x = cx.dargs.first().is_some_and(|d| d.is_some());
            let wants_state = step > 0 || cx.dargs.get(1).is_some_and(|d| d.is_some());
            let take = |wanted: bool, shape: Shape| -> sheaf_tensor::Result<Option<Tensor>> {
                match wanted {
                    true => Ok(Some(pool::take(
                        Shape::stack(n, shape)?,
                        true,
                        be.device(),
                    )?)),
                    false => Ok(None),
                }
            };
            let mut dx = take(wants_x, t.arg_shapes[0])?;
            let mut dstate = take(wants_state, t.out_shape)?;
            let touched = {
                let mut dargs: Vec<Option<TensorMut<'_>>> = Vec::with_capacity(call_args.len());
                dargs.push(match &mut dx {
                    Some(d) => Some(d.view_mut()?),
                    None => None,
                });
                dargs.push(match &mut dstate {
                    Some(d) => Some(d.view_mut()?),
                    None => None,
                });
                for d in cx.dargs[2..].iter_mut() {
                    dargs.push(d.as_mut().map(|d| d.reborrow()));
                }
                let step_seeds = order.seeds_at(seeds, step);
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
                self.call.backward(&mut inner)?;
                inner.touched_rows().to_vec()
            };
            for (a, rows) in touched {
                cx.touch_rows(a, &rows);
            }
            if let (Some(dx), Some(Some(d))) = (dx, cx.dargs.first_mut()) {
                let dst = positions_mut(d.reborrow(), steps)?;
                be.copy_rows_at(&flat(&dx)?, &sorted, dst, &order.rows_at(step, steps), true)?;
                pool::give(dx);
            }
            pool::give(dnext);
            if step == 0 {
                pool::give(state);
            }
            carry = dstate;
        }
        // What reached the initial states, back in batch order.
        if let (Some(c), Some(Some(d))) = (carry, cx.dargs.get_mut(1)) {
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
        let op: Arc<dyn Op> = Arc::new(ScanOp {
            call: CallOp(Arc::clone(&self.template)),
            steps,
        });
        ops.push((steps, Arc::clone(&op)));
        op
    }
}
