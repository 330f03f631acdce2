//! [`GraphError`]: everything the tape rejects.

use sheaf_tensor::{Shape, TensorError};
use thiserror::Error;

use crate::NodeId;

/// Result of graph building and execution.
pub type Result<T, E = GraphError> = std::result::Result<T, E>;

/// Joins shapes for messages: `[3], [4]`.
fn shapes(given: &[Shape]) -> String {
    given
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What building or running a graph rejects. Variants about a node name the
/// op and the node, so a message points at the line that built it.
#[derive(Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum GraphError {
    /// Shape inference failed when the node was added.
    #[error("{op}: expected {expected}, given {}", shapes(given))]
    Shape {
        op: &'static str,
        expected: String,
        given: Vec<Shape>,
    },
    /// Wrong number of arguments.
    #[error("{op}: expected {expected} arguments, given {given}")]
    Arity {
        op: &'static str,
        expected: &'static str,
        given: usize,
    },
    /// Per-instance data out of range (a word id past the table, a class
    /// index past the class count) or an invalid attribute.
    #[error("{op}: {what}")]
    Data { op: &'static str, what: String },
    /// An expression built on another graph.
    #[error("{op}: the expression for node {node} belongs to another graph")]
    ForeignExpr { op: &'static str, node: NodeId },
    /// An expression from before the last [`crate::Graph::clear`].
    #[error("{op}: the expression for node {node} is stale (built before Graph::clear)")]
    StaleExpr { op: &'static str, node: NodeId },
    /// A parameter of another [`crate::ParamStore`], or one it does not hold.
    #[error("{op}: parameter {param} does not belong to this parameter store")]
    ForeignParam { op: &'static str, param: String },
    /// A value or gradient was read before it was computed.
    #[error("node {node} ({op}) has no {what} yet: run {hint} first")]
    NotComputed {
        op: &'static str,
        node: NodeId,
        what: &'static str,
        hint: &'static str,
    },
    /// A parameter's node was read after backward, when graphs no longer
    /// hold parameter values.
    #[error(
        "node {node} is a parameter: read its value with ParamStore::value (a graph lets \
         go of parameter values when backward is done, so that an optimizer step \
         updates them in place)"
    )]
    ParamReleased { node: NodeId },
    /// The loss given to backward does not hold exactly one element.
    #[error("backward: the loss (node {node}, {op}) must hold one element, its shape is {shape}")]
    LossNotScalar {
        op: &'static str,
        node: NodeId,
        shape: Shape,
    },
    /// A kernel failed while running a node (or a batch of nodes).
    #[error("{op} (node {node}): {source}")]
    Exec {
        op: &'static str,
        node: NodeId,
        #[source]
        source: Box<TensorError>,
    },
    /// NaN or infinity checking is on, and this node produced one.
    #[error("{op} (node {node}) produced a non-finite value ({value}) in its {what}")]
    NonFinite {
        op: &'static str,
        node: NodeId,
        what: &'static str,
        value: f32,
    },
    /// A tensor operation outside any node (parameter creation, updates).
    #[error("{context}: {source}")]
    Tensor {
        context: String,
        #[source]
        source: Box<TensorError>,
    },
    /// Parameter store problems: duplicate names, checkpoints.
    #[error("{0}")]
    Params(String),
}

/// `{:?}` prints the message, as `{}` does: a `main` returning
/// `Result<(), Box<dyn Error>>` shows it so. `{:#?}` adds the chain of
/// causes, one a line.
impl std::fmt::Debug for GraphError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        sheaf_tensor::debug_error(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_the_message() {
        let err = GraphError::Exec {
            op: "tanh",
            node: NodeId::from_index(3),
            source: Box::new(TensorError::InvalidArgument {
                op: "unary",
                arg: "out",
                reason: "too short",
            }),
        };
        let shown = err.to_string();
        assert!(!shown.is_empty());
        assert_eq!(format!("{err:?}"), shown);
        let alt = format!("{err:#?}");
        assert!(alt.starts_with(&shown), "{alt}");
        assert!(alt.contains("\n  caused by: "), "{alt}");
    }
}
