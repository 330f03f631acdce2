//! The x86-64 SSE control register (MXCSR): its flush-to-zero (FTZ, bit 15)
//! and denormals-are-zero (DAZ, bit 6) modes.

use std::arch::asm;

/// FTZ (bit 15) and DAZ (bit 6).
pub(crate) const FLUSH_BITS: u32 = (1 << 15) | (1 << 6);

/// The current thread's MXCSR.
pub(crate) fn read() -> u32 {
    let mut value: u32 = 0;
    // SAFETY: `stmxcsr` stores the 32-bit MXCSR to the given address, which
    // is a live, aligned, writable `u32` on this stack frame; SSE is part of
    // the x86-64 baseline, so the instruction always exists.
    unsafe {
        asm!("stmxcsr [{}]", in(reg) &mut value, options(nostack, preserves_flags));
    }
    value
}

/// Sets the current thread's MXCSR to `value`.
pub(crate) fn write(value: u32) {
    // Only the mode bits change: callers pass `read()` with FTZ / DAZ set or
    // cleared, never reserved bits (which would raise #GP).
    debug_assert_eq!(value & !0xFFFF, 0);
    // SAFETY: `ldmxcsr` loads MXCSR from a live, aligned `u32`; the value is
    // the register's own contents with only FTZ / DAZ changed, so no
    // reserved bit is set. It changes how this thread rounds subnormal
    // floats, which is the documented purpose of the caller.
    unsafe {
        asm!("ldmxcsr [{}]", in(reg) &value, options(nostack, preserves_flags));
    }
}
