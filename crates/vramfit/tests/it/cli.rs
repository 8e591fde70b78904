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
