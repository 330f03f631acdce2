//! Finite-difference gradient checking, for built-in ops and users' own.
//!
//! [`check_gradients`] builds a scalar loss from parameters, back-propagates
//! with the [`Sequential`] executor, and compares every parameter's gradient
//! with a Richardson-extrapolated central difference: with
//! `D(h) = (L(p + h) - L(p - h)) / 2h`, `numeric = (4 D(h/2) - D(h)) / 3`,
//! whose truncation error is O(h^4) instead of O(h^2). The loss is
//! evaluated in f32 and summed in f64; at `h = 1e-2` its rounding error
//! (about 1e-7 relative) gives a numeric error near 2e-5 for losses of
//! order one. The tolerance is `|analytic - numeric| <= atol + rtol *
//! |numeric|` with `atol = rtol = 1e-3` by default: a backward that is off
//! by 1% of a gradient, or by 2e-3 absolute, fails (tested with a
//! deliberately wrong op), while rounding never does. Ops with kinks
//! (relu, max) must be checked away from them: within `h` of a kink no
//! difference quotient is the derivative.

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
            atol: 1e-3,
            rtol: 1e-3,
        }
    }
}

/// Loss of a fresh graph built by `build` (in evaluation mode if `train`
/// is false, with seed 0 so dropout masks repeat).
fn loss_of(
    store: &ParamStore,
    build: &dyn Fn(&mut Graph, &[Expr]) -> Result<Expr>,
    params: &[Param],
) -> Result<f64> {
    let mut g = Graph::new();
    let xs: Vec<Expr> = params.iter().map(|p| g.param(p)).collect();
    let loss = build(&mut g, &xs)?;
    let v = Sequential::new().forward(&mut g, store, loss)?;
    let s = v.as_slice::<f32>().map_err(|source| GraphError::Tensor {
        context: "gradient check loss".into(),
        source: Box::new(source),
    })?;
    Ok(s.iter().map(|&x| f64::from(x)).sum())
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
            // (loss, step actually taken after rounding to f32).
            let mut at = |delta: f32| -> Result<(f64, f64)> {
                let mut v = original.clone();
                v[i] += delta;
                let taken = f64::from(v[i]) - f64::from(original[i]);
                *store.value_mut(p)? = Tensor::from_vec(v, p.shape()).map_err(tensor_err)?;
                Ok((loss_of(store, build, params)?, taken))
            };
            let mut quotient = |h: f32| -> Result<f64> {
                let ((plus, up), (minus, down)) = (at(h)?, at(-h)?);
                Ok((plus - minus) / (up - down))
            };
            let (d_h, d_half) = (quotient(cfg.step)?, quotient(cfg.step / 2.0)?);
            let numeric = ((4.0 * d_half - d_h) / 3.0) as f32;
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
