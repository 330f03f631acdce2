//! Moving rows between batches: a batch's stacked argument assembled from
//! the outputs of many earlier batches (and leaves' values), and its
//! gradient sent back to them. Each direction is ONE backend call however
//! many batches the rows come from (`gather_rows_from`,
//! `scatter_add_rows_to`): on a GPU, one launch instead of one per source
//! batch, which for tree models is most of a step's launches.

use rustc_hash::FxHashMap;
use sheaf_autodiff::exec::GraphExec;
use sheaf_autodiff::{Graph, NodeId, NodeKind, ParamStore};
use sheaf_tensor::{Shape, Tensor, TensorError, TensorMut};

use crate::error::Result;
use crate::exec::{batch_err, Executor};

/// `[rows, row_len]`: every tensor seen as a matrix of its rows.
fn as_matrix(t: &Tensor) -> sheaf_tensor::Result<Tensor> {
    let rows = t.num_rows();
    t.reshape([rows, t.numel() / rows.max(1)])
}

/// The working memory of [`Executor::gather_rows`] and
/// [`Executor::scatter_grads`], kept from call to call: they run for most
/// batches, and their maps and index vectors were a handful of allocations
/// each time.
#[derive(Default)]
pub(crate) struct RowScratch {
    srcs: Vec<Tensor>,
    of_buffer: FxHashMap<u32, u32>,
    from: Vec<(u32, u32)>,
    to: Vec<u32>,
}

impl Executor {
    /// Writes the value of each `(node, row)` of `items` into that row of
    /// `dst` (rows of one shape, each row of `dst` once): rows of batch
    /// outputs and leaves' values alike, in one `gather_rows_from`.
    pub(crate) fn gather_rows(
        &mut self,
        g: &Graph,
        items: impl Iterator<Item = (NodeId, u32)>,
        dst: &mut Tensor,
    ) -> sheaf_tensor::Result<()> {
        let mut scratch = std::mem::take(&mut self.row_scratch);
        let mut moved = std::time::Duration::ZERO;
        let result = self.gather_rows_with(g, items, dst, &mut scratch, &mut moved);
        scratch.srcs.clear();
        self.row_scratch = scratch;
        self.moved += moved;
        result
    }

    /// [`Executor::gather_rows`]; the copy's time goes to `moved`.
    fn gather_rows_with(
        &self,
        g: &Graph,
        items: impl Iterator<Item = (NodeId, u32)>,
        dst: &mut Tensor,
        scratch: &mut RowScratch,
        moved: &mut std::time::Duration,
    ) -> sheaf_tensor::Result<()> {
        let RowScratch {
            srcs,
            of_buffer,
            from,
            to,
        } = scratch;
        srcs.clear();
        of_buffer.clear();
        from.clear();
        to.clear();
        for (a, here) in items {
            let pair = match self.homes[a.index()] {
                Some(h) => {
                    let k = *of_buffer.entry(h.buffer).or_insert_with(|| {
                        srcs.push(self.buffer_of(h.buffer).clone());
                        srcs.len() as u32 - 1
                    });
                    (k, h.row)
                }
                None => {
                    let v = g.value_of(a).ok_or(TensorError::InvalidArgument {
                        op: "stack",
                        arg: "args",
                        reason: "has an argument without a value",
                    })?;
                    srcs.push(v.reshape(Shape::stack(1, v.shape())?)?);
                    (srcs.len() as u32 - 1, 0)
                }
            };
            from.push(pair);
            to.push(here);
        }
        for t in srcs.iter_mut() {
            *t = as_matrix(t)?;
        }
        let refs: Vec<&Tensor> = srcs.iter().collect();
        let rows = dst.num_rows();
        let len = dst.numel() / rows.max(1);
        let dst = dst.view_mut()?.reshape([rows, len])?;
        let start = std::time::Instant::now();
        let copied = self.backend.gather_rows_from(&refs, from, dst, to);
        *moved += start.elapsed();
        copied
    }

    /// Adds each row `here` of `t` to the gradient of the node `a` of
    /// `(a, here)` in `items`: into batch outputs' gradient rows with one
    /// `scatter_add_rows_to`, into parameters' accumulators row by row;
    /// inputs take none.
    pub(crate) fn scatter_grads(
        &mut self,
        g: &Graph,
        store: &ParamStore,
        t: &Tensor,
        items: impl Iterator<Item = (NodeId, u32)>,
        op: &'static str,
        nodes: &[NodeId],
    ) -> Result<()> {
        let mut buffers: Vec<u32> = Vec::new();
        let mut of_buffer = std::mem::take(&mut self.row_scratch.of_buffer);
        of_buffer.clear();
        let (mut rows, mut to) = (Vec::new(), Vec::new());
        let mut params = Vec::new();
        for (a, here) in items {
            match (g.node(a).kind(), self.homes[a.index()]) {
                (NodeKind::Op, Some(h)) => {
                    let k = *of_buffer.entry(h.buffer).or_insert_with(|| {
                        buffers.push(h.buffer);
                        buffers.len() as u32 - 1
                    });
                    rows.push(here);
                    to.push((k, h.row));
                }
                (NodeKind::Input(_), _) => {}
                _ => params.push((a, here)),
            }
        }
        self.row_scratch.of_buffer = of_buffer;
        let err = batch_err(op, nodes);
        for (a, here) in params {
            let row = t
                .rows(here as usize..here as usize + 1)
                .and_then(|v| v.reshape(g.node(a).shape()))
                .map_err(&err)?;
            self.accumulate_row(g, store, a, &row, op)?;
        }
        if rows.is_empty() {
            return Ok(());
        }
        // Every destination's gradient taken out for the one call, and put
        // back whatever it returns.
        let mut taken = Vec::with_capacity(buffers.len());
        let mut result = Ok(());
        for &b in &buffers {
            match self.grad_buffer(b) {
                Ok(t) => taken.push(t),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            let start = std::time::Instant::now();
            result = (|| {
                let src = as_matrix(t)?;
                let mut views = taken
                    .iter_mut()
                    .map(|d| {
                        let r = d.num_rows();
                        let len = d.numel() / r.max(1);
                        d.view_mut()?.reshape([r, len])
                    })
                    .collect::<sheaf_tensor::Result<Vec<TensorMut<'_>>>>()?;
                self.backend
                    .scatter_add_rows_to(&src, &rows, &mut views, &to)
            })();
            self.moved += start.elapsed();
        }
        for (b, d) in buffers.iter().zip(taken) {
            self.grads[*b as usize] = Some(d);
        }
        result.map_err(err)
    }
}
