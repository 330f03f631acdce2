//! `cargo xtask gpu-bundle`: everything a GPU machine without a Rust
//! toolchain needs to run sheaf's GPU tests and benchmarks, in
//! `gpu-bundle/` (git-ignored): the test executables that have GPU parts,
//! `bench-gpu` and `sst`, all release builds with the `cuda` feature and no
//! debug info, packed as `bin.tar.gz` (at most 64 MiB can be brought to a
//! GPU machine at once), and `run.sh`, which unpacks them, runs them from
//! the repository root with `SHEAF_REQUIRE_GPU=1` (a device that fails to
//! open fails the tests), prints each test binary's passed / failed /
//! skipped counts and writes the logs under `$OUT` (or `gpu-bundle/out`).
//! Test targets behind other features (sheaf-dist's `nccl`) are built
//! with those.

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
    "many_argument_batches",
    "vertex_calls",
    "vertex_scan",
    "tree_lstm",
    "custom_op_cuda",
];

/// Test targets with GPU parts built with features of their own, beside
/// the workspace's `cuda` build: (package, features, target).
const FEATURE_GPU_TESTS: &[(&str, &str, &str)] = &[
    // sheaf-dist's NCCL backend: a one-rank communicator on cuda:0.
    ("sheaf-dist", "nccl", "nccl"),
];

const RUN: &str = r#"#!/usr/bin/env bash
# Runs sheaf's GPU tests and benchmarks; from the repository root:
#   bash gpu-bundle/run.sh [--quick]
# The binaries come packed (bin.tar.gz: at most 64 MiB can be brought to a
# GPU machine at once) and are unpacked into a temporary directory.
# SHEAF_REQUIRE_GPU=1: a device, cuBLAS or PTX that fails to load FAILS the
# GPU tests instead of letting them skip and pass.
# Every step has a time limit (SHEAF_STEP_LIMIT seconds, default 240), so
# one hung step still leaves the others' results. The logs come back packed
# in $OUT/logs.tar.gz (a device lease returns only a few files).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda-13.0/bin:/usr/local/cuda/bin
export SHEAF_REQUIRE_GPU=1
OUT=${OUT:-gpu-bundle/out}
LIMIT=${SHEAF_STEP_LIMIT:-150}
LOGS="$OUT/logs"
mkdir -p "$LOGS"
BIN=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-gpu-bundle.XXXXXX")
tar -xzf gpu-bundle/bin.tar.gz -C "$BIN" || { echo "unpacking gpu-bundle/bin.tar.gz failed"; exit 1; }
# The nccl test: cudarc loads libnccl.so, which only NCCL's development
# package provides; where just libnccl.so.2 is found (the libnccl2 package,
# the nvidia-nccl pip wheel), link it as libnccl.so.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so '; then
  nccl2=$( { ldconfig -p 2>/dev/null | sed -n 's/.*libnccl\.so\.2 .*=> //p'
    python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null
  } | head -1)
  if [ -n "$nccl2" ] && [ -e "$nccl2" ]; then
    mkdir -p "$BIN/lib" && ln -sf "$nccl2" "$BIN/lib/libnccl.so"
    export LD_LIBRARY_PATH=$BIN/lib:$LD_LIBRARY_PATH
  fi
fi
nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1
head -12 "$LOGS/nvidia-smi.txt"
status=0
# SHEAF_SKIP="sst sanitizer ...": steps whose names start so are left out.
step() { # step NAME CMD...: runs CMD under the time limit, its output in logs/NAME.log
  local name=$1; shift
  for s in ${SHEAF_SKIP:-}; do
    [[ $name == "$s"* ]] && { echo "== $name: skipped"; touch "$LOGS/$name.log"; return 0; }
  done
  local t0=$SECONDS
  timeout "$LIMIT" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc $rc, $((SECONDS - t0)) s"
  [ $rc -ne 0 ] && status=1
  return $rc
}
printf '%-24s %7s %7s %8s %5s\n' binary passed failed skipped secs
for t in "$BIN"/tests/*; do
  name=$(basename "$t")
  log="$LOGS/test-$name.log"
  t0=$SECONDS
  # --nocapture: the "skipping: <why>" lines of passing tests reach the log.
  timeout "$LIMIT" "$t" --test-threads=1 --nocapture > "$log" 2>&1 || { status=1; failed_bins="${failed_bins:-} $name"; }
  res=$(grep -E '^test result:' "$log" | tail -1)
  passed=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<< "$res")
  failed=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<< "$res")
  skipped=$(grep -c '^skipping' "$log")
  printf '%-24s %7s %7s %8s %5s\n' "$name" "${passed:-?}" "${failed:-?}" "$skipped" $((SECONDS - t0))
done
if [ -n "${failed_bins:-}" ]; then
  echo "FAILED:${failed_bins}"
  for name in $failed_bins; do
    echo "---- $name"
    grep -E -A6 "^---- |panicked|^error|FAILED|failures:" "$LOGS/test-$name.log" | head -60
  done
fi
step bench-gpu "$BIN"/bench-gpu ${1:-} --out "$OUT/results.jsonl"
cat "$LOGS/bench-gpu.log"
if python3 -c 'import torch' 2>/dev/null; then
  step torch-peer env PYTHONUNBUFFERED=1 python3 benches/peers/torch_gpu.py ${1:-} --out "$OUT/results.jsonl"
  cat "$LOGS/torch-peer.log"
else
  echo "== torch-peer: no torch here"
fi
# The default SST run on the device, and on the CPU beside it (same seed).
step sst-cuda "$BIN"/sst train --device cuda --data-dir data/sst --checkpoint-dir "$BIN/sst-cuda" --overwrite
tail -5 "$LOGS/sst-cuda.log"
step sst-cpu "$BIN"/sst train --data-dir data/sst --checkpoint-dir "$BIN/sst-cpu" --overwrite
tail -5 "$LOGS/sst-cpu.log"
if command -v compute-sanitizer > /dev/null && [ -z "${1:-}" ]; then
  # Under the sanitizer a test runs tens of times slower: a shorter limit
  # each, so the run still ends in time (a timeout shows as rc 124).
  for t in parity parity_cells cuda_backend_states many_argument_batches; do
    for tool in memcheck racecheck; do
      LIMIT=${SHEAF_SANITIZER_LIMIT:-45} step "sanitizer-$tool-$t" compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN/tests/$t" --test-threads=1
      tail -3 "$LOGS/sanitizer-$tool-$t.log"
    done
  done
fi
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"
rm -rf "$BIN"
exit $status
"#;

pub fn bundle(root: &Path) -> Result<(), String> {
    let dir = root.join("gpu-bundle");
    // A fresh bundle: nothing of an earlier one (a test since renamed) stays.
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let bin_dir = dir.join("bin");
    let tests = bin_dir.join("tests");
    std::fs::create_dir_all(&tests).map_err(|e| format!("{}: {e}", tests.display()))?;
    let mut copied = 0;
    for (name, exe) in test_executables(root, &["--workspace", "--features", "cuda"])? {
        if GPU_TESTS.contains(&name.as_str()) {
            copy(Path::new(&exe), &tests.join(name))?;
            copied += 1;
        }
    }
    for &(pkg, features, target) in FEATURE_GPU_TESTS {
        let args = ["-p", pkg, "--features", features, "--test", target];
        for (name, exe) in test_executables(root, &args)? {
            if name == target {
                copy(Path::new(&exe), &tests.join(name))?;
                copied += 1;
            }
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
        copy(&super::release_binary(root, bin), &bin_dir.join(bin))?;
    }
    let packed = pack(&dir)?;
    std::fs::write(dir.join("run.sh"), RUN).map_err(|e| format!("run.sh: {e}"))?;
    println!(
        "{}: {copied} test executables, bench-gpu and sst in bin.tar.gz ({:.1} MiB), run.sh",
        dir.display(),
        packed as f64 / MIB as f64
    );
    Ok(())
}

/// Builds test executables (`cargo test --release --no-run` with `args`)
/// and returns each one's (target name, path): cargo prints each as a JSON
/// message.
fn test_executables(root: &Path, args: &[&str]) -> Result<Vec<(String, String)>, String> {
    let out = Command::new(super::cargo())
        .current_dir(root)
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .args(["test", "--release", "--no-run", "--message-format=json"])
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo test --no-run {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "building the test executables ({}) failed",
            args.join(" ")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let msg = serde_json::from_str::<serde_json::Value>(line).ok()?;
            let exe = msg["executable"].as_str()?;
            let name = msg["target"]["name"].as_str()?;
            Some((name.to_string(), exe.to_string()))
        })
        .collect())
}

const MIB: u64 = 1 << 20;
/// What can be brought to the GPU machine at once.
const BUNDLE_MAX: u64 = 64 * MIB;

/// Packs `dir/bin` into `dir/bin.tar.gz` (and removes it); returns the size
/// of the whole bundle, an error where it exceeds [`BUNDLE_MAX`].
fn pack(dir: &Path) -> Result<u64, String> {
    let archive = dir.join("bin.tar.gz");
    let status = Command::new("tar")
        .current_dir(dir)
        .args(["-czf", "bin.tar.gz", "-C", "bin", "."])
        .status()
        .map_err(|e| format!("tar: {e}"))?;
    if !status.success() {
        return Err(format!("tar -czf {} failed", archive.display()));
    }
    std::fs::remove_dir_all(dir.join("bin")).map_err(|e| format!("removing bin/: {e}"))?;
    let size = std::fs::metadata(&archive)
        .map_err(|e| format!("{}: {e}", archive.display()))?
        .len();
    if size > BUNDLE_MAX {
        return Err(format!(
            "{} is {:.1} MiB: at most {} MiB can be brought to the GPU machine at once",
            archive.display(),
            size as f64 / MIB as f64,
            BUNDLE_MAX / MIB
        ));
    }
    Ok(size)
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to).map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
    Ok(())
}
