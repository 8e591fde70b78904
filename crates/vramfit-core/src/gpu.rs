//! The GPU catalog: how much memory each card really gives PyTorch.
//!
//! The data lives in `data/gpus.json` (compiled in). Two totals per card: what `nvidia-smi`
//! reports (NVML) and what CUDA exposes to PyTorch (`get_device_properties().total_memory`,
//! the "total capacity" of OOM messages), which is what a run is budgeted against. The capacity
//! for a verdict is the CUDA-visible total minus the CUDA context of the card's generation
//! (`crate::overhead`).

use serde::Deserialize;

use crate::units::{Bytes, parse_size};

static CATALOG_JSON: &str = include_str!("../data/gpus.json");

/// Whether the CUDA-visible total was observed on a real card or derived from the NVML total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provenance {
    /// Seen in `get_device_properties()` or an OOM message's "total capacity".
    Observed,
    /// 98.8% of the NVML total, where no observation was found.
    Estimated,
}

/// One GPU of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Short id used on the command line (`rtx-3090`).
    pub id: String,
    /// Full marketing name.
    pub name: String,
    /// Other accepted spellings.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// `nvidia` or `amd`.
    pub vendor: String,
    /// `nvidia-smi --query-gpu=memory.total`, MiB.
    pub nvml_total_mib: u64,
    /// Total memory CUDA (or HIP) exposes to PyTorch, MiB.
    pub cuda_visible_mib: u64,
    /// Whether `cuda_visible_mib` was observed.
    pub cuda_visible: Provenance,
    /// CUDA compute capability (`8.6`) or the AMD architecture (`gfx90a`).
    pub compute_capability: String,
    /// Native hardware bf16 (compute capability ≥ 8.0 on NVIDIA).
    pub bf16: bool,
    /// Where the numbers come from.
    pub source: String,
    /// Dense peak throughput, where a vendor figure was found (the planner's tokens/s).
    #[serde(default)]
    pub tflops: Option<PeakTflops>,
    /// One-way NVLink bandwidth per GPU, GB/s, on boards that have it (the planner's
    /// collectives within a node; PCIe otherwise).
    #[serde(default)]
    pub nvlink_gbps: Option<u16>,
}

/// A card's dense peak throughput in TFLOPS.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeakTflops {
    /// fp32 without tensor cores (PyTorch's default for fp32 matmuls: TF32 is off).
    pub fp32: f64,
    /// 16-bit tensor-core matmuls with fp32 accumulation (bf16; fp16 where there is no bf16).
    pub tensor16: f64,
    /// Where the figures come from.
    pub source: String,
}

// The catalog's figures are finite (a test checks), so `==` is an equivalence.
impl Eq for PeakTflops {}

impl Gpu {
    /// Total memory CUDA exposes to PyTorch.
    pub fn cuda_visible(&self) -> Bytes {
        Bytes(self.cuda_visible_mib << 20)
    }

    /// Total memory NVML reports.
    pub fn nvml_total(&self) -> Bytes {
        Bytes(self.nvml_total_mib << 20)
    }

    /// Whether FlashAttention runs: NVIDIA compute capability 8.0 or newer (FlashAttention-2
    /// and SDPA's flash kernel), and AMD's MI200 / MI300 (ROCm's Composable Kernel port).
    pub fn supports_flash_attention(&self) -> bool {
        if self.vendor == "amd" {
            return matches!(self.compute_capability.as_str(), "gfx90a" | "gfx942");
        }
        self.compute_capability
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok())
            .is_some_and(|major| major >= 8)
    }
}

#[derive(Deserialize)]
struct CatalogFile {
    gpus: Vec<Gpu>,
}

/// A GPU name or capacity that could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuCatalogError {
    /// Neither a catalog id nor a size.
    #[error("unknown GPU '{given}'{}", suggestion.as_ref().map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default())]
    Unknown {
        /// What the user wrote.
        given: String,
        /// The closest catalog id, if one is close.
        suggestion: Option<String>,
    },
}

/// Every GPU in the catalog, sorted by id.
pub fn catalog() -> Vec<Gpu> {
    // The data file is compiled in and guarded by the tests below, so parsing cannot fail at
    // run time in a released build; an empty catalog is the safe fallback all the same.
    serde_json::from_str::<CatalogFile>(CATALOG_JSON).map(|c| c.gpus).unwrap_or_default()
}

fn normalise(s: &str) -> String {
    let lower = s.trim().to_ascii_lowercase();
    let lower = lower.strip_prefix("nvidia").unwrap_or(&lower).trim_start_matches([' ', '-', '_']);
    let lower = lower.strip_prefix("geforce").unwrap_or(lower).trim_start_matches([' ', '-', '_']);
    lower.replace([' ', '_'], "-")
}

/// What `--gpu` resolved to: a catalog card or a bare capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuChoice {
    /// A card from the catalog.
    Known(Gpu),
    /// A capacity given directly (`24GiB`): taken as the CUDA-visible total.
    Capacity(Bytes),
}

impl GpuChoice {
    /// The CUDA-visible total.
    pub fn cuda_visible(&self) -> Bytes {
        match self {
            GpuChoice::Known(g) => g.cuda_visible(),
            GpuChoice::Capacity(b) => *b,
        }
    }

    /// A label for output.
    pub fn label(&self) -> String {
        match self {
            GpuChoice::Known(g) => g.name.clone(),
            GpuChoice::Capacity(b) => format!("a {b} GPU"),
        }
    }

    /// Whether bf16 is known to be missing in hardware.
    pub fn lacks_bf16(&self) -> bool {
        matches!(self, GpuChoice::Known(g) if !g.bf16)
    }
}

/// Resolves `--gpu`: a catalog id or alias (`rtx-3080`, `RTX 3080`, `a100-80gb`) or a capacity
/// (`24GiB`, `80GB`, `10240MiB`).
pub fn resolve(text: &str) -> Result<GpuChoice, GpuCatalogError> {
    let key = normalise(text);
    let all = catalog();
    if let Some(g) = all.iter().find(|g| g.id == key || g.aliases.contains(&key)) {
        return Ok(GpuChoice::Known(g.clone()));
    }
    if text.trim().starts_with(|c: char| c.is_ascii_digit())
        && let Some(bytes) = parse_size(text)
    {
        return Ok(GpuChoice::Capacity(bytes));
    }
    let suggestion = all
        .iter()
        .map(|g| (edit_distance(&key, &g.id), &g.id))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, id)| id.clone());
    Err(GpuCatalogError::Unknown { given: text.to_string(), suggestion })
}

/// Levenshtein distance, for "did you mean".
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn catalog_parses_and_is_large_enough() {
        let parsed: CatalogFile = serde_json::from_str(CATALOG_JSON).expect("gpus.json parses");
        assert!(parsed.gpus.len() >= 25, "the catalog promises at least 25 GPUs");
    }

    #[test]
    fn ids_and_aliases_are_unique_normalised_and_sorted() {
        let all = catalog();
        let mut seen = HashSet::new();
        for g in &all {
            assert_eq!(normalise(&g.id), g.id, "id {} is not in normal form", g.id);
            assert!(seen.insert(g.id.clone()), "duplicate id {}", g.id);
            for a in &g.aliases {
                assert_eq!(normalise(a), *a, "alias {a} is not in normal form");
                assert!(seen.insert(a.clone()), "alias {a} collides");
            }
        }
        let ids: Vec<_> = all.iter().map(|g| g.id.clone()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted, "keep gpus.json sorted by id");
    }

    #[test]
    fn capacities_are_sane() {
        for g in catalog() {
            assert!(g.cuda_visible_mib > 0, "{}", g.id);
            assert!(
                g.cuda_visible_mib <= g.nvml_total_mib,
                "{}: CUDA-visible above NVML total",
                g.id
            );
            // Observed gaps are 0–1.7%; anything above 5% is a typo.
            assert!(g.cuda_visible_mib * 100 >= g.nvml_total_mib * 95, "{}: gap too large", g.id);
            assert!(!g.source.is_empty(), "{} has no source", g.id);
            if let Some(t) = &g.tflops {
                assert!(t.fp32.is_finite() && t.fp32 > 0.0, "{}", g.id);
                assert!(t.tensor16.is_finite() && t.tensor16 >= t.fp32, "{}", g.id);
                assert!(!t.source.is_empty(), "{}: throughput without a source", g.id);
            }
        }
    }

    #[test]
    fn bf16_follows_compute_capability_on_nvidia() {
        for g in catalog().into_iter().filter(|g| g.vendor == "nvidia") {
            let major: u32 = g
                .compute_capability
                .split('.')
                .next()
                .and_then(|m| m.parse().ok())
                .expect("numeric compute capability");
            assert_eq!(g.bf16, major >= 8, "{}", g.id);
        }
    }

    #[test]
    fn resolves_names_aliases_and_capacities() {
        assert!(
            matches!(resolve("rtx-3080"), Ok(GpuChoice::Known(g)) if g.nvml_total_mib == 10240)
        );
        assert!(matches!(resolve("RTX 3090"), Ok(GpuChoice::Known(g)) if g.id == "rtx-3090"));
        assert!(
            matches!(resolve("NVIDIA GeForce RTX 4090"), Ok(GpuChoice::Known(g)) if g.id == "rtx-4090")
        );
        assert!(
            matches!(resolve("a100-80gb"), Ok(GpuChoice::Known(g)) if g.cuda_visible_mib == 81050)
        );
        assert_eq!(resolve("24GiB"), Ok(GpuChoice::Capacity(Bytes(24 << 30))));
        assert_eq!(
            resolve("rtx-309"),
            Err(GpuCatalogError::Unknown {
                given: "rtx-309".into(),
                suggestion: Some("rtx-3090".into())
            })
        );
    }
}
