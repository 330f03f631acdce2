//! The AVX-512 path against the AVX2 path, BIT FOR BIT. The AVX-512 vector
//! math evaluates the same polynomials with the same sequence of IEEE
//! operations (constants shared in `simd::math_consts`), the AVX-512
//! elementwise kernels the same per-lane arithmetic, and the cells' AVX-512
//! builds the same scalar row code, so every result must equal the AVX2
//! one exactly: stronger than the documented ulp bounds (exp 1, tanh 4,
//! sigmoid 2, log 1 ulp), which `elementwise.rs` checks for every ISA
//! against f64.
//!
//! Special values (NaN, +-inf, +-0, subnormals, the exp flush and overflow
//! boundaries, tanh's clamp at 9), a dense sweep and random bit patterns;
//! lengths around the 16-lane vector (masked remainders) at unaligned
//! offsets, with sentinels on both sides of the output. On a CPU without
//! AVX-512 every test prints why it is skipped and passes.

mod common;

use common::cells_states::{fill, Case, Kind};
use sheaf_kernels_cpu::{CpuKernels, Isa, KernelError};

type Res = Result<(), KernelError>;

/// `(AVX2, AVX-512)` handles, or `None` (with the reason printed).
fn pair(test: &str) -> Option<(CpuKernels, CpuKernels)> {
    let Some(k512) = CpuKernels::with_isa(Isa::Avx512) else {
        eprintln!("{test}: skipped, this CPU lacks AVX-512F, AVX2 or FMA (no Avx512 ISA)");
        return None;
    };
    let k2 = CpuKernels::with_isa(Isa::Avx2).expect("Avx512 support implies AVX2 + FMA");
    Some((k2, k512))
}

/// Asserts `a` and `b` equal bit for bit (NaN payloads included).
#[track_caller]
fn same_bits(a: &[f32], b: &[f32], what: &dyn Fn(usize) -> String) {
    assert_eq!(a.len(), b.len());
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!(
            "{}: avx2 {:e} ({:#010x}) != avx512 {:e} ({:#010x})",
            what(i),
            a[i],
            a[i].to_bits(),
            b[i],
            b[i].to_bits()
        );
    }
}

/// Special values, the neighbourhood (+-4 ulp) of every boundary of the
/// math functions, subnormals of both signs, a dense sweep of [-110, 110]
/// and random bit patterns.
fn inputs() -> Vec<f32> {
    let mut v = vec![
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7fc0_1234), // a NaN with a payload
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        f32::EPSILON,
    ];
    // exp's flush (-87.3365) and overflow (88.7228) points and clamp (89),
    // tanh's clamp (9), the sweep's end, and their negatives.
    for b in [87.336_54f32, 88.722_84, 89.0, 9.0, 9.01, 110.0] {
        for x in [b, -b] {
            v.extend((-4i32..=4).map(|d| f32::from_bits(x.to_bits().wrapping_add_signed(d))));
        }
    }
    for bits in (1..0x0080_0000u32).step_by(0x0001_0001) {
        v.extend([f32::from_bits(bits), -f32::from_bits(bits)]);
    }
    v.extend((-110_000..=110_000).map(|i| i as f32 * 1e-3));
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    v.extend((0..200_000).map(|_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        f32::from_bits((s >> 32) as u32)
    }));
    v
}

type Unary = fn(&CpuKernels, &[f32], &mut [f32]) -> Res;
type InPlace = fn(&CpuKernels, &mut [f32]) -> Res;

const UNARY: [(&str, Unary, InPlace); 5] = [
    ("exp", CpuKernels::exp, CpuKernels::exp_inplace),
    ("log", CpuKernels::log, CpuKernels::log_inplace),
    ("tanh", CpuKernels::tanh, CpuKernels::tanh_inplace),
    ("sigmoid", CpuKernels::sigmoid, CpuKernels::sigmoid_inplace),
    ("relu", CpuKernels::relu, CpuKernels::relu_inplace),
];

#[test]
fn math_matches_avx2_bit_for_bit() {
    let Some((k2, k512)) = pair("math_matches_avx2_bit_for_bit") else {
        return;
    };
    let x = inputs();
    for (name, f, f_in) in UNARY {
        let run = |k: &CpuKernels| {
            let mut y = vec![0.0; x.len()];
            f(k, &x, &mut y).unwrap();
            let mut z = x.clone();
            f_in(k, &mut z).unwrap();
            (y, z)
        };
        let ((y2, z2), (y5, z5)) = (run(&k2), run(&k512));
        same_bits(&y2, &y5, &|i| format!("{name}({:e})", x[i]));
        same_bits(&z2, &z5, &|i| format!("{name}_inplace({:e})", x[i]));
    }
}

/// Every length from 1 to 40 and a few longer ones, at offsets 0 to 3
/// (floats) into buffers with sentinels on both sides.
#[test]
fn remainders_and_offsets_match_avx2() {
    let Some((k2, k512)) = pair("remainders_and_offsets_match_avx2") else {
        return;
    };
    const SENTINEL: f32 = 1234.5;
    let x = inputs();
    let lens = (1..=40).chain([47, 63, 64, 65, 1000]);
    for len in lens {
        for off in 0..4 {
            // A window of the inputs that starts on the special values.
            let xs = &x[(len * 7 + off) % 64..][..len];
            let run = |k: &CpuKernels, f: &dyn Fn(&CpuKernels, &mut [f32])| {
                let mut buf = vec![SENTINEL; len + 8];
                f(k, &mut buf[off..off + len]);
                let untouched = |i: usize| i < off || i >= off + len;
                assert!(
                    (0..buf.len()).all(|i| !untouched(i) || buf[i].to_bits() == SENTINEL.to_bits()),
                    "{:?} wrote outside its slice (len {len}, offset {off})",
                    k.isa()
                );
                buf
            };
            for (name, f, f_in) in UNARY {
                let out = |k: &CpuKernels, y: &mut [f32]| f(k, xs, y).unwrap();
                let inp = |k: &CpuKernels, y: &mut [f32]| {
                    y.copy_from_slice(xs);
                    f_in(k, y).unwrap()
                };
                let what = |i: usize| format!("{name} len {len} offset {off} at {i}");
                same_bits(&run(&k2, &out), &run(&k512, &out), &what);
                same_bits(&run(&k2, &inp), &run(&k512, &inp), &what);
            }
            // The accumulating kernels (AVX-512 or routed to AVX2), onto
            // random values; `b` avoids the specials so that not everything is NaN.
            let b = fill(len as u64, len, 2.0);
            type Acc = fn(&CpuKernels, &[f32], &[f32], &mut [f32]) -> Res;
            let acc: [(&str, Acc); 8] = [
                ("axpy", |k, x, _, y| k.axpy(0.75, x, y)),
                ("relu_bwd", CpuKernels::relu_bwd),
                ("tanh_bwd", CpuKernels::tanh_bwd),
                ("sigmoid_bwd", CpuKernels::sigmoid_bwd),
                ("exp_bwd", CpuKernels::exp_bwd),
                ("log_bwd", CpuKernels::log_bwd),
                ("mul_acc", CpuKernels::mul_acc),
                ("add", CpuKernels::add),
            ];
            for (name, f) in acc {
                for (u, v) in [(xs, &b[..]), (&b[..], xs)] {
                    let g = |k: &CpuKernels, y: &mut [f32]| {
                        y.copy_from_slice(&b);
                        f(k, u, v, y).unwrap()
                    };
                    let what = |i: usize| format!("{name} len {len} offset {off} at {i}");
                    same_bits(&run(&k2, &g), &run(&k512, &g), &what);
                }
            }
        }
    }
}

/// The cells' row kernels (AVX-512 builds, or AVX2 builds running the
/// AVX-512 activations): forward, then backward from the AVX2 forward's
/// `act` and `c`, at odd hidden sizes and W1's H = 150.
#[test]
fn cells_match_avx2_bit_for_bit() {
    let Some((k2, k512)) = pair("cells_match_avx2_bit_for_bit") else {
        return;
    };
    for kind in Kind::ALL {
        for (b, hd) in [(1, 1), (3, 13), (2, 17), (5, 150), (40, 33)] {
            let case = Case::new(kind, b, hd, (b * 100 + hd) as u64);
            let what =
                |part: &'static str| move |i: usize| format!("{kind:?} b={b} H={hd} {part}[{i}]");
            let (a2, c2, h2) = case.fwd_dense(&k2);
            let (a5, c5, h5) = case.fwd_dense(&k512);
            same_bits(&a2, &a5, &what("act"));
            same_bits(&c2, &c5, &what("c"));
            same_bits(&h2, &h5, &what("h"));
            let (dg2, dch2) = case.bwd_dense(&k2, &a2, &c2);
            let (dg5, dch5) = case.bwd_dense(&k512, &a2, &c2);
            same_bits(&dg2, &dg5, &what("dgates"));
            for (d2, d5) in dch2.iter().zip(&dch5) {
                same_bits(d2, d5, &what("dchild"));
            }
        }
    }
}

#[test]
fn gru_matches_avx2_bit_for_bit() {
    let Some((k2, k512)) = pair("gru_matches_avx2_bit_for_bit") else {
        return;
    };
    for (b, hd) in [(1, 1), (3, 13), (5, 150), (40, 33)] {
        let n = b * hd;
        let (xw, hu, hp, dh) = (
            fill(1, 3 * n, 3.0),
            fill(2, 3 * n, 3.0),
            fill(3, n, 1.0),
            fill(4, n, 1.0),
        );
        let run = |k: &CpuKernels| {
            let (mut act, mut h) = (vec![0.0; 3 * n], vec![0.0; n]);
            k.gru_fwd(&xw, &hu, &hp, hd, &mut act, &mut h).unwrap();
            let (mut dxw, mut dhu, mut dhp) =
                (fill(5, 3 * n, 0.5), fill(6, 3 * n, 0.5), fill(7, n, 0.5));
            k.gru_bwd(&act, &hu, &hp, &dh, hd, &mut dxw, &mut dhu, &mut dhp)
                .unwrap();
            [act, h, dxw, dhu, dhp]
        };
        for (part, (v2, v5)) in ["act", "h", "dxw", "dhu", "dh_prev"]
            .iter()
            .zip(run(&k2).iter().zip(&run(&k512)))
        {
            same_bits(v2, v5, &|i| format!("gru b={b} H={hd} {part}[{i}]"));
        }
    }
}
