//! `vramfit lint` and `vramfit rule` (being written).

use crate::{Failure, Outcome};

/// Arguments of `vramfit lint`.
#[derive(Debug, clap::Args)]
pub struct LintArgs {}

/// Arguments of `vramfit rule`.
#[derive(Debug, clap::Args)]
pub struct RuleArgs {}

/// Runs `vramfit lint`.
pub fn run(_args: LintArgs) -> Result<Outcome, Failure> {
    Err(Failure::new("vramfit lint is not built yet"))
}

/// Runs `vramfit rule`.
pub fn run_rule(_args: RuleArgs) -> Result<Outcome, Failure> {
    Err(Failure::new("vramfit rule is not built yet"))
}
