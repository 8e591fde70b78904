//! `vramfit estimate` (being written).

use crate::{Failure, Outcome};

/// Arguments of `vramfit estimate`.
#[derive(Debug, clap::Args)]
pub struct EstimateArgs {}

/// Runs `vramfit estimate`.
pub fn run(_args: EstimateArgs) -> Result<Outcome, Failure> {
    Err(Failure::new("vramfit estimate is not built yet"))
}
