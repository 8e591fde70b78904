//! Integration tests of `vramfit lint` and `vramfit rule`: whole terminal sessions.

use std::path::Path;

use insta_cmd::assert_cmd_snapshot;

use crate::cli::vramfit;

const TRAIN: &str = "\
import torch
from torch.utils.checkpoint import checkpoint

total_loss = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    total_loss += loss
    h = checkpoint(block, x)
";

/// A project directory with `files` (path, content); returns the temp dir.
fn project(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    dir
}

fn lint_in(dir: &Path) -> std::process::Command {
    let mut cmd = vramfit();
    cmd.current_dir(dir).arg("lint");
    cmd
}

#[test]
fn findings_exit_1_with_source_and_caret() {
    let dir = project(&[("train.py", TRAIN.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()).arg("train.py"));
}

#[test]
fn clean_file_exits_0() {
    let dir = project(&[("ok.py", b"total = 0\nfor x in data:\n    total += model(x).item()\n")]);
    assert_cmd_snapshot!(lint_in(dir.path()));
}

#[test]
fn json_format() {
    let dir = project(&[("train.py", TRAIN.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--format", "json", "train.py"]));
}

#[test]
fn sarif_format() {
    let dir = project(&[("train.py", TRAIN.as_bytes())]);
    let output = lint_in(dir.path()).args(["--format", "sarif", "train.py"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let log: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(log["version"], "2.1.0");
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["ruleId"], "MEM101");
    assert_eq!(results[0]["locations"][0]["physicalLocation"]["region"]["startLine"], 10);
    assert!(log["runs"][0]["tool"]["driver"]["rules"].as_array().unwrap().len() >= 20);
}

#[test]
fn github_format() {
    let dir = project(&[("train.py", TRAIN.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--format", "github", "train.py"]));
}

#[test]
fn fix_applies_safe_fixes_only() {
    let dir = project(&[("train.py", TRAIN.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--fix", "--format", "concise"]));
    let fixed = std::fs::read_to_string(dir.path().join("train.py")).unwrap();
    assert!(fixed.contains("checkpoint(block, x, use_reentrant=False)"));
    assert!(fixed.contains("total_loss += loss\n"));
}

#[test]
fn unsafe_fixes_apply_item() {
    let dir = project(&[("train.py", TRAIN.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()).arg("--unsafe-fixes"));
    let fixed = std::fs::read_to_string(dir.path().join("train.py")).unwrap();
    assert!(fixed.contains("total_loss += loss.item()"));
}

#[test]
fn deprecated_amp_import_is_fixed_with_its_calls() {
    let code = "from torch.cuda.amp import GradScaler, autocast\nscaler = GradScaler()\nwith autocast(enabled=True):\n    pass\n";
    let dir = project(&[("amp.py", code.as_bytes())]);
    let output = lint_in(dir.path()).arg("--fix").output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stdout));
    let fixed = std::fs::read_to_string(dir.path().join("amp.py")).unwrap();
    assert_eq!(
        fixed,
        "from torch.amp import GradScaler, autocast\nscaler = GradScaler(\"cuda\")\nwith autocast(\"cuda\", enabled=True):\n    pass\n"
    );
}

#[test]
fn pyproject_settings_apply() {
    let pyproject = b"[tool.vramfit.lint]\nignore = [\"MEM505\"]\nper-file-ignores = { \"scripts/*\" = [\"MEM101\"] }\n";
    let dir = project(&[
        ("pyproject.toml", pyproject),
        ("train.py", TRAIN.as_bytes()),
        ("scripts/other.py", TRAIN.as_bytes()),
    ]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--format", "concise"]));
}

#[test]
fn bad_config_is_an_error() {
    let dir = project(&[
        ("pyproject.toml", b"[tool.vramfit.lint]\nselect = [\"NOPE9\"]\n"),
        ("a.py", b""),
    ]);
    assert_cmd_snapshot!(lint_in(dir.path()));
}

#[test]
fn gitignored_files_are_skipped() {
    let dir = project(&[
        (".gitignore", b"build/\n"),
        ("build/gen.py", TRAIN.as_bytes()),
        ("ok.py", b"x = 1\n"),
    ]);
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    assert_cmd_snapshot!(lint_in(dir.path()));
}

#[test]
fn bad_input_is_reported_and_skipped() {
    let long_line = format!("x = '{}'\n", "a".repeat(10 << 20));
    let dir = project(&[
        ("binary.py", b"\x00\x01\x02"),
        ("latin.py", b"x = '\xe9'\n"),
        ("broken.ipynb", b"{ not json"),
        ("long.py", long_line.as_bytes()),
        ("train.py", TRAIN.as_bytes()),
    ]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--format", "concise"]));
}

#[test]
fn nothing_lintable_exits_2() {
    let dir = project(&[("binary.py", b"\x00\x01\x02")]);
    assert_cmd_snapshot!(lint_in(dir.path()));
}

const BROKEN: &str = "def broken(:\n    pass\ntotal = 0\nfor x in data:\n    loss = criterion(model(x))\n    loss.backward()\n    total += loss\n";

#[test]
fn syntax_errors_are_reported_and_the_rest_checked() {
    let dir = project(&[("broken.py", BROKEN.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--format", "concise"]));
}

#[test]
fn a_file_that_does_not_parse_is_a_finding_in_text() {
    let dir = project(&[("broken.py", b"def broken(:\n    pass\n")]);
    assert_cmd_snapshot!(lint_in(dir.path()).arg("broken.py"));
}

#[test]
fn a_file_that_does_not_parse_is_a_finding_in_json() {
    let dir = project(&[("broken.py", BROKEN.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--format", "json", "broken.py"]));
}

#[test]
fn a_file_that_does_not_parse_is_a_finding_in_github() {
    let dir = project(&[("broken.py", BROKEN.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--format", "github", "broken.py"]));
}

#[test]
fn a_file_that_does_not_parse_is_a_finding_in_sarif() {
    let dir = project(&[("broken.py", b"def broken(:\n    pass\n")]);
    let output = lint_in(dir.path()).args(["--format", "sarif", "broken.py"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let log: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let run = &log["runs"][0];
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{results:#?}");
    for result in results {
        assert_eq!(result["ruleId"], "syntax-error");
        assert_eq!(result["level"], "error");
        let index = usize::try_from(result["ruleIndex"].as_u64().unwrap()).unwrap();
        assert_eq!(run["tool"]["driver"]["rules"][index]["id"], "syntax-error");
    }
    assert!(results[0]["message"]["text"].as_str().unwrap().starts_with("SyntaxError: "));
    assert_eq!(results[0]["locations"][0]["physicalLocation"]["region"]["startLine"], 1);
    assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn a_syntax_error_cannot_be_suppressed_or_deselected() {
    let dir = project(&[("broken.py", b"x = (1,  # noqa\n")]);
    let output =
        lint_in(dir.path()).args(["--select", "MEM502", "--format", "concise"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.starts_with("broken.py:"), "{stdout}");
    assert!(stdout.contains(": SyntaxError: "), "{stdout}");
}

#[test]
fn an_empty_directory_says_nothing_was_linted() {
    let dir = project(&[]);
    assert_cmd_snapshot!(lint_in(dir.path()));
}

#[test]
fn a_directory_without_python_files_says_nothing_was_linted() {
    let dir = project(&[("docs/README.md", b"# notes\n"), ("data/train.csv", b"a,b\n")]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--format", "json", "data", "docs"]));
}

#[test]
fn notebook_positions_name_the_cell() {
    let notebook = r#"{"cells": [
        {"cell_type": "markdown", "source": ["Training"]},
        {"cell_type": "code", "source": ["import torch\n", "total = 0"]},
        {"cell_type": "code", "source": ["for x, y in loader:\n", "    loss = criterion(model(x), y)\n", "    loss.backward()\n", "    total += loss\n"]}
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"#;
    let dir = project(&[("train.ipynb", notebook.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()));
}

/// The lint crate's fixture notebook (nbformat layout; MEM303, MEM405, MEM505 and MEM101).
const NOTEBOOK: &str = include_str!("../../../vramfit-lint/tests/notebooks/fixable.ipynb");

#[test]
fn fix_rewrites_notebook_cells() {
    let dir = project(&[("train.ipynb", NOTEBOOK.as_bytes())]);
    assert_cmd_snapshot!(lint_in(dir.path()).args(["--fix", "--format", "concise"]));
    let fixed = std::fs::read_to_string(dir.path().join("train.ipynb")).unwrap();
    assert_ne!(fixed, NOTEBOOK);
    assert!(fixed.contains("\"        h = checkpoint(block, x, use_reentrant=False)\\n\",\n"));
    assert!(fixed.contains("\"    total += loss  # température moyenne\"\n"));
    assert_eq!(fixed.lines().count(), NOTEBOOK.lines().count());
    let output = lint_in(dir.path())
        .args(["--select", "MEM303,MEM405,MEM505", "train.ipynb"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stdout));
}

#[test]
fn rule_prints_its_documentation() {
    assert_cmd_snapshot!(vramfit().args(["rule", "MEM101"]));
}

#[test]
fn rule_lists_all_rules() {
    assert_cmd_snapshot!(vramfit().arg("rule"));
}

#[test]
fn unknown_rule_is_an_error() {
    assert_cmd_snapshot!(vramfit().args(["rule", "MEM999"]));
}

/// The progress line is for terminals only: on a pipe (as here) stderr stays empty, with or
/// without `--quiet`.
#[test]
fn no_progress_on_a_pipe_or_with_quiet() {
    let files: Vec<(String, &[u8])> =
        (0..400).map(|i| (format!("pkg/m{i}.py"), TRAIN.as_bytes())).collect();
    let files: Vec<(&str, &[u8])> = files.iter().map(|(p, c)| (p.as_str(), *c)).collect();
    let dir = project(&files);
    for quiet in [false, true] {
        let mut cmd = lint_in(dir.path());
        cmd.args(["--format", "concise"]);
        if quiet {
            cmd.arg("--quiet");
        }
        let output = cmd.output().unwrap();
        assert_eq!(output.status.code(), Some(1));
        assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
    }
}
