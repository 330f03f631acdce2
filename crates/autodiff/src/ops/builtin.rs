//! The table of built-in ops: each graph creates one instance of each, at
//! fixed [`crate::id::OpId`]s (the enum's discriminants).

use std::sync::Arc;

use sheaf_tensor::{Binary, Unary};

use super::elementwise::{BinaryOp, ScaleOp, UnaryOp};
use super::leaf::Leaf;
use crate::op::Op;

/// Built-in ops, in registration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Builtin {
    Input,
    Parameter,
    Tanh,
    Sigmoid,
    Relu,
    Exp,
    Log,
    Add,
    Sub,
    Cmult,
    Cdiv,
    Scale,
}

impl Builtin {
    pub(crate) const ALL: [Builtin; 12] = [
        Builtin::Input,
        Builtin::Parameter,
        Builtin::Tanh,
        Builtin::Sigmoid,
        Builtin::Relu,
        Builtin::Exp,
        Builtin::Log,
        Builtin::Add,
        Builtin::Sub,
        Builtin::Cmult,
        Builtin::Cdiv,
        Builtin::Scale,
    ];

    fn make(self) -> Arc<dyn Op> {
        match self {
            Builtin::Input => Arc::new(Leaf("input")),
            Builtin::Parameter => Arc::new(Leaf("parameter")),
            Builtin::Tanh => Arc::new(UnaryOp(Unary::Tanh)),
            Builtin::Sigmoid => Arc::new(UnaryOp(Unary::Sigmoid)),
            Builtin::Relu => Arc::new(UnaryOp(Unary::Relu)),
            Builtin::Exp => Arc::new(UnaryOp(Unary::Exp)),
            Builtin::Log => Arc::new(UnaryOp(Unary::Log)),
            Builtin::Add => Arc::new(BinaryOp(Binary::Add)),
            Builtin::Sub => Arc::new(BinaryOp(Binary::Sub)),
            Builtin::Cmult => Arc::new(BinaryOp(Binary::Mul)),
            Builtin::Cdiv => Arc::new(BinaryOp(Binary::Div)),
            Builtin::Scale => Arc::new(ScaleOp),
        }
    }
}

/// One fresh instance of every built-in op, indexed by discriminant.
pub(crate) fn instances() -> Vec<Arc<dyn Op>> {
    Builtin::ALL.iter().map(|b| b.make()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discriminants_match_positions() {
        for (i, b) in Builtin::ALL.iter().enumerate() {
            assert_eq!(*b as usize, i, "{b:?}");
        }
    }
}
