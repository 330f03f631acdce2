//! Instruction-set detection, done once, and the [`CpuKernels`] handle.

use std::sync::OnceLock;

/// The instruction sets the kernels are written for.
///
/// `Scalar` is plain Rust, always compiled and always tested: it is the
/// specification the SIMD paths are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Isa {
    /// Portable Rust; what the compiler auto-vectorises for the baseline target.
    Scalar,
    /// x86-64 AVX2 with FMA (Haswell and later, Zen and later).
    Avx2,
    /// x86-64 AVX-512F together with AVX2 and FMA (Skylake-X and later,
    /// Zen 4 and later). Kernels with no AVX-512 version of their own, or
    /// whose AVX-512 version was not faster, run their AVX2 version.
    Avx512,
}

impl Isa {
    /// Every ISA, best last.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// Lower-case name, as accepted by `SHEAF_ISA`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses a name as printed by [`Isa::name`].
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|isa| isa.name() == name)
    }

    /// Whether this CPU can run the ISA's kernels.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            // AVX2 and FMA too: an `Avx512` handle runs the AVX2 kernels
            // where there is no AVX-512 one.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => false,
        }
    }

    /// The ISAs this CPU supports, scalar first.
    pub fn supported() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
    }

    /// The best supported ISA, detected once. The environment variable
    /// `SHEAF_ISA=scalar|avx2|avx512` lowers the choice (it never selects an
    /// ISA the CPU lacks).
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            let detected = Isa::ALL
                .into_iter()
                .rev()
                .find(|i| i.is_supported())
                .unwrap_or(Isa::Scalar);
            match std::env::var("SHEAF_ISA")
                .ok()
                .and_then(|s| Isa::from_name(&s))
            {
                Some(forced) if forced.is_supported() => forced,
                _ => detected,
            }
        })
    }
}

/// Handle through which every kernel is called.
///
/// A value with `isa() == Isa::Avx2` exists only if the CPU supports AVX2 and
/// FMA, one with `Isa::Avx512` only if it supports AVX-512F, AVX2 and FMA:
/// both constructors check it. The SIMD entry points rely on this invariant
/// for the soundness of their `#[target_feature]` calls (an `Avx512` handle
/// may call an AVX2 kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuKernels {
    isa: Isa,
}

impl Default for CpuKernels {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuKernels {
    /// Kernels for the best ISA of this CPU (see [`Isa::best`]).
    pub fn new() -> Self {
        CpuKernels { isa: Isa::best() }
    }

    /// Kernels for a given ISA, or `None` if this CPU cannot run it.
    pub fn with_isa(isa: Isa) -> Option<Self> {
        isa.is_supported().then_some(CpuKernels { isa })
    }

    /// The ISA these kernels run with.
    pub fn isa(&self) -> Isa {
        self.isa
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_is_always_supported() {
        assert!(CpuKernels::with_isa(Isa::Scalar).is_some());
        assert!(Isa::supported().contains(&Isa::Scalar));
    }

    #[test]
    fn names_round_trip() {
        for isa in Isa::ALL {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
        assert_eq!(Isa::from_name("sse9"), None);
    }

    /// With `SHEAF_REQUIRE_ISA=avx2` set (as CI does on x86-64 machines; a
    /// list such as `avx2,avx512` also works), a machine without the ISA
    /// fails instead of silently testing less.
    #[test]
    fn required_isas_are_present() {
        if let Ok(list) = std::env::var("SHEAF_REQUIRE_ISA") {
            for name in list.split(',').filter(|s| !s.is_empty()) {
                let isa = Isa::from_name(name)
                    .unwrap_or_else(|| panic!("SHEAF_REQUIRE_ISA names unknown ISA {name:?}"));
                assert!(
                    isa.is_supported(),
                    "SHEAF_REQUIRE_ISA requires {name}, which this CPU lacks"
                );
            }
        }
    }
}
