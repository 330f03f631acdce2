//! [`ParamStore`]: the trained parameters and their gradient accumulators.
//!
//! Graphs read parameter values at forward and add gradients at backward
//! through `&ParamStore`, so several graphs on several threads may train
//! against one store (each parameter's accumulator has its own lock, taken
//! once per kernel call). Lookup tables record which rows received
//! gradients, so sparse optimizers touch only those rows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use sheaf_tensor::{DType, Device, Shape, Tensor};

use crate::error::{GraphError, Result};

static NEXT_STORE: AtomicU32 = AtomicU32::new(1);

/// Identity of a parameter: its store and its position there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId {
    pub(crate) store: u32,
    pub(crate) index: u32,
}

/// A handle to a parameter: `Copy`, knows its shape, so graphs need no
/// store to add its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    id: ParamId,
    shape: Shape,
    table: bool,
}

impl Param {
    /// Its identity.
    pub fn id(&self) -> ParamId {
        self.id
    }
    /// Its shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }
    /// Whether it is a lookup table (sparse row gradients).
    pub fn is_table(&self) -> bool {
        self.table
    }
}

/// A parameter's gradient accumulator.
#[derive(Debug)]
pub struct GradAcc {
    /// Sum of gradients since the last reset (zeros until first written).
    pub grad: Tensor,
    /// Rows written sparsely (lookup tables), possibly repeated.
    pub rows: Vec<u32>,
    /// Whether some op wrote the gradient densely.
    pub dense: bool,
}

impl GradAcc {
    /// Whether any gradient arrived since the last reset.
    pub fn is_touched(&self) -> bool {
        self.dense || !self.rows.is_empty()
    }
}

pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) value: Tensor,
    pub(crate) table: bool,
    pub(crate) grad: Mutex<GradAcc>,
}

/// Named dense parameters and lookup tables.
pub struct ParamStore {
    key: u32,
    /// Counts changes of values (updates, loads, moves), so that a graph
    /// that ran before one recomputes instead of mixing old and new values.
    version: u64,
    pub(crate) entries: Vec<Entry>,
    by_name: HashMap<String, u32>,
}

impl Default for ParamStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ParamStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for e in &self.entries {
            m.entry(&e.name, &e.value.shape());
        }
        m.finish()
    }
}

impl ParamStore {
    /// An empty store.
    pub fn new() -> Self {
        ParamStore {
            key: NEXT_STORE.fetch_add(1, Ordering::Relaxed),
            version: 0,
            entries: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    /// Adds a dense parameter with the given initial value (f32).
    pub fn add(&mut self, name: &str, value: Tensor) -> Result<Param> {
        self.insert(name, value, false)
    }

    /// Adds a lookup table (`rows x cols`, f32); its gradients are sparse.
    pub fn add_table(&mut self, name: &str, value: Tensor) -> Result<Param> {
        if value.rank() != 2 {
            return Err(GraphError::Params(format!(
                "lookup table {name:?} must have rank 2, its shape is {}",
                value.shape()
            )));
        }
        self.insert(name, value, true)
    }

    fn insert(&mut self, name: &str, value: Tensor, table: bool) -> Result<Param> {
        if self.by_name.contains_key(name) {
            return Err(GraphError::Params(format!(
                "a parameter named {name:?} already exists"
            )));
        }
        if value.dtype() != DType::F32 {
            return Err(GraphError::Params(format!(
                "parameter {name:?} must be f32, it is {}",
                value.dtype()
            )));
        }
        let shape = value.shape();
        let grad = Tensor::zeros(shape, DType::F32, value.device()).map_err(|source| {
            GraphError::Tensor {
                context: format!("gradient of parameter {name:?}"),
                source: Box::new(source),
            }
        })?;
        let index = self.entries.len() as u32;
        self.entries.push(Entry {
            name: name.to_string(),
            value,
            table,
            grad: Mutex::new(GradAcc {
                grad,
                rows: Vec::new(),
                dense: false,
            }),
        });
        self.by_name.insert(name.to_string(), index);
        Ok(Param {
            id: ParamId {
                store: self.key,
                index,
            },
            shape,
            table,
        })
    }

    /// Number of parameters.
    /// Moves every parameter and its gradient to `device` (an optimizer's
    /// state follows at its next step). New parameters are placed where
    /// their initial value is: add them before moving the store, or create
    /// them on the device.
    pub fn to_device(&mut self, device: Device) -> Result<()> {
        self.changed();
        for e in &mut self.entries {
            let err = |source| GraphError::Tensor {
                context: format!("moving parameter {:?} to {device}", e.name),
                source: Box::new(source),
            };
            let value = e.value.to_device(device).map_err(err)?;
            let acc = e.grad.get_mut().unwrap_or_else(|p| p.into_inner());
            acc.grad = acc.grad.to_device(device).map_err(err)?;
            e.value = value;
        }
        Ok(())
    }

    /// The device of the parameters (the CPU for an empty store).
    pub fn device(&self) -> Device {
        self.entries
            .first()
            .map_or(Device::Cpu, |e| e.value.device())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The handle of a parameter by name.
    pub fn get(&self, name: &str) -> Option<Param> {
        let &index = self.by_name.get(name)?;
        let e = &self.entries[index as usize];
        Some(Param {
            id: ParamId {
                store: self.key,
                index,
            },
            shape: e.value.shape(),
            table: e.table,
        })
    }

    /// Every parameter, in insertion order.
    pub fn params(&self) -> Vec<Param> {
        self.entries
            .iter()
            .filter_map(|e| self.get(&e.name))
            .collect()
    }

    /// The name of a parameter.
    pub fn name(&self, id: ParamId) -> Result<&str> {
        Ok(&self.entry(id, "name")?.name)
    }

    /// The current value.
    pub fn value(&self, p: &Param) -> Result<&Tensor> {
        self.value_by_id(p.id, "value")
    }

    /// Mutable access to a value (copied on write if another handle, a
    /// clone of it, shares its buffer). A graph that ran before recomputes
    /// at its next forward or backward.
    pub fn value_mut(&mut self, p: &Param) -> Result<&mut Tensor> {
        self.check(p.id, "value_mut")?;
        self.changed();
        Ok(&mut self.entries[p.id.index as usize].value)
    }

    /// A copy of the accumulated gradient.
    pub fn grad(&self, p: &Param) -> Result<Tensor> {
        Ok(self.lock_grad(p.id, "grad")?.grad.clone())
    }

    /// Locks a parameter's accumulator (executors add gradients here).
    pub fn lock_grad(&self, id: ParamId, op: &'static str) -> Result<MutexGuard<'_, GradAcc>> {
        let e = self.entry(id, op)?;
        // A poisoned lock only means another thread panicked mid-update;
        // the accumulator is plain data and still usable.
        Ok(e.grad.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Locks a dense parameter's accumulator if no other thread holds it
    /// (`None` when it is busy). A lookup table's is always locked, waiting
    /// if need be: tables are written a few rows at a time, so waiting is
    /// cheap, and a private copy of one would not be. Executors running
    /// side by side on one store accumulate a busy dense parameter's
    /// gradient into a buffer of their own instead of waiting through
    /// another's product.
    pub fn try_lock_grad(
        &self,
        id: ParamId,
        op: &'static str,
    ) -> Result<Option<MutexGuard<'_, GradAcc>>> {
        let e = self.entry(id, op)?;
        if e.table {
            return Ok(Some(e.grad.lock().unwrap_or_else(|p| p.into_inner())));
        }
        match e.grad.try_lock() {
            Ok(g) => Ok(Some(g)),
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(Some(p.into_inner())),
            Err(std::sync::TryLockError::WouldBlock) => Ok(None),
        }
    }

    /// Zeroes every gradient (only the touched rows of tables).
    pub fn zero_grads(&mut self) -> Result<()> {
        for e in &mut self.entries {
            let acc = e.grad.get_mut().unwrap_or_else(|p| p.into_inner());
            zero_acc(acc).map_err(|source| GraphError::Tensor {
                context: format!("zeroing the gradient of {:?}", e.name),
                source: Box::new(source),
            })?;
        }
        Ok(())
    }

    /// The store's identity (optimizers bind to it).
    pub(crate) fn key(&self) -> u32 {
        self.key
    }

    /// The store's identity and the count of its value changes: equal
    /// stamps, equal parameter values.
    pub(crate) fn stamp(&self) -> (u32, u64) {
        (self.key, self.version)
    }

    /// Records that values change (see [`ParamStore::stamp`]).
    pub(crate) fn changed(&mut self) {
        self.version += 1;
    }

    /// The current value of a parameter by id (for executors). Marks it
    /// as a weight ([`Tensor::mark_as_weight`]): the products of a step
    /// that read it then pack it once. (`Sequential`, whose products have
    /// one row, reads without marking.)
    pub fn value_of(&self, id: ParamId) -> Result<&Tensor> {
        let v = self.value_by_id(id, "value")?;
        v.mark_as_weight();
        Ok(v)
    }

    pub(crate) fn value_by_id(&self, id: ParamId, op: &'static str) -> Result<&Tensor> {
        Ok(&self.entry(id, op)?.value)
    }

    fn check(&self, id: ParamId, op: &'static str) -> Result<()> {
        if id.store != self.key || id.index as usize >= self.entries.len() {
            return Err(GraphError::ForeignParam {
                op,
                param: format!("{}:{}", id.store, id.index),
            });
        }
        Ok(())
    }

    fn entry(&self, id: ParamId, op: &'static str) -> Result<&Entry> {
        self.check(id, op)?;
        Ok(&self.entries[id.index as usize])
    }
}

/// Zeroes an accumulator: whole if written densely, else only its rows.
pub(crate) fn zero_acc(acc: &mut GradAcc) -> sheaf_tensor::Result<()> {
    let device = acc.grad.device();
    if device != Device::Cpu && acc.is_touched() {
        // One fill kernel, whatever rows were written.
        device.backend()?.fill(0.0, acc.grad.view_mut()?)?;
    } else if acc.dense {
        acc.grad.as_mut_slice::<f32>()?.fill(0.0);
    } else if !acc.rows.is_empty() {
        let cols = acc.grad.row_len();
        let g = acc.grad.as_mut_slice::<f32>()?;
        for &r in &acc.rows {
            let start = r as usize * cols;
            if let Some(row) = g.get_mut(start..start + cols) {
                row.fill(0.0);
            }
        }
    }
    acc.dense = false;
    acc.rows.clear();
    Ok(())
}
