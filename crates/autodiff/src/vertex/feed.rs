//! Feeds: rows a graph supplies once for the calls of vertex functions to
//! read by their per-call data, instead of one input node per call.
//!
//! W5's pair function reads each pair's features: as an argument that is
//! one input node per pair (thousands per batch), each built, planned,
//! stacked into a batch buffer and gathered again for the call. A feed
//! is one input node per graph ([`Graph::bind_feed`]) that every call of
//! F shares like a parameter; F reads its row at the call's data
//! ([`Graph::feed_row`]), gathered once per batch of calls (forward and
//! backward each), whichever of F's ops read it.

use std::sync::atomic::{AtomicU64, Ordering};

use sheaf_tensor::{DType, Shape, Tensor};

use super::{params_err, VertexFn};
use crate::error::{GraphError, Result};
use crate::graph::Graph;
use crate::id::{Expr, NodeId};

/// A table of rows of one shape that a graph binds once
/// ([`Graph::bind_feed`]) and vertex functions read by per-call data
/// ([`Graph::feed_row`]). Cheap to clone; clones are the same feed.
#[derive(Debug, Clone)]
pub struct Feed {
    id: u64,
    name: &'static str,
    row: Shape,
}

impl Feed {
    /// A feed of rows of shape `row` (per instance, no batch axis).
    pub fn new(name: &'static str, row: impl Into<Shape>) -> Feed {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Feed {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            name,
            row: row.into(),
        }
    }

    /// Its name (in errors).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The shape of one row.
    pub fn row(&self) -> Shape {
        self.row
    }
}

/// A feed bound in a graph: its input node and number of rows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    feed: u64,
    node: NodeId,
    rows: usize,
}

/// A feed read inside a trace: the placeholder input standing for its row.
#[derive(Debug, Clone)]
pub(crate) struct Read {
    pub(crate) feed: Feed,
    /// The placeholder's input index in the tracing graph.
    pub(crate) input: u32,
}

impl Graph {
    /// Binds `rows` (`[n, ...feed.row()]`) to `feed` in this graph: calls
    /// of functions reading `feed` then read row `data` of it (their
    /// per-call data, [`Graph::call_with_data`]). One node, shared by
    /// every call; it gets no gradient. Bind once per graph, before the
    /// calls ([`Graph::clear`] unbinds).
    ///
    /// Errors: rows of another shape (naming the feed and both shapes) or
    /// type than f32; the feed bound already in this graph; inside a
    /// trace.
    pub fn bind_feed(&mut self, feed: &Feed, rows: Tensor) -> Result<()> {
        if self.tracing.is_some() {
            return Err(GraphError::Params(format!(
                "feed `{}`: bound inside a vertex function's trace; bind it in the graph \
                 that calls the function",
                feed.name
            )));
        }
        let shape = rows.shape();
        let dims = shape.dims();
        if dims.is_empty() || dims[1..] != *feed.row.dims() {
            return Err(GraphError::Shape {
                op: "bind_feed",
                expected: format!("rows of feed `{}`: [n, ...{}]", feed.name, feed.row),
                given: vec![shape],
            });
        }
        if rows.dtype() != DType::F32 {
            return Err(GraphError::Params(format!(
                "feed `{}`: rows of {:?}, not f32",
                feed.name,
                rows.dtype()
            )));
        }
        if self.feeds.iter().any(|b| b.feed == feed.id) {
            return Err(GraphError::Params(format!(
                "feed `{}` is bound already in this graph: bind all of its rows at once",
                feed.name
            )));
        }
        let node = self.input(rows).node;
        self.feeds.push(Bound {
            feed: feed.id,
            node,
            rows: dims[0],
        });
        Ok(())
    }

    /// Inside a vertex function's trace ([`VertexFn::trace_with_data`]):
    /// the row of `feed` at the call's data, `data` being the
    /// [`VertexFn::DATA`] the trace was given. Each call reads the row of
    /// its own data from the rows its graph bound ([`Graph::bind_feed`]).
    ///
    /// Errors: outside a trace (bind the rows and use them as inputs
    /// there); `data` other than [`VertexFn::DATA`].
    pub fn feed_row(&mut self, feed: &Feed, data: u32) -> Result<Expr> {
        let Some(t) = self.tracing.as_ref() else {
            return Err(GraphError::Params(format!(
                "feed `{}`: feed_row reads a feed inside a vertex function's trace only",
                feed.name
            )));
        };
        if data != VertexFn::DATA {
            return Err(params_err(
                t.name,
                format!(
                    "reads feed `{}` at {data}: a feed is read at the call's data \
                     (VertexFn::DATA)",
                    feed.name
                ),
            ));
        }
        let e = self.placeholder(|| format!("feed `{}`", feed.name), feed.row)?;
        let input = self.inputs.len() as u32 - 1;
        // Data is read: calls go through `call_with_data`, which checks it
        // against the bound rows.
        self.call_data_below(VertexFn::DATA, u32::MAX as usize);
        if let Some(t) = &mut self.tracing {
            t.feeds.push(Read {
                feed: feed.clone(),
                input,
            });
        }
        Ok(e)
    }

    /// The node bound to `feed` for a call of `f`, or the error naming both.
    pub(super) fn bound_feed(&self, f: &str, feed: &Feed) -> Result<(NodeId, usize)> {
        if self.tracing.is_some() {
            return Err(params_err(
                f,
                format!(
                    "reads feed `{}` and is called inside another function's trace: \
                     functions reading feeds are called from the outer graph only",
                    feed.name
                ),
            ));
        }
        match self.feeds.iter().find(|b| b.feed == feed.id) {
            Some(b) => Ok((b.node, b.rows)),
            None => Err(params_err(
                f,
                format!(
                    "reads feed `{}`, which this graph has not bound: call \
                     Graph::bind_feed first",
                    feed.name
                ),
            )),
        }
    }
}
