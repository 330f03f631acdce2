//! The built-in ops, one family per file. Each file holds the op structs,
//! their [`crate::Op`] impls and the user-facing `Graph` methods.
//!
//! Declared in the order a user looks for ops (rustdoc lists `Graph`'s impl
//! blocks in this order): element-wise, products, reductions, softmax and
//! losses, indexing, joining and cutting, reshaping, broadcasting, maxima,
//! sequences, dropout, recurrent cells. One group each, so that rustfmt
//! keeps the order.

mod elementwise;

mod matmul;

mod reduce;

mod softmax;

mod index;

mod concat;
pub(crate) use concat::is_concat;

mod reshape;

mod broadcast;

mod maximum;

mod sequence;

mod dropout;

mod cells;

// Leaves (inputs, parameters): no user-facing methods here.
mod leaf;
pub(crate) mod leaves;
