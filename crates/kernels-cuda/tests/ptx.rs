//! The committed PTX matches its CUDA C source (no GPU needed).

use sheaf_kernels_cuda::ptx::{recorded_hash, source_hash, FILES};

#[test]
fn every_ptx_was_built_from_its_current_source() {
    for file in FILES {
        let recorded = recorded_hash(file.ptx)
            .unwrap_or_else(|| panic!("ptx/{}.ptx has no source hash line", file.name));
        assert_eq!(
            recorded,
            source_hash(file.source),
            "kernels/{}.cu (or common.cuh) changed since ptx/{}.ptx was built: run `cargo xtask build-kernels`",
            file.name,
            file.name
        );
    }
}

#[test]
fn every_source_kernel_is_in_its_ptx() {
    for file in FILES {
        let in_source: Vec<&str> = file
            .source
            .lines()
            // Macro bodies name their parameter, not a kernel.
            .filter(|l| !l.trim_end().ends_with('\\'))
            .filter_map(|l| l.split("extern \"C\" __global__ void ").nth(1))
            .filter_map(|rest| rest.split('(').next())
            .collect();
        for name in &in_source {
            let entry = format!(".entry {name}(");
            assert!(
                file.ptx.contains(&entry),
                "{name} of {}.cu is missing from its PTX",
                file.name
            );
        }
    }
}

#[test]
fn the_hash_notices_a_one_byte_edit() {
    let src = FILES[0].source;
    let mut edited = src.to_string();
    edited.push(' ');
    assert_ne!(source_hash(src), source_hash(&edited));
}
