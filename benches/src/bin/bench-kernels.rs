//! `cargo xtask bench kernels`: GFLOP/s and GB/s of the CPU kernels next to
//! the machine's sgemm peak and the peer implementations, all measured in
//! this one run. Prints a table and appends JSON lines to
//! `target/bench/results.jsonl`.

use clap::Parser;
use sheaf_benches::measure::{random_vec, seconds_per_call, with_threads, Budget};
use sheaf_benches::peak::{matrixmultiply_sgemm, sgemm_peak_gflops};
use sheaf_benches::report::{default_results_path, Report};
use sheaf_kernels_cpu::{CpuKernels, Isa, Transpose};

#[derive(Parser, Debug)]
#[command(about = "Benchmark sheaf's CPU kernels against the same-run sgemm peak")]
struct Args {
    /// Shorter measurements (noisier figures).
    #[arg(long)]
    quick: bool,
    /// Where to append the JSON lines.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn main() {
    sheaf_examples::logging::init();
    let args = Args::parse();
    let budget = if args.quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    let k = CpuKernels::new();
    let mut report = Report::new();
    println!(
        "sheaf kernels, ISA {} (best of {:?})",
        k.isa().name(),
        Isa::supported()
    );

    let peak1 = sgemm_peak_gflops(1, budget);
    let peak2 = sgemm_peak_gflops(2, budget);
    println!("sgemm peak (matrixmultiply 1024^3): {peak1:.1} GFLOP/s at 1 thread, {peak2:.1} at 2 threads\n");
    let x = sheaf_kernels_cpu::CpuKernels::new().gemm_crossovers();
    println!(
        "small-row tiles beat matrixmultiply up to (measured this run): {} rows (B as stored), {} (A transposed), {} (B transposed)\n",
        x.nn, x.tn, x.bt
    );
    for (threads, peak) in [(1, peak1), (2, peak2)] {
        report.add(
            "kernels",
            "matrixmultiply",
            threads,
            1024,
            "sgemm/1024x1024x1024",
            peak,
            "GFLOP/s",
            peak,
            Some(peak),
            "peak",
        );
    }

    gemm_table(&k, budget, peak1, &mut report);
    gemm_threads(&k, budget, peak1, peak2, &mut report);
    elementwise_table(budget, peak1, &mut report);
    rows_table(&k, budget, peak1, &mut report);

    let path = args.out.unwrap_or_else(default_results_path);
    match report.append_jsonl(&path) {
        Ok(()) => println!(
            "\nappended {} results to {}",
            report.records().len(),
            path.display()
        ),
        Err(e) => {
            eprintln!("cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
    }
}

fn gflops(m: usize, n: usize, k: usize, secs: f64) -> f64 {
    2.0 * (m * n * k) as f64 / secs / 1e9
}

/// gemm crate 0.19 (`dst = alpha dst + beta lhs rhs` in its notation), one thread.
fn gemm_crate(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: the assert proves every row-major operand (row strides k, n, n;
    // column stride 1) lies in its slice; c is borrowed mutably.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// sgemm at the shapes of W1 (rows x 300 x 450, rows x 300 x 750), the
/// 1-row products, and W3 (256 x 512 x 1280), one thread.
fn gemm_table(kern: &CpuKernels, budget: Budget, peak: f64, report: &mut Report) {
    println!("sgemm, 1 thread (GFLOP/s; ratios against matrixmultiply and the gemm crate)");
    println!(
        "{:>16} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7}",
        "m x k x n", "sheaf", "mm", "gemm", "/mm", "/gemm", "/peak"
    );
    let mut shapes: Vec<(usize, usize, usize)> = Vec::new();
    for n in [450, 750] {
        for m in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048] {
            shapes.push((m, 300, n));
        }
    }
    shapes.extend([(1, 300, 600), (1, 300, 750), (256, 512, 1280)]);
    with_threads(1, || {
        for (m, kd, n) in shapes {
            let a = random_vec(m * kd, 3);
            let b = random_vec(kd * n, 4);
            let mut c = vec![0.0f32; m * n];
            let t_sheaf = seconds_per_call(budget, || {
                kern.sgemm(
                    Transpose::No,
                    Transpose::No,
                    m,
                    n,
                    kd,
                    1.0,
                    &a,
                    kd,
                    &b,
                    n,
                    0.0,
                    &mut c,
                    n,
                )
                .expect("sgemm shapes are consistent")
            });
            let t_mm = seconds_per_call(budget, || matrixmultiply_sgemm(m, n, kd, &a, &b, &mut c));
            let t_gemm = seconds_per_call(budget, || gemm_crate(m, n, kd, &a, &b, &mut c));
            let (s, mm, g) = (
                gflops(m, n, kd, t_sheaf),
                gflops(m, n, kd, t_mm),
                gflops(m, n, kd, t_gemm),
            );
            let shape = format!("{m}x{kd}x{n}");
            println!(
                "{shape:>16} {s:9.1} {mm:9.1} {g:9.1} {:8.2} {:8.2} {:7.2}",
                s / mm,
                s / g,
                s / peak
            );
            let metric = format!("sgemm/{shape}");
            report.add(
                "kernels",
                "sheaf",
                1,
                m,
                &metric,
                s,
                "GFLOP/s",
                peak,
                Some(s),
                &format!(
                    "vs matrixmultiply {:.2}x, vs gemm crate {:.2}x",
                    s / mm,
                    s / g
                ),
            );
            report.add(
                "kernels",
                "matrixmultiply",
                1,
                m,
                &metric,
                mm,
                "GFLOP/s",
                peak,
                Some(mm),
                "",
            );
            report.add(
                "kernels",
                "gemm-crate",
                1,
                m,
                &metric,
                g,
                "GFLOP/s",
                peak,
                Some(g),
                "",
            );
        }
    });
    println!();
}

/// Large products at 1 and 2 threads (rayon split inside sheaf's sgemm).
fn gemm_threads(kern: &CpuKernels, budget: Budget, peak1: f64, peak2: f64, report: &mut Report) {
    println!("sgemm threading (GFLOP/s)");
    println!(
        "{:>16} {:>9} {:>9} {:>8}",
        "m x k x n", "1 thread", "2 threads", "speedup"
    );
    for (m, kd, n) in [
        (64, 300, 750),
        (256, 300, 750),
        (2048, 300, 750),
        (256, 512, 1280),
        (1024, 1024, 1024),
    ] {
        let a = random_vec(m * kd, 5);
        let b = random_vec(kd * n, 6);
        let mut c = vec![0.0f32; m * n];
        let mut run = |threads| {
            with_threads(threads, || {
                seconds_per_call(budget, || {
                    kern.sgemm(
                        Transpose::No,
                        Transpose::No,
                        m,
                        n,
                        kd,
                        1.0,
                        &a,
                        kd,
                        &b,
                        n,
                        0.0,
                        &mut c,
                        n,
                    )
                    .expect("sgemm shapes are consistent")
                })
            })
        };
        let (g1, g2) = (gflops(m, n, kd, run(1)), gflops(m, n, kd, run(2)));
        println!(
            "{:>16} {g1:9.1} {g2:9.1} {:8.2}",
            format!("{m}x{kd}x{n}"),
            g2 / g1
        );
        let metric = format!("sgemm/{m}x{kd}x{n}");
        report.add(
            "kernels",
            "sheaf",
            2,
            m,
            &metric,
            g2,
            "GFLOP/s",
            peak2,
            Some(g2),
            &format!("{:.2}x one thread", g2 / g1),
        );
        let _ = peak1;
    }
    println!();
}

/// Unary and binary elementwise kernels, one thread, per ISA.
fn elementwise_table(budget: Budget, peak: f64, report: &mut Report) {
    println!("elementwise, 1 thread, 16384 elements (G elements/s)");
    let len = 16384;
    let x = random_vec(len, 7)
        .iter()
        .map(|v| v * 8.0)
        .collect::<Vec<_>>();
    let pos = x.iter().map(|v| v.abs() + 0.5).collect::<Vec<_>>();
    let mut y = vec![0.0f32; len];
    println!(
        "{:>10} {}",
        "op",
        Isa::supported()
            .iter()
            .map(|i| format!("{:>9}", i.name()))
            .collect::<String>()
    );
    type Unary = fn(&CpuKernels, &[f32], &mut [f32]) -> sheaf_kernels_cpu::Result<()>;
    let unary: [(&str, Unary, bool); 5] = [
        ("tanh", CpuKernels::tanh, false),
        ("sigmoid", CpuKernels::sigmoid, false),
        ("exp", CpuKernels::exp, false),
        ("log", CpuKernels::log, true),
        ("relu", CpuKernels::relu, false),
    ];
    with_threads(1, || {
        for (name, f, positive) in unary {
            let input = if positive { &pos } else { &x };
            let mut line = format!("{name:>10}");
            for isa in Isa::supported() {
                let kern = CpuKernels::with_isa(isa).expect("supported ISA");
                let secs =
                    seconds_per_call(budget, || f(&kern, input, &mut y).expect("equal lengths"));
                let rate = len as f64 / secs / 1e9;
                line.push_str(&format!("{rate:9.2}"));
                report.add(
                    "kernels",
                    &format!("sheaf-{}", isa.name()),
                    1,
                    len,
                    name,
                    rate * 1e9,
                    "elements/s",
                    peak,
                    None,
                    "",
                );
            }
            println!("{line}");
        }
        let mut line = format!("{:>10}", "add");
        for isa in Isa::supported() {
            let kern = CpuKernels::with_isa(isa).expect("supported ISA");
            let secs = seconds_per_call(budget, || {
                kern.add(&x, &pos, &mut y).expect("equal lengths")
            });
            let rate = len as f64 / secs / 1e9;
            line.push_str(&format!("{rate:9.2}"));
            report.add(
                "kernels",
                &format!("sheaf-{}", isa.name()),
                1,
                len,
                "add",
                rate * 1e9,
                "elements/s",
                peak,
                None,
                "",
            );
        }
        println!("{line}");
    });
    println!();
}

/// Row gathers as the scheduler uses them (embedding lookups, child states).
fn rows_table(kern: &CpuKernels, budget: Budget, peak: f64, report: &mut Report) {
    println!("rows, 1 thread (GB/s moved: read + write)");
    let table_rows = 20000;
    for (n, cols) in [(64, 300), (512, 300), (2048, 150)] {
        let table = random_vec(table_rows * cols, 8);
        let idx: Vec<u32> = (0..n as u64)
            .map(|i| ((i * 7919) % table_rows as u64) as u32)
            .collect();
        let mut dst = vec![0.0f32; n * cols];
        let bytes = (2 * n * cols * 4) as f64;
        let (g, s) = with_threads(1, || {
            let g = seconds_per_call(budget, || {
                kern.gather_rows(&table, cols, &idx, &mut dst)
                    .expect("indices in range")
            });
            let mut grad = vec![0.0f32; table_rows * cols];
            let s = seconds_per_call(budget, || {
                kern.scatter_add_rows(&dst, cols, &idx, &mut grad)
                    .expect("indices in range")
            });
            (g, s)
        });
        println!(
            "{:>16} gather {:6.1}  scatter_add {:6.1}",
            format!("{n}x{cols}"),
            bytes / g / 1e9,
            (bytes * 1.5) / s / 1e9
        );
        report.add(
            "kernels",
            "sheaf",
            1,
            n,
            &format!("gather_rows/{n}x{cols}"),
            bytes / g / 1e9,
            "GB/s",
            peak,
            None,
            "",
        );
        report.add(
            "kernels",
            "sheaf",
            1,
            n,
            &format!("scatter_add_rows/{n}x{cols}"),
            bytes * 1.5 / s / 1e9,
            "GB/s",
            peak,
            None,
            "",
        );
    }
}
