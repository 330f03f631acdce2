//! [`GraphExec`]: the interface executors use to run a [`Graph`].
//!
//! Model code builds graphs with [`Graph`]'s own methods and runs them with
//! an executor ([`crate::Sequential`], or the scheduler crate's batched
//! one); it never needs this trait. An executor imports it to read a
//! graph's planning view and leaves and to store values, auxiliary
//! buffers and gradients. Keeping these methods on a trait keeps them off
//! the page a user reads to find an op.

use std::sync::Arc;

use sheaf_tensor::{Shape, Tensor};

use crate::error::Result;
use crate::graph::{Graph, PlanNode};
use crate::id::NodeId;
use crate::op::Op;
use crate::params::ParamStore;

/// What an executor reads and writes of a [`Graph`] (see the module docs).
/// Implemented for [`Graph`] only.
pub trait GraphExec {
    /// The op of a node, shared, so an executor can hold it while it
    /// stores results into the graph.
    fn op_shared(&self, node: NodeId) -> Arc<dyn Op>;
    /// Every node's planning view, indexed by node (see [`PlanNode`]).
    fn plan_nodes(&self) -> &[PlanNode];
    /// The arguments of a node's planning view (one of
    /// [`GraphExec::plan_nodes`]).
    fn plan_args<'a>(&'a self, p: &'a PlanNode) -> &'a [NodeId];
    /// The random stream seed of a node (see [`Graph::set_seed`]).
    fn node_seed(&self, node: NodeId) -> u64;
    /// The tensor of a constant input node (`NodeKind::Input(k)`).
    fn input_value(&self, k: u32) -> Option<&Tensor>;
    /// Which graph this is, and since which [`Graph::clear`]: equal for
    /// two calls exactly when they see the same nodes (an executor that
    /// continues a graph checks it is the one it started).
    fn identity(&self) -> (u32, u32);
    /// Makes room for values and aux buffers of every node.
    fn prepare_storage(&mut self);
    /// Stores a node's value (per-instance shape).
    fn set_value(&mut self, node: NodeId, value: Tensor);
    /// Stores the values of a batch at once: row `r` of `batch` (`[b,
    /// ...]`) is the value of `nodes[r]` (all of one signature, so of one
    /// shape), made a view when first read.
    fn set_value_rows(&mut self, nodes: &[NodeId], batch: Tensor);
    /// A node's value, if computed (by id, unchecked generation).
    fn value_of(&self, node: NodeId) -> Option<&Tensor>;
    /// Call first in every forward and backward. A graph whose values were
    /// computed with another store, or before the store's values changed
    /// (an optimizer step, a load), starts over: nothing is evaluated any
    /// more, so the run recomputes every node it needs with the current
    /// values instead of mixing old and new ones. Otherwise parameter
    /// values let go by [`GraphExec::release_params`] are read again.
    ///
    /// # Errors
    /// A parameter of the graph that `store` does not hold.
    fn restore_params(&mut self, store: &ParamStore) -> Result<()>;
    /// Call last in every backward (also after an error): drops the
    /// graph's references to parameter values, keeping every other value
    /// and gradient readable. Parameters share storage with the store, and
    /// an optimizer step copies each one another handle still holds; after
    /// this it writes them in place even while the graph is kept. Values
    /// of other nodes that view a parameter's buffer (a reshape run alone)
    /// get a copy of their own.
    fn release_params(&mut self);
    /// Stores a node's auxiliary buffer (per-instance shape).
    fn set_aux(&mut self, node: NodeId, aux: Tensor);
    /// Stores the auxiliary buffers of a batch at once (see
    /// [`GraphExec::set_value_rows`]), each of `aux_shape`.
    fn set_aux_rows(&mut self, nodes: &[NodeId], batch: Tensor, aux_shape: Shape);
    /// A node's auxiliary buffer.
    fn aux_of(&self, node: NodeId) -> Option<&Tensor>;
    /// Marks nodes `0..n` as evaluated.
    fn set_evaluated(&mut self, n: usize);
    /// Drops all gradients and makes room for new ones.
    fn reset_grads(&mut self);
    /// Takes a node's gradient out (to accumulate into it).
    fn take_grad(&mut self, node: NodeId) -> Option<Tensor>;
    /// Stores a node's gradient.
    fn set_grad(&mut self, node: NodeId, grad: Tensor);
    /// Stores the gradients of a batch at once (see
    /// [`GraphExec::set_value_rows`]).
    fn set_grad_rows(&mut self, nodes: &[NodeId], batch: Tensor);
    /// A node's gradient (by id).
    fn grad_of(&self, node: NodeId) -> Option<&Tensor>;
}

impl GraphExec for Graph {
    fn op_shared(&self, node: NodeId) -> Arc<dyn Op> {
        self.op_arc(node)
    }
    fn identity(&self) -> (u32, u32) {
        (self.key, self.generation)
    }
    fn plan_nodes(&self) -> &[PlanNode] {
        &self.plan_nodes
    }
    #[inline]
    fn plan_args<'a>(&'a self, p: &'a PlanNode) -> &'a [NodeId] {
        self.plan_args_of(p)
    }
    fn node_seed(&self, node: NodeId) -> u64 {
        // SplitMix64 of (seed, position): independent streams per node.
        let mut z = self
            .seed
            .wrapping_add((node.0 as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn input_value(&self, k: u32) -> Option<&Tensor> {
        self.inputs.get(k as usize)
    }
    fn prepare_storage(&mut self) {
        let n = self.nodes.len();
        self.values.resize(n);
        self.aux.resize(n);
    }
    fn set_value(&mut self, node: NodeId, value: Tensor) {
        self.values.set(node.index(), value);
    }
    fn set_value_rows(&mut self, nodes: &[NodeId], batch: Tensor) {
        if let Some(n) = nodes.first().and_then(|n| self.nodes.get(n.index())) {
            let shape = self.shapes[n.shape as usize];
            self.values.set_rows(nodes, batch, shape);
        }
    }
    fn value_of(&self, node: NodeId) -> Option<&Tensor> {
        self.values.get(node.index())
    }
    fn restore_params(&mut self, store: &ParamStore) -> Result<()> {
        let stamp = store.stamp();
        if self.evaluated > 0 && self.ran_with.is_some_and(|s| s != stamp) {
            self.values.clear();
            self.aux.clear();
            self.kept.clear();
            self.grads.clear();
            self.evaluated = 0;
            self.params_released = false;
        }
        self.ran_with = Some(stamp);
        if self.params_released {
            for (&p, &node) in &self.param_nodes {
                if node.index() < self.evaluated {
                    let v = store.value_by_id(p, "forward")?.clone();
                    self.values.set(node.index(), v);
                }
            }
            self.params_released = false;
        }
        Ok(())
    }
    fn release_params(&mut self) {
        let mut held = rustc_hash::FxHashSet::default();
        for &node in self.param_nodes.values() {
            if let Some(t) = self.values.take_own(node.index()) {
                held.insert(t.storage_id());
            }
        }
        if !held.is_empty() {
            // A failed copy keeps the view: the optimizer then copies the
            // parameter instead, still correct.
            self.values
                .replace_own(|t| match held.contains(&t.storage_id()) {
                    true => t.deep_clone().ok(),
                    false => None,
                });
        }
        let evaluated = self.evaluated;
        self.params_released = self.param_nodes.values().any(|n| n.index() < evaluated);
    }
    fn set_aux(&mut self, node: NodeId, aux: Tensor) {
        self.aux.set(node.index(), aux);
    }
    fn set_aux_rows(&mut self, nodes: &[NodeId], batch: Tensor, aux_shape: Shape) {
        self.aux.set_rows(nodes, batch, aux_shape);
    }
    fn aux_of(&self, node: NodeId) -> Option<&Tensor> {
        self.aux.get(node.index())
    }
    fn set_evaluated(&mut self, n: usize) {
        self.evaluated = n.min(self.nodes.len());
    }
    fn reset_grads(&mut self) {
        self.grads.clear();
        self.grads.resize(self.nodes.len());
    }
    fn take_grad(&mut self, node: NodeId) -> Option<Tensor> {
        self.grads.take(node.index())
    }
    fn set_grad(&mut self, node: NodeId, grad: Tensor) {
        self.grads.set(node.index(), grad);
    }
    fn set_grad_rows(&mut self, nodes: &[NodeId], batch: Tensor) {
        if let Some(n) = nodes.first().and_then(|n| self.nodes.get(n.index())) {
            let shape = self.shapes[n.shape as usize];
            self.grads.set_rows(nodes, batch, shape);
        }
    }
    fn grad_of(&self, node: NodeId) -> Option<&Tensor> {
        self.grads.get(node.index())
    }
}
