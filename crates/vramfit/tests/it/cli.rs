//! Behaviour shared by all subcommands: help, version, usage errors.

use insta_cmd::{assert_cmd_snapshot, get_cargo_bin};
use std::process::Command;

pub fn vramfit() -> Command {
    let mut cmd = Command::new(get_cargo_bin("vramfit"));
    cmd.env("NO_COLOR", "1").env_remove("HF_HOME").env_remove("HF_HUB_CACHE");
    cmd
}

/// `vramfit estimate ARGS` on bad input: exit 2, nothing on stdout, one `error:` line and one
/// `hint:` line on stderr, no panic. Returns that stderr for a transcript.
pub fn estimate_error<S: AsRef<std::ffi::OsStr>>(what: &str, args: &[S]) -> String {
    let output = vramfit().arg("estimate").args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{what}: {stderr}");
    assert!(output.stdout.is_empty(), "{what}: printed to stdout");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines.len() == 2 && lines[0].starts_with("error: ") && lines[1].starts_with("hint: "),
        "{what}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    stderr
}

/// `vramfit estimate ARGS --format json`, parsed; the command must give a verdict (exit 0 or
/// 1), not an error.
pub fn estimate_json(args: &[&str]) -> serde_json::Value {
    let output = vramfit().arg("estimate").args(args).args(["--format", "json"]).output().unwrap();
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("valid JSON")
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let output = vramfit().arg("frobnicate").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn version_prints() {
    assert_cmd_snapshot!(vramfit().arg("--version"), @r"
    success: true
    exit_code: 0
    ----- stdout -----
    vramfit 0.1.0

    ----- stderr -----
    ");
}

#[test]
fn completions_for_every_shell_name_the_subcommands() {
    for (shell, marker) in [
        ("bash", "complete -F _vramfit"),
        ("zsh", "#compdef vramfit"),
        ("fish", "complete -c vramfit"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let output = vramfit().args(["completions", shell]).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{shell}");
        let script = String::from_utf8(output.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for subcommand in ["estimate", "doctor", "lint", "measure"] {
            assert!(script.contains(subcommand), "{shell}: no {subcommand}");
        }
    }
}

#[test]
fn unknown_shell_is_a_usage_error() {
    let output = vramfit().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn man_page_is_roff_with_every_subcommand() {
    let output = vramfit().arg("man").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let page = String::from_utf8(output.stdout).unwrap();
    assert!(page.contains(".TH vramfit 1"), "{page}");
    for subcommand in ["estimate", "doctor", "lint", "rule", "measure", "completions"] {
        assert!(page.contains(subcommand), "no {subcommand} in the man page");
    }
}

/// Every error, whichever subcommand meets it, is one `error:` line, one `hint:` line and exit
/// code 2: missing inputs, unwritable outputs, missing configuration.
#[test]
fn every_error_path_has_a_hint() {
    let fixtures = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../vramfit-doctor/tests/fixtures");
    let snapshot = fixtures.join("snapshots/oom_fragmented.pickle");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("doctor: a missing log", vec!["doctor".into(), "missing.log".into()]),
        ("doctor: a directory", vec!["doctor".into(), ".".into()]),
        (
            "doctor: --svg in a missing folder",
            vec![
                "doctor".into(),
                snapshot.display().to_string(),
                "--svg".into(),
                "/nonexistent/x.svg".into(),
            ],
        ),
        (
            "doctor: --gpu without a unit",
            vec!["doctor".into(), "--params".into(), "1B".into(), "--gpu".into(), "24".into()],
        ),
        ("lint: --config missing", vec!["lint".into(), "--config".into(), "missing.toml".into()]),
        ("lint: a missing path", vec!["lint".into(), "missing.py".into()]),
        (
            "estimate: --svg in a missing folder",
            vec![
                "estimate".into(),
                "--model".into(),
                "gpt2".into(),
                "--svg".into(),
                "/nonexistent/x.svg".into(),
            ],
        ),
        (
            "estimate: a missing config.json",
            vec!["estimate".into(), "--model".into(), "missing/config.json".into()],
        ),
    ];
    let mut transcript = String::new();
    for (what, args) in cases {
        let output = vramfit()
            .current_dir(dir.path())
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr)
            .replace(fixtures.to_str().unwrap(), "[FIXTURES]");
        assert_eq!(output.status.code(), Some(2), "{what}: {stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("warning: ")).collect();
        assert!(
            lines.len() == 2 && lines[0].starts_with("error: ") && lines[1].starts_with("hint: "),
            "{what}: {stderr}"
        );
        let command = args.join(" ").replace(fixtures.to_str().unwrap(), "[FIXTURES]");
        transcript.push_str(&format!("# vramfit {command}\n{stderr}"));
    }
    insta::assert_snapshot!(transcript);
}
