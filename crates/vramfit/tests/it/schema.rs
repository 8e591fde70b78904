//! The JSON schemas of every `--format json` (`docs/schema/*.schema.json`), checked against
//! what the commands print over the test fixtures. The schemas are generated from the output
//! types (`schemars`, in the binary's `commands::schema`, whose own test keeps the files equal
//! to the types; `VRAMFIT_UPDATE_SCHEMA=1 cargo test -p vramfit schema` rewrites them); here,
//! as a second line, every real output must validate against its file and name its
//! `schema_version`, which is bumped when a key changes meaning or goes away. Also checked:
//! the same keys whatever the input (null when not computed), and sizes as numbers of bytes,
//! never display strings.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::cli::vramfit;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs vramfit in `dir` and parses its stdout (exit 0 or 1: a verdict, not an error).
fn run_json(dir: &Path, args: &[&str]) -> Value {
    let output = vramfit()
        .args(args)
        .current_dir(dir)
        .env("VRAMFIT_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .output()
        .unwrap();
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The JSON types of a value, as JSON Schema names them.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Every key path in a value (array items merged), to compare shapes.
fn key_paths(value: &Value, path: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                let child_path = format!("{path}/{key}");
                out.insert(child_path.clone());
                key_paths(child, &child_path, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| key_paths(v, &format!("{path}[]"), out)),
        _ => {}
    }
}

fn paths(value: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    key_paths(value, "", &mut out);
    out
}

/// Strings that are sizes for people (`14.08 GiB`, `512 MB`): none belong in JSON.
fn display_sizes(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::String(text) => {
            let mut words = text.split_whitespace();
            let number = words.next().is_some_and(|w| w.parse::<f64>().is_ok());
            let unit = words.next().is_some_and(|w| {
                ["B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"].contains(&w)
            });
            if number && unit {
                out.push(format!("{path}: {text:?}"));
            }
        }
        Value::Object(object) => {
            object.iter().for_each(|(k, v)| display_sizes(v, &format!("{path}/{k}"), out));
        }
        Value::Array(items) => {
            items.iter().for_each(|v| display_sizes(v, &format!("{path}[]"), out));
        }
        _ => {}
    }
}

/// Where `value` breaks `schema` (JSON Schema 2020-12, the subset `schemars` writes: `$ref`
/// into `$defs`, `type`, `properties`, `required`, `additionalProperties`, `items`, `anyOf`,
/// `oneOf`, `allOf`, `enum`, `const`, `minimum`), as `path: reason` lines.
fn violations(root: &Value, schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else { return };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.strip_prefix("#/$defs/").unwrap_or_else(|| panic!("{reference}"));
        violations(root, &root["$defs"][name], value, path, out);
    }
    if let Some(types) = schema.get("type") {
        let names: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let actual = type_name(value);
        let ok = names.contains(&actual) || (actual == "integer" && names.contains(&"number"));
        if !ok {
            out.push(format!("{path}: {actual}, not {names:?}"));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        out.push(format!("{path}: {value} not in {allowed:?}"));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        out.push(format!("{path}: {value} is not {constant}"));
    }
    if let Some(minimum) = schema.get("minimum").and_then(Value::as_f64)
        && value.as_f64().is_some_and(|v| v < minimum)
    {
        out.push(format!("{path}: {value} < {minimum}"));
    }
    let failures = |s: &Value| {
        let mut inner = Vec::new();
        violations(root, s, value, path, &mut inner);
        inner
    };
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        all.iter().for_each(|s| out.extend(failures(s)));
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(|s| failures(s).is_empty())
    {
        out.push(format!("{path}: matches none of anyOf"));
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = one.iter().filter(|s| failures(s).is_empty()).count();
        if matching != 1 {
            out.push(format!("{path}: matches {matching} of oneOf, not 1"));
        }
    }
    if let Value::Object(object) = value {
        let properties = schema.get("properties").and_then(Value::as_object);
        for key in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            let key = key.as_str().unwrap();
            if !object.contains_key(key) {
                out.push(format!("{path}: no {key}"));
            }
        }
        for (key, child) in object {
            let child_path = format!("{path}/{key}");
            match (properties.and_then(|p| p.get(key)), schema.get("additionalProperties")) {
                (Some(s), _) | (None, Some(s @ Value::Object(_))) => {
                    violations(root, s, child, &child_path, out);
                }
                (None, Some(Value::Bool(false))) => out.push(format!("{child_path}: not allowed")),
                (None, _) => {}
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (value, schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            violations(root, item_schema, item, &format!("{path}[{i}]"), out);
        }
    }
}

/// Checks outputs against `docs/schema/{name}.schema.json`, generated from the output types
/// (the binary's own test keeps the file equal to the types' schema).
#[track_caller]
fn check_generated_schema(name: &str, outputs: &[Value]) {
    let file = root().join(format!("docs/schema/{name}.schema.json"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    for output in outputs {
        assert_eq!(
            schema["title"],
            json!(format!(
                "vramfit {name} --format json, schema_version {}",
                output["schema_version"]
            )),
            "{name}: the output's schema_version is not the schema's"
        );
        let mut out = Vec::new();
        violations(&schema, &schema, output, "", &mut out);
        assert!(
            out.is_empty(),
            "{name}: the output breaks {}:\n{}",
            file.display(),
            out.join("\n")
        );
    }
}

#[test]
fn estimate_schema() {
    let dir = root();
    let invocations: [&[&str]; 8] = [
        &["--model", "gpt2"],
        &["--model", "gpt2", "--gpu", "a100-80gb"],
        &[
            "--model",
            "llama-3.2-1b",
            "-b",
            "4",
            "-s",
            "2048",
            "--gpu",
            "rtx-4090",
            "--optimizer-state-dtype",
            "fp32",
        ],
        &["--model", "mixtral-8x7b", "--checkpointing", "full", "--gpu", "h100-80gb"],
        &["--params", "1B"],
        &[
            "--params",
            "7B",
            "--precision",
            "bf16",
            "--optimizer-state-dtype",
            "int8",
            "--gpu",
            "24GiB",
        ],
        &[
            "--model",
            "llama-3.2-1b",
            "--gpus",
            "8",
            "--strategy",
            "zero3",
            "--offload",
            "optimizer",
            "--gpu",
            "h100-80gb",
        ],
        &["--params", "7B", "--gpus", "4", "--nodes", "2", "--strategy", "fsdp"],
    ];
    let outputs: Vec<Value> = invocations
        .iter()
        .map(|args| run_json(&dir, &[&["estimate", "--format", "json"], *args].concat()))
        .collect();
    // The same keys with or without --gpu, with a model or a bare parameter count.
    let first = paths(&outputs[0]);
    for (args, output) in invocations.iter().zip(&outputs) {
        assert_eq!(paths(output), first, "{args:?} has other keys");
        let mut sizes = Vec::new();
        display_sizes(output, "", &mut sizes);
        assert!(sizes.is_empty(), "{args:?}: {sizes:?}");
    }
    assert_eq!(outputs[2]["setup"]["optimizer_state_dtype"], "fp32");
    assert_eq!(outputs[5]["setup"]["optimizer_state_dtype"], "int8");
    assert!(outputs[0]["capacity_bytes"].is_null());
    check_generated_schema("estimate", &outputs);
    // The check catches what it is for: a display string where bytes belong, an unknown key,
    // a missing one.
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("docs/schema/estimate.schema.json")).unwrap(),
    )
    .unwrap();
    let broken = |edit: &dyn Fn(&mut Map<String, Value>)| {
        let mut output = outputs[0].clone();
        edit(output.as_object_mut().unwrap());
        let mut out = Vec::new();
        violations(&schema, &schema, &output, "", &mut out);
        out
    };
    assert!(
        !broken(&|o| drop(o.insert("peak_allocated_bytes".into(), json!("14.08 GiB")))).is_empty()
    );
    assert!(!broken(&|o| drop(o.insert("peak_bytes".into(), json!(1)))).is_empty());
    assert!(!broken(&|o| drop(o.remove("gpu"))).is_empty());
    assert!(!broken(&|o| o["ranks"]["worst_rank"] = json!("rank7")).is_empty());
}

/// An encoder-decoder's estimate (its setup says the target length) validates too.
#[test]
fn seq2seq_estimate_schema() {
    let dir = root();
    let output = run_json(
        &dir,
        &["estimate", "--format", "json", "--model", "flan-t5-base", "--attention", "eager"],
    );
    assert_eq!(output["setup"]["target_len"], 512);
    check_generated_schema("estimate", &[output]);
}

#[test]
fn doctor_schema() {
    let dir = root().join("crates/vramfit-doctor/tests/fixtures");
    let mut files: Vec<String> = Vec::new();
    for folder in ["messages", "logs"] {
        let mut names: Vec<String> = std::fs::read_dir(dir.join(folder))
            .unwrap()
            .map(|e| format!("{folder}/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        names.sort();
        files.extend(names);
    }
    for snapshot in
        ["memory_stats.json", "memory_summary.txt", "oom_fragmented.pickle", "two_devices.pickle"]
    {
        files.push(format!("snapshots/{snapshot}"));
    }
    let mut args = vec!["doctor", "--format", "json"];
    args.extend(files.iter().map(String::as_str));
    let all = run_json(&dir, &args);
    let one = run_json(&dir, &["doctor", "--format", "json", "logs/growing_across_steps.log"]);
    let predicted = run_json(
        &dir,
        &[
            "doctor",
            "--format",
            "json",
            "--model",
            "llama-3.2-1b",
            "-b",
            "8",
            "-s",
            "2048",
            "messages/007_pytorch_16417_comment_v2_shortage.txt",
        ],
    );
    // One shape for one input or many.
    for output in [&all, &one, &predicted] {
        assert!(output["inputs"].is_array());
    }
    // A size in the evidence is also a number of bytes, its phase a key of its own.
    let evidence: Vec<&Value> = predicted["inputs"][0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["diagnoses"].as_array().unwrap())
        .flat_map(|d| d["evidence"].as_array().unwrap())
        .collect();
    let peak = evidence.iter().find(|e| e["label"] == "predicted peak").unwrap();
    assert!(peak["bytes"].as_u64().unwrap() > 0, "{peak}");
    assert!(peak["phase"].is_string() && !peak["value"].as_str().unwrap().is_empty(), "{peak}");
    check_generated_schema("doctor", &[all, one, predicted]);
}

#[test]
fn lint_schema() {
    let dir = root().join("crates/vramfit-lint/tests");
    let findings = run_json(&dir, &["lint", "--format", "json", "fixtures", "notebooks"]);
    let clean = run_json(&root(), &["lint", "--format", "json", "python/vramfit"]);
    assert!(!findings["diagnostics"].as_array().unwrap().is_empty());
    assert_eq!(clean["diagnostics"], json!([]));
    for output in [&findings, &clean] {
        let mut sizes = Vec::new();
        display_sizes(output, "", &mut sizes);
        assert!(sizes.is_empty(), "{sizes:?}");
    }
    check_generated_schema("lint", &[findings, clean]);
}

#[test]
fn measure_schema() {
    let dir = root().join("crates/vramfit-measure/tests/fixtures");
    let trace = "synthetic-gpt2.trace.jsonl";
    let probe = "synthetic-gpt2.probe.jsonl";
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("report.json");
    let bare = run_json(&dir, &["measure", "--format", "json", "--replay", trace]);
    let full = run_json(
        &dir,
        &["measure", "--format", "json", "--replay", trace, "--probe", probe, "--estimate"],
    );
    let params = run_json(
        &dir,
        &["measure", "--format", "json", "--replay", trace, "--estimate", "--params", "124M"],
    );
    run_json(
        &dir,
        &[
            "measure",
            "--format",
            "json",
            "--replay",
            trace,
            "--probe",
            probe,
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let with_timeline: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let top = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<BTreeSet<_>>();
    for output in [&full, &params, &with_timeline] {
        assert_eq!(top(output), top(&bare));
    }
    for output in [&bare, &full, &params, &with_timeline] {
        let mut sizes = Vec::new();
        display_sizes(output, "", &mut sizes);
        assert!(sizes.is_empty(), "{sizes:?}");
    }
    check_generated_schema("measure", &[bare, full, params, with_timeline]);
}

#[test]
fn plan_schema() {
    let fixtures = root().join("crates/vramfit/tests/it/fixtures");
    let forum = [
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
    let invocations: [(&Path, Vec<&str>); 4] = [
        (&fixtures, forum.to_vec()),
        (
            &fixtures,
            vec!["--model", "llama-3.1-405b/config.json", "--gpu", "rtx-3080", "-s", "2048"],
        ),
        (
            &fixtures,
            vec![
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
            ],
        ),
        (&fixtures, vec!["--model", "gpt2", "--gpu", "a100-80gb", "-b", "2", "--grad-accum", "8"]),
    ];
    let outputs: Vec<Value> = invocations
        .iter()
        .map(|(dir, args)| run_json(dir, &[&["plan", "--format", "json"], &args[..]].concat()))
        .collect();
    let top = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<BTreeSet<_>>();
    for output in &outputs {
        assert_eq!(top(output), top(&outputs[0]));
        let mut sizes = Vec::new();
        display_sizes(output, "", &mut sizes);
        assert!(sizes.is_empty(), "{sizes:?}");
    }
    assert!(outputs[1]["plans"].as_array().unwrap().is_empty());
    assert!(!outputs[1]["requirement"].is_null());
    check_generated_schema("plan", &outputs);
}
