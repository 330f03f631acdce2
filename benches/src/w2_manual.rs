//! W2 batched by hand: the baseline automatic batching is measured
//! against. Written directly on the tensor backend with `[T * B, ...]`
//! matrices, rows time-major (`t * B + b`): per layer and direction ONE
//! product for the inputs of all time steps, then per time step one
//! product with `U` and one fused LSTM cell; the backward mirrors it (one
//! `dG U` per step, the weight gradients and the input gradient as one
//! product each over all steps), then an SGD update. Sentences of one
//! batch must have one length (W2's all have 40 words).

use sheaf_autodiff::{Param, ParamStore};
use sheaf_tensor::{
    Backend, CellSpec, DType, Device, Sgd, Tensor, TensorError, TensorMut, Transpose,
};

use crate::w2::{Model, Sentence};

/// The hand-batched W2 step.
pub struct Manual {
    be: &'static dyn Backend,
}

/// What forward keeps of one direction for backward.
struct Saved {
    act: Tensor,
    c: Tensor,
    h: Tensor,
}

type R<T> = Result<T, String>;

fn zeros(dims: &[usize]) -> R<Tensor> {
    let shape = sheaf_tensor::Shape::new(dims).map_err(|e| format!("W2 manual {dims:?}: {e}"))?;
    Tensor::zeros(shape, DType::F32, Device::Cpu).map_err(|e| format!("W2 manual {dims:?}: {e}"))
}

fn view(t: &mut Tensor) -> R<TensorMut<'_>> {
    t.view_mut().map_err(|e| format!("W2 manual: {e}"))
}

fn rows(t: &mut Tensor, r: std::ops::Range<usize>) -> R<TensorMut<'_>> {
    let v = t.view_mut().map_err(|e| format!("W2 manual: {e}"))?;
    v.into_rows_mut(r).map_err(|e| format!("W2 manual: {e}"))
}

fn ro(t: &Tensor, r: std::ops::Range<usize>) -> R<Tensor> {
    t.rows(r).map_err(|e| format!("W2 manual: {e}"))
}

fn k(what: &'static str) -> impl Fn(TensorError) -> String {
    move |e| format!("W2 manual {what}: {e}")
}

/// `[a | b]` row by row (`a` `[n, p]`, `b` `[n, q]` into `[n, p + q]`).
fn concat_cols(a: &Tensor, b: &Tensor) -> R<Tensor> {
    let (n, p, q) = (a.num_rows(), a.row_len(), b.row_len());
    let mut out = zeros(&[n, p + q])?;
    let (sa, sb) = (
        a.as_slice::<f32>().map_err(k("concat"))?,
        b.as_slice::<f32>().map_err(k("concat"))?,
    );
    let so = out.as_mut_slice::<f32>().map_err(k("concat"))?;
    for (r, row) in so.chunks_exact_mut(p + q).enumerate() {
        row[..p].copy_from_slice(&sa[r * p..(r + 1) * p]);
        row[p..].copy_from_slice(&sb[r * q..(r + 1) * q]);
    }
    Ok(out)
}

/// Columns `from..from + w` of `x` `[n, cols]` as `[n, w]`.
fn cols(x: &Tensor, from: usize, w: usize) -> R<Tensor> {
    let (n, c) = (x.num_rows(), x.row_len());
    let s = x.as_slice::<f32>().map_err(k("split"))?;
    let mut out = zeros(&[n, w])?;
    let so = out.as_mut_slice::<f32>().map_err(k("split"))?;
    for r in 0..n {
        so[r * w..(r + 1) * w].copy_from_slice(&s[r * c + from..r * c + from + w]);
    }
    Ok(out)
}

impl Manual {
    /// On the CPU backend.
    pub fn new() -> R<Manual> {
        Ok(Manual {
            be: Device::Cpu
                .backend()
                .map_err(|e| format!("W2 manual: {e}"))?,
        })
    }

    fn matmul(
        &self,
        a: &Tensor,
        ta: bool,
        b: &Tensor,
        tb: bool,
        beta: f32,
        out: TensorMut<'_>,
    ) -> R<()> {
        let t = |x| if x { Transpose::Yes } else { Transpose::No };
        self.be
            .matmul(a, t(ta), b, t(tb), 1.0, beta, out)
            .map_err(k("product"))
    }

    /// One direction forward over `inp` `[T * B, in]`.
    fn dir_forward(
        &self,
        store: &ParamStore,
        d: &crate::w2::Direction,
        inp: &Tensor,
        (t_len, b): (usize, usize),
        backward: bool,
    ) -> R<Saved> {
        let p = |p: &Param| store.value(p).map_err(|e| format!("W2 manual: {e}"));
        let (w, u, bias) = (p(&d.w)?, p(&d.u)?, p(&d.b)?);
        let h4 = u.num_rows();
        let h = h4 / 4;
        let n = t_len * b;
        // All steps' input products at once.
        let mut gx = zeros(&[n, h4])?;
        self.be
            .broadcast_row(bias, view(&mut gx)?)
            .map_err(k("bias"))?;
        self.matmul(inp, false, w, true, 1.0, view(&mut gx)?)?;
        let mut s = Saved {
            act: zeros(&[n, h4])?,
            c: zeros(&[n, h])?,
            h: zeros(&[n, h])?,
        };
        let c0 = zeros(&[b, h])?;
        let mut prev: Option<usize> = None;
        for step in 0..t_len {
            let t = if backward { t_len - 1 - step } else { step };
            let r = t * b..(t + 1) * b;
            let mut gates = ro(&gx, r.clone())?.reshape([b, h4]).map_err(k("gates"))?;
            // A private copy: the cell reads the gates, U h adds into them.
            let mut own = zeros(&[b, h4])?;
            self.be
                .copy_rows(&gates, 0, view(&mut own)?, 0, b)
                .map_err(k("gates"))?;
            gates = own;
            let c_prev = match prev {
                Some(pt) => {
                    let hp = ro(&s.h, pt * b..(pt + 1) * b)?;
                    self.matmul(&hp, false, u, true, 1.0, view(&mut gates)?)?;
                    ro(&s.c, pt * b..(pt + 1) * b)?
                }
                None => c0.clone(),
            };
            let (act, c, hh) = (&mut s.act, &mut s.c, &mut s.h);
            self.be
                .cell_fwd(
                    CellSpec::LSTM,
                    &[&gates, &c_prev],
                    &mut [rows(act, r.clone())?, rows(c, r.clone())?, rows(hh, r)?],
                )
                .map_err(k("cell"))?;
            prev = Some(t);
        }
        Ok(s)
    }

    /// One direction backward: from `dh_out` `[T * B, H]` (the gradient at
    /// its outputs) into the parameter gradients `(dw, du, db)` and the
    /// input gradient `dinp` (accumulated).
    #[allow(clippy::too_many_arguments)]
    fn dir_backward(
        &self,
        store: &ParamStore,
        d: &crate::w2::Direction,
        inp: &Tensor,
        s: &Saved,
        dh_out: &Tensor,
        (t_len, b): (usize, usize),
        backward: bool,
        grads: &mut [Tensor; 3],
        dinp: &mut Tensor,
    ) -> R<()> {
        let p = |p: &Param| store.value(p).map_err(|e| format!("W2 manual: {e}"));
        let (w, u) = (p(&d.w)?, p(&d.u)?);
        let h4 = u.num_rows();
        let h = h4 / 4;
        let n = t_len * b;
        let mut dg = zeros(&[n, h4])?;
        // h of the previous step of each row block (zeros at the first).
        let mut h_prev = zeros(&[n, h])?;
        let mut dc = zeros(&[b, h])?;
        let mut dh_rec = zeros(&[b, h])?;
        let c0 = zeros(&[b, h])?;
        for step in (0..t_len).rev() {
            let t = if backward { t_len - 1 - step } else { step };
            let r = t * b..(t + 1) * b;
            let pt = (step > 0).then(|| if backward { t + 1 } else { t - 1 });
            let mut dh = zeros(&[b, h])?;
            self.be
                .copy_rows(&ro(dh_out, r.clone())?, 0, view(&mut dh)?, 0, b)
                .map_err(k("dh"))?;
            if step + 1 < t_len {
                self.be
                    .axpy(1.0, &dh_rec, view(&mut dh)?)
                    .map_err(k("dh"))?;
            }
            let c_prev = match pt {
                Some(pt) => {
                    let hp = ro(&s.h, pt * b..(pt + 1) * b)?;
                    self.be
                        .copy_rows(&hp, 0, rows(&mut h_prev, r.clone())?, 0, b)
                        .map_err(k("h_prev"))?;
                    ro(&s.c, pt * b..(pt + 1) * b)?
                }
                None => c0.clone(),
            };
            let mut dc_prev = zeros(&[b, h])?;
            self.be
                .cell_bwd(
                    CellSpec::LSTM,
                    &[
                        &ro(&s.act, r.clone())?,
                        &c_prev,
                        &ro(&s.c, r.clone())?,
                        &dc,
                        &dh,
                    ],
                    &mut [rows(&mut dg, r.clone())?, view(&mut dc_prev)?],
                )
                .map_err(k("cell backward"))?;
            dc = dc_prev;
            if pt.is_some() {
                self.matmul(&ro(&dg, r)?, false, u, false, 0.0, view(&mut dh_rec)?)?;
            }
        }
        let [dw, du, db] = grads;
        self.matmul(&dg, true, inp, false, 1.0, view(dw)?)?;
        self.matmul(&dg, true, &h_prev, false, 1.0, view(du)?)?;
        self.be
            .col_sums_acc(&dg, view(db)?)
            .map_err(k("bias grad"))?;
        self.matmul(&dg, false, w, false, 1.0, view(dinp)?)
    }

    /// One training step on `batch` (sentences of one length): forward,
    /// backward and an SGD update with `lr`. Returns the summed loss.
    pub fn step(
        &mut self,
        store: &mut ParamStore,
        m: &Model,
        batch: &[Sentence],
        lr: f32,
    ) -> R<f32> {
        sheaf_tensor::denormals::prepare();
        let b = batch.len();
        let t_len = batch.first().map_or(0, |s| s.words.len());
        if b == 0
            || t_len == 0
            || batch
                .iter()
                .any(|s| s.words.len() != t_len || s.tags.len() != t_len)
        {
            return Err(format!(
                "W2 manual: {b} sentences, which must be non-empty and of one length ({t_len})"
            ));
        }
        let dims = (t_len, b);
        let n = t_len * b;
        let at = |f: fn(&Sentence) -> &Vec<u32>| -> R<Tensor> {
            let v: Vec<u32> = (0..n).map(|r| f(&batch[r % b])[r / b]).collect();
            Tensor::from_vec(v, [n]).map_err(k("indices"))
        };
        let (words, tags) = (at(|s| &s.words)?, at(|s| &s.tags)?);
        let cfg = m.cfg;
        // Forward.
        let mut x0 = zeros(&[n, cfg.embed])?;
        self.be
            .gather_rows(
                store.value(&m.emb).map_err(|e| e.to_string())?,
                &words,
                view(&mut x0)?,
            )
            .map_err(k("embedding"))?;
        let mut inputs = vec![x0];
        let mut saved = Vec::new();
        for layer in &m.layers {
            let inp = inputs.last().ok_or("W2 manual: no input")?;
            let f = self.dir_forward(store, &layer[0], inp, dims, false)?;
            let bw = self.dir_forward(store, &layer[1], inp, dims, true)?;
            let out = concat_cols(&f.h, &bw.h)?;
            saved.push([f, bw]);
            inputs.push(out);
        }
        let top = inputs.last().ok_or("W2 manual: no output")?;
        let (wo, bo) = (
            store.value(&m.w_out).map_err(|e| e.to_string())?,
            store.value(&m.b_out).map_err(|e| e.to_string())?,
        );
        let mut logits = zeros(&[n, cfg.classes])?;
        self.be
            .broadcast_row(bo, view(&mut logits)?)
            .map_err(k("out bias"))?;
        self.matmul(top, false, wo, true, 1.0, view(&mut logits)?)?;
        let mut probs = zeros(&[n, cfg.classes])?;
        let mut loss = zeros(&[n])?;
        self.be
            .nll_log_softmax(&logits, &tags, view(&mut probs)?, view(&mut loss)?)
            .map_err(k("loss"))?;
        let total: f32 = loss.as_slice::<f32>().map_err(k("loss"))?.iter().sum();

        // Backward.
        let ones = Tensor::full_f32(1.0, [n], Device::Cpu).map_err(k("loss"))?;
        let mut dlogits = zeros(&[n, cfg.classes])?;
        self.be
            .nll_log_softmax_bwd(&probs, &tags, &ones, view(&mut dlogits)?)
            .map_err(k("loss backward"))?;
        let mut dwo = zeros(&[cfg.classes, 2 * cfg.hidden])?;
        let mut dbo = zeros(&[cfg.classes])?;
        self.matmul(&dlogits, true, top, false, 0.0, view(&mut dwo)?)?;
        self.be
            .col_sums_acc(&dlogits, view(&mut dbo)?)
            .map_err(k("out bias grad"))?;
        let mut dout = zeros(&[n, 2 * cfg.hidden])?;
        self.matmul(&dlogits, false, wo, false, 0.0, view(&mut dout)?)?;
        let mut layer_grads: Vec<[[Tensor; 3]; 2]> = Vec::new();
        for (l, layer) in m.layers.iter().enumerate().rev() {
            let inp = &inputs[l];
            let mut dinp = zeros(&[n, inp.row_len()])?;
            let h = cfg.hidden;
            let mut grads: [[Tensor; 3]; 2] = [
                [
                    zeros(&[4 * h, inp.row_len()])?,
                    zeros(&[4 * h, h])?,
                    zeros(&[4 * h])?,
                ],
                [
                    zeros(&[4 * h, inp.row_len()])?,
                    zeros(&[4 * h, h])?,
                    zeros(&[4 * h])?,
                ],
            ];
            for d in 0..2 {
                let dh = cols(&dout, d * h, h)?;
                self.dir_backward(
                    store,
                    &layer[d],
                    inp,
                    &saved[l][d],
                    &dh,
                    dims,
                    d == 1,
                    &mut grads[d],
                    &mut dinp,
                )?;
            }
            layer_grads.push(grads);
            dout = dinp;
        }
        layer_grads.reverse();
        let mut demb = zeros(&[cfg.vocab, cfg.embed])?;
        self.be
            .scatter_add_rows(&dout, &words, view(&mut demb)?)
            .map_err(k("embedding grad"))?;

        // SGD.
        let sgd = Sgd {
            lr,
            momentum: 0.0,
            weight_decay: 0.0,
        };
        let mut update = |p: &Param, g: &Tensor| -> R<()> {
            let v = store.value_mut(p).map_err(|e| e.to_string())?;
            self.be
                .sgd_step(&sgd, view(v)?, g, None)
                .map_err(k("update"))
        };
        update(&m.emb, &demb)?;
        update(&m.w_out, &dwo)?;
        update(&m.b_out, &dbo)?;
        for (layer, grads) in m.layers.iter().zip(&layer_grads) {
            for (d, g) in layer.iter().zip(grads) {
                update(&d.w, &g[0])?;
                update(&d.u, &g[1])?;
                update(&d.b, &g[2])?;
            }
        }
        Ok(total)
    }
}
