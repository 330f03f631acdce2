//! A recurrent layer over a padded sequence in one matrix
//! ([`Recurrent::transduce_padded`]): with vertex functions, each layer is
//! ONE scan node per sequence ([`Graph::scan`]), so a minibatch of
//! sequences of any lengths runs each layer as one batch.

use sheaf_autodiff::{Expr, Graph, GraphError, Result};
use sheaf_tensor::{DType, Device, Tensor};

use crate::cells::Cell;
use crate::recurrent::Recurrent;

impl<C: Cell> Recurrent<C> {
    /// The outputs at every position of a sequence given as one matrix
    /// `xs` `[T, input]` of which the first `len` rows are real (the rest
    /// padding, never read): `[T, output width]`, row `t` the output of
    /// [`Recurrent::transduce`] on the first `len` rows at `t`, zeros at
    /// `t >= len`.
    ///
    /// With [`Recurrent::with_vertex_functions`], a one-directional layer
    /// whose cell's output is its state (GRU, Elman RNN) adds ONE node per
    /// layer, a scan of its step ([`Graph::scan`]), which runs the input
    /// product once over the real positions of all sequences and the
    /// recurrent part position by position: every sequence padded to the
    /// same `T` then runs each layer in one batch whatever its length,
    /// instead of a batch per position. Otherwise (an LSTM, a
    /// bidirectional layer, no vertex functions) the layer runs position
    /// by position as `transduce` does, its outputs gathered into the
    /// matrix. Dropout: the input and output dropout of a scanned layer
    /// draw one mask over the whole matrix, its recurrent dropout one per
    /// position from the scan's seed.
    ///
    /// ```
    /// use sheaf_autodiff::{Graph, ParamStore, Sequential};
    /// use sheaf_nn::prelude::*;
    /// use sheaf_tensor::Tensor;
    ///
    /// let mut store = ParamStore::new();
    /// let gru = Gru::new(&mut Scope::new(&mut store, 1), 2, RecurrentConfig::new(3))?;
    /// let scanned = gru.clone().with_vertex_functions()?;
    /// // Three real positions of five: the last two rows are padding.
    /// let rows = vec![0.1f32, 0.2, 0.3, 0.4, 0.5, 0.6, 9.0, 9.0, 9.0, 9.0];
    /// let mut g = Graph::new();
    /// let xs = g.input(Tensor::from_vec(rows.clone(), [5, 2]).unwrap());
    /// let hs = scanned.transduce_padded(&mut g, xs, 3)?;
    /// let got = Sequential::new().forward(&mut g, &store, hs)?.to_vec::<f32>().unwrap();
    /// assert_eq!(got.len(), 5 * 3);
    /// assert!(got[9..].iter().all(|&v| v == 0.0));
    /// // The same as transduce on the three real rows.
    /// let xs: Vec<_> = rows[..6].chunks(2).map(|r| g.input(Tensor::from_vec(r.to_vec(), [2]).unwrap())).collect();
    /// let last = gru.transduce(&mut g, &xs)?[2];
    /// let want = Sequential::new().forward(&mut g, &store, last)?.to_vec::<f32>().unwrap();
    /// assert!(got[6..9].iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    ///
    /// Errors: `xs` not `[T, input]`, `len` 0 or above `T`.
    pub fn transduce_padded(&self, g: &mut Graph, xs: Expr, len: usize) -> Result<Expr> {
        let cfg = self.config();
        let inp = self.units()[0][0].inp;
        let shape = g.shape(xs)?;
        let steps = match shape.dims() {
            [steps, w] if *w == inp => *steps,
            _ => {
                return Err(GraphError::Params(format!(
                    "{}.transduce_padded: a sequence [T, {inp}], not {shape}",
                    self.path
                )))
            }
        };
        if len == 0 || len > steps {
            return Err(GraphError::Params(format!(
                "{}.transduce_padded: length {len} outside 1..={steps}",
                self.path
            )));
        }
        let scans = self
            .step_fns()
            .filter(|_| self.dirs() == 1 && C::state_width(cfg.hidden) == cfg.hidden);
        let Some(fns) = scans else {
            return self.transduce_rows(g, xs, steps, len);
        };
        // One direction: state `l` is layer `l`'s.
        let init = self.zero_state(g)?;
        let mut seq = self.drop(g, xs, cfg.input_dropout)?;
        for (layer, &zero) in fns.iter().zip(&init.states) {
            seq = g.scan(layer[0].scan_step(g.is_train()), seq, zero, len)?;
            seq = self.drop(g, seq, cfg.output_dropout)?;
        }
        Ok(seq)
    }

    /// [`Recurrent::transduce_padded`] position by position: the real
    /// rows cut out, [`Recurrent::transduce`], zeros after them.
    fn transduce_rows(&self, g: &mut Graph, xs: Expr, steps: usize, len: usize) -> Result<Expr> {
        let inp = self.units()[0][0].inp;
        let flat = g.reshape(xs, [steps * inp])?;
        let rows: Vec<Expr> = (0..len)
            .map(|t| g.slice(flat, t * inp, (t + 1) * inp))
            .collect::<Result<_>>()?;
        let mut hs = self.transduce(g, &rows)?;
        let width = self.output_width();
        if len < steps {
            let zeros = Tensor::zeros([(steps - len) * width], DType::F32, Device::Cpu).map_err(
                |source| GraphError::Tensor {
                    context: format!("{} padding", C::NAME),
                    source: Box::new(source),
                },
            )?;
            hs.push(g.input(zeros));
        }
        let all = g.concat(&hs)?;
        g.reshape(all, [steps, width])
    }
}
