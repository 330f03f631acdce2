//! The [`Graph`]: a tape (Wengert list) of per-instance nodes, built lazily.
//!
//! Adding a node computes nothing: it checks and infers the shape, interns
//! the node's batching signature and records its depth — everything the
//! scheduler needs later, computed once here so planning is a linear pass.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use sheaf_tensor::{Shape, Tensor};
use smallvec::SmallVec;

use crate::error::{GraphError, Result};
use crate::id::{Expr, NodeId, OpId, SigId};
use crate::op::{ArgRole, Attr, Cost, Op};
use crate::ops::leaves::{instances, LeafOp};
use crate::params::{Param, ParamId};
use crate::slots::Slots;

/// Source of unique graph keys, so handles of two graphs never mix.
static NEXT_GRAPH: AtomicU32 = AtomicU32::new(1);

/// What a node is, beyond its op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// Computed by its op from its arguments.
    Op,
    /// A constant input; its value is `inputs[i]`.
    Input(u32),
    /// A parameter of a [`crate::ParamStore`]; its value is read at forward.
    Param(ParamId),
}

/// One node of the tape, as [`Graph::node`] returns it.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    pub(crate) kind: NodeKind,
    pub(crate) attr: Attr,
    pub(crate) data: u32,
    pub(crate) shape: Shape,
    pub(crate) sig: SigId,
    pub(crate) depth: u32,
}

/// A node as the graph stores it, in 32 bytes: the shape interned (a
/// per-graph id into `Graph::shapes`), signature and depth in the node's
/// [`PlanNode`]. Building a million nodes writes a third of what a whole
/// [`Node`] (about 100 bytes with its inline shape) would.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeRec {
    pub(crate) op: OpId,
    pub(crate) data: u32,
    attr: Attr,
    pub(crate) kind: NodeKind,
    pub(crate) shape: u32,
}

/// What planning reads of a node, packed in 24 bytes with up to three
/// arguments inline: planning a million nodes is bound by the cache misses
/// of the nodes it visits in batch order, and an argument list elsewhere
/// would be a second miss per node. Read the arguments with
/// [`GraphExec::plan_args`](crate::exec::GraphExec::plan_args).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanNode {
    /// The node's batching signature.
    pub sig: SigId,
    /// Its depth, or `u32::MAX` for a leaf (an input or parameter, which
    /// no kernel computes).
    pub depth: u32,
    /// The number of arguments.
    pub(crate) arity: u32,
    /// Up to [`PlanNode::INLINE`] arguments; more are in the graph's
    /// argument list from index `args[0]` on.
    pub(crate) args: [NodeId; PlanNode::INLINE],
}

impl PlanNode {
    /// Arguments kept in the node itself.
    pub const INLINE: usize = 3;

    /// The number of arguments.
    pub fn arity(&self) -> usize {
        self.arity as usize
    }

    /// Whether a kernel computes the node (it is not a leaf).
    pub fn is_op(&self) -> bool {
        self.depth != u32::MAX
    }
}

/// What the scheduler needs to know about a signature.
#[derive(Debug, Clone)]
pub struct SigInfo {
    /// The op of every node with this signature.
    pub op: OpId,
    /// Its name, for plans and errors.
    pub name: &'static str,
    /// Its cost class.
    pub cost: Cost,
    /// Whether nodes of this signature may share a call.
    pub batchable: bool,
}

/// The tape. `Send`: build and run graphs on several threads against one
/// shared [`crate::ParamStore`].
pub struct Graph {
    pub(crate) key: u32,
    pub(crate) generation: u32,
    pub(crate) nodes: Vec<NodeRec>,
    /// The distinct shapes of the graph's nodes, and their ids.
    pub(crate) shapes: Vec<Shape>,
    shape_ids: FxHashMap<Shape, u32>,
    /// The shape id interned last.
    last_shape: u32,
    /// The planning view of `nodes`, kept in step.
    pub(crate) plan_nodes: Vec<PlanNode>,
    /// The arguments of nodes with more than [`PlanNode::INLINE`].
    pub(crate) arg_list: Vec<NodeId>,
    ops: Vec<Arc<dyn Op>>,
    user_ops: FxHashMap<usize, OpId>,
    sig_ids: FxHashMap<SmallVec<[u64; 10]>, SigId>,
    /// Scratch of `push`: the arguments' shapes and the signature key,
    /// kept to spare building a node two small-vector set-ups.
    scratch_shapes: Vec<Shape>,
    scratch_shape_ids: Vec<u32>,
    scratch_key: Vec<u64>,
    /// A vertex call's arguments and parameters (`vertex/mod.rs`).
    pub(crate) scratch_exprs: Vec<Expr>,
    /// Per vertex function (its op's address), what every call of it in
    /// this graph shares (`vertex/build.rs`).
    pub(crate) call_cache: FxHashMap<usize, crate::vertex::CallCache>,
    /// Feeds bound in this graph ([`Graph::bind_feed`]).
    pub(crate) feeds: Vec<crate::vertex::Bound>,
    /// Per op id, what building its nodes reuses (see [`OpCache`]).
    op_cache: Vec<OpCache>,
    pub(crate) sigs: Vec<SigInfo>,
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) param_nodes: FxHashMap<ParamId, NodeId>,
    /// Values of evaluated nodes (per-instance shape, no batch axis).
    pub(crate) values: Slots,
    /// Auxiliary buffers saved by forward for backward.
    pub(crate) aux: Slots,
    /// What forwards run one node at a time kept ([`crate::Keep`]), by node.
    pub(crate) kept: FxHashMap<u32, Vec<Tensor>>,
    /// Gradients after the last backward.
    pub(crate) grads: Slots,
    /// Nodes `0..evaluated` have values (incremental forward).
    pub(crate) evaluated: usize,
    pub(crate) train: bool,
    pub(crate) seed: u64,
    pub(crate) check_finite: bool,
    /// Set while a vertex function is traced on this graph.
    pub(crate) tracing: Option<Box<crate::vertex::Tracing>>,
    /// The store stamp ([`crate::ParamStore`]'s key and version) the
    /// values were computed with (see
    /// [`GraphExec::restore_params`](crate::exec::GraphExec::restore_params)).
    pub(crate) ran_with: Option<(u32, u64)>,
    /// Whether parameter values were let go after a backward (see
    /// [`GraphExec::release_params`](crate::exec::GraphExec::release_params)).
    pub(crate) params_released: bool,
}

/// What building nodes of one op reuses from node to node, instead of
/// asking the op (virtual calls) or the signature map each time.
#[derive(Default)]
struct OpCache {
    /// Whether the entry is filled.
    known: bool,
    /// [`Op::batchable`].
    batchable: bool,
    /// The argument count `shared` was computed for (0 while none).
    arity: usize,
    /// Bit `i`: argument `i` of `arity` is [`ArgRole::Share`] (arities up
    /// to 64; larger ones ask the op).
    shared: u64,
    /// The last signature key interned for the op, and its id (a model
    /// adds runs of nodes of one signature).
    key: Vec<u64>,
    sig: Option<SigId>,
    /// The last output shape and its id (a run of nodes of one op mostly
    /// has one shape).
    out: Option<(Shape, u32)>,
}

impl Default for Graph {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("nodes", &self.nodes.len())
            .field("evaluated", &self.evaluated)
            .field("signatures", &self.sigs.len())
            .finish()
    }
}

/// Creating, clearing and configuring a graph, adding its leaves (inputs,
/// parameters, users' ops) and reading results. The ops follow, one block
/// per family; executors use [`crate::exec::GraphExec`].
impl Graph {
    /// An empty graph in training mode, seed 0.
    pub fn new() -> Self {
        Graph {
            key: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            generation: 0,
            nodes: Vec::new(),
            shapes: Vec::new(),
            shape_ids: FxHashMap::default(),
            last_shape: 0,
            plan_nodes: Vec::new(),
            arg_list: Vec::new(),
            ops: instances(),
            user_ops: FxHashMap::default(),
            sig_ids: FxHashMap::default(),
            scratch_shapes: Vec::new(),
            scratch_exprs: Vec::new(),
            call_cache: FxHashMap::default(),
            feeds: Vec::new(),
            scratch_shape_ids: Vec::new(),
            scratch_key: Vec::new(),
            op_cache: Vec::new(),
            sigs: Vec::new(),
            inputs: Vec::new(),
            param_nodes: FxHashMap::default(),
            values: Slots::default(),
            aux: Slots::default(),
            kept: FxHashMap::default(),
            grads: Slots::default(),
            evaluated: 0,
            train: true,
            seed: 0,
            check_finite: false,
            tracing: None,
            ran_with: None,
            params_released: false,
        }
    }

    /// Drops every node (handles become stale) but keeps the allocations
    /// for the next batch. Settings (mode, seed, checking) are kept.
    pub fn clear(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.nodes.clear();
        self.shapes.clear();
        self.shape_ids.clear();
        self.last_shape = 0;
        self.plan_nodes.clear();
        self.arg_list.clear();
        self.sig_ids.clear();
        // Op ids are handed out again from the next graph on.
        self.op_cache.clear();
        self.sigs.clear();
        self.inputs.clear();
        self.param_nodes.clear();
        self.values.clear();
        self.aux.clear();
        self.kept.clear();
        self.grads.clear();
        self.evaluated = 0;
        self.ran_with = None;
        self.params_released = false;
        self.ops.truncate(LeafOp::ALL.len());
        self.user_ops.clear();
        self.call_cache.clear();
        self.feeds.clear();
    }

    /// Training mode turns dropout on; evaluation mode makes it the identity.
    pub fn set_train(&mut self, train: bool) {
        self.train = train;
    }

    /// Whether dropout is active (see [`Graph::set_train`]).
    pub fn is_train(&self) -> bool {
        self.train
    }

    /// Seed of the per-node random streams (dropout masks). A node's stream
    /// depends only on this seed and the node's position, so every strategy
    /// draws the same masks.
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
    }

    /// Check every computed value and gradient for NaN / infinity; the
    /// error names the first op and node that produced one.
    pub fn set_check_finite(&mut self, on: bool) {
        self.check_finite = on;
    }

    /// Whether NaN / infinity checking is on (see
    /// [`Graph::set_check_finite`]).
    pub fn checks_finite(&self) -> bool {
        self.check_finite
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Adds a constant input (a feature vector, a target).
    pub fn input(&mut self, value: Tensor) -> Expr {
        let shape = value.shape();
        let index = self.inputs.len() as u32;
        self.inputs.push(value);
        self.push_leaf(LeafOp::Input, NodeKind::Input(index), shape)
    }

    /// The node of a parameter; one node per parameter and graph, so every
    /// use shares it (and the nodes using it may share a batch).
    pub fn param(&mut self, p: &Param) -> Expr {
        if let Some(&node) = self.param_nodes.get(&p.id()) {
            return self.expr(node);
        }
        let e = self.push_leaf(LeafOp::Parameter, NodeKind::Param(p.id()), p.shape());
        self.param_nodes.insert(p.id(), e.node);
        if let Some(t) = &mut self.tracing {
            t.params.push(*p);
        }
        e
    }

    /// Applies a user-defined op (see [`Op`]); the same `Arc` on every call
    /// lets its nodes share batches.
    pub fn apply(&mut self, op: &Arc<dyn Op>, args: &[Expr], attr: Attr) -> Result<Expr> {
        self.apply_with_data(op, args, attr, 0)
    }

    /// Per-instance shape of a node.
    pub fn shape(&self, e: Expr) -> Result<Shape> {
        let node = self.check(e, "shape")?;
        Ok(self.shapes[self.nodes[node.index()].shape as usize])
    }

    /// The value of an evaluated node (per-instance shape). A parameter's
    /// node holds its value only until backward is done (read it with
    /// [`crate::ParamStore::value`]): the graph lets go of parameters then,
    /// so that an optimizer step writes them in place.
    pub fn value(&self, e: Expr) -> Result<&Tensor> {
        let node = self.check(e, "value")?;
        if let Some(t) = &self.tracing {
            return Err(GraphError::Params(format!(
                "vertex function `{}` reads the value of node {node} while it is traced: a \
                 vertex function must be static (its ops may not depend on values)",
                t.name
            )));
        }
        let released = self.params_released
            && matches!(self.nodes[node.index()].kind, NodeKind::Param(_))
            && node.index() < self.evaluated;
        if released {
            return Err(GraphError::ParamReleased { node });
        }
        self.values
            .get(node.index())
            .ok_or_else(|| GraphError::NotComputed {
                op: self.op_name(node),
                node,
                what: "value",
                hint: "forward",
            })
    }

    /// The gradient of the last backward's loss with respect to a node.
    pub fn grad(&self, e: Expr) -> Result<&Tensor> {
        let node = self.check(e, "grad")?;
        self.grads
            .get(node.index())
            .ok_or_else(|| GraphError::NotComputed {
                op: self.op_name(node),
                node,
                what: "gradient",
                hint: "backward (the loss must depend on this node)",
            })
    }

    /// Checks that a handle is of this graph and current; returns its node.
    pub fn check(&self, e: Expr, op: &'static str) -> Result<NodeId> {
        check_expr(self.key, self.generation, self.nodes.len(), e, || op)
    }

    /// The handle of a node of this graph.
    pub fn expr(&self, node: NodeId) -> Expr {
        Expr {
            node,
            graph: self.key,
            generation: self.generation,
        }
    }

    /// The op of a node.
    pub fn op(&self, node: NodeId) -> &dyn Op {
        self.ops[self.nodes[node.index()].op.0 as usize].as_ref()
    }

    /// The name of a node's op.
    pub fn op_name(&self, node: NodeId) -> &'static str {
        self.op(node).name()
    }

    /// The argument nodes of a node.
    #[inline]
    pub fn args(&self, node: NodeId) -> &[NodeId] {
        self.plan_args_of(&self.plan_nodes[node.index()])
    }

    /// The arguments of a node's planning view.
    #[inline]
    pub(crate) fn plan_args_of<'a>(&'a self, p: &'a PlanNode) -> &'a [NodeId] {
        let n = p.arity as usize;
        match n <= PlanNode::INLINE {
            true => &p.args[..n],
            false => {
                let start = p.args[0].index();
                &self.arg_list[start..start + n]
            }
        }
    }

    /// A node's record (kind, shape, signature, depth).
    #[inline]
    pub fn node(&self, node: NodeId) -> Node {
        let (r, p) = (self.nodes[node.index()], self.plan_nodes[node.index()]);
        Node {
            kind: r.kind,
            attr: r.attr,
            data: r.data,
            shape: self.shapes[r.shape as usize],
            sig: p.sig,
            // Planning marks leaves with u32::MAX; a node says 0.
            depth: if r.kind == NodeKind::Op { p.depth } else { 0 },
        }
    }

    /// The per-instance shape of a node (by id).
    pub(crate) fn node_shape(&self, node: NodeId) -> Shape {
        self.shapes[self.nodes[node.index()].shape as usize]
    }

    /// The id of `shape` among the graph's shapes, added if new.
    fn intern_shape(&mut self, shape: Shape) -> u32 {
        // Nodes added one after another mostly share a shape (a model's
        // inputs, row by row): checked before hashing.
        let last = self.last_shape as usize;
        if self.shapes.get(last) == Some(&shape) {
            return last as u32;
        }
        let id = match self.shape_ids.get(&shape) {
            Some(&id) => id,
            None => {
                let id = self.shapes.len() as u32;
                self.shapes.push(shape);
                self.shape_ids.insert(shape, id);
                id
            }
        };
        self.last_shape = id;
        id
    }

    /// The interned signatures, indexed by [`SigId::index`].
    pub fn signatures(&self) -> &[SigInfo] {
        &self.sigs
    }

    /// Number of nodes that already have values.
    pub fn evaluated(&self) -> usize {
        self.evaluated
    }

    fn push_leaf(&mut self, op: LeafOp, kind: NodeKind, shape: Shape) -> Expr {
        let id = NodeId(self.nodes.len() as u32);
        // Leaves are never planned (depth `u32::MAX`): one signature per
        // kind of leaf. (One per leaf, as before, cost a map entry each and
        // made the agenda planner's per-signature tables as long as the
        // graph's inputs: W5 has ~10k inputs per update.)
        let sig = self.intern_sig(OpId(op as u32), &[u64::MAX, op as u64]);
        self.plan_nodes.push(PlanNode {
            sig,
            depth: u32::MAX,
            arity: 0,
            args: [NodeId(0); PlanNode::INLINE],
        });
        let shape = self.intern_shape(shape);
        self.nodes.push(NodeRec {
            op: OpId(op as u32),
            data: 0,
            attr: 0,
            kind,
            shape,
        });
        self.expr(id)
    }

    fn push(&mut self, op_id: OpId, args: &[Expr], attr: Attr, data: u32) -> Result<Expr> {
        // The op is borrowed from `self.ops` while the other fields change
        // (no reference count touched per node: building is ~35-47 ns a node).
        let op = &*self.ops[op_id.0 as usize];
        let slot = op_id.0 as usize;
        if self.op_cache.len() <= slot {
            self.op_cache.resize_with(slot + 1, OpCache::default);
        }
        let cache = &mut self.op_cache[slot];
        if !cache.known {
            cache.batchable = op.batchable();
            cache.known = true;
        }
        let n = args.len();
        if cache.arity != n && n <= 64 {
            cache.shared = (0..n)
                .filter(|&i| op.arg_role(i, n) == ArgRole::Share)
                .fold(0, |m, i| m | 1 << i);
            cache.arity = n;
        }
        let (batchable, shared) = (cache.batchable, cache.shared);
        let role = |i: usize| match n <= 64 {
            true if shared >> i & 1 == 1 => ArgRole::Share,
            true => ArgRole::Stack,
            false => op.arg_role(i, n),
        };
        let mut shapes = std::mem::take(&mut self.scratch_shapes);
        shapes.clear();
        let mut shape_ids = std::mem::take(&mut self.scratch_shape_ids);
        shape_ids.clear();
        let mut depth = 0;
        for &a in args {
            let node =
                match check_expr(self.key, self.generation, self.nodes.len(), a, || op.name()) {
                    Ok(node) => node,
                    Err(e) => {
                        self.scratch_shapes = shapes;
                        self.scratch_shape_ids = shape_ids;
                        return Err(e);
                    }
                };
            let shape = self.nodes[node.index()].shape;
            shapes.push(self.shapes[shape as usize]);
            shape_ids.push(shape);
            // A leaf's planning depth is u32::MAX; as a node its depth is 0.
            let d = self.plan_nodes[node.index()].depth;
            depth = depth.max(if d == u32::MAX { 1 } else { d + 1 });
        }
        let shape = match op.infer_shape(&shapes, attr) {
            Ok(shape) => shape,
            Err(e) => {
                let given = shapes.clone();
                self.scratch_shapes = shapes;
                self.scratch_shape_ids = shape_ids;
                return Err(GraphError::Shape {
                    op: op.name(),
                    expected: e.expected,
                    given,
                });
            }
        };
        let id = NodeId(self.nodes.len() as u32);
        let mut key = std::mem::take(&mut self.scratch_key);
        key.clear();
        key.push(op_id.0 as u64);
        key.push(attr);
        if batchable {
            // A stacked argument enters by its shape's id: equal ids, equal
            // shapes, within the graph (whose signatures these are).
            for (i, (a, &s)) in args.iter().zip(&shape_ids).enumerate() {
                match role(i) {
                    ArgRole::Stack => key.push(s as u64),
                    ArgRole::Share => key.push((1 << 63) | a.node.0 as u64),
                }
            }
        } else {
            key.push(u64::MAX);
            key.push(id.0 as u64);
        }
        let sig = self.intern_sig(op_id, &key);
        self.scratch_key = key;
        self.scratch_shapes = shapes;
        self.scratch_shape_ids = shape_ids;
        let shape = match self.op_cache[slot].out {
            Some((last, id)) if last == shape => id,
            _ => {
                let id = self.intern_shape(shape);
                self.op_cache[slot].out = Some((shape, id));
                id
            }
        };
        let node = Checked {
            op: op_id,
            sig,
            depth,
            shape,
            attr,
            data,
        };
        Ok(self.push_checked(node, args, &[]))
    }

    /// Appends an op node whose arguments, shape and signature are checked
    /// and known: its arguments are `args`, then `more`.
    pub(crate) fn push_checked(&mut self, node: Checked, args: &[Expr], more: &[NodeId]) -> Expr {
        let id = NodeId(self.nodes.len() as u32);
        let arity = args.len() + more.len();
        let mut inline = [NodeId(0); PlanNode::INLINE];
        if arity <= PlanNode::INLINE {
            let all = args.iter().map(|a| a.node).chain(more.iter().copied());
            for (slot, a) in inline.iter_mut().zip(all) {
                *slot = a;
            }
        } else {
            inline[0] = NodeId(self.arg_list.len() as u32);
            self.arg_list.extend(args.iter().map(|a| a.node));
            self.arg_list.extend_from_slice(more);
        }
        self.plan_nodes.push(PlanNode {
            sig: node.sig,
            depth: node.depth,
            arity: arity as u32,
            args: inline,
        });
        self.nodes.push(NodeRec {
            op: node.op,
            data: node.data,
            attr: node.attr,
            kind: NodeKind::Op,
            shape: node.shape,
        });
        self.expr(id)
    }

    /// The graph's identity check of `e` ([`Graph::check`] without the
    /// op's name until an error needs it), for building paths that hold
    /// their own borrow of an op.
    pub(crate) fn check_arg(&self, e: Expr, op: impl Fn() -> &'static str) -> Result<NodeId> {
        check_expr(self.key, self.generation, self.nodes.len(), e, op)
    }
}

/// An op node ready to append ([`Graph::push_checked`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checked {
    pub(crate) op: OpId,
    pub(crate) sig: SigId,
    /// 1 + the deepest argument (a leaf counting as depth 0).
    pub(crate) depth: u32,
    /// The interned output shape.
    pub(crate) shape: u32,
    pub(crate) attr: Attr,
    pub(crate) data: u32,
}

impl Graph {
    /// The signature of `key` for op `op`.
    fn intern_sig(&mut self, op: OpId, key: &[u64]) -> SigId {
        let slot = op.0 as usize;
        if self.op_cache.len() <= slot {
            self.op_cache.resize_with(slot + 1, OpCache::default);
        }
        let cache = &self.op_cache[slot];
        if let Some(id) = cache.sig.filter(|_| same_key(&cache.key, key)) {
            return id;
        }
        let id = self.intern_sig_new(op, key);
        let cache = &mut self.op_cache[slot];
        cache.key.clear();
        cache.key.extend_from_slice(key);
        cache.sig = Some(id);
        id
    }

    fn intern_sig_new(&mut self, op: OpId, key: &[u64]) -> SigId {
        // Looked up by slice: the key is copied into the map only when new.
        if let Some(&id) = self.sig_ids.get(key) {
            return id;
        }
        let id = SigId(self.sigs.len() as u32);
        let o = &self.ops[op.0 as usize];
        self.sigs.push(SigInfo {
            op,
            name: o.name(),
            cost: o.cost(),
            batchable: o.batchable(),
        });
        self.sig_ids.insert(SmallVec::from_slice(key), id);
        id
    }
}

/// Key equality without branches per word (keys are a few words; slice
/// `==` calls `memcmp`).
#[inline]
fn same_key(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// [`Graph::check`] on the graph's identity fields alone, so that it can run
/// while an op is borrowed from the graph.
/// (`op` names the op, asked only for an error: building a node would
/// otherwise make a virtual call for a name it never uses.)
fn check_expr(
    key: u32,
    generation: u32,
    len: usize,
    e: Expr,
    op: impl Fn() -> &'static str,
) -> Result<NodeId> {
    if e.graph != key {
        return Err(GraphError::ForeignExpr {
            op: op(),
            node: e.node,
        });
    }
    if e.generation != generation || e.node.index() >= len {
        return Err(GraphError::StaleExpr {
            op: op(),
            node: e.node,
        });
    }
    Ok(e.node)
}

impl Graph {
    /// The op of a node, shared (executors hold it across mutations).
    pub(crate) fn op_arc(&self, node: NodeId) -> Arc<dyn Op> {
        Arc::clone(&self.ops[self.nodes[node.index()].op.0 as usize])
    }
}

impl Graph {
    /// Applies a shared op instance with per-instance data (used by the
    /// built-in op families, whose ops are process-wide `Arc`s, and by
    /// users' ops that carry data such as an index per instance).
    pub fn apply_with_data(
        &mut self,
        op: &Arc<dyn Op>,
        args: &[Expr],
        attr: Attr,
        data: u32,
    ) -> Result<Expr> {
        let key = Arc::as_ptr(op) as *const () as usize;
        let id = match self.user_ops.get(&key) {
            Some(&id) => id,
            None => {
                let id = OpId(self.ops.len() as u32);
                self.ops.push(Arc::clone(op));
                self.user_ops.insert(key, id);
                id
            }
        };
        self.push(id, args, attr, data)
    }
}

impl Node {
    /// What the node is (op result, input, parameter).
    pub fn kind(&self) -> NodeKind {
        self.kind
    }
    /// Per-instance output shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }
    /// Batching signature.
    pub fn sig(&self) -> SigId {
        self.sig
    }
    /// 0 for leaves, else 1 + the deepest argument.
    pub fn depth(&self) -> u32 {
        self.depth
    }
    /// Attribute bits (part of the signature).
    pub fn attr(&self) -> Attr {
        self.attr
    }
    /// Per-instance data (not part of the signature).
    pub fn data(&self) -> u32 {
        self.data
    }
}
