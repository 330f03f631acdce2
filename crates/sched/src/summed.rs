//! Sums added where their terms lie. A batch of an op whose value is the
//! sum of its arguments ([`Op::sums_args`]: `Graph::sum`), all rows of one
//! earlier batch's output (or of one leaf buffer), adds each argument's
//! row into its sum's row in one indexed add, instead of stacking every
//! argument as a block (a copy of each term) and summing the block;
//! backward adds the output's gradient rows into the producer's gradient
//! rows the same way, instead of broadcasting it into a block and
//! scatter-adding that. A model that sums messages per vertex (W5: each
//! atom's pair terms, one batch of pair calls) spent a tenth of a step
//! stacking, summing and scattering the stacks.

use std::sync::Arc;
use std::time::Instant;

use sheaf_autodiff::{Graph, NodeId, Op};
use sheaf_tensor::Tensor;

use crate::exec::{Executor, Source};
use crate::leaves::LEAF;
use crate::rows::{as_matrix, RowsBack};

/// A batch of sums whose terms all lie in one buffer: the buffer, and per
/// term (node by node, each node's arguments in order) its row there and
/// its sum's row in the batch.
pub(crate) struct SumRows {
    buffer: u32,
    from: Vec<u32>,
    to: Vec<u32>,
}

impl Executor {
    /// Where the terms of the batch `nodes` of `op` lie, if the op sums its
    /// arguments and they all lie in one buffer (a batch output, or an
    /// input's leaf buffer): the batch is then summed in place. Terms in
    /// several buffers (or a parameter, which has no home) are stacked as
    /// before: added in place they would need an add per argument
    /// position and buffer to keep each sum's order (a GPU launch each).
    pub(crate) fn sum_rows(&self, g: &Graph, op: &dyn Op, nodes: &[NodeId]) -> Option<SumRows> {
        if !op.sums_args() {
            return None;
        }
        let buffer = self.homes[g.args(nodes[0]).first()?.index()]?.buffer;
        let capacity = nodes.len() * g.args(nodes[0]).len();
        let (mut from, mut to) = (Vec::with_capacity(capacity), Vec::with_capacity(capacity));
        for (r, &x) in nodes.iter().enumerate() {
            for &a in g.args(x) {
                let h = self.homes[a.index()].filter(|h| h.buffer == buffer)?;
                from.push(h.row);
                to.push(r as u32);
            }
        }
        Some(SumRows { buffer, from, to })
    }

    /// Writes into `out` (`[b, ...]`) the sum of each node's terms found
    /// by [`Executor::sum_rows`]: one indexed add over every node's
    /// arguments in turn, so each sum adds its terms in order, as the op
    /// would (`copy_rows_at` adds in position order on the CPU and in a
    /// GPU's deterministic mode), reading the terms in the order the
    /// nodes were made (usually the order they lie in). Returns where
    /// backward sends the gradient.
    pub(crate) fn sum_in_place(
        &mut self,
        rows: SumRows,
        out: &mut Tensor,
    ) -> sheaf_tensor::Result<Source> {
        let SumRows { buffer, from, to } = rows;
        let start = Instant::now();
        let n = out.num_rows();
        let mut dst = out.view_mut()?;
        self.backend.fill(0.0, dst.reborrow())?;
        let len = dst.numel() / n.max(1);
        let src = as_matrix(self.buffer_of(buffer))?;
        self.backend
            .copy_rows_at(&src, &from, dst.reshape([n, len])?, &to, true)?;
        self.moved += start.elapsed();
        self.stats.summed_in_place += from.len();
        // An input's leaf buffer takes no gradient.
        let mut back = RowsBack::default();
        if buffer & LEAF == 0 {
            back.buffers.push(buffer);
            back.to = from.into_iter().map(|row| (0, row)).collect();
            back.rows = to;
        }
        Ok(Source::Summed(Arc::new(back)))
    }
}
