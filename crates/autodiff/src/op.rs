//! The [`Op`] trait: one definition per op, used by every executor.
//!
//! An op declares its shape inference, which arguments are stacked per
//! instance and which are shared (a parameter), and a BATCHED forward and
//! backward over `[b, ...]` blocks. The sequential executor calls them with
//! `b = 1`; the scheduler with whole batches, so "batched equals
//! sequential" is a property of one code path. Built-in ops (including the
//! fused cells) implement this same trait, which is the extension point for
//! users' own fused kernels.

use sheaf_tensor::{Backend, Shape, Tensor, TensorMut};

/// How an argument enters a batched call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArgRole {
    /// One value per instance, stacked along a new leading batch axis.
    Stack,
    /// One value for the whole batch (a parameter): nodes may only share a
    /// batch if they share this argument node (it is part of the signature).
    Share,
}

/// Rough cost class, used to break ties when the agenda strategy chooses
/// between ready signatures (cheap before heavy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cost {
    /// Elementwise, copies, reductions.
    Cheap,
    /// Matrix products.
    Heavy,
}

/// Op-defined attribute bits of a node (a slice range, a scale factor's
/// `f32` bits, a dropout rate...). Part of the signature: nodes with
/// different attributes never share a kernel call.
pub type Attr = u64;

/// Error of shape inference, turned into [`crate::GraphError::Shape`] with
/// the op name and the given shapes by the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeError {
    /// What the op expected, e.g. `"arguments of equal shape"`.
    pub expected: String,
}

impl ShapeError {
    /// An error saying what was expected.
    pub fn expected(what: impl Into<String>) -> Self {
        ShapeError {
            expected: what.into(),
        }
    }
}

/// What a batched forward sees.
pub struct Forward<'a> {
    /// The kernels to use.
    pub backend: &'a dyn Backend,
    /// One tensor per argument: `[b, ...arg shape]` for [`ArgRole::Stack`]
    /// arguments, the plain value for [`ArgRole::Share`] ones.
    pub args: &'a [Tensor],
    /// Per-instance data of the `b` nodes (word ids, class indices).
    pub data: &'a [u32],
    /// Attribute bits shared by the batch.
    pub attr: Attr,
    /// Per-instance seeds (dropout masks), one per node.
    pub seeds: &'a [u64],
    /// Whether the graph runs in training mode (dropout active).
    pub train: bool,
    /// The output, `[b, ...out shape]`; contents on entry are unspecified.
    pub out: TensorMut<'a>,
    /// The auxiliary buffer declared by [`Op::aux_shape`], `[b, ...]`.
    pub aux: Option<TensorMut<'a>>,
    /// Where a batching executor stacked EVERY argument into one block
    /// `[n·b, ...]` (argument `j` is rows `j·b..(j + 1)·b`, the same memory
    /// as `args[j]`): that block, which an op of many arguments may read
    /// whole, in one kernel instead of one per argument. `None` otherwise.
    pub block: Option<&'a Tensor>,
    /// Tensors the forward keeps for its backward beside `aux` (see
    /// [`Keep`]); only ops with [`Op::keeps`] above 0 use it.
    pub keep: Keep<'a>,
}

/// Where a forward keeps tensors for its backward: buffers it computed
/// into anyway (a vertex function's intermediate values), kept by the
/// executor as they are instead of copied into the auxiliary buffer, and
/// handed back in order as [`Backward::kept`]. Buffers come from the
/// executor's memory ([`Keep::buffer`]), so a training loop reuses them.
pub struct Keep<'a> {
    alloc: &'a mut dyn FnMut(Shape) -> sheaf_tensor::Result<Tensor>,
    kept: &'a mut Vec<Tensor>,
}

impl<'a> Keep<'a> {
    /// For executors: buffers come from `alloc`, kept tensors go to `kept`.
    pub fn new(
        alloc: &'a mut dyn FnMut(Shape) -> sheaf_tensor::Result<Tensor>,
        kept: &'a mut Vec<Tensor>,
    ) -> Self {
        Keep { alloc, kept }
    }

    /// A buffer of `shape` (contents unspecified) from the executor.
    pub fn buffer(&mut self, shape: Shape) -> sheaf_tensor::Result<Tensor> {
        (self.alloc)(shape)
    }

    /// Keeps `t` for backward, after those kept before it.
    pub fn push(&mut self, t: Tensor) {
        self.kept.push(t);
    }

    /// How many tensors are kept so far (by this forward and, for an op
    /// that runs others, by the forwards before it).
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether nothing is kept yet.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The same keeper, borrowed for a nested forward.
    pub fn reborrow(&mut self) -> Keep<'_> {
        Keep {
            alloc: &mut *self.alloc,
            kept: &mut *self.kept,
        }
    }
}

impl Forward<'_> {
    /// Number of instances in this call.
    pub fn batch(&self) -> usize {
        self.out.num_rows()
    }
}

/// What a batched backward sees. Gradients ACCUMULATE into `dargs`, except
/// where [`Backward::writes`] says an argument's gradient is to be written.
pub struct Backward<'a> {
    /// The kernels to use.
    pub backend: &'a dyn Backend,
    /// The forward arguments, as in [`Forward::args`].
    pub args: &'a [Tensor],
    /// Per-instance data, as in [`Forward::data`].
    pub data: &'a [u32],
    /// Attribute bits, as in [`Forward::attr`].
    pub attr: Attr,
    /// Per-instance seeds, as in [`Forward::seeds`].
    pub seeds: &'a [u64],
    /// The forward output, `[b, ...]`.
    pub out: &'a Tensor,
    /// The auxiliary buffer the forward filled.
    pub aux: Option<&'a Tensor>,
    /// Gradient of the loss with respect to `out`, `[b, ...]`.
    pub dout: &'a Tensor,
    /// One entry per argument, shaped like [`Backward::args`]: where to add
    /// that argument's gradient, or `None` if it needs none (a constant).
    pub dargs: Vec<Option<TensorMut<'a>>>,
    /// Rows of a [`ArgRole::Share`] argument's gradient that an op touched
    /// sparsely (embedding lookups): `(argument, rows)`. An op that writes a
    /// shared gradient without calling [`Backward::touch_rows`] is taken to
    /// have written it densely.
    pub(crate) sparse: Vec<(usize, Vec<u32>)>,
    /// Bit `i` set: `dargs[i]` holds unspecified values and must be
    /// written, every element (see [`Op::backward_writes`]).
    pub(crate) write: u64,
    /// The gradients of all arguments as one block the op writes whole
    /// (see [`Backward::take_grad_block`]).
    pub(crate) grad_block: Option<TensorMut<'a>>,
    /// What the forward kept ([`Keep`]), in order.
    pub(crate) kept: &'a [Tensor],
}

impl<'a> Backward<'a> {
    /// A backward call's context, for executors (the scheduler builds one
    /// per batch); the fields are documented on the struct.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backend: &'a dyn Backend,
        args: &'a [Tensor],
        data: &'a [u32],
        attr: Attr,
        seeds: &'a [u64],
        out: &'a Tensor,
        aux: Option<&'a Tensor>,
        dout: &'a Tensor,
        dargs: Vec<Option<TensorMut<'a>>>,
    ) -> Self {
        Backward {
            backend,
            args,
            data,
            attr,
            seeds,
            out,
            aux,
            dout,
            dargs,
            sparse: Vec::new(),
            write: 0,
            grad_block: None,
            kept: &[],
        }
    }

    /// For executors: the tensors the op's forward kept ([`Forward::keep`]).
    pub fn with_kept(mut self, kept: &'a [Tensor]) -> Self {
        self.kept = kept;
        self
    }

    /// The tensors the forward kept, in the order it kept them.
    pub fn kept(&self) -> &'a [Tensor] {
        self.kept
    }

    /// For executors: hands an op whose [`Op::grads_as_block`] is true the
    /// gradients of all its arguments as one block `[n·b, ...]` of
    /// UNSPECIFIED values, which the op writes, every element (argument `j`
    /// in rows `j·b..(j + 1)·b`), its `dargs` then all `None`.
    pub fn with_grad_block(mut self, block: TensorMut<'a>) -> Self {
        self.grad_block = Some(block);
        self
    }

    /// The block of all arguments' gradients, if the executor gave one
    /// ([`Backward::with_grad_block`]); the op WRITES every argument's
    /// gradient into it, every element (it holds unspecified values, NaN in
    /// debug builds), instead of adding to `dargs`.
    pub fn take_grad_block(&mut self) -> Option<TensorMut<'a>> {
        self.grad_block.take()
    }

    /// Marks the arguments whose gradients the op must WRITE instead of
    /// adding to (bit `i` for `dargs[i]`), for executors that hand out
    /// fresh, unzeroed buffers. Set a bit only where
    /// [`Op::backward_writes`] says the op can.
    pub fn writing(mut self, args: u64) -> Self {
        self.write = args;
        self
    }

    /// Whether argument `i`'s gradient holds unspecified values that the
    /// op must overwrite, every element, instead of adding to them. Only
    /// ever true for arguments for which [`Op::backward_writes`] is.
    pub fn writes(&self, i: usize) -> bool {
        i < 64 && self.write >> i & 1 == 1
    }

    /// The rows declared with [`Backward::touch_rows`], per shared argument.
    pub fn touched_rows(&self) -> &[(usize, Vec<u32>)] {
        &self.sparse
    }

    /// Number of instances in this call.
    pub fn batch(&self) -> usize {
        self.out.num_rows()
    }

    /// Declares that only `rows` of shared argument `arg`'s gradient were
    /// written, so a sparse optimizer may update only those rows.
    pub fn touch_rows(&mut self, arg: usize, rows: &[u32]) {
        match self.sparse.iter_mut().find(|(a, _)| *a == arg) {
            Some((_, r)) => r.extend_from_slice(rows),
            None => self.sparse.push((arg, rows.to_vec())),
        }
    }
}

/// An operation of the graph.
///
/// Contract (checked by the tests every built-in op passes, which a user
/// op should copy from `tests/custom_op.rs`):
/// - `infer_shape` is pure and cheap; it runs when a node is added.
/// - `forward` overwrites `out` (and `aux`) for all `b` instances; it must
///   give each instance the result it would get alone (`b = 1`).
/// - `backward` ADDS into each `dargs[i]` that is `Some`, or WRITES every
///   element of it when [`Backward::writes`] says so (only for arguments
///   it declares with [`Op::backward_writes`]).
pub trait Op: Send + Sync + 'static {
    /// One word, used in errors, plans and benches: `"tanh"`, `"affine"`.
    fn name(&self) -> &'static str;

    /// How argument `i` of `n` enters a batched call.
    fn arg_role(&self, _i: usize, _n: usize) -> ArgRole {
        ArgRole::Stack
    }

    /// Output shape of one instance from the argument shapes.
    fn infer_shape(&self, args: &[Shape], attr: Attr) -> Result<Shape, ShapeError>;

    /// Per-instance shape of the auxiliary buffer forward saves for backward
    /// (activated gates, probabilities, a dropout mask), if any.
    fn aux_shape(&self, _out: &Shape, _args: &[Shape], _attr: Attr) -> Option<Shape> {
        None
    }

    /// Whether nodes of this op may share a kernel call. An op that says no
    /// runs one node per call, and the scheduler's plan says so.
    fn batchable(&self) -> bool {
        true
    }

    /// Cost class, for tie-breaking in the agenda strategy.
    fn cost(&self) -> Cost {
        Cost::Cheap
    }

    /// For ops whose output is a view of their first argument (reshape, a
    /// contiguous slice): the output value without a copy, given the
    /// argument's per-instance value. Executors that run a node alone use
    /// it instead of [`Op::forward`]; batched runs still call `forward`.
    fn view(
        &self,
        _arg: &Tensor,
        _out: &Shape,
        _attr: Attr,
    ) -> Option<sheaf_tensor::Result<Tensor>> {
        None
    }

    /// Batched forward.
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()>;

    /// Batched backward: accumulate into `cx.dargs` (or write, see
    /// [`Backward::writes`]).
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()>;

    /// Whether `backward` can WRITE argument `i`'s (of `n`) gradient, every
    /// element, when [`Backward::writes`] asks it to. An executor then
    /// hands the first gradient to reach a buffer over unzeroed, saving a
    /// pass over memory per buffer. Default: no, the executor zeros.
    fn backward_writes(&self, _i: usize, _n: usize, _attr: Attr) -> bool {
        false
    }

    /// Whether this op takes its arguments' gradients as one block when an
    /// executor stacked its arguments as one (see [`Forward::block`] and
    /// [`Backward::take_grad_block`]): a sum of many terms then sends its
    /// gradient to all of them in one kernel, written (no zeroed block
    /// first). An op that says yes must handle both forms: the block is
    /// given only where its arguments were stacked so.
    fn grads_as_block(&self) -> bool {
        false
    }

    /// Whether this op's value is the plain sum of its arguments (every
    /// one stacked, all of the output's shape), each argument's gradient
    /// the output's. An executor may then add the arguments' rows into
    /// the output where they lie, and the output's gradient back into
    /// theirs, instead of stacking the arguments first, calling neither
    /// `forward` nor `backward` for such a batch; both must still give
    /// the sum for the batches it does not run so.
    fn sums_args(&self) -> bool {
        false
    }

    /// How many tensors forward keeps for backward through
    /// [`Forward::keep`] (the same number every call).
    fn keeps(&self) -> usize {
        0
    }

    /// For an op computing a sum of products `W_k x_k` (a weight `[out,
    /// in_k]` shared by the batch, an input `[in_k]` stacked) over its
    /// arguments from index `f` on, laid out `W_1, x_1, W_2, x_2, ...`
    /// (what came before them, a bias, untouched): `Some(f)`. Any number
    /// of pairs must be accepted. A vertex function then replaces a term
    /// whose input is a concatenation `[x_a; x_b]` by the terms
    /// `W[:, a] x_a + W[:, b] x_b` over column blocks of the weight, and
    /// never makes the concatenation. Default: `None`.
    fn product_terms_from(&self) -> Option<usize> {
        None
    }
}
