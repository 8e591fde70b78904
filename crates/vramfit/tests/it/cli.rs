//! Behaviour shared by all subcommands: help, version, usage errors.

use insta_cmd::{assert_cmd_snapshot, get_cargo_bin};
use std::process::Command;

pub fn vramfit() -> Command {
    let mut cmd = Command::new(get_cargo_bin("vramfit"));
    cmd.env("NO_COLOR", "1").env_remove("HF_HOME").env_remove("HF_HUB_CACHE");
    cmd
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
