//! Proof of accuracy: every case the PyTorch oracle measured (`validation/results.jsonl`) is
//! estimated with `Device::CPU_ORACLE`, and the test fails when any prediction is off by more
//! than 5% of the oracle's peak. It prints the table and the median and worst error; the
//! ignored test `write_accuracy_md` writes the same table to `ACCURACY.md`.

use std::fmt::Write as _;

use vramfit_core::estimate_on;
use vramfit_core::oracle_case::OracleCase;

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

const RESULTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/results.jsonl");
const RESULTS_CUDA_AUTOCAST: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/results-cuda-autocast.jsonl");

fn rows() -> Vec<Row> {
    rows_from(RESULTS)
}

/// Every case of a results file, estimated on the device the case ran on.
fn rows_from(path: &str) -> Vec<Row> {
    let text = std::fs::read_to_string(path).expect("oracle results are committed");
    OracleCase::parse_lines(&text)
        .expect("oracle results parse")
        .iter()
        .map(|case| {
            let spec = case.spec().expect("spec");
            let setup = case.setup().expect("setup");
            let device = case.device().expect("device");
            let e = estimate_on(&spec, &setup, &device)
                .unwrap_or_else(|err| panic!("{}: {err}", case.id));
            Row {
                id: case.id.clone(),
                architecture: case.architecture.clone(),
                oracle: case.peak_bytes,
                predicted: e.peak_allocated.get(),
                oracle_phase: case.peak_phase.clone(),
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
        f64::midpoint(abs[abs.len() / 2 - 1], abs[abs.len() / 2])
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
/// lists (the part of `Device::CUDA` a CPU can check) meets the same 5% bar.
#[test]
fn cuda_autocast_rules_are_within_five_percent_of_the_oracle() {
    let rows = rows_from(RESULTS_CUDA_AUTOCAST);
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
         `Device::CPU_ORACLE`; the test `predictions_are_within_five_percent_of_the_oracle`\n\
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

/// The size of the CUDA-vs-oracle differences quoted in ACCURACY.md, printed with
/// `cargo test -p vramfit-core --test validation device_differences -- --nocapture`. It checks
/// that the two devices really differ where ACCURACY.md says the mechanisms bite.
#[test]
fn device_differences() {
    use vramfit_core::{Device, ModelSpec, TrainSetup, catalog};
    let cases: &[(&str, u64, u64, &str, &str, &str)] = &[
        ("roberta-base", 16, 512, "fp32", "adamw", "sdpa"),
        ("gpt2", 8, 1024, "bf16-mixed", "adamw", "sdpa"),
        ("gpt2", 4, 512, "bf16-mixed", "adamw", "eager"),
        ("bert-base-uncased", 32, 128, "fp32", "adamw", "eager"),
        ("llama-3.2-1b", 1, 1024, "bf16-mixed", "adamw", "sdpa"),
        ("llama-3.1-8b", 1, 4096, "bf16-mixed", "adamw", "sdpa"),
    ];
    println!("| case | CPU oracle | CUDA | difference |\n|---|---:|---:|---:|");
    for &(model, micro_batch, seq_len, precision, optimizer, attention) in cases {
        let spec = ModelSpec::from_hf_config(catalog::config_json(model).expect("catalog"))
            .expect("parses");
        let setup = TrainSetup {
            micro_batch,
            seq_len,
            precision: precision.parse().expect("precision"),
            optimizer: optimizer.parse().expect("optimizer"),
            attention: attention.parse().expect("attention"),
            ..TrainSetup::default()
        };
        let peak = |d: &Device| estimate_on(&spec, &setup, d).expect("estimate").peak_allocated;
        let (cpu, cuda) = (peak(&Device::CPU_ORACLE), peak(&Device::CUDA));
        assert_ne!(cpu, cuda, "{model}: the devices' mechanisms should change the peak");
        println!(
            "| {model} b{micro_batch} s{seq_len} {precision} {optimizer} {attention} | {:.3} | {:.3} | {:+.1}% |",
            cpu.gib(),
            cuda.gib(),
            (cuda.gib() / cpu.gib() - 1.0) * 100.0
        );
    }
}
