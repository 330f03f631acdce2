//! The GEMM-only bound of a workload (`shared/BENCHMARKS.md`, "Limits"):
//! the time its matrix products alone take when each runs at the best rate
//! sgemm reaches for its shape, timed in the same run. No executor runs the
//! workload faster without a faster GEMM.
//!
//! ```no_run
//! use sheaf_benches::bound::record_gemms;
//! use sheaf_benches::measure::Budget;
//! # fn train_some_steps() {}
//! let ((), products) = record_gemms(|| train_some_steps());
//! let at_bound = products.seconds(1, Budget::quick());
//! println!("{} products, {:.3} s at the GEMM-only bound", products.calls(), at_bound);
//! ```
//!
//! The products are logged by the kernels themselves
//! ([`sheaf_kernels_cpu::gemm_log`]), so this works for any model: the
//! shapes are those of the batches the executor actually ran, forward and
//! backward.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sheaf_kernels_cpu::gemm_log::{self, GemmShape};
use sheaf_kernels_cpu::CpuKernels;

use crate::measure::{random_vec, seconds_per_call, with_threads, Budget};

/// The products of a computation: calls per shape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Products {
    shapes: BTreeMap<GemmShape, u64>,
}

/// Runs `f`, logging every matrix product it makes (on any thread).
pub fn record_gemms<R>(f: impl FnOnce() -> R) -> (R, Products) {
    let (out, log) = gemm_log::record(f);
    (
        out,
        Products {
            shapes: log.into_iter().collect(),
        },
    )
}

/// Dimensions up to this are timed exactly; larger ones are rounded up to
/// a geometric grid ([`GRID_STEP`]) so that a run with thousands of
/// distinct batch sizes times a few hundred shapes.
const EXACT_DIM: usize = 32;
/// Ratio between grid points: a shape is timed at most 12.5% larger per
/// dimension and its time scaled down by the size ratio. sgemm's rate
/// grows with size, so the scaled time errs low: the bound stays a bound.
const GRID_STEP: f64 = 1.125;

fn grid(d: usize) -> usize {
    if d <= EXACT_DIM {
        return d;
    }
    let mut g = EXACT_DIM as f64;
    while (g.ceil() as usize) < d {
        g *= GRID_STEP;
    }
    g.ceil() as usize
}

/// Seconds per call of each timed (threads, shape), shared by every bound
/// of the process: the strategies of one workload run mostly the same
/// shapes.
static TIMED: Mutex<Option<HashMap<(usize, GemmShape), f64>>> = Mutex::new(None);

impl Products {
    /// Adds another computation's products.
    pub fn merge(&mut self, other: &Products) {
        for (s, n) in &other.shapes {
            *self.shapes.entry(*s).or_insert(0) += n;
        }
    }

    /// Product calls.
    pub fn calls(&self) -> u64 {
        self.shapes.values().sum()
    }

    /// Distinct shapes.
    pub fn distinct(&self) -> usize {
        self.shapes.len()
    }

    /// Floating-point operations of all products (2 m n k each).
    pub fn flops(&self) -> f64 {
        self.shapes.iter().map(|(s, &n)| s.flops() * n as f64).sum()
    }

    /// (shape, calls), in shape order.
    pub fn iter(&self) -> impl Iterator<Item = (GemmShape, u64)> + '_ {
        self.shapes.iter().map(|(s, &n)| (*s, n))
    }

    /// Seconds all the products take at `threads` threads when each runs at
    /// the rate of the faster of sheaf's sgemm (its small-row tiles,
    /// matrixmultiply, the row or column split) and single-threaded
    /// matrixmultiply for its shape, each shape timed now. With several
    /// threads a product may also count as `1 / threads` of its
    /// one-thread time: products too small to split can still run side by
    /// side (an affine backward's two products do), so only that is a
    /// bound. Each shape gets `budget.rounds` (at most 5) rounds of
    /// `budget.round / 30` (at least 1 ms): hundreds of shapes are timed
    /// per workload.
    pub fn seconds(&self, threads: usize, budget: Budget) -> f64 {
        let per_shape = Budget {
            round: (budget.round / 30).max(Duration::from_millis(1)),
            rounds: budget.rounds.clamp(1, 5),
        };
        // Representative shapes and the (calls x size ratio) each stands for.
        let mut reps: BTreeMap<GemmShape, f64> = BTreeMap::new();
        for (s, &calls) in &self.shapes {
            let rep = GemmShape {
                m: grid(s.m),
                n: grid(s.n),
                k: grid(s.k),
                ..*s
            };
            *reps.entry(rep).or_insert(0.0) += calls as f64 * s.flops() / rep.flops();
        }
        let mut timed = TIMED.lock().unwrap_or_else(PoisonError::into_inner);
        let timed = timed.get_or_insert_with(HashMap::new);
        let counts: Vec<usize> = if threads > 1 {
            vec![1, threads]
        } else {
            vec![1]
        };
        for &t in &counts {
            let missing: Vec<GemmShape> = reps
                .keys()
                .filter(|s| !timed.contains_key(&(t, **s)))
                .copied()
                .collect();
            for (s, secs) in time_shapes(&missing, t, per_shape) {
                timed.insert((t, s), secs);
            }
        }
        reps.iter()
            .map(|(s, weight)| {
                let one = timed[&(1, *s)];
                let best = counts
                    .iter()
                    .map(|&t| timed[&(t, *s)].min(one / t as f64))
                    .fold(f64::INFINITY, f64::min);
                weight * best
            })
            .sum()
    }
}

/// Seconds per call of each shape, the faster of the two GEMMs.
fn time_shapes(shapes: &[GemmShape], threads: usize, budget: Budget) -> Vec<(GemmShape, f64)> {
    let most = |f: fn(&GemmShape) -> usize| shapes.iter().map(f).max().unwrap_or(0);
    let a = random_vec(most(|s| s.m * s.k), 11);
    let b = random_vec(most(|s| s.k * s.n), 12);
    let mut c = vec![0.0f32; most(|s| s.m * s.n)];
    let kern = CpuKernels::new();
    with_threads(threads, || {
        shapes
            .iter()
            .map(|s| {
                let (ta, tb) = s.transposes();
                let lda = if s.ta { s.m } else { s.k };
                let ldb = if s.tb { s.k } else { s.n };
                let mut failed = false;
                let ours = seconds_per_call(budget, || {
                    failed |= kern
                        .sgemm(
                            ta, tb, s.m, s.n, s.k, 1.0, &a, lda, &b, ldb, 0.0, &mut c, s.n,
                        )
                        .is_err();
                });
                // Buffers fit every shape by construction; were a call
                // refused, its time would be meaningless: take the other.
                let ours = if failed { f64::INFINITY } else { ours };
                let mm = seconds_per_call(budget, || {
                    matrixmultiply_strided(s, &a[..s.m * s.k], &b[..s.k * s.n], &mut c)
                });
                (*s, ours.min(mm))
            })
            .collect()
    })
}

/// matrixmultiply on a logged shape, transposes as strides.
fn matrixmultiply_strided(s: &GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (rsa, csa) = if s.ta { (1, s.m) } else { (s.k, 1) };
    let (rsb, csb) = if s.tb { (1, s.k) } else { (s.n, 1) };
    assert!(a.len() >= s.m * s.k && b.len() >= s.k * s.n && c.len() >= s.m * s.n);
    // SAFETY: A is m x k read at i * rsa + p * csa < m * k, B is k x n read
    // at p * rsb + j * csb < k * n (both layouts are dense, as the strides
    // above state), and C is m x n row-major; the assert proves all three
    // lie inside their slices, and C is borrowed mutably.
    unsafe {
        matrixmultiply::sgemm(
            s.m,
            s.k,
            s.n,
            1.0,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            rsb as isize,
            csb as isize,
            0.0,
            c.as_mut_ptr(),
            s.n as isize,
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_exact_when_small_and_rounds_up_within_a_step() {
        for d in 1..=EXACT_DIM {
            assert_eq!(grid(d), d);
        }
        for d in EXACT_DIM + 1..5000 {
            let g = grid(d);
            assert!(
                g >= d && (g as f64) <= d as f64 * GRID_STEP + 1.0,
                "{d} -> {g}"
            );
        }
    }

    #[test]
    fn seconds_scale_with_the_calls() {
        let ((), one) = record_gemms(|| {
            let kern = CpuKernels::new();
            let (a, b) = (vec![1.0f32; 40 * 50], vec![1.0f32; 50 * 60]);
            let mut c = vec![0.0f32; 50 * 60];
            let (n, y) = (
                sheaf_kernels_cpu::Transpose::No,
                sheaf_kernels_cpu::Transpose::Yes,
            );
            kern.sgemm(n, n, 40, 60, 50, 1.0, &a, 50, &b, 60, 0.0, &mut c, 60)
                .unwrap();
            kern.sgemm(y, n, 50, 60, 40, 1.0, &a, 50, &b, 60, 0.0, &mut c, 60)
                .unwrap();
        });
        assert_eq!(one.calls(), 2);
        assert_eq!(one.flops(), 2.0 * 2.0 * 40.0 * 50.0 * 60.0);
        let mut three = one.clone();
        three.merge(&one);
        three.merge(&one);
        assert_eq!(three.calls(), 6);
        let budget = Budget::quick();
        let (t1, t3) = (one.seconds(1, budget), three.seconds(1, budget));
        // Same cached per-shape times: exactly three times as long.
        assert!((t3 / t1 - 3.0).abs() < 1e-9, "{t1} {t3}");
        assert!(t1 > 0.0);
    }
}
