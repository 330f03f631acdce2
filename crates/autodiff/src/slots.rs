//! [`Slots`]: one kind of per-node tensor (values, auxiliary buffers or
//! gradients), held either per node or as rows of batch tensors.
//!
//! A batched executor computes a whole batch into one `[b, ...]` tensor.
//! Storing a row view per node cost ~5% of a Tree-LSTM training step
//! (a `Tensor` built, reshaped and reference-counted per node, per kind),
//! and most of those views are never read: later batches read their inputs
//! through the executor's own bookkeeping. So a batch is stored once, each
//! node records (batch, row), and the view is made on first read.

use std::sync::{Mutex, OnceLock};

use sheaf_tensor::{Shape, Tensor};

use crate::id::NodeId;

const NO_ROW: (u32, u32) = (u32::MAX, 0);

/// Nodes per page of [`Pages`].
const PAGE: usize = 256;

/// An entry per node, allocated a page of [`PAGE`] entries at a time when
/// an entry in it is first written. Batched executors store own tensors
/// for a few nodes (parameters, large inputs) and read the views of a few
/// more; an entry per node was ~170 bytes per node and kind, written and
/// dropped whole by every graph (tens of MB a step for W1 at batch 256,
/// in fresh pages where a graph is made per step).
struct Pages<T> {
    pages: Vec<OnceLock<Box<[T]>>>,
}

impl<T> Default for Pages<T> {
    fn default() -> Self {
        Pages { pages: Vec::new() }
    }
}

impl<T: Default> Pages<T> {
    /// Room for entries `0..n` (only grows).
    fn resize(&mut self, n: usize) {
        let pages = n.div_ceil(PAGE);
        if self.pages.len() < pages {
            self.pages.resize_with(pages, OnceLock::new);
        }
    }

    fn new_page() -> Box<[T]> {
        (0..PAGE).map(|_| T::default()).collect()
    }

    /// Pages allocated so far.
    #[cfg(test)]
    fn allocated(&self) -> usize {
        self.pages.iter().filter(|p| p.get().is_some()).count()
    }

    /// Entry `i` if its page exists.
    fn get(&self, i: usize) -> Option<&T> {
        let page = self.pages.get(i / PAGE)?.get()?;
        page.get(i % PAGE)
    }

    /// Entry `i`, its page made if need be; `None` past [`Pages::resize`].
    fn get_or_make(&self, i: usize) -> Option<&T> {
        let page = self.pages.get(i / PAGE)?.get_or_init(Self::new_page);
        page.get(i % PAGE)
    }

    /// Entry `i` if its page exists, mutably.
    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        let page = self.pages.get_mut(i / PAGE)?.get_mut()?;
        page.get_mut(i % PAGE)
    }

    /// Entry `i`, its page made if need be; `None` past [`Pages::resize`].
    fn get_mut_or_make(&mut self, i: usize) -> Option<&mut T> {
        let cell = self.pages.get_mut(i / PAGE)?;
        if cell.get().is_none() {
            // Empty, and `&mut` excludes other writers: the set succeeds.
            let _ = cell.set(Self::new_page());
        }
        cell.get_mut()?.get_mut(i % PAGE)
    }
}

/// The value of a node without an own tensor.
const NONE: &Option<Tensor> = &None;

/// Per-node tensors of one kind. `rows` has one entry per node of the
/// current graph (its length is the graph's); `own` and `views` only grow,
/// a page at a time (see [`Pages`]), and `clear` resets just the entries
/// that were set, so a step costs in proportion to what it stored rather
/// than to the graph's size (clearing and refilling a slot per node was
/// ~2% of a Tree-LSTM training step).
#[derive(Default)]
pub(crate) struct Slots {
    /// Node tensors stored one by one (the reference executor, inputs).
    own: Pages<Option<Tensor>>,
    /// Indices of `own` that may hold a tensor (possibly repeated).
    own_set: Vec<u32>,
    /// (batch, row) per node, or `NO_ROW`.
    rows: Vec<(u32, u32)>,
    /// Row views made on first read.
    views: Pages<OnceLock<Tensor>>,
    /// Indices of `views` made since the last clear.
    made: Mutex<Vec<u32>>,
    batches: Vec<(Tensor, Shape)>,
}

impl Slots {
    /// Forgets every node (allocations are kept for the next step).
    pub(crate) fn clear(&mut self) {
        for i in self.own_set.drain(..) {
            if let Some(slot) = self.own.get_mut(i as usize) {
                *slot = None;
            }
        }
        let made = self.made.get_mut().unwrap_or_else(|p| p.into_inner());
        for i in made.drain(..) {
            forget_view(&mut self.views, i as usize);
        }
        self.rows.clear();
        self.batches.clear();
    }

    /// Makes room for nodes `0..n` (new nodes hold nothing).
    pub(crate) fn resize(&mut self, n: usize) {
        self.rows.resize(n, NO_ROW);
        self.own.resize(n);
        self.views.resize(n);
    }

    /// Node `i`'s own tensor slot, for the reference executor. Panics if
    /// `i` is past [`Slots::resize`]'s `n`, like indexing.
    pub(crate) fn own_mut(&mut self, i: usize) -> &mut Option<Tensor> {
        self.own_set.push(i as u32);
        let pages = self.own.pages.len();
        match self.own.get_mut_or_make(i) {
            Some(slot) => slot,
            None => panic!("node {i} is past the slots' {pages} pages"),
        }
    }

    /// Node `i`'s own tensor slot, read-only (`None` if it has none).
    pub(crate) fn own_ref(&self, i: usize) -> &Option<Tensor> {
        self.own.get(i).unwrap_or(NONE)
    }

    /// Takes node `i`'s own tensor out, if any.
    pub(crate) fn take_own(&mut self, i: usize) -> Option<Tensor> {
        self.own.get_mut(i).and_then(Option::take)
    }

    /// Replaces each own tensor `t` for which `f(t)` gives a new one.
    pub(crate) fn replace_own(&mut self, mut f: impl FnMut(&Tensor) -> Option<Tensor>) {
        for &i in &self.own_set {
            if let Some(slot) = self.own.get_mut(i as usize) {
                if let Some(new) = slot.as_ref().and_then(&mut f) {
                    *slot = Some(new);
                }
            }
        }
    }

    /// Node `i`'s tensor: its batch row (as a view, made on first read) or
    /// its own tensor.
    pub(crate) fn get(&self, i: usize) -> Option<&Tensor> {
        let (batch, row) = *self.rows.get(i)?;
        if (batch, row) == NO_ROW {
            return self.own.get(i)?.as_ref();
        }
        let cell = self.views.get_or_make(i)?;
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
        let mut made = false;
        let v = cell.get_or_init(|| {
            made = true;
            view
        });
        if made {
            self.made
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(i as u32);
        }
        Some(v)
    }

    /// Stores node `i`'s own tensor (replacing a batch row).
    pub(crate) fn set(&mut self, i: usize, t: Tensor) {
        if i < self.rows.len() {
            *self.own_mut(i) = Some(t);
            self.forget_row(i);
        }
    }

    /// Takes node `i`'s tensor out (a batch row as a view).
    pub(crate) fn take(&mut self, i: usize) -> Option<Tensor> {
        let from_row = match self.rows.get(i) {
            Some(&r) if r != NO_ROW => self.get(i).cloned(),
            _ => None,
        };
        // An own tensor shadowed by a row goes too.
        let own = self.own.get_mut(i).and_then(Option::take);
        self.forget_row(i);
        from_row.or(own)
    }

    fn forget_row(&mut self, i: usize) {
        if let Some(r) = self.rows.get_mut(i) {
            *r = NO_ROW;
            forget_view(&mut self.views, i);
        }
    }

    /// Stores a batch: node `nodes[r]` reads row `r` of `batch`, shaped
    /// `row_shape`.
    pub(crate) fn set_rows(&mut self, nodes: &[NodeId], batch: Tensor, row_shape: Shape) {
        let index = self.batches.len() as u32;
        self.batches.push((batch, row_shape));
        // Every view made since the last clear is listed: none, none to drop.
        let viewed = !self
            .made
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        for (r, n) in nodes.iter().enumerate() {
            let i = n.index();
            if let Some(slot) = self.rows.get_mut(i) {
                *slot = (index, r as u32);
                if viewed {
                    forget_view(&mut self.views, i);
                }
            }
        }
    }
}

/// Drops view `i` if one was made (a plain check when none was).
fn forget_view(views: &mut Pages<OnceLock<Tensor>>, i: usize) {
    if let Some(cell) = views.get_mut(i) {
        if cell.get_mut().is_some() {
            cell.take();
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

    #[test]
    fn only_pages_written_or_read_are_allocated() {
        let mut s = Slots::default();
        let n = 100 * PAGE;
        s.resize(n);
        let nodes: Vec<NodeId> = (0..n).map(NodeId::from_index).collect();
        let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
        s.set_rows(&nodes, batch(&values, n), Shape::from([1]));
        assert_eq!((s.own.allocated(), s.views.allocated()), (0, 0));
        // A read makes the view's page; an own tensor, its page.
        assert_eq!(read(&s, 5 * PAGE + 3), Some(vec![(5 * PAGE + 3) as f32]));
        s.set(70 * PAGE, Tensor::from_vec(vec![-1.0f32], [1]).unwrap());
        assert_eq!((s.own.allocated(), s.views.allocated()), (1, 1));
        assert_eq!(read(&s, 70 * PAGE), Some(vec![-1.0]));
        // Nodes never written read as absent, past the end too.
        assert_eq!(s.own_ref(42 * PAGE).as_ref().map(|t| t.numel()), None);
        assert!(s.take_own(99 * PAGE).is_none() && s.get(n + 7).is_none());
        // A clear keeps the pages (allocations reused) and forgets the nodes.
        s.clear();
        s.resize(n);
        assert!(read(&s, 5 * PAGE + 3).is_none() && read(&s, 70 * PAGE).is_none());
        assert_eq!((s.own.allocated(), s.views.allocated()), (1, 1));
    }
}
