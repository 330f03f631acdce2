//! The `Sequential` executor: one node per kernel call (batch size 1), the
//! reference every batching strategy must equal.

use std::sync::MutexGuard;

use sheaf_tensor::{Backend, DType, Device, Shape, Tensor, TensorMut};

use crate::error::{GraphError, Result};
use crate::exec::GraphExec;
use crate::graph::NodeKind;
use crate::op::{ArgRole, Backward, Forward, Keep};
use crate::params::{GradAcc, ParamStore};
use crate::{Expr, Graph, NodeId};

/// Runs graphs one node at a time.
#[derive(Debug, Clone, Copy)]
pub struct Sequential {
    backend: &'static dyn Backend,
}

impl Default for Sequential {
    fn default() -> Self {
        Self::new()
    }
}

fn stacked(shape: Shape, op: &'static str, node: NodeId) -> Result<Shape> {
    Shape::stack(1, shape).map_err(|source| GraphError::Exec {
        op,
        node,
        source: Box::new(source),
    })
}

fn zeros(device: Device, shape: Shape, op: &'static str, node: NodeId) -> Result<Tensor> {
    Tensor::zeros(shape, DType::F32, device).map_err(|source| GraphError::Exec {
        op,
        node,
        source: Box::new(source),
    })
}

/// First non-finite element of a tensor, if any.
pub(crate) fn first_non_finite(t: &Tensor) -> Option<f32> {
    if t.device() != Device::Cpu {
        // A download (and a synchronisation) per value: the finiteness
        // check is a debugging aid.
        return t.to_vec::<f32>().ok()?.into_iter().find(|v| !v.is_finite());
    }
    t.as_slice::<f32>()
        .ok()
        .and_then(|s| s.iter().copied().find(|v| !v.is_finite()))
}

/// Where one argument's gradient goes during a backward call.
enum Slot<'s> {
    /// The argument needs no gradient (a constant input).
    Skip,
    /// The argument node's own gradient buffer, taken out of the graph for
    /// the call (or a scratch buffer for a repeated argument).
    Node(NodeId, Tensor, bool),
    /// A parameter's accumulator in the store.
    Param(MutexGuard<'s, GradAcc>),
}

impl Sequential {
    /// On the CPU backend.
    pub fn new() -> Self {
        Sequential { backend: &*CPU }
    }

    /// An executor running on `device`'s backend (values, gradients and
    /// parameters there; inputs are copied to it when read). Errors if the
    /// device is unavailable in this build or on this machine.
    pub fn on(device: Device) -> sheaf_tensor::Result<Self> {
        Ok(Sequential {
            backend: device.backend()?,
        })
    }

    /// The device this executor runs on.
    pub fn device(&self) -> Device {
        self.backend.device()
    }

    /// Computes every not-yet-evaluated node up to and including `target`
    /// and returns `target`'s value (a one-element loss reads as a number
    /// with
    /// `item::<f32>()`, see [`Tensor::item`]). Later calls compute only new nodes, unless
    /// the store's values changed since the graph ran (an optimizer step):
    /// then every node is computed again with the new values.
    pub fn forward(&self, g: &mut Graph, store: &ParamStore, target: Expr) -> Result<Tensor> {
        sheaf_tensor::denormals::prepare();
        let end = g.check(target, "forward")?.index() + 1;
        g.restore_params(store)?;
        let _span = tracing::debug_span!(
            "forward",
            executor = "sequential",
            nodes = end.saturating_sub(g.evaluated)
        )
        .entered();
        g.values.resize(g.len());
        g.aux.resize(g.len());
        for i in g.evaluated..end.max(g.evaluated) {
            let id = NodeId(i as u32);
            let value = self.forward_node(g, store, id)?;
            *g.values.own_mut(i) = Some(value);
        }
        g.evaluated = g.evaluated.max(end);
        g.value(target).cloned()
    }

    fn forward_node(&self, g: &mut Graph, store: &ParamStore, id: NodeId) -> Result<Tensor> {
        let node = g.node(id);
        let op = g.op_arc(id);
        let name = op.name();
        match node.kind {
            NodeKind::Input(k) => {
                return g.inputs[k as usize]
                    .to_device(self.device())
                    .map_err(|source| GraphError::Exec {
                        op: name,
                        node: id,
                        source: Box::new(source),
                    })
            }
            NodeKind::Param(p) => return store.value_by_id(p, "forward").cloned(),
            NodeKind::Op => {}
        }
        let arg_ids = g.args(id).to_vec();
        let mut args = Vec::with_capacity(arg_ids.len());
        for (j, a) in arg_ids.iter().enumerate() {
            let v = g
                .values
                .own_ref(a.index())
                .as_ref()
                .ok_or(GraphError::NotComputed {
                    op: g.op_name(*a),
                    node: *a,
                    what: "value",
                    hint: "forward",
                })?;
            args.push(match op.arg_role(j, arg_ids.len()) {
                ArgRole::Stack => {
                    v.reshape(stacked(v.shape(), name, id)?)
                        .map_err(|source| GraphError::Exec {
                            op: name,
                            node: id,
                            source: Box::new(source),
                        })?
                }
                ArgRole::Share => v.clone(),
            });
        }
        if let Some(first) = arg_ids.first() {
            let src = g.values.own_ref(first.index()).as_ref();
            if let Some(view) = src.and_then(|v| op.view(v, &node.shape, node.attr)) {
                return view.map_err(|source| GraphError::Exec {
                    op: name,
                    node: id,
                    source: Box::new(source),
                });
            }
        }
        let arg_shapes: Vec<Shape> = arg_ids.iter().map(|a| g.node_shape(*a)).collect();
        let mut out = zeros(self.device(), stacked(node.shape, name, id)?, name, id)?;
        let mut aux = match op.aux_shape(&node.shape, &arg_shapes, node.attr) {
            Some(s) => Some(zeros(self.device(), stacked(s, name, id)?, name, id)?),
            None => None,
        };
        let exec = |source| GraphError::Exec {
            op: name,
            node: id,
            source: Box::new(source),
        };
        let seeds = [g.node_seed(id)];
        let mut kept = Vec::new();
        let device = self.device();
        let mut alloc = |s: Shape| Tensor::zeros(s, sheaf_tensor::DType::F32, device);
        op.forward(Forward {
            backend: self.backend,
            args: &args,
            data: &[node.data],
            attr: node.attr,
            seeds: &seeds,
            train: g.train,
            out: out.view_mut().map_err(exec)?,
            aux: match aux.as_mut() {
                Some(a) => Some(a.view_mut().map_err(exec)?),
                None => None,
            },
            block: None,
            keep: Keep::new(&mut alloc, &mut kept),
        })
        .map_err(exec)?;
        if kept.is_empty() {
            g.kept.remove(&id.0);
        } else {
            g.kept.insert(id.0, kept);
        }
        if g.check_finite {
            if let Some(value) = first_non_finite(&out) {
                return Err(GraphError::NonFinite {
                    op: name,
                    node: id,
                    what: "value",
                    value,
                });
            }
        }
        *g.aux.own_mut(id.index()) = aux;
        out.reshape(node.shape).map_err(exec)
    }

    /// Back-propagates from `loss` (one element): gradients of every node
    /// it depends on are kept in the graph ([`Graph::grad`]), gradients of
    /// parameters are ADDED to the store's accumulators. The graph then
    /// lets go of the parameters' values, so that an optimizer step writes
    /// them in place whether or not the graph is cleared first.
    pub fn backward(&self, g: &mut Graph, store: &ParamStore, loss: Expr) -> Result<()> {
        sheaf_tensor::denormals::prepare();
        let result = self.backward_inner(g, store, loss);
        g.release_params();
        result
    }

    fn backward_inner(&self, g: &mut Graph, store: &ParamStore, loss: Expr) -> Result<()> {
        let loss_id = g.check(loss, "backward")?;
        g.restore_params(store)?;
        if loss_id.index() >= g.evaluated {
            self.forward(g, store, loss)?;
        }
        let shape = g.node_shape(loss_id);
        let numel = shape.numel().unwrap_or(0);
        if numel != 1 {
            return Err(GraphError::LossNotScalar {
                op: g.op_name(loss_id),
                node: loss_id,
                shape,
            });
        }
        let _span = tracing::debug_span!("backward", executor = "sequential").entered();
        g.grads.clear();
        g.grads.resize(g.len());
        let name = g.op_name(loss_id);
        *g.grads.own_mut(loss_id.index()) = Some(
            Tensor::full_f32(1.0, shape, self.device()).map_err(|source| GraphError::Exec {
                op: name,
                node: loss_id,
                source: Box::new(source),
            })?,
        );
        for i in (0..=loss_id.index()).rev() {
            let id = NodeId(i as u32);
            let Some(dy) = g.grads.own_ref(i).clone() else {
                continue;
            };
            let node = g.node(NodeId::from_index(i));
            match node.kind {
                NodeKind::Input(_) => continue,
                NodeKind::Param(p) => {
                    // Parameters reached directly (not through an op that
                    // writes the store) are handled by their consumers.
                    let _ = p;
                    continue;
                }
                NodeKind::Op => self.backward_node(g, store, id, &dy)?,
            }
        }
        Ok(())
    }

    fn backward_node(
        &self,
        g: &mut Graph,
        store: &ParamStore,
        id: NodeId,
        dy: &Tensor,
    ) -> Result<()> {
        let node = g.node(id);
        let op = g.op_arc(id);
        let name = op.name();
        let exec = |source| GraphError::Exec {
            op: name,
            node: id,
            source: Box::new(source),
        };
        let arg_ids = g.args(id).to_vec();
        let n = arg_ids.len();
        let mut args = Vec::with_capacity(n);
        let mut slots: Vec<Slot<'_>> = Vec::with_capacity(n);
        for (j, &a) in arg_ids.iter().enumerate() {
            let role = op.arg_role(j, n);
            let v = g
                .values
                .own_ref(a.index())
                .clone()
                .ok_or(GraphError::NotComputed {
                    op: g.op_name(a),
                    node: a,
                    what: "value",
                    hint: "forward",
                })?;
            args.push(match role {
                ArgRole::Stack => v.reshape(stacked(v.shape(), name, id)?).map_err(exec)?,
                ArgRole::Share => v,
            });
            let repeated = arg_ids[..j].contains(&a);
            let a_node = g.node(a);
            slots.push(match a_node.kind {
                NodeKind::Input(_) => Slot::Skip,
                NodeKind::Param(p) if !repeated => Slot::Param(store.lock_grad(p, name)?),
                NodeKind::Param(_) => {
                    Slot::Node(a, zeros(self.device(), a_node.shape, name, id)?, true)
                }
                NodeKind::Op if repeated => {
                    Slot::Node(a, zeros(self.device(), a_node.shape, name, id)?, true)
                }
                NodeKind::Op => {
                    let t = match g.grads.own_mut(a.index()).take() {
                        Some(t) => t,
                        None => zeros(self.device(), a_node.shape, name, id)?,
                    };
                    Slot::Node(a, t, false)
                }
            });
        }
        let out = g
            .values
            .own_ref(id.index())
            .clone()
            .ok_or(GraphError::NotComputed {
                op: name,
                node: id,
                what: "value",
                hint: "forward",
            })?;
        let out = out.reshape(stacked(node.shape, name, id)?).map_err(exec)?;
        let dout = dy.reshape(out.shape()).map_err(exec)?;
        let aux = g.aux.own_ref(id.index()).clone();
        let kept = g.kept.get(&id.0).cloned().unwrap_or_default();
        let seeds = [g.node_seed(id)];
        let data = [node.data];
        let sparse = {
            let mut dargs: Vec<Option<TensorMut<'_>>> = Vec::with_capacity(n);
            for (j, slot) in slots.iter_mut().enumerate() {
                let t = match slot {
                    Slot::Skip => None,
                    Slot::Node(_, t, _) => Some(t),
                    Slot::Param(acc) => Some(&mut acc.grad),
                };
                dargs.push(match t {
                    None => None,
                    Some(t) => {
                        let view = t.view_mut().map_err(exec)?;
                        Some(match op.arg_role(j, n) {
                            ArgRole::Stack => view.reshape(args[j].shape()).map_err(exec)?,
                            ArgRole::Share => view,
                        })
                    }
                });
            }
            let mut cx = Backward {
                backend: self.backend,
                args: &args,
                data: &data,
                attr: node.attr,
                seeds: &seeds,
                out: &out,
                aux: aux.as_ref(),
                dout: &dout,
                dargs,
                sparse: Vec::new(),
                write: 0,
                grad_block: None,
                kept: &kept,
            };
            op.backward(&mut cx).map_err(exec)?;
            std::mem::take(&mut cx.sparse)
        };
        for (j, slot) in slots.into_iter().enumerate() {
            match slot {
                Slot::Skip => {}
                Slot::Param(mut acc) => match sparse.iter().find(|(a, _)| *a == j) {
                    Some((_, rows)) => acc.rows.extend_from_slice(rows),
                    None => acc.dense = true,
                },
                Slot::Node(a, t, false) => self.store_grad(g, a, t, name)?,
                Slot::Node(a, t, true) => {
                    // A repeated argument's scratch gradient: add it to the
                    // node's (or, for a parameter, the store's) gradient.
                    match g.node(a).kind {
                        NodeKind::Param(p) => {
                            let mut acc = store.lock_grad(p, name)?;
                            self.backend
                                .axpy(1.0, &t, acc.grad.view_mut().map_err(exec)?)
                                .map_err(exec)?;
                            acc.dense = true;
                        }
                        _ => {
                            let mut dst = match g.grads.own_mut(a.index()).take() {
                                Some(d) => d,
                                None => zeros(self.device(), t.shape(), name, id)?,
                            };
                            self.backend
                                .axpy(1.0, &t, dst.view_mut().map_err(exec)?)
                                .map_err(exec)?;
                            self.store_grad(g, a, dst, name)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn store_grad(&self, g: &mut Graph, a: NodeId, t: Tensor, by: &'static str) -> Result<()> {
        if g.check_finite {
            if let Some(value) = first_non_finite(&t) {
                return Err(GraphError::NonFinite {
                    op: by,
                    node: a,
                    what: "gradient (of its argument)",
                    value,
                });
            }
        }
        *g.grads.own_mut(a.index()) = Some(t);
        Ok(())
    }
}

static CPU: std::sync::LazyLock<sheaf_tensor::CpuBackend> =
    std::sync::LazyLock::new(sheaf_tensor::CpuBackend::new);
