//! `--model FILE.toml`: a transformer described in TOML (examples/).

use std::path::{Path, PathBuf};

use insta_cmd::assert_cmd_snapshot;
use serde_json::Value;

use crate::cli::{estimate_error, vramfit};

/// The repository root: the examples are run by their relative paths, as the README shows.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `vramfit estimate ARGS --format json` from the repository root.
fn json(args: &[&str]) -> Value {
    let output = vramfit()
        .current_dir(root())
        .arg("estimate")
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("valid JSON")
}

/// The seed article's `Stapel`: a checkpointed stack of blocks, here the article's 1B model in
/// bf16 with Adam's fp32 states on a 24 GB card (examples/stapel.toml).
#[test]
fn stapel_example_on_a_24_gb_card() {
    assert_cmd_snapshot!(vramfit().current_dir(root()).args([
        "estimate",
        "--model",
        "examples/stapel.toml",
        "--checkpointing",
        "full",
        "--precision",
        "bf16",
        "--optimizer",
        "adam",
        "--optimizer-state-dtype",
        "fp32",
        "--batch",
        "8",
        "--seq-len",
        "1024",
        "--gpu",
        "rtx-4090",
    ]));
}

#[test]
fn json_says_the_model_came_from_a_toml_file() {
    let report = json(&["--model", "examples/stapel.toml", "--checkpointing", "full"]);
    assert_eq!(report["model"], "stapel");
    assert_eq!(
        report["model_source"],
        serde_json::json!({"kind": "toml", "path": "examples/stapel.toml", "architecture": "gpt2"})
    );
    // The article's class with these blocks, counted by torch (validation/stapel_parameters.py).
    assert_eq!(report["parameters"], 1_011_572_736_u64);
    // A plain module builds no KV cache, whatever checkpointing says.
    assert_eq!(report["assumed"]["use_cache"], false);
    assert_eq!(report["assumed"]["use_cache_from"], "toml");
    let builtin = json(&["--model", "gpt2"]);
    assert_eq!(
        builtin["model_source"],
        serde_json::json!({"kind": "built-in", "path": null, "architecture": "gpt2"})
    );
    assert_eq!(
        json(&["--params", "1B"])["model_source"],
        serde_json::json!({"kind": "params", "path": null, "architecture": null})
    );
}

/// The TOML of a Hugging Face model gives its config.json's estimate to the byte, setup by
/// setup: everything but the model's name and source is identical.
#[test]
fn a_toml_model_gives_the_estimate_of_its_config_json() {
    let setups: [&[&str]; 5] = [
        &["--batch", "4", "--seq-len", "512", "--precision", "fp32", "--attention", "eager"],
        &["--batch", "2", "--seq-len", "1024", "--gpu", "rtx-4090"],
        &["--batch", "8", "--checkpointing", "full", "--optimizer", "adamw-8bit"],
        &["--lora-rank", "16", "--lora-targets", "all-linear", "--gpu", "24GiB"],
        &["--task", "seq-cls", "--num-labels", "3", "--precision", "bf16"],
    ];
    for (toml, builtin) in
        [("examples/gpt2.toml", "gpt2"), ("examples/llama-3.2-1b.toml", "llama-3.2-1b")]
    {
        for setup in setups {
            let common = [setup, &["--use-cache", "false"]].concat();
            let mut from_toml = json(&[&["--model", toml][..], &common].concat());
            let mut from_config = json(&[&["--model", builtin][..], &common].concat());
            for report in [&mut from_toml, &mut from_config] {
                let object = report.as_object_mut().unwrap();
                object.remove("model");
                object.remove("model_source");
            }
            assert_eq!(
                serde_json::to_string_pretty(&from_toml).unwrap(),
                serde_json::to_string_pretty(&from_config).unwrap(),
                "{toml} {setup:?}"
            );
        }
    }
}

/// Every inconsistent TOML is one `error:` line naming the field and one `hint:` line, exit 2.
#[test]
fn inconsistent_toml_models_are_one_line_errors() {
    let stapel = std::fs::read_to_string(root().join("examples/stapel.toml")).unwrap();
    let with = |key: &str, line: &str| -> String {
        let mut lines: Vec<String> = stapel
            .lines()
            .filter(|l| !l.starts_with(&format!("{key} =")))
            .map(String::from)
            .collect();
        lines.push(line.to_string());
        lines.join("\n")
    };
    let cases = [
        ("heads not dividing the width", with("heads", "heads = 12")),
        ("kv heads not dividing the heads", with("kv_heads", "kv_heads = 5")),
        ("zero layers", with("layers", "layers = 0")),
        ("a negative vocabulary", with("vocab_size", "vocab_size = -50304")),
        ("a width beyond any model", with("hidden_size", "hidden_size = 4294967296")),
        ("a fractional FFN size", with("ffn_size", "ffn_size = 8192.5")),
        ("a dropout of 1", with("dropout", "dropout = 1.0")),
        ("a config.json key", with("n_head", "n_head = 16")),
        ("a misspelt key", with("tied_embedding", "tied_embedding = true")),
        ("a missing key", with("ffn_size", "")),
        ("no table rows for learned positions", with("max_positions", "")),
        ("an unknown ffn", with("ffn", "ffn = \"geglu\"")),
        ("no such architecture", with("norm", "norm = \"rmsnorm\"")),
        ("no bias in the gpt2 layout", with("bias", "bias = false")),
        ("grouped-query attention in the gpt2 layout", with("kv_heads", "kv_heads = 4")),
        ("not TOML", "vocab_size = 50304\nhidden_size 2048\n".to_string()),
        ("a JSON config named .toml", "{\"model_type\": \"gpt2\"}".to_string()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut transcript = String::new();
    for (what, text) in cases {
        let path = dir.path().join("model.toml");
        std::fs::write(&path, text).unwrap();
        let stderr = estimate_error(what, &[std::ffi::OsStr::new("--model"), path.as_os_str()])
            .replace(dir.path().to_str().unwrap(), "[TMP]");
        transcript.push_str(&format!("# {what}\n{stderr}"));
    }
    let missing = estimate_error("no such file", &["--model", "no/such/model.toml"]);
    transcript.push_str(&format!("# no such file\n{missing}"));
    insta::assert_snapshot!(transcript);
}

/// `plan` searches a TOML model's setups like any other; `--emit` refuses it (its code loads a
/// Hugging Face model), one error line and one hint, exit 2.
#[test]
fn plan_works_on_a_toml_model_and_emit_refuses_it() {
    let args = ["plan", "--model", "examples/stapel.toml", "--gpu", "rtx-4090"];
    let plan = vramfit()
        .current_dir(root())
        .args(args)
        .args(["--global-batch", "16", "--seq-len", "1024", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(plan.status.code(), Some(0), "{}", String::from_utf8_lossy(&plan.stderr));
    let report: Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert!(!report["plans"].as_array().unwrap().is_empty());

    let emit = vramfit()
        .current_dir(root())
        .args(args)
        .args(["--global-batch", "16", "--seq-len", "1024", "--emit", "pytorch"])
        .output()
        .unwrap();
    assert_eq!(emit.status.code(), Some(2));
    assert!(emit.stdout.is_empty());
    let stderr = String::from_utf8(emit.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].starts_with("error: --emit writes code that loads a Hugging Face model"));
    assert!(lines[1].starts_with("hint: "));
}
