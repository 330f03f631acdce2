//! Typed ids and the [`Expr`] handle.

use std::fmt;

/// Index of a node in its graph's tape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) u32);

impl NodeId {
    /// The node at position `i` of a tape (positions beyond `u32::MAX`
    /// saturate; graphs that large are rejected long before).
    pub fn from_index(i: usize) -> NodeId {
        NodeId(u32::try_from(i).unwrap_or(u32::MAX))
    }

    /// Position in the tape (nodes are numbered in the order they were added).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A handle to a node: small, `Copy`, and checked against its graph (and
/// the graph's generation, bumped by [`crate::Graph::clear`]) on every use,
/// so a handle from another graph or from before a `clear` is an error,
/// never a silently wrong node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Expr {
    pub(crate) node: NodeId,
    pub(crate) graph: u32,
    pub(crate) generation: u32,
}

impl Expr {
    /// The node this handle names.
    pub fn node(self) -> NodeId {
        self.node
    }
}

/// Identity of an interned batching signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SigId(pub(crate) u32);

impl SigId {
    /// Dense index, usable to index per-signature tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Identity of an interned op instance of a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpId(pub(crate) u32);
