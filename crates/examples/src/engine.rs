//! [`Engine`]: runs a graph with the chosen execution strategy — the
//! unbatched reference executor ([`Sequential`]) or sheaf's batching
//! [`Executor`] (depth, agenda or auto) — behind one interface.

use std::fmt;

use serde::{Deserialize, Serialize};
use sheaf_autodiff::{Expr, Graph, ParamStore, Sequential};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::{Device, Tensor};

use crate::error::Result;

/// How graphs are executed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Exec {
    /// One node per kernel call (`sheaf_autodiff::Sequential`, the
    /// reference).
    Sequential,
    /// Equal signatures at equal depth in one call (TensorFlow Fold).
    Depth,
    /// A ready-node agenda, lowest mean depth first (DyNet).
    #[default]
    Agenda,
    /// Times depth and agenda on the first graphs and keeps the faster
    /// (results may then differ from run to run in the last bits).
    Auto,
}

impl Exec {
    /// The scheduler strategy of this kind (`Sequential` is the
    /// scheduler's one-node-per-call plan, equal to the reference).
    pub fn strategy(self) -> Strategy {
        match self {
            Exec::Sequential => Strategy::Sequential,
            Exec::Depth => Strategy::Depth,
            Exec::Agenda => Strategy::Agenda,
            Exec::Auto => Strategy::Auto,
        }
    }

    /// The lower-case name (as on the command line).
    pub fn name(self) -> &'static str {
        match self {
            Exec::Sequential => "sequential",
            Exec::Depth => "depth",
            Exec::Agenda => "agenda",
            Exec::Auto => "auto",
        }
    }
}

impl fmt::Display for Exec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An executor of the chosen kind. Keep one per training or evaluation
/// run: the batching executor reuses its buffers and, for `auto`, its
/// timings from graph to graph.
pub enum Engine {
    /// The unbatched reference.
    Sequential(Sequential),
    /// sheaf's batching scheduler.
    Batched(Box<Executor>),
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Engine::Sequential(_) => f.write_str("Engine::Sequential"),
            Engine::Batched(e) => write!(f, "Engine::Batched({})", e.strategy().name()),
        }
    }
}

fn device_err(e: sheaf_tensor::TensorError) -> crate::error::Error {
    crate::error::Error::Config(format!("device: {e}"))
}

impl Engine {
    /// A new executor of kind `exec`.
    pub fn new(exec: Exec) -> Self {
        let strategy = match exec {
            Exec::Sequential => return Engine::Sequential(Sequential::new()),
            Exec::Depth => Strategy::Depth,
            Exec::Agenda => Strategy::Agenda,
            Exec::Auto => Strategy::Auto,
        };
        Engine::Batched(Box::new(Executor::new(strategy)))
    }

    /// A new executor of kind `exec` running on `device` (its parameters
    /// must be there: `ParamStore::to_device`).
    pub fn on(exec: Exec, device: Device) -> Result<Self> {
        let strategy = match exec {
            Exec::Sequential => {
                return Ok(Engine::Sequential(
                    Sequential::on(device).map_err(device_err)?,
                ))
            }
            Exec::Depth => Strategy::Depth,
            Exec::Agenda => Strategy::Agenda,
            Exec::Auto => Strategy::Auto,
        };
        Ok(Engine::Batched(Box::new(
            Executor::on(strategy, device).map_err(device_err)?,
        )))
    }

    /// The device this engine runs on.
    pub fn device(&self) -> Device {
        match self {
            Engine::Sequential(s) => s.device(),
            Engine::Batched(e) => e.device(),
        }
    }

    /// Computes every node of `g` up to `target` and returns its value.
    pub fn forward(&mut self, g: &mut Graph, store: &ParamStore, target: Expr) -> Result<Tensor> {
        Ok(match self {
            Engine::Sequential(s) => s.forward(g, store, target)?,
            Engine::Batched(e) => e.forward(g, store, target)?,
        })
    }

    /// [`Engine::forward`] keeping nothing for a backward (the batching
    /// executor's inference mode, `Executor::set_inference`, for this
    /// forward): for evaluation and prediction.
    pub fn forward_only(
        &mut self,
        g: &mut Graph,
        store: &ParamStore,
        target: Expr,
    ) -> Result<Tensor> {
        Ok(match self {
            Engine::Sequential(s) => s.forward(g, store, target)?,
            Engine::Batched(e) => {
                let was = e.inference();
                e.set_inference(true);
                let value = e.forward(g, store, target);
                e.set_inference(was);
                value?
            }
        })
    }

    /// Forward (where not yet done) and backward from the one-element
    /// `loss`; parameter gradients are added to the store's accumulators.
    pub fn backward(&mut self, g: &mut Graph, store: &ParamStore, loss: Expr) -> Result<()> {
        match self {
            Engine::Sequential(s) => s.backward(g, store, loss)?,
            Engine::Batched(e) => {
                e.forward(g, store, loss)?;
                e.backward(g, store, loss)?
            }
        }
        Ok(())
    }
}
