//! Weights packed once for the CPU's matrix products.
//!
//! A buffer marked as a weight ([`crate::Tensor::mark_as_weight`];
//! parameter stores mark what executors read) keeps the panels
//! `sheaf_kernels_cpu` packs its B operand into, so the products of a step
//! that read one weight (a batch per tree level, forward and backward) pack
//! it once. Any write to the buffer drops them: the host storage clears
//! its cache whenever it hands out mutable access, so a packed copy can
//! never outlive the values it was made from.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use sheaf_kernels_cpu::gemm::PackedB;
use sheaf_kernels_cpu::{Isa, Transpose};

/// What one packed copy was made from: the view of B within the buffer
/// and the handle's ISA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackKey {
    pub offset: usize,
    pub tb: Transpose,
    pub k: usize,
    pub n: usize,
    pub ldb: usize,
    pub isa: Isa,
}

/// Packed copies kept per buffer: a weight is read as stored and
/// transposed (two), perhaps by handles of two ISAs.
const MAX_ENTRIES: usize = 4;

/// A host buffer's packed copies and whether to make them.
#[derive(Default)]
pub(crate) struct PackCache {
    weight: AtomicBool,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    live: Vec<(PackKey, Arc<PackedB>)>,
    /// Copies dropped by a write, kept for their memory: packing a weight
    /// again after each update would otherwise allocate (and fault in)
    /// fresh pages every step.
    spare: Vec<PackedB>,
}

impl PackCache {
    /// A cache with the same mark and no entries (for a copy of the buffer).
    pub(crate) fn same_mark(&self) -> PackCache {
        PackCache {
            weight: AtomicBool::new(self.is_weight()),
            entries: Mutex::default(),
        }
    }

    pub(crate) fn mark_as_weight(&self) {
        // A load first: marking a marked buffer writes nothing (executors
        // mark every parameter they read, every step, from any thread).
        if !self.weight.load(Ordering::Relaxed) {
            self.weight.store(true, Ordering::Relaxed);
        }
    }

    pub(crate) fn is_weight(&self) -> bool {
        self.weight.load(Ordering::Relaxed)
    }

    /// Forgets everything: the buffer is handed out for something else (an
    /// arena reusing it), which is no weight.
    pub(crate) fn reset(&mut self) {
        *self.weight.get_mut() = false;
        let entries = self
            .entries
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        entries.live.clear();
        entries.spare.clear();
    }

    /// Drops every packed copy (the buffer is about to be written); their
    /// memory is kept for the next packing.
    pub(crate) fn clear(&mut self) {
        let entries = self
            .entries
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for (_, p) in entries.live.drain(..) {
            // Products hold copies only while they borrow the buffer, which
            // a write excludes; should one be held anyway, let it go.
            if let Ok(p) = Arc::try_unwrap(p) {
                if entries.spare.len() < MAX_ENTRIES {
                    entries.spare.push(p);
                }
            }
        }
    }

    /// The packed copy for `key`, made by `pack` (into spare memory, if
    /// any) when there is none yet.
    pub(crate) fn get_or_pack<E>(
        &self,
        key: PackKey,
        pack: impl FnOnce(Option<PackedB>) -> Result<PackedB, E>,
    ) -> Result<Arc<PackedB>, E> {
        let spare = {
            let mut entries = self.lock();
            if let Some((_, p)) = entries.live.iter().find(|(k, _)| *k == key) {
                return Ok(p.clone());
            }
            entries.spare.pop()
        };
        // Packed outside the lock: products on other threads reading other
        // copies of this buffer go on meanwhile.
        let packed = pack(spare)?;
        let mut entries = self.lock();
        if let Some((_, p)) = entries.live.iter().find(|(k, _)| *k == key) {
            // Another thread packed it first (executors side by side on one
            // store): keep this memory for the next packing rather than
            // allocate (and fault in) a fresh copy every step.
            let p = p.clone();
            if entries.spare.len() < MAX_ENTRIES {
                entries.spare.push(packed);
            }
            return Ok(p);
        }
        let packed = Arc::new(packed);
        if entries.live.len() == MAX_ENTRIES {
            entries.live.remove(0);
        }
        entries.live.push((key, packed.clone()));
        Ok(packed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes held by the live packed copies (not the spare memory).
    pub(crate) fn bytes(&self) -> usize {
        self.lock().live.iter().map(|(_, p)| p.bytes()).sum()
    }
}
