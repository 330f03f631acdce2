//! `cargo xtask gpu-bundle`: everything a GPU machine without a Rust
//! toolchain needs to run sheaf's GPU tests and benchmarks, in
//! `gpu-bundle/` (git-ignored): the test executables that have GPU parts,
//! `bench-gpu` and `sst`, all release builds with the `cuda` feature and no
//! debug info, and `run.sh`, which runs them from the repository root and
//! writes their logs under `$OUT` (or `gpu-bundle/out`).

use std::path::Path;
use std::process::{Command, Stdio};

/// Test targets with GPU parts (each skips them without a device).
const GPU_TESTS: &[&str] = &[
    "parity",
    "parity_softmax",
    "parity_cells",
    "parity_optim",
    "parity_gemm",
    "skip",
    "cuda_backend",
    "cuda_backend_cells",
    "cuda_backend_states",
    "cuda_backend_optim",
    "cuda_backend_errors",
    "every_op_batches",
    "tree_lstm",
    "custom_op_cuda",
];

const RUN: &str = r#"#!/usr/bin/env bash
# Runs sheaf's GPU tests and benchmarks; from the repository root:
#   bash gpu-bundle/run.sh [--quick]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-gpu-bundle/out}
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
status=0
for t in gpu-bundle/tests/*; do
  name=$(basename "$t")
  echo "== $name"
  "$t" --test-threads=1 > "$OUT/test-$name.log" 2>&1 || { status=1; echo "FAILED: $name"; }
  tail -3 "$OUT/test-$name.log"
done
gpu-bundle/bench-gpu ${1:-} --out "$OUT/results.jsonl" > "$OUT/bench-gpu.log" 2>&1 || status=1
cat "$OUT/bench-gpu.log"
gpu-bundle/sst train --device cuda --epochs 1 --checkpoint-dir "$OUT/sst" --overwrite > "$OUT/sst.log" 2>&1 || status=1
tail -4 "$OUT/sst.log"
exit $status
"#;

pub fn bundle(root: &Path) -> Result<(), String> {
    let dir = root.join("gpu-bundle");
    let tests = dir.join("tests");
    std::fs::create_dir_all(&tests).map_err(|e| format!("{}: {e}", tests.display()))?;
    // Test executables: cargo prints each as a JSON message.
    let out = Command::new(super::cargo())
        .current_dir(root)
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .args([
            "test",
            "--workspace",
            "--release",
            "--features",
            "cuda",
            "--no-run",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo test --no-run: {e}"))?;
    if !out.status.success() {
        return Err("building the test executables failed".into());
    }
    let mut copied = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(exe), Some(name)) = (msg["executable"].as_str(), msg["target"]["name"].as_str())
        else {
            continue;
        };
        if GPU_TESTS.contains(&name) {
            copy(Path::new(exe), &tests.join(name))?;
            copied += 1;
        }
    }
    for (pkg, bin) in [("sheaf-benches", "bench-gpu"), ("sheaf-examples", "sst")] {
        let status = Command::new(super::cargo())
            .current_dir(root)
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .args([
                "build",
                "--release",
                "--quiet",
                "--features",
                "cuda",
                "-p",
                pkg,
                "--bin",
                bin,
            ])
            .status()
            .map_err(|e| format!("cargo build {bin}: {e}"))?;
        if !status.success() {
            return Err(format!("building {bin} failed"));
        }
        copy(&super::release_binary(root, bin), &dir.join(bin))?;
    }
    std::fs::write(dir.join("run.sh"), RUN).map_err(|e| format!("run.sh: {e}"))?;
    println!(
        "{}: {copied} test executables, bench-gpu, sst, run.sh",
        dir.display()
    );
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to).map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
    Ok(())
}
