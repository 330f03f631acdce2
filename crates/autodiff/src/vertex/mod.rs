//! Vertex functions (Cavs, ATC'18): a per-vertex sub-graph traced ONCE into
//! a template, then added to a graph as ONE node per call.
//!
//! [`VertexFn::trace`] runs a closure on placeholder arguments of given
//! shapes and records the ops it adds (their order, shapes, attributes, the
//! parameters and constants they read). [`Graph::call`] then adds a single
//! node whose op is the template: its signature is (template, argument
//! shapes, parameters), so every executor batches calls of one function
//! like any op, and a batch runs the template's ops in order, each as ONE
//! batched kernel over all the calls. Per instance the host builds, signs,
//! plans and books one node where the inlined model had one per op.
//!
//! What a call computes equals the inlined ops (tested), with two rules:
//! - F must be static: its ops may not depend on values (reading one while
//!   tracing is an error), and per-instance data (a word id, a label) are
//!   fixed at trace time: pass varying rows in as arguments.
//! - Dropout inside F draws its mask from the call node's seed and the op's
//!   position in F, so it is the same under every executor, though not the
//!   mask the inlined graph would draw.
//!
//! F's intermediates are computed into buffers from the executor's memory
//! and kept as they are for backward ([`crate::Keep`]); the inner ops' own
//! auxiliary buffers are regions of the call's (batch-major inside each),
//! so backward replays F in reverse from them. Calls may nest: a call node
//! inside F is one more op of the template (its kept tensors among the
//! outer call's).

use std::sync::Arc;

use sheaf_tensor::{DType, Device, Shape, Tensor};

use crate::error::{GraphError, Result};
use crate::exec::GraphExec;
use crate::graph::{Graph, NodeKind};
use crate::id::{Expr, NodeId};
use crate::op::{ArgRole, Attr, Cost, Op};
use crate::params::Param;

mod build;
mod call;
mod feed;
mod fields;
mod scan;
mod split;

pub(crate) use build::CallCache;
use call::CallOp;
pub(crate) use feed::Bound;
pub use feed::Feed;
use fields::Fields;
use split::Block;

/// A traced vertex function; cheap to clone (shared template).
#[derive(Clone)]
pub struct VertexFn {
    op: Arc<dyn Op>,
    template: Arc<Template>,
    /// F with its concatenations that only products read split (see
    /// `split.rs`), if it has any.
    split: Option<Arc<Template>>,
    /// The ops of its scans ([`Graph::scan`]), one per padded length.
    scans: Arc<std::sync::Mutex<ScanOps>>,
}

/// `(padded length, op)` of a function's scans.
type ScanOps = Vec<(usize, Arc<dyn Op>)>;

impl std::fmt::Debug for VertexFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = &self.template;
        f.debug_struct("VertexFn")
            .field("name", &t.name)
            .field("args", &t.arg_shapes)
            .field("ops", &t.steps.len())
            .field("params", &t.params.len())
            .finish()
    }
}

/// Where an inner op's argument comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Src {
    /// Argument `i` of the call.
    Arg(usize),
    /// Parameter `i` of the template (argument `n_args + i` of the call).
    Param(usize),
    /// Constant `i` of the template.
    Const(usize),
    /// The output of step `i`.
    Step(usize),
    /// Column block `i` of a parameter ([`Template::blocks`]): a product
    /// term's weight where F's concatenation was split (see `split.rs`).
    Block(usize),
    /// The call's row of feed `i` ([`Template::feeds`], `feed.rs`): row
    /// `data` of the rows its graph bound (argument `n_args + n_params +
    /// i` of the call).
    Feed(usize),
}

/// One op of the template.
struct Step {
    op: Arc<dyn Op>,
    args: Vec<Src>,
    roles: Vec<ArgRole>,
    attr: Attr,
    data: u32,
    shape: Shape,
    /// Where this step's value is among the call's kept tensors
    /// ([`crate::Keep`]; every step but the last, whose value is the
    /// call's output): kept as computed, not copied.
    value: Option<usize>,
    /// Where the tensors this step's op keeps start among the call's.
    kept_at: usize,
    /// The region and per-instance shape of the op's own auxiliary buffer.
    aux: Option<(usize, Shape)>,
}

/// A contiguous run of the call's auxiliary buffer: `size` values per
/// instance, at `offset` per instance (so at `b * offset` in a batch of
/// `b`, batch-major).
#[derive(Debug, Clone, Copy)]
struct Region {
    offset: usize,
    size: usize,
}

/// What tracing recorded.
struct Template {
    name: &'static str,
    arg_shapes: Vec<Shape>,
    params: Vec<Param>,
    /// The feeds F reads ([`Src::Feed`]).
    feeds: Vec<Feed>,
    consts: Vec<Tensor>,
    /// The parameters' column blocks that steps read ([`Src::Block`]).
    blocks: Vec<Block>,
    steps: Vec<Step>,
    regions: Vec<Region>,
    /// Values per instance in the auxiliary buffer.
    aux_len: usize,
    /// Tensors a call keeps: every step's value but the last, and what the
    /// steps' ops keep themselves.
    keeps: usize,
    /// Whether steps read the call's data, and the bound it must be below.
    data_below: Option<usize>,
    /// The per-call fields packed into the data, if F was traced with
    /// them ([`VertexFn::trace_with_fields`]).
    fields: Fields,
    /// `(offset, shape)` of each output within the call's output: one
    /// output is the whole of it, several are concatenated flat.
    outputs: Vec<(usize, Shape)>,
    out_shape: Shape,
    batchable: bool,
    cost: Cost,
}

/// What a graph records while it is traced.
#[derive(Debug, Default)]
pub(crate) struct Tracing {
    pub(crate) name: &'static str,
    pub(crate) params: Vec<Param>,
    /// The smallest bound an op put on the call's data ([`VertexFn::DATA`]),
    /// checked at each call instead; `None` if no op reads it.
    pub(crate) data_below: Option<usize>,
    /// The same per field ([`VertexFn::field`]), one entry per field F
    /// was traced with.
    pub(crate) fields: Vec<Option<usize>>,
    /// The feeds F reads ([`Graph::feed_row`]).
    pub(crate) feeds: Vec<feed::Read>,
}

impl Graph {
    /// A zero input of `shape` standing for a value F is traced on (an
    /// argument, a feed's row); `what` names it in the error.
    pub(super) fn placeholder(&mut self, what: impl Fn() -> String, shape: Shape) -> Result<Expr> {
        let zero =
            Tensor::zeros(shape, DType::F32, Device::Cpu).map_err(|source| GraphError::Tensor {
                context: format!("{}: placeholder of shape {shape}", what()),
                source: Box::new(source),
            })?;
        Ok(self.input(zero))
    }

    /// For ops that check per-node data (an index, a word id, a class)
    /// against `limit` when added: whether `value` is F's per-call data
    /// ([`VertexFn::DATA`]) while tracing, its check then made at each
    /// call. Returns false otherwise (the op checks `value` itself).
    pub(crate) fn call_data_below(&mut self, value: u32, limit: usize) -> bool {
        let Some(t) = &mut self.tracing else {
            return false;
        };
        let slot = match value == VertexFn::DATA {
            true => &mut t.data_below,
            false => match VertexFn::field_index(value).and_then(|k| t.fields.get_mut(k)) {
                Some(field) => field,
                None => return false,
            },
        };
        *slot = Some(slot.map_or(limit, |d| d.min(limit)));
        true
    }
}

/// Errors for a function that reads per-call data called without any.
fn no_data(f: &VertexFn) -> Result<()> {
    let t = &f.template;
    match (t.data_below, t.fields.is_empty()) {
        (None, _) => Ok(()),
        (Some(_), true) => Err(params_err(
            t.name,
            "reads per-call data: call it with Graph::call_with_data".into(),
        )),
        (Some(_), false) => Err(params_err(
            t.name,
            "reads per-call fields: call it with Graph::call_with_fields".into(),
        )),
    }
}

fn params_err(name: &str, what: String) -> GraphError {
    GraphError::Params(format!("vertex function `{name}`: {what}"))
}

impl VertexFn {
    /// Traces `f` once on placeholder arguments of shapes `args` (each
    /// per-instance, without a batch axis). `f` returns F's outputs: one
    /// node, or several (a cell's state and `h`; [`Graph::call`] then
    /// returns them as views of one concatenated output).
    ///
    /// Errors: `f`'s own error; `f` reads a value (F must be static); an
    /// output that is an argument, parameter or constant (F computes
    /// nothing then); an op that takes a per-call value where it needs one
    /// shared by the batch (a parameter's place).
    pub fn trace(
        name: &'static str,
        args: &[Shape],
        f: impl FnOnce(&mut Graph, &[Expr]) -> Result<Vec<Expr>>,
    ) -> Result<VertexFn> {
        VertexFn::trace_fields(name, args, 0, f)
    }

    /// [`VertexFn::trace`] with `fields` per-call fields (0: none).
    fn trace_fields(
        name: &'static str,
        args: &[Shape],
        fields: usize,
        f: impl FnOnce(&mut Graph, &[Expr]) -> Result<Vec<Expr>>,
    ) -> Result<VertexFn> {
        let mut g = Graph::new();
        g.tracing = Some(Box::new(Tracing {
            name,
            params: Vec::new(),
            data_below: None,
            fields: vec![None; fields],
            feeds: Vec::new(),
        }));
        let mut placeholders = Vec::with_capacity(args.len());
        for s in args {
            placeholders.push(g.placeholder(|| format!("vertex function `{name}`"), *s)?);
        }
        let outs = f(&mut g, &placeholders)?;
        let (out, outputs) = match outs.as_slice() {
            [] => return Err(params_err(name, "it returns no output".into())),
            [one] => (*one, vec![(0, g.shape(*one)?)]),
            many => {
                // Several outputs: one flat concatenation, cut apart by
                // views at each call.
                let mut flat = Vec::with_capacity(many.len());
                let mut outputs = Vec::with_capacity(many.len());
                let mut offset = 0;
                for &o in many {
                    let shape = g.shape(o)?;
                    let n = numel(name, shape)?;
                    flat.push(if shape.rank() == 1 {
                        o
                    } else {
                        g.reshape(o, [n])?
                    });
                    outputs.push((offset, shape));
                    offset += n;
                }
                (g.concat(&flat)?, outputs)
            }
        };
        let out_node = g.check(out, "vertex function")?;
        if !g.node(out_node).kind().is_op() {
            return Err(params_err(
                name,
                "its output is an argument, a parameter or a constant: F computes nothing".into(),
            ));
        }
        let tracing = g.tracing.take().unwrap_or_default();
        let fields = match fields {
            0 => None,
            _ if tracing.data_below.is_some() => {
                return Err(params_err(
                    name,
                    "reads VertexFn::DATA and per-call fields: use the fields only".into(),
                ))
            }
            _ => Some(Fields::new(name, &tracing.fields)?),
        };
        let make = |split: bool| -> Result<Template> {
            let mut t = Template::from_trace(
                &g,
                name,
                args.to_vec(),
                &tracing,
                out_node,
                outputs.clone(),
                split,
            )?;
            t.data_below = tracing.data_below;
            if let Some((layout, below)) = &fields {
                t.fields = layout.clone();
                t.data_below = Some(*below);
            }
            Ok(t)
        };
        let template = Arc::new(make(false)?);
        let split = make(true)?;
        let split = (!split.blocks.is_empty()).then(|| Arc::new(split));
        Ok(VertexFn {
            op: Arc::new(CallOp(Arc::clone(&template))),
            template,
            split,
            scans: Arc::default(),
        })
    }

    /// Per-call data inside F: pass it where an op takes per-node data (a
    /// word id to [`Graph::lookup`], an index to [`Graph::pick`], a class
    /// to [`Graph::pick_neg_log_softmax`]) while tracing, and each call's
    /// `data` ([`Graph::call_with_data`]) takes its place. Its range is
    /// checked at each call.
    pub const DATA: u32 = u32::MAX;

    /// [`VertexFn::trace`] for a function that reads per-call data: `f`
    /// gets [`VertexFn::DATA`] to pass where an op takes its data (a word
    /// id, a class), and every call gives its own ([`Graph::call_with_data`]).
    /// A leaf of a tree model (the word's lookup and the cell) or a loss
    /// (the label) becomes one call node.
    pub fn trace_with_data(
        name: &'static str,
        args: &[Shape],
        f: impl FnOnce(&mut Graph, &[Expr], u32) -> Result<Vec<Expr>>,
    ) -> Result<VertexFn> {
        VertexFn::trace(name, args, |g, a| f(g, a, VertexFn::DATA))
    }

    /// Whether F reads per-call data ([`VertexFn::trace_with_data`]).
    pub fn reads_data(&self) -> bool {
        self.template.data_below.is_some()
    }

    /// The function's name (its op's name in plans and errors).
    pub fn name(&self) -> &'static str {
        self.template.name
    }

    /// The ops of one call.
    pub fn ops(&self) -> usize {
        self.template.steps.len()
    }

    /// Where F has concatenations that only products read (an affine
    /// layer on `[x_a; x_b]`): the ops of one call of
    /// [`VertexFn::with_split_products`].
    pub fn split_ops(&self) -> Option<usize> {
        self.split.as_ref().map(|t| t.steps.len())
    }

    /// F with every concatenation that only products read not made: each
    /// product reads the parts over column blocks of its weight (`W[:, a]
    /// x_a + W[:, b] x_b`), cut out per batch. It pays where batches have
    /// more calls than the weights have rows (W5's pairs: thousands of
    /// calls, weights of 50 rows; +7-17% there) and costs where they have
    /// fewer (a Tree-LSTM node's tree levels against a weight of `5 H`
    /// rows: -15% on W1). A function without such concatenations is
    /// returned as it is. Calls of the two are different ops (they never
    /// share a batch); values and gradients equal the traced F's up to
    /// the rounding of the sums in another order.
    pub fn with_split_products(&self) -> VertexFn {
        let mut f = self.clone();
        if let Some(split) = &self.split {
            f.op = Arc::new(CallOp(Arc::clone(split)));
        }
        f
    }

    /// The op of its call nodes (to check it like any op, e.g. with
    /// [`crate::testing::check_batching`]).
    pub fn op(&self) -> &Arc<dyn Op> {
        &self.op
    }

    /// The parameters F reads (shared by every call).
    pub fn params(&self) -> &[Param] {
        &self.template.params
    }
}

impl NodeKind {
    /// Whether the node is computed by an op (not an input or parameter).
    pub fn is_op(&self) -> bool {
        matches!(self, NodeKind::Op)
    }
}

fn numel(name: &str, s: Shape) -> Result<usize> {
    s.numel().map_err(|source| GraphError::Tensor {
        context: format!("vertex function `{name}`: shape {s}"),
        source: Box::new(source),
    })
}

impl Template {
    /// The steps F's output depends on, in tape order, with their sources
    /// and buffer regions.
    fn from_trace(
        g: &Graph,
        name: &'static str,
        arg_shapes: Vec<Shape>,
        tracing: &Tracing,
        out: NodeId,
        outputs: Vec<(usize, Shape)>,
        split: bool,
    ) -> Result<Template> {
        let (params, feeds) = (tracing.params.clone(), &tracing.feeds);
        // Only what the output needs (dead ops are dropped).
        let mut live = live_nodes(g, out, &[]);
        // Concatenations only products read are not made: the products
        // read their parts (and the weights' column blocks) instead.
        let split = match split {
            true => split::split_concats(g, &live, out),
            false => Vec::new(),
        };
        if split.contains(&true) {
            live = live_nodes(g, out, &split);
        }
        let mut blocks = Vec::new();
        let n_args = arg_shapes.len();
        let mut src: Vec<Option<Src>> = vec![None; out.index() + 1];
        let mut consts = Vec::new();
        let mut steps: Vec<Step> = Vec::new();
        let mut regions = Vec::new();
        let mut aux_len = 0;
        let mut keeps = 0;
        let mut region = |size: usize| {
            regions.push(Region {
                offset: aux_len,
                size,
            });
            aux_len += size;
            regions.len() - 1
        };
        for i in 0..=out.index() {
            if !live[i] {
                continue;
            }
            let id = NodeId(i as u32);
            let node = g.node(id);
            src[i] = Some(match node.kind() {
                NodeKind::Input(k) if (k as usize) < n_args => Src::Arg(k as usize),
                NodeKind::Input(k) => match feeds.iter().position(|r| r.input == k) {
                    Some(f) => Src::Feed(f),
                    None => {
                        let value = g
                            .input_value(k)
                            .cloned()
                            .ok_or_else(|| params_err(name, format!("constant {k} is missing")))?;
                        consts.push(value);
                        Src::Const(consts.len() - 1)
                    }
                },
                NodeKind::Param(p) => match params.iter().position(|q| q.id() == p) {
                    Some(k) => Src::Param(k),
                    None => return Err(params_err(name, "reads an unknown parameter".into())),
                },
                NodeKind::Op => {
                    let op = g.op_shared(id);
                    let ids = g.args(id);
                    let mut args = Vec::with_capacity(ids.len());
                    let mut shapes: Vec<Shape> = Vec::with_capacity(ids.len());
                    let traced = |a: NodeId| {
                        src[a.index()].ok_or_else(|| {
                            params_err(name, format!("node {a} is used before it is traced"))
                        })
                    };
                    for &a in ids {
                        if !split.get(a.index()).copied().unwrap_or(false) {
                            args.push(traced(a)?);
                            shapes.push(g.node(a).shape());
                            continue;
                        }
                        // A split concatenation: its weight (just pushed)
                        // becomes one column block per part.
                        let (Some(Src::Param(p)), Some(w)) = (args.pop(), shapes.pop()) else {
                            return Err(params_err(name, "a split product lost its weight".into()));
                        };
                        for (part, start, end) in split::parts(g, a) {
                            let block = Block {
                                param: p,
                                start,
                                end,
                            };
                            args.push(Src::Block(split::block_index(&mut blocks, block)));
                            shapes.push(split::block_shape(w.dims()[0], block));
                            args.push(traced(part)?);
                            shapes.push(g.node(part).shape());
                        }
                    }
                    if op.infer_shape(&shapes, node.attr()).ok() != Some(node.shape()) {
                        return Err(params_err(
                            name,
                            format!("{} over split concatenations changes its shape", op.name()),
                        ));
                    }
                    let n = args.len();
                    let mut roles = Vec::with_capacity(n);
                    for (k, &s) in args.iter().enumerate() {
                        let role = op.arg_role(k, n);
                        let per_call = matches!(s, Src::Arg(_) | Src::Step(_) | Src::Feed(_));
                        if role == ArgRole::Share && per_call {
                            return Err(params_err(
                                name,
                                format!(
                                    "{} takes argument {k} as one value for a whole batch (a \
                                     parameter's place), but in F it differs from call to call",
                                    op.name()
                                ),
                            ));
                        }
                        roles.push(role);
                    }
                    let aux = op.aux_shape(&node.shape(), &shapes, node.attr());
                    let aux = match aux {
                        Some(s) => Some((region(numel(name, s)?), s)),
                        None => None,
                    };
                    // The op's own kept tensors first, then the value (the
                    // order the call's forward keeps them in).
                    let kept_at = keeps;
                    keeps += op.keeps();
                    let value = (i != out.index()).then(|| {
                        keeps += 1;
                        keeps - 1
                    });
                    steps.push(Step {
                        op,
                        args,
                        roles,
                        attr: node.attr(),
                        data: node.data(),
                        shape: node.shape(),
                        value,
                        kept_at,
                        aux,
                    });
                    Src::Step(steps.len() - 1)
                }
            });
        }
        let batchable = steps.iter().all(|s| s.op.batchable());
        let cost = match steps.iter().any(|s| s.op.cost() == Cost::Heavy) {
            true => Cost::Heavy,
            false => Cost::Cheap,
        };
        Ok(Template {
            name,
            arg_shapes,
            params,
            feeds: feeds.iter().map(|r| r.feed.clone()).collect(),
            consts,
            blocks,
            out_shape: g.node(out).shape(),
            steps,
            regions,
            aux_len,
            keeps,
            data_below: None,
            fields: Fields::default(),
            outputs,
            batchable,
            cost,
        })
    }
}

/// Which nodes of the trace `out` depends on, reading the parts of the
/// `split` concatenations in their place.
fn live_nodes(g: &Graph, out: NodeId, split: &[bool]) -> Vec<bool> {
    let mut live = vec![false; out.index() + 1];
    live[out.index()] = true;
    for i in (0..=out.index()).rev() {
        if live[i] {
            for a in g.args(NodeId(i as u32)) {
                match split.get(a.index()).copied().unwrap_or(false) {
                    true => g.args(*a).iter().for_each(|p| live[p.index()] = true),
                    false => live[a.index()] = true,
                }
            }
        }
    }
    live
}

impl Graph {
    /// [`Graph::call`] of a function with one output: that output (no
    /// vector to allocate). Errors as `call` does, and if `f` has several
    /// outputs.
    pub fn call_one(&mut self, f: &VertexFn, args: &[Expr]) -> Result<Expr> {
        let t = &f.template;
        if t.outputs.len() != 1 {
            return Err(params_err(
                t.name,
                format!("has {} outputs: call it with Graph::call", t.outputs.len()),
            ));
        }
        no_data(f)?;
        self.call_node(f, args, VertexFn::DATA)
    }

    /// One call of `f`, a function traced with per-call data
    /// ([`VertexFn::trace_with_data`]), on `args` with `data` in the place
    /// of [`VertexFn::DATA`]; F must have one output.
    ///
    /// Errors: as [`Graph::call_one`]; `data` out of the range an op of F
    /// takes (a word id beyond the table, naming F and the bound).
    pub fn call_with_data(&mut self, f: &VertexFn, args: &[Expr], data: u32) -> Result<Expr> {
        let t = &f.template;
        let Some(below) = t.data_below else {
            return Err(params_err(
                t.name,
                "reads no per-call data: call it with Graph::call_one".into(),
            ));
        };
        if !t.fields.is_empty() {
            return Err(params_err(
                t.name,
                "reads per-call fields: call it with Graph::call_with_fields".into(),
            ));
        }
        // Inside another function's trace, that function's data may be
        // passed on (its bound then includes this one's).
        if !self.call_data_below(data, below) && data as usize >= below {
            return Err(GraphError::Data {
                op: t.name,
                what: format!("per-call data {data} is out of range: F takes values below {below}"),
            });
        }
        if t.outputs.len() != 1 {
            return Err(params_err(
                t.name,
                format!("has {} outputs: per-call data takes one", t.outputs.len()),
            ));
        }
        for feed in &t.feeds {
            let (_, rows) = self.bound_feed(t.name, feed)?;
            if data as usize >= rows {
                return Err(GraphError::Data {
                    op: t.name,
                    what: format!(
                        "per-call data {data} reads row {data} of feed `{}`, which has {rows}",
                        feed.name()
                    ),
                });
            }
        }
        self.call_node(f, args, data)
    }

    /// The call node itself (its output is every output, concatenated),
    /// the general way (see `build.rs`).
    fn call_node_general(&mut self, f: &VertexFn, args: &[Expr], data: u32) -> Result<Expr> {
        let t = &f.template;
        if args.len() != t.arg_shapes.len() {
            return Err(params_err(
                t.name,
                format!(
                    "called with {} argument(s), traced with {}",
                    args.len(),
                    t.arg_shapes.len()
                ),
            ));
        }
        // The graph's scratch list, so that a call allocates nothing.
        let mut all = std::mem::take(&mut self.scratch_exprs);
        all.clear();
        all.extend_from_slice(args);
        for p in &t.params {
            all.push(self.param(p));
        }
        for feed in &t.feeds {
            match self.bound_feed(t.name, feed) {
                Ok((node, _)) => all.push(self.expr(node)),
                Err(e) => {
                    self.scratch_exprs = all;
                    return Err(e);
                }
            }
        }
        let call = self.apply_with_data(&f.op, &all, 0, data);
        self.scratch_exprs = all;
        call
    }

    /// Adds one call of `f` on `args` (each of the shape `f` was traced
    /// with) and returns its outputs: the node itself for one output,
    /// views of it ([`Graph::slice`], reshaped back) for several.
    ///
    /// Errors: a wrong number of arguments, or an argument of another
    /// shape than traced (naming F, the argument and both shapes).
    pub fn call(&mut self, f: &VertexFn, args: &[Expr]) -> Result<Vec<Expr>> {
        let t = &f.template;
        no_data(f)?;
        let call = self.call_node(f, args, VertexFn::DATA)?;
        if t.outputs.len() == 1 {
            return Ok(vec![call]);
        }
        let mut outs = Vec::with_capacity(t.outputs.len());
        for &(offset, shape) in &t.outputs {
            let n = numel(t.name, shape)?;
            let mut o = self.slice(call, offset, offset + n)?;
            if shape.rank() != 1 {
                o = self.reshape(o, shape)?;
            }
            outs.push(o);
        }
        Ok(outs)
    }
}
