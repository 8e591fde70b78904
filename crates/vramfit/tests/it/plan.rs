//! Integration tests of `vramfit plan` and `vramfit check`: transcripts of the forum
//! thread's case, every emitted format (and that each is valid where its library reads it:
//! Python that parses, JSON and YAML that load), the impossible goal, and the errors.

use std::path::Path;

use insta_cmd::assert_cmd_snapshot;
use serde_json::Value;

use crate::cli::vramfit;

/// The forum thread: GPT-2 in fp32 with AdamW and eager attention, 16 × 512 on an RTX 3080.
const FORUM: &[&str] = &[
    "--model",
    "gpt2",
    "--gpu",
    "rtx-3080",
    "-b",
    "16",
    "-s",
    "512",
    "--precision",
    "fp32",
    "--attention",
    "eager",
];

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn stdout(args: &[&str]) -> (Option<i32>, String, String) {
    let output = vramfit().args(args).output().unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn plan_json(args: &[&str]) -> Value {
    let (code, out, err) = stdout(&[&["plan", "--format", "json"], args].concat());
    assert!(matches!(code, Some(0 | 1)), "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn the_forum_thread_check_agrees_with_what_the_user_saw() {
    let with_batch = |b: &str| {
        let args = ["check", "--model", "gpt2", "--gpu", "rtx-3080", "-b", b, "-s", "512"];
        stdout(&[&args[..], &["--precision", "fp32", "--attention", "eager"]].concat()).0
    };
    assert_eq!(with_batch("16"), Some(1));
    assert_eq!(with_batch("8"), Some(1));
    assert_eq!(with_batch("4"), Some(0));
}

#[test]
fn check_says_why_in_one_line_and_exits_1() {
    assert_cmd_snapshot!(vramfit().arg("check").args(FORUM));
    assert_cmd_snapshot!(vramfit().args([
        "check",
        "--quiet",
        "--model",
        "gpt2",
        "--gpu",
        "rtx-3080",
        "-b",
        "4",
        "-s",
        "512",
        "--precision",
        "fp32",
        "--attention",
        "eager"
    ]));
    assert_cmd_snapshot!(vramfit().args(["check", "--model", "gpt2"]));
}

#[test]
fn the_forum_thread_plan() {
    assert_cmd_snapshot!(vramfit().arg("plan").args(FORUM));
}

#[test]
fn the_forum_thread_plan_in_json() {
    let v = plan_json(FORUM);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["baseline"]["fits"], false);
    let plans = v["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    for p in plans {
        let micro = p["micro_batch"].as_u64().unwrap();
        let accum = p["grad_accum"].as_u64().unwrap();
        assert_eq!(micro * accum, 16);
        assert_eq!(p["fits"], true);
        assert!(p["headroom_bytes"].as_i64().unwrap() >= 0);
        for key in ["changes", "peak_allocated_bytes", "device_used_bytes", "relative_step_time"] {
            assert!(!p[key].is_null(), "{key}");
        }
    }
    assert!(v["candidates"].as_u64().unwrap() > 100);
    // The remedies: accumulation alone fits at micro-batch 4, as the user found.
    let remedies = v["remedies"].as_array().unwrap();
    assert!(remedies.iter().any(|r| r["change"]["to"] == "4 × 4" && r["fits"] == true));
}

/// Every format, for the first plan of the forum case, for a Llama plan with LoRA and the
/// chunked loss (Liger), and for a QLoRA plan, each checked where its reader reads it.
#[test]
fn every_emitted_format_is_valid_and_as_expected() {
    let llama: &[&str] = &[
        "--model",
        "llama-3.2-1b",
        "--gpu",
        "rtx-4090",
        "-b",
        "8",
        "-s",
        "2048",
        "--allow",
        "lora",
        "--forbid",
        "micro-batch",
    ];
    // Eight GPUs under DDP that do not hold Llama-3.1-8B: the plans shard it.
    let sharded: &[&str] = &[
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "8",
        "-b",
        "4",
        "-s",
        "4096",
        "--precision",
        "bf16-mixed",
        "--forbid",
        "paged-adamw-8bit,adamw-8bit,adafactor,every-4,every-3,every-2,full",
        "--keep",
        "loss",
    ];
    // Llama-3.1-8B on a 16 GB card: only its 4-bit base fits (QLoRA).
    let on_a_4080 = ["--model", "llama-3.1-8b", "--gpu", "rtx-4080", "-b", "1", "-s", "512"];
    let qlora = &[&on_a_4080[..], &["--precision", "bf16-mixed", "--allow", "lora"]].concat();
    // The user's own QLoRA on a 16-bit base (no prepare_model_for_kbit_training).
    let own = ["--quantization", "nf4", "--double-quant", "--lora-rank", "16"];
    let qlora16 = &[
        &on_a_4080[..],
        &["--precision", "bf16"],
        &own,
        &["--lora-targets", "all-linear", "--keep", "precision"],
    ]
    .concat();
    for (name, args) in [
        ("forum", FORUM),
        ("llama", llama),
        ("sharded", sharded),
        ("qlora", qlora),
        ("qlora16", qlora16),
    ] {
        for format in ["pytorch", "lightning", "hf-trainer", "deepspeed", "accelerate"] {
            let (code, text, err) = stdout(&[&["plan"], args, &["--emit", format]].concat());
            assert_eq!(code, Some(0), "{name} {format}: {err}");
            match format {
                "deepspeed" => {
                    let config: Value = serde_json::from_str(&text).unwrap();
                    let micro = config["train_micro_batch_size_per_gpu"].as_u64().unwrap();
                    let accum = config["gradient_accumulation_steps"].as_u64().unwrap();
                    let gpus = if name == "sharded" { 8 } else { 1 };
                    assert_eq!(config["train_batch_size"].as_u64(), Some(micro * accum * gpus));
                    assert!(err.lines().any(|l| l.starts_with("note: ")), "{err}");
                }
                "accelerate" => {
                    let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
                    let config = &docs[0];
                    let gpus = if name == "sharded" { 8 } else { 1 };
                    assert_eq!(config["num_processes"].as_i64(), Some(gpus));
                    match config["distributed_type"].as_str() {
                        Some("NO") => assert_eq!(gpus, 1),
                        Some("MULTI_GPU") => {}
                        Some("DEEPSPEED") => {
                            let stage = config["deepspeed_config"]["zero_stage"].as_i64();
                            assert!(matches!(stage, Some(1..=3)), "{text}");
                        }
                        Some("FSDP") => {
                            assert!(
                                config["fsdp_config"]["fsdp_sharding_strategy"].as_str().is_some()
                            );
                        }
                        other => panic!("{name}: distributed_type {other:?}"),
                    }
                    assert!(config["mixed_precision"].as_str().is_some());
                }
                _ => {
                    let source = vramfit_lint::SourceText::python(text.clone());
                    let settings = vramfit_lint::Settings::default();
                    let checked = vramfit_lint::check_source(&source, &settings, None);
                    assert!(
                        checked.syntax_errors.is_empty(),
                        "{name} {format}: {:?}\n{text}",
                        checked.syntax_errors
                    );
                    // vramfit's own linter finds no memory mistake in what vramfit writes.
                    let codes: Vec<&str> =
                        checked.diagnostics.iter().map(|d| d.rule.code()).collect();
                    assert!(codes.is_empty(), "{name} {format}: {codes:?}\n{text}");
                }
            }
            if name == "qlora16" {
                assert!(!text.contains("prepare_model_for_kbit_training("), "{format}: {text}");
            }
            insta::assert_snapshot!(format!("emit_{name}_{format}"), text);
        }
    }
}

#[test]
fn an_impossible_goal_gets_the_closest_setups_and_what_it_would_take() {
    let config = fixture("llama-3.1-405b/config.json");
    assert_cmd_snapshot!(vramfit().current_dir(fixture("")).args([
        "plan",
        "--model",
        "llama-3.1-405b/config.json",
        "--gpu",
        "rtx-3080",
        "-b",
        "1",
        "-s",
        "2048"
    ]));
    let v = plan_json(&["--model", &config, "--gpu", "rtx-3080", "-b", "1", "-s", "2048"]);
    assert_eq!(v["plans"], serde_json::json!([]));
    assert!(!v["closest"].as_array().unwrap().is_empty());
    // 405 B parameters: one ZeRO-3 rank's gathered layers alone overflow a 10 GB card, however
    // many share the states; on H200s a full estimate finds the number.
    let need = &v["requirement"];
    assert!(need["model_states_bytes"].as_u64() > need["usable_bytes"].as_u64());
    assert!(need["gpus_of_this_kind"].is_null());
    let v = plan_json(&["--model", &config, "--gpu", "h200", "-b", "1", "-s", "2048"]);
    let n = v["requirement"]["gpus_of_this_kind"].as_u64().unwrap();
    assert!(n.is_power_of_two() && (16..=128).contains(&n), "{n}");
    // A model whose states fit but whose activations do not: no sharding suggested.
    let v = plan_json(&[
        "--model",
        "llama-3.2-1b",
        "--gpu",
        "rtx-3080",
        "-b",
        "8",
        "-s",
        "2048",
        "--keep",
        "micro-batch,sharding",
        "--allow",
        "lora",
        // Its 4-bit base would leave room for the activations.
        "--forbid",
        "qlora",
    ]);
    assert!(v["requirement"]["gpus_of_this_kind"].is_null());
    assert!(!v["requirement"]["larger_gpu"].is_null());
}

#[test]
fn constraints_are_kept_and_contradictions_named() {
    let v = plan_json(
        &[FORUM, &["--keep", "precision", "--forbid", "adamw-8bit,paged-adamw-8bit"]].concat(),
    );
    for p in v["plans"].as_array().unwrap() {
        for c in p["changes"].as_array().unwrap() {
            assert_ne!(c["lever"], "precision");
            assert!(c["to"] != "adamw-8bit" && c["to"] != "paged-adamw-8bit");
        }
    }
    assert_cmd_snapshot!(vramfit().arg("plan").args(FORUM).args([
        "--keep",
        "optimizer",
        "--forbid",
        "adamw"
    ]));
    assert_cmd_snapshot!(
        vramfit().arg("plan").args(FORUM).args(["--allow", "lora", "--forbid", "lora"])
    );
    assert_cmd_snapshot!(vramfit().arg("plan").args(FORUM).args([
        "--keep",
        "micro-batch",
        "--global-batch",
        "12"
    ]));
    assert_cmd_snapshot!(vramfit().arg("plan").args(FORUM).args(["--forbid", "fp64"]));
    assert_cmd_snapshot!(vramfit().arg("plan").args(FORUM).args(["--keep", "speed"]));
    assert_cmd_snapshot!(vramfit().arg("plan").args(FORUM).args(["--allow", "precision"]));
}

#[test]
fn bad_input_is_one_error_line_and_a_hint() {
    assert_cmd_snapshot!(vramfit().args(["plan", "--model", "gpt2"]));
    assert_cmd_snapshot!(vramfit().args(["plan", "--params", "1B", "--gpu", "rtx-3080"]));
    assert_cmd_snapshot!(vramfit().arg("plan").args(FORUM).args(["--global-batch", "0"]));
    assert_cmd_snapshot!(
        vramfit().arg("plan").args(FORUM).args(["--emit", "pytorch", "--pick", "9"])
    );
    assert_cmd_snapshot!(vramfit().args([
        "plan",
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "rtx-3080",
        "--emit",
        "hf-trainer"
    ]));
}

#[test]
fn a_run_that_fits_can_be_made_faster() {
    let v = plan_json(&[
        "--model",
        "gpt2",
        "--gpu",
        "a100-80gb",
        "-b",
        "2",
        "--grad-accum",
        "8",
        "-s",
        "512",
    ]);
    assert_eq!(v["baseline"]["fits"], true);
    let first = &v["plans"][0];
    assert_eq!(first["micro_batch"], 16);
    assert!(first["relative_step_time"].as_f64().unwrap() < 1.0);
    assert!(first["tokens_per_second"].as_f64().unwrap() > 0.0);
}
