//! DeepSeek-V2/V3 through the CLI: the catalog models, the LoRA targets PEFT would wrap beyond
//! the linear layers, several GPUs, and configs whose latent-attention sizes contradict.

use insta_cmd::assert_cmd_snapshot;
use serde_json::Value;

use crate::cli::{estimate_error, estimate_json as json, vramfit};

/// Each catalog model resolves with transformers' parameter count.
#[test]
fn catalog_models_have_transformers_parameter_counts() {
    for (model, count) in [
        ("deepseek-v2-lite", 15_706_484_224u64),
        ("deepseek-ai/DeepSeek-V2", 235_741_434_880),
        ("deepseek-v3", 671_026_404_352),
        ("moonshotai/Moonlight-16B-A3B", 15_960_108_544),
    ] {
        let j = json(&["--model", model, "--batch", "1", "--seq-len", "512", "--gpu", "h100-80gb"]);
        assert_eq!(j["parameters"], count, "{model}");
    }
}

/// The text of one estimate (V2-Lite, no query LoRA), and V3's fp8 checkpoint warning.
#[test]
fn v2_lite_estimate_in_text() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "deepseek-v2-lite",
        "--batch",
        "1",
        "--seq-len",
        "4096",
        "--precision",
        "bf16-mixed",
        "--checkpointing",
        "full",
        "--gpu",
        "h100-80gb",
    ]));
    let j =
        json(&["--model", "deepseek-v3", "--gpus", "64", "--nodes", "8", "--strategy", "zero3"]);
    let warnings = j["warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("fp8")), "{warnings:?}");
}

/// Longer sequences need more; sharding over more GPUs never needs more per GPU.
#[test]
fn memory_grows_with_the_sequence_and_shrinks_with_zero3_ranks() {
    let peak = |args: &[&str]| -> u64 {
        let mut all = vec!["--model", "deepseek-v2-lite", "--precision", "bf16-mixed"];
        all.extend_from_slice(args);
        json(&all)["peak_allocated_bytes"].as_u64().unwrap()
    };
    assert!(peak(&["--seq-len", "2048"]) < peak(&["--seq-len", "4096"]));
    let zero3 = |gpus: &str| peak(&["--seq-len", "4096", "--gpus", gpus, "--strategy", "zero3"]);
    assert!(zero3("16") <= zero3("8"));
    for strategy in ["ddp", "zero1", "zero2", "fsdp"] {
        let j = json(&["--model", "deepseek-v2-lite", "--gpus", "8", "--strategy", strategy]);
        assert!(j["peak_allocated_bytes"].as_u64().unwrap() > 0, "{strategy}");
    }
}

/// PEFT's all-linear wraps DeepSeek's 3-D experts and router: refused; named linear modules
/// work.
#[test]
fn lora_all_linear_is_refused_and_named_modules_work() {
    let err = estimate_error(
        "all-linear",
        &["--model", "deepseek-v2-lite", "--lora-rank", "16", "--lora-targets", "all-linear"],
    );
    assert!(err.contains("3-D expert tensors"), "{err}");
    assert!(err.contains("kv_b_proj"), "{err}");
    let j = json(&[
        "--model",
        "deepseek-v2-lite",
        "--lora-rank",
        "16",
        "--lora-targets",
        "q_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj",
    ]);
    assert!(j["peak_allocated_bytes"].as_u64().unwrap() > 0);
}

/// Latent-attention sizes that contradict each other: one line, a hint, exit 2.
#[test]
fn inconsistent_latent_attention_sizes_are_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let base: Value = serde_json::from_str(include_str!(
        "../../../vramfit-core/data/models/deepseek-v2-lite.json"
    ))
    .unwrap();
    let mut transcript = String::new();
    for (what, key, value) in [
        ("odd rotary width", "qk_rope_head_dim", serde_json::json!(63)),
        ("zero latent rank", "kv_lora_rank", serde_json::json!(0)),
        ("fewer key/value heads", "num_key_value_heads", serde_json::json!(4)),
        ("groups not dividing the experts", "n_group", serde_json::json!(5)),
        ("unknown routing", "topk_method", serde_json::json!("noaux")),
    ] {
        let mut v = base.clone();
        v[key] = value;
        if key == "n_group" {
            v["topk_method"] = serde_json::json!("group_limited_greedy");
        }
        let path = tmp.path().join(format!("{key}.json"));
        std::fs::write(&path, v.to_string()).unwrap();
        let err = estimate_error(what, &["--model", path.to_str().unwrap()]);
        let err = err.replace(tmp.path().to_str().unwrap(), "[TMP]");
        transcript.push_str(&format!("# {what}\n{err}"));
    }
    insta::assert_snapshot!(transcript);
}
