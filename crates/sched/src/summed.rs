//! Sums added where their terms lie. A batch of an op whose value is the
//! sum of its arguments ([`Op::sums_args`]: `Graph::sum`) adds each
//! argument's row of its producer's output into the batch's output, one
//! indexed add per producer buffer, instead of stacking every argument as
//! a block (a copy of each term) and summing the block; backward adds the
//! output's gradient rows into the producers' gradient rows the same way,
//! instead of broadcasting it into a block and scatter-adding that. A
//! model that sums messages per vertex (W5: each atom's pair terms) spent
//! a tenth of a step stacking, summing and scattering the stacks.

use std::sync::Arc;
use std::time::Instant;

use sheaf_autodiff::{Graph, NodeId, Op};
use sheaf_tensor::Tensor;

use crate::exec::{Executor, Source};
use crate::leaves::LEAF;
use crate::rows::RowsBack;

/// `[rows, row_len]`: a buffer seen as the matrix of its rows.
fn as_matrix(t: &Tensor) -> sheaf_tensor::Result<Tensor> {
    let rows = t.num_rows();
    t.reshape([rows, t.numel() / rows.max(1)])
}

impl Executor {
    /// Whether the batch `nodes` of `op` is summed in place: the op sums
    /// its arguments and every argument has a home (a batch output or an
    /// input's leaf buffer; a parameter has none).
    pub(crate) fn sums_in_place(&self, g: &Graph, op: &dyn Op, nodes: &[NodeId]) -> bool {
        op.sums_args()
            && nodes
                .iter()
                .flat_map(|&x| g.args(x))
                .all(|a| self.homes[a.index()].is_some())
    }

    /// Writes into `out` (`[b, ...]`) the sum of each node's arguments
    /// (checked by [`Executor::sums_in_place`]), added in argument order
    /// per producer buffer; returns where backward sends the gradient.
    pub(crate) fn sum_in_place(
        &mut self,
        g: &Graph,
        nodes: &[NodeId],
        out: &mut Tensor,
    ) -> sheaf_tensor::Result<Source> {
        // Per producer buffer: its id, and each of its terms' row there
        // and node's row here (in node order, each node's arguments in
        // order: the same sums as one after another).
        let mut sources: Vec<(u32, Vec<u32>, Vec<u32>)> = Vec::new();
        let mut back = RowsBack::with_capacity(0);
        // Per buffer: its index in `back.buffers` (`u32::MAX`: an input's
        // leaf buffer, which takes no gradient).
        let mut back_of: Vec<u32> = Vec::new();
        let mut of_buffer = std::mem::take(&mut self.row_scratch.of_buffer);
        of_buffer.clear();
        let mut terms = 0;
        for (r, &x) in nodes.iter().enumerate() {
            for &a in g.args(x) {
                let Some(h) = self.homes[a.index()] else {
                    self.row_scratch.of_buffer = of_buffer;
                    return Err(sheaf_tensor::TensorError::InvalidArgument {
                        op: "sum",
                        arg: "args",
                        reason: "has an argument without a home (checked by sums_in_place)",
                    });
                };
                let k = *of_buffer.entry(h.buffer).or_insert_with(|| {
                    sources.push((h.buffer, Vec::new(), Vec::new()));
                    back_of.push(match h.buffer & LEAF {
                        0 => {
                            back.buffers.push(h.buffer);
                            back.buffers.len() as u32 - 1
                        }
                        _ => u32::MAX,
                    });
                    sources.len() as u32 - 1
                });
                let (_, from, to) = &mut sources[k as usize];
                from.push(h.row);
                to.push(r as u32);
                let kb = back_of[k as usize];
                if kb != u32::MAX {
                    back.rows.push(r as u32);
                    back.to.push((kb, h.row));
                }
                terms += 1;
            }
        }
        self.row_scratch.of_buffer = of_buffer;
        let start = Instant::now();
        let rows = out.num_rows();
        let mut dst = out.view_mut()?;
        self.backend.fill(0.0, dst.reborrow())?;
        let len = dst.numel() / rows.max(1);
        let mut dst = dst.reshape([rows, len])?;
        for (buffer, from, to) in &sources {
            let src = as_matrix(self.buffer_of(*buffer))?;
            self.backend
                .copy_rows_at(&src, from, dst.reborrow(), to, true)?;
        }
        self.moved += start.elapsed();
        self.stats.summed_in_place += terms;
        Ok(Source::Summed(Arc::new(back)))
    }
}
