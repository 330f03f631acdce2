//! Recurrent steps as vertex functions ([`Recurrent::with_vertex_functions`]):
//! each unit's step body (the recurrent product and the cell) traced once,
//! so a step adds one call node instead of its ops one by one.

use std::sync::Arc;

use sheaf_autodiff::{Expr, Graph, Result, VertexFn};
use sheaf_tensor::Shape;

use crate::cells::{Cell, Prev};
use crate::recurrent::{Recurrent, Unit};

/// The step functions of one unit: in training mode and, when the unit has
/// recurrent dropout, in evaluation mode (which has none).
#[derive(Debug, Clone)]
pub(crate) struct StepFns {
    train: VertexFn,
    eval: Option<VertexFn>,
    /// Whether the function reads the previous output as a third argument
    /// (cells whose output is not their state: the LSTM's `h`).
    reads_output: bool,
}

/// Per layer, per direction.
pub(crate) type UnitFns = Arc<Vec<Vec<StepFns>>>;

fn trace<C: Cell>(unit: &Unit, hidden: usize, train: bool) -> Result<(VertexFn, bool)> {
    let gates = Shape::from([C::GATES * hidden]);
    let state = Shape::from([C::state_width(hidden)]);
    let reads_output = C::state_width(hidden) != hidden;
    let mut args = vec![gates, state];
    if reads_output {
        args.push(Shape::from([hidden]));
    }
    let unit = *unit;
    let f = VertexFn::trace(
        step_name(C::NAME),
        &args,
        move |g: &mut Graph, a: &[Expr]| {
            g.set_train(train);
            let prev = match a.get(2) {
                Some(&h) => Prev::Output(h),
                None => Prev::Unknown,
            };
            Ok(vec![C::step(g, &unit, a[0], a[1], prev)?])
        },
    )?;
    Ok((f, reads_output))
}

/// The step function's name in plans and errors.
fn step_name(cell: &str) -> &'static str {
    match cell {
        "Lstm" => "lstm_step",
        "Gru" => "gru_step",
        "Rnn" => "rnn_step",
        _ => "recurrent_step",
    }
}

impl<C: Cell> Recurrent<C> {
    /// The same layer with every step after the first (from a known
    /// state) added as ONE call of a vertex function per unit (see
    /// [`VertexFn`]): the same values and gradients (recurrent dropout
    /// masks aside), fewer graph nodes per step.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::prelude::*;
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1), 3, RecurrentConfig::new(4))?;
    /// let called = gru.clone().with_vertex_functions()?;
    /// let run = |layer: &Gru| -> Result<(Vec<f32>, usize), sheaf_autodiff::GraphError> {
    ///     let mut g = Graph::new();
    ///     let xs: Vec<_> = (0..5).map(|k| g.input(Tensor::full_f32(k as f32 * 0.1, [3], sheaf_tensor::Device::Cpu).unwrap())).collect();
    ///     let hs = layer.transduce(&mut g, &xs)?;
    ///     let y = Sequential::new().forward(&mut g, &store, hs[4])?;
    ///     Ok((y.to_vec::<f32>().unwrap(), g.len()))
    /// };
    /// let ((a, plain), (b, fewer)) = (run(&gru)?, run(&called)?);
    /// assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-6));
    /// assert!(fewer < plain);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn with_vertex_functions(mut self) -> Result<Self> {
        let hidden = self.config().hidden;
        let mut fns = Vec::with_capacity(self.units().len());
        for layer in self.units() {
            let mut row = Vec::with_capacity(layer.len());
            for unit in layer {
                let (train, reads_output) = trace::<C>(unit, hidden, true)?;
                let eval = match unit.recurrent_dropout() > 0.0 {
                    true => Some(trace::<C>(unit, hidden, false)?.0),
                    false => None,
                };
                row.push(StepFns {
                    train,
                    eval,
                    reads_output,
                });
            }
            fns.push(row);
        }
        self.set_step_fns(Some(Arc::new(fns)));
        Ok(self)
    }

    /// One step of unit `(layer, dir)`: a call where the layer has step
    /// functions and the previous state is known, the cell's ops otherwise.
    pub(crate) fn run_step(
        &self,
        g: &mut Graph,
        (layer, dir): (usize, usize),
        xw: Expr,
        state: Expr,
        prev: Prev,
    ) -> Result<Expr> {
        let unit = &self.units()[layer][dir];
        let Some(f) = self.step_fns().map(|fns| &fns[layer][dir]) else {
            return C::step(g, unit, xw, state, prev);
        };
        let call = match (g.is_train(), &f.eval) {
            (false, Some(eval)) => eval,
            _ => &f.train,
        };
        Ok(match (prev, f.reads_output) {
            (Prev::Zero, _) => return C::step(g, unit, xw, state, prev),
            (_, false) => g.call_one(call, &[xw, state])?,
            (Prev::Output(h), true) => g.call_one(call, &[xw, state, h])?,
            (Prev::Unknown, true) => {
                let h = C::output(g, state)?;
                g.call_one(call, &[xw, state, h])?
            }
        })
    }
}
