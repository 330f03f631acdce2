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
use crate::leaves::LEAF;

/// `[rows, row_len]`: every tensor seen as a matrix of its rows.
pub(crate) fn as_matrix(t: &Tensor) -> sheaf_tensor::Result<Tensor> {
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
    /// Per source in `srcs`: its index in a [`RowsBack`]'s buffers
    /// (`u32::MAX`: none).
    back_of: Vec<u32>,
}

/// Where the gradient of a stacked argument assembled row by row goes,
/// found while forward assembled it (the same homes), so that backward
/// sends it back without looking each row's node up again: that walk
/// (argument lists, node kinds, homes: a cache miss each at tens of
/// thousands of rows per step) was a third of W1's per-batch bookkeeping.
#[derive(Debug, Default)]
pub(crate) struct RowsBack {
    /// The batch buffers the rows came from, each once.
    pub(crate) buffers: Vec<u32>,
    /// Per row from a batch buffer: its row in the argument...
    pub(crate) rows: Vec<u32>,
    /// ...and where it goes: (index into `buffers`, row there).
    pub(crate) to: Vec<(u32, u32)>,
    /// Parameters read as stacked rows: (node, row in the argument).
    params: Vec<(NodeId, u32)>,
}

impl RowsBack {
    /// Room for `rows` rows from batch buffers (no growing while they are
    /// recorded).
    pub(crate) fn with_capacity(rows: usize) -> RowsBack {
        RowsBack {
            buffers: Vec::new(),
            rows: Vec::with_capacity(rows),
            to: Vec::with_capacity(rows),
            params: Vec::new(),
        }
    }
}

impl Executor {
    /// Writes the value of each `(node, row)` of `items` into that row of
    /// `dst` (rows of one shape, each row of `dst` once): rows of batch
    /// outputs and leaves' values alike, in one `gather_rows_from`. With
    /// `back`, also records where each row's gradient goes.
    pub(crate) fn gather_rows(
        &mut self,
        g: &Graph,
        items: impl Iterator<Item = (NodeId, u32)>,
        dst: &mut Tensor,
        back: Option<&mut RowsBack>,
    ) -> sheaf_tensor::Result<()> {
        let mut scratch = std::mem::take(&mut self.row_scratch);
        let mut moved = std::time::Duration::ZERO;
        let result = self.gather_rows_with(g, items, dst, &mut scratch, &mut moved, back);
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
        mut back: Option<&mut RowsBack>,
    ) -> sheaf_tensor::Result<()> {
        let RowScratch {
            srcs,
            of_buffer,
            from,
            to,
            back_of,
        } = scratch;
        srcs.clear();
        of_buffer.clear();
        from.clear();
        to.clear();
        back_of.clear();
        for (a, here) in items {
            let pair = match self.homes[a.index()] {
                Some(h) => {
                    let k = *of_buffer.entry(h.buffer).or_insert_with(|| {
                        srcs.push(self.buffer_of(h.buffer).clone());
                        // The buffer's index among `back.buffers`: inputs'
                        // leaf buffers take no gradient.
                        back_of.push(match (&mut back, h.buffer & LEAF) {
                            (Some(b), 0) => {
                                b.buffers.push(h.buffer);
                                b.buffers.len() as u32 - 1
                            }
                            _ => u32::MAX,
                        });
                        srcs.len() as u32 - 1
                    });
                    if let Some(b) = back.as_deref_mut() {
                        let kb = back_of[k as usize];
                        if kb != u32::MAX {
                            b.rows.push(here);
                            b.to.push((kb, h.row));
                        }
                    }
                    (k, h.row)
                }
                None => {
                    // A node without a home other than an input (a
                    // parameter) takes its gradient one row at a time, as
                    // `scatter_grads` sends it.
                    back_of.push(u32::MAX);
                    if let Some(b) = back.as_deref_mut() {
                        if !matches!(g.node(a).kind(), NodeKind::Input(_)) {
                            b.params.push((a, here));
                        }
                    }
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
        let mut back = RowsBack::default();
        let mut of_buffer = std::mem::take(&mut self.row_scratch.of_buffer);
        of_buffer.clear();
        for (a, here) in items {
            match (g.node(a).kind(), self.homes[a.index()]) {
                (NodeKind::Op, Some(h)) => {
                    let k = *of_buffer.entry(h.buffer).or_insert_with(|| {
                        back.buffers.push(h.buffer);
                        back.buffers.len() as u32 - 1
                    });
                    back.rows.push(here);
                    back.to.push((k, h.row));
                }
                (NodeKind::Input(_), _) => {}
                _ => back.params.push((a, here)),
            }
        }
        self.row_scratch.of_buffer = of_buffer;
        self.send_back_rows(g, store, t, &back, op, nodes)
    }

    /// Adds the rows of `t` where `back` says (recorded by forward's
    /// [`Executor::gather_rows`], or found by [`Executor::scatter_grads`]):
    /// parameters' rows one at a time, batch outputs' rows in one
    /// `scatter_add_rows_to`.
    pub(crate) fn send_back_rows(
        &mut self,
        g: &Graph,
        store: &ParamStore,
        t: &Tensor,
        back: &RowsBack,
        op: &'static str,
        nodes: &[NodeId],
    ) -> Result<()> {
        let err = batch_err(op, nodes);
        for &(a, here) in &back.params {
            let row = t
                .rows(here as usize..here as usize + 1)
                .and_then(|v| v.reshape(g.node(a).shape()))
                .map_err(&err)?;
            self.accumulate_row(g, store, a, &row, op)?;
        }
        if back.rows.is_empty() {
            return Ok(());
        }
        // Every destination's gradient taken out for the one call, and put
        // back whatever it returns.
        let mut taken = Vec::with_capacity(back.buffers.len());
        let mut result = Ok(());
        for &b in &back.buffers {
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
                    .scatter_add_rows_to(&src, &back.rows, &mut views, &back.to)
            })();
            self.moved += start.elapsed();
        }
        for (b, d) in back.buffers.iter().zip(taken) {
            self.grads[*b as usize] = Some(d);
        }
        result.map_err(err)
    }
}
