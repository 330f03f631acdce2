//! [`Slots`]: one kind of per-node tensor (values, auxiliary buffers or
//! gradients), held either per node or as rows of batch tensors.
//!
//! A batched executor computes a whole batch into one `[b, ...]` tensor.
//! Storing a row view per node cost ~5% of a Tree-LSTM training step
//! (a `Tensor` built, reshaped and reference-counted per node, per kind),
//! and most of those views are never read: later batches read their inputs
//! through the executor's own bookkeeping. So a batch is stored once, each
//! node records (batch, row), and the view is made on first read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use sheaf_tensor::{Shape, Tensor};

use crate::id::NodeId;

/// No batch row: the node's tensor, if any, is in `own`.
const NO_ROW: (u32, u32) = (u32::MAX, 0);

/// Per-node tensors of one kind. A node's batch row, when set, takes
/// precedence over its own tensor.
#[derive(Default)]
pub(crate) struct Slots {
    /// Tensors stored per node (leaves, the sequential executor).
    pub(crate) own: Vec<Option<Tensor>>,
    /// (index into `batches`, row) per node, or [`NO_ROW`].
    rows: Vec<(u32, u32)>,
    /// Row views, made when first read.
    views: Vec<OnceLock<Tensor>>,
    /// Whether any view was made since the last clear: only then can a
    /// row set again leave a stale view behind.
    viewed: AtomicBool,
    /// Batch tensors `[b, ...]` and the shape of one row.
    batches: Vec<(Tensor, Shape)>,
}

impl Slots {
    /// Forgets every tensor.
    pub(crate) fn clear(&mut self) {
        self.own.clear();
        self.rows.clear();
        // Cells stay allocated for the next step unless a view was made.
        if *self.viewed.get_mut() {
            self.views.clear();
            *self.viewed.get_mut() = false;
        }
        self.batches.clear();
    }

    /// Makes room for `n` nodes (new ones empty).
    pub(crate) fn resize(&mut self, n: usize) {
        self.own.resize(n, None);
        self.rows.resize(n, NO_ROW);
        if self.views.len() < n {
            self.views.resize_with(n, OnceLock::new);
        }
    }

    /// Node `i`'s tensor, if stored.
    pub(crate) fn get(&self, i: usize) -> Option<&Tensor> {
        let (batch, row) = *self.rows.get(i)?;
        if (batch, row) == NO_ROW {
            return self.own.get(i)?.as_ref();
        }
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
        self.viewed.store(true, Ordering::Relaxed);
        Some(cell.get_or_init(|| view))
    }

    /// Stores node `i`'s own tensor.
    pub(crate) fn set(&mut self, i: usize, t: Tensor) {
        if i < self.own.len() {
            self.own[i] = Some(t);
            self.forget_row(i);
        }
    }

    /// Takes node `i`'s tensor out (a view of its row if it has one).
    pub(crate) fn take(&mut self, i: usize) -> Option<Tensor> {
        let from_row = match self.rows.get(i) {
            Some(&r) if r != NO_ROW => self.get(i).cloned(),
            _ => None,
        };
        // An own tensor shadowed by a row goes too.
        let own = self.own.get_mut(i)?.take();
        self.forget_row(i);
        from_row.or(own)
    }

    fn forget_row(&mut self, i: usize) {
        if let Some(r) = self.rows.get_mut(i) {
            *r = NO_ROW;
            if *self.viewed.get_mut() {
                self.views[i] = OnceLock::new();
            }
        }
    }

    /// Stores `batch` (`[b, ...]`) with row `r` the tensor of `nodes[r]`,
    /// each of shape `row_shape`. Touches one 8-byte entry per node: the
    /// nodes of a batch lie scattered over the graph.
    pub(crate) fn set_rows(&mut self, nodes: &[NodeId], batch: Tensor, row_shape: Shape) {
        let index = self.batches.len() as u32;
        self.batches.push((batch, row_shape));
        let viewed = *self.viewed.get_mut();
        for (r, n) in nodes.iter().enumerate() {
            let i = n.index();
            if let Some(slot) = self.rows.get_mut(i) {
                *slot = (index, r as u32);
                if viewed {
                    self.views[i] = OnceLock::new();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(values: &[f32], rows: usize) -> Tensor {
        Tensor::from_vec(values.to_vec(), [rows, values.len() / rows]).unwrap()
    }

    fn read(s: &Slots, i: usize) -> Option<Vec<f32>> {
        s.get(i).map(|t| t.to_vec::<f32>().unwrap())
    }

    #[test]
    fn rows_are_read_as_views_and_replaced_cleanly() {
        let mut s = Slots::default();
        s.resize(4);
        let n = |i: u32| NodeId::from_index(i as usize);
        s.set_rows(
            &[n(2), n(0)],
            batch(&[1.0, 2.0, 3.0, 4.0], 2),
            Shape::from([2]),
        );
        assert_eq!(read(&s, 2), Some(vec![1.0, 2.0]));
        assert_eq!(read(&s, 0), Some(vec![3.0, 4.0]));
        assert_eq!(read(&s, 1), None);
        // A row set again after its view was made: the new row is read.
        s.set_rows(&[n(0)], batch(&[5.0, 6.0], 1), Shape::from([2]));
        assert_eq!(read(&s, 0), Some(vec![5.0, 6.0]));
        // An own tensor replaces a row, and a row an own tensor.
        s.set(2, Tensor::from_vec(vec![7.0f32, 8.0], [2]).unwrap());
        assert_eq!(read(&s, 2), Some(vec![7.0, 8.0]));
        s.set_rows(&[n(2)], batch(&[9.0, 10.0], 1), Shape::from([2]));
        assert_eq!(read(&s, 2), Some(vec![9.0, 10.0]));
        // Taking leaves nothing behind.
        assert_eq!(
            s.take(2).map(|t| t.to_vec::<f32>().unwrap()),
            Some(vec![9.0, 10.0])
        );
        assert_eq!(read(&s, 2), None);
        s.clear();
        s.resize(4);
        assert!((0..4).all(|i| read(&s, i).is_none()));
        // After a clear with views made, a fresh step reads its own rows.
        s.set_rows(&[n(0)], batch(&[11.0, 12.0], 1), Shape::from([2]));
        assert_eq!(read(&s, 0), Some(vec![11.0, 12.0]));
    }
}
