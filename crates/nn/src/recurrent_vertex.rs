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
    /// The same steps with the input product inside (they read the input
    /// `x`, not `W x + b`), used after [`Recurrent::fold_input_products`].
    folded_train: VertexFn,
    folded_eval: Option<VertexFn>,
    fold: bool,
}

impl StepFns {
    /// The step `(x, state) -> state`, its input product inside, for the
    /// graph's mode: what a scan runs ([`Recurrent::transduce_padded`])
    /// where the cell's output is its state (the scan runs the input
    /// product once over every real position).
    pub(crate) fn scan_step(&self, train: bool) -> &VertexFn {
        match (train, &self.folded_eval) {
            (false, Some(eval)) => eval,
            _ => &self.folded_train,
        }
    }
}

/// Per layer, per direction.
pub(crate) type UnitFns = Arc<Vec<Vec<StepFns>>>;

fn trace<C: Cell>(unit: &Unit, hidden: usize, train: bool, fold: bool) -> Result<(VertexFn, bool)> {
    let first = match fold {
        true => Shape::from([unit.inp]),
        false => Shape::from([C::GATES * hidden]),
    };
    let state = Shape::from([C::state_width(hidden)]);
    let reads_output = C::state_width(hidden) != hidden;
    let mut args = vec![first, state];
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
            let xw = match fold {
                true => unit.input_part(g, a[0])?,
                false => a[0],
            };
            Ok(vec![C::step(g, &unit, xw, a[1], prev)?])
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
                let dropout = unit.recurrent_dropout() > 0.0;
                let (train, reads_output) = trace::<C>(unit, hidden, true, false)?;
                let eval = match dropout {
                    true => Some(trace::<C>(unit, hidden, false, false)?.0),
                    false => None,
                };
                let (folded_train, _) = trace::<C>(unit, hidden, true, true)?;
                let folded_eval = match dropout {
                    true => Some(trace::<C>(unit, hidden, false, true)?.0),
                    false => None,
                };
                row.push(StepFns {
                    train,
                    eval,
                    reads_output,
                    folded_train,
                    folded_eval,
                    fold: false,
                });
            }
            fns.push(row);
        }
        self.set_step_fns(Some(Arc::new(fns)));
        Ok(self)
    }

    /// With vertex functions on, each step's call also computes its input
    /// product (`W x + b`), where by default the input products of all
    /// positions are one batched node before the steps: one graph node per
    /// step instead of two, at the price of a product per step batch
    /// instead of one over the whole sequence. Measured on W6 (GRU of 32,
    /// agenda, 1 thread, Zen 4): the same speed as unfolded, so it is off
    /// by default. No effect without vertex functions.
    pub fn fold_input_products(mut self, yes: bool) -> Self {
        if let Some(fns) = self.step_fns() {
            let mut fns: Vec<Vec<StepFns>> = (**fns).clone();
            fns.iter_mut().flatten().for_each(|f| f.fold = yes);
            self.set_step_fns(Some(Arc::new(fns)));
        }
        self
    }

    /// Whether steps take their input `x` (their calls compute `W x + b`).
    pub(crate) fn folds_inputs(&self) -> bool {
        self.step_fns()
            .and_then(|fns| fns.first().and_then(|l| l.first()))
            .is_some_and(|f| f.fold)
    }

    /// [`Recurrent::run_step`] from the input `x` (folded steps).
    pub(crate) fn run_step_x(
        &self,
        g: &mut Graph,
        (layer, dir): (usize, usize),
        x: Expr,
        state: Expr,
        prev: Prev,
    ) -> Result<Expr> {
        let unit = &self.units()[layer][dir];
        let f = match self.step_fns().map(|fns| &fns[layer][dir]) {
            Some(f) if !matches!(prev, Prev::Zero) => f,
            _ => {
                let xw = unit.input_part(g, x)?;
                return self.run_step(g, (layer, dir), xw, state, prev);
            }
        };
        let call = match (g.is_train(), &f.folded_eval) {
            (false, Some(eval)) => eval,
            _ => &f.folded_train,
        };
        Ok(match (prev, f.reads_output) {
            (Prev::Zero, _) | (_, false) => g.call_one(call, &[x, state])?,
            (Prev::Output(h), true) => g.call_one(call, &[x, state, h])?,
            (Prev::Unknown, true) => {
                let h = C::output(g, state)?;
                g.call_one(call, &[x, state, h])?
            }
        })
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
