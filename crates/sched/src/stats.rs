//! [`PlanStats`]: what the last forward did, so a user whose model is slow
//! can see why.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Statistics of the last forward (and backward, for the kernel time).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanStats {
    /// Nodes computed by kernels.
    pub nodes: usize,
    /// Kernel calls (batches).
    pub batches: usize,
    /// Largest batch.
    pub max_batch: usize,
    /// Per op name: (batches, nodes).
    pub per_op: BTreeMap<&'static str, (usize, usize)>,
    /// Nodes that ran alone because their op cannot batch.
    pub unbatchable: usize,
    /// Bytes copied to make batch inputs contiguous.
    pub gathered_bytes: usize,
    /// Per op name: bytes copied to assemble its batches' inputs (where
    /// the gathers of a slow model come from).
    pub gathered_per_op: BTreeMap<&'static str, usize>,
    /// Bytes of batch inputs that already sat contiguous and in order.
    pub avoided_bytes: usize,
    /// Bytes of buffers (values, saved state, gathered inputs, gradients,
    /// temporaries) the current step holds from the executor's arena.
    pub arena_bytes: usize,
    /// Of those, bytes allocated fresh this step (0 once the arena is warm:
    /// later steps reuse the first steps' buffers).
    pub arena_fresh_bytes: usize,
    /// The most bytes any step of this executor has held.
    pub arena_peak_bytes: usize,
    /// Time spent planning.
    pub planning: Duration,
    /// Time spent running batches (gathers included).
    pub kernels: Duration,
}

impl PlanStats {
    /// Mean nodes per kernel call.
    pub fn mean_batch(&self) -> f64 {
        self.nodes as f64 / self.batches.max(1) as f64
    }
}

impl fmt::Display for PlanStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} nodes in {} batches (mean {:.1}, max {}), {} unbatchable; gathered {} B, avoided {} B; arena {} B ({} B fresh, peak {} B); planning {:?}, kernels {:?}",
            self.nodes,
            self.batches,
            self.mean_batch(),
            self.max_batch,
            self.unbatchable,
            self.gathered_bytes,
            self.avoided_bytes,
            self.arena_bytes,
            self.arena_fresh_bytes,
            self.arena_peak_bytes,
            self.planning,
            self.kernels
        )?;
        for (op, (b, n)) in &self.per_op {
            let gathered = self.gathered_per_op.get(op).copied().unwrap_or(0);
            writeln!(
                f,
                "  {op:<24} {b:>6} batches {n:>8} nodes {gathered:>12} B gathered"
            )?;
        }
        Ok(())
    }
}
