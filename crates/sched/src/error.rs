//! [`SchedError`]: what the batched executor reports.

use sheaf_autodiff::{GraphError, NodeId};
use sheaf_tensor::TensorError;
use thiserror::Error;

/// Result of planning and batched execution.
pub type Result<T, E = SchedError> = std::result::Result<T, E>;

fn ids(nodes: &[NodeId]) -> String {
    let mut s: Vec<String> = nodes.iter().take(8).map(|n| n.to_string()).collect();
    if nodes.len() > 8 {
        s.push(format!("... ({} nodes)", nodes.len()));
    }
    s.join(", ")
}

/// Batched execution failures name the op and the nodes of the batch.
#[derive(Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum SchedError {
    /// A graph-level error (stale handle, loss shape, parameters).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A kernel failed on a batch.
    #[error("{op} batch of {} node(s) [{}]: {source}", nodes.len(), ids(nodes))]
    Batch {
        op: &'static str,
        nodes: Vec<NodeId>,
        #[source]
        source: Box<TensorError>,
    },
    /// Bucketing was given input it cannot bucket (no sequences, a
    /// zero-length sequence, a spacing that does not grow).
    #[error("bucketing: {what}")]
    Bucket { what: String },
    /// Backward on a graph whose forward this executor did not run (it
    /// holds another graph's batches).
    #[error(
        "backward: this executor ran its last forward on another graph (or on this one \
         before it was cleared): run backward with the executor that ran the forward"
    )]
    OtherGraph,
    /// Backward on a graph whose forward ran in inference mode
    /// ([`crate::Executor::set_inference`]), which kept nothing for it.
    #[error(
        "backward: this graph's forward ran in inference mode, which keeps nothing for \
         backward: turn it off (Executor::set_inference(false)) and run the forward again \
         on a new or cleared graph"
    )]
    Inference,
    /// NaN / infinity checking is on and a batch produced one.
    #[error("{op} (node {node}) produced a non-finite value ({value}) in its {what}")]
    NonFinite {
        op: &'static str,
        node: NodeId,
        what: &'static str,
        value: f32,
    },
}

/// `{:?}` prints the message, as `{}` does: a `main` returning
/// `Result<(), Box<dyn Error>>` shows it so. `{:#?}` adds the chain of
/// causes, one a line.
impl std::fmt::Debug for SchedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        sheaf_tensor::debug_error(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_the_message() {
        let err = SchedError::Batch {
            op: "tanh",
            nodes: vec![NodeId::from_index(1)],
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
