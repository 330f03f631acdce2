//! [`Optimizer`]: SGD (with momentum), Adagrad and Adam over a
//! [`ParamStore`], with L2 weight decay, clipping by global norm and lazy
//! sparse-row updates for lookup tables.
//!
//! A step updates every parameter whose accumulator was touched since the
//! last step and then zeroes the accumulators. A lookup table whose
//! gradient was written only through [`crate::Backward::touch_rows`] is
//! updated on those rows alone (deduplicated; the accumulator already holds
//! their summed gradient), and its state rows elsewhere stay as they are
//! ("lazy" updates, as in sparse Adam). Anything written densely is
//! updated densely.

use sheaf_tensor::{Adagrad, Adam, Backend, DType, Device, Sgd, Tensor, TensorMut, Transpose};

use crate::error::{GraphError, Result};
use crate::params::{zero_acc, Param, ParamStore};

/// The update rule and its hyper-parameters (`weight_decay` is L2: the
/// gradient becomes `grad + weight_decay * param`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Method {
    /// SGD; keeps a velocity per parameter when `momentum != 0`.
    Sgd(Sgd),
    /// Adagrad; keeps the sum of squared gradients.
    Adagrad(Adagrad),
    /// Adam; keeps the first and second moments.
    Adam(Adam),
}

impl Method {
    /// `"sgd"`, `"adagrad"` or `"adam"` (as written to checkpoints).
    pub fn name(&self) -> &'static str {
        match self {
            Method::Sgd(_) => "sgd",
            Method::Adagrad(_) => "adagrad",
            Method::Adam(_) => "adam",
        }
    }

    /// The learning rate.
    pub fn lr(&self) -> f32 {
        match self {
            Method::Sgd(c) => c.lr,
            Method::Adagrad(c) => c.lr,
            Method::Adam(c) => c.lr,
        }
    }

    fn set_lr(&mut self, lr: f32) {
        match self {
            Method::Sgd(c) => c.lr = lr,
            Method::Adagrad(c) => c.lr = lr,
            Method::Adam(c) => c.lr = lr,
        }
    }

    /// Rejects settings the kernels would reject mid-step.
    fn validate(&self) -> Result<()> {
        let lr = self.lr();
        let bad = |what: String| Err(GraphError::Params(format!("optimizer: {what}")));
        if !lr.is_finite() {
            return bad(format!("the learning rate must be finite, it is {lr}"));
        }
        if let Method::Adam(c) = self {
            for (n, b) in [("beta1", c.beta1), ("beta2", c.beta2)] {
                if !(0.0..1.0).contains(&b) {
                    return bad(format!("Adam's {n} must lie in [0, 1), it is {b}"));
                }
            }
        }
        Ok(())
    }

    /// Names of the per-parameter state buffers this rule keeps, in the
    /// order [`Optimizer::state`] returns them.
    pub fn state_names(&self) -> &'static [&'static str] {
        match self {
            Method::Sgd(c) if c.momentum == 0.0 => &[],
            Method::Sgd(_) => &["velocity"],
            Method::Adagrad(_) => &["accum"],
            Method::Adam(_) => &["m", "v"],
        }
    }
}

/// An optimizer and its per-parameter state, bound to one [`ParamStore`]
/// (the first it steps, or the one it was loaded into).
#[derive(Debug, Clone)]
pub struct Optimizer {
    pub(crate) method: Method,
    pub(crate) clip_norm: Option<f32>,
    /// Steps taken; Adam's bias correction uses `steps + 1` for the next.
    pub(crate) steps: u64,
    /// State buffers by parameter index (`Method::state_names` order),
    /// allocated at a parameter's first update.
    pub(crate) state: Vec<Option<Vec<Tensor>>>,
    pub(crate) store: Option<u32>,
    last_norm: Option<f32>,
    /// Parameters copied because another handle shared them (see
    /// [`Optimizer::shared_copies`]).
    shared_copies: u64,
}

/// How one parameter is updated this step.
enum Plan {
    Dense,
    /// Distinct touched rows, sorted.
    Rows(Vec<u32>),
}

impl Optimizer {
    /// An optimizer with no state, no clipping, at step 0.
    pub fn new(method: Method) -> Self {
        Optimizer {
            method,
            clip_norm: None,
            steps: 0,
            state: Vec::new(),
            store: None,
            last_norm: None,
            shared_copies: 0,
        }
    }

    /// SGD with the given settings.
    pub fn sgd(cfg: Sgd) -> Self {
        Self::new(Method::Sgd(cfg))
    }

    /// Adagrad with the given settings.
    pub fn adagrad(cfg: Adagrad) -> Self {
        Self::new(Method::Adagrad(cfg))
    }

    /// Adam with the given settings.
    pub fn adam(cfg: Adam) -> Self {
        Self::new(Method::Adam(cfg))
    }

    /// Clips gradients by global norm: when the L2 norm of all gradients of
    /// a step (for tables only their touched rows) exceeds `max_norm`,
    /// every gradient is scaled by `max_norm / norm`.
    pub fn with_clip_norm(mut self, max_norm: f32) -> Self {
        self.clip_norm = Some(max_norm);
        self
    }

    /// Sets or removes the clipping norm (checked at the next step: it must
    /// be positive and finite).
    pub fn set_clip_norm(&mut self, max_norm: Option<f32>) {
        self.clip_norm = max_norm;
    }

    /// The clipping norm, if any.
    pub fn clip_norm(&self) -> Option<f32> {
        self.clip_norm
    }

    /// The update rule and hyper-parameters.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The learning rate.
    pub fn lr(&self) -> f32 {
        self.method.lr()
    }

    /// Changes the learning rate from the next step on (schedules).
    pub fn set_lr(&mut self, lr: f32) {
        self.method.set_lr(lr);
    }

    /// Number of steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// How many parameter updates so far had to copy the parameter first
    /// because another handle shared its buffer: a value kept with `clone`
    /// instead of `deep_clone`, or a graph that ran forward but not
    /// backward (graphs let go of parameters when backward is done). Each
    /// costs a copy of the parameter (the first also logs a warning); a
    /// training loop should keep this at 0.
    pub fn shared_copies(&self) -> u64 {
        self.shared_copies
    }

    /// Global gradient norm of the last step, before clipping (computed
    /// only when clipping is on).
    pub fn last_grad_norm(&self) -> Option<f32> {
        self.last_norm
    }

    /// A parameter's state buffers, named as in [`Method::state_names`];
    /// empty before its first update.
    pub fn state(&self, p: &Param) -> Vec<(&'static str, &Tensor)> {
        let id = p.id();
        if self.store != Some(id.store) {
            return Vec::new();
        }
        match self.state.get(id.index as usize) {
            Some(Some(bufs)) => self
                .method
                .state_names()
                .iter()
                .copied()
                .zip(bufs)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Drops all state and the step count (and the binding to a store).
    pub fn reset(&mut self) {
        self.state.clear();
        self.steps = 0;
        self.store = None;
        self.last_norm = None;
    }

    /// Updates every parameter whose gradient was touched since the last
    /// step, then zeroes the gradients. Nothing is changed if an argument
    /// is invalid (foreign store, row id out of range, bad clipping norm,
    /// non-finite gradient norm under clipping).
    pub fn step(&mut self, store: &mut ParamStore) -> Result<()> {
        sheaf_tensor::denormals::prepare();
        if let Some(key) = self.store {
            if key != store.key() {
                return Err(GraphError::Params(
                    "optimizer: its state belongs to another parameter store \
                     (call Optimizer::reset to reuse it)"
                        .into(),
                ));
            }
        }
        if let Some(c) = self.clip_norm {
            if !(c.is_finite() && c > 0.0) {
                return Err(GraphError::Params(format!(
                    "optimizer: the clipping norm must be positive and finite, it is {c}"
                )));
            }
        }
        self.method.validate()?;
        let t = self.steps + 1;

        // Pass 1: what to update, and the global norm; nothing written yet.
        let mut plans = Vec::with_capacity(store.entries.len());
        let mut sum_sq = 0.0f64;
        for e in &mut store.entries {
            let acc = e.grad.get_mut().unwrap_or_else(|p| p.into_inner());
            if !acc.is_touched() {
                plans.push(None);
                continue;
            }
            let plan = if acc.dense {
                if self.clip_norm.is_some() {
                    sum_sq += sum_squares(&acc.grad, None).map_err(|s| terr(&e.name, s))?;
                }
                Plan::Dense
            } else {
                let mut rows = acc.rows.clone();
                rows.sort_unstable();
                rows.dedup();
                let n_rows = acc.grad.num_rows();
                if let Some(&bad) = rows.iter().find(|&&r| r as usize >= n_rows) {
                    return Err(GraphError::Params(format!(
                        "optimizer: parameter {:?} has a gradient for row {bad}, \
                         but only {n_rows} rows",
                        e.name
                    )));
                }
                if self.clip_norm.is_some() {
                    sum_sq += sum_squares(&acc.grad, Some(&rows)).map_err(|s| terr(&e.name, s))?;
                }
                Plan::Rows(rows)
            };
            plans.push(Some(plan));
        }
        let mut scale = 1.0f32;
        self.last_norm = None;
        if let Some(max) = self.clip_norm {
            let norm = sum_sq.sqrt();
            if !norm.is_finite() {
                return Err(GraphError::Params(format!(
                    "optimizer: the global gradient norm is {norm}; no parameter was updated"
                )));
            }
            self.last_norm = Some(norm as f32);
            if norm > max as f64 {
                scale = (max as f64 / norm) as f32;
            }
        }

        // Pass 2: update and zero.
        self.store = Some(store.key());
        store.changed();
        if self.state.len() < store.entries.len() {
            self.state.resize(store.entries.len(), None);
        }
        let names = self.method.state_names();
        for (i, (e, plan)) in store.entries.iter_mut().zip(plans).enumerate() {
            let Some(plan) = plan else { continue };
            let name = e.name.as_str();
            let acc = e.grad.get_mut().unwrap_or_else(|p| p.into_inner());
            let shape = e.value.shape();
            let device = e.value.device();
            let backend = device.backend().map_err(|s| terr(name, s))?;
            let slot = &mut self.state[i];
            let bufs = match slot {
                Some(b) if b.len() == names.len() && b.iter().all(|t| t.shape() == shape) => {
                    // State loaded from a file, or left behind by
                    // `ParamStore::to_device`, follows its parameter.
                    for t in b.iter_mut().filter(|t| t.device() != device) {
                        *t = t.to_device(device).map_err(|s| terr(name, s))?;
                    }
                    b
                }
                _ => {
                    let mut b = Vec::with_capacity(names.len());
                    for _ in names {
                        b.push(
                            Tensor::zeros(shape, DType::F32, device).map_err(|s| terr(name, s))?,
                        );
                    }
                    slot.insert(b)
                }
            };
            let mut views = Vec::with_capacity(bufs.len());
            for b in bufs.iter_mut() {
                views.push(b.view_mut().map_err(|s| terr(name, s))?);
            }
            if !e.value.is_unique() {
                self.shared_copies += 1;
                warn_shared(name, e.value.numel());
            }
            let param = e.value.view_mut().map_err(|s| terr(name, s))?;
            match plan {
                Plan::Dense => {
                    scale_in_place(backend, &mut acc.grad, scale).map_err(|s| terr(name, s))?;
                    dense_step(backend, &self.method, t, param, &acc.grad, views)
                }
                Plan::Rows(rows) => {
                    let n = rows.len();
                    let idx = Tensor::from_slice(&rows, [n])
                        .and_then(|i| i.to_device(device))
                        .map_err(|s| terr(name, s))?;
                    let mut grad = Tensor::zeros(shape.with_rows(n), DType::F32, device)
                        .map_err(|s| terr(name, s))?;
                    backend
                        .gather_rows(&acc.grad, &idx, grad.view_mut().map_err(|s| terr(name, s))?)
                        .map_err(|s| terr(name, s))?;
                    scale_in_place(backend, &mut grad, scale).map_err(|s| terr(name, s))?;
                    rows_step(backend, &self.method, t, param, &rows, &grad, views)
                }
            }
            .map_err(|s| terr(name, s))?;
            zero_acc(acc).map_err(|s| terr(name, s))?;
        }
        self.steps = t;
        Ok(())
    }
}

/// The sum of squares of `grad` (of its `rows` only, when given), in f64.
/// On the host a direct sum; on a device one reduction and a 4-byte read
/// (a synchronisation: clipping needs the norm before any update).
fn sum_squares(grad: &Tensor, rows: Option<&[u32]>) -> sheaf_tensor::Result<f64> {
    if grad.device() == Device::Cpu {
        let g = grad.as_slice::<f32>()?;
        let sq = |s: &[f32]| s.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>();
        return Ok(match rows {
            None => sq(g),
            Some(rows) => {
                let cols = grad.row_len();
                rows.iter()
                    .map(|&r| sq(&g[r as usize * cols..(r as usize + 1) * cols]))
                    .sum()
            }
        });
    }
    let be = grad.device().backend()?;
    let picked;
    let g = match rows {
        None => grad,
        Some(rows) => {
            let idx = Tensor::from_slice(rows, [rows.len()])?.to_device(grad.device())?;
            let mut t = Tensor::zeros(
                grad.shape().with_rows(rows.len()),
                DType::F32,
                grad.device(),
            )?;
            be.gather_rows(grad, &idx, t.view_mut()?)?;
            picked = t;
            &picked
        }
    };
    // <g, g> as a 1 x 1 product: cuBLAS splits the long inner dimension
    // over the device (a row sum of one row would run in one block).
    let flat = g.reshape([1, g.numel()])?;
    let mut total = Tensor::zeros([1, 1], DType::F32, g.device())?;
    be.matmul(
        &flat,
        Transpose::No,
        &flat,
        Transpose::Yes,
        1.0,
        0.0,
        total.view_mut()?,
    )?;
    Ok(f64::from(total.to_vec::<f32>()?[0]))
}

/// Warns (once per process) that an update copies parameter `name`
/// because another handle shares its buffer (a kept clone, or a graph
/// that ran forward without backward).
fn warn_shared(name: &str, numel: usize) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "Optimizer::step copies parameter {name:?} ({numel} values): another handle \
             shares its buffer (a clone of the value kept, or a graph that ran forward \
             but not backward?); keep copies with Tensor::deep_clone, and clear or run \
             backward on graphs before updating, or every step copies the parameter"
        )
    });
}

/// `t *= scale` (nothing for 1): in place on the host, through a copy on a
/// device (the backend's scale reads and writes distinct tensors).
fn scale_in_place(be: &dyn Backend, t: &mut Tensor, scale: f32) -> sheaf_tensor::Result<()> {
    if scale == 1.0 {
        return Ok(());
    }
    if t.device() == Device::Cpu {
        t.as_mut_slice::<f32>()?
            .iter_mut()
            .for_each(|g| *g *= scale);
        return Ok(());
    }
    let src = t.clone();
    be.scale(scale, &src, t.view_mut()?)
}

fn dense_step(
    backend: &dyn Backend,
    method: &Method,
    t: u64,
    param: TensorMut<'_>,
    grad: &Tensor,
    state: Vec<TensorMut<'_>>,
) -> sheaf_tensor::Result<()> {
    let mut s = state.into_iter();
    match method {
        Method::Sgd(c) => backend.sgd_step(c, param, grad, s.next()),
        Method::Adagrad(c) => match s.next() {
            Some(acc) => backend.adagrad_step(c, param, grad, acc),
            None => Ok(()),
        },
        Method::Adam(c) => match (s.next(), s.next()) {
            (Some(m), Some(v)) => backend.adam_step(c, t, param, grad, m, v),
            _ => Ok(()),
        },
    }
}

fn rows_step(
    backend: &dyn Backend,
    method: &Method,
    t: u64,
    param: TensorMut<'_>,
    rows: &[u32],
    grad: &Tensor,
    state: Vec<TensorMut<'_>>,
) -> sheaf_tensor::Result<()> {
    let mut s = state.into_iter();
    match method {
        Method::Sgd(c) => backend.sgd_step_rows(c, param, rows, grad, s.next()),
        Method::Adagrad(c) => match s.next() {
            Some(acc) => backend.adagrad_step_rows(c, param, rows, grad, acc),
            None => Ok(()),
        },
        Method::Adam(c) => match (s.next(), s.next()) {
            (Some(m), Some(v)) => backend.adam_step_rows(c, t, param, rows, grad, m, v),
            _ => Ok(()),
        },
    }
}

fn terr(name: &str, source: sheaf_tensor::TensorError) -> GraphError {
    GraphError::Tensor {
        context: format!("optimizer step of parameter {name:?}"),
        source: Box::new(source),
    }
}
