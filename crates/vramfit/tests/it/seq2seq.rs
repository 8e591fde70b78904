//! Integration tests of encoder-decoder models (T5, Flan-T5, mT5): `--task seq2seq`,
//! `--target-len`, and the settings refused for them.

use insta_cmd::assert_cmd_snapshot;
use serde_json::Value;

use crate::cli::{estimate_json as json, vramfit};

/// Flan-T5 base, 512 source tokens and 128 target tokens, on a 24 GB card.
#[test]
fn flan_t5_base_with_a_target_length() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "flan-t5-base",
        "--attention",
        "eager",
        "--batch",
        "8",
        "--seq-len",
        "512",
        "--target-len",
        "128",
        "--gpu",
        "24GiB",
    ]));
}

/// The target length defaults to the source length, is said in the JSON setup, and the
/// decoder's tokens cost memory: a longer target never needs less.
#[test]
fn the_target_length_defaults_to_the_source_length_and_costs_memory() {
    let base = ["--model", "t5-small", "--attention", "eager", "-b", "4", "-s", "256"];
    let peak = |v: &Value| v["peak_allocated_bytes"].as_u64().unwrap();
    let default = json(&base);
    let same = json(&[&base[..], &["--target-len", "256"]].concat());
    let short = json(&[&base[..], &["--target-len", "32"]].concat());
    let long = json(&[&base[..], &["--target-len", "1024"]].concat());
    assert_eq!(default["setup"]["target_len"], 256);
    assert_eq!(peak(&default), peak(&same));
    assert!(peak(&short) < peak(&same) && peak(&same) < peak(&long));
    assert_eq!(default["parameters"], 60_506_624);
    // --task seq2seq is the default head of T5.
    let task = json(&[&base[..], &["--task", "seq2seq"]].concat());
    assert_eq!(peak(&task), peak(&default));
    // A decoder-only model's JSON has no target length.
    assert!(json(&["--model", "gpt2"])["setup"].get("target_len").is_none());
}

/// What is refused, each in one line with a hint and exit code 2.
#[test]
fn refused_settings_are_one_error_line_a_hint_and_exit_2() {
    for (args, message) in [
        (&["--model", "gpt2", "--target-len", "64"][..], "has no decoder side"),
        (&["--model", "bert-base-uncased", "--target-len", "64"][..], "has no decoder side"),
        (
            &["--model", "t5-small", "--attention", "eager", "--target-len", "0"][..],
            "target-len = 0",
        ),
        (&["--model", "t5-small"][..], "--attention sdpa is not modelled"),
        (&["--model", "t5-small", "--attention", "flash"][..], "no FlashAttention-2"),
        (
            &[
                "--model",
                "t5-small",
                "--attention",
                "eager",
                "--lora-rank",
                "8",
                "--quantization",
                "nf4",
            ][..],
            "quantised bases",
        ),
        (&["--model", "t5-base", "--attention", "eager", "--loss", "chunked"][..], "--loss"),
        (&["--model", "t5-small", "--task", "seq-cls"][..], "not modelled yet"),
        (&["--model", "gpt2", "--task", "seq2seq"][..], "no seq2seq head"),
    ] {
        let output = vramfit().arg("estimate").args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 2, "{stderr}");
        assert!(lines[0].starts_with("error: ") && lines[0].contains(message), "{stderr}");
        assert!(lines[1].starts_with("hint: "), "{stderr}");
    }
}

/// `check` judges a T5 run; `plan` refuses encoder-decoder models in one line.
#[test]
fn check_takes_t5_and_plan_refuses_it() {
    let fits = vramfit()
        .args(["check", "--model", "t5-small", "--attention", "eager", "--gpu", "24GiB"])
        .args(["--target-len", "128"])
        .output()
        .unwrap();
    assert_eq!(fits.status.code(), Some(0), "{}", String::from_utf8_lossy(&fits.stderr));
    let too_big = vramfit()
        .args(["check", "--model", "flan-t5-xl", "--attention", "eager", "--gpu", "8GiB"])
        .output()
        .unwrap();
    assert_eq!(too_big.status.code(), Some(1));
    let plan = vramfit()
        .args(["plan", "--model", "t5-small", "--gpu", "24GiB", "--global-batch", "8"])
        .output()
        .unwrap();
    assert_eq!(plan.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&plan.stderr);
    assert!(stderr.starts_with("error: the planner does not search encoder-decoder"), "{stderr}");
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
}

/// LoRA through PEFT on T5: its default targets are every `q` and `v` (self-attention of both
/// stacks and the decoder's cross-attention), 1,769,472 parameters at rank 16 on Flan-T5 base
/// (PEFT's `print_trainable_parameters`); the base is frozen, so far less memory.
#[test]
fn lora_on_flan_t5_trains_its_q_and_v_adapters() {
    let base = ["--model", "flan-t5-base", "--attention", "eager", "-b", "4", "-s", "512"];
    let full = json(&base);
    let lora = json(&[&base[..], &["--lora-rank", "16"]].concat());
    assert_eq!(lora["trainable_parameters"], 1_769_472);
    let peak = |v: &Value| v["peak_allocated_bytes"].as_u64().unwrap();
    assert!(peak(&lora) < peak(&full));
}

/// Several GPUs: FSDP and ZeRO-3 shard T5's layers (encoder and decoder blocks alike) and
/// its root (the shared embedding, the bias tables, the final norms); each GPU needs less than
/// one GPU alone, DDP more (its gradient buckets).
#[test]
fn t5_on_several_gpus() {
    let base = ["--model", "flan-t5-base", "--attention", "eager", "-b", "4", "-s", "512"];
    let peak = |extra: &[&str]| {
        json(&[&base[..], extra].concat())["peak_allocated_bytes"].as_u64().unwrap()
    };
    let one = peak(&[]);
    assert!(peak(&["--gpus", "4", "--strategy", "fsdp"]) < one);
    assert!(peak(&["--gpus", "4", "--strategy", "zero3"]) < one);
    assert!(peak(&["--gpus", "4", "--strategy", "ddp"]) > one);
}
