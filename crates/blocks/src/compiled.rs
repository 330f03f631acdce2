//! [`Compiled`]: a checked model that builds ONE graph for a batch of host
//! inputs and runs it through the scheduler.

use std::borrow::Cow;

use sheaf_autodiff::{Expr, Graph, ParamStore};
use sheaf_sched::{Executor, PlanStats, Strategy};

use crate::block::{Check, Ctx, Metrics};
use crate::error::{At, BlockError, Result};
use crate::types::Value;
use crate::{Block, Ty};

/// What to train on: the sum (or mean, over the batch's inputs) of
/// one-element tensors, taken from the outputs or from a [`crate::Metric`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    source: Option<String>,
    mean: bool,
}

impl Loss {
    /// The outputs of the model (each one element) are the losses.
    pub fn outputs() -> Self {
        Loss {
            source: None,
            mean: false,
        }
    }

    /// The values recorded by `Metric::new(name)` are the losses.
    pub fn metric(name: &str) -> Self {
        Loss {
            source: Some(name.to_owned()),
            mean: false,
        }
    }

    /// Divides the sum by the number of inputs in the batch.
    pub fn mean(mut self) -> Self {
        self.mean = true;
        self
    }
}

/// A model checked once ([`Compiled::new`]) and run on batches of host
/// inputs: each call builds one graph for the whole batch, so the
/// scheduler batches equal operations across inputs (depth-based by
/// default, as Fold; any [`Strategy`] on request). The graph and the
/// executor's buffers are reused from batch to batch.
pub struct Compiled<B: Block> {
    block: B,
    out: Ty,
    graph: Graph,
    metrics: Metrics,
    outputs: Vec<B::Out>,
    executor: Executor,
    inline_functions: bool,
}

impl<B: Block> std::fmt::Debug for Compiled<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("block", &self.block.name())
            .field("out", &self.out)
            .field("strategy", &self.executor.strategy())
            .finish()
    }
}

impl<B> Compiled<B>
where
    B: Block,
    B::Out: Value,
{
    /// Checks the model's types and shapes for host inputs; errors name
    /// the block path.
    pub fn new(block: B) -> Result<Self> {
        let mut cx = Check::new();
        let out = block.check(&mut cx, &Ty::Host)?;
        Ok(Compiled {
            block,
            out,
            graph: Graph::new(),
            metrics: Metrics::default(),
            outputs: Vec::new(),
            executor: Executor::new(Strategy::Depth),
            inline_functions: false,
        })
    }

    /// Runs every [`crate::Function`] inline (`yes`: its ops added one by
    /// one per input), instead of as the vertex function it compiled to
    /// where it could be: for comparison (same values and gradients).
    pub fn inline_functions(mut self, yes: bool) -> Self {
        self.inline_functions = yes;
        self
    }

    /// Runs graphs with `strategy` from now on.
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.executor = Executor::new(strategy);
        self
    }

    /// Runs graphs with `executor` from now on: e.g.
    /// `Executor::on(Strategy::Agenda, Device::Cuda(0))?` for a GPU (the
    /// store's parameters must be there: `ParamStore::to_device`).
    pub fn with_executor(mut self, executor: Executor) -> Self {
        self.executor = executor;
        self
    }

    /// The output type of the model.
    pub fn output_type(&self) -> &Ty {
        &self.out
    }

    /// The model.
    pub fn block(&self) -> &B {
        &self.block
    }

    /// Training mode (dropout on) or evaluation mode, for the next batches.
    pub fn set_train(&mut self, train: bool) {
        self.graph.set_train(train);
    }

    /// Seed of the next batches' dropout masks.
    pub fn set_seed(&mut self, seed: u64) {
        self.graph.set_seed(seed);
    }

    /// Builds the graph of a batch (nothing computed): one evaluation of
    /// the model per input. Returns the outputs' graph values.
    pub fn build<'i, It>(&mut self, inputs: It) -> Result<&[B::Out]>
    where
        It: IntoIterator<Item = &'i B::In>,
        B::In: 'i,
    {
        self.graph.clear();
        self.metrics.clear();
        self.outputs.clear();
        for (i, x) in inputs.into_iter().enumerate() {
            let mut cx = Ctx::new(&mut self.graph, &mut self.metrics, i)
                .with_inline_functions(self.inline_functions);
            let y = self
                .block
                .eval(&mut cx, x)
                .map_err(|e| e.within(format!("input {i}")))?;
            self.outputs.push(y);
        }
        Ok(&self.outputs)
    }

    /// Builds and computes a batch; returns each input's output, read
    /// back. Metrics are readable afterwards ([`Compiled::metric`]).
    pub fn forward<'i, It>(
        &mut self,
        store: &ParamStore,
        inputs: It,
    ) -> Result<Vec<<B::Out as Value>::Host>>
    where
        It: IntoIterator<Item = &'i B::In>,
        B::In: 'i,
    {
        self.build(inputs)?;
        self.compute(store)?;
        self.outputs
            .iter()
            .map(|y| y.read(&self.graph).map_err(BlockError::from))
            .collect()
    }

    /// Builds a batch, computes its loss and backpropagates it: parameter
    /// gradients are added to `store`'s accumulators (an optimizer step
    /// applies and clears them). Returns the loss. Afterwards outputs and
    /// metrics stay readable, parameter values are released from the
    /// graph (so the optimizer updates them in place).
    pub fn backward<'i, It>(&mut self, store: &ParamStore, inputs: It, loss: &Loss) -> Result<f32>
    where
        It: IntoIterator<Item = &'i B::In>,
        B::In: 'i,
    {
        self.build(inputs)?;
        let n = self.outputs.len();
        let mut terms = Vec::new();
        match &loss.source {
            None => self.outputs.iter().for_each(|y| y.nodes(&mut terms)),
            Some(name) => terms.extend(self.metrics.get(name).iter().map(|&(_, e)| e)),
        }
        let here = || -> Cow<'static, str> { "loss".into() };
        if terms.is_empty() {
            return Err(BlockError::usage(match &loss.source {
                None => "the batch has no outputs to train on".to_owned(),
                Some(name) => format!("no metric `{name}` was recorded in the batch"),
            })
            .within("loss"));
        }
        let g = &mut self.graph;
        for &t in &terms {
            let shape = g.shape(t).at(here)?;
            if shape.numel().ok() != Some(1) {
                return Err(
                    BlockError::ty("losses of one element", &Ty::Tensor(shape)).within("loss")
                );
            }
        }
        let mut total = if terms.len() == 1 {
            terms[0]
        } else {
            g.sum(&terms).at(here)?
        };
        if loss.mean && n > 0 {
            total = g.scale(total, 1.0 / n as f32).at(here)?;
        }
        self.executor.forward(g, store, total)?;
        self.executor.backward(g, store, total)?;
        let v = g.value(total).at(here)?.to_vec::<f32>().map_err(|e| {
            BlockError::from(sheaf_autodiff::GraphError::Tensor {
                context: "reading the loss".into(),
                source: Box::new(e),
            })
        })?;
        Ok(v.first().copied().unwrap_or(f32::NAN))
    }

    /// The values recorded under a metric's name in the last computed
    /// batch, with the input each belongs to.
    pub fn metric(&self, name: &str) -> Result<Vec<(usize, sheaf_tensor::Tensor)>> {
        self.metrics
            .get(name)
            .iter()
            .map(|&(i, e)| Ok((i, self.graph.value(e)?.clone())))
            .collect()
    }

    /// The graph of the last batch.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Statistics of the last batch's plan (batches, gathered bytes, ...).
    pub fn stats(&self) -> &PlanStats {
        self.executor.stats()
    }

    /// Computes every node of the built batch.
    fn compute(&mut self, store: &ParamStore) -> Result<()> {
        let mut nodes: Vec<Expr> = Vec::new();
        self.outputs.iter().for_each(|y| y.nodes(&mut nodes));
        nodes.extend(self.metrics.by_name.values().flatten().map(|&(_, e)| e));
        if let Some(last) = nodes.into_iter().max_by_key(|e| e.node()) {
            self.executor.forward(&mut self.graph, store, last)?;
        }
        Ok(())
    }
}
