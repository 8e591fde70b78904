//! The rest of the card: what a training process takes outside PyTorch's caching allocator
//! (the CUDA context with the kernels a step loads, NCCL's buffers) and the library
//! workspaces it allocates through it, by GPU generation.
//!
//! The figures are data (`data/card.json`, compiled in), each with its source: a context is
//! observed or derived from a law fitted to published measurements (SM count, plus the kernels
//! a training step loads), cuBLAS's workspace follows PyTorch's `CublasHandlePool.cpp`, NCCL's
//! buffers are a documented allowance per rank. A card whose generation is not in the table (a
//! bare capacity, an AMD GPU) gets the table's default context, and [`ContextSize::basis`]
//! says so, for the caller to warn.

use std::sync::OnceLock;

use serde::Deserialize;

use crate::gpu::GpuChoice;
use crate::units::Bytes;

static TABLE_JSON: &str = include_str!("../data/card.json");

/// How CUDA loads kernel images into the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModuleLoading {
    /// On first use (CUDA >= 11.7; PyTorch >= 1.13 sets `CUDA_MODULE_LOADING=LAZY` when it is
    /// unset): the context holds the driver's structures and the kernels a step touches.
    Lazy,
    /// Every kernel image at start-up (CUDA < 11.7, or `CUDA_MODULE_LOADING=EAGER`).
    Eager,
}

impl ModuleLoading {
    /// What a run gets with this CUDA version (`major`, `minor`; `None`: a current one) and
    /// this value of `CUDA_MODULE_LOADING` (`None`: unset).
    pub fn of(cuda: Option<(u32, u32)>, module_loading_env: Option<&str>) -> ModuleLoading {
        let lazy_capable = cuda.is_none_or(|version| version >= (11, 7));
        let eager_asked =
            module_loading_env.is_some_and(|v| v.trim().eq_ignore_ascii_case("eager"));
        if lazy_capable && !eager_asked { ModuleLoading::Lazy } else { ModuleLoading::Eager }
    }

    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            ModuleLoading::Lazy => "lazy",
            ModuleLoading::Eager => "eager",
        }
    }
}

/// Where a context size comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextBasis {
    /// The table's value for the card's generation (observed, or derived from the law).
    Generation {
        /// The generation's name (`Ampere`).
        generation: String,
        /// Its compute capability (`8.6`).
        compute_capability: String,
        /// `observed` or `derived`.
        basis: String,
    },
    /// Loading without lazy loading: the largest eager context observed, for any card.
    Eager,
    /// The card's generation is not in the table: the default.
    Unknown,
}

/// The CUDA context a run is budgeted for, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextSize {
    /// Its size.
    pub bytes: Bytes,
    /// Where the size comes from.
    pub basis: ContextBasis,
}

// The sources and the law are read by the tests that guard the table.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Deserialize)]
struct Law {
    mib_per_sm: f64,
    base_mib: f64,
    training_kernels_mib: f64,
    sources: Vec<String>,
}

// The sources and the law are read by the tests that guard the table.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Deserialize)]
struct Sized {
    mib: u64,
    #[serde(default)]
    sources: Vec<String>,
}

// The sources and the law are read by the tests that guard the table.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Deserialize)]
struct Generation {
    compute_capability: String,
    generation: String,
    largest_card: String,
    sms: u64,
    context_mib: u64,
    basis: String,
}

#[derive(Debug, Deserialize)]
struct WorkspaceRule {
    prefix: String,
    bytes: u64,
}

// The sources and the law are read by the tests that guard the table.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Deserialize)]
struct Cublas {
    handles: usize,
    default_bytes: u64,
    by_architecture: Vec<WorkspaceRule>,
    source: String,
}

// The sources and the law are read by the tests that guard the table.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Deserialize)]
struct Nccl {
    two_gpus_mib: u64,
    more_gpus_mib: u64,
    sources: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Cudnn {
    counted_bytes: u64,
}

// The sources and the law are read by the tests that guard the table.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Deserialize)]
struct TableFile {
    context_law: Law,
    eager_context: Sized,
    unknown_context: Sized,
    generations: Vec<Generation>,
    cublas_workspace: Cublas,
    cudnn: Cudnn,
    nccl: Nccl,
}

/// The parsed table, and the workspace lists (per handle) it implies, built once.
struct Table {
    file: TableFile,
    /// One list per rule of `by_architecture`, then the default's.
    workspaces: Vec<Vec<u64>>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        // Compiled in and guarded by the tests below, so it parses.
        let file: TableFile = serde_json::from_str(TABLE_JSON).expect("data/card.json parses");
        let handles = file.cublas_workspace.handles;
        let workspaces = file
            .cublas_workspace
            .by_architecture
            .iter()
            .map(|r| r.bytes)
            .chain([file.cublas_workspace.default_bytes])
            .map(|bytes| vec![bytes; handles])
            .collect();
        Table { file, workspaces }
    })
}

fn mib(n: u64) -> Bytes {
    Bytes(n << 20)
}

/// The compute capability (or AMD architecture) of a card, if the choice names one.
fn architecture(gpu: &GpuChoice) -> Option<&str> {
    match gpu {
        GpuChoice::Known(g) => Some(g.compute_capability.as_str()),
        GpuChoice::Capacity(_) => None,
    }
}

/// The CUDA context (with the kernels a training step loads) a run on `gpu` takes outside the
/// caching allocator.
pub fn cuda_context(gpu: &GpuChoice, loading: ModuleLoading) -> ContextSize {
    let t = &table().file;
    let row =
        architecture(gpu).and_then(|cc| t.generations.iter().find(|g| g.compute_capability == cc));
    match (loading, row) {
        (ModuleLoading::Eager, _) => {
            ContextSize { bytes: mib(t.eager_context.mib), basis: ContextBasis::Eager }
        }
        (ModuleLoading::Lazy, Some(g)) => ContextSize {
            bytes: mib(g.context_mib),
            basis: ContextBasis::Generation {
                generation: g.generation.clone(),
                compute_capability: g.compute_capability.clone(),
                basis: g.basis.clone(),
            },
        },
        (_, None) => {
            ContextSize { bytes: mib(t.unknown_context.mib), basis: ContextBasis::Unknown }
        }
    }
}

/// The context assumed for a card whose generation is not in the table.
pub fn unknown_context() -> Bytes {
    mib(table().file.unknown_context.mib)
}

/// cuBLAS's workspaces on `gpu` (one per handle: the forward's thread and autograd's), in
/// allocation order; without a card, those of a pre-Hopper GPU.
pub fn cublas_workspaces(gpu: Option<&GpuChoice>) -> &'static [u64] {
    let t = table();
    let rules = &t.file.cublas_workspace.by_architecture;
    let arch = gpu.and_then(architecture);
    let index = arch
        .and_then(|a| rules.iter().position(|r| a.starts_with(r.prefix.as_str())))
        .unwrap_or(rules.len());
    &t.workspaces[index]
}

/// NCCL's buffers per rank for one data-parallel communicator over `gpus` GPUs (none for one):
/// an allowance outside the caching allocator, for planners of several GPUs.
pub fn nccl_buffers(gpus: u64) -> Bytes {
    let n = &table().file.nccl;
    match gpus {
        0 | 1 => Bytes::ZERO,
        2 => mib(n.two_gpus_mib),
        _ => mib(n.more_gpus_mib),
    }
}

/// cuDNN workspaces a step keeps: none for the models vramfit simulates (no convolution).
pub fn cudnn_workspace() -> Bytes {
    Bytes(table().file.cudnn.counted_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn law(sms: u64) -> u64 {
        let l = &table().file.context_law;
        (l.mib_per_sm * sms as f64 + l.base_mib + l.training_kernels_mib).ceil() as u64
    }

    #[test]
    fn the_table_parses_and_every_figure_has_a_source() {
        let t = &table().file;
        assert!(!t.context_law.sources.is_empty());
        assert!(!t.eager_context.sources.is_empty());
        assert!(!t.nccl.sources.is_empty());
        assert!(t.cublas_workspace.source.starts_with("https://"));
        assert_eq!(t.cublas_workspace.handles, 2);
        assert_eq!(t.cudnn.counted_bytes, 0);
    }

    #[test]
    fn derived_contexts_follow_the_law_and_generations_are_unique() {
        let mut seen = HashSet::new();
        for g in &table().file.generations {
            assert!(seen.insert(g.compute_capability.clone()), "{} twice", g.compute_capability);
            assert!(!g.largest_card.is_empty() && !g.generation.is_empty());
            match g.basis.as_str() {
                "derived" => assert_eq!(g.context_mib, law(g.sms), "{}", g.generation),
                "observed" => {}
                other => panic!("{}: basis '{other}'", g.generation),
            }
            // Within what was measured: a bare context to the largest training footprint.
            assert!((100..=1024).contains(&g.context_mib), "{}", g.generation);
        }
    }

    #[test]
    fn the_law_reproduces_the_measurements_it_was_fitted_to() {
        let l = &table().file.context_law;
        let bare = |sms: f64| l.mib_per_sm * sms + l.base_mib;
        // llama.cpp PR #23604: 107 MiB at 34 SMs, 555 MiB at 188.
        assert!((bare(34.0) - 107.0).abs() < 1.0);
        assert!((bare(188.0) - 555.0).abs() < 1.0);
        // PyTorch contexts: RTX 3090 256 MiB, RTX 6000 Ada 426 MiB (within 4%).
        assert!((bare(82.0) - 256.0).abs() / 256.0 < 0.04);
        assert!((bare(142.0) - 426.0).abs() / 426.0 < 0.04);
        // An RTX 4090 training process: 522 MiB outside the allocator.
        assert!((bare(128.0) + l.training_kernels_mib - 522.0).abs() < 1.0);
    }

    #[test]
    fn every_nvidia_card_of_the_catalog_has_its_generation_in_the_table() {
        for g in crate::gpu::catalog() {
            let choice = GpuChoice::Known(g.clone());
            let size = cuda_context(&choice, ModuleLoading::Lazy);
            let known = !matches!(size.basis, ContextBasis::Unknown);
            assert_eq!(known, g.vendor == "nvidia", "{}", g.id);
        }
    }

    #[test]
    fn unknown_cards_get_the_default_and_eager_loading_the_eager_context() {
        let capacity = GpuChoice::Capacity(Bytes(24 << 30));
        let lazy = cuda_context(&capacity, ModuleLoading::Lazy);
        assert_eq!(lazy, ContextSize { bytes: unknown_context(), basis: ContextBasis::Unknown });
        let h100 = crate::gpu::resolve("h100-sxm").unwrap();
        let eager = cuda_context(&h100, ModuleLoading::Eager);
        assert_eq!(eager.basis, ContextBasis::Eager);
        assert!(eager.bytes > cuda_context(&h100, ModuleLoading::Lazy).bytes);
    }

    #[test]
    fn lazy_loading_needs_cuda_11_7_and_no_eager_request() {
        assert_eq!(ModuleLoading::of(None, None), ModuleLoading::Lazy);
        assert_eq!(ModuleLoading::of(Some((11, 7)), Some("LAZY")), ModuleLoading::Lazy);
        assert_eq!(ModuleLoading::of(Some((11, 6)), None), ModuleLoading::Eager);
        assert_eq!(ModuleLoading::of(Some((12, 4)), Some("EAGER")), ModuleLoading::Eager);
    }

    #[test]
    fn cublas_workspaces_grow_on_hopper_and_blackwell() {
        let at = |id: &str| cublas_workspaces(Some(&crate::gpu::resolve(id).unwrap()));
        assert_eq!(cublas_workspaces(None), &[8_519_680, 8_519_680]);
        assert_eq!(at("a100-80gb"), &[8_519_680, 8_519_680]);
        assert_eq!(at("h100-sxm"), &[32 << 20, 32 << 20]);
        assert_eq!(at("b200"), &[32 << 20, 32 << 20]);
        assert_eq!(at("rtx-5090"), &[32 << 20, 32 << 20]);
        assert_eq!(at("mi300x"), &[128 << 20, 128 << 20]);
        assert_eq!(at("mi250"), &[32 << 20, 32 << 20]);
        // The device's own default is the pre-Hopper workspace.
        assert_eq!(crate::Device::CUDA.workspaces, cublas_workspaces(None));
    }

    #[test]
    fn nccl_buffers_are_an_allowance_for_several_gpus_only() {
        assert_eq!(nccl_buffers(1), Bytes::ZERO);
        assert_eq!(nccl_buffers(2), Bytes(544 << 20));
        assert_eq!(nccl_buffers(8), Bytes(688 << 20));
    }
}
