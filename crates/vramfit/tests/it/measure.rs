//! Integration tests of `vramfit measure`: real child processes where no GPU is needed (exit
//! codes, NVML missing, a command that cannot start) and the synthetic replay fixtures for the
//! report (text, JSON, CSV, SVG) and the comparison with the estimate.

use std::path::PathBuf;
use std::process::Command;

use insta_cmd::assert_cmd_snapshot;

use crate::cli::vramfit;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../vramfit-measure/tests/fixtures")
}

/// `vramfit measure` in the fixtures folder, with NVML pointed at a file that does not exist
/// so a machine with a GPU behaves as one without.
fn measure() -> Command {
    let mut cmd = vramfit();
    cmd.arg("measure")
        .current_dir(fixtures())
        .env("VRAMFIT_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .env_remove("VRAMFIT_PROBE");
    cmd
}

const TRACE: &str = "synthetic-gpt2.trace.jsonl";
const PROBE: &str = "synthetic-gpt2.probe.jsonl";

#[test]
fn replay_with_probe_and_estimate_from_the_probe() {
    assert_cmd_snapshot!(measure().args(["--replay", TRACE, "--probe", PROBE, "--estimate"]));
}

#[test]
fn replay_with_estimate_from_flags_and_no_probe() {
    assert_cmd_snapshot!(measure().args([
        "--replay",
        TRACE,
        "--estimate",
        "--model",
        "gpt2",
        "-b",
        "4",
        "-s",
        "512",
    ]));
}

#[test]
fn replay_json_has_every_key_null_when_not_computed() {
    assert_cmd_snapshot!(measure().args(["--replay", TRACE, "--format", "json"]));
}

#[test]
fn replay_json_with_probe_and_estimate() {
    assert_cmd_snapshot!(measure().args([
        "--replay",
        TRACE,
        "--probe",
        PROBE,
        "--estimate",
        "--format",
        "json",
    ]));
}

#[test]
fn replay_writes_csv_json_and_chart() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("timeline.csv");
    let json = dir.path().join("report.json");
    let svg = dir.path().join("chart.svg");
    for (out, chart) in [(&csv, Some(&svg)), (&json, None)] {
        let mut cmd = measure();
        cmd.args(["--replay", TRACE, "--probe", PROBE, "--out"]).arg(out);
        if let Some(chart) = chart {
            cmd.arg("--chart").arg(chart);
        }
        let output = cmd.output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    }
    insta::assert_snapshot!("measure_timeline_csv", std::fs::read_to_string(&csv).unwrap());
    insta::assert_snapshot!("measure_chart_svg", std::fs::read_to_string(&svg).unwrap());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let timeline = report["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), 95);
    assert!(timeline.iter().all(|row| row["command_bytes"].is_u64()));
    assert!(timeline.last().unwrap()["probe_max_allocated_bytes"].is_u64());
}

#[test]
fn recorded_again_a_replay_gives_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.jsonl");
    let first = measure().args(["--replay", TRACE, "--record"]).arg(&copy).output().unwrap();
    let second = measure().arg("--replay").arg(&copy).output().unwrap();
    assert_eq!(first.status.code(), Some(0));
    assert_eq!(String::from_utf8(first.stdout).unwrap(), String::from_utf8(second.stdout).unwrap());
}

#[test]
fn the_traces_exit_code_is_passed_through() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixtures().join(TRACE)).unwrap();
    let trace = dir.path().join("exit3.jsonl");
    std::fs::write(&trace, text.replace("\"exit_code\": 0", "\"exit_code\": 3")).unwrap();
    let output = measure().arg("--replay").arg(&trace).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
}

/// The fake driver library built with the system's C compiler, or `None` (with a message)
/// where there is none.
fn fake_nvml(dir: &std::path::Path) -> Option<PathBuf> {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/fake_nvml.c");
    let lib = dir.join("libnvidia-ml-fake.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(&source)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        eprintln!("skipped: no C compiler (cc) to build the fake NVML library");
        return None;
    }
    Some(lib)
}

#[cfg(target_os = "linux")]
#[test]
fn a_live_run_through_nvml_accounts_for_the_process_tree() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = fake_nvml(dir.path()) else { return };
    let procs = dir.path().join("procs.txt");
    // pid 1 is another job on the card: never the command's. The command's shell, then a
    // child of it, take memory; the probe file is written where VRAMFIT_PROBE points.
    std::fs::write(&procs, "1 4294967296\n").unwrap();
    let probe = fixtures().join(PROBE);
    let script = format!(
        "printf '1 4294967296\\n%s 1073741824\\n' $$ > {p}; sleep 0.3; \
         sh -c 'printf \"1 4294967296\\n%s 1073741824\\n%s 2147483648\\n\" $PPID $$ > {p}; sleep 0.3'; \
         cp {probe} \"$VRAMFIT_PROBE\"; echo trained; exit 3",
        p = procs.display(),
        probe = probe.display()
    );
    let output = measure()
        .env("VRAMFIT_NVML_LIB", &lib)
        .env("VRAMFIT_FAKE_NVML_PROCS", &procs)
        .args(["--format", "json", "--interval-ms", "20", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    // The command's stdout went to stderr: stdout is the report alone.
    assert!(stderr.contains("trained"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let device = &report["devices"][0];
    assert_eq!(device["name"], "Fake NVML device");
    assert_eq!(device["command_peak_bytes"], 3u64 << 30, "{report}");
    assert_eq!(device["device_peak_used_bytes"], (7u64 << 30) + (100 << 20));
    let pids: Vec<u64> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{report}");
    assert!(!pids.contains(&1));
    assert_eq!(report["exit_code"], 3);
    assert_eq!(report["probe"]["steps"], 5);
}

#[test]
fn without_nvml_the_command_is_not_started() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let script = format!("touch {}", marker.display());
    assert_cmd_snapshot!(measure().args(["--", "sh", "-c", &script]), @r"
    success: false
    exit_code: 2
    ----- stdout -----

    ----- stderr -----
    error: cannot load NVML: /nonexistent/libnvidia-ml.so.1: cannot open shared object file: No such file or directory
    hint: measure needs an NVIDIA GPU and its driver (libnvidia-ml); pass --no-gpu-ok to run the command unmeasured, or --replay FILE to report a recorded trace
    ");
    assert!(!marker.exists());
}

#[test]
fn no_gpu_ok_runs_the_command_and_passes_its_exit_code() {
    assert_cmd_snapshot!(measure().args(["--no-gpu-ok", "--", "sh", "-c", "echo trained; exit 7"]), @r"
    success: false
    exit_code: 7
    ----- stdout -----
    trained

    ----- stderr -----
    warning: cannot load NVML: /nonexistent/libnvidia-ml.so.1: cannot open shared object file: No such file or directory: running the command unmeasured (--no-gpu-ok)
    ");
}

#[test]
fn ctrl_c_stops_the_command_not_vramfit() {
    // The command sends SIGINT to vramfit (its parent), as Ctrl-C sends it to both, then exits
    // on its own: vramfit is still there to pass its exit code on.
    let script = "kill -INT $PPID; sleep 0.3; exit 5";
    let output = measure().args(["--no-gpu-ok", "--", "sh", "-c", script]).output().unwrap();
    assert_eq!(output.status.code(), Some(5));
}

#[test]
fn a_signal_ends_with_128_plus_its_number() {
    let output = measure().args(["--no-gpu-ok", "--", "sh", "-c", "kill -9 $$"]).output().unwrap();
    assert_eq!(output.status.code(), Some(137));
}

#[test]
fn bad_input_is_one_error_line_a_hint_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let trace = std::fs::read_to_string(fixtures().join(TRACE)).unwrap();
    let probe = std::fs::read_to_string(fixtures().join(PROBE)).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let truncated = write("truncated.jsonl", lines[..lines.len() - 1].join("\n"));
    let future = write("future.jsonl", trace.replacen("\"version\": 1", "\"version\": 2", 1));
    let cut_probe = write("cut.probe.jsonl", probe[..probe.len() - 40].to_string());
    let old_probe = write("old.probe.jsonl", probe.replacen("\"version\": 1", "\"version\": 0", 1));
    let cases: Vec<Vec<String>> = vec![
        vec![],
        vec!["--replay".into(), TRACE.into(), "--".into(), "python".into()],
        vec!["--replay".into(), PROBE.into()],
        vec!["--replay".into(), "missing.jsonl".into()],
        vec!["--replay".into(), truncated],
        vec!["--replay".into(), future],
        vec!["--replay".into(), TRACE.into(), "--probe".into(), cut_probe],
        vec!["--replay".into(), TRACE.into(), "--probe".into(), old_probe],
        vec!["--replay".into(), TRACE.into(), "--probe".into(), "missing.jsonl".into()],
        vec!["--replay".into(), TRACE.into(), "--estimate".into()],
        vec!["--replay".into(), TRACE.into(), "--out".into(), "report.txt".into()],
        vec!["--interval-ms".into(), "0".into(), "--".into(), "true".into()],
        vec!["--no-gpu-ok".into(), "--".into(), "no-such-program-vramfit".into()],
        vec!["--estimate".into(), "--model".into(), "gpt-5".into(), "--".into(), "true".into()],
    ];
    let mut transcript = String::new();
    for args in cases {
        let output = measure().args(&args).output().unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        let stderr = stderr.replace(&dir.path().display().to_string(), "TMP");
        transcript.push_str(&format!(
            "$ vramfit measure {}\nexit {}\n{stderr}\n",
            args.join(" ").replace(&dir.path().display().to_string(), "TMP"),
            output.status.code().unwrap_or(-1)
        ));
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert_eq!(stderr.lines().filter(|l| l.starts_with("error: ")).count(), 1, "{stderr}");
        assert_eq!(stderr.lines().filter(|l| l.starts_with("hint: ")).count(), 1, "{stderr}");
    }
    insta::assert_snapshot!(transcript);
}
