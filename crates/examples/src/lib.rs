//! Models trained with sheaf. [`sst`]: the constituency Tree-LSTM on the
//! Stanford Sentiment Treebank (the `sst` binary trains, evaluates and
//! predicts with it).

pub mod sst;
