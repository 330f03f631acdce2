//! Products with a B packed once and reused: a weight that many products of
//! a step read unchanged (forward `x W^T`, backward `dy W`) is laid out
//! once in the column panels the register tiles read, instead of being
//! packed again by every product (matrixmultiply packs B per call: in the
//! W1 profile its packing was ~13% of its time, ~6% of a step).
//!
//! A panel holds `width` columns of op(B) for every row p, contiguous
//! (`k x width`, the last panel zero-padded): one tile row of B is one run
//! of `width` floats, so the tiles stream B in order. `width` is what the
//! tallest tile of the ISA covers (AVX-512: 8 rows x 3 vectors = 48
//! columns; AVX2: 6 rows x 2 vectors = 16), so each panel is one column
//! block of the shared tile driver, which cuts k into blocks of `BN_KC`
//! rows (a 48-wide block of 256 rows is 48 KiB, about L1).
//!
//! Measured on the 2-core Xeon (AVX-512), one thread, B hot, median of 8
//! alternating runs (GFLOP/s; matrixmultiply packs B in its call):
//!
//! | m x k x n     | tiles, B as stored | tiles, B packed | matrixmultiply |
//! |---------------|--------------------|-----------------|----------------|
//! | 128 x 300 x 750  | 169 | 173 | 151 |
//! | 512 x 300 x 750  | 161 | 169 | 162 |
//! | 1024 x 300 x 750 | 154 | 178 | 150 |
//! | 1024 x 750 x 300 | 155 | 157 | 158 |
//! | 512 x 300 x 450  | 161 | 175 | 156 |
//!
//! With B transposed (the forward `x W^T`) the tiles as stored take dot
//! products (77-92 GFLOP/s) and matrixmultiply packs the transpose; packed
//! once, the product runs as the B-as-stored case above.

use rayon::prelude::*;

use super::{
    scalar_bn, scale_rows, SmallGeom, Transpose, MIN_ROWS_PER_PART, PAR_MIN_WORK, SMALL_M,
    SMALL_N_BT,
};
#[cfg(target_arch = "x86_64")]
use crate::simd::avx2::gemm as avx2;
#[cfg(target_arch = "x86_64")]
use crate::simd::avx512::gemm as avx512;
use crate::{CpuKernels, Isa, KernelError, Result};

/// op(B), `k x n`, packed into column panels for one ISA's tiles
/// ([`CpuKernels::pack_b`]).
#[derive(Clone)]
pub struct PackedB {
    isa: Isa,
    /// How B was stored (the products are logged as such: `gemm_log`).
    tb: Transpose,
    k: usize,
    n: usize,
    width: usize,
    /// The panels start at `data[start]`, 64-byte aligned where the
    /// allocation allows (always, for a real allocator).
    data: Vec<f32>,
    start: usize,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedB")
            .field("isa", &self.isa)
            .field("tb", &self.tb)
            .field("k", &self.k)
            .field("n", &self.n)
            .field("width", &self.width)
            .finish()
    }
}

impl PackedB {
    /// Rows of op(B) (the inner dimension of the products).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns of op(B) (of the products' results).
    pub fn n(&self) -> usize {
        self.n
    }

    /// The ISA whose tiles the panels are laid out for.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Columns per panel (the row stride of a panel).
    pub(super) fn width(&self) -> usize {
        self.width
    }

    /// Bytes allocated.
    pub fn bytes(&self) -> usize {
        self.data.capacity() * 4
    }

    /// The panels, `n.div_ceil(width)` of `k x width` each.
    fn panels(&self) -> &[f32] {
        let len = self.n.div_ceil(self.width) * self.k * self.width;
        &self.data[self.start..self.start + len]
    }
}

/// Columns per panel for an ISA's tiles.
fn panel_width(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => 48,
        Isa::Avx2 => 16,
        Isa::Scalar => 16,
    }
}

impl CpuKernels {
    /// Whether a product of `m` rows with an op(B) of `k x n` runs faster
    /// with B packed ([`CpuKernels::sgemm_packed`]) than through
    /// [`CpuKernels::sgemm`], once the packing is paid: with SIMD tiles,
    /// more rows than the small path's (few rows read B in place at the
    /// same speed), B wider than the narrow B-transposed case, and where
    /// this machine's measurement found the packed tiles at least level
    /// with matrixmultiply (on an AVX-512 machine matrixmultiply beats the
    /// AVX2 tiles even packed).
    pub fn packs_b(&self, m: usize, n: usize, k: usize) -> bool {
        self.isa() != Isa::Scalar
            && m > SMALL_M
            && n > SMALL_N_BT
            && k > super::SMALL_K
            && super::crossover::get(self.isa()).packed
    }

    /// Packs op(B) (`k x n`; B stored `k x n` when `tb` is `No`, `n x k`
    /// when `Yes`, row stride `ldb`) into this handle's panels.
    ///
    /// # Errors
    /// As [`CpuKernels::sgemm`]'s for `b`; [`KernelError::Invalid`] if the
    /// panels cannot be allocated.
    pub fn pack_b(
        &self,
        tb: Transpose,
        k: usize,
        n: usize,
        b: &[f32],
        ldb: usize,
    ) -> Result<PackedB> {
        let mut packed = PackedB {
            isa: self.isa(),
            tb,
            k: 0,
            n: 0,
            width: panel_width(self.isa()),
            data: Vec::new(),
            start: 0,
        };
        self.repack_b(&mut packed, tb, k, n, b, ldb)?;
        Ok(packed)
    }

    /// [`CpuKernels::pack_b`] into `packed`, reusing its memory (a weight
    /// packed again after each update allocates nothing).
    ///
    /// # Errors
    /// As [`CpuKernels::pack_b`]; `packed` is then empty (`k = n = 0`).
    pub fn repack_b(
        &self,
        packed: &mut PackedB,
        tb: Transpose,
        k: usize,
        n: usize,
        b: &[f32],
        ldb: usize,
    ) -> Result<()> {
        let width = panel_width(self.isa());
        let mut data = std::mem::take(&mut packed.data);
        data.clear();
        *packed = PackedB {
            isa: self.isa(),
            tb,
            k: 0,
            n: 0,
            width,
            data,
            start: 0,
        };
        let stored = match tb {
            Transpose::No => (k, n),
            Transpose::Yes => (n, k),
        };
        super::check_operand("pack_b", "b", "ldb", stored, ldb, b.len())?;
        let no_memory = || KernelError::Invalid {
            kernel: "pack_b",
            what: format!("cannot allocate the panels of a {k} x {n} B"),
        };
        let panels = n.div_ceil(width);
        // 16 elements of slack to start the panels on a 64-byte boundary.
        let len = panels
            .checked_mul(k)
            .and_then(|x| x.checked_mul(width))
            .and_then(|x| x.checked_add(16))
            .ok_or_else(no_memory)?;
        let data = &mut packed.data;
        data.try_reserve_exact(len).map_err(|_| no_memory())?;
        // Written front to back within the reserved capacity (no
        // reallocation, so the alignment found here holds).
        let start = data.as_ptr().align_offset(64).min(16);
        data.resize(start, 0.0);
        for j0 in (0..n).step_by(width) {
            let w = width.min(n - j0);
            for p in 0..k {
                match tb {
                    Transpose::No => data.extend_from_slice(&b[p * ldb + j0..p * ldb + j0 + w]),
                    Transpose::Yes => data.extend((j0..j0 + w).map(|j| b[j * ldb + p])),
                }
                data.resize(data.len() + width - w, 0.0);
            }
        }
        data.resize(len, 0.0);
        (packed.k, packed.n, packed.start) = (k, n, start);
        Ok(())
    }

    /// C = alpha op(A) B + beta C (+ `bias`, a row of at least `n`
    /// elements, added to every row of C: an affine layer's bias, added in
    /// the tiles' last step instead of a pass of its own) with B packed by
    /// [`CpuKernels::pack_b`] of a handle of this ISA; op(A) is `m x k` (A
    /// stored `m x k` when `ta` is `No`, `k x m` when `Yes`, row stride
    /// `lda`), C `m x n` with row stride `ldc`. Splits into bands of rows
    /// over the current rayon pool when large. Semantics otherwise as
    /// [`CpuKernels::sgemm`].
    ///
    /// # Errors
    /// As [`CpuKernels::sgemm`]; [`KernelError::Invalid`] if `b` was
    /// packed for another ISA, [`KernelError::TooShort`] for a bias
    /// shorter than `n`.
    #[allow(clippy::too_many_arguments)]
    pub fn sgemm_packed(
        &self,
        ta: Transpose,
        m: usize,
        alpha: f32,
        a: &[f32],
        lda: usize,
        b: &PackedB,
        beta: f32,
        c: &mut [f32],
        ldc: usize,
        bias: Option<&[f32]>,
    ) -> Result<()> {
        if b.isa != self.isa() {
            return Err(KernelError::Invalid {
                kernel: "sgemm_packed",
                what: format!(
                    "B was packed for {:?}, this handle runs {:?}",
                    b.isa,
                    self.isa()
                ),
            });
        }
        let (k, n) = (b.k, b.n);
        let stored = match ta {
            Transpose::No => (m, k),
            Transpose::Yes => (k, m),
        };
        super::check_operand("sgemm_packed", "a", "lda", stored, lda, a.len())?;
        super::check_operand("sgemm_packed", "c", "ldc", (m, n), ldc, c.len())?;
        if let Some(row) = bias {
            KernelError::check_min_len("sgemm_packed", "bias", row.len(), n)?;
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        // Logged as the product asked for (B as stored), so that the
        // GEMM-only bound times the same product through `sgemm`.
        crate::gemm_log::note(ta, b.tb, m, n, k);
        if k == 0 {
            // No panels to walk: C = beta C (+ bias).
            scale_rows(c, m, n, ldc, beta, bias);
            return Ok(());
        }
        let (rsa, csa) = match ta {
            Transpose::No => (lda, 1),
            Transpose::Yes => (1, lda),
        };
        let geom = SmallGeom {
            m,
            n,
            k,
            alpha,
            beta,
            rsa,
            csa,
            ldb: b.width,
            ldc,
        };
        let work = m.saturating_mul(n).saturating_mul(k);
        let parts = rayon::current_num_threads().min(m / MIN_ROWS_PER_PART);
        if parts < 2 || !crate::parallel::should_split(work, PAR_MIN_WORK) {
            self.packed_leaf(&geom, a, b, c, bias);
            return Ok(());
        }
        let rows_per = m.div_ceil(parts);
        c.par_chunks_mut((rows_per * ldc).max(1))
            .enumerate()
            .for_each(|(t, c)| {
                let i0 = t * rows_per;
                if i0 < m {
                    let g = SmallGeom {
                        m: rows_per.min(m - i0),
                        ..geom
                    };
                    // i0 < m: row i0 of op(A) is in `a` (checked above).
                    self.packed_leaf(&g, &a[i0 * rsa..], b, c, bias);
                }
            });
        Ok(())
    }

    /// One band of rows on the calling thread, panel by panel. `g.ldb` is
    /// the panel width; a, c hold op(A) and C of `g` (checked by the
    /// caller: `(m-1) rsa + (k-1) csa + 1` and `(m-1) ldc + n` elements),
    /// `bias` at least n.
    pub(super) fn packed_leaf(
        &self,
        g: &SmallGeom,
        a: &[f32],
        b: &PackedB,
        c: &mut [f32],
        bias: Option<&[f32]>,
    ) {
        let (k, width) = (g.k, b.width);
        for (j, panel) in b.panels().chunks_exact((k * width).max(1)).enumerate() {
            let j0 = j * width;
            if j0 >= g.n {
                break;
            }
            let pg = SmallGeom {
                n: width.min(g.n - j0),
                ..*g
            };
            let c = &mut c[j0..];
            let bias = bias.map(|row| &row[j0..]);
            match self.isa() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: isa Avx512 proves AVX-512F+AVX2+FMA (and
                // `sgemm_packed` checked that `b` was packed for it); a holds
                // op(A) m x k with strides (rsa, csa) and c, from column j0,
                // holds (m-1) ldc + n - j0 >= (m-1) ldc + pg.n elements; the
                // panel holds k rows of `width` >= pg.n columns, row stride
                // `width` (pg.ldb); the bias, from j0, n - j0 >= pg.n.
                Isa::Avx512 => unsafe { avx512::sgemm_bn(&pg, a, panel, c, false, bias) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above, with isa Avx2 proving AVX2+FMA.
                Isa::Avx2 => unsafe { avx2::sgemm_bn(&pg, a, panel, c, false, bias) },
                _ => {
                    scalar_bn(&pg, a, panel, c);
                    if let Some(bias) = bias {
                        for row in c.chunks_mut(g.ldc.max(1)).take(g.m) {
                            let row = &mut row[..pg.n];
                            row.iter_mut().zip(bias).for_each(|(x, &b)| *x += b);
                        }
                    }
                }
            }
        }
    }
}
