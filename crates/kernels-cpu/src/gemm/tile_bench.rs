//! Timing of the hand-written tiles per ISA against matrixmultiply, one
//! thread: `cargo test -p sheaf-kernels-cpu --release tile_gflops --
//! --ignored --nocapture`. Prints GFLOP/s, the median of alternating runs,
//! of the small path of an `Avx2` and of an `Avx512` handle (which runs
//! the AVX2 tiles where those measured faster) and of matrixmultiply.

use std::time::Instant;

use super::{matrixmultiply_leaf, Gemm, Transpose};
use crate::{CpuKernels, Isa};

/// (label, ta, tb, k, n, row counts); k == 0: the rows are k, m is 300.
type Set = (
    &'static str,
    Transpose,
    Transpose,
    usize,
    usize,
    &'static [usize],
);

const ROWS: [usize; 11] = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128];

fn gflops(g: &Gemm, secs: f64) -> f64 {
    2.0 * (g.m * g.n * g.k) as f64 / secs / 1e9
}

#[test]
#[ignore = "timing, not a test"]
fn tile_gflops() {
    let (Some(k2), Some(k5)) = (
        CpuKernels::with_isa(Isa::Avx2),
        CpuKernels::with_isa(Isa::Avx512),
    ) else {
        return;
    };
    for isa in [Isa::Avx2, Isa::Avx512] {
        println!("crossovers {isa:?}: {:?}", super::crossover::get(isa));
    }
    let (no, yes) = (Transpose::No, Transpose::Yes);
    let sets: [Set; 8] = [
        ("BT m x 150 x 5", no, yes, 150, 5, &[16, 48, 1000]),
        ("BT m x 97 x 16", no, yes, 97, 16, &[16, 48, 700]),
        ("NN m x 300 x 750", no, no, 300, 750, &ROWS),
        ("NN m x 150 x 750", no, no, 150, 750, &ROWS),
        ("NN m x 750 x 300", no, no, 750, 300, &ROWS),
        ("TN m x 300 x 750", yes, no, 300, 750, &ROWS),
        ("BT m x 750 x 300", no, yes, 750, 300, &ROWS),
        (
            "TN 300 x b x 750 (b = m)",
            yes,
            no,
            0,
            750,
            &[1, 2, 4, 8, 12, 16],
        ),
    ];
    for (label, ta, tb, k, n, ms) in sets {
        println!("{label}: m  avx2  avx512  mm  (GFLOP/s)");
        for &m in ms {
            let (m, k) = if k == 0 { (300, m) } else { (m, k) };
            let g = Gemm {
                ta,
                tb,
                m,
                n,
                k,
                alpha: 1.0,
                beta: 0.0,
                lda: if ta == no { k } else { m },
                ldb: if tb == no { n } else { k },
                ldc: n,
            };
            let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
            let mut c = vec![0.0f32; m * n];
            let reps = (20_000_000 / (m * n * k)).max(1);
            let mut times = [Vec::new(), Vec::new(), Vec::new()];
            for round in 0..9 {
                for which in 0..3 {
                    let which = (which + round) % 3;
                    let t = Instant::now();
                    for _ in 0..reps {
                        match which {
                            0 => k2.small(&g, &a, &b, &mut c),
                            1 => k5.small(&g, &a, &b, &mut c),
                            _ => matrixmultiply_leaf(&g, &a, &b, &mut c).unwrap(),
                        }
                    }
                    if round > 0 {
                        times[which].push(t.elapsed().as_secs_f64() / reps as f64);
                    }
                }
            }
            let med = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                gflops(&g, v[v.len() / 2])
            };
            let [t2, t5, tm] = &mut times;
            println!(
                "  {:>4} {:6.1} {:6.1} {:6.1}",
                if k < 20 { k } else { m },
                med(t2),
                med(t5),
                med(tm)
            );
        }
    }
}
