//! Where the hand-written register tiles stop beating matrixmultiply,
//! measured once per process on the machine it runs on.
//!
//! The crossovers depend on the CPU and on the tiles (on an AVX-512 Xeon
//! matrixmultiply wins over the AVX2 tiles from 16-24 rows on, over the
//! AVX-512 tiles from 128-192 with B as stored; on the Zen 3 the AVX2 tiles
//! win up to 64), so they are not constants: the first product of a handle
//! of each ISA that could take either path times the tiles that handle
//! runs against matrixmultiply, for each transpose case, at `m x 300 x 450`
//! (the size class of the tree models' weights) for `m` in 16, 24, 32, 48,
//! 64, 96, 128, 192, 256, and keeps the largest `m` up to which the tiles
//! are at least 5% faster. About 40 ms, once per ISA (on the Xeon: AVX2
//! nn 24, tn 16, bt 16; AVX-512 nn 128-192, tn 64-128, bt 16-24). It also
//! times the tiles on a packed B against matrixmultiply at 256 rows: the
//! packed path ([`CpuKernels::sgemm_packed`]) is taken only where it wins.
//! `SHEAF_GEMM_CROSSOVER=fixed` skips it and uses the limits measured on
//! the Zen 3 for both (results then do not vary in their last bits from
//! process to process with the timing).

use std::sync::OnceLock;
use std::time::Instant;

use super::{
    matrixmultiply_leaf, Gemm, Transpose, SMALL_M, WIDE_ROWS_BT, WIDE_ROWS_NN, WIDE_ROWS_TN,
};
use crate::{CpuKernels, Isa};

/// Row limits of the register tiles per transpose case (B as stored, A
/// transposed, B transposed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossovers {
    pub nn: usize,
    pub tn: usize,
    pub bt: usize,
    /// Whether the tiles on a packed B ([`CpuKernels::sgemm_packed`]) are
    /// faster than matrixmultiply at `256 x 300 x 450` (packing not
    /// counted: it is paid once per weight and step).
    pub packed: bool,
}

impl Crossovers {
    /// The limits measured on the 2-core Zen 3 (see the constants).
    pub const FIXED: Crossovers = Crossovers {
        nn: WIDE_ROWS_NN,
        tn: WIDE_ROWS_TN,
        bt: WIDE_ROWS_BT,
        packed: true,
    };
}

const CANDIDATES: [usize; 9] = [16, 24, 32, 48, 64, 96, 128, 192, 256];
const K: usize = 300;
const N: usize = 450;

/// This process's crossovers for the tiles a handle of ISA `isa` runs,
/// measured on first use (once per ISA: the AVX2 and the AVX-512 tiles
/// cross over at different rows).
pub(crate) fn get(isa: Isa) -> Crossovers {
    static AVX2: OnceLock<Crossovers> = OnceLock::new();
    static AVX512: OnceLock<Crossovers> = OnceLock::new();
    let cal = match isa {
        Isa::Avx2 => &AVX2,
        Isa::Avx512 => &AVX512,
        // The scalar path has no wide tiles; the limits are unused.
        _ => return Crossovers::FIXED,
    };
    *cal.get_or_init(|| match std::env::var("SHEAF_GEMM_CROSSOVER").as_deref() {
        Ok("fixed") => Crossovers::FIXED,
        _ => measure(isa),
    })
}

fn measure(isa: Isa) -> Crossovers {
    let Some(k) = CpuKernels::with_isa(isa) else {
        return Crossovers::FIXED; // unsupported here; the limits are unused
    };
    let a = vec![0.5f32; CANDIDATES[CANDIDATES.len() - 1] * K];
    let b = vec![0.25f32; K * N];
    let mut c = vec![0.0f32; CANDIDATES[CANDIDATES.len() - 1] * N];
    let mut limit = |ta: Transpose, tb: Transpose| {
        let mut best = SMALL_M;
        for &m in &CANDIDATES {
            let g = Gemm {
                ta,
                tb,
                m,
                n: N,
                k: K,
                alpha: 1.0,
                beta: 0.0,
                lda: if ta == Transpose::No { K } else { m },
                ldb: if tb == Transpose::No { N } else { K },
                ldc: N,
            };
            let tiles = best_of(|| k.small(&g, &a, &b, &mut c));
            let library = best_of(|| {
                // The shapes are valid by construction: it cannot fail.
                let _ = matrixmultiply_leaf(&g, &a, &b, &mut c);
            });
            // A 5% margin: where the two are level (a flat stretch, as on
            // Zen 4 from 32 to 256 rows) timing noise must not decide, and
            // matrixmultiply, the better-tuned kernel, keeps it.
            if tiles > 0.95 * library {
                break;
            }
            best = m;
        }
        best
    };
    let (nn, tn, bt) = (
        limit(Transpose::No, Transpose::No),
        limit(Transpose::Yes, Transpose::No),
        limit(Transpose::No, Transpose::Yes),
    );
    let packed = {
        let m = CANDIDATES[CANDIDATES.len() - 1];
        let g = Gemm {
            ta: Transpose::No,
            tb: Transpose::No,
            m,
            n: N,
            k: K,
            alpha: 1.0,
            beta: 0.0,
            lda: K,
            ldb: N,
            ldc: N,
        };
        match k.pack_b(Transpose::No, K, N, &b, N) {
            Ok(pb) => {
                // One thread, as matrixmultiply_leaf.
                let geom = super::SmallGeom {
                    m,
                    n: N,
                    k: K,
                    alpha: 1.0,
                    beta: 0.0,
                    rsa: K,
                    csa: 1,
                    ldb: pb.width(),
                    ldc: N,
                };
                let tiles = best_of(|| k.packed_leaf(&geom, &a, &pb, &mut c, None));
                let library = best_of(|| {
                    let _ = matrixmultiply_leaf(&g, &a, &b, &mut c);
                });
                tiles < library
            }
            Err(_) => false,
        }
    };
    Crossovers { nn, tn, bt, packed }
}

/// The fastest of five timed calls, after one untimed.
fn best_of(mut f: impl FnMut()) -> f64 {
    f();
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}
