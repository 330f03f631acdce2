//! GPU-vs-CPU parity of cuBLAS sgemm (all transposes, strided-batched),
//! the error paths and users' NVRTC kernels.
//!
//! Each test opens the device first and returns early (printing why) when
//! there is none. Tolerances are documented in `common`.

#![allow(clippy::too_many_arguments, clippy::needless_range_loop)]

mod common;

use common::prelude::*;

// ---------------------------------------------------------------- sgemm
//
// Bound per element of C: GEMM_RTOL * sqrt(k) * (|alpha| sum_p |A_ip B_pj|
// + |beta C0_ij|). A dot product of k terms in any order (cuBLAS tiles and
// may split k) errs by about sqrt(k) eps times the sum of the terms'
// magnitudes for random rounding; 1e-5 leaves ~80x margin over eps while a
// wrong operand, transpose or leading dimension changes elements by O(1)
// of their magnitude. Elements of C outside the m x n product (padding
// between rows, gaps between batches) must stay bit-unchanged.

const GEMM_RTOL: f32 = 1e-5;

/// A row-major operand: stored `rows x cols` with leading dimension
/// `ld = cols + pad` (the padding is random too, and must not be read).
struct Mat {
    data: Vec<f32>,
    ld: usize,
}

impl Mat {
    fn random(rng: &mut Rng, rows: usize, cols: usize, pad: usize) -> Mat {
        let ld = cols + pad;
        Mat {
            data: rng.vec(rows * ld, -1.0, 1.0),
            ld,
        }
    }
}

/// `op(X)[i, j]` of a stored matrix starting at `off`.
fn at(x: &[f32], off: usize, ld: usize, transposed: bool, i: usize, j: usize) -> f32 {
    if transposed {
        x[off + j * ld + i]
    } else {
        x[off + i * ld + j]
    }
}

fn tr(t: bool) -> Transpose {
    if t {
        Transpose::Yes
    } else {
        Transpose::No
    }
}

/// The bound of every element of a C buffer: `Some(magnitude)` for the
/// product's elements (one product at `c_off` with the operands at `a_off`,
/// `b_off`), `None` (exact) elsewhere; fills `bounds`.
#[allow(clippy::type_complexity)]
fn gemm_magnitudes(
    bounds: &mut [Option<f32>],
    (m, n, kk): (usize, usize, usize),
    alpha: f32,
    (a, a_off, lda, ta): (&[f32], usize, usize, bool),
    (b, b_off, ldb, tb): (&[f32], usize, usize, bool),
    beta: f32,
    (c0, c_off, ldc): (&[f32], usize, usize),
) {
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..kk {
                let x = at(a, a_off, lda, ta, i, p) * at(b, b_off, ldb, tb, p, j);
                s += f64::from(x.abs());
            }
            let e = c_off + i * ldc + j;
            let mag = f64::from(alpha.abs()) * s + f64::from((beta * c0[e]).abs());
            bounds[e] = Some(GEMM_RTOL * (kk as f32).sqrt() * mag as f32);
        }
    }
}

fn assert_gemm(what: &str, gpu: &[f32], cpu: &[f32], bounds: &[Option<f32>]) {
    assert_within(what, gpu, cpu, |i, _| bounds[i].unwrap_or(0.0));
}

#[test]
fn sgemm_matches_cpu() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(35);
    // All but the last two run on the tiled kernel (at most
    // `TILED_MAX_MNK` multiply-adds and `TILED_MAX_KN` elements of op(B),
    // tiles of 64 x 64 with ragged edges); the last two on cuBLAS.
    let shapes = [
        (1, 1, 1),
        (5, 3, 7),
        (17, 33, 65),
        (64, 5, 300),
        (130, 70, 257),
        (256, 750, 300),
        (300, 520, 512),
        (2, 1030, 1100),
    ];
    const { assert!(256 * 750 * 300 <= sheaf_kernels_cuda::TILED_MAX_MNK) };
    const { assert!(300 * 520 * 512 > sheaf_kernels_cuda::TILED_MAX_MNK) };
    const { assert!(1100 * 1030 > sheaf_kernels_cuda::TILED_MAX_KN) };
    for (m, n, kk) in shapes {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for (alpha, beta) in [(1.0f32, 0.0f32), (0.75, -0.5)] {
                let what = format!("sgemm {m}x{n}x{kk} ta={ta} tb={tb} alpha={alpha} beta={beta}");
                let (ar, ac) = if ta { (kk, m) } else { (m, kk) };
                let (br, bc) = if tb { (n, kk) } else { (kk, n) };
                let a = Mat::random(&mut rng, ar, ac, 3);
                let b = Mat::random(&mut rng, br, bc, 5);
                let ldc = n + 2;
                let c0 = rng.vec(m * ldc, -1.0, 1.0);
                let mut want = c0.clone();
                cpu.sgemm(
                    tr(ta),
                    tr(tb),
                    m,
                    n,
                    kk,
                    alpha,
                    &a.data,
                    a.ld,
                    &b.data,
                    b.ld,
                    beta,
                    &mut want,
                    ldc,
                )?;
                let (adev, bdev) = (up(&k, &a.data)?, up(&k, &b.data)?);
                let (av, bv) = (adev.as_view(), bdev.as_view());
                let mut cd = up(&k, &c0)?;
                k.sgemm(
                    m,
                    n,
                    kk,
                    alpha,
                    Operand {
                        data: &av,
                        transposed: ta,
                        ld: a.ld,
                    },
                    Operand {
                        data: &bv,
                        transposed: tb,
                        ld: b.ld,
                    },
                    beta,
                    &mut cd.as_view_mut(),
                    ldc,
                )?;
                let mut bounds = vec![None; c0.len()];
                gemm_magnitudes(
                    &mut bounds,
                    (m, n, kk),
                    alpha,
                    (&a.data, 0, a.ld, ta),
                    (&b.data, 0, b.ld, tb),
                    beta,
                    (&c0, 0, ldc),
                );
                assert_gemm(&what, &down(&k, &cd)?, &want, &bounds);
            }
        }
    }
    Ok(())
}

/// `batch` products at strides with gaps between them, against a loop of
/// CPU sgemms at the same offsets.
#[test]
fn sgemm_strided_batched_matches_cpu_loop() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let cpu = CpuKernels::new();
    let mut rng = Rng::new(36);
    let batch = 3;
    for (m, n, kk) in [(9, 7, 11), (33, 17, 40)] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (alpha, beta) = (0.5f32, 1.25f32);
            let what = format!("sgemm_strided_batched {batch}x{m}x{n}x{kk} ta={ta} tb={tb}");
            let (ar, ac) = if ta { (kk, m) } else { (m, kk) };
            let (br, bc) = if tb { (n, kk) } else { (kk, n) };
            let (lda, ldb, ldc) = (ac + 2, bc + 1, n + 3);
            let (sa, sb, sc) = (ar * lda + 5, br * ldb + 2, m * ldc + 7);
            let a = rng.vec(sa * (batch - 1) + ar * lda, -1.0, 1.0);
            let b = rng.vec(sb * (batch - 1) + br * ldb, -1.0, 1.0);
            let c0 = rng.vec(sc * (batch - 1) + m * ldc, -1.0, 1.0);
            let mut want = c0.clone();
            let mut bounds = vec![None; c0.len()];
            for i in 0..batch {
                cpu.sgemm(
                    tr(ta),
                    tr(tb),
                    m,
                    n,
                    kk,
                    alpha,
                    &a[i * sa..],
                    lda,
                    &b[i * sb..],
                    ldb,
                    beta,
                    &mut want[i * sc..],
                    ldc,
                )?;
                gemm_magnitudes(
                    &mut bounds,
                    (m, n, kk),
                    alpha,
                    (&a, i * sa, lda, ta),
                    (&b, i * sb, ldb, tb),
                    beta,
                    (&c0, i * sc, ldc),
                );
            }
            let (adev, bdev) = (up(&k, &a)?, up(&k, &b)?);
            let (av, bv) = (adev.as_view(), bdev.as_view());
            let mut cd = up(&k, &c0)?;
            k.sgemm_strided_batched(
                batch,
                m,
                n,
                kk,
                alpha,
                (
                    Operand {
                        data: &av,
                        transposed: ta,
                        ld: lda,
                    },
                    sa,
                ),
                (
                    Operand {
                        data: &bv,
                        transposed: tb,
                        ld: ldb,
                    },
                    sb,
                ),
                beta,
                (&mut cd.as_view_mut(), sc, ldc),
            )?;
            assert_gemm(&what, &down(&k, &cd)?, &want, &bounds);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- errors

/// An index VALUE out of range is found on the device, reported by the
/// next check naming the kernel, and cleared: the check after is clean.
/// In-range positions are still gathered.
#[test]
fn out_of_range_gather_index_is_reported_by_the_next_check() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let src: Vec<f32> = (0..12).map(|v| v as f32).collect(); // 4 rows x 3
    let srcd = up(&k, &src)?;
    let idx = k.upload(&[2u32, 9, 0])?;
    let mut dst = k.alloc_zeros::<f32>(9)?;
    k.gather_rows(&srcd.as_view(), 3, &idx.as_view(), &mut dst.as_view_mut())?;
    match k.check() {
        Err(CudaError::Index {
            kernel,
            index,
            position,
            bound,
        }) => {
            assert_eq!(kernel, "gather_rows");
            assert_eq!((index, position, bound), (9, 1, 4));
        }
        other => panic!("expected CudaError::Index from gather_rows, got {other:?}"),
    }
    k.check()?;
    let got = down(&k, &dst)?; // a clean download too
    assert_bits_eq("gathered rows", &got[..3], &src[6..9]);
    assert_bits_eq("skipped row", &got[3..6], &[0.0; 3]);
    assert_bits_eq("gathered rows", &got[6..], &src[..3]);
    Ok(())
}

/// The same for scatter-add (both modes) and for an out-of-range label.
#[test]
fn out_of_range_scatter_index_and_label_are_reported() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let src = up(&k, &[1.0; 6])?;
    let idx = k.upload(&[1u32, 7])?;
    for deterministic in [false, true] {
        k.set_deterministic(deterministic);
        let mut dst = k.alloc_zeros::<f32>(9)?;
        k.scatter_add_rows(&src.as_view(), 3, &idx.as_view(), &mut dst.as_view_mut())?;
        match k.check() {
            Err(CudaError::Index {
                kernel,
                index,
                position,
                bound,
            }) => assert_eq!(
                (kernel, index, position, bound),
                ("scatter_add_rows", 7, 1, 3)
            ),
            other => panic!("expected CudaError::Index from scatter_add_rows, got {other:?}"),
        }
        k.check()?;
    }
    let x = up(&k, &[0.5; 8])?; // 2 rows x 4
    let labels = k.upload(&[3u32, 4])?;
    let mut probs = k.alloc_zeros::<f32>(8)?;
    let mut loss = k.alloc_zeros::<f32>(2)?;
    k.nll_log_softmax(
        &x.as_view(),
        4,
        &labels.as_view(),
        &mut probs.as_view_mut(),
        &mut loss.as_view_mut(),
    )?;
    match k.check() {
        Err(CudaError::Index {
            kernel,
            index,
            position,
            bound,
        }) => assert_eq!(
            (kernel, index, position, bound),
            ("nll_log_softmax", 4, 1, 4)
        ),
        other => panic!("expected CudaError::Index from nll_log_softmax, got {other:?}"),
    }
    k.check()?;
    Ok(())
}

/// A shape mismatch is found on the host: `Len`, and nothing launched.
#[test]
fn length_mismatch_is_len_before_any_launch() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let a = up(&k, &[1.0; 10])?;
    let b = up(&k, &[1.0; 9])?;
    let mut y = k.alloc_zeros::<f32>(10)?;
    let before = k.launches();
    let r = k.zip(Zip::Add, &a.as_view(), &b.as_view(), &mut y.as_view_mut());
    assert_eq!(k.launches(), before, "a launch (or copy) was issued");
    match r {
        Err(CudaError::Len {
            kernel,
            arg,
            got,
            expected,
        }) => assert_eq!((kernel, arg, got, expected), ("zip", "b", 9, 10)),
        other => panic!("expected CudaError::Len, got {other:?}"),
    }
    // b = 9 rows come from c_prev (H = 1): gates of 10 elements are not 9 x 4.
    let (mut c, mut h) = (k.alloc_zeros::<f32>(9)?, k.alloc_zeros::<f32>(9)?);
    let r = k.cell(
        "lstm_fwd",
        1,
        &[a.as_view(), b.as_view()],
        &mut [y.as_view_mut(), c.as_view_mut(), h.as_view_mut()],
    );
    assert!(
        matches!(
            r,
            Err(CudaError::Len {
                kernel: "lstm_fwd",
                arg: "gates",
                got: 10,
                expected: 36
            })
        ),
        "{r:?}"
    );
    k.check()?;
    Ok(())
}

/// An impossible allocation is `OutOfMemory` naming the bytes, not a panic.
#[test]
fn huge_allocation_is_out_of_memory() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let len = 1usize << 40;
    let Err(e) = k.alloc_zeros::<f32>(len) else {
        panic!("allocated 4 TiB on one device");
    };
    let msg = e.to_string();
    match e {
        CudaError::OutOfMemory { bytes, ordinal, .. } => {
            assert_eq!((bytes, ordinal), (len * 4, 0));
            assert!(msg.contains(&(len * 4).to_string()), "{msg}");
        }
        other => panic!("expected CudaError::OutOfMemory, got {other}"),
    }
    // The context is still usable.
    let x = up(&k, &[1.0, 2.0])?;
    assert_eq!(down(&k, &x)?, vec![1.0, 2.0]);
    Ok(())
}

// ---------------------------------------------------------------- user kernels

const SILU: &str = r#"
extern "C" __global__ void parity_silu(const float* x, float* y, unsigned long long n) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)blockDim.x * gridDim.x) {
        float v = x[i];
        y[i] = v / (1.0f + expf(-v));
    }
}
"#;

/// A user's kernel compiled by NVRTC, `y = x * sigmoid(x)`, against a CPU
/// loop with std's exp ([`TRANSC`]).
#[test]
fn user_kernel_silu_matches_cpu_loop() -> TestResult {
    let Some(k) = gpu() else { return Ok(()) };
    let kernel = UserKernel {
        name: "parity_silu",
        source: SILU,
    };
    let f = k.user_function(kernel)?;
    let _cached = k.user_function(kernel)?;
    let mut rng = Rng::new(37);
    for n in LENS {
        let x = rng.vec(n, -8.0, 8.0);
        let want: Vec<f32> = x.iter().map(|&v| v / (1.0 + (-v).exp())).collect();
        let xd = up(&k, &x)?;
        let mut yd = k.alloc_zeros::<f32>(n)?;
        let n64 = n as u64;
        {
            let (xv, mut yv) = (xd.as_view(), yd.as_view_mut());
            let mut launch = k.user_launch(&f);
            launch.arg(&xv).arg(&mut yv).arg(&n64);
            // SAFETY: parity_silu takes (const float*, float*, unsigned long
            // long), matching the three arguments pushed in order; both
            // slices hold n elements and the grid-stride loop stops at n.
            unsafe { launch.launch(k.launch_config(n)) }?;
        }
        assert_close(&format!("user silu n={n}"), &down(&k, &yd)?, &want, TRANSC);
    }
    Ok(())
}
