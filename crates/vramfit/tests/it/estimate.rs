//! Integration tests of `vramfit estimate`.

use std::path::Path;

use insta_cmd::assert_cmd_snapshot;
use serde_json::Value;

use crate::cli::{estimate_error, estimate_json as json, vramfit};

fn gib(bytes: &Value) -> String {
    format!("{:.2}", bytes.as_u64().unwrap() as f64 / (1u64 << 30) as f64)
}

/// The seed article's table: bf16 parameters and gradients, Adam with fp32 states
/// (8 B/param) and the 8-bit idealisation (2 B/param).
#[test]
fn seed_article_table() {
    let mut rows = Vec::new();
    for params in ["125M", "1B", "7B"] {
        let base = ["--params", params, "--precision", "bf16", "--optimizer", "adam"];
        let fp32 = json(&[&base[..], &["--optimizer-state-dtype", "fp32"]].concat());
        let int8 = json(&[&base[..], &["--optimizer-state-dtype", "int8"]].concat());
        rows.push(format!(
            "{params:>5}: adam {:>6} GiB   adam8bit {:>6} GiB",
            gib(&fp32["model_states_bytes"]),
            gib(&int8["model_states_bytes"])
        ));
    }
    assert_eq!(
        rows.join("\n"),
        " 125M: adam   1.40 GiB   adam8bit   0.70 GiB\n   \
            1B: adam  11.18 GiB   adam8bit   5.59 GiB\n   \
            7B: adam  78.23 GiB   adam8bit  39.12 GiB"
    );
}

/// "1B parameters in bf16 with Adam on a 24 GB card leaves about 12 GB for activations."
#[test]
fn seed_article_headroom_on_a_24_gib_card() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--params",
        "1B",
        "--precision",
        "bf16",
        "--optimizer",
        "adam",
        "--optimizer-state-dtype",
        "fp32",
        "--gpu",
        "24GiB",
    ]));
}

#[test]
fn built_in_model_on_a_gpu() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "llama-3.2-1b",
        "--batch",
        "4",
        "--seq-len",
        "2048",
        "--gpu",
        "rtx-4090",
    ]));
}

#[test]
fn the_forum_thread_setup_does_not_fit_a_3080() {
    // A transformer on an RTX 3080 (10 GB), batch 16, sequence 512: out of memory.
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "gpt2-medium",
        "--batch",
        "16",
        "--seq-len",
        "512",
        "--precision",
        "fp32",
        "--gpu",
        "rtx-3080",
    ]));
}

#[test]
fn json_has_the_documented_fields() {
    let v = json(&["--model", "qwen2.5-0.5b", "--batch", "2", "--gpu", "a100-80gb"]);
    for field in [
        "peak_allocated_bytes",
        "peak_phase",
        "model_states_bytes",
        "components",
        "capacity_bytes",
        "fits",
        "max_micro_batch",
    ] {
        assert!(!v[field].is_null(), "missing {field} in {v}");
    }
    assert!(
        v["peak_allocated_bytes"].as_u64().unwrap() > v["model_states_bytes"].as_u64().unwrap()
    );
    assert_eq!(v["fits"], Value::Bool(true));
}

#[test]
fn bf16_on_a_gpu_without_it_warns() {
    let v = json(&["--model", "gpt2", "--precision", "bf16-mixed", "--gpu", "t4"]);
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("no hardware bf16"), "{warnings}");
}

#[test]
fn larger_batch_needs_more_memory() {
    let peak = |b: &str| {
        json(&["--model", "gpt2", "--batch", b])["peak_allocated_bytes"].as_u64().unwrap()
    };
    assert!(peak("1") < peak("2") && peak("2") < peak("8"));
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn config_json_path_and_hub_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let config = include_str!("../../../vramfit-core/data/models/gpt2.json");
    let file = tmp.path().join("my-model/config.json");
    write(&file, config);
    let by_path = json(&["--model", file.to_str().unwrap()]);
    assert_eq!(by_path["model"], "my-model");

    let cache = tmp.path().join("hub");
    write(&cache.join("models--openai-community--gpt2/refs/main"), "0123abc");
    write(&cache.join("models--openai-community--gpt2/snapshots/0123abc/config.json"), config);
    let output = vramfit()
        .env("HF_HUB_CACHE", &cache)
        .args(["estimate", "--model", "openai-community/gpt2", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let by_hub: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(by_hub["peak_allocated_bytes"], by_path["peak_allocated_bytes"]);
}

/// Every bad input: one `error:` line naming the problem, one `hint:` line, exit code 2.
#[test]
fn bad_input_is_one_error_line_a_hint_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let gpt2: Value =
        serde_json::from_str(include_str!("../../../vramfit-core/data/models/gpt2.json")).unwrap();
    let variant = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut v = gpt2.clone();
        edit(&mut v);
        let path = tmp.path().join(name);
        std::fs::write(&path, v.to_string()).unwrap();
        path.to_str().unwrap().to_string()
    };
    let truncated = tmp.path().join("truncated.json");
    std::fs::write(&truncated, &include_str!("../../../vramfit-core/data/models/gpt2.json")[..200])
        .unwrap();
    let binary = tmp.path().join("weights.bin");
    std::fs::write(&binary, [0u8, 159, 146, 150, 255, 0, 1]).unwrap();
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("no model", vec![]),
        (
            "unknown allocator key",
            ["--model", "gpt2", "--alloc-conf", "expandable:True"].map(String::from).to_vec(),
        ),
        (
            "bad allocator number",
            ["--model", "gpt2", "--alloc-conf", "max_split_size_mb:abc"].map(String::from).to_vec(),
        ),
        (
            "margin larger than the card",
            ["--model", "gpt2", "--gpu", "rtx-3080", "--margin", "20GiB"]
                .map(String::from)
                .to_vec(),
        ),
        (
            "bad margin",
            ["--model", "gpt2", "--gpu", "t4", "--margin", "150%"].map(String::from).to_vec(),
        ),
        ("unknown model", vec!["--model".into(), "lama-3-8b".into()]),
        ("missing file", vec!["--model".into(), "nope/config.json".into()]),
        ("truncated config", vec!["--model".into(), truncated.to_str().unwrap().into()]),
        ("binary config", vec!["--model".into(), binary.to_str().unwrap().into()]),
        (
            "unknown architecture",
            vec!["--model".into(), variant("arch.json", &|v| v["model_type"] = "mamba9".into())],
        ),
        (
            "missing field",
            vec![
                "--model".into(),
                variant("missing.json", &|v| {
                    v.as_object_mut().unwrap().remove("n_embd");
                }),
            ],
        ),
        (
            "vocab 10^15",
            vec![
                "--model".into(),
                variant("vocab.json", &|v| v["vocab_size"] = 1_000_000_000_000_000u64.into()),
            ],
        ),
        (
            "zero layers",
            vec!["--model".into(), variant("layers.json", &|v| v["n_layer"] = 0.into())],
        ),
        ("batch 0", vec!["--model".into(), "gpt2".into(), "--batch".into(), "0".into()]),
        (
            "seq-len 2^40",
            vec!["--model".into(), "gpt2".into(), "--seq-len".into(), (1u64 << 40).to_string()],
        ),
        ("grad-accum 0", vec!["--model".into(), "gpt2".into(), "--grad-accum".into(), "0".into()]),
        ("unknown gpu", vec!["--model".into(), "gpt2".into(), "--gpu".into(), "rtx-9999".into()]),
        ("gpu without a unit", vec!["--model".into(), "gpt2".into(), "--gpu".into(), "24".into()]),
        ("gpu in bytes", vec!["--model".into(), "gpt2".into(), "--gpu".into(), "24B".into()]),
        (
            "svg in a missing folder",
            vec!["--model".into(), "gpt2".into(), "--svg".into(), "/nonexistent/x.svg".into()],
        ),
        (
            "unknown optimizer",
            vec!["--model".into(), "gpt2".into(), "--optimizer".into(), "adamq".into()],
        ),
        (
            "unknown precision",
            vec!["--model".into(), "gpt2".into(), "--precision".into(), "fp8".into()],
        ),
        ("bad params", vec!["--params".into(), "lots".into()]),
        ("absurd params", vec!["--params".into(), "1e30".into()]),
        ("unknown loop", ["--model", "gpt2", "--loop", "keras"].map(String::from).to_vec()),
        (
            "unknown zero-grad",
            ["--model", "gpt2", "--zero-grad", "maybe"].map(String::from).to_vec(),
        ),
        (
            "bad use-cache",
            ["--model", "gpt2", "--use-cache", "sometimes"].map(String::from).to_vec(),
        ),
        ("unknown target", ["--model", "gpt2", "--target", "tpu"].map(String::from).to_vec()),
        (
            "a gpu for the cpu oracle",
            ["--model", "gpt2", "--target", "cpu-oracle", "--gpu", "t4"].map(String::from).to_vec(),
        ),
        (
            "allocator settings for the cpu oracle",
            [
                "--model",
                "gpt2",
                "--target",
                "cpu-oracle",
                "--alloc-conf",
                "expandable_segments:True",
            ]
            .map(String::from)
            .to_vec(),
        ),
        (
            "bad cuda version",
            ["--model", "gpt2", "--gpu", "t4", "--cuda-version", "twelve"]
                .map(String::from)
                .to_vec(),
        ),
        (
            "bad cuda context",
            ["--model", "gpt2", "--gpu", "t4", "--cuda-context", "lots"].map(String::from).to_vec(),
        ),
    ];
    let mut transcript = String::new();
    for (what, args) in cases {
        let stderr = estimate_error(what, &args).replace(tmp.path().to_str().unwrap(), "[TMP]");
        transcript.push_str(&format!("# {what}\n{stderr}"));
    }
    insta::assert_snapshot!(transcript);
}

/// `--svg` draws the simulated step: the chart names the same peak and phase as the report,
/// and its layout is a snapshot (it is deterministic).
#[test]
fn svg_chart_of_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("step.svg");
    let args = ["--model", "gpt2", "--batch", "2", "--seq-len", "256", "--gpu", "rtx-4090"];
    let output = vramfit().arg("estimate").args(args).arg("--svg").arg(&svg).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report = json(&args);
    let chart = std::fs::read_to_string(&svg).unwrap();
    let phase = report["peak_phase"].as_str().unwrap().replace('_', " ");
    let peak = format!("peak {} GiB ({phase})", gib(&report["peak_allocated_bytes"]));
    assert!(chart.contains(&peak), "{peak} not in the chart");
    assert!(chart.contains("NVIDIA GeForce RTX 4090 capacity"));
    // The layout as a snapshot; the point lists (over 200 kB) are replaced by their length.
    let layout: Vec<String> = chart.lines().map(elide_points).collect();
    insta::assert_snapshot!(layout.join("\n"));
}

/// `points="x,y x,y ..."` → `points="[N points]"`.
fn elide_points(line: &str) -> String {
    let Some((head, rest)) = line.split_once(" points=\"") else { return line.to_owned() };
    let (points, tail) = rest.split_once('"').unwrap();
    format!("{head} points=\"[{} points]\"{tail}", points.split_whitespace().count())
}

#[test]
fn svg_needs_a_model() {
    assert_cmd_snapshot!(vramfit().args(["estimate", "--params", "1B", "--svg", "x.svg"]), @r"
    success: false
    exit_code: 2
    ----- stdout -----

    ----- stderr -----
    error: --svg needs a model: a bare parameter count has no step to draw
    hint: pass --model NAME, a config.json or ORG/NAME instead of --params
    ");
}

/// `24GB` is decimal (24×10⁹ bytes = 22.35 GiB): the capacity line and a warning say so.
#[test]
fn a_decimal_gpu_capacity_is_said_to_be_decimal() {
    assert_cmd_snapshot!(vramfit().args(["estimate", "--params", "1B", "--gpu", "24GB"]));
}

/// A card whose generation the context table does not know: one warning line saying which
/// default is used, and the estimate goes on (exit 0).
#[test]
fn an_unknown_gpu_generation_warns_which_context_is_assumed() {
    let output =
        vramfit().args(["estimate", "--model", "gpt2", "--gpu", "24GiB"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let warnings: Vec<&str> = stdout.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(
        warnings,
        [
            "warning: the CUDA context of a 24.00 GiB GPU is not known (no GPU generation): 512.0 MiB assumed; pass --cuda-context to set it"
        ]
    );
    let amd = json(&["--model", "gpt2", "--gpu", "mi300x"]);
    assert_eq!(amd["cuda_context_basis"], "default");
    assert_eq!(amd["warnings"].as_array().unwrap().len(), 1);
    let hopper = json(&["--model", "gpt2", "--gpu", "h100-sxm"]);
    assert_eq!(hopper["cuda_context_basis"], "derived");
    assert_eq!(hopper["warnings"].as_array().unwrap().len(), 0);
}

/// What the loop and the model keep is printed on one line and in JSON, and the flags move
/// the estimate the way PyTorch moves memory.
#[test]
fn the_loop_zero_grad_and_cache_assumptions_are_printed_and_used() {
    let output = vramfit().args(["estimate", "--model", "gpt2"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout.lines().nth(2),
        Some(
            "assumed: custom loop (outputs kept until the next forward) · zero_grad(set_to_none=True) · KV cache on (config.json's use_cache)"
        )
    );
    let default = json(&["--model", "gpt2", "-b", "4"]);
    assert_eq!(
        default["assumed"],
        serde_json::json!({"loop": "custom", "zero_grad": "none", "use_cache": true,
            "use_cache_from": "config", "target": "cuda"})
    );
    let peak = |extra: &[&str]| {
        let mut args = vec!["--model", "gpt2", "-b", "4"];
        args.extend(extra);
        json(&args)["peak_allocated_bytes"].as_u64().unwrap()
    };
    let custom = peak(&[]);
    let trainer = peak(&["--loop", "trainer"]);
    let zeros = peak(&["--zero-grad", "zeros"]);
    assert!(custom > trainer, "the custom loop keeps the logits");
    assert!(zeros > custom, "set_to_none=False keeps the gradients");
    let oracle = json(&["--model", "gpt2", "-b", "4", "--target", "cpu-oracle"]);
    assert_eq!(oracle["assumed"]["target"], "cpu-oracle");
    assert!(oracle["peak_reserved_bytes"].is_null(), "the CPU oracle has no caching allocator");
}

/// A training benchmark (the transformers docs' SDPA tables): fp16 weights, no optimizer,
/// `logits.sum()` for a loss. No optimizer state, 2-byte parameters, no fp32 log-probabilities,
/// and the names come back in the JSON setup.
#[test]
fn a_forward_and_backward_benchmark_has_no_optimizer_and_fp16_weights() {
    let base = ["--model", "bert-base-uncased", "--batch", "16", "--seq-len", "512"];
    let bench = json(
        &[&base[..], &["--precision", "fp16-true", "--optimizer", "none", "--loss", "logits-sum"]]
            .concat(),
    );
    let trained = json(&[&base[..], &["--precision", "bf16", "--optimizer", "sgd"]].concat());
    let params = bench["parameters"].as_u64().unwrap();
    assert_eq!(bench["components"]["optimizer_state"].as_u64(), Some(0));
    // Parameters and gradients in fp16, nothing else in the model states.
    assert_eq!(bench["model_states_bytes"].as_u64(), Some(4 * params));
    assert_eq!(bench["setup"]["precision"], "fp16-true");
    assert_eq!(bench["setup"]["optimizer"], "none");
    assert_eq!(bench["setup"]["loss"], "logits-sum");
    // The summed logits save nothing for backward where cross-entropy keeps its
    // log-probabilities: the benchmark's peak is below the trained step's.
    let peak = |v: &Value| v["peak_allocated_bytes"].as_u64().unwrap();
    assert!(peak(&bench) < peak(&trained), "{} >= {}", peak(&bench), peak(&trained));
}

/// `plan` searches training setups: a benchmark without an optimizer or a training loss is
/// refused with a hint to estimate it instead.
#[test]
fn plan_refuses_a_benchmark_setup() {
    for extra in [["--optimizer", "none"], ["--loss", "logits-sum"]] {
        let output = vramfit()
            .args(["plan", "--model", "gpt2", "--gpu", "rtx-4090"])
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains("error: plan searches training setups"), "{stderr}");
        assert!(
            stderr.contains("hint: estimate the benchmark with `vramfit estimate`"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Bad names for the new values are one-line errors that list the accepted ones.
#[test]
fn unknown_precision_optimizer_and_loss_list_the_new_names() {
    let p = estimate_error("precision", &["--model", "gpt2", "--precision", "fp16-pure"]);
    assert!(p.contains("fp16-true"), "{p}");
    let o = estimate_error("optimizer", &["--model", "gpt2", "--optimizer", "nothing"]);
    assert!(o.contains("none"), "{o}");
    let l = estimate_error("loss", &["--model", "gpt2", "--loss", "logitsum"]);
    assert!(l.contains("logits-sum"), "{l}");
}

/// The text output of a benchmark step: pure fp16, no optimizer, `logits.sum()`.
#[test]
fn a_forward_and_backward_benchmark_in_text() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "bert-base-uncased",
        "--batch",
        "16",
        "--seq-len",
        "512",
        "--precision",
        "fp16-true",
        "--optimizer",
        "none",
        "--loss",
        "logits-sum",
        "--gpu",
        "a100-80gb",
    ]));
}
