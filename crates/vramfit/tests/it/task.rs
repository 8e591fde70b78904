//! Integration tests of `vramfit estimate --task`: the heads transformers' `AutoModelFor*`
//! classes put on a model, and the tasks an architecture cannot do.

use insta_cmd::assert_cmd_snapshot;
use serde_json::Value;

use crate::cli::{estimate_json as json, vramfit};

/// The Hugging Face docs' memory study: BERT fine-tuned for sequence classification.
#[test]
fn bert_sequence_classification() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "bert-base-uncased",
        "--task",
        "seq-cls",
        "--batch",
        "32",
        "--seq-len",
        "128",
        "--precision",
        "fp32",
        "--gpu",
        "rtx-3080",
    ]));
}

/// A classifier has the base model's parameters and a small head, and no vocabulary logits.
#[test]
fn classifiers_count_their_head_and_make_no_vocabulary_logits() {
    let base = ["--model", "llama-3.2-1b", "--batch", "4", "--seq-len", "1024"];
    let lm = json(&base);
    let seq = json(&[&base[..], &["--task", "seq-cls", "--num-labels", "3"]].concat());
    let token = json(&[&base[..], &["--task", "token-cls"]].concat());
    let params = |v: &Value| v["parameters"].as_u64().unwrap();
    let peak = |v: &Value| v["peak_allocated_bytes"].as_u64().unwrap();
    // Llama 3.2 1B ties its output layer to the embedding: the score adds 2048 × labels.
    assert_eq!(params(&seq), params(&lm) + 2048 * 3);
    assert_eq!(params(&token), params(&lm) + 2048 * 2 + 2);
    assert!(peak(&seq) < peak(&lm), "{} !< {}", peak(&seq), peak(&lm));
    assert!(peak(&token) < peak(&lm));
}

#[test]
fn a_task_the_architecture_has_no_head_for_is_refused() {
    for (args, message) in [
        (&["--model", "llama-3.2-1b", "--task", "masked-lm"][..], "no masked-lm head"),
        (&["--model", "bert-base-uncased", "--task", "causal-lm"][..], "no causal-lm head"),
        (&["--model", "gpt2", "--task", "seq2seq"][..], "no seq2seq head"),
        (&["--model", "t5-small", "--task", "causal-lm"][..], "no causal-lm head"),
        (&["--model", "gpt2", "--task", "translation"][..], "unknown task 'translation'"),
        (
            &["--model", "bert-base-uncased", "--task", "seq-cls", "--num-labels", "0"][..],
            "num_labels = 0",
        ),
        (&["--model", "gpt2", "--num-labels", "3"][..], "needs a classification head"),
        (&["--params", "1B", "--task", "seq-cls"][..], "need a model"),
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

#[test]
fn masked_lm_on_a_decoder() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "llama-3.2-1b",
        "--task",
        "masked-lm"
    ]));
}
