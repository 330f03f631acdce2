//! Models trained with sheaf. [`sst`]: the constituency Tree-LSTM on the
//! Stanford Sentiment Treebank (the `sst` binary trains, evaluates and
//! predicts with it).

pub mod engine;
pub mod error;
pub mod eval;
pub mod model;
pub mod plot;
pub mod sst;
pub mod state;
pub mod sumstr;
pub mod train;
