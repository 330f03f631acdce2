//! The Stanford Sentiment Treebank: trees, the strict PTB parser, the
//! vocabulary and pretrained word vectors.

mod embeddings;
mod parse;
mod tree;
mod vocab;

pub use embeddings::{read_embeddings, EmbeddingError, Pretrained};
pub use parse::{parse_tree, parse_trees, read_trees, DataError, ParseError, ParseErrorKind};
pub use tree::{Label, Node, Tree, CLASSES};
pub use vocab::{Vocab, VocabError, VocabErrorKind};
