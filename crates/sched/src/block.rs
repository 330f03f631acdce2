//! Many-argument batches (a loss summed over every node of a tree: `sum`
//! of 30 or more terms) stacked as ONE block.
//!
//! Stacked column by column, such a batch costs one indexed copy per
//! argument and source batch, forward and backward: hundreds of small
//! kernels, which on a GPU cost far more than the arithmetic. Here every
//! column goes into one `[n·b, ...]` block (column `j` is rows `j·b..`)
//! with one indexed copy per source batch, and backward sends the
//! gradients of all columns back the same way, through one block.

use sheaf_autodiff::{ArgRole, Graph, NodeId, Op, ParamStore};
use sheaf_tensor::{Shape, Tensor};

use crate::error::Result;
use crate::exec::{Executor, Source};
use crate::plan::Batch;

/// At least this many columns that would each be assembled from several
/// source batches make a batch stack as one block.
const MIN_SCATTERED_COLUMNS: usize = 2;

impl Executor {
    /// Whether `op`'s batch `nodes` stacks as one block: three or more
    /// arguments, every one stacked, all of one shape, and either the op
    /// takes blocks ([`Op::grads_as_block`]) or at least
    /// [`MIN_SCATTERED_COLUMNS`] of them are spread over several source
    /// batches (a column that is one batch's rows costs one copy at most
    /// either way).
    pub(crate) fn stacks_as_block(&self, g: &Graph, op: &dyn Op, nodes: &[NodeId]) -> bool {
        let args = g.args(nodes[0]);
        let n = args.len();
        if n < 3 || (0..n).any(|j| op.arg_role(j, n) != ArgRole::Stack) {
            return false;
        }
        let shape = g.node(args[0]).shape();
        if args.iter().any(|&a| g.node(a).shape() != shape) {
            return false;
        }
        if op.grads_as_block() {
            // The op runs a block in one kernel each way (a sum: column
            // sums forward, one broadcast back), where its columns apart
            // cost a kernel each: a block even for one node, or columns
            // that sit in one batch.
            return true;
        }
        let scattered = (0..n)
            .filter(|&j| {
                let home = |x: &NodeId| self.homes[g.args(*x)[j].index()].map(|h| h.buffer);
                let first = home(&nodes[0]);
                first.is_none() || nodes.iter().any(|x| home(x) != first)
            })
            .take(MIN_SCATTERED_COLUMNS)
            .count();
        scattered >= MIN_SCATTERED_COLUMNS
    }

    /// Every argument column of the batch in one block; the columns are
    /// row views of it (`Source::Block`). Returns them, their sources and
    /// the block.
    pub(crate) fn stack_block(
        &mut self,
        g: &Graph,
        op: &'static str,
        nodes: &[NodeId],
    ) -> sheaf_tensor::Result<(Vec<Tensor>, Vec<Source>, Tensor)> {
        let (b, n) = (nodes.len(), g.args(nodes[0]).len());
        let shape = g.node(g.args(nodes[0])[0]).shape();
        let mut block = self.arena.overwritten(Shape::stack(n * b, shape)?)?;
        let items = (0..n).flat_map(|j| {
            nodes
                .iter()
                .enumerate()
                .map(move |(r, &x)| (g.args(x)[j], (j * b + r) as u32))
        });
        self.gather_rows(g, items, &mut block, None)?;
        self.note_gather(op, n * b * shape.numel()? * 4);
        let stacked = Shape::stack(b, shape)?;
        let mut args = Vec::with_capacity(n);
        for j in 0..n {
            args.push(block.rows(j * b..(j + 1) * b)?.reshape(stacked)?);
        }
        let sources = (0..n).map(|_| Source::Block).collect();
        Ok((args, sources, block))
    }

    /// Sends the gradient `block` (`[n·b, ...]`, column `j` in rows `j·b..`)
    /// of a batch stacked by [`Executor::stack_block`] back to where its
    /// rows came from: one indexed add per source batch; parameters'
    /// rows one by one; inputs' nowhere.
    pub(crate) fn send_back_block(
        &mut self,
        g: &Graph,
        store: &ParamStore,
        batch: &Batch,
        block: &Tensor,
        op: &'static str,
    ) -> Result<()> {
        let nodes = &batch.nodes;
        let (b, n) = (nodes.len(), g.args(nodes[0]).len());
        let items = (0..n).flat_map(|j| {
            nodes
                .iter()
                .enumerate()
                .map(move |(r, &x)| (g.args(x)[j], (j * b + r) as u32))
        });
        self.scatter_grads(g, store, block, items, op, nodes)
    }
}
