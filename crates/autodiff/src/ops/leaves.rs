//! The leaf ops every graph holds at fixed [`crate::id::OpId`]s (the enum's
//! discriminants): inputs and parameters are not computed, so they are
//! pushed as leaves, not applied. Every op that computes goes through
//! [`crate::Graph::apply_with_data`], built-in or user-defined alike.

use std::sync::Arc;

use super::leaf::Leaf;
use crate::op::Op;

/// Leaf kinds, in registration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum LeafOp {
    Input,
    Parameter,
}

impl LeafOp {
    pub(crate) const ALL: [LeafOp; 2] = [LeafOp::Input, LeafOp::Parameter];

    fn make(self) -> Arc<dyn Op> {
        match self {
            LeafOp::Input => Arc::new(Leaf("input")),
            LeafOp::Parameter => Arc::new(Leaf("parameter")),
        }
    }
}

/// One fresh instance of every leaf op, indexed by discriminant.
pub(crate) fn instances() -> Vec<Arc<dyn Op>> {
    LeafOp::ALL.iter().map(|b| b.make()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discriminants_match_positions() {
        for (i, b) in LeafOp::ALL.iter().enumerate() {
            assert_eq!(*b as usize, i, "{b:?}");
        }
    }
}
