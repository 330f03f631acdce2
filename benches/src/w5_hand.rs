//! W5 batched by hand, the way DGL or PyG batch graphs: the baseline the
//! scheduler's strategies are measured against, written directly on the
//! tensor backend for the weave model of [`crate::w5`] (the same
//! parameters, the same loss, the same Adam).
//!
//! A minibatch becomes one graph: the atoms of all its molecules stacked
//! as `X0` `[N, atom_in]`, all ordered pairs `ij` (`i != j` within a
//! molecule, `i` major, `j` increasing: the order of `Molecule::pairs`) as
//! `Q0` `[P, PAIR_FEATURES]`, and index lists per pair (its atoms' rows,
//! its reversed pair's row) and per atom (its molecule). Every layer is
//! ONE product over all its rows, `dense(x) = relu(x W^T + b)`:
//!
//! - module 1: `AA = dense(X0)`, `PA = segment_sum_i dense(Q0)`, `X1 =
//!   dense([AA | PA])`; `Z = dense([X0[i] | X0[j]])` (each ordered pair's
//!   product once), `AP_ij = Z_ij + Z_ji` (a gather by the reversed-pair
//!   index), `Q1 = dense([AP | dense(Q0)])`;
//! - module 2, atoms only: `X2 = dense([dense(X1) | segment_sum_i
//!   dense(Q1)])`;
//! - `y = (segment_sum_molecule X2) W_h^T + b_h`, loss `mean (y - t)^2`.
//!
//! The backward mirrors each step (relu masks, one product for the weight
//! gradient and one for the input gradient, scatter-adds for gathers and
//! gathers for scatter-adds), then Adam updates every parameter the graph
//! would have touched: never the second module's pair layers (not in
//! [`Weave::params`]), and the pair layers only when the batch has pairs.
//! Buffers come from a pool kept from step to step.

use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{Method, Param, ParamStore};
use sheaf_examples::molecules::{Molecule, PAIR_FEATURES};
use sheaf_examples::weave::Weave;
use sheaf_tensor::{
    Adam, Backend, DType, Device, Shape, Tensor, TensorError, TensorMut, Transpose, Unary,
};

use crate::w5::HIDDEN;

type R<T> = Result<T, String>;

/// Formats a backend error with what was being done.
fn k(what: &'static str) -> impl Fn(TensorError) -> String {
    move |e| format!("W5 hand-batched {what}: {e}")
}

/// A mutable view of a whole tensor.
fn view(t: &mut Tensor) -> R<TensorMut<'_>> {
    t.view_mut().map_err(k("buffer"))
}

/// The layers in [`Weave::params`] order: layer `l` has weight `2 l`
/// (`[out, in]`) and bias `2 l + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    Aa1,
    Pa1,
    A1,
    Ap1,
    Pp1,
    P1,
    Aa2,
    Pa2,
    A2,
    Head,
}

impl Layer {
    const ALL: [Layer; 10] = [
        Layer::Aa1,
        Layer::Pa1,
        Layer::A1,
        Layer::Ap1,
        Layer::Pp1,
        Layer::P1,
        Layer::Aa2,
        Layer::Pa2,
        Layer::A2,
        Layer::Head,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// The parameter names' stem, as the weave example names them.
    fn name(self) -> &'static str {
        match self {
            Layer::Aa1 => "weave1.aa",
            Layer::Pa1 => "weave1.pa",
            Layer::A1 => "weave1.a",
            Layer::Ap1 => "weave1.ap",
            Layer::Pp1 => "weave1.pp",
            Layer::P1 => "weave1.p",
            Layer::Aa2 => "weave2.aa",
            Layer::Pa2 => "weave2.pa",
            Layer::A2 => "weave2.a",
            Layer::Head => "head",
        }
    }

    /// `(out, in)` for atom features `a`, hidden size `d`.
    fn dims(self, a: usize, d: usize) -> (usize, usize) {
        match self {
            Layer::Aa1 => (d, a),
            Layer::Pa1 | Layer::Pp1 => (d, PAIR_FEATURES),
            Layer::Ap1 => (d, 2 * a),
            Layer::A1 | Layer::P1 | Layer::A2 => (d, 2 * d),
            Layer::Aa2 | Layer::Pa2 => (d, d),
            Layer::Head => (1, d),
        }
    }

    /// Whether the layer runs on pairs (the graph never touches it for a
    /// batch without any).
    fn reads_pairs(self) -> bool {
        matches!(
            self,
            Layer::Pa1 | Layer::Ap1 | Layer::Pp1 | Layer::P1 | Layer::Pa2
        )
    }

    fn relu(self) -> bool {
        self != Layer::Head
    }
}

/// Buffers of earlier steps, handed out again (best fit by capacity) so
/// that a step neither allocates nor faults in fresh pages.
#[derive(Debug, Default)]
struct Pool {
    free: Vec<Tensor>,
}

impl Pool {
    /// A CPU tensor of `shape`, zero-filled when `zero` (else holding
    /// whatever the reused buffer held: for outputs written completely).
    fn take(&mut self, shape: impl Into<Shape>, dtype: DType, zero: bool) -> R<Tensor> {
        let shape = shape.into();
        let need = shape.numel().map_err(k("buffer"))?;
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, t)| t.dtype().size_in_bytes() == dtype.size_in_bytes())
            .filter(|(_, t)| t.capacity() >= need)
            .min_by_key(|(_, t)| t.capacity())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let t = self.free.swap_remove(i);
            let reused = if zero {
                t.recycle(shape, dtype)
            } else {
                t.reuse(shape, dtype)
            };
            // A buffer still shared is dropped, not reused.
            if let Ok(t) = reused {
                return Ok(t);
            }
        }
        Tensor::zeros(shape, dtype, Device::Cpu).map_err(k("buffer"))
    }

    fn put(&mut self, ts: impl IntoIterator<Item = Tensor>) {
        self.free.extend(ts);
    }
}

/// Where a minibatch's atoms and pairs sit in the stacked matrices (host
/// index lists, kept between steps).
#[derive(Debug, Default)]
struct Layout {
    /// Per pair `ij`: the rows of atoms `i` and `j`, side by side (`2P`).
    ends: Vec<u32>,
    /// Per pair `ij`: the row of atom `i` (the atom its `P→A` adds into).
    src: Vec<u32>,
    /// Per pair `ij`: the row of pair `ji`.
    rev: Vec<u32>,
    /// Per atom: its molecule.
    mol: Vec<u32>,
}

impl Layout {
    /// Checks `batch` against the model (`atom_in` atom features) and lays
    /// it out.
    fn build(&mut self, batch: &[Molecule], atom_in: usize) -> R<()> {
        if batch.is_empty() {
            return Err("W5 hand-batched: the batch has no molecules".into());
        }
        for v in [&mut self.ends, &mut self.src, &mut self.rev, &mut self.mol] {
            v.clear();
        }
        let rows = |x: usize| {
            u32::try_from(x).map_err(|_| format!("W5 hand-batched: {x} rows overflow u32"))
        };
        for (b, m) in batch.iter().enumerate() {
            let bad = |what: String| format!("W5 hand-batched: molecule {b} of the batch {what}");
            let n = m.atoms.len();
            if n == 0 {
                return Err(bad("has no atoms".into()));
            }
            if let Some((i, a)) = m.atoms.iter().enumerate().find(|(_, a)| a.len() != atom_in) {
                return Err(bad(format!(
                    "has {} features for atom {i}, the model reads {atom_in}",
                    a.len()
                )));
            }
            if m.pairs.len() != n || m.pairs.iter().any(|row| row.len() != n - 1) {
                return Err(bad(format!(
                    "has {n} atoms but not {n} rows of {} pairs",
                    n - 1
                )));
            }
            let wrong = m.pairs.iter().flatten().find(|p| p.len() != PAIR_FEATURES);
            if let Some(p) = wrong {
                return Err(bad(format!(
                    "has a pair of {} features, the model reads {PAIR_FEATURES}",
                    p.len()
                )));
            }
            let (a0, p0) = (self.mol.len(), self.src.len());
            let pair_row = |i: usize, j: usize| p0 + i * (n - 1) + if j < i { j } else { j - 1 };
            for i in 0..n {
                for j in (0..n).filter(|&j| j != i) {
                    self.src.push(rows(a0 + i)?);
                    self.ends.extend([rows(a0 + i)?, rows(a0 + j)?]);
                    self.rev.push(rows(pair_row(j, i))?);
                }
            }
            let b = rows(b)?;
            self.mol.extend(std::iter::repeat_n(b, n));
        }
        Ok(())
    }
}

/// What the forward keeps for the backward (names as in the module docs;
/// `paq` = `dense(Q)` of `P→A` before the segment sum, `ppq` that of
/// `P→P`, `h` = `[AA | PA]`, `g` = `[X0[i] | X0[j]]`, `kk` = `[AP |
/// ppq]`, `s` the pooled atoms).
struct Fwd {
    x0: Tensor,
    q0: Tensor,
    aa1: Tensor,
    paq1: Tensor,
    h1: Tensor,
    x1: Tensor,
    g: Tensor,
    z: Tensor,
    ppq: Tensor,
    kk: Tensor,
    q1: Tensor,
    aa2: Tensor,
    paq2: Tensor,
    h2: Tensor,
    x2: Tensor,
    s: Tensor,
    y: Tensor,
    src: Tensor,
    rev: Tensor,
    mol: Tensor,
}

impl Fwd {
    fn into_buffers(self) -> [Tensor; 20] {
        [
            self.x0, self.q0, self.aa1, self.paq1, self.h1, self.x1, self.g, self.z, self.ppq,
            self.kk, self.q1, self.aa2, self.paq2, self.h2, self.x2, self.s, self.y, self.src,
            self.rev, self.mol,
        ]
    }
}

/// The hand-batched W5 training step (CPU backend).
#[derive(Debug)]
pub struct WeaveHand {
    be: &'static dyn Backend,
    /// In [`Weave::params`] order.
    params: Vec<Param>,
    atom_in: usize,
    /// The last step's gradients, one per parameter.
    grads: Vec<Tensor>,
    /// Which gradients the last step computed (what the graph would touch).
    touched: Vec<bool>,
    adam: Adam,
    /// Adam's first and second moments, from a parameter's first update.
    moments: Vec<Option<[Tensor; 2]>>,
    steps: u64,
    pool: Pool,
    lay: Layout,
}

/// The weave model seeded as [`crate::w5::model`] seeds it (the same
/// `seed`, the same weights) and its hand-batched step.
pub fn model(store: &mut ParamStore, atom_in: usize, seed: u64) -> R<WeaveHand> {
    let mut rng = StdRng::seed_from_u64(seed);
    let weave = Weave::new(store, atom_in, HIDDEN, &mut rng).map_err(|e| e.to_string())?;
    WeaveHand::new(store, &weave.params())
}

impl WeaveHand {
    /// The step for the parameters `params` of `store`, in
    /// [`Weave::params`] order; their shapes give the sizes. Adam as
    /// [`crate::w5::optimizer`] configures it.
    pub fn new(store: &ParamStore, params: &[Param]) -> R<WeaveHand> {
        let value = |p: &Param| store.value(p).map_err(|e| format!("W5 hand-batched: {e}"));
        if params.len() != 2 * Layer::ALL.len() {
            return Err(format!(
                "W5 hand-batched: {} parameters, the weave model has {}",
                params.len(),
                2 * Layer::ALL.len()
            ));
        }
        let (d, atom_in) = match value(&params[0])?.dims() {
            &[d, a] => (d, a),
            other => {
                return Err(format!(
                    "W5 hand-batched: weave1.aa.w is {other:?}, not [hidden, atom features]"
                ))
            }
        };
        let mut grads = Vec::with_capacity(params.len());
        for l in Layer::ALL {
            let (out, inp) = l.dims(atom_in, d);
            let i = l.index();
            let (w, b) = (value(&params[2 * i])?, value(&params[2 * i + 1])?);
            if w.dims() != [out, inp] || b.dims() != [out] {
                return Err(format!(
                    "W5 hand-batched: layer {} has weight {:?} and bias {:?}, expected [{out}, {inp}] and [{out}]",
                    l.name(),
                    w.dims(),
                    b.dims()
                ));
            }
            for t in [w, b] {
                if t.device() != Device::Cpu {
                    return Err(format!(
                        "W5 hand-batched: layer {} is on {:?}; this baseline runs on the CPU",
                        l.name(),
                        t.device()
                    ));
                }
                grads.push(Tensor::zeros(t.shape(), DType::F32, Device::Cpu).map_err(k("grad"))?);
            }
        }
        let adam = match crate::w5::optimizer().method() {
            Method::Adam(c) => *c,
            other => {
                return Err(format!(
                    "W5 hand-batched: W5 trains with {other:?}, not Adam"
                ))
            }
        };
        Ok(WeaveHand {
            be: Device::Cpu.backend().map_err(k("backend"))?,
            params: params.to_vec(),
            atom_in,
            touched: vec![false; params.len()],
            moments: vec![None; params.len()],
            grads,
            adam,
            steps: 0,
            pool: Pool::default(),
            lay: Layout::default(),
        })
    }

    /// The parameters, in [`Weave::params`] order.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The gradient of parameter `i` from the last [`WeaveHand::gradients`]
    /// (`None` where the graph would not touch it: pair layers of a batch
    /// without pairs, or before any step).
    pub fn grad(&self, i: usize) -> Option<&Tensor> {
        self.touched
            .get(i)
            .copied()
            .unwrap_or(false)
            .then(|| &self.grads[i])
    }

    /// One update on `batch`: [`WeaveHand::gradients`] then
    /// [`WeaveHand::update`]. Returns the mean squared error.
    pub fn step(&mut self, store: &mut ParamStore, batch: &[Molecule]) -> R<f32> {
        let loss = self.gradients(store, batch)?;
        self.update(store)?;
        Ok(loss)
    }

    /// The mean squared error of `batch` and the gradients of every
    /// parameter (read them with [`WeaveHand::grad`]).
    pub fn gradients(&mut self, store: &ParamStore, batch: &[Molecule]) -> R<f32> {
        // The same denormal policy as the executors apply.
        sheaf_tensor::denormals::prepare();
        // Nothing to update if this fails half way.
        self.touched.fill(false);
        let mut lay = std::mem::take(&mut self.lay);
        lay.build(batch, self.atom_in)?;
        let f = self.forward(store, batch, &lay)?;
        let loss = self.backward(store, batch, &f)?;
        self.pool.put(f.into_buffers());
        let has_pairs = !lay.src.is_empty();
        for l in Layer::ALL {
            let i = l.index();
            let on = has_pairs || !l.reads_pairs();
            self.touched[2 * i] = on;
            self.touched[2 * i + 1] = on;
        }
        self.lay = lay;
        Ok(loss)
    }

    /// Adam on every parameter the last [`WeaveHand::gradients`] touched,
    /// with the bias correction of the update count (as
    /// `sheaf_autodiff::Optimizer` does).
    pub fn update(&mut self, store: &mut ParamStore) -> R<()> {
        sheaf_tensor::denormals::prepare();
        let t = self.steps + 1;
        for (i, p) in self.params.iter().enumerate() {
            if !self.touched[i] {
                continue;
            }
            let value = store
                .value_mut(p)
                .map_err(|e| format!("W5 hand-batched update: {e}"))?;
            let [mut m, mut v] = match self.moments[i].take() {
                Some(mv) => mv,
                None => {
                    let zero =
                        || Tensor::zeros(value.shape(), DType::F32, Device::Cpu).map_err(k("adam"));
                    [zero()?, zero()?]
                }
            };
            self.be
                .adam_step(
                    &self.adam,
                    t,
                    view(value)?,
                    &self.grads[i],
                    view(&mut m)?,
                    view(&mut v)?,
                )
                .map_err(k("adam"))?;
            self.moments[i] = Some([m, v]);
            self.touched[i] = false;
        }
        self.steps = t;
        Ok(())
    }

    /// Layer `l`'s weight and bias.
    fn wb<'s>(&self, store: &'s ParamStore, l: Layer) -> R<(&'s Tensor, &'s Tensor)> {
        let i = l.index();
        let get = |p: &Param| {
            store
                .value_of(p.id())
                .map_err(|e| format!("W5 hand-batched {}: {e}", l.name()))
        };
        Ok((get(&self.params[2 * i])?, get(&self.params[2 * i + 1])?))
    }

    /// `act(x W^T + b)` over all rows of `x`: one product.
    fn dense(&mut self, store: &ParamStore, l: Layer, x: &Tensor) -> R<Tensor> {
        let (w, b) = self.wb(store, l)?;
        let mut y = self
            .pool
            .take([x.num_rows(), w.num_rows()], DType::F32, false)?;
        self.be
            .matmul_bias(x, Transpose::No, w, Transpose::Yes, b, view(&mut y)?)
            .map_err(k(l.name()))?;
        if l.relu() {
            self.be
                .unary_inplace(Unary::Relu, view(&mut y)?)
                .map_err(k(l.name()))?;
        }
        Ok(y)
    }

    /// The backward of `y = dense(x)` for the gradient `dy` at `y`: the
    /// weight and bias gradients (overwritten) and, when `want_dx`, the
    /// input's gradient `[rows, in]`.
    fn dense_bwd(
        &mut self,
        store: &ParamStore,
        l: Layer,
        x: &Tensor,
        y: &Tensor,
        dy: &Tensor,
        want_dx: bool,
    ) -> R<Option<Tensor>> {
        let be = self.be;
        let err = k(l.name());
        let (w, _) = self.wb(store, l)?;
        // relu'(pre) = [pre > 0] = [y > 0]: the output serves as the mask.
        let masked = if l.relu() {
            let mut t = self.pool.take(y.shape(), DType::F32, true)?;
            be.unary_bwd(Unary::Relu, y, y, dy, view(&mut t)?)
                .map_err(&err)?;
            Some(t)
        } else {
            None
        };
        let dpre = masked.as_ref().unwrap_or(dy);
        let i = l.index();
        let (gw, gb) = self.grads[2 * i..2 * i + 2].split_at_mut(1);
        be.matmul(
            dpre,
            Transpose::Yes,
            x,
            Transpose::No,
            1.0,
            0.0,
            view(&mut gw[0])?,
        )
        .map_err(&err)?;
        be.fill(0.0, view(&mut gb[0])?).map_err(&err)?;
        be.col_sums_acc(dpre, view(&mut gb[0])?).map_err(&err)?;
        let dx = if want_dx {
            let mut t = self
                .pool
                .take([dpre.num_rows(), w.row_len()], DType::F32, false)?;
            be.matmul(
                dpre,
                Transpose::No,
                w,
                Transpose::No,
                1.0,
                0.0,
                view(&mut t)?,
            )
            .map_err(&err)?;
            Some(t)
        } else {
            None
        };
        self.pool.put(masked);
        Ok(dx)
    }

    /// A `u32` index vector in a pooled buffer.
    fn indices(&mut self, idx: &[u32]) -> R<Tensor> {
        let mut t = self.pool.take([idx.len()], DType::U32, false)?;
        t.as_mut_slice::<u32>()
            .map_err(k("indices"))?
            .copy_from_slice(idx);
        Ok(t)
    }

    /// `out[r] = x[idx[r]]`, `[idx.len(), row]`.
    fn gather(&mut self, x: &Tensor, idx: &Tensor, what: &'static str) -> R<Tensor> {
        let mut t = self
            .pool
            .take([idx.numel(), x.row_len()], DType::F32, false)?;
        self.be
            .gather_rows(x, idx, view(&mut t)?)
            .map_err(k(what))?;
        Ok(t)
    }

    /// `out[idx[r]] += x[r]` into `rows` zero rows (a segment sum).
    fn scatter(&mut self, x: &Tensor, idx: &Tensor, rows: usize, what: &'static str) -> R<Tensor> {
        let mut t = self.pool.take([rows, x.row_len()], DType::F32, true)?;
        self.be
            .scatter_add_rows(x, idx, view(&mut t)?)
            .map_err(k(what))?;
        Ok(t)
    }

    /// `[a | b]` row by row.
    fn concat(&mut self, a: &Tensor, b: &Tensor) -> R<Tensor> {
        let (p, q) = (a.row_len(), b.row_len());
        let mut t = self.pool.take([a.num_rows(), p + q], DType::F32, false)?;
        let be = self.be;
        be.copy_cols(a, 0, view(&mut t)?, 0, p, false)
            .map_err(k("concat"))?;
        be.copy_cols(b, 0, view(&mut t)?, p, q, false)
            .map_err(k("concat"))?;
        Ok(t)
    }

    /// `x` `[rows, 2w]` cut into its halves (the backward of `concat`).
    fn split(&mut self, x: &Tensor) -> R<[Tensor; 2]> {
        let w = x.row_len() / 2;
        let mut halves = [
            self.pool.take([x.num_rows(), w], DType::F32, false)?,
            self.pool.take([x.num_rows(), w], DType::F32, false)?,
        ];
        for (h, half) in halves.iter_mut().enumerate() {
            self.be
                .copy_cols(x, h * w, view(half)?, 0, w, false)
                .map_err(k("split"))?;
        }
        Ok(halves)
    }

    /// The molecules' features in pooled buffers `[N, atom_in]`,
    /// `[P, PAIR_FEATURES]`.
    fn inputs(&mut self, batch: &[Molecule], lay: &Layout) -> R<(Tensor, Tensor)> {
        let (n, p) = (lay.mol.len(), lay.src.len());
        let mut x0 = self.pool.take([n, self.atom_in], DType::F32, false)?;
        let xs = x0.as_mut_slice::<f32>().map_err(k("atoms"))?;
        let atoms = batch.iter().flat_map(|m| &m.atoms);
        for (row, a) in xs.chunks_exact_mut(self.atom_in.max(1)).zip(atoms) {
            row.copy_from_slice(a);
        }
        let mut q0 = self.pool.take([p, PAIR_FEATURES], DType::F32, false)?;
        let qs = q0.as_mut_slice::<f32>().map_err(k("pairs"))?;
        let pairs = batch.iter().flat_map(|m| m.pairs.iter().flatten());
        for (row, q) in qs.chunks_exact_mut(PAIR_FEATURES).zip(pairs) {
            row.copy_from_slice(q);
        }
        Ok((x0, q0))
    }

    fn forward(&mut self, store: &ParamStore, batch: &[Molecule], lay: &Layout) -> R<Fwd> {
        let be = self.be;
        let n = lay.mol.len();
        let (x0, q0) = self.inputs(batch, lay)?;
        let (src, rev, mol) = (
            self.indices(&lay.src)?,
            self.indices(&lay.rev)?,
            self.indices(&lay.mol)?,
        );
        // Module 1, atoms.
        let aa1 = self.dense(store, Layer::Aa1, &x0)?;
        let paq1 = self.dense(store, Layer::Pa1, &q0)?;
        let pa1 = self.scatter(&paq1, &src, n, "P->A 1")?;
        let h1 = self.concat(&aa1, &pa1)?;
        let x1 = self.dense(store, Layer::A1, &h1)?;
        // Module 1, pairs: [a_i | a_j] rows gathered side by side.
        let ends = self.indices(&lay.ends)?;
        let g2 = self.gather(&x0, &ends, "A->P gather")?;
        let g = g2
            .reshape([lay.src.len(), 2 * self.atom_in])
            .map_err(k("A->P gather"))?;
        drop(g2);
        let z = self.dense(store, Layer::Ap1, &g)?;
        let mut ap = self.gather(&z, &rev, "A->P reverse")?;
        be.axpy(1.0, &z, view(&mut ap)?).map_err(k("A->P sum"))?;
        let ppq = self.dense(store, Layer::Pp1, &q0)?;
        let kk = self.concat(&ap, &ppq)?;
        let q1 = self.dense(store, Layer::P1, &kk)?;
        // Module 2, atoms only.
        let aa2 = self.dense(store, Layer::Aa2, &x1)?;
        let paq2 = self.dense(store, Layer::Pa2, &q1)?;
        let pa2 = self.scatter(&paq2, &src, n, "P->A 2")?;
        let h2 = self.concat(&aa2, &pa2)?;
        let x2 = self.dense(store, Layer::A2, &h2)?;
        // Sum-pool per molecule, the head.
        let s = self.scatter(&x2, &mol, batch.len(), "pooling")?;
        let y = self.dense(store, Layer::Head, &s)?;
        self.pool.put([pa1, ends, ap, pa2]);
        Ok(Fwd {
            x0,
            q0,
            aa1,
            paq1,
            h1,
            x1,
            g,
            z,
            ppq,
            kk,
            q1,
            aa2,
            paq2,
            h2,
            x2,
            s,
            y,
            src,
            rev,
            mol,
        })
    }

    /// The loss and every gradient; `f` is the forward of `batch`.
    fn backward(&mut self, store: &ParamStore, batch: &[Molecule], f: &Fwd) -> R<f32> {
        let be = self.be;
        // mean (y - t)^2, summed then scaled as the graph's mean loss does.
        let inv = 1.0 / batch.len() as f32;
        let ys = f.y.as_slice::<f32>().map_err(k("loss"))?;
        let mut dy = self.pool.take([batch.len(), 1], DType::F32, false)?;
        let ds = dy.as_mut_slice::<f32>().map_err(k("loss"))?;
        let mut total = 0.0f32;
        for ((d, &y), m) in ds.iter_mut().zip(ys).zip(batch) {
            let diff = y - m.target;
            total += diff * diff;
            *d = 2.0 * (diff * inv);
        }
        let missing = || "W5 hand-batched: an input gradient was not computed".to_string();
        let bwd = |s: &mut Self, l, x: &Tensor, y: &Tensor, dy: &Tensor| -> R<Tensor> {
            s.dense_bwd(store, l, x, y, dy, true)?.ok_or_else(missing)
        };
        // Head, pooling, module 2.
        let dsum = bwd(self, Layer::Head, &f.s, &f.y, &dy)?;
        let dx2 = self.gather(&dsum, &f.mol, "pooling backward")?;
        let dh2 = bwd(self, Layer::A2, &f.h2, &f.x2, &dx2)?;
        let [daa2, dpa2] = self.split(&dh2)?;
        let dpaq2 = self.gather(&dpa2, &f.src, "P->A 2 backward")?;
        let dq1 = bwd(self, Layer::Pa2, &f.q1, &f.paq2, &dpaq2)?;
        let dx1 = bwd(self, Layer::Aa2, &f.x1, &f.aa2, &daa2)?;
        self.pool.put([dy, dsum, dx2, dh2, daa2, dpa2, dpaq2]);
        // Module 1, pairs: dZ = dAP + scatter of dAP by the reversed pair.
        let dk = bwd(self, Layer::P1, &f.kk, &f.q1, &dq1)?;
        let [dap, dppq] = self.split(&dk)?;
        self.dense_bwd(store, Layer::Pp1, &f.q0, &f.ppq, &dppq, false)?;
        let mut dz = self.scatter(&dap, &f.rev, dap.num_rows(), "A->P backward")?;
        be.axpy(1.0, &dap, view(&mut dz)?)
            .map_err(k("A->P backward"))?;
        self.dense_bwd(store, Layer::Ap1, &f.g, &f.z, &dz, false)?;
        // Module 1, atoms.
        let dh1 = bwd(self, Layer::A1, &f.h1, &f.x1, &dx1)?;
        let [daa1, dpa1] = self.split(&dh1)?;
        let dpaq1 = self.gather(&dpa1, &f.src, "P->A 1 backward")?;
        self.dense_bwd(store, Layer::Pa1, &f.q0, &f.paq1, &dpaq1, false)?;
        self.dense_bwd(store, Layer::Aa1, &f.x0, &f.aa1, &daa1, false)?;
        self.pool
            .put([dq1, dx1, dk, dap, dppq, dz, dh1, daa1, dpa1, dpaq1]);
        Ok(total * inv)
    }
}
