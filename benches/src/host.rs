//! Host time per instance (a tree, a sentence): building its part of the
//! graph, planning it, and the executor's bookkeeping around the kernels
//! (`PlanStats::bookkeeping`), with its graph nodes. The executor's data
//! movement outside the ops (gathers, gradient scatters, zero fills:
//! `PlanStats::moves`, device kernels on a GPU) is reported beside it,
//! not in it. On a GPU this host
//! work is what bounds tree models at large batches; vertex functions
//! exist to cut it. Recorded as a `host_time` figure beside a workload's
//! throughput or latency.

use sheaf_sched::PlanStats;

use crate::report::Report;

/// One step's host work, per instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostTime {
    /// Seconds building the graph.
    pub build: f64,
    /// Seconds planning.
    pub plan: f64,
    /// Seconds of executor bookkeeping (batch time outside the ops and
    /// outside its data movement).
    pub bookkeeping: f64,
    /// Seconds of the executor's data movement outside the ops.
    pub moves: f64,
    /// Graph nodes.
    pub nodes: f64,
}

impl HostTime {
    /// From one step of `instances`: the time its graph took to build, its
    /// node count, and the executor's statistics of that step.
    pub fn of_step(build_secs: f64, nodes: usize, stats: &PlanStats, instances: usize) -> HostTime {
        let n = instances.max(1) as f64;
        HostTime {
            build: build_secs / n,
            plan: stats.planning.as_secs_f64() / n,
            bookkeeping: stats.bookkeeping().as_secs_f64() / n,
            moves: stats.moves.as_secs_f64() / n,
            nodes: nodes as f64 / n,
        }
    }

    /// Seconds of host work in all.
    pub fn total(&self) -> f64 {
        self.build + self.plan + self.bookkeeping
    }

    /// `build 14.2 µs, plan 3.1 µs, bookkeeping 9.0 µs per tree (moving
    /// data 5.1 µs); 177 graph nodes per tree`.
    pub fn describe(&self, instance: &str) -> String {
        format!(
            "build {:.1} µs, plan {:.1} µs, bookkeeping {:.1} µs per {instance} (moving data {:.1} µs); {:.0} graph nodes per {instance}",
            1e6 * self.build,
            1e6 * self.plan,
            1e6 * self.bookkeeping,
            1e6 * self.moves,
            self.nodes
        )
    }

    /// Adds a `host_time` record (µs per instance, in all; the parts and
    /// the nodes in its notes) with the variant of the record before it.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        report: &mut Report,
        workload: &str,
        implementation: &str,
        threads: usize,
        batch: usize,
        peak: f64,
        instance: &str,
    ) {
        let variant = report.records().last().map(|r| r.variant.clone());
        report.add(
            workload,
            implementation,
            threads,
            batch,
            "host_time",
            1e6 * self.total(),
            &format!("us/{instance}"),
            peak,
            None,
            &self.describe(instance),
        );
        if let Some(v) = variant {
            report.set_variant(&v);
        }
    }
}
