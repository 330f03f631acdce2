//! Products of concatenations, without the concatenation: inside F, an
//! affine layer on `[x_a; x_b]` is `W[:, a] x_a + W[:, b] x_b`, so a
//! concatenation that only feeds product terms (over parameter weights) is
//! never made. Each term reads a column block of the weight instead (cut
//! out once per batch: `[out, in_k]`, small), and the block's gradient is
//! added into the weight's columns. A batch saves the copy of every
//! concatenated row forward and of its gradient backward, and pays a copy
//! of each block (`rows x width`, forward and backward) where the
//! concatenation cost `batch x width`: a gain where batches have more
//! rows than the weights (W5's pairs: thousands of calls, weights of 50
//! rows), a loss where they have fewer (W1's Tree-LSTM node: batches of
//! a tree level, a weight of 5 x 150 rows). So it is asked for per
//! function ([`super::VertexFn::with_split_products`]), and the same
//! for every batch: the sums' rounding must not depend on the batching.

use sheaf_tensor::Shape;

use crate::exec::GraphExec;
use crate::graph::{Graph, NodeKind};
use crate::id::NodeId;
use crate::ops::is_concat;

/// Columns `start..end` of parameter `param` of the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Block {
    pub(super) param: usize,
    pub(super) start: usize,
    pub(super) end: usize,
}

/// Which nodes of the trace (those `live`, up to `out`) are concatenations
/// read only as the input of a product term whose weight is a parameter
/// matrix: the ones F computes without making them.
pub(super) fn split_concats(g: &Graph, live: &[bool], out: NodeId) -> Vec<bool> {
    let is_op = |i: usize| g.node(NodeId(i as u32)).kind().is_op();
    let mut split: Vec<bool> = (0..live.len())
        .map(|i| {
            live[i] && i != out.index() && is_op(i) && is_concat(&g.op_shared(NodeId(i as u32)))
        })
        .collect();
    for j in (0..live.len()).filter(|&j| live[j] && is_op(j)) {
        let id = NodeId(j as u32);
        let ids = g.args(id);
        let from = g.op_shared(id).product_terms_from();
        for (k, a) in ids.iter().enumerate() {
            if !split[a.index()] {
                continue;
            }
            let term_input = match from {
                Some(f) => k > f && (k - f) % 2 == 1 && is_param_matrix(g, ids[k - 1]),
                None => false,
            };
            if !term_input {
                split[a.index()] = false;
            }
        }
    }
    split
}

fn is_param_matrix(g: &Graph, w: NodeId) -> bool {
    let node = g.node(w);
    matches!(node.kind(), NodeKind::Param(_)) && node.shape().rank() == 2
}

/// The parts of a split concatenation `c` with their column ranges.
pub(super) fn parts(g: &Graph, c: NodeId) -> impl Iterator<Item = (NodeId, usize, usize)> + '_ {
    g.args(c).iter().scan(0, move |start, &part| {
        let len = g.node(part).shape().dims().first().copied().unwrap_or(0);
        let at = *start;
        *start += len;
        Some((part, at, at + len))
    })
}

/// The index of `block` in `blocks`, added if new.
pub(super) fn block_index(blocks: &mut Vec<Block>, block: Block) -> usize {
    match blocks.iter().position(|b| *b == block) {
        Some(i) => i,
        None => {
            blocks.push(block);
            blocks.len() - 1
        }
    }
}

/// The shape of a block of a weight with `rows` rows.
pub(super) fn block_shape(rows: usize, b: Block) -> Shape {
    Shape::from([rows, b.end - b.start])
}
