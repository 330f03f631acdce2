//! The tape of sheaf: a lazily built [`Graph`] of per-instance nodes, the
//! op set with batched forward and backward rules ([`Op`]), parameters and
//! the [`Sequential`] reference executor.
//!
//! Users build the graph for ONE instance (or many, summed into one loss);
//! nothing is computed while building: each call appends a node, checks its
//! shapes and returns an [`Expr`]. An executor computes values, and the
//! scheduler crate batches nodes of equal signature into single kernel
//! calls, with results equal to [`Sequential`]'s.
//!
//! # Writing your own op
//!
//! Every op implements [`Op`]: shape inference, and a BATCHED forward and
//! backward over `[b, ...]` blocks written with the kernels of the
//! [`sheaf_tensor::Backend`] it is handed. The built-in ops, the fused
//! recurrent cells included, use nothing else, so a user's op is batched,
//! scheduled and differentiated like theirs. Below, a fused
//! `swish(x) = x σ(x)` (one node instead of two; `σ(x)` is saved for
//! backward), applied with [`Graph::apply`] and checked the way every op
//! is: gradients against finite differences ([`gradcheck::check_gradients`])
//! and a batched call against single ones ([`testing::check_batching`]).
//!
//! ```
//! use std::sync::Arc;
//!
//! use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
//! use sheaf_autodiff::testing::{check_batching, Instance};
//! use sheaf_autodiff::{Attr, Backward, Forward, Graph, Op, ParamStore, Sequential, ShapeError};
//! use sheaf_tensor::{Binary, DType, Shape, Tensor, TensorError, Unary};
//!
//! struct Swish;
//!
//! impl Op for Swish {
//!     fn name(&self) -> &'static str {
//!         "swish"
//!     }
//!     fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
//!         match args {
//!             [x] => Ok(*x),
//!             _ => Err(ShapeError::expected("one argument")),
//!         }
//!     }
//!     // Per instance, forward saves σ(x) (shaped like the output) for backward.
//!     fn aux_shape(&self, out: &Shape, _args: &[Shape], _attr: Attr) -> Option<Shape> {
//!         Some(*out)
//!     }
//!     // All `b` instances at once: args[0] and out are `[b, ...]`.
//!     fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
//!         let (be, x) = (cx.backend, &cx.args[0]);
//!         let mut s = Tensor::zeros(x.shape(), DType::F32, be.device())?;
//!         be.unary(Unary::Sigmoid, x, s.view_mut()?)?;
//!         be.binary(Binary::Mul, x, &s, cx.out)?;
//!         if let Some(aux) = cx.aux {
//!             be.copy_rows(&s, 0, aux, 0, s.num_rows())?;
//!         }
//!         Ok(())
//!     }
//!     // Gradients ACCUMULATE: dx += dy (σ + x σ (1 - σ)).
//!     fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
//!         let (be, x, dy) = (cx.backend, &cx.args[0], cx.dout);
//!         let s = cx.aux.ok_or(TensorError::InvalidArgument {
//!             op: "swish",
//!             arg: "aux",
//!             reason: "must hold sigmoid(x)",
//!         })?;
//!         let Some(dx) = cx.dargs[0].as_mut() else {
//!             return Ok(()); // x needs no gradient (a constant input)
//!         };
//!         be.mul_acc(dy, s, dx.reborrow())?; // dx += dy σ
//!         let mut t = Tensor::zeros(x.shape(), DType::F32, be.device())?;
//!         be.binary(Binary::Mul, dy, x, t.view_mut()?)?;
//!         be.unary_bwd(Unary::Sigmoid, x, s, &t, dx.reborrow()) // dx += dy x σ (1 - σ)
//!     }
//! }
//!
//! // One `Arc` for every use, so that its nodes may share a batch.
//! let swish: Arc<dyn Op> = Arc::new(Swish);
//!
//! // Build and run a graph with it, like any op.
//! let store = ParamStore::new();
//! let mut g = Graph::new();
//! let x = g.input(Tensor::from_vec(vec![-1.0f32, 0.0, 2.0], [3])?);
//! let y = g.apply(&swish, &[x], 0)?;
//! let v = Sequential::new().forward(&mut g, &store, y)?.to_vec::<f32>()?;
//! for (y, x) in v.iter().zip([-1.0f32, 0.0, 2.0]) {
//!     assert!((y - x / (1.0 + (-x).exp())).abs() < 1e-6);
//! }
//!
//! // Gradients against central differences, through a one-element loss.
//! let mut store = ParamStore::new();
//! for x0 in [-2.0f32, -0.3, 0.0, 1.5] {
//!     let p = store.add(&format!("x = {x0}"), Tensor::from_vec(vec![x0], [1])?)?;
//!     let op = swish.clone();
//!     let loss = move |g: &mut Graph, xs: &[sheaf_autodiff::Expr]| {
//!         let y = g.apply(&op, &[xs[0]], 0)?; // swish(swish(x))
//!         g.apply(&op, &[y], 0)
//!     };
//!     check_gradients(&mut store, &[p], &loss, GradCheck::default())?;
//! }
//!
//! // A batched call (b = 4) equals four single calls, forward and backward.
//! let mut instances = Vec::new();
//! for k in 0..4 {
//!     let v: Vec<f32> = (0..5).map(|i| (i + 5 * k) as f32 * 0.4 - 4.0).collect();
//!     let args = vec![Tensor::from_vec(v, [5])?];
//!     instances.push(Instance { args, data: 0, seed: k as u64 });
//! }
//! check_batching(swish.as_ref(), &instances, 0, 0.0)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Its own CUDA kernel
//!
//! With the `cuda` feature, an op may run its own CUDA C on a GPU: the
//! backend it is handed says whether it is the CUDA one
//! (`sheaf_tensor::Backend::cuda`), and
//! `sheaf_tensor::CudaBackend::launch_elementwise` compiles the source
//! with NVRTC on first use (cached per kernel) and launches it over the
//! batch's tensors, inputs then outputs then the element count. The swish
//! above, fused into one kernel each way on the device and unchanged
//! elsewhere (the complete op, tested against its CPU path on a GPU, is
//! `tests/custom_op_cuda.rs`):
//!
//! ```ignore
//! const SWISH_FWD: UserKernel = UserKernel {
//!     name: "swish_fwd",
//!     source: r#"
//! extern "C" __global__ void swish_fwd(const float* x, float* y, float* s, unsigned long long n) {
//!     for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
//!          i < n; i += (unsigned long long)blockDim.x * gridDim.x) {
//!         float v = 1.0f / (1.0f + expf(-x[i]));
//!         s[i] = v;
//!         y[i] = x[i] * v;
//!     }
//! }"#,
//! };
//!
//! fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
//!     let aux = cx.aux.ok_or(/* ... */)?;
//!     if let Some(cuda) = cx.backend.cuda() {
//!         return cuda.launch_elementwise(SWISH_FWD, &[&cx.args[0]], vec![cx.out, aux]);
//!     }
//!     // ... the backend-generic forward above
//! }
//! ```
#![forbid(unsafe_code)]
// Op kernels return `sheaf_tensor::Result`, whose error keeps its shapes
// inline (see that crate); `GraphError` itself boxes it.
#![allow(clippy::result_large_err)]

mod checkpoint;
mod error;
pub mod exec;
pub mod gradcheck;
mod graph;
mod id;
mod init;
mod op;
mod ops;
mod optim;
mod params;
mod pool;
mod sequential;
mod slots;
pub mod testing;
mod vertex;

pub use error::{GraphError, Result};
pub use graph::{Graph, Node, NodeKind, PlanNode, SigInfo};
pub use id::{Expr, NodeId, OpId, SigId};
pub use init::Init;
pub use op::{ArgRole, Attr, Backward, Cost, Forward, Keep, Op, ShapeError};
pub use optim::{Method, Optimizer};
pub use params::{GradAcc, Param, ParamId, ParamStore};
pub use vertex::{Feed, VertexFn};
/// `use sheaf_autodiff::prelude::*`: what a training program needs from
/// this crate and the tensor crate, with no second dependency: [`Graph`],
/// [`Expr`], [`ParamStore`], [`Param`], [`Init`], [`Sequential`], the
/// optimizers, [`GraphError`] and its [`Result`] (which shadows the
/// standard `Result` and takes an error type as its second argument, like
/// it), and [`Tensor`](sheaf_tensor::Tensor), [`Shape`](sheaf_tensor::Shape),
/// [`DType`](sheaf_tensor::DType), [`Device`](sheaf_tensor::Device).
///
/// ```
/// use sheaf_autodiff::prelude::*;
///
/// let mut store = ParamStore::new();
/// let w = store.add_param_seeded("w", [2], Init::Const(0.5), 0)?;
/// let mut g = Graph::new();
/// let x = g.input(Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
/// let wx = g.param(&w);
/// let y = g.dot(wx, x)?;
/// let loss: f32 = Sequential::new().forward(&mut g, &store, y)?.item()?;
/// assert_eq!(loss, 1.5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub mod prelude {
    pub use crate::{
        Adagrad, Adam, Expr, Graph, GraphError, Init, Method, Optimizer, Param, ParamStore, Result,
        Sequential, Sgd,
    };
    pub use sheaf_tensor::{DType, Device, Shape, Tensor};
}

/// The `rand` crate (0.10) whose generators [`Init::tensor`],
/// [`ParamStore::add_param`] and the layers of the other sheaf crates take:
/// `sheaf_autodiff::rand::rngs::StdRng` needs no `rand` dependency of the
/// user's own, whose version would have to match.
pub use rand;
pub use sequential::Sequential;
// The optimizer configurations, re-exported so users need no tensor import.
pub use sheaf_tensor::{Adagrad, Adam, Sgd};
