//! The fused cells' row kernels (`crate::cells`) compiled with AVX-512F
//! (plus AVX2 + FMA) enabled, as `simd::avx2::cells` does for AVX2: the
//! scalar row code, inlined, so LLVM vectorises its elementwise loops
//! 16-wide; the activations inside go through the handle (`k.sigmoid_inplace`
//! ...) and so reach `simd::avx512::elementwise` for an `Avx512` handle.
//!
//! Only the row kernels whose AVX-512 build measured faster than their AVX2
//! build are built here; the others are the AVX2 builds, re-exported. Both
//! run the AVX-512 activations under an `Avx512` handle, which is where
//! the forward cells gain (1.2-1.5x over an `Avx2` handle).

use crate::cells as rows;
use crate::cells::{Rows, RowsMut};
use crate::CpuKernels;

/// Defines `unsafe fn name(k, hidden, ins, outs)`, the AVX-512 build of
/// `crate::cells::name`.
macro_rules! avx512_build {
    ($($name:ident($n:literal, $m:literal);)*) => {$(
        /// AVX-512 build of the row kernel of the same name in `crate::cells`.
        ///
        /// # Safety
        /// The CPU must support AVX-512F, AVX2 and FMA (the caller holds a
        /// `CpuKernels` with isa `Avx512`). The body is safe slice code: it
        /// places no requirement on the arguments.
        #[target_feature(enable = "avx512f,avx2,fma")]
        pub(crate) unsafe fn $name(k: &CpuKernels, hd: usize, ins: [Rows<'_>; $n], outs: [RowsMut<'_>; $m]) {
            rows::$name(k, hd, ins, outs)
        }
    )*};
}

// Measured on a 2-core Intel Xeon VM with AVX-512, one thread, H = 150,
// b = 1 / 8 / 32 / 200 / 437 rows, both builds under an `Avx512` handle
// timed in alternation (median of 31-61 runs): ns per call, AVX2 build ->
// AVX-512 build. The backward cells' arithmetic is a larger share of their
// time than the forward cells', whose time goes to the activations.
//   lstm_bwd     236 1596 5235 33745 124321  ->  210 1476 4699 30836 111326
//   leaf_bwd     205 1154 4394 25258  69424  ->  178  939 3776 22404  63031
//   node_bwd     266 1728 6399 46983 156618  ->  237 1581 5800 38645 150488
//   leaf_rd_bwd  196 1137 4197 26064  83608  ->  172  984 3876 24050  71505
//   node_rd_bwd  268 1668 6295 51475 163617  ->  246 1583 5878 42832 158657
//   gru_fwd      214 1442 5720 38340 101047  ->  194 1338 5316 34946  92019
//   leaf_rd_fwd  272 1937 8031 48688 133927  ->  276 1942 7782 47023 129545
//   node_rd_fwd  382 2807 10972 74466 190395 ->  377 2760 10769 72659 186329
avx512_build! {
    lstm_bwd_rows(5, 2);
    gru_fwd_rows(3, 2);
    leaf_bwd_rows(4, 1);
    node_bwd_rows(6, 3);
    leaf_rd_fwd_rows(2, 3);
    leaf_rd_bwd_rows(4, 1);
    node_rd_fwd_rows(4, 3);
    node_rd_bwd_rows(6, 3);
}

// Not faster as AVX-512 builds (same measurements): the AVX2 builds.
//   lstm_fwd  298 2090 8340 57413 153630   ->  302 2141 8506 58809 157826
//   leaf_fwd  250 1699 6876 42365  97690   ->  253 1695 6903 42387  97794
//   node_fwd  356 2894 11265 76274 215913  ->  359 2893 11245 77164 218156
// gru_bwd on a 2-core AMD EPYC Zen 4, H = 32, b = 1 / 8 / 20 / 32 / 200
// rows, best of 7 (`gru_isa`), ns per call: scalar 79 273 641 988 5765,
// AVX2 78 224 508 851 4906, AVX-512 84 246 547 867 4885.
pub(crate) use crate::simd::avx2::cells::{
    gru_bwd_rows, leaf_fwd_rows, lstm_fwd_rows, node_fwd_rows,
};
