//! When kernels use more than one thread.
//!
//! Kernels run on the current rayon pool (`rayon::current_num_threads()`),
//! so a caller picks the thread count with `ThreadPool::install`. Below the
//! thresholds here, splitting costs more than it gains and the kernel stays
//! on the calling thread. The values were measured with
//! `cargo xtask bench kernels` on the project's 2-core machines; see the
//! README for the figures.

/// Elementwise kernels split above this many elements.
pub const ELEMENTWISE_MIN_LEN: usize = 1 << 16;

/// Whether work of `len` elements should run on more than one thread.
#[inline]
pub fn should_split(len: usize, threshold: usize) -> bool {
    len >= threshold && rayon::current_num_threads() > 1
}
