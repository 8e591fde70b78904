//! The built-in model catalog: real Hugging Face `config.json` files compiled in.
//!
//! Each file in `data/models/` is the published config plus two bookkeeping keys,
//! `_vramfit_source` (where it came from) and `_vramfit_parameters` (the parameter count
//! `transformers` builds). The table below must list every file; a test checks it.

/// `(catalog name, config.json text)`, sorted by name.
static MODELS: &[(&str, &str)] = &[
    ("bert-base-uncased", include_str!("../data/models/bert-base-uncased.json")),
    ("bert-large-uncased", include_str!("../data/models/bert-large-uncased.json")),
    ("deepseek-v2", include_str!("../data/models/deepseek-v2.json")),
    ("deepseek-v2-lite", include_str!("../data/models/deepseek-v2-lite.json")),
    ("deepseek-v3", include_str!("../data/models/deepseek-v3.json")),
    ("flan-t5-base", include_str!("../data/models/flan-t5-base.json")),
    ("flan-t5-large", include_str!("../data/models/flan-t5-large.json")),
    ("flan-t5-xl", include_str!("../data/models/flan-t5-xl.json")),
    ("gemma-2-2b", include_str!("../data/models/gemma-2-2b.json")),
    ("gemma-2-9b", include_str!("../data/models/gemma-2-9b.json")),
    ("gemma-2b", include_str!("../data/models/gemma-2b.json")),
    ("gemma-3-1b-it", include_str!("../data/models/gemma-3-1b-it.json")),
    ("gemma-7b", include_str!("../data/models/gemma-7b.json")),
    ("gpt2", include_str!("../data/models/gpt2.json")),
    ("gpt2-large", include_str!("../data/models/gpt2-large.json")),
    ("gpt2-medium", include_str!("../data/models/gpt2-medium.json")),
    ("gpt2-xl", include_str!("../data/models/gpt2-xl.json")),
    ("llama-2-13b", include_str!("../data/models/llama-2-13b.json")),
    ("llama-2-7b", include_str!("../data/models/llama-2-7b.json")),
    ("llama-3-8b", include_str!("../data/models/llama-3-8b.json")),
    ("llama-3.1-70b", include_str!("../data/models/llama-3.1-70b.json")),
    ("llama-3.1-8b", include_str!("../data/models/llama-3.1-8b.json")),
    ("llama-3.2-1b", include_str!("../data/models/llama-3.2-1b.json")),
    ("llama-3.2-3b", include_str!("../data/models/llama-3.2-3b.json")),
    ("mistral-7b", include_str!("../data/models/mistral-7b.json")),
    ("mixtral-8x7b", include_str!("../data/models/mixtral-8x7b.json")),
    ("modernbert-base", include_str!("../data/models/modernbert-base.json")),
    ("moonlight-16b-a3b", include_str!("../data/models/moonlight-16b-a3b.json")),
    ("mt5-base", include_str!("../data/models/mt5-base.json")),
    ("mt5-small", include_str!("../data/models/mt5-small.json")),
    ("olmo-2-13b", include_str!("../data/models/olmo-2-13b.json")),
    ("olmo-2-7b", include_str!("../data/models/olmo-2-7b.json")),
    ("phi-3-mini", include_str!("../data/models/phi-3-mini.json")),
    ("pythia-1.4b", include_str!("../data/models/pythia-1.4b.json")),
    ("pythia-12b", include_str!("../data/models/pythia-12b.json")),
    ("pythia-160m", include_str!("../data/models/pythia-160m.json")),
    ("pythia-1b", include_str!("../data/models/pythia-1b.json")),
    ("pythia-2.8b", include_str!("../data/models/pythia-2.8b.json")),
    ("pythia-410m", include_str!("../data/models/pythia-410m.json")),
    ("pythia-6.9b", include_str!("../data/models/pythia-6.9b.json")),
    ("qwen1.5-moe-a2.7b", include_str!("../data/models/qwen1.5-moe-a2.7b.json")),
    ("qwen2-0.5b", include_str!("../data/models/qwen2-0.5b.json")),
    ("qwen2.5-0.5b", include_str!("../data/models/qwen2.5-0.5b.json")),
    ("qwen2.5-1.5b", include_str!("../data/models/qwen2.5-1.5b.json")),
    ("qwen2.5-14b", include_str!("../data/models/qwen2.5-14b.json")),
    ("qwen2.5-32b", include_str!("../data/models/qwen2.5-32b.json")),
    ("qwen2.5-3b", include_str!("../data/models/qwen2.5-3b.json")),
    ("qwen2.5-72b", include_str!("../data/models/qwen2.5-72b.json")),
    ("qwen2.5-7b", include_str!("../data/models/qwen2.5-7b.json")),
    ("qwen3-0.6b", include_str!("../data/models/qwen3-0.6b.json")),
    ("qwen3-14b", include_str!("../data/models/qwen3-14b.json")),
    ("qwen3-30b-a3b", include_str!("../data/models/qwen3-30b-a3b.json")),
    ("qwen3-32b", include_str!("../data/models/qwen3-32b.json")),
    ("qwen3-8b", include_str!("../data/models/qwen3-8b.json")),
    ("roberta-base", include_str!("../data/models/roberta-base.json")),
    ("roberta-large", include_str!("../data/models/roberta-large.json")),
    ("smollm2-1.7b", include_str!("../data/models/smollm2-1.7b.json")),
    ("smollm2-135m", include_str!("../data/models/smollm2-135m.json")),
    ("t5-base", include_str!("../data/models/t5-base.json")),
    ("t5-large", include_str!("../data/models/t5-large.json")),
    ("t5-small", include_str!("../data/models/t5-small.json")),
    ("tinyllama-1.1b", include_str!("../data/models/tinyllama-1.1b.json")),
];

/// Every catalog name, sorted.
pub fn names() -> Vec<&'static str> {
    MODELS.iter().map(|(n, _)| *n).collect()
}

/// The `config.json` text of a catalog model, by exact name.
pub fn config_json(name: &str) -> Option<&'static str> {
    MODELS.iter().find(|(n, _)| *n == name).map(|(_, j)| *j)
}

/// Finds a catalog model by name, ignoring case, surrounding space, `_` for `-`, and an
/// organisation prefix (`meta-llama/Llama-3.1-8B` → `llama-3.1-8b`). Returns the canonical
/// name and its `config.json`.
pub fn resolve(name: &str) -> Option<(&'static str, &'static str)> {
    let lower = name.trim().to_ascii_lowercase().replace('_', "-");
    let key = lower.rsplit('/').next().unwrap_or(&lower);
    MODELS.iter().find(|(n, _)| *n == key).copied()
}

/// The Hugging Face Hub id a catalog file was taken from (`_vramfit_source`,
/// `https://huggingface.co/ORG/NAME/...`), if any.
pub fn hub_id(json: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    let source = value.get("_vramfit_source")?.as_str()?;
    let path = source.strip_prefix("https://huggingface.co/")?;
    let mut parts = path.split('/');
    let (org, name) = (parts.next()?, parts.next()?);
    (!org.is_empty() && !name.is_empty()).then(|| format!("{org}/{name}"))
}

/// The parameter count recorded in a catalog file (`_vramfit_parameters`), if any.
pub fn published_parameters(json: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    value.get("_vramfit_parameters")?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelSpec;

    #[test]
    fn every_catalog_model_names_its_hub_id() {
        for name in names() {
            let id = hub_id(config_json(name).unwrap());
            assert!(id.as_deref().is_some_and(|id| id.split('/').count() == 2), "{name}: {id:?}");
        }
        assert_eq!(hub_id(config_json("gpt2").unwrap()).as_deref(), Some("openai-community/gpt2"));
    }

    #[test]
    fn table_lists_every_data_file_sorted() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/models");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("data/models exists")
            .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
            .filter_map(|f| f.strip_suffix(".json").map(str::to_string))
            .collect();
        files.sort();
        assert_eq!(
            names(),
            files,
            "catalog.rs MODELS must list exactly the files in data/models, sorted"
        );
        assert!(names().len() >= 45, "the catalog promises at least 45 models");
    }

    #[test]
    fn every_model_parses_and_matches_its_published_parameter_count() {
        for name in names() {
            let json = config_json(name).expect("listed");
            let spec = ModelSpec::from_hf_config(json).unwrap_or_else(|e| panic!("{name}: {e}"));
            if let Some(published) = published_parameters(json) {
                assert_eq!(spec.parameter_count(), published, "{name}: parameter count");
            }
        }
    }

    #[test]
    fn resolve_is_tolerant() {
        assert_eq!(resolve("Llama-3.1-8B").map(|(n, _)| n), Some("llama-3.1-8b"));
        assert_eq!(resolve("meta-llama/Llama-3.1-8B").map(|(n, _)| n), Some("llama-3.1-8b"));
        assert_eq!(resolve(" GPT2 ").map(|(n, _)| n), Some("gpt2"));
        assert_eq!(resolve("no-such-model"), None);
    }
}
