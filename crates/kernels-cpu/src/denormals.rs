//! Subnormal floats: flushed to zero, the way deep-learning frameworks run
//! on CPUs.
//!
//! Intel cores handle subnormal operands and results through microcode
//! assists that cost ~100 cycles each; a Tree-LSTM's gradients drift into
//! that range, and W1 measured 5-7x slower on an Intel Xeon because of it
//! (AMD cores barely notice). With flush-to-zero (FTZ: subnormal results
//! become 0) and denormals-are-zero (DAZ: subnormal inputs read as 0) set
//! in a thread's SSE control register, the assists disappear; values below
//! 1.2e-38 become 0, far below anything a model can tell apart.
//!
//! The mode is per thread. [`prepare`] sets it on the calling thread and on
//! every thread of the current rayon pool; sheaf's executors and optimizers
//! call it when they start, so users need do nothing. To keep IEEE
//! subnormals, set `SHEAF_DENORMALS=keep` in the environment or call
//! [`set_flush`]`(false)` before running anything (threads already flushed
//! are restored by the next [`prepare`]). On CPUs other than x86-64 these
//! functions do nothing.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

/// 0: not decided yet (read the environment), 1: flush, 2: keep.
static POLICY: AtomicU8 = AtomicU8::new(0);

thread_local! {
    /// The mode this thread was last set to by [`prepare`] (None: never).
    static APPLIED: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether sheaf flushes subnormals (the default; `SHEAF_DENORMALS=keep`
/// or [`set_flush`]`(false)` turn it off).
pub fn flush_enabled() -> bool {
    match POLICY.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let keep =
                std::env::var("SHEAF_DENORMALS").is_ok_and(|v| v.eq_ignore_ascii_case("keep"));
            // A concurrent `set_flush` wins over the environment.
            let _ = POLICY.compare_exchange(
                0,
                if keep { 2 } else { 1 },
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            POLICY.load(Ordering::Relaxed) == 1
        }
    }
}

/// Chooses whether sheaf flushes subnormals from now on (overrides the
/// environment).
pub fn set_flush(flush: bool) {
    POLICY.store(if flush { 1 } else { 2 }, Ordering::Relaxed);
}

/// Whether the calling thread flushes subnormals now (FTZ and DAZ both set).
pub fn flushed_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let bits = crate::simd::mxcsr::FLUSH_BITS;
        crate::simd::mxcsr::read() & bits == bits
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Sets (or clears) FTZ and DAZ on the calling thread.
pub fn set_here(flush: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::simd::mxcsr;
        let old = mxcsr::read();
        let new = if flush {
            old | mxcsr::FLUSH_BITS
        } else {
            old & !mxcsr::FLUSH_BITS
        };
        if new != old {
            mxcsr::write(new);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = flush;
}

/// Applies the policy ([`flush_enabled`]) to the calling thread and to
/// every thread of the current rayon pool. Cheap when nothing changes on
/// the calling thread and the pool has one thread; otherwise one rayon
/// broadcast (microseconds).
pub fn prepare() {
    let flush = flush_enabled();
    apply_here(flush);
    if rayon::current_num_threads() > 1 {
        rayon::broadcast(|_| apply_here(flush));
    }
}

fn apply_here(flush: bool) {
    APPLIED.with(|a| {
        // Something else may have changed the register since: check it.
        if a.get() != Some(flush) || flushed_here() != flush {
            set_here(flush);
            a.set(Some(flush));
        }
    });
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn flushing_zeroes_subnormal_results_and_inputs() {
        let tiny = f32::MIN_POSITIVE / 4.0; // subnormal
        set_here(false);
        assert!(!flushed_here());
        let x = std::hint::black_box(tiny);
        assert!(std::hint::black_box(x * 0.5) > 0.0, "IEEE keeps subnormals");
        set_here(true);
        assert!(flushed_here());
        // DAZ: the subnormal input reads as zero; FTZ: a subnormal result is zero.
        assert_eq!(std::hint::black_box(x) * 1.0, 0.0);
        let y = std::hint::black_box(f32::MIN_POSITIVE);
        assert_eq!(y * 0.5, 0.0);
        set_here(false);
        assert!(!flushed_here());
    }

    #[test]
    fn prepare_reaches_every_pool_thread() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        set_flush(true);
        pool.install(prepare);
        let flags = pool.broadcast(|_| flushed_here());
        assert_eq!(flags, vec![true; 3]);
    }
}
