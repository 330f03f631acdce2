//! `cargo xtask build-kernels`: CUDA C -> committed PTX.
//!
//! Compiles every `crates/kernels-cuda/kernels/<name>.cu` with nvcc to
//! `compute_80` PTX (JIT-compiled by the driver on Ampere, Hopper and
//! later) and writes `crates/kernels-cuda/ptx/<name>.ptx` with the source's
//! hash on its first line, which a test of the kernel crate checks. With
//! ptxas next to nvcc, each PTX is also assembled for sm_80 and sm_90 to
//! catch errors the driver's JIT would otherwise report at run time.
//!
//! nvcc is `$NVCC`, else `nvcc` on `PATH`, else `$CUDA_HOME/bin/nvcc`, else
//! `/usr/local/cuda/bin/nvcc`. Use nvcc 13.0: newer ones emit a PTX ISA that
//! a CUDA 13.0 driver cannot load (`../shared/CUDA.md` has a recipe).

use std::path::{Path, PathBuf};
use std::process::Command;

use sheaf_kernels_cuda::ptx::{source_hash, FILES, HASH_PREFIX};

fn nvcc() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("NVCC") {
        return Ok(PathBuf::from(p));
    }
    if Command::new("nvcc").arg("--version").output().is_ok() {
        return Ok(PathBuf::from("nvcc"));
    }
    let home = std::env::var_os("CUDA_HOME").map(PathBuf::from);
    for dir in home.into_iter().chain([PathBuf::from("/usr/local/cuda")]) {
        let p = dir.join("bin/nvcc");
        if p.exists() {
            return Ok(p);
        }
    }
    Err("nvcc not found: set NVCC or CUDA_HOME, or put nvcc on PATH".into())
}

/// Builds every kernel file's PTX; `check` assembles each with ptxas too.
pub fn build(root: &Path, check: bool) -> Result<(), String> {
    let nvcc = nvcc()?;
    let dir = root.join("crates/kernels-cuda");
    let tmp = root.join("target/xtask-ptx");
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    for file in FILES {
        let src = dir.join(format!("kernels/{}.cu", file.name));
        // Hash what is on disk now, not what this binary embedded.
        let source =
            std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        let out = tmp.join(format!("{}.ptx", file.name));
        run(Command::new(&nvcc)
            .args(["-ptx", "-arch=compute_80", "-I"])
            .arg(dir.join("kernels"))
            .arg(&src)
            .arg("-o")
            .arg(&out))?;
        if check {
            let ptxas = nvcc.with_file_name("ptxas");
            for arch in ["sm_80", "sm_90"] {
                run(Command::new(&ptxas)
                    .arg(format!("-arch={arch}"))
                    .arg(&out)
                    .args(["-o", "/dev/null"]))?;
            }
        }
        let ptx = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        let dst = dir.join(format!("ptx/{}.ptx", file.name));
        let text = format!("{HASH_PREFIX}{}\n{ptx}", source_hash(&source));
        std::fs::write(&dst, text).map_err(|e| format!("{}: {e}", dst.display()))?;
        println!("{} -> {}", src.display(), dst.display());
    }
    Ok(())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}
