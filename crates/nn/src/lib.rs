//! Layers for sheaf, the building blocks users expect (DyNet's builders,
//! PyTorch's `nn`, candle-nn): parameters created and named in a
//! [`Scope`], and [`Linear`], [`Embedding`], [`Mlp`], [`Lstm`], [`Gru`],
//! [`Rnn`], the Tree-LSTMs ([`BinaryTreeLstm`], [`ChildSumTreeLstm`],
//! [`NaryTreeLstm`]) and [`Attention`] pooling applied to [`sheaf_autodiff::Expr`]s on
//! a graph. Every layer is made of graph ops, so it batches dynamically
//! under every strategy and runs on every backend without code of its own.
//!
//! ```
//! use sheaf_autodiff::{Graph, ParamStore, Sequential};
//! use sheaf_nn::prelude::*;
//! use sheaf_tensor::Tensor;
//!
//! let mut store = ParamStore::new();
//! let mut root = Scope::new(&mut store, 42);
//! let emb = Embedding::new(&mut root.sub("emb")?, 100, 8)?;
//! let cfg = RecurrentConfig { layers: 2, bidirectional: true, ..RecurrentConfig::new(16) };
//! let enc = Lstm::new(&mut root.sub("enc")?, 8, cfg)?;
//! let out = Linear::new(&mut root.sub("out")?, enc.output_width(), 5, true)?;
//!
//! let mut g = Graph::new();
//! let xs = [3, 14, 15, 92]
//!     .iter()
//!     .map(|&w| emb.forward(&mut g, w))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let hs = enc.transduce(&mut g, &xs)?;
//! let logits = out.forward(&mut g, hs[3])?;
//! let y = Sequential::new().forward(&mut g, &store, logits)?;
//! assert_eq!(y.dims(), &[5]);
//! assert!(store.get("enc.l1.bwd.u").is_some());
//! # Ok::<(), sheaf_autodiff::GraphError>(())
//! ```

mod attention;
mod cells;
mod linear;
mod recurrent;
mod recurrent_scan;
mod recurrent_vertex;
mod scope;
mod tree;
mod unit;

pub use attention::Attention;
pub use cells::{Cell, GruCell, LstmCell, Prev, RnnCell};
pub use linear::{Activation, Embedding, Linear, Mlp};
pub use recurrent::{Gru, Lstm, Recurrent, RecurrentConfig, Rnn, State, Unit};
pub use scope::{Inits, Scope};
pub use tree::{BinaryTreeLstm, ChildSumTreeLstm, NaryTreeLstm};

/// Everything a model file uses, for a glob import.
///
/// ```
/// use sheaf_autodiff::ParamStore;
/// use sheaf_nn::prelude::*;
///
/// let mut store = ParamStore::new();
/// let mut root = Scope::new(&mut store, 1);
/// let enc = Lstm::new(&mut root.sub("enc")?, 4, RecurrentConfig::new(8))?;
/// let sizes = [enc.output_width(), 8, 2];
/// let head = Mlp::new(&mut root.sub("head")?, &sizes, Activation::Relu, 0.0)?;
/// assert_eq!(head.layers().len(), 2);
/// assert_eq!(store.len(), 3 + 4);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
pub mod prelude {
    pub use crate::{
        Activation, Attention, BinaryTreeLstm, ChildSumTreeLstm, Embedding, Gru, Inits, Linear,
        Lstm, Mlp, NaryTreeLstm, RecurrentConfig, Rnn, Scope, State,
    };
}
