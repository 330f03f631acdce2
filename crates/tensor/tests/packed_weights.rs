//! Weights packed once for the CPU's products (`cpu/packed.rs`): a marked
//! weight gives the products' results (against an f64 reference, every
//! ISA, both ways a weight is read), keeps its packed copies between
//! products, and drops them on every write, in place or copy-on-write, so
//! a product never reads values the weight no longer has.

mod common;

use std::sync::Once;

use common::vals;
use sheaf_kernels_cpu::{CpuKernels, Isa};
use sheaf_tensor::prelude::*;
use sheaf_tensor::{CpuBackend, Tensor, Transpose};

/// Every test first fixes the GEMM crossovers (`SHEAF_GEMM_CROSSOVER=
/// fixed`, under which the SIMD kernels always pack a weight), so that the
/// packed path runs whatever a timing on a busy machine would decide. The
/// `Once` sets it before any test reads it.
fn fixed_crossovers() {
    static SET: Once = Once::new();
    SET.call_once(|| std::env::set_var("SHEAF_GEMM_CROSSOVER", "fixed"));
}

const M: usize = 40;
const IN: usize = 37;
const OUT: usize = 53;

/// `x W^T` (x `[M, IN]`) or, with `tb` No, `x W` (x `[M, OUT]`), through
/// `be`, checked against f64 on `w_now`; returns the result.
fn product(be: &CpuBackend, x: &Tensor, w: &Tensor, w_now: &[f32], tb: Transpose) -> Vec<f32> {
    let (k, n) = match tb {
        Transpose::Yes => (IN, OUT),
        Transpose::No => (OUT, IN),
    };
    let mut out = Tensor::from_vec(vec![f32::NAN; M * n], [M, n]).unwrap();
    be.matmul(x, Transpose::No, w, tb, 1.0, 0.0, out.view_mut().unwrap())
        .unwrap();
    let got = out.to_vec::<f32>().unwrap();
    let xv = x.to_vec::<f32>().unwrap();
    for i in 0..M {
        for j in 0..n {
            let (mut s, mut mag) = (0.0f64, 0.0f64);
            for p in 0..k {
                let b = match tb {
                    Transpose::Yes => w_now[j * IN + p],
                    Transpose::No => w_now[p * IN + j],
                };
                let t = f64::from(xv[i * k + p]) * f64::from(b);
                s += t;
                mag += t.abs();
            }
            let tol = 2.0 * (k + 2) as f64 * f64::from(f32::EPSILON) * mag + 1e-30;
            let err = (f64::from(got[i * n + j]) - s).abs();
            assert!(err <= tol, "{tb:?} [{i},{j}]: {} vs {s}", got[i * n + j]);
        }
    }
    got
}

#[test]
fn marked_weights_are_packed_once_and_dropped_on_write() {
    fixed_crossovers();
    for isa in Isa::supported() {
        let be = CpuBackend::with_kernels(CpuKernels::with_isa(isa).unwrap());
        let packs = CpuKernels::with_isa(isa).unwrap().packs_b(M, OUT, IN);
        assert_eq!(packs, isa != Isa::Scalar, "{isa:?}");
        let mut wv = vals(OUT * IN, 1);
        let mut w = Tensor::from_vec(wv.clone(), [OUT, IN]).unwrap();
        w.mark_as_weight();
        let x_t = Tensor::from_vec(vals(M * IN, 2), [M, IN]).unwrap();
        let x_n = Tensor::from_vec(vals(M * OUT, 3), [M, OUT]).unwrap();
        assert_eq!(w.packed_bytes(), 0, "{isa:?}");

        let first = product(&be, &x_t, &w, &wv, Transpose::Yes);
        product(&be, &x_n, &w, &wv, Transpose::No);
        let held = w.packed_bytes();
        assert_eq!(held > 0, packs, "{isa:?}: packed {held} bytes");
        // Again: the same copies, bit for bit the same result.
        assert_eq!(product(&be, &x_t, &w, &wv, Transpose::Yes), first);
        assert_eq!(w.packed_bytes(), held, "{isa:?}: packed again");

        // A write in place drops the copies; the products see the new values.
        w.as_mut_slice::<f32>().unwrap()[5] = 3.0;
        wv[5] = 3.0;
        assert_eq!(w.packed_bytes(), 0, "{isa:?}");
        product(&be, &x_t, &w, &wv, Transpose::Yes);
        product(&be, &x_n, &w, &wv, Transpose::No);

        // Copy on write: the clone keeps the old values and its copies, the
        // written tensor gets a fresh buffer, still marked.
        let old = w.clone();
        let old_v = wv.clone();
        w.as_mut_slice::<f32>().unwrap()[OUT * IN - 1] = -2.0;
        wv[OUT * IN - 1] = -2.0;
        assert!(!w.shares_storage(&old));
        assert_eq!(old.packed_bytes() > 0, packs, "{isa:?}");
        assert_eq!(w.packed_bytes(), 0, "{isa:?}");
        product(&be, &x_t, &old, &old_v, Transpose::Yes);
        product(&be, &x_t, &w, &wv, Transpose::Yes);
        product(&be, &x_n, &w, &wv, Transpose::No);
        assert_eq!(w.packed_bytes() > 0, packs, "{isa:?}: the copy is marked");

        // Views of part of the weight are packed as those views: two of one
        // shape at different offsets get different copies.
        let x_sq = Tensor::from_vec(vals(M * IN, 4), [M, IN]).unwrap();
        let xv = x_sq.to_vec::<f32>().unwrap();
        for first in [0, 1, 0] {
            let rows = w.rows(first..first + IN).unwrap();
            let block = &wv[first * IN..(first + IN) * IN];
            let mut out = Tensor::from_vec(vec![0.0; M * IN], [M, IN]).unwrap();
            be.matmul(
                &x_sq,
                Transpose::No,
                &rows,
                Transpose::No,
                1.0,
                0.0,
                out.view_mut().unwrap(),
            )
            .unwrap();
            let got = out.to_vec::<f32>().unwrap();
            for i in 0..M {
                for j in 0..IN {
                    let s: f64 = (0..IN)
                        .map(|p| f64::from(xv[i * IN + p]) * f64::from(block[p * IN + j]))
                        .sum();
                    assert!(
                        (f64::from(got[i * IN + j]) - s).abs() < 1e-4,
                        "{isa:?} view from row {first} [{i},{j}]"
                    );
                }
            }
        }

        // A buffer reused for something else forgets its copies and mark.
        assert_eq!(w.packed_bytes() > 0, packs, "{isa:?}");
        let reused = w.reuse([OUT, IN], sheaf_tensor::DType::F32).unwrap();
        assert_eq!(reused.packed_bytes(), 0, "{isa:?}");
        product(&be, &x_t, &reused, &wv, Transpose::Yes);
        assert_eq!(reused.packed_bytes(), 0, "{isa:?}: still marked");
    }
}

#[test]
fn unmarked_tensors_are_never_packed() {
    fixed_crossovers();
    let be = CpuBackend::with_kernels(CpuKernels::new());
    let wv = vals(OUT * IN, 5);
    let w = Tensor::from_vec(wv.clone(), [OUT, IN]).unwrap();
    let x = Tensor::from_vec(vals(M * IN, 6), [M, IN]).unwrap();
    product(&be, &x, &w, &wv, Transpose::Yes);
    assert_eq!(w.packed_bytes(), 0);
}

/// `matmul_bias` (an affine layer's forward) with the weight packed (the
/// bias added by the tiles) and not (broadcast first), both ways the weight
/// is read; a bias of the wrong shape is an error naming it.
#[test]
fn matmul_bias_packed_or_not() {
    fixed_crossovers();
    for isa in Isa::supported() {
        let be = CpuBackend::with_kernels(CpuKernels::with_isa(isa).unwrap());
        let wv = vals(OUT * IN, 7);
        for marked in [false, true] {
            let w = Tensor::from_vec(wv.clone(), [OUT, IN]).unwrap();
            if marked {
                w.mark_as_weight();
            }
            for tb in [Transpose::Yes, Transpose::No] {
                let (k, n) = match tb {
                    Transpose::Yes => (IN, OUT),
                    Transpose::No => (OUT, IN),
                };
                let x = Tensor::from_vec(vals(M * k, 8), [M, k]).unwrap();
                let bv = vals(n, 9);
                let bias = Tensor::from_vec(bv.clone(), [n]).unwrap();
                let mut out = Tensor::from_vec(vec![f32::NAN; M * n], [M, n]).unwrap();
                be.matmul_bias(&x, Transpose::No, &w, tb, &bias, out.view_mut().unwrap())
                    .unwrap();
                let mut plain = Tensor::from_vec(vec![0.0; M * n], [M, n]).unwrap();
                let got = out.to_vec::<f32>().unwrap();
                let product = product(&be, &x, &w, &wv, tb);
                for (i, (&g, &p)) in got.iter().zip(&product).enumerate() {
                    let want = p + bv[i % n];
                    assert!(
                        (g - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{isa:?} marked {marked} {tb:?} [{i}]: {g} vs {want}"
                    );
                }
                let wrong = Tensor::from_vec(vec![0.0; n + 1], [n + 1]).unwrap();
                let err = be
                    .matmul_bias(&x, Transpose::No, &w, tb, &wrong, plain.view_mut().unwrap())
                    .unwrap_err();
                assert!(err.to_string().contains("row"), "{err}");
            }
        }
    }
}

/// Threads multiplying by one weight at once, before any packed copy
/// exists: each gets the right product, and one copy per key is kept.
#[test]
fn concurrent_first_products_pack_one_copy() {
    fixed_crossovers();
    let be = CpuBackend::with_kernels(CpuKernels::new());
    let packs = CpuKernels::new().isa() != Isa::Scalar;
    for round in 0..4 {
        let wv = vals(OUT * IN, 20 + round);
        let w = Tensor::from_vec(wv.clone(), [OUT, IN]).unwrap();
        w.mark_as_weight();
        let x = Tensor::from_vec(vals(M * IN, 30 + round), [M, IN]).unwrap();
        let results: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|_| s.spawn(|| product(&be, &x, &w, &wv, Transpose::Yes)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(results.windows(2).all(|r| r[0] == r[1]), "round {round}");
        let one = w.packed_bytes();
        assert_eq!(one > 0, packs);
        product(&be, &x, &w, &wv, Transpose::Yes);
        assert_eq!(w.packed_bytes(), one, "round {round}: one copy per key");
    }
}
