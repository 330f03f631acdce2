//! The built-in ops, one family per file. Each file holds the op structs,
//! their [`crate::Op`] impls and the user-facing `Graph` methods.

mod broadcast;
mod cells;
mod concat;
mod dropout;
mod elementwise;
mod index;
mod leaf;
pub(crate) mod leaves;
mod matmul;
mod maximum;
mod reduce;
mod reshape;
mod sequence;
mod softmax;
