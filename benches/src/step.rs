//! The end of every training step of the workloads: forward and backward
//! of the summed loss (with a batching executor, or the reference one),
//! read the loss, clear the graph, one optimizer update.

use sheaf_autodiff::{Expr, Graph, Optimizer, ParamStore, Sequential};
use sheaf_sched::Executor;

/// Runs `loss` forward and backward on `g` (`exec`, or Sequential when
/// `None`), clears the graph, updates with `opt`; returns the loss.
pub fn backward_and_step(
    g: &mut Graph,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    exec: Option<&mut Executor>,
    loss: Expr,
) -> Result<f32, String> {
    match exec {
        None => Sequential::new()
            .backward(g, store, loss)
            .map_err(|e| e.to_string())?,
        Some(x) => {
            x.forward(g, store, loss).map_err(|e| e.to_string())?;
            x.backward(g, store, loss).map_err(|e| e.to_string())?;
        }
    }
    let value = g
        .value(loss)
        .map_err(|e| e.to_string())?
        .to_vec::<f32>()
        .map_err(|e| e.to_string())?[0];
    g.clear();
    opt.step(store).map_err(|e| e.to_string())?;
    Ok(value)
}
