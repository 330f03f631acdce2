//! The Stanford Sentiment Treebank: trees, the strict PTB parser, the
//! vocabulary and pretrained word vectors.

mod tree;

pub use tree::{Label, Node, Tree, CLASSES};
