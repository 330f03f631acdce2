//! Models trained with sheaf. [`sst`]: the constituency Tree-LSTM on the
//! Stanford Sentiment Treebank (the `sst` binary trains, evaluates and
//! predicts with it), hand-written ([`model`]) and with blocks
//! ([`tree_lstm_blocks`]). The TensorFlow Fold paper's other models, each
//! with blocks and directly on the graph: [`text2vec`], [`attention`]
//! (feed-forward attention on the addition problem) and [`weave`] (graph
//! convolutions on the ESOL molecules of [`molecules`]). [`sumstr`]: the
//! "sum of a string" task (W6), under dynamic batching or length
//! bucketing.

pub mod attention;
pub mod config;
pub mod engine;
pub mod error;
pub mod eval;
pub mod logging;
pub mod model;
pub mod molecules;
pub mod plot;
pub mod sst;
pub mod state;
pub mod sumstr;
pub mod text2vec;
pub mod train;
pub mod tree_lstm_blocks;
pub mod weave;
