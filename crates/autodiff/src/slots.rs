//! [`Slots`]: one kind of per-node tensor (values, auxiliary buffers or
//! gradients), held either per node or as rows of batch tensors.
//!
//! A batched executor computes a whole batch into one `[b, ...]` tensor.
//! Storing a row view per node cost ~5% of a Tree-LSTM training step
//! (a `Tensor` built, reshaped and reference-counted per node, per kind),
//! and most of those views are never read: later batches read their inputs
//! through the executor's own bookkeeping. So a batch is stored once, each
//! node records (batch, row), and the view is made on first read.

use std::sync::OnceLock;

use sheaf_tensor::{Shape, Tensor};

use crate::id::NodeId;

/// No batch row: the node's tensor, if any, is in `own`.
const NO_ROW: (u32, u32) = (u32::MAX, 0);

/// Per-node tensors of one kind.
#[derive(Default)]
pub(crate) struct Slots {
    /// Tensors stored per node (leaves, the sequential executor).
    pub(crate) own: Vec<Option<Tensor>>,
    /// (index into `batches`, row) per node, or [`NO_ROW`].
    rows: Vec<(u32, u32)>,
    /// Row views, made when first read.
    views: Vec<OnceLock<Tensor>>,
    /// Batch tensors `[b, ...]` and the shape of one row.
    batches: Vec<(Tensor, Shape)>,
}

impl Slots {
    /// Forgets every tensor.
    pub(crate) fn clear(&mut self) {
        self.own.clear();
        self.rows.clear();
        self.views.clear();
        self.batches.clear();
    }

    /// Makes room for `n` nodes (new ones empty).
    pub(crate) fn resize(&mut self, n: usize) {
        self.own.resize(n, None);
        self.rows.resize(n, NO_ROW);
        self.views.resize_with(n, OnceLock::new);
    }

    /// Node `i`'s tensor, if stored.
    pub(crate) fn get(&self, i: usize) -> Option<&Tensor> {
        if let Some(t) = self.own.get(i)?.as_ref() {
            return Some(t);
        }
        let (batch, row) = *self.rows.get(i)?;
        let cell = self.views.get(i)?;
        if let Some(v) = cell.get() {
            return Some(v);
        }
        let (rows, shape) = self.batches.get(batch as usize)?;
        let row = row as usize;
        // The executor stored the batch with one row per node of `shape`,
        // so neither step fails; if one did, the value reads as absent.
        let view = rows
            .rows(row..row + 1)
            .and_then(|t| t.reshape(*shape))
            .ok()?;
        Some(cell.get_or_init(|| view))
    }

    /// Stores node `i`'s own tensor.
    pub(crate) fn set(&mut self, i: usize, t: Tensor) {
        if let Some(slot) = self.own.get_mut(i) {
            *slot = Some(t);
            self.rows[i] = NO_ROW;
            self.views[i] = OnceLock::new();
        }
    }

    /// Takes node `i`'s tensor out (a view of its row if it has no own).
    pub(crate) fn take(&mut self, i: usize) -> Option<Tensor> {
        let t = match self.own.get_mut(i)?.take() {
            Some(t) => Some(t),
            None => self.get(i).cloned(),
        };
        if let Some(r) = self.rows.get_mut(i) {
            *r = NO_ROW;
            self.views[i] = OnceLock::new();
        }
        t
    }

    /// Stores `batch` (`[b, ...]`) with row `r` the tensor of `nodes[r]`,
    /// each of shape `row_shape`.
    pub(crate) fn set_rows(&mut self, nodes: &[NodeId], batch: Tensor, row_shape: Shape) {
        let index = self.batches.len() as u32;
        self.batches.push((batch, row_shape));
        for (r, n) in nodes.iter().enumerate() {
            let i = n.index();
            if i < self.rows.len() {
                self.own[i] = None;
                self.rows[i] = (index, r as u32);
                if self.views[i].get().is_some() {
                    self.views[i] = OnceLock::new();
                }
            }
        }
    }
}
