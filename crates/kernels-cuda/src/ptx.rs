//! The committed PTX of `kernels/*.cu` and the hashes that keep it fresh.
//!
//! `cargo xtask build-kernels` compiles each source with nvcc
//! (`-arch=compute_80`, so the driver JIT-compiles it for Ampere, Hopper and
//! later) and writes `ptx/<name>.ptx` with [`HASH_PREFIX`] and
//! [`source_hash`] on its first line. A test recomputes the hashes: a source
//! changed without rebuilding its PTX fails it.

/// One kernel file: its CUDA C source and its compiled PTX.
#[derive(Debug, Clone, Copy)]
pub struct KernelFile {
    /// File stem, e.g. `"cells"`.
    pub name: &'static str,
    /// The CUDA C source (`kernels/<name>.cu`).
    pub source: &'static str,
    /// The PTX built from it (`ptx/<name>.ptx`).
    pub ptx: &'static str,
}

/// `kernels/common.cuh`, included by every source (part of each hash).
pub const COMMON: &str = include_str!("../kernels/common.cuh");

macro_rules! kernel_files {
    ($($name:literal),*) => {
        /// Every kernel file, in load order.
        pub const FILES: &[KernelFile] = &[$(KernelFile {
            name: $name,
            source: include_str!(concat!("../kernels/", $name, ".cu")),
            ptx: include_str!(concat!("../ptx/", $name, ".ptx")),
        }),*];
    };
}

kernel_files!("elementwise", "rows", "softmax", "cells", "optim", "gemm");

/// First line of every PTX file, before the hash.
pub const HASH_PREFIX: &str = "// sheaf-source-hash: ";

/// FNV-1a (64 bit) of `common.cuh` followed by `source`, in hex: what the
/// PTX built from `source` records. Not cryptographic: it only has to
/// notice an edit.
pub fn source_hash(source: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in COMMON.bytes().chain(source.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The hash a PTX file records, if its first line has one.
pub fn recorded_hash(ptx: &str) -> Option<&str> {
    ptx.lines().next()?.strip_prefix(HASH_PREFIX).map(str::trim)
}
