//! The built-in ops, one family per file. Each file holds the op structs,
//! their [`crate::Op`] impls and the user-facing `Graph` methods.

pub(crate) mod builtin;
mod elementwise;
mod leaf;
mod reshape;
