//! [`enum@Error`]: everything training, evaluation and prediction report. Each
//! message names the file involved where there is one, so the `sst` binary
//! prints it as is (one line) and exits with code 1.

use std::path::PathBuf;

use sheaf_autodiff::GraphError;
use sheaf_sched::SchedError;
use thiserror::Error;

use crate::sst::{DataError, EmbeddingError, ParseError, VocabError};

/// Result of the example's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in the SST example.
#[derive(Error)]
#[non_exhaustive]
pub enum Error {
    /// A data file is missing, unreadable or malformed.
    #[error(transparent)]
    Data(#[from] DataError),
    /// Trees given to `predict` are malformed.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A vocabulary file is malformed.
    #[error(transparent)]
    Vocab(#[from] VocabError),
    /// A pretrained embeddings file is missing or malformed.
    #[error(transparent)]
    Embeddings(#[from] EmbeddingError),
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system reported.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint directory or file is missing, corrupt or does not fit
    /// the model.
    #[error("checkpoint {}: {what}", path.display())]
    Checkpoint {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// Invalid settings (flags that conflict, values out of range).
    #[error("{0}")]
    Config(String),
    /// Building or running a graph failed (sequential executor).
    #[error("model: {0}")]
    Graph(#[from] GraphError),
    /// Running a graph in batches failed.
    #[error("model: {0}")]
    Sched(#[from] SchedError),
    /// The blocks-written model failed to compile or run.
    #[error("model: {0}")]
    Blocks(#[from] sheaf_blocks::BlockError),
    /// Training across ranks failed (model mismatch, divergence, MPI).
    #[error("distributed: {0}")]
    Dist(#[from] sheaf_dist::DistError),
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A checkpoint problem with `path`. A message that already begins
    /// with `checkpoint <path>: ` (as sheaf-autodiff's do) is not prefixed
    /// twice.
    pub fn checkpoint(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        let path = path.into();
        let what = what.into();
        let prefix = format!("checkpoint {}: ", path.display());
        let what = match what.strip_prefix(&prefix) {
            Some(rest) => rest.to_string(),
            None => what,
        };
        Error::Checkpoint { path, what }
    }
}

/// `{:?}` prints the message, as `{}` does: a `main` returning
/// `Result<(), Box<dyn Error>>` shows it so. `{:#?}` adds the chain of
/// causes, one a line.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        sheaf_tensor::debug_error(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_the_message() {
        let err = Error::Io {
            path: PathBuf::from("train.txt"),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        };
        let shown = err.to_string();
        assert!(!shown.is_empty());
        assert_eq!(format!("{err:?}"), shown);
        let alt = format!("{err:#?}");
        assert!(alt.starts_with(&shown), "{alt}");
        assert!(alt.contains("\n  caused by: "), "{alt}");
    }
}
