//! The drivers of the small-row register tiles, shared by the AVX2 and
//! AVX-512 kernels (`avx2/gemm.rs`, `avx512/gemm.rs`): each ISA supplies
//! its tiles and their limits through [`TileSet`]; the drivers only cut C
//! into bands of rows and blocks of columns (or, with B transposed, of
//! rows of B) and call the tiles through function pointers, so they need
//! no target features themselves.

use crate::gemm::SmallGeom;

/// Where one tile reads and writes; pointers are at the tile's first element.
pub(crate) struct Tile {
    pub k: usize,
    pub a: *const f32,
    pub rsa: usize,
    pub csa: usize,
    pub b: *const f32,
    pub ldb: usize,
    pub c: *mut f32,
    pub ldc: usize,
    pub alpha: f32,
    pub beta: f32,
    /// A row added to every row of the tile's C after the product (the
    /// bias of an affine layer), read at the tile's columns; null for none.
    /// Only B-not-transposed tiles take one.
    pub bias: *const f32,
    /// Lanes (1..=`TileSet::W`) of the last vector (B-not-transposed tiles
    /// whose last vector is partial) or of the last k step (B-transposed
    /// tiles) that exist.
    pub lanes: usize,
}

pub(crate) type TileFn = unsafe fn(&Tile);

/// One ISA's tiles and their limits.
pub(crate) trait TileSet {
    /// Lanes per vector.
    const W: usize;
    /// Most rows per B-not-transposed tile, and vectors per tile by rows.
    const BN_RMAX: usize;
    const BN_VMAX: &'static [usize];
    /// Rows of B per pass of the B-not-transposed driver (later passes add
    /// to C): a column block then spans BN_KC rows (pages), which the TLB
    /// still holds when the next column block reads the same rows.
    const BN_KC: usize;
    /// Most rows per B-transposed tile, and rows of B per tile by rows.
    const BT_RMAX: usize;
    const BT_CMAX: &'static [usize];
    /// The R x V B-not-transposed tile (masked: its last vector partial).
    fn bn_tile(r: usize, v: usize, masked: bool) -> Option<TileFn>;
    /// The R x C B-transposed tile.
    fn bt_tile(r: usize, c: usize) -> Option<TileFn>;
    /// The 1 x 1 tiles (masked, and B transposed), which always exist.
    const BN_ONE: TileFn;
    const BT_ONE: TileFn;
}

/// Splits `len` items into `parts` runs whose lengths differ by at most one;
/// returns (start, length) of run `t`.
fn balanced(len: usize, parts: usize, t: usize) -> (usize, usize) {
    let (base, extra) = (len / parts, len % parts);
    (t * base + t.min(extra), base + usize::from(t < extra))
}

/// One table entry per tile shape the drivers can ask for.
macro_rules! tile_table {
    (masked $name:ident, $tile:ident, $($r:literal: [$($v:literal)*]),*) => {
        fn $name(r: usize, v: usize, masked: bool) -> Option<TileFn> {
            match (r, v, masked) {
                $($(
                    ($r, $v, false) => Some($tile::<$r, $v, false>),
                    ($r, $v, true) => Some($tile::<$r, $v, true>),
                )*)*
                _ => None,
            }
        }
    };
    (plain $name:ident, $tile:ident, $($r:literal: [$($v:literal)*]),*) => {
        fn $name(r: usize, c: usize) -> Option<TileFn> {
            match (r, c) {
                $($( ($r, $v) => Some($tile::<$r, $v>), )*)*
                _ => None,
            }
        }
    };
}
pub(crate) use tile_table;

/// C = alpha op(A) B + beta C (+ `bias` on every row) with B not
/// transposed (`B[p, j]` at `b[p * ldb + j]`), `op(A)[i, p]` at
/// `a[i * rsa + p * csa]`. With
/// `rows_outer`, each band of rows sweeps all columns (large m, small k: C
/// streams once); otherwise each column block meets every row band while its
/// slice of B is in L1 (few rows).
///
/// # Safety
/// The CPU supports the features of `T`'s tiles; `a` holds `(m-1) * rsa +
/// (k-1) * csa + 1` elements, `b` holds `(k-1) * ldb + n`, `c` holds `(m-1)
/// * ldc + n` (each when its dimensions are non-zero), `bias` at least `n`.
pub(crate) unsafe fn sgemm_bn<T: TileSet>(
    g: &SmallGeom,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    rows_outer: bool,
    bias: Option<&[f32]>,
) {
    let (m, n) = (g.m, g.n);
    if m == 0 || n == 0 {
        return;
    }
    let w = T::W;
    let nbands = m.div_ceil(T::BN_RMAX);
    let vmax = T::BN_VMAX[m.div_ceil(nbands)];
    let nvec = n.div_ceil(w);
    let nblocks = nvec.div_ceil(vmax);
    let tail = n % w;
    let lanes = if tail == 0 { w } else { tail };
    let (ap, bp, cp) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    let (outer, inner) = if rows_outer {
        (nbands, nblocks)
    } else {
        (nblocks, nbands)
    };

    // Blocks of BN_KC rows of B (see there); k == 0 still makes one pass,
    // which scales C by beta.
    for k0 in (0..g.k.max(1)).step_by(T::BN_KC) {
        let kb = T::BN_KC.min(g.k - k0);
        for o in 0..outer {
            for i in 0..inner {
                let (band, block) = if rows_outer { (o, i) } else { (i, o) };
                let (i0, rows) = balanced(m, nbands, band);
                let (v0, nv) = balanced(nvec, nblocks, block);
                let masked = tail != 0 && v0 + nv == nvec;
                let j0 = w * v0;
                let tile = Tile {
                    k: kb,
                    a: ap.wrapping_add(i0 * g.rsa + k0 * g.csa),
                    rsa: g.rsa,
                    csa: g.csa,
                    b: bp.wrapping_add(k0 * g.ldb + j0),
                    ldb: g.ldb,
                    c: cp.wrapping_add(i0 * g.ldc + j0),
                    ldc: g.ldc,
                    alpha: g.alpha,
                    // Later blocks add to what the first wrote.
                    beta: if k0 == 0 { g.beta } else { 1.0 },
                    bias: match bias {
                        Some(row) if k0 == 0 => row.as_ptr().wrapping_add(j0),
                        _ => std::ptr::null(),
                    },
                    lanes,
                };
                if let Some(f) = T::bn_tile(rows, nv, masked) {
                    // SAFETY: the tile covers rows i0..i0+rows < m of A and C,
                    // rows k0..k0+kb <= k of A and B, and columns j0..j0+w nv,
                    // cut to n by the mask when `masked` (the last block);
                    // the caller's lengths cover all of them.
                    unsafe { f(&tile) };
                } else {
                    // Unreachable (rows <= BN_RMAX, nv <= BN_VMAX[rows]); stay
                    // correct anyway, one row and one vector at a time.
                    for r in 0..rows {
                        for v in 0..nv {
                            let one = Tile {
                                a: tile.a.wrapping_add(r * g.rsa),
                                b: tile.b.wrapping_add(w * v),
                                c: tile.c.wrapping_add(r * g.ldc + w * v),
                                bias: match tile.bias.is_null() {
                                    true => tile.bias,
                                    false => tile.bias.wrapping_add(w * v),
                                },
                                lanes: (n - j0 - w * v).min(w),
                                ..tile
                            };
                            // SAFETY: row i0+r < m, lanes j0+w v.. below n.
                            unsafe { (T::BN_ONE)(&one) };
                        }
                    }
                }
            }
        }
    }
}

/// C = alpha A B^T + beta C with A rows contiguous along k (`A[i, p]` at
/// `a[i * rsa + p]`, `g.csa` ignored) and B transposed (`B[p, j]` at
/// `b[j * ldb + p]`).
///
/// # Safety
/// The CPU supports the features of `T`'s tiles; `a` holds `(m-1) * rsa +
/// k` elements, `b` holds `(n-1) * ldb + k`, `c` holds `(m-1) * ldc + n`
/// (each when its dimensions are non-zero).
pub(crate) unsafe fn sgemm_bt<T: TileSet>(g: &SmallGeom, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, n) = (g.m, g.n);
    if m == 0 || n == 0 {
        return;
    }
    let nbands = m.div_ceil(T::BT_RMAX);
    let cmax = T::BT_CMAX[m.div_ceil(nbands)];
    let nblocks = n.div_ceil(cmax);
    let tail = g.k % T::W;
    let lanes = if tail == 0 { T::W } else { tail };
    let (ap, bp, cp) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // Column blocks outside: the block's B rows stay in L1 for every band.
    for block in 0..nblocks {
        let (j0, cols) = balanced(n, nblocks, block);
        for band in 0..nbands {
            let (i0, rows) = balanced(m, nbands, band);
            let tile = Tile {
                k: g.k,
                a: ap.wrapping_add(i0 * g.rsa),
                rsa: g.rsa,
                csa: 1,
                b: bp.wrapping_add(j0 * g.ldb),
                ldb: g.ldb,
                c: cp.wrapping_add(i0 * g.ldc + j0),
                ldc: g.ldc,
                alpha: g.alpha,
                beta: g.beta,
                bias: std::ptr::null(),
                lanes,
            };
            if let Some(f) = T::bt_tile(rows, cols) {
                // SAFETY: the tile covers rows i0..i0+rows < m of A and C,
                // rows j0..j0+cols <= n of B and columns j0..j0+cols of C,
                // all within the lengths the caller guarantees.
                unsafe { f(&tile) };
            } else {
                // Unreachable (rows <= BT_RMAX, cols <= BT_CMAX[rows]); stay
                // correct.
                for r in 0..rows {
                    for j in 0..cols {
                        let one = Tile {
                            a: tile.a.wrapping_add(r * g.rsa),
                            b: tile.b.wrapping_add(j * g.ldb),
                            c: tile.c.wrapping_add(r * g.ldc + j),
                            ..tile
                        };
                        // SAFETY: row i0+r < m of A and C, row j0+j < n of B.
                        unsafe { (T::BT_ONE)(&one) };
                    }
                }
            }
        }
    }
}
