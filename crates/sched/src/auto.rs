//! `Strategy::Auto`: times Depth and Agenda on the first graphs and keeps
//! the faster, as DyNet's self-tuning mode does.

use std::time::Instant;

use crate::plan::Strategy;

/// How `Strategy::Auto` decides: each candidate runs this many graphs,
/// alternating, and the one with less time per node wins.
const AUTO_TRIALS: u32 = 2;

/// The state of `Strategy::Auto`'s timing.
#[derive(Debug, Clone, Default)]
pub(crate) struct AutoTuner {
    /// Seconds and nodes measured per candidate (Depth, Agenda).
    totals: [(f64, usize); 2],
    runs: [u32; 2],
    /// The candidate timing the current graph.
    current: Option<usize>,
    started: Option<Instant>,
    pub(crate) chosen: Option<Strategy>,
}

const CANDIDATES: [Strategy; 2] = [Strategy::Depth, Strategy::Agenda];

impl AutoTuner {
    /// Ends the measurement of the previous graph (of `nodes` nodes).
    pub(crate) fn finish(&mut self, nodes: usize) {
        if let (Some(c), Some(t)) = (self.current.take(), self.started.take()) {
            self.totals[c].0 += t.elapsed().as_secs_f64();
            self.totals[c].1 += nodes;
            self.runs[c] += 1;
        }
        if self.chosen.is_none() && self.runs.iter().all(|&r| r >= AUTO_TRIALS) {
            let per_node = |c: usize| self.totals[c].0 / self.totals[c].1.max(1) as f64;
            self.chosen = Some(if per_node(0) <= per_node(1) {
                CANDIDATES[0]
            } else {
                CANDIDATES[1]
            });
        }
    }

    /// The strategy for the next graph.
    pub(crate) fn next(&mut self) -> Strategy {
        if let Some(s) = self.chosen {
            return s;
        }
        let c = if self.runs[0] <= self.runs[1] { 0 } else { 1 };
        self.current = Some(c);
        self.started = Some(Instant::now());
        CANDIDATES[c]
    }
}
