//! A log of the matrix products a computation makes: every call of
//! [`CpuKernels::sgemm`](crate::CpuKernels::sgemm) while [`record`] runs,
//! on any thread, counted per shape.
//!
//! This is what a workload's GEMM-only bound is computed from: time each
//! logged shape alone at the best rate sgemm reaches for it, and no
//! executor can run the workload faster than the sum without a faster
//! GEMM (`sheaf-benches`' `bound` module does that). Recording costs one
//! relaxed atomic load per product while off, and a lock per product
//! while on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::Transpose;

/// One product's shape: `op(A)` is `m x k`, `op(B)` is `k x n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GemmShape {
    /// Whether A is used transposed.
    pub ta: bool,
    /// Whether B is used transposed.
    pub tb: bool,
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
}

impl GemmShape {
    /// The transposes as the kernel takes them.
    pub fn transposes(&self) -> (Transpose, Transpose) {
        let t = |yes| if yes { Transpose::Yes } else { Transpose::No };
        (t(self.ta), t(self.tb))
    }

    /// Floating-point operations of one such product, `2 m n k`.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

static RECORDING: AtomicBool = AtomicBool::new(false);
static LOG: Mutex<Option<HashMap<GemmShape, u64>>> = Mutex::new(None);
/// Serialises recordings: there is one log per process.
static SESSION: Mutex<()> = Mutex::new(());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the log leaves counts, not broken invariants.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Called by `sgemm` for every product with `m, n > 0` (`k == 0` only
/// scales C and is not logged).
pub(crate) fn note(ta: Transpose, tb: Transpose, m: usize, n: usize, k: usize) {
    if k == 0 || !RECORDING.load(Ordering::Relaxed) {
        return;
    }
    let shape = GemmShape {
        ta: ta == Transpose::Yes,
        tb: tb == Transpose::Yes,
        m,
        n,
        k,
    };
    if let Some(log) = lock(&LOG).as_mut() {
        *log.entry(shape).or_insert(0) += 1;
    }
}

/// Runs `f` and returns its result with the products every thread of the
/// process made meanwhile, as (shape, calls) sorted by shape. Recordings
/// do not nest or overlap: a second `record` waits for the first.
///
/// A product split over threads counts once, with its full shape.
pub fn record<R>(f: impl FnOnce() -> R) -> (R, Vec<(GemmShape, u64)>) {
    let _session = lock(&SESSION);
    *lock(&LOG) = Some(HashMap::new());
    RECORDING.store(true, Ordering::SeqCst);
    // Stop recording even if `f` panics, so later products are not logged.
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            RECORDING.store(false, Ordering::SeqCst);
        }
    }
    let stop = Stop;
    let out = f();
    drop(stop);
    let log = lock(&LOG).take().unwrap_or_default();
    let mut shapes: Vec<(GemmShape, u64)> = log.into_iter().collect();
    shapes.sort();
    (out, shapes)
}
