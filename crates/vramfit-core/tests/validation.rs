//! Proof of accuracy: every case the PyTorch oracle measured (`validation/results.jsonl`) is
//! estimated with `Target::CpuOracle`, and the test fails when any prediction is off by more
//! than 5% of the oracle's peak. It prints the table and the median and worst error; the
//! ignored test `write_accuracy_md` writes the same table to `ACCURACY.md`.

use std::fmt::Write as _;

use serde_json::Value;
use vramfit_core::{
    Attention, Checkpointing, DType, ModelSpec, Optimizer, OptimizerImpl, Precision, Target,
    TrainSetup, catalog, estimate::estimate_with_autocast_rules,
};

const TOLERANCE_PERCENT: f64 = 5.0;

struct Row {
    id: String,
    architecture: String,
    oracle: u64,
    predicted: u64,
    oracle_phase: String,
    predicted_phase: String,
}

impl Row {
    fn error_percent(&self) -> f64 {
        (self.predicted as f64 - self.oracle as f64) / self.oracle as f64 * 100.0
    }
}

fn str_field<'a>(case: &'a Value, key: &str) -> &'a str {
    case.get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("case lacks string '{key}': {case}"))
}

fn u64_field(case: &Value, key: &str) -> u64 {
    case.get(key)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("case lacks integer '{key}': {case}"))
}

/// The catalog config, with the case's `config_overrides` applied.
fn spec_for(case: &Value) -> ModelSpec {
    let model = str_field(case, "model");
    let json = catalog::config_json(model).unwrap_or_else(|| panic!("no catalog model '{model}'"));
    let mut config: Value = serde_json::from_str(json).expect("catalog json");
    if let (Some(overrides), Some(map)) =
        (case.get("config_overrides").and_then(Value::as_object), config.as_object_mut())
    {
        for (k, v) in overrides {
            map.insert(k.clone(), v.clone());
        }
    }
    ModelSpec::from_hf_config(&config.to_string()).unwrap_or_else(|e| panic!("{model}: {e}"))
}

fn setup_for(case: &Value) -> TrainSetup {
    TrainSetup {
        micro_batch: u64_field(case, "batch"),
        seq_len: u64_field(case, "seq_len"),
        precision: str_field(case, "precision").parse::<Precision>().expect("precision"),
        optimizer: str_field(case, "optimizer").parse::<Optimizer>().expect("optimizer"),
        optimizer_state_dtype: case
            .get("optimizer_state_dtype")
            .and_then(Value::as_str)
            .map(|d| DType::parse(d).expect("state dtype")),
        attention: str_field(case, "attention").parse::<Attention>().expect("attention"),
        checkpointing: str_field(case, "checkpointing").parse::<Checkpointing>().expect("ckpt"),
        grad_accum: case.get("grad_accum").and_then(Value::as_u64).unwrap_or(1),
        target: Target::CpuOracle,
        optimizer_impl: if case
            .get("notes")
            .and_then(Value::as_str)
            .is_some_and(|n| n.contains("foreach=false"))
        {
            OptimizerImpl::ForLoop
        } else {
            OptimizerImpl::Foreach
        },
    }
}

fn oracle_phase(case: &Value) -> String {
    let notes = case.get("notes").and_then(Value::as_str).unwrap_or_default();
    notes.split("; ").find_map(|n| n.strip_prefix("peak_phase=")).unwrap_or("?").to_string()
}

const RESULTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/results.jsonl");
const RESULTS_CUDA_AUTOCAST: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/results-cuda-autocast.jsonl");

fn rows() -> Vec<Row> {
    rows_from(RESULTS, false)
}

/// `cuda_autocast`: the file was produced with CUDA's autocast op lists emulated on the CPU.
fn rows_from(path: &str, cuda_autocast: bool) -> Vec<Row> {
    let text = std::fs::read_to_string(path).expect("oracle results are committed");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let case: Value = serde_json::from_str(line).expect("a JSON line");
            let spec = spec_for(&case);
            let setup = setup_for(&case);
            let e = estimate_with_autocast_rules(&spec, &setup, cuda_autocast)
                .unwrap_or_else(|err| panic!("{line}: {err}"));
            Row {
                id: str_field(&case, "id").to_string(),
                architecture: str_field(&case, "architecture").to_string(),
                oracle: u64_field(&case, "peak_bytes"),
                predicted: e.peak_allocated.get(),
                oracle_phase: oracle_phase(&case),
                predicted_phase: e.peak_phase.name().to_string(),
            }
        })
        .collect()
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

struct Summary {
    median: f64,
    worst: f64,
    worst_id: String,
    cases: usize,
    architectures: Vec<String>,
}

fn summarize(rows: &[Row]) -> Summary {
    let mut abs: Vec<f64> = rows.iter().map(|r| r.error_percent().abs()).collect();
    abs.sort_by(f64::total_cmp);
    let median = if abs.is_empty() {
        0.0
    } else if abs.len() % 2 == 1 {
        abs[abs.len() / 2]
    } else {
        (abs[abs.len() / 2 - 1] + abs[abs.len() / 2]) / 2.0
    };
    let worst_row =
        rows.iter().max_by(|a, b| a.error_percent().abs().total_cmp(&b.error_percent().abs()));
    let mut architectures: Vec<String> = rows.iter().map(|r| r.architecture.clone()).collect();
    architectures.sort();
    architectures.dedup();
    Summary {
        median,
        worst: worst_row.map_or(0.0, |r| r.error_percent().abs()),
        worst_id: worst_row.map_or(String::new(), |r| r.id.clone()),
        cases: rows.len(),
        architectures,
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    writeln!(out, "| case | oracle GiB | predicted GiB | error | oracle phase | predicted phase |")
        .unwrap();
    writeln!(out, "|---|---:|---:|---:|---|---|").unwrap();
    for r in rows {
        writeln!(
            out,
            "| `{}` | {:.3} | {:.3} | {:+.2}% | {} | {} |",
            r.id,
            gib(r.oracle),
            gib(r.predicted),
            r.error_percent(),
            r.oracle_phase,
            r.predicted_phase
        )
        .unwrap();
    }
    out
}

#[test]
fn predictions_are_within_five_percent_of_the_oracle() {
    let rows = rows();
    assert!(!rows.is_empty(), "no oracle cases");
    let s = summarize(&rows);
    println!("{}", table(&rows));
    println!(
        "{} cases, {} architectures; median |error| {:.2}%, worst {:.2}% ({})",
        s.cases,
        s.architectures.len(),
        s.median,
        s.worst,
        s.worst_id
    );
    let failing: Vec<String> = rows
        .iter()
        .filter(|r| r.error_percent().abs() > TOLERANCE_PERCENT)
        .map(|r| format!("{} ({:+.2}%)", r.id, r.error_percent()))
        .collect();
    assert!(
        failing.is_empty(),
        "{} case(s) off by more than 5%:\n{}",
        failing.len(),
        failing.join("\n")
    );
}

#[track_caller]
fn check_within_tolerance(rows: &[Row]) {
    let failing: Vec<String> = rows
        .iter()
        .filter(|r| r.error_percent().abs() > TOLERANCE_PERCENT)
        .map(|r| format!("{} ({:+.2}%)", r.id, r.error_percent()))
        .collect();
    assert!(
        failing.is_empty(),
        "{} case(s) off by more than 5%:\n{}",
        failing.len(),
        failing.join("\n")
    );
}

/// The mixed-precision cases rerun with CUDA's autocast op lists: vramfit's model of those
/// lists (the part of `Target::Cuda` a CPU can check) meets the same 5% bar.
#[test]
fn cuda_autocast_rules_are_within_five_percent_of_the_oracle() {
    let rows = rows_from(RESULTS_CUDA_AUTOCAST, true);
    assert!(!rows.is_empty(), "no CUDA-autocast oracle cases");
    let s = summarize(&rows);
    println!("{}", table(&rows));
    println!(
        "{} CUDA-autocast cases; median |error| {:.2}%, worst {:.2}% ({})",
        s.cases, s.median, s.worst, s.worst_id
    );
    check_within_tolerance(&rows);
}

/// `cargo test -p vramfit-core --test validation -- --ignored` regenerates ACCURACY.md.
#[test]
#[ignore = "writes ACCURACY.md; run on demand"]
fn write_accuracy_md() {
    let rows = rows();
    let s = summarize(&rows);
    let mut doc = String::new();
    writeln!(doc, "# Accuracy of `vramfit estimate` against PyTorch\n").unwrap();
    writeln!(
        doc,
        "Generated by `cargo test -p vramfit-core --test validation -- --ignored` from\n\
         `validation/results.jsonl` (PyTorch's own MemTracker peak under FakeTensorMode, two\n\
         training iterations; see `validation/README.md`). Each case is estimated with\n\
         `Target::CpuOracle`; the test `predictions_are_within_five_percent_of_the_oracle`\n\
         fails when any case is off by more than 5%. The oracle's `forward` phase is the model\n\
         call including the loss, which vramfit reports separately as `loss`.\n"
    )
    .unwrap();
    writeln!(
        doc,
        "**{} cases, {} architectures ({}): median |error| {:.3}%, worst {:.2}%** (`{}`).\n",
        s.cases,
        s.architectures.len(),
        s.architectures.join(", "),
        s.median,
        s.worst,
        s.worst_id
    )
    .unwrap();
    doc.push_str(&table(&rows));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/ACCURACY.md");
    let previous = std::fs::read_to_string(path).unwrap_or_default();
    // Keep any hand-written sections after the generated table.
    let tail = previous.split_once("\n## ").map(|(_, t)| format!("\n## {t}")).unwrap_or_default();
    std::fs::write(path, doc + &tail).expect("write ACCURACY.md");
}
