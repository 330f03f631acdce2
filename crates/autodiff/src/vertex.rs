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
//! F's intermediates live in the call's auxiliary buffer (one contiguous
//! region per intermediate, batch-major inside it), next to the inner ops'
//! own auxiliary buffers, so backward replays F in reverse from them. Calls
//! may nest: a call node inside F is one more op of the template.

use std::sync::Arc;

use sheaf_tensor::{Backend, DType, Device, Shape, Tensor, TensorMut};

use crate::error::{GraphError, Result};
use crate::exec::GraphExec;
use crate::graph::{Graph, NodeKind};
use crate::id::{Expr, NodeId};
use crate::op::{ArgRole, Attr, Backward, Cost, Forward, Op, ShapeError};
use crate::params::Param;

/// A traced vertex function; cheap to clone (shared template).
#[derive(Clone)]
pub struct VertexFn {
    op: Arc<dyn Op>,
    template: Arc<Template>,
}

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
enum Src {
    /// Argument `i` of the call.
    Arg(usize),
    /// Parameter `i` of the template (argument `n_args + i` of the call).
    Param(usize),
    /// Constant `i` of the template.
    Const(usize),
    /// The output of step `i`.
    Step(usize),
}

/// One op of the template.
struct Step {
    op: Arc<dyn Op>,
    args: Vec<Src>,
    roles: Vec<ArgRole>,
    attr: Attr,
    data: u32,
    shape: Shape,
    /// The region of the call's auxiliary buffer holding this step's value
    /// (every step but the last, whose value is the call's output).
    value: Option<usize>,
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
    consts: Vec<Tensor>,
    steps: Vec<Step>,
    regions: Vec<Region>,
    /// Values per instance in the auxiliary buffer.
    aux_len: usize,
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
        let mut g = Graph::new();
        g.tracing = Some(Box::new(Tracing {
            name,
            params: Vec::new(),
        }));
        let mut placeholders = Vec::with_capacity(args.len());
        for s in args {
            let zero = Tensor::zeros(*s, DType::F32, Device::Cpu).map_err(|source| {
                GraphError::Tensor {
                    context: format!("vertex function `{name}`: placeholder of shape {s}"),
                    source: Box::new(source),
                }
            })?;
            placeholders.push(g.input(zero));
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
        let template =
            Template::from_trace(&g, name, args.to_vec(), tracing.params, out_node, outputs)?;
        let template = Arc::new(template);
        Ok(VertexFn {
            op: Arc::new(CallOp(Arc::clone(&template))),
            template,
        })
    }

    /// The function's name (its op's name in plans and errors).
    pub fn name(&self) -> &'static str {
        self.template.name
    }

    /// The ops of one call.
    pub fn ops(&self) -> usize {
        self.template.steps.len()
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
        params: Vec<Param>,
        out: NodeId,
        outputs: Vec<(usize, Shape)>,
    ) -> Result<Template> {
        // Only what the output needs (dead ops are dropped).
        let mut live = vec![false; out.index() + 1];
        live[out.index()] = true;
        for i in (0..=out.index()).rev() {
            if live[i] {
                for a in g.args(NodeId(i as u32)) {
                    live[a.index()] = true;
                }
            }
        }
        let n_args = arg_shapes.len();
        let mut src: Vec<Option<Src>> = vec![None; out.index() + 1];
        let mut consts = Vec::new();
        let mut steps: Vec<Step> = Vec::new();
        let mut regions = Vec::new();
        let mut aux_len = 0;
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
                NodeKind::Input(k) => {
                    let value = g
                        .input_value(k)
                        .cloned()
                        .ok_or_else(|| params_err(name, format!("constant {k} is missing")))?;
                    consts.push(value);
                    Src::Const(consts.len() - 1)
                }
                NodeKind::Param(p) => match params.iter().position(|q| q.id() == p) {
                    Some(k) => Src::Param(k),
                    None => return Err(params_err(name, "reads an unknown parameter".into())),
                },
                NodeKind::Op => {
                    let op = g.op_shared(id);
                    let ids = g.args(id);
                    let n = ids.len();
                    let mut args = Vec::with_capacity(n);
                    let mut roles = Vec::with_capacity(n);
                    for (k, a) in ids.iter().enumerate() {
                        let s = src[a.index()].ok_or_else(|| {
                            params_err(name, format!("node {a} is used before it is traced"))
                        })?;
                        let role = op.arg_role(k, n);
                        if role == ArgRole::Share && matches!(s, Src::Arg(_) | Src::Step(_)) {
                            return Err(params_err(
                                name,
                                format!(
                                    "{} takes argument {k} as one value for a whole batch (a \
                                     parameter's place), but in F it differs from call to call",
                                    op.name()
                                ),
                            ));
                        }
                        args.push(s);
                        roles.push(role);
                    }
                    let shapes: Vec<Shape> = ids.iter().map(|a| g.node(*a).shape()).collect();
                    let aux = op.aux_shape(&node.shape(), &shapes, node.attr());
                    let aux = match aux {
                        Some(s) => Some((region(numel(name, s)?), s)),
                        None => None,
                    };
                    let value = match i == out.index() {
                        true => None,
                        false => Some(region(numel(name, node.shape())?)),
                    };
                    steps.push(Step {
                        op,
                        args,
                        roles,
                        attr: node.attr(),
                        data: node.data(),
                        shape: node.shape(),
                        value,
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
            consts,
            out_shape: g.node(out).shape(),
            steps,
            regions,
            aux_len,
            outputs,
            batchable,
            cost,
        })
    }
}

impl Graph {
    /// Adds one call of `f` on `args` (each of the shape `f` was traced
    /// with) and returns its outputs: the node itself for one output,
    /// views of it ([`Graph::slice`], reshaped back) for several.
    ///
    /// Errors: a wrong number of arguments, or an argument of another
    /// shape than traced (naming F, the argument and both shapes).
    pub fn call(&mut self, f: &VertexFn, args: &[Expr]) -> Result<Vec<Expr>> {
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
        let mut all = Vec::with_capacity(args.len() + t.params.len());
        all.extend_from_slice(args);
        for p in &t.params {
            all.push(self.param(p));
        }
        let call = self.apply(&f.op, &all, 0)?;
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

/// The op of a call node: runs the template over a batch of calls.
struct CallOp(Arc<Template>);

/// A per-step seed from a call's seed: each op of F draws its own stream.
fn step_seed(seed: u64, step: usize) -> u64 {
    // SplitMix64's finaliser over the call's seed and the step.
    let mut z = seed ^ (step as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Buffers of earlier batches, per thread, for the next ones: a batch's
/// intermediates and gradients are dropped when its call returns, and
/// fresh allocations of that size cost page faults on every batch.
mod pool {
    use std::cell::RefCell;

    use sheaf_tensor::{DType, Device, Shape, Tensor};

    /// Buffers kept per thread.
    const KEEP: usize = 64;

    thread_local! {
        static FREE: RefCell<Vec<Tensor>> = const { RefCell::new(Vec::new()) };
    }

    /// A host buffer of `shape` from the pool (zero-filled when `zero`),
    /// or a fresh one; device buffers are always fresh.
    pub(super) fn take(shape: Shape, zero: bool, device: Device) -> sheaf_tensor::Result<Tensor> {
        if device == Device::Cpu {
            let n = shape.numel()?;
            let found = FREE.with(|f| {
                let mut f = f.borrow_mut();
                let i = f.iter().position(|t| t.capacity() >= n)?;
                Some(f.swap_remove(i))
            });
            if let Some(t) = found {
                let t = match zero {
                    true => t.recycle(shape, DType::F32),
                    false => t.reuse(shape, DType::F32),
                };
                if let Ok(t) = t {
                    return Ok(t);
                }
            }
        }
        Tensor::zeros(shape, DType::F32, device)
    }

    /// Keeps `t` for a later [`take`] if no one else holds its buffer.
    pub(super) fn give(t: Tensor) {
        if t.device() == Device::Cpu && t.is_unique() {
            FREE.with(|f| {
                let mut f = f.borrow_mut();
                if f.len() < KEEP {
                    f.push(t);
                }
            });
        }
    }
}

/// A `[b, ...shape]` buffer whose contents the caller overwrites.
fn alloc(backend: &dyn Backend, b: usize, shape: Shape) -> sheaf_tensor::Result<Tensor> {
    pool::take(Shape::stack(b, shape)?, false, backend.device())
}

/// A zero-filled `[b, ...shape]` buffer (a gradient to add to).
fn alloc_zeroed(backend: &dyn Backend, b: usize, shape: Shape) -> sheaf_tensor::Result<Tensor> {
    pool::take(Shape::stack(b, shape)?, true, backend.device())
}

impl CallOp {
    /// The `[b, ...]` (or shared) value of an inner argument.
    fn arg(
        &self,
        backend: &dyn Backend,
        call_args: &[Tensor],
        values: &[Option<Tensor>],
        src: Src,
        role: ArgRole,
        b: usize,
    ) -> sheaf_tensor::Result<Tensor> {
        let t = &self.0;
        let shared = match src {
            Src::Arg(i) => return Ok(call_args[i].clone()),
            Src::Step(i) => {
                return values[i]
                    .clone()
                    .ok_or(sheaf_tensor::TensorError::MissingArgument {
                        op: "vertex function",
                        arg: "an inner op's value",
                        when: "a later op of F reads it",
                    })
            }
            Src::Param(i) => call_args[t.arg_shapes.len() + i].clone(),
            Src::Const(i) => t.consts[i].to_device(backend.device())?,
        };
        match role {
            ArgRole::Share => Ok(shared),
            // One value for every call, where the op reads one per call.
            ArgRole::Stack => {
                let mut rows = alloc(backend, b, shared.shape())?;
                let flat = shared.reshape([shared.numel()])?;
                let mut view = rows.view_mut()?;
                let n = view.numel();
                view = view.reshape([b, n / b.max(1)])?;
                backend.broadcast_row(&flat, view)?;
                Ok(rows)
            }
        }
    }
}

/// The regions of the auxiliary buffer `[b, aux_len]` as separate mutable
/// views, each `[b * size]`.
fn split_regions<'a>(
    aux: Option<TensorMut<'a>>,
    regions: &[Region],
    b: usize,
) -> sheaf_tensor::Result<Vec<Option<TensorMut<'a>>>> {
    let mut out = Vec::with_capacity(regions.len());
    let Some(aux) = aux else {
        return Ok(out);
    };
    let total = aux.numel();
    let mut rest = aux.reshape([total])?;
    for r in regions {
        let (head, tail) = rest.into_split_rows(b * r.size)?;
        out.push(Some(head));
        rest = tail;
    }
    Ok(out)
}

/// Region `r` of the saved auxiliary buffer, as `[b, ...shape]`.
fn region_view(aux: &Tensor, r: Region, b: usize, shape: Shape) -> sheaf_tensor::Result<Tensor> {
    let flat = aux.reshape([aux.numel()])?;
    flat.rows(b * r.offset..b * (r.offset + r.size))?
        .reshape(Shape::stack(b, shape)?)
}

impl Op for CallOp {
    fn name(&self) -> &'static str {
        self.0.name
    }

    fn arg_role(&self, i: usize, _n: usize) -> ArgRole {
        match i < self.0.arg_shapes.len() {
            true => ArgRole::Stack,
            false => ArgRole::Share,
        }
    }

    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> std::result::Result<Shape, ShapeError> {
        let t = &self.0;
        let want = t.arg_shapes.len() + t.params.len();
        if args.len() != want {
            return Err(ShapeError::expected(format!(
                "{} arguments and {} parameters",
                t.arg_shapes.len(),
                t.params.len()
            )));
        }
        for (i, (given, traced)) in args.iter().zip(&t.arg_shapes).enumerate() {
            if given != traced {
                return Err(ShapeError::expected(format!(
                    "argument {i} of shape {traced} (as traced), not {given}"
                )));
            }
        }
        for (k, (p, given)) in t.params.iter().zip(&args[t.arg_shapes.len()..]).enumerate() {
            if p.shape() != *given {
                return Err(ShapeError::expected(format!(
                    "parameter {k} of shape {}, not {given}",
                    p.shape()
                )));
            }
        }
        Ok(t.out_shape)
    }

    fn aux_shape(&self, _out: &Shape, _args: &[Shape], _attr: Attr) -> Option<Shape> {
        (self.0.aux_len > 0).then(|| Shape::from([self.0.aux_len]))
    }

    fn batchable(&self) -> bool {
        self.0.batchable
    }

    fn cost(&self) -> Cost {
        self.0.cost
    }

    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let t = &self.0;
        let b = cx.batch();
        let be = cx.backend;
        let mut regions = split_regions(cx.aux, &t.regions, b)?;
        let mut values: Vec<Option<Tensor>> = vec![None; t.steps.len()];
        let mut out = Some(cx.out);
        let last = t.steps.len() - 1;
        let mut seeds = vec![0u64; b];
        let mut data = vec![0u32; b];
        for (j, s) in t.steps.iter().enumerate() {
            let args = s
                .args
                .iter()
                .zip(&s.roles)
                .map(|(&src, &role)| self.arg(be, cx.args, &values, src, role, b))
                .collect::<sheaf_tensor::Result<Vec<_>>>()?;
            for (k, &seed) in cx.seeds.iter().enumerate() {
                seeds[k] = step_seed(seed, j);
            }
            data.fill(s.data);
            let aux = match s.aux {
                Some((r, shape)) => match regions[r].take() {
                    Some(a) => Some(a.reshape(Shape::stack(b, shape)?)?),
                    None => None,
                },
                None => None,
            };
            let mut own = match j == last {
                true => None,
                false => Some(alloc(be, b, s.shape)?),
            };
            let dst = match (&mut own, out.take()) {
                (Some(own), rest) => {
                    out = rest;
                    own.view_mut()?
                }
                (None, Some(o)) => o,
                (None, None) => {
                    return Err(sheaf_tensor::TensorError::MissingArgument {
                        op: "vertex function",
                        arg: "out",
                        when: "its last op runs",
                    })
                }
            };
            s.op.forward(Forward {
                backend: be,
                args: &args,
                data: &data,
                attr: s.attr,
                seeds: &seeds,
                train: cx.train,
                out: dst,
                aux,
            })?;
            if let (Some(v), Some(r)) = (own, s.value) {
                if let Some(dst) = regions[r].take() {
                    let dst = dst.reshape(Shape::stack(b, s.shape)?)?;
                    be.copy_rows(&v, 0, dst, 0, b)?;
                }
                values[j] = Some(v);
            }
            args.into_iter().for_each(pool::give);
        }
        values.into_iter().flatten().for_each(pool::give);
        Ok(())
    }

    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let t = &self.0;
        let b = cx.batch();
        let (be, call_args, aux, dout, out) = (cx.backend, cx.args, cx.aux, cx.dout, cx.out);
        let n_args = t.arg_shapes.len();
        let last = t.steps.len() - 1;
        // Every step's value: saved regions, the last one the output.
        let mut values: Vec<Option<Tensor>> = Vec::with_capacity(t.steps.len());
        for s in &t.steps {
            values.push(match (s.value, aux) {
                (Some(r), Some(a)) => Some(region_view(a, t.regions[r], b, s.shape)?),
                _ => None,
            });
        }
        values[last] = Some(out.clone());
        // Gradients of the steps' values, made when one first arrives.
        let mut grads: Vec<Option<Tensor>> = vec![None; t.steps.len()];
        let mut seeds = vec![0u64; b];
        let mut data = vec![0u32; b];
        for j in (0..=last).rev() {
            let s = &t.steps[j];
            let dstep = match j == last {
                true => dout.clone(),
                // No gradient reached this step: nothing flows through it.
                false => match grads[j].take() {
                    Some(g) => g,
                    None => continue,
                },
            };
            let args = s
                .args
                .iter()
                .zip(&s.roles)
                .map(|(&src, &role)| self.arg(be, call_args, &values, src, role, b))
                .collect::<sheaf_tensor::Result<Vec<_>>>()?;
            let inner_aux = match (s.aux, aux) {
                (Some((r, shape)), Some(a)) => Some(region_view(a, t.regions[r], b, shape)?),
                _ => None,
            };
            for (k, &seed) in cx.seeds.iter().enumerate() {
                seeds[k] = step_seed(seed, j);
            }
            data.fill(s.data);
            let value = values[j].clone().unwrap_or_else(|| out.clone());
            // Where each argument's gradient goes. A target used twice by
            // this op (or a parameter read per call) gets a buffer of its
            // own, added to the target afterwards.
            let mut held: Vec<Option<Tensor>> = vec![None; s.args.len()];
            let mut direct: Vec<bool> = vec![false; s.args.len()];
            let mut seen: Vec<Src> = Vec::new();
            for (k, (&src, &role)) in s.args.iter().zip(&s.roles).enumerate() {
                let wants = match src {
                    Src::Const(_) => false,
                    Src::Arg(i) | Src::Param(i) => {
                        let i = if let Src::Param(_) = src {
                            n_args + i
                        } else {
                            i
                        };
                        cx.dargs.get(i).is_some_and(|d| d.is_some())
                    }
                    Src::Step(_) => true,
                };
                if !wants {
                    continue;
                }
                let repeated = seen.contains(&src);
                seen.push(src);
                let broadcast =
                    matches!(src, Src::Param(_) | Src::Const(_)) && role == ArgRole::Stack;
                match src {
                    Src::Step(m) if !repeated => {
                        held[k] = Some(match grads[m].take() {
                            Some(g) => g,
                            None => alloc_zeroed(be, b, t.steps[m].shape)?,
                        });
                        direct[k] = true;
                    }
                    Src::Arg(_) | Src::Param(_) if !repeated && !broadcast => direct[k] = true,
                    _ => held[k] = Some(alloc_like(be, &args[k])?),
                }
            }
            let mut touched: Vec<(usize, Vec<u32>)> = Vec::new();
            {
                let mut outer: Vec<Option<&mut TensorMut<'_>>> =
                    cx.dargs.iter_mut().map(|d| d.as_mut()).collect();
                let mut dargs: Vec<Option<TensorMut<'_>>> = Vec::with_capacity(s.args.len());
                for (h, (&src, &d)) in held.iter_mut().zip(s.args.iter().zip(&direct)) {
                    dargs.push(match (h, d, src) {
                        (Some(h), _, _) => Some(h.view_mut()?),
                        (None, true, Src::Arg(i)) => outer[i].take().map(|t| t.reborrow()),
                        (None, true, Src::Param(i)) => {
                            outer[n_args + i].take().map(|t| t.reborrow())
                        }
                        _ => None,
                    });
                }
                let mut inner = Backward::new(
                    be,
                    &args,
                    &data,
                    s.attr,
                    &seeds,
                    &value,
                    inner_aux.as_ref(),
                    &dstep,
                    dargs,
                );
                s.op.backward(&mut inner)?;
                for (a, rows) in inner.touched_rows() {
                    if let Some(Src::Param(i)) = s.args.get(*a) {
                        touched.push((n_args + i, rows.clone()));
                    }
                }
            }
            for (a, rows) in touched {
                cx.touch_rows(a, &rows);
            }
            // Hand the held buffers on: a step's gradient back to its slot,
            // a repeated or broadcast one added to its target.
            for (k, h) in held.into_iter().enumerate() {
                let Some(h) = h else { continue };
                let src = s.args[k];
                match src {
                    Src::Step(m) if direct[k] => {
                        grads[m] = Some(h);
                        continue;
                    }
                    Src::Step(m) => {
                        let g = match &mut grads[m] {
                            Some(g) => g,
                            slot => slot.insert(alloc_zeroed(be, b, t.steps[m].shape)?),
                        };
                        be.axpy(1.0, &h, g.view_mut()?)?;
                    }
                    Src::Arg(i) => {
                        if let Some(Some(d)) = cx.dargs.get_mut(i) {
                            be.axpy(1.0, &h, d.reborrow())?;
                        }
                    }
                    Src::Param(i) => {
                        if let Some(Some(d)) = cx.dargs.get_mut(n_args + i) {
                            add_param_grad(be, &h, s.roles[k], b, d.reborrow())?;
                        }
                    }
                    Src::Const(_) => {}
                }
                pool::give(h);
            }
            args.into_iter().for_each(pool::give);
            pool::give(dstep);
        }
        grads.into_iter().flatten().for_each(pool::give);
        Ok(())
    }
}

/// A zeroed buffer shaped like `t`.
fn alloc_like(be: &dyn Backend, t: &Tensor) -> sheaf_tensor::Result<Tensor> {
    pool::take(t.shape(), true, be.device())
}

/// Adds a parameter's gradient `g` to `dst`: as it is where the op read the
/// parameter once, summed over the batch where it read one copy per call.
fn add_param_grad(
    be: &dyn Backend,
    g: &Tensor,
    role: ArgRole,
    b: usize,
    dst: TensorMut<'_>,
) -> sheaf_tensor::Result<()> {
    match role {
        ArgRole::Share => be.axpy(1.0, g, dst),
        ArgRole::Stack => {
            let n = dst.numel();
            let rows = g.reshape([b, n])?;
            let zeros = Tensor::from_vec(vec![0u32; b], [b])?.to_device(be.device())?;
            be.scatter_add_rows(&rows, &zeros, dst.reshape([1, n])?)
        }
    }
}
