//! [`DistError`]: what goes wrong across ranks.

use thiserror::Error;

/// Errors of data-parallel training.
#[derive(Error)]
pub enum DistError {
    /// Ranks disagree about the model: a parameter's name or shape, or the
    /// configuration's hash, differs from rank 0's.
    #[error("rank {rank} runs another model than rank 0: {what}")]
    ModelMismatch {
        /// The first rank that differs.
        rank: usize,
        /// What differs.
        what: String,
    },
    /// Parameters that must be equal on every rank are not.
    #[error(
        "ranks diverged at step {step}: parameter {param:?} on rank {rank} differs from rank 0's \
         (checksum {theirs:#018x} vs {ours:#018x})"
    )]
    Diverged {
        /// The step after which the check ran.
        step: u64,
        /// The first parameter (in store order) that differs.
        param: String,
        /// The first rank on which it differs.
        rank: usize,
        /// Its checksum there.
        theirs: u64,
        /// Its checksum on rank 0.
        ours: u64,
    },
    /// A collective called with arguments that cannot work (mismatched
    /// lengths, a root past the group).
    #[error("{0}")]
    Usage(String),
    /// The group was aborted by one of its ranks.
    #[error("rank {rank}: the group was aborted (code {code})")]
    Aborted {
        /// This rank.
        rank: usize,
        /// The code the aborting rank gave.
        code: i32,
    },
    /// The MPI runtime could not start.
    #[error("MPI: {0}")]
    Mpi(String),
    /// NCCL could not start (no GPU for this rank, no NCCL library) or a
    /// collective failed.
    #[error("NCCL: {0}")]
    Nccl(String),
    /// Reading or writing a parameter or gradient failed.
    #[error("{context}: {source}")]
    Tensor {
        /// What was being done.
        context: String,
        /// The tensor error (boxed: it keeps shapes inline).
        source: Box<sheaf_tensor::TensorError>,
    },
    /// An error of the parameter store.
    #[error(transparent)]
    Graph(#[from] Box<sheaf_autodiff::GraphError>),
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, DistError>;

impl DistError {
    pub(crate) fn tensor(
        context: impl Into<String>,
    ) -> impl FnOnce(sheaf_tensor::TensorError) -> DistError {
        let context = context.into();
        move |source| DistError::Tensor {
            context,
            source: Box::new(source),
        }
    }
}

impl From<sheaf_autodiff::GraphError> for DistError {
    fn from(e: sheaf_autodiff::GraphError) -> Self {
        DistError::Graph(Box::new(e))
    }
}

/// `{:?}` prints the message, as `{}` does: a `main` returning
/// `Result<(), Box<dyn Error>>` shows it so. `{:#?}` adds the chain of
/// causes, one a line.
impl std::fmt::Debug for DistError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        sheaf_tensor::debug_error(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_the_message() {
        let err = DistError::ModelMismatch {
            rank: 2,
            what: "parameter \"w\" is [3, 4] there".into(),
        };
        let shown = err.to_string();
        assert!(!shown.is_empty());
        assert_eq!(format!("{err:?}"), shown);
    }
}
