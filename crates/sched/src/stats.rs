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
    /// Of `arena_bytes`, bytes handed out zero-filled (gradients that are
    /// added to; those an op writes whole are handed out unzeroed).
    pub arena_zeroed_bytes: usize,
    /// Time spent planning.
    pub planning: Duration,
    /// Time spent running batches (gathers included).
    pub kernels: Duration,
    /// Device kernel launches (copies and cuBLAS calls included) of the
    /// step's forward and backward: what decides the speed of tree models
    /// on a GPU. 0 on the CPU, which launches nothing.
    pub launches: u64,
    /// Forwards that reused a cached plan ([`crate::Executor::cache_plans_as`]).
    pub plan_cache_hits: usize,
    /// Bucketing: sequence steps that are padding (filled in by
    /// [`crate::Bucketing`]; 0 for other runs).
    pub padded_steps: usize,
    /// Bucketing: all sequence steps run, padding included.
    pub total_steps: usize,
}

impl PlanStats {
    /// Mean nodes per kernel call.
    pub fn mean_batch(&self) -> f64 {
        self.nodes as f64 / self.batches.max(1) as f64
    }

    /// Padded elements / all elements of the step's sequences (steps of one
    /// model all have one width, so this is also padded / all steps); 0
    /// when nothing was padded.
    pub fn padding_fraction(&self) -> f64 {
        self.padded_steps as f64 / self.total_steps.max(1) as f64
    }

    /// Adds the counts of another run (a bucket of the same step) to
    /// these; the arena figures keep the larger.
    pub fn absorb(&mut self, o: &PlanStats) {
        self.nodes += o.nodes;
        self.batches += o.batches;
        self.max_batch = self.max_batch.max(o.max_batch);
        for (op, (b, n)) in &o.per_op {
            let e = self.per_op.entry(op).or_insert((0, 0));
            e.0 += b;
            e.1 += n;
        }
        self.unbatchable += o.unbatchable;
        self.gathered_bytes += o.gathered_bytes;
        for (op, b) in &o.gathered_per_op {
            *self.gathered_per_op.entry(op).or_insert(0) += b;
        }
        self.avoided_bytes += o.avoided_bytes;
        self.arena_bytes = self.arena_bytes.max(o.arena_bytes);
        self.arena_fresh_bytes += o.arena_fresh_bytes;
        self.arena_peak_bytes = self.arena_peak_bytes.max(o.arena_peak_bytes);
        self.arena_zeroed_bytes = self.arena_zeroed_bytes.max(o.arena_zeroed_bytes);
        self.planning += o.planning;
        self.kernels += o.kernels;
        self.launches += o.launches;
        self.plan_cache_hits += o.plan_cache_hits;
        self.padded_steps += o.padded_steps;
        self.total_steps += o.total_steps;
    }
}

impl fmt::Display for PlanStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} nodes in {} batches (mean {:.1}, max {}), {} unbatchable; gathered {} B, avoided {} B; arena {} B ({} B fresh, {} B zeroed, peak {} B); planning {:?}, kernels {:?}",
            self.nodes,
            self.batches,
            self.mean_batch(),
            self.max_batch,
            self.unbatchable,
            self.gathered_bytes,
            self.avoided_bytes,
            self.arena_bytes,
            self.arena_fresh_bytes,
            self.arena_zeroed_bytes,
            self.arena_peak_bytes,
            self.planning,
            self.kernels
        )?;
        if self.launches > 0 {
            writeln!(f, "  device: {} kernel launches", self.launches)?;
        }
        if self.total_steps > 0 || self.plan_cache_hits > 0 {
            writeln!(
                f,
                "  bucketing: {} of {} steps padding ({:.1}%), {} cached plan(s) reused",
                self.padded_steps,
                self.total_steps,
                100.0 * self.padding_fraction(),
                self.plan_cache_hits
            )?;
        }
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
