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
    /// Terms of sums (`Graph::sum`) added into their sums where they lay,
    /// not stacked first (a sum of batch outputs and inputs: see
    /// `Op::sums_args`).
    pub summed_in_place: usize,
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
    /// Of `kernels`, the time inside the ops' batched forward and backward
    /// calls (the arithmetic on the CPU; issuing the launches on a GPU).
    /// The rest is the executor's bookkeeping: see
    /// [`PlanStats::bookkeeping`].
    pub op_calls: Duration,
    /// Of `kernels`, the time the executor spent moving data outside the
    /// ops: gathering batch inputs from earlier batches, scattering and
    /// adding gradients back, zero-filling gradient buffers. Device
    /// kernels on a GPU (where the host only launches them); on the CPU the
    /// copies themselves.
    pub moves: Duration,
    /// Device kernel launches (copies and cuBLAS calls included) of the
    /// step's forward and backward: what decides the speed of tree models
    /// on a GPU. 0 on the CPU, which launches nothing.
    pub launches: u64,
    /// Per op name: device launches of its batches, forward and backward
    /// (input assembly included): which op a launch-bound model pays for.
    pub launches_per_op: BTreeMap<&'static str, u64>,
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

    /// The executor's own host work while running batches: deciding where
    /// inputs come from and gradients go, buffers from the arena, records
    /// (`kernels` less `op_calls` and `moves`). With planning and the
    /// model's graph building, the host time that vertex functions cut.
    pub fn bookkeeping(&self) -> Duration {
        self.kernels
            .saturating_sub(self.op_calls)
            .saturating_sub(self.moves)
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
        self.summed_in_place += o.summed_in_place;
        self.arena_bytes = self.arena_bytes.max(o.arena_bytes);
        self.arena_fresh_bytes += o.arena_fresh_bytes;
        self.arena_peak_bytes = self.arena_peak_bytes.max(o.arena_peak_bytes);
        self.arena_zeroed_bytes = self.arena_zeroed_bytes.max(o.arena_zeroed_bytes);
        self.planning += o.planning;
        self.kernels += o.kernels;
        self.op_calls += o.op_calls;
        self.moves += o.moves;
        self.launches += o.launches;
        for (op, n) in &o.launches_per_op {
            *self.launches_per_op.entry(op).or_insert(0) += n;
        }
        self.plan_cache_hits += o.plan_cache_hits;
        self.padded_steps += o.padded_steps;
        self.total_steps += o.total_steps;
    }
}

/// Bytes as `512 B`, `3.2 KiB`, `1.5 MiB`, `2.0 GiB`.
fn bytes(n: usize) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let (mut v, mut unit) = (n as f64 / 1024.0, 0);
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Ops listed by [`PlanStats`]' `Display`; the rest are summed in one line.
const SHOWN_OPS: usize = 12;

/// A few lines for people: the counts, then the ops with the most nodes
/// (batches, nodes, mean batch and bytes gathered each), at most 12
/// (`SHOWN_OPS`). `{:?}` keeps every field.
impl fmt::Display for PlanStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} nodes in {} batches (mean {:.1}, max {}), {} unbatchable",
            self.nodes,
            self.batches,
            self.mean_batch(),
            self.max_batch,
            self.unbatchable,
        )?;
        writeln!(
            f,
            "  inputs: {} gathered, {} used in place, {} sum terms added where they lay",
            bytes(self.gathered_bytes),
            bytes(self.avoided_bytes),
            self.summed_in_place
        )?;
        writeln!(
            f,
            "  arena:  {} held ({} fresh, {} zeroed), peak {}",
            bytes(self.arena_bytes),
            bytes(self.arena_fresh_bytes),
            bytes(self.arena_zeroed_bytes),
            bytes(self.arena_peak_bytes)
        )?;
        writeln!(
            f,
            "  time:   planning {:?}, kernels {:?} (ops {:?}, moving data {:?}, bookkeeping {:?})",
            self.planning,
            self.kernels,
            self.op_calls,
            self.moves,
            self.bookkeeping()
        )?;
        if self.launches > 0 {
            writeln!(f, "  device: {} kernel launches", self.launches)?;
            let mut ops: Vec<_> = self.launches_per_op.iter().collect();
            ops.sort_by(|a, b| b.1.cmp(a.1));
            for (op, n) in ops {
                writeln!(f, "    {op}: {n}")?;
            }
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
        let mut ops: Vec<_> = self.per_op.iter().collect();
        // Most nodes first; ties by name, so the order is stable.
        ops.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
        if !ops.is_empty() {
            writeln!(
                f,
                "  {:<24} {:>8} {:>10} {:>6} {:>10}",
                "op", "batches", "nodes", "mean", "gathered"
            )?;
        }
        for (op, &(b, n)) in ops.iter().take(SHOWN_OPS) {
            let gathered = self.gathered_per_op.get(*op).copied().unwrap_or(0);
            writeln!(
                f,
                "  {op:<24} {b:>8} {n:>10} {:>6.1} {:>10}",
                n as f64 / b.max(1) as f64,
                bytes(gathered)
            )?;
        }
        if ops.len() > SHOWN_OPS {
            let rest = &ops[SHOWN_OPS..];
            let (b, n) = rest
                .iter()
                .fold((0, 0), |(b, n), (_, &(b1, n1))| (b + b1, n + n1));
            writeln!(f, "  ({} more ops: {b} batches, {n} nodes)", rest.len())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_a_few_readable_lines_with_the_busiest_ops_first() {
        let mut s = PlanStats {
            nodes: 120,
            batches: 10,
            max_batch: 40,
            gathered_bytes: 3 * 1024 * 1024 / 2,
            ..PlanStats::default()
        };
        s.per_op.insert("tanh", (4, 30));
        s.per_op.insert("matmul", (2, 80));
        for (i, op) in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]
            .into_iter()
            .enumerate()
        {
            s.per_op.insert(op, (1, i % 2));
        }
        s.gathered_per_op.insert("matmul", 2048);
        let text = s.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "120 nodes in 10 batches (mean 12.0, max 40), 0 unbatchable"
        );
        assert!(lines[1].contains("1.5 MiB gathered"), "{text}");
        assert!(lines.iter().all(|l| l.len() < 100), "{text}");
        let matmul = lines.iter().position(|l| l.contains("matmul")).unwrap();
        let tanh = lines.iter().position(|l| l.contains("tanh")).unwrap();
        assert!(matmul < tanh, "most nodes first:\n{text}");
        assert!(lines[matmul].contains("40.0") && lines[matmul].contains("2.0 KiB"));
        assert!(
            text.ends_with("(2 more ops: 2 batches, 0 nodes)\n"),
            "{text}"
        );
    }
}
