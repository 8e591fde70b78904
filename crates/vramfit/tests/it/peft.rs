//! Integration tests of `vramfit estimate` with LoRA adapters and frozen parts.

use insta_cmd::assert_cmd_snapshot;
use serde_json::Value;

use crate::cli::{estimate_error, estimate_json as json, vramfit};

/// "Can I fine-tune Llama-3.1-8B on one 24 GB card with LoRA?": adapters on every linear, a
/// pure-bf16 base, checkpointing.
#[test]
fn lora_on_llama_3_1_8b_on_a_24_gib_card() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "llama-3.1-8b",
        "--precision",
        "bf16",
        "--batch",
        "1",
        "--seq-len",
        "2048",
        "--checkpointing",
        "full",
        "--lora-rank",
        "16",
        "--lora-alpha",
        "32",
        "--lora-targets",
        "all-linear",
        "--lora-dropout",
        "0.05",
        "--gpu",
        "rtx-4090",
    ]));
}

#[test]
fn frozen_embeddings_and_first_layers() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "llama-3.2-1b",
        "--batch",
        "2",
        "--seq-len",
        "1024",
        "--freeze",
        "embeddings,layers:8",
    ]));
}

/// PEFT's `print_trainable_parameters()` for r=16 on all linears of Llama-3-8B:
/// "trainable params: 41,943,040 || all params: 8,072,204,288".
#[test]
fn json_reports_trainable_parameters_as_peft_prints_them() {
    let v = json(&["--model", "llama-3.1-8b", "--lora-rank", "16", "--lora-targets", "all-linear"]);
    assert_eq!(v["trainable_parameters"], 41_943_040);
    assert_eq!(v["parameters_with_adapters"], 8_072_204_288u64);
    assert_eq!(v["setup"]["lora"]["rank"], 16);
    assert_eq!(v["setup"]["lora"]["targets"], "all-linear");
    let full = json(&["--model", "llama-3.1-8b"]);
    assert!(full.get("trainable_parameters").is_none());
    assert!(full["setup"].get("lora").is_none() && full["setup"].get("freeze").is_none());
    assert!(v["model_states_bytes"].as_u64() < full["model_states_bytes"].as_u64());
}

/// The targets PEFT's default picks (q and v) cost less than all linears, and dropout adds the
/// adapters' dropped inputs.
#[test]
fn more_targets_and_dropout_cost_more() {
    let base =
        ["--model", "llama-3.2-1b", "--batch", "2", "--seq-len", "1024", "--lora-rank", "16"];
    let peak = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        json(&args)["peak_allocated_bytes"].as_u64().unwrap()
    };
    let qv = peak(&[]);
    let all = peak(&["--lora-targets", "all-linear"]);
    let all_dropout = peak(&["--lora-targets", "all-linear", "--lora-dropout", "0.1"]);
    assert!(qv < all && all < all_dropout, "{qv} {all} {all_dropout}");
}

#[test]
fn bad_lora_and_freeze_input_is_one_error_line_a_hint_and_exit_2() {
    let cases: &[(&str, &[&str])] = &[
        ("unknown target", &["--model", "gpt2", "--lora-rank", "8", "--lora-targets", "c_attn"]),
        ("empty targets", &["--model", "gpt2", "--lora-rank", "8", "--lora-targets", ","]),
        ("rank 0", &["--model", "gpt2", "--lora-rank", "0"]),
        ("dropout 1", &["--model", "gpt2", "--lora-rank", "8", "--lora-dropout", "1"]),
        ("alpha alone", &["--model", "gpt2", "--lora-alpha", "16"]),
        (
            "unknown module to save",
            &["--model", "gpt2", "--lora-rank", "8", "--modules-to-save", "score"],
        ),
        (
            "lm_head of a tied model",
            &["--model", "gpt2", "--lora-rank", "8", "--modules-to-save", "lm_head"],
        ),
        ("freeze with lora", &["--model", "gpt2", "--lora-rank", "8", "--freeze", "embeddings"]),
        ("unknown freeze part", &["--model", "gpt2", "--freeze", "attention"]),
        ("too many frozen layers", &["--model", "gpt2", "--freeze", "layers:13"]),
        ("lora on a bare count", &["--params", "1B", "--lora-rank", "8"]),
        ("default targets on mixtral", &["--model", "mixtral-8x7b", "--lora-rank", "8"]),
        (
            "dropout on mixtral's experts",
            &[
                "--model",
                "mixtral-8x7b",
                "--lora-rank",
                "8",
                "--lora-targets",
                "all-linear",
                "--lora-dropout",
                "0.05",
            ],
        ),
        (
            "half of a fused expert projection",
            &[
                "--model",
                "qwen3-30b-a3b",
                "--lora-rank",
                "8",
                "--lora-targets",
                "gate_proj,down_proj",
            ],
        ),
        (
            "dora on mixtral's experts",
            &[
                "--model",
                "mixtral-8x7b",
                "--lora-rank",
                "8",
                "--lora-targets",
                "w1,w2,w3",
                "--use-dora",
            ],
        ),
    ];
    let mut transcript = String::new();
    for (what, args) in cases {
        let stderr = estimate_error(what, args);
        transcript.push_str(&format!("# {what}\n{stderr}"));
    }
    insta::assert_snapshot!(transcript);
}

/// QLoRA: the quantised base is smaller than the fp32-upcast LoRA base, double quantisation
/// smaller still, and the trainable count is the adapters'.
#[test]
fn qlora_stores_the_base_in_bitsandbytes_4_bit() {
    let base = [
        "--model",
        "llama-3.2-1b",
        "--seq-len",
        "512",
        "--checkpointing",
        "full",
        "--lora-rank",
        "16",
        "--lora-targets",
        "all-linear",
    ];
    let lora = json(&base);
    let nf4 = json(&[&base[..], &["--quantization", "nf4"]].concat());
    let dq = json(&[&base[..], &["--quantization", "nf4", "--double-quant"]].concat());
    let states = |v: &Value| v["model_states_bytes"].as_u64().unwrap();
    assert!(states(&dq) < states(&nf4), "{dq} vs {nf4}");
    assert!(states(&nf4) < states(&lora));
    assert_eq!(nf4["setup"]["quantization"]["kind"], "nf4");
}

#[test]
fn bad_quantization_input_is_one_error_line_a_hint_and_exit_2() {
    let lora = ["--model", "llama-3.2-1b", "--lora-rank", "8"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { [&lora[..], extra].concat() };
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("without lora", vec!["--model", "llama-3.2-1b", "--quantization", "nf4"]),
        ("unknown type", with(&["--quantization", "nf3"])),
        ("double quant with int8", with(&["--quantization", "int8", "--double-quant"])),
        ("double quant alone", with(&["--double-quant"])),
        ("compute dtype not a float", with(&["--quantization", "nf4", "--compute-dtype", "int8"])),
        ("unknown skip module", with(&["--quantization", "nf4", "--quant-skip-modules", "fc9"])),
        ("bf16 compute on a T4", with(&["--quantization", "nf4", "--gpu", "t4"])),
        ("zero3", with(&["--quantization", "nf4", "--gpus", "2", "--strategy", "zero3"])),
        ("dora on a quantised base", with(&["--quantization", "nf4", "--use-dora"])),
    ];
    let mut transcript = String::new();
    for (what, args) in &cases {
        let stderr = estimate_error(what, args);
        transcript.push_str(&format!("# {what}\n{stderr}"));
    }
    insta::assert_snapshot!(transcript);
}

/// QLoRA on a 16-bit base (`--precision bf16`): no `prepare_model_for_kbit_training`, so the
/// parameters that stay unquantised keep 2 bytes each instead of prepare's fp32 upcast, and a
/// warning says which run this is.
#[test]
fn qlora_on_a_16_bit_base_keeps_the_other_parameters_in_16_bits() {
    let qlora = ["--model", "llama-3.2-1b", "--lora-rank", "8", "--quantization", "nf4"];
    let pure = json(&[&qlora[..], &["--precision", "bf16"]].concat());
    let mixed = json(&[&qlora[..], &["--precision", "bf16-mixed"]].concat());
    let params = |r: &Value| r["components"]["parameters"].as_u64().unwrap();
    // Llama 3.2 1B's unquantised parameters: the 128,256 x 2,048 tied embedding and the norms,
    // 2 bytes each under bf16 instead of 4: at least 500 MiB less.
    assert!(
        params(&pure) + (500 << 20) < params(&mixed),
        "{} vs {}",
        params(&pure),
        params(&mixed)
    );
    let warnings = pure["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("without prepare_model_for_kbit_training")),
        "{warnings:?}"
    );
    assert!(
        !mixed["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("without prepare_model_for_kbit_training"))
    );
}
