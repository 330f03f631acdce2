//! Inputs stacked by shape: every host `f32` input of a forward goes into
//! one leaf buffer per shape, and each input's home is its row there, as a
//! batch output's is. A batch then reads the inputs it stacks as a view of
//! that buffer (or one gather), where it would otherwise assemble them row
//! by row from one tensor per input: for models fed by many small inputs
//! (W5: an atom or a pair of atoms each) that per-input work was the
//! largest part of assembling arguments. On a device it is one upload per
//! shape instead of one per input.

use rustc_hash::FxHashMap;
use sheaf_autodiff::exec::GraphExec;
use sheaf_autodiff::{Graph, NodeId, NodeKind};
use sheaf_tensor::{DType, Device, Shape, Tensor};

use crate::error::Result;
use crate::exec::{batch_err, Executor, Home};

/// Inputs larger than this many elements keep their own tensor: copying
/// them saves nothing (one row is one copy either way).
const MAX_STACKED_NUMEL: usize = 1 << 16;

/// The bit that marks a [`Home::buffer`] as a leaf buffer's index.
pub(crate) const LEAF: u32 = 1 << 31;

impl Executor {
    /// The output buffer of batch `id`, or leaf buffer `id & !LEAF`.
    pub(crate) fn buffer_of(&self, id: u32) -> &Tensor {
        match id & LEAF {
            0 => &self.buffers[id as usize],
            _ => &self.leaf_buffers[(id & !LEAF) as usize],
        }
    }

    /// Gives the inputs among nodes `start..end` their values: host `f32`
    /// inputs of at most [`MAX_STACKED_NUMEL`] elements stacked by shape
    /// into leaf buffers (homes set, values row views), others one by one
    /// (copied to the device if need be).
    pub(crate) fn place_inputs(&mut self, g: &mut Graph, start: usize, end: usize) -> Result<()> {
        // Shapes in order of first appearance, each with its inputs.
        let mut groups: Vec<(Shape, Vec<NodeId>)> = Vec::new();
        let mut group_of: FxHashMap<Shape, usize> = FxHashMap::default();
        // Inputs mostly come in runs of one shape: the last group first.
        let mut last: Option<(Shape, usize)> = None;
        for i in start..end {
            let n = NodeId::from_index(i);
            let NodeKind::Input(k) = g.node(n).kind() else {
                continue;
            };
            let Some(v) = g.input_value(k) else { continue };
            let stackable = v.device() == Device::Cpu
                && v.dtype() == DType::F32
                && v.numel() <= MAX_STACKED_NUMEL;
            if stackable {
                let shape = v.shape();
                let at = match last {
                    Some((s, at)) if s == shape => at,
                    _ => *group_of.entry(shape).or_insert_with(|| {
                        groups.push((shape, Vec::new()));
                        groups.len() - 1
                    }),
                };
                last = Some((shape, at));
                groups[at].1.push(n);
            } else {
                let v = v
                    .to_device(self.device())
                    .map_err(batch_err("input", &[n]))?;
                g.set_value(n, v);
            }
        }
        for (shape, nodes) in groups {
            let err = batch_err("input", &nodes);
            let stacked = Shape::stack(nodes.len(), shape).map_err(&err)?;
            let on_host = self.device() == Device::Cpu;
            // Written straight into an arena buffer on the host; staged and
            // uploaded once on a device.
            let mut t = match on_host {
                true => self.arena.overwritten(stacked).map_err(&err)?,
                false => Tensor::zeros(stacked, DType::F32, Device::Cpu).map_err(&err)?,
            };
            {
                let dst = t.as_mut_slice::<f32>().map_err(&err)?;
                let len = shape.numel().map_err(&err)?;
                for (r, &n) in nodes.iter().enumerate() {
                    let NodeKind::Input(k) = g.node(n).kind() else {
                        continue;
                    };
                    if let Some(v) = g.input_value(k) {
                        let src = v.as_slice::<f32>().map_err(&err)?;
                        dst[r * len..(r + 1) * len].copy_from_slice(src);
                    }
                }
            }
            if !on_host {
                t = t.to_device(self.device()).map_err(&err)?;
            }
            let buffer = LEAF | self.leaf_buffers.len() as u32;
            for (r, &n) in nodes.iter().enumerate() {
                self.homes[n.index()] = Some(Home {
                    buffer,
                    row: r as u32,
                });
            }
            g.set_value_rows(&nodes, t.clone());
            self.leaf_buffers.push(t);
        }
        Ok(())
    }
}
