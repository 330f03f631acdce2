//! Length bucketing (MXNet's `BucketingModule`, Wolfram's `NetTrain` on
//! variable-length sequences), the third strategy of the design notes.
//!
//! The instances of a step are grouped by sequence length into
//! logarithmically spaced buckets: the bucket length of `len` is the
//! smallest boundary `ceil(spacing^k) >= len`, so the number of distinct
//! padded shapes grows with `log(max len)`. Each bucket runs as ONE graph
//! of its members, each built by the user's per-instance model at the
//! bucket length (padded); since all members then have the same structure,
//! the executor runs every time step of the bucket as one `[b, ...]`
//! kernel call: the manual `[b, T, ...]` batching of MXNet, written for one
//! instance. The model keeps padding out of the results with the sequence
//! ops of `sheaf-autodiff` (`sequence_last`, `sequence_mask`,
//! `sequence_reverse`, `sequence_sum`), which take the true length.
//!
//! Why a runner and not a `Strategy::Bucket`: a [`crate::Strategy`] plans a
//! graph that already exists, but bucketing must decide how the graphs are
//! BUILT (padded length, which instances share a graph), so it wraps the
//! executor and takes the model as a function of (instance, padded length).
//! The same function with `padded = len` runs each instance unpadded, so
//! one model serves both. Plans are cached per (bucket length, node count)
//! ([`Executor::cache_plans_as`]): a bucket length that repeats with the
//! same number of members is not planned again.

use sheaf_autodiff::{Expr, Graph, ParamStore};

use crate::error::{Result, SchedError};
use crate::exec::Executor;
use crate::plan::Strategy;
use crate::stats::PlanStats;

/// Longest sequence accepted (lengths travel as `u32` node data).
const MAX_LEN: usize = u32::MAX as usize;

/// The instances of one bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// The padded length every member runs at.
    pub len: usize,
    /// Indices of the members (into the step's instances), in input order.
    pub members: Vec<usize>,
}

/// Bucket length of `len` for boundaries `ceil(spacing^k)`.
fn round_up(spacing: f64, len: usize) -> Result<usize> {
    if len == 0 {
        return Err(SchedError::Bucket {
            what: "a sequence of length 0 has no bucket (drop it or give it one padding step)"
                .into(),
        });
    }
    if len > MAX_LEN {
        return Err(SchedError::Bucket {
            what: format!("length {len} is above the longest supported, {MAX_LEN}"),
        });
    }
    let mut b = 1.0f64;
    // Exact powers of the spacing (2^k for spacing 2) are their own bucket:
    // the loop compares the rounded boundary, and f64 holds them exactly.
    while (b.ceil() as usize) < len {
        b *= spacing;
    }
    Ok((b.ceil() as usize).min(MAX_LEN))
}

/// Length bucketing over an [`Executor`]; see the module docs.
#[derive(Debug)]
pub struct Bucketing {
    spacing: f64,
    exec: Executor,
    stats: PlanStats,
}

impl Bucketing {
    /// Buckets with boundaries `ceil(spacing^k)` (2.0: 1, 2, 4, 8, 16, ...;
    /// 1.5: 1, 2, 3, 4, 6, 8, 12, 18, ...), each run by the agenda
    /// executor. Errors unless `spacing > 1` and finite.
    pub fn new(spacing: f64) -> Result<Self> {
        if !(spacing > 1.0 && spacing.is_finite()) {
            return Err(SchedError::Bucket {
                what: format!("spacing {spacing} must be finite and above 1"),
            });
        }
        Ok(Bucketing {
            spacing,
            exec: Executor::new(Strategy::Agenda),
            stats: PlanStats::default(),
        })
    }

    /// Runs the buckets with `exec` from now on: another strategy, or an
    /// executor on a device ([`Executor::on`]).
    pub fn with_executor(mut self, exec: Executor) -> Self {
        self.exec = exec;
        self
    }

    /// The spacing of the boundaries.
    pub fn spacing(&self) -> f64 {
        self.spacing
    }

    /// The padded length of a sequence of length `len`. Errors for 0 and
    /// for lengths above `u32::MAX`.
    pub fn bucket_len(&self, len: usize) -> Result<usize> {
        round_up(self.spacing, len)
    }

    /// Groups instances of the given lengths into buckets, shortest bucket
    /// first. Errors for an empty list and for any length
    /// [`Bucketing::bucket_len`] rejects (naming the instance).
    pub fn buckets(&self, lens: &[usize]) -> Result<Vec<Bucket>> {
        if lens.is_empty() {
            return Err(SchedError::Bucket {
                what: "no sequences to bucket (empty batch)".into(),
            });
        }
        let mut out: Vec<Bucket> = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            let t = self.bucket_len(len).map_err(|e| SchedError::Bucket {
                what: format!("instance {i}: {e}"),
            })?;
            match out.iter_mut().find(|b| b.len == t) {
                Some(b) => b.members.push(i),
                None => out.push(Bucket {
                    len: t,
                    members: vec![i],
                }),
            }
        }
        out.sort_by_key(|b| b.len);
        Ok(out)
    }

    /// One step over instances of lengths `lens`: per bucket, clears `g`,
    /// builds `model(g, i, padded_len)` for each member `i` (a scalar
    /// loss), sums the losses and runs forward and backward, so parameter
    /// gradients ACCUMULATE in `store` over all buckets (zero them before,
    /// update after, as for one graph). Returns the total loss, and leaves
    /// `g` cleared (a graph that ran holds the parameters' values: an
    /// update would copy them). Afterwards [`Bucketing::stats`] holds the
    /// step's statistics summed over buckets, with the padding fraction.
    pub fn step<F>(
        &mut self,
        g: &mut Graph,
        store: &ParamStore,
        lens: &[usize],
        mut model: F,
    ) -> Result<f32>
    where
        F: FnMut(&mut Graph, usize, usize) -> sheaf_autodiff::Result<Expr>,
    {
        let buckets = self.buckets(lens)?;
        self.stats = PlanStats::default();
        let mut total = 0.0f32;
        for bucket in &buckets {
            g.clear();
            let mut losses = Vec::with_capacity(bucket.members.len());
            for &i in &bucket.members {
                losses.push(model(g, i, bucket.len)?);
            }
            let loss = if losses.len() == 1 {
                losses[0]
            } else {
                g.sum(&losses)?
            };
            self.exec.cache_plans_as(Some(bucket.len as u64));
            let v = self.exec.forward(g, store, loss)?;
            total += v.to_vec::<f32>().map_or(0.0, |s| s.iter().sum());
            self.exec.backward(g, store, loss)?;
            let mut s = self.exec.stats().clone();
            s.total_steps = bucket.len * bucket.members.len();
            s.padded_steps = bucket.members.iter().map(|&i| bucket.len - lens[i]).sum();
            self.stats.absorb(&s);
        }
        g.clear();
        self.exec.cache_plans_as(None);
        Ok(total)
    }

    /// Statistics of the last [`Bucketing::step`], summed over its buckets.
    pub fn stats(&self) -> &PlanStats {
        &self.stats
    }
}
