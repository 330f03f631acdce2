//! Finite-difference gradient checking, for built-in ops and users' own.
//!
//! [`check_gradients`] builds a scalar loss from parameters, back-propagates
//! with the [`Sequential`] executor, and compares every parameter's gradient
//! with central differences `(L(p + h) - L(p - h)) / 2h`, evaluated in f32.
//! The tolerance is on `|analytic - numeric| <= atol + rtol * |numeric|`;
//! with `h = 1e-2` and smooth ops at moderate values the f32 rounding error
//! of the quotient is about 1e-4 absolute, so `atol = rtol = 1e-2` (the
//! defaults) catches wrong formulas (errors of order 1) with a wide margin
//! while never flagging rounding.

use sheaf_tensor::Tensor;

use crate::error::{GraphError, Result};
use crate::{Expr, Graph, Param, ParamStore, Sequential};

/// Settings of [`check_gradients`].
#[derive(Debug, Clone, Copy)]
pub struct GradCheck {
    /// Step of the central difference.
    pub step: f32,
    /// Absolute tolerance.
    pub atol: f32,
    /// Relative tolerance.
    pub rtol: f32,
}

impl Default for GradCheck {
    fn default() -> Self {
        GradCheck {
            step: 1e-2,
            atol: 1e-2,
            rtol: 1e-2,
        }
    }
}

/// Loss of a fresh graph built by `build` (in evaluation mode if `train`
/// is false, with seed 0 so dropout masks repeat).
fn loss_of(
    store: &ParamStore,
    build: &dyn Fn(&mut Graph, &[Expr]) -> Result<Expr>,
    params: &[Param],
) -> Result<f32> {
    let mut g = Graph::new();
    let xs: Vec<Expr> = params.iter().map(|p| g.param(p)).collect();
    let loss = build(&mut g, &xs)?;
    let v = Sequential::new().forward(&mut g, store, loss)?;
    let s = v.as_slice::<f32>().map_err(|source| GraphError::Tensor {
        context: "gradient check loss".into(),
        source: Box::new(source),
    })?;
    Ok(s.iter().sum())
}

/// Checks the gradient of the scalar loss `build(graph, params)` with
/// respect to every element of every parameter. Returns the largest
/// violation found as an error naming the parameter and element.
pub fn check_gradients(
    store: &mut ParamStore,
    params: &[Param],
    build: &dyn Fn(&mut Graph, &[Expr]) -> Result<Expr>,
    cfg: GradCheck,
) -> Result<()> {
    store.zero_grads()?;
    {
        let mut g = Graph::new();
        let xs: Vec<Expr> = params.iter().map(|p| g.param(p)).collect();
        let loss = build(&mut g, &xs)?;
        Sequential::new().backward(&mut g, store, loss)?;
    }
    let tensor_err = |source| GraphError::Tensor {
        context: "gradient check".into(),
        source: Box::new(source),
    };
    for p in params {
        let analytic: Vec<f32> = store.grad(p)?.to_vec::<f32>().map_err(tensor_err)?;
        let original: Vec<f32> = store.value(p)?.to_vec::<f32>().map_err(tensor_err)?;
        for (i, &a) in analytic.iter().enumerate() {
            let mut at = |delta: f32| -> Result<f32> {
                let mut v = original.clone();
                v[i] += delta;
                *store.value_mut(p)? = Tensor::from_vec(v, p.shape()).map_err(tensor_err)?;
                loss_of(store, build, params)
            };
            let plus = at(cfg.step)?;
            let minus = at(-cfg.step)?;
            let numeric = (plus - minus) / (2.0 * cfg.step);
            *store.value_mut(p)? =
                Tensor::from_vec(original.clone(), p.shape()).map_err(tensor_err)?;
            let ok = (a - numeric).abs() <= cfg.atol + cfg.rtol * numeric.abs();
            if !ok || a.is_nan() != numeric.is_nan() {
                return Err(GraphError::Params(format!(
                    "gradient check failed for {} element {i}: analytic {a}, numeric {numeric}",
                    store.name(p.id())?
                )));
            }
        }
    }
    Ok(())
}
