//! The op of a call node: runs a traced template over a whole batch of
//! calls, forward in order and backward in reverse, with scratch buffers
//! from a per-thread pool.

use std::sync::Arc;

use sheaf_tensor::{Backend, Shape, Tensor, TensorMut};

use super::{split, Region, Src, Template};
use crate::op::{ArgRole, Attr, Backward, Cost, Forward, Op, ShapeError};
use crate::pool;

/// The op of a call node: runs the template over a batch of calls.
pub(super) struct CallOp(pub(super) Arc<Template>);

/// A batch's rows of each feed ([`CallOp::feed_rows`]).
#[derive(Default)]
struct FeedRows {
    rows: Vec<Tensor>,
    /// Copies from the pool (given back after use), not views of the
    /// tables.
    gathered: bool,
}

/// Gives gathered feed rows back to the pool (views are just dropped: a
/// view of a table must not become a pool buffer).
fn give_feed_rows(feeds: FeedRows) {
    if feeds.gathered {
        feeds.rows.into_iter().for_each(pool::give);
    }
}

/// A per-step seed from a call's seed: each op of F draws its own stream.
pub(super) fn step_seed(seed: u64, step: usize) -> u64 {
    // SplitMix64's finaliser over the call's seed and the step.
    let mut z = seed ^ (step as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A `[b, ...shape]` buffer whose contents the caller overwrites.
fn alloc(backend: &dyn Backend, b: usize, shape: Shape) -> sheaf_tensor::Result<Tensor> {
    pool::take(Shape::stack(b, shape)?, false, backend.device())
}

/// A zero-filled `[b, ...shape]` buffer (a gradient to add to).
fn alloc_zeroed(backend: &dyn Backend, b: usize, shape: Shape) -> sheaf_tensor::Result<Tensor> {
    pool::take(Shape::stack(b, shape)?, true, backend.device())
}

impl CallOp {
    /// Each feed's rows for the batch (`[b, ...row]`, row `data[k]` for
    /// call `k`), once for the forward or the backward of a batch, however
    /// many steps read them: a view of the table where the calls read
    /// consecutive rows (a batch of calls made in the order of their rows,
    /// as W5's pairs are), else gathered (gather_rows checks every row
    /// against the table's). Give them back with [`give_feed_rows`].
    fn feed_rows(
        &self,
        backend: &dyn Backend,
        call_args: &[Tensor],
        data: &[u32],
        b: usize,
    ) -> sheaf_tensor::Result<FeedRows> {
        let t = &self.0;
        if t.feeds.is_empty() {
            return Ok(FeedRows::default());
        }
        let tables = &call_args[t.arg_shapes.len() + t.params.len()..];
        let first = data.first().map_or(0, |&d| d as usize);
        let consecutive = data.len() == b
            && data
                .iter()
                .enumerate()
                .all(|(k, &d)| d as usize == first + k);
        let mut rows = Vec::with_capacity(t.feeds.len());
        if consecutive {
            for (feed, table) in t.feeds.iter().zip(tables) {
                let shape = Shape::stack(b, feed.row())?;
                rows.push(table.rows(first..first + b)?.reshape(shape)?);
            }
            return Ok(FeedRows {
                rows,
                gathered: false,
            });
        }
        let ids = Tensor::from_slice(data, [data.len()])?.to_device(backend.device())?;
        for (feed, table) in t.feeds.iter().zip(tables) {
            let mut gathered = alloc(backend, b, feed.row())?;
            backend.gather_rows(table, &ids, gathered.view_mut()?)?;
            rows.push(gathered);
        }
        Ok(FeedRows {
            rows,
            gathered: true,
        })
    }

    /// The `[b, ...]` (or shared) value of an inner argument; `feeds` the
    /// feeds' rows ([`CallOp::feed_rows`]).
    #[allow(clippy::too_many_arguments)]
    fn arg(
        &self,
        backend: &dyn Backend,
        call_args: &[Tensor],
        feeds: &[Tensor],
        values: &[Option<Tensor>],
        src: Src,
        role: ArgRole,
        b: usize,
    ) -> sheaf_tensor::Result<Tensor> {
        let t = &self.0;
        let shared = match src {
            Src::Arg(i) => return Ok(call_args[i].clone()),
            Src::Feed(i) => {
                return feeds
                    .get(i)
                    .cloned()
                    .ok_or(sheaf_tensor::TensorError::MissingArgument {
                        op: "vertex function",
                        arg: "a feed's rows",
                        when: "an op of F reads them",
                    })
            }
            Src::Step(i) => {
                return values[i]
                    .clone()
                    .ok_or(sheaf_tensor::TensorError::MissingArgument {
                        op: "vertex function",
                        arg: "an inner op's value",
                        when: "a later op of F reads it",
                    })
            }
            Src::Param(i) => call_args[t.arg_shapes.len() + i].clone(),
            Src::Const(i) => t.consts[i].to_device(backend.device())?,
            Src::Block(i) => {
                // Cut out of the weight once per batch ([out, in_k]).
                let b = t.blocks[i];
                let w = &call_args[t.arg_shapes.len() + b.param];
                let rows = w.shape().dims().first().copied().unwrap_or(0);
                let mut cols = pool::take(split::block_shape(rows, b), false, backend.device())?;
                backend.copy_cols(w, b.start, cols.view_mut()?, 0, b.end - b.start, false)?;
                cols
            }
        };
        match role {
            ArgRole::Share => Ok(shared),
            // One value for every call, where the op reads one per call.
            ArgRole::Stack => {
                let mut rows = alloc(backend, b, shared.shape())?;
                let flat = shared.reshape([shared.numel()])?;
                let mut view = rows.view_mut()?;
                let n = view.numel();
                view = view.reshape([b, n / b.max(1)])?;
                backend.broadcast_row(&flat, view)?;
                Ok(rows)
            }
        }
    }
}

/// The regions of the auxiliary buffer `[b, aux_len]` as separate mutable
/// views, each `[b * size]`.
fn split_regions<'a>(
    aux: Option<TensorMut<'a>>,
    regions: &[Region],
    b: usize,
) -> sheaf_tensor::Result<Vec<Option<TensorMut<'a>>>> {
    let mut out = Vec::with_capacity(regions.len());
    let Some(aux) = aux else {
        return Ok(out);
    };
    let total = aux.numel();
    let mut rest = aux.reshape([total])?;
    for r in regions {
        let (head, tail) = rest.into_split_rows(b * r.size)?;
        out.push(Some(head));
        rest = tail;
    }
    Ok(out)
}

/// Region `r` of the saved auxiliary buffer, as `[b, ...shape]`.
fn region_view(aux: &Tensor, r: Region, b: usize, shape: Shape) -> sheaf_tensor::Result<Tensor> {
    let flat = aux.reshape([aux.numel()])?;
    flat.rows(b * r.offset..b * (r.offset + r.size))?
        .reshape(Shape::stack(b, shape)?)
}

impl Op for CallOp {
    fn name(&self) -> &'static str {
        self.0.name
    }

    fn arg_role(&self, i: usize, _n: usize) -> ArgRole {
        match i < self.0.arg_shapes.len() {
            true => ArgRole::Stack,
            false => ArgRole::Share,
        }
    }

    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> std::result::Result<Shape, ShapeError> {
        let t = &self.0;
        let want = t.arg_shapes.len() + t.params.len() + t.feeds.len();
        if args.len() != want {
            return Err(ShapeError::expected(format!(
                "{} arguments, {} parameters and {} feeds",
                t.arg_shapes.len(),
                t.params.len(),
                t.feeds.len()
            )));
        }
        for (i, (given, traced)) in args.iter().zip(&t.arg_shapes).enumerate() {
            if given != traced {
                return Err(ShapeError::expected(format!(
                    "argument {i} of shape {traced} (as traced), not {given}"
                )));
            }
        }
        for (k, (p, given)) in t.params.iter().zip(&args[t.arg_shapes.len()..]).enumerate() {
            if p.shape() != *given {
                return Err(ShapeError::expected(format!(
                    "parameter {k} of shape {}, not {given}",
                    p.shape()
                )));
            }
        }
        let feeds = &args[t.arg_shapes.len() + t.params.len()..];
        for (feed, given) in t.feeds.iter().zip(feeds) {
            if given.dims().get(1..) != Some(feed.row().dims()) {
                return Err(ShapeError::expected(format!(
                    "rows of feed `{}` of shape {}, not {given}",
                    feed.name(),
                    feed.row()
                )));
            }
        }
        Ok(t.out_shape)
    }

    fn aux_shape(&self, _out: &Shape, _args: &[Shape], _attr: Attr) -> Option<Shape> {
        (self.0.aux_len > 0).then(|| Shape::from([self.0.aux_len]))
    }

    fn batchable(&self) -> bool {
        self.0.batchable
    }

    fn cost(&self) -> Cost {
        self.0.cost
    }

    fn keeps(&self) -> usize {
        self.0.keeps
    }

    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        self.run_forward(cx, &[])
    }

    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        self.run_backward(cx, &[], &mut |_, _| Ok(()))
    }
}

/// Where a step's gradient goes instead of its op's backward (a step a
/// scan ran once for all positions): `(step, gradient)`.
pub(super) type Sink<'s> = dyn FnMut(usize, &Tensor) -> sheaf_tensor::Result<()> + 's;

impl CallOp {
    /// The forward, with the values of the steps in `pre` given (`pre[j]`
    /// `Some`: step `j` is not run, its value is that, kept as if
    /// computed).
    pub(super) fn run_forward(
        &self,
        cx: Forward<'_>,
        pre: &[Option<Tensor>],
    ) -> sheaf_tensor::Result<()> {
        let t = &self.0;
        let b = cx.batch();
        let Forward {
            backend: be,
            args: call_args,
            data: call_data,
            seeds: call_seeds,
            train,
            out,
            aux,
            mut keep,
            ..
        } = cx;
        let start = keep.len();
        let mut regions = split_regions(aux, &t.regions, b)?;
        let mut values: Vec<Option<Tensor>> = vec![None; t.steps.len()];
        let mut out = Some(out);
        let last = t.steps.len() - 1;
        let mut seeds = vec![0u64; b];
        let mut data = vec![0u32; b];
        let feeds = self.feed_rows(be, call_args, call_data, b)?;
        // One argument list for every step, emptied after each.
        let mut args: Vec<Tensor> = Vec::new();
        for (j, s) in t.steps.iter().enumerate() {
            if let Some(Some(v)) = pre.get(j) {
                if j != last {
                    keep.push(v.clone());
                }
                values[j] = Some(v.clone());
                continue;
            }
            for (&src, &role) in s.args.iter().zip(&s.roles) {
                args.push(self.arg(be, call_args, &feeds.rows, &values, src, role, b)?);
            }
            for (k, &seed) in call_seeds.iter().enumerate() {
                seeds[k] = step_seed(seed, j);
            }
            t.step_data(s.data, call_data, &mut data);
            let aux = match s.aux {
                Some((r, shape)) => match regions[r].take() {
                    Some(a) => Some(a.reshape(Shape::stack(b, shape)?)?),
                    None => None,
                },
                None => None,
            };
            // Every value but the output's is computed into a buffer of
            // the executor's and kept as it is for backward.
            let mut own = match j == last {
                true => None,
                false => Some(keep.buffer(Shape::stack(b, s.shape)?)?),
            };
            let dst = match (&mut own, out.take()) {
                (Some(own), rest) => {
                    out = rest;
                    own.view_mut()?
                }
                (None, Some(o)) => o,
                (None, None) => {
                    return Err(sheaf_tensor::TensorError::MissingArgument {
                        op: "vertex function",
                        arg: "out",
                        when: "its last op runs",
                    })
                }
            };
            let before = keep.len();
            s.op.forward(Forward {
                backend: be,
                args: &args,
                data: &data,
                attr: s.attr,
                seeds: &seeds,
                train,
                out: dst,
                aux,
                block: None,
                keep: keep.reborrow(),
            })?;
            if keep.len() - before != s.op.keeps() {
                return Err(sheaf_tensor::TensorError::InvalidArgument {
                    op: "vertex function",
                    arg: "kept tensors",
                    reason: "an inner op kept another number of tensors than its keeps() says",
                });
            }
            if let Some(v) = own {
                keep.push(v.clone());
                values[j] = Some(v);
            }
            args.drain(..).for_each(pool::give);
        }
        give_feed_rows(feeds);
        debug_assert_eq!(keep.len() - start, t.keeps);
        Ok(())
    }

    /// The backward, where the steps marked in `skip` are not run: the
    /// gradient reaching each goes to `sink` instead.
    pub(super) fn run_backward(
        &self,
        cx: &mut Backward<'_>,
        skip: &[bool],
        sink: &mut Sink<'_>,
    ) -> sheaf_tensor::Result<()> {
        let t = &self.0;
        let b = cx.batch();
        let (be, call_args, aux, dout, out) = (cx.backend, cx.args, cx.aux, cx.dout, cx.out);
        let call_data = cx.data;
        let kept = cx.kept();
        let n_args = t.arg_shapes.len();
        let last = t.steps.len() - 1;
        if kept.len() != t.keeps {
            return Err(sheaf_tensor::TensorError::InvalidArgument {
                op: "vertex function",
                arg: "kept tensors",
                reason: "backward was not given the tensors its forward kept",
            });
        }
        // Every step's value: kept ones, the last one the output.
        let mut values: Vec<Option<Tensor>> = t
            .steps
            .iter()
            .map(|s| s.value.map(|k| kept[k].clone()))
            .collect();
        values[last] = Some(out.clone());
        // Whether a gradient through each step reaches anything that wants
        // one (an argument or parameter with a gradient, through steps):
        // the others (a concatenation of inputs, a product's input
        // gradient towards them) are not run backward at all.
        let outer: Vec<bool> = cx.dargs.iter().map(Option::is_some).collect();
        let wanted = |src: Src, needs: &[bool]| match src {
            Src::Const(_) | Src::Feed(_) => false,
            Src::Arg(i) => outer.get(i).copied().unwrap_or(false),
            Src::Param(i) => outer.get(n_args + i).copied().unwrap_or(false),
            Src::Block(i) => outer
                .get(n_args + t.blocks[i].param)
                .copied()
                .unwrap_or(false),
            Src::Step(m) => needs[m],
        };
        let mut needs = vec![false; t.steps.len()];
        for (j, s) in t.steps.iter().enumerate() {
            needs[j] = s.args.iter().any(|&src| wanted(src, &needs));
        }
        // Gradients of the steps' values, made when one first arrives.
        let mut grads: Vec<Option<Tensor>> = vec![None; t.steps.len()];
        let mut seeds = vec![0u64; b];
        let mut data = vec![0u32; b];
        // Per-step lists, emptied after each step.
        let mut args: Vec<Tensor> = Vec::new();
        let mut held: Vec<Option<Tensor>> = Vec::new();
        let mut direct: Vec<bool> = Vec::new();
        let mut seen: Vec<Src> = Vec::new();
        let feeds = self.feed_rows(be, call_args, call_data, b)?;
        for j in (0..=last).rev() {
            let s = &t.steps[j];
            if !needs[j] {
                continue;
            }
            let dstep = match j == last {
                true => dout.clone(),
                // No gradient reached this step: nothing flows through it.
                false => match grads[j].take() {
                    Some(g) => g,
                    None => continue,
                },
            };
            if skip.get(j).copied().unwrap_or(false) {
                sink(j, &dstep)?;
                pool::give(dstep);
                continue;
            }
            for (&src, &role) in s.args.iter().zip(&s.roles) {
                args.push(self.arg(be, call_args, &feeds.rows, &values, src, role, b)?);
            }
            let inner_aux = match (s.aux, aux) {
                (Some((r, shape)), Some(a)) => Some(region_view(a, t.regions[r], b, shape)?),
                _ => None,
            };
            for (k, &seed) in cx.seeds.iter().enumerate() {
                seeds[k] = step_seed(seed, j);
            }
            t.step_data(s.data, call_data, &mut data);
            let value = values[j].clone().unwrap_or_else(|| out.clone());
            // Where each argument's gradient goes. A target used twice by
            // this op (or a parameter read per call) gets a buffer of its
            // own, added to the target afterwards.
            held.resize(s.args.len(), None);
            direct.clear();
            direct.resize(s.args.len(), false);
            seen.clear();
            // Fresh gradient buffers the op writes whole (its
            // `backward_writes`) are handed out unzeroed, their bits set.
            let mut write = 0u64;
            let n = s.args.len();
            let mut fresh = |k: usize, shape: Shape| {
                let writes = k < 64 && s.op.backward_writes(k, n, s.attr);
                write |= u64::from(writes) << k.min(63);
                pool::take(shape, !writes, be.device())
            };
            for (k, (&src, &role)) in s.args.iter().zip(&s.roles).enumerate() {
                if !wanted(src, &needs) {
                    continue;
                }
                let repeated = seen.contains(&src);
                seen.push(src);
                let broadcast =
                    matches!(src, Src::Param(_) | Src::Const(_)) && role == ArgRole::Stack;
                match src {
                    Src::Step(m) if !repeated => {
                        held[k] = Some(match grads[m].take() {
                            Some(g) => g,
                            None => fresh(k, Shape::stack(b, t.steps[m].shape)?)?,
                        });
                        direct[k] = true;
                    }
                    Src::Arg(_) | Src::Param(_) if !repeated && !broadcast => direct[k] = true,
                    _ => held[k] = Some(fresh(k, args[k].shape())?),
                }
            }
            let mut touched: Vec<(usize, Vec<u32>)> = Vec::new();
            {
                let mut outer: Vec<Option<&mut TensorMut<'_>>> =
                    cx.dargs.iter_mut().map(|d| d.as_mut()).collect();
                let mut dargs: Vec<Option<TensorMut<'_>>> = Vec::with_capacity(s.args.len());
                for (h, (&src, &d)) in held.iter_mut().zip(s.args.iter().zip(&direct)) {
                    dargs.push(match (h, d, src) {
                        (Some(h), _, _) => Some(h.view_mut()?),
                        (None, true, Src::Arg(i)) => outer[i].take().map(|t| t.reborrow()),
                        (None, true, Src::Param(i)) => {
                            outer[n_args + i].take().map(|t| t.reborrow())
                        }
                        _ => None,
                    });
                }
                let mut inner = Backward::new(
                    be,
                    &args,
                    &data,
                    s.attr,
                    &seeds,
                    &value,
                    inner_aux.as_ref(),
                    &dstep,
                    dargs,
                )
                .with_kept(&kept[s.kept_at..s.kept_at + s.op.keeps()])
                .writing(write);
                s.op.backward(&mut inner)?;
                for (a, rows) in inner.touched_rows() {
                    if let Some(Src::Param(i)) = s.args.get(*a) {
                        touched.push((n_args + i, rows.clone()));
                    }
                }
            }
            for (a, rows) in touched {
                cx.touch_rows(a, &rows);
            }
            // Hand the held buffers on: a step's gradient back to its slot,
            // a repeated or broadcast one added to its target.
            for (k, h) in held.drain(..).enumerate() {
                let Some(h) = h else { continue };
                let src = s.args[k];
                match src {
                    Src::Step(m) if direct[k] => {
                        grads[m] = Some(h);
                        continue;
                    }
                    Src::Step(m) => {
                        let g = match &mut grads[m] {
                            Some(g) => g,
                            slot => slot.insert(alloc_zeroed(be, b, t.steps[m].shape)?),
                        };
                        be.axpy(1.0, &h, g.view_mut()?)?;
                    }
                    Src::Arg(i) => {
                        if let Some(Some(d)) = cx.dargs.get_mut(i) {
                            be.axpy(1.0, &h, d.reborrow())?;
                        }
                    }
                    Src::Param(i) => {
                        if let Some(Some(d)) = cx.dargs.get_mut(n_args + i) {
                            add_param_grad(be, &h, s.roles[k], b, d.reborrow())?;
                        }
                    }
                    Src::Block(i) => {
                        let block = t.blocks[i];
                        if let Some(Some(d)) = cx.dargs.get_mut(n_args + block.param) {
                            let n = block.end - block.start;
                            be.copy_cols(&h, 0, d.reborrow(), block.start, n, true)?;
                        }
                    }
                    Src::Const(_) | Src::Feed(_) => {}
                }
                pool::give(h);
            }
            args.drain(..).for_each(pool::give);
            pool::give(dstep);
        }
        grads.into_iter().flatten().for_each(pool::give);
        give_feed_rows(feeds);
        Ok(())
    }
}

/// Adds a parameter's gradient `g` to `dst`: as it is where the op read the
/// parameter once, summed over the batch where it read one copy per call.
fn add_param_grad(
    be: &dyn Backend,
    g: &Tensor,
    role: ArgRole,
    b: usize,
    dst: TensorMut<'_>,
) -> sheaf_tensor::Result<()> {
    match role {
        ArgRole::Share => be.axpy(1.0, g, dst),
        ArgRole::Stack => {
            let n = dst.numel();
            let rows = g.reshape([b, n])?;
            let zeros = Tensor::from_vec(vec![0u32; b], [b])?.to_device(be.device())?;
            be.scatter_add_rows(&rows, &zeros, dst.reshape([1, n])?)
        }
    }
}
