//! The executor's memory: one arena per step. Every buffer a step needs
//! (batch outputs, saved state, gathered inputs, gradients, temporaries)
//! comes from the arena; when the next graph starts, the buffers come back
//! and are handed out again, so a training loop stops allocating after its
//! first steps (fresh pages, zeroing by the kernel and `free` cost ~15% of
//! a W1 step otherwise).
//!
//! A buffer still viewed by someone (a value the user kept) cannot be
//! reused without changing what they see: [`sheaf_tensor::Tensor::recycle`]
//! refuses it, and the arena lets it go.

use std::collections::BTreeMap;

use sheaf_tensor::{DType, Device, Shape, Tensor};

/// Free buffers larger than this many elements beyond the request are not
/// handed out for it (a huge block would otherwise serve a tiny request and
/// leave the next large one to allocate).
const MAX_SLACK: usize = 4096;

/// Buffers grown on demand and reused across steps.
#[derive(Default)]
pub(crate) struct Arena {
    /// Where buffers are allocated.
    pub(crate) device: Device,
    /// Free buffers by capacity (elements).
    free: BTreeMap<usize, Vec<Tensor>>,
    /// Bytes handed out since the step began.
    in_use: usize,
    /// The most bytes one step has held.
    peak: usize,
    /// Bytes allocated fresh since the step began (0 once warm).
    fresh: usize,
    /// Bytes handed out zero-filled since the step began.
    zeroed: usize,
    /// Time spent zero-filling reused buffers since the step began.
    zeroing: std::time::Duration,
}

impl Arena {
    /// A zero-filled f32 tensor of `shape`, reusing a free buffer when one
    /// fits.
    pub(crate) fn zeros(&mut self, shape: Shape) -> sheaf_tensor::Result<Tensor> {
        self.take(shape, true)
    }

    /// An f32 tensor of `shape` holding stale values, for outputs the caller
    /// overwrites completely (ops' forward outputs, gathered inputs): saves
    /// zeroing tens of MB per step.
    pub(crate) fn overwritten(&mut self, shape: Shape) -> sheaf_tensor::Result<Tensor> {
        self.take(shape, false)
    }

    fn take(&mut self, shape: Shape, zero: bool) -> sheaf_tensor::Result<Tensor> {
        let mut t = self.take_unpoisoned(shape, zero)?;
        // Buffers may come back mid-step (inference mode): the peak is
        // the most held at once.
        self.peak = self.peak.max(self.in_use);
        if zero {
            self.zeroed += t.numel() * 4;
        }
        // Debug builds (the tests) poison buffers handed out unzeroed, so an
        // op that reads its output before writing it fails the equality
        // tests instead of passing on lucky zeros.
        if !zero && cfg!(debug_assertions) {
            self.device.backend()?.fill(f32::NAN, t.view_mut()?)?;
        }
        Ok(t)
    }

    fn take_unpoisoned(&mut self, shape: Shape, zero: bool) -> sheaf_tensor::Result<Tensor> {
        let numel = shape.numel()?;
        // Emptied lists stay in the map (their vectors allocated), so that
        // recycling a step's buffers allocates nothing: skip them.
        let limit = numel.saturating_mul(2).saturating_add(MAX_SLACK);
        let fit = self
            .free
            .range_mut(numel..=limit)
            .find(|(_, list)| !list.is_empty());
        if let Some((&cap, list)) = fit {
            let t = list.pop();
            // Refused only if shared since it was put back (the arena holds
            // the only handle, so never); then allocate.
            let on_host = self.device == Device::Cpu;
            let start = std::time::Instant::now();
            let t = t.map(|t| match zero && on_host {
                true => t.recycle(shape, DType::F32),
                false => t.reuse(shape, DType::F32),
            });
            if let Some(Ok(mut t)) = t {
                if zero && !on_host {
                    self.device.backend()?.fill(0.0, t.view_mut()?)?;
                }
                if zero {
                    self.zeroing += start.elapsed();
                }
                self.in_use += cap * 4;
                return Ok(t);
            }
        }
        // Round fresh buffers up (to 1/8 of the next power of two) so that a
        // slightly larger request next step still finds this one.
        let class = size_class(numel);
        let t = Tensor::zeros([class], DType::F32, self.device)?;
        self.fresh += class * 4;
        self.in_use += class * 4;
        // Fresh memory is zero already: no second fill.
        t.reuse(shape, DType::F32)
            .map_err(|_| sheaf_tensor::TensorError::SizeOverflow { shape })
    }

    /// Takes a buffer back for reuse if nobody else views it.
    /// Mid-step (inference mode) it is no longer held by the step.
    pub(crate) fn recycle(&mut self, t: Tensor) {
        if t.is_unique() && t.capacity() > 0 {
            self.in_use = self.in_use.saturating_sub(t.capacity() * 4);
            self.free.entry(t.capacity()).or_default().push(t);
        }
    }

    /// Ends a step: records its peak and starts counting the next.
    pub(crate) fn end_step(&mut self) -> (usize, usize) {
        // Called once the step's buffers are back: a list still empty holds
        // a size no buffer has any more (inputs uploaded at their exact
        // sizes leave one per size), and would lengthen every lookup.
        self.free.retain(|_, list| !list.is_empty());
        let step = (self.in_use, self.fresh);
        self.peak = self.peak.max(self.in_use);
        self.in_use = 0;
        self.fresh = 0;
        self.zeroed = 0;
        self.zeroing = std::time::Duration::ZERO;
        step
    }

    /// Time spent zero-filling reused buffers by the current step so far.
    pub(crate) fn zeroing(&self) -> std::time::Duration {
        self.zeroing
    }

    /// Bytes held by the current step so far.
    pub(crate) fn in_use(&self) -> usize {
        self.in_use
    }

    /// Bytes allocated fresh by the current step so far.
    pub(crate) fn fresh(&self) -> usize {
        self.fresh
    }

    /// Bytes handed out zero-filled by the current step so far.
    pub(crate) fn zeroed(&self) -> usize {
        self.zeroed
    }

    /// The most bytes one step has held.
    pub(crate) fn peak(&self) -> usize {
        self.peak.max(self.in_use)
    }
}

/// `n` rounded up to a multiple of 1/8 of its power of two (at most 12.5%
/// more), and to whole 64-byte lines.
fn size_class(n: usize) -> usize {
    let n = n.max(16);
    let step = (n.next_power_of_two() / 8).max(16);
    n.div_ceil(step).saturating_mul(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_after_recycle_and_counts_bytes() {
        let mut a = Arena::default();
        let t = a.zeros(Shape::from([10, 30])).unwrap();
        let id = t.storage_id();
        assert_eq!(t.shape(), Shape::from([10, 30]));
        assert!(a.fresh() >= 1200);
        a.recycle(t);
        a.end_step();
        let u = a.zeros(Shape::from([9, 30])).unwrap();
        assert_eq!(u.storage_id(), id, "reused");
        assert_eq!(a.fresh(), 0);
        assert!(u.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
        assert!(a.peak() >= 1200);
    }

    #[test]
    fn shared_buffers_are_not_reused() {
        let mut a = Arena::default();
        let t = a.zeros(Shape::from([4, 4])).unwrap();
        let view = t.rows(0..1).unwrap();
        a.recycle(t);
        let u = a.zeros(Shape::from([4, 4])).unwrap();
        assert!(!u.shares_storage(&view));
    }

    #[test]
    fn small_requests_do_not_take_huge_buffers() {
        let mut a = Arena::default();
        let big = a.zeros(Shape::from([100_000])).unwrap();
        let id = big.storage_id();
        a.recycle(big);
        let small = a.zeros(Shape::from([8])).unwrap();
        assert_ne!(small.storage_id(), id);
        let big2 = a.zeros(Shape::from([99_000])).unwrap();
        assert_eq!(big2.storage_id(), id);
    }

    #[test]
    fn size_classes_bound_the_waste() {
        for n in [1, 15, 16, 17, 100, 1000, 4097, 1 << 20, (1 << 20) + 1] {
            let c = size_class(n);
            assert!(c >= n && c.is_multiple_of(16));
            assert!(c <= n + n / 4 + 16, "{n} -> {c}");
        }
    }
}
