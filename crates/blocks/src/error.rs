//! [`BlockError`]: what compiling or running a block rejects, with the path
//! of the block that failed (`Record.left > Map > Function(fc)`).

use std::borrow::Cow;
use std::fmt;

use sheaf_autodiff::GraphError;
use sheaf_sched::SchedError;
use thiserror::Error;

use crate::Ty;

/// Result of compiling and running blocks.
pub type Result<T, E = BlockError> = std::result::Result<T, E>;

/// What went wrong, without the block path.
#[derive(Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A block was given a value of the wrong type or shape (found when the
    /// block is compiled).
    #[error("expected {expected}, given {given}")]
    Type { expected: String, given: Ty },
    /// Two types that must agree do not (the cases of a `OneOf`, a `Fold`'s
    /// initial state and its function's result, a declaration and its
    /// definition).
    #[error("{what}: {left} vs {right}")]
    Mismatch { what: String, left: Ty, right: Ty },
    /// Building a node failed (a shape an op rejects, an index out of
    /// range).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// Running the graph failed.
    #[error(transparent)]
    Sched(#[from] SchedError),
    /// The input data cannot be processed (no case of a `OneOf` matches, a
    /// host array of the wrong length, an empty sequence where one element
    /// is needed).
    #[error("{0}")]
    Data(String),
    /// A `Composition` whose wiring has a cycle, names the blocks on it.
    #[error("the wiring has a cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    /// A block is used wrongly: a forward declaration never resolved, a
    /// composition without an output, a block compiled with two types.
    #[error("{0}")]
    Usage(String),
}

/// An error with the path of the block where it happened, outermost first.
#[derive(Clone, PartialEq)]
pub struct BlockError {
    /// Innermost segment first (segments are added while unwinding).
    path: Vec<Cow<'static, str>>,
    kind: Box<ErrorKind>,
}

/// Paths of deep recursions are cut in the middle beyond this many segments.
const MAX_SHOWN_SEGMENTS: usize = 12;

impl BlockError {
    /// An error with an empty path.
    pub fn new(kind: ErrorKind) -> Self {
        BlockError {
            path: Vec::new(),
            kind: Box::new(kind),
        }
    }

    /// A [`ErrorKind::Data`] error.
    pub fn data(what: impl Into<String>) -> Self {
        Self::new(ErrorKind::Data(what.into()))
    }

    /// A [`ErrorKind::Usage`] error.
    pub fn usage(what: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage(what.into()))
    }

    /// A [`ErrorKind::Type`] error.
    pub fn ty(expected: impl Into<String>, given: &Ty) -> Self {
        Self::new(ErrorKind::Type {
            expected: expected.into(),
            given: given.clone(),
        })
    }

    /// Prepends a path segment (the block that contains the failing one).
    pub fn within(mut self, segment: impl Into<Cow<'static, str>>) -> Self {
        self.path.push(segment.into());
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The path of blocks, outermost first.
    pub fn path(&self) -> Vec<&str> {
        self.path.iter().rev().map(|s| s.as_ref()).collect()
    }
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path();
        if path.len() > MAX_SHOWN_SEGMENTS {
            let half = MAX_SHOWN_SEGMENTS / 2;
            let hidden = path.len() - 2 * half;
            write!(
                f,
                "{} > ... ({hidden} more) ... > {}: ",
                path[..half].join(" > "),
                path[path.len() - half..].join(" > ")
            )?;
        } else if !path.is_empty() {
            write!(f, "{}: ", path.join(" > "))?;
        }
        write!(f, "{}", self.kind)
    }
}

impl std::error::Error for BlockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.kind.as_ref() {
            ErrorKind::Graph(e) => Some(e),
            ErrorKind::Sched(e) => Some(e),
            _ => None,
        }
    }
}

impl From<GraphError> for BlockError {
    fn from(e: GraphError) -> Self {
        BlockError::new(ErrorKind::Graph(e))
    }
}

impl From<SchedError> for BlockError {
    fn from(e: SchedError) -> Self {
        BlockError::new(ErrorKind::Sched(e))
    }
}

/// Adds a path segment to the error of a result.
pub(crate) trait At<T> {
    fn at(self, segment: impl FnOnce() -> Cow<'static, str>) -> Result<T>;
}

impl<T, E: Into<BlockError>> At<T> for std::result::Result<T, E> {
    #[inline]
    fn at(self, segment: impl FnOnce() -> Cow<'static, str>) -> Result<T> {
        self.map_err(|e| e.into().within(segment()))
    }
}

/// `{:?}` prints the message, as `{}` does: a `main` returning
/// `Result<(), Box<dyn Error>>` shows it so. `{:#?}` adds the chain of
/// causes, one a line.
impl std::fmt::Debug for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        sheaf_tensor::debug_error(self, f)
    }
}

/// `{:?}` prints the message, as `{}` does: a `main` returning
/// `Result<(), Box<dyn Error>>` shows it so. `{:#?}` adds the chain of
/// causes, one a line.
impl std::fmt::Debug for BlockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        sheaf_tensor::debug_error(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_the_message() {
        let err = BlockError::data("no case matches")
            .within("OneOf")
            .within("Map");
        let shown = err.to_string();
        assert!(!shown.is_empty());
        assert_eq!(format!("{err:?}"), shown);
    }
}
