//! `vramfit doctor` (being written).

use crate::{Failure, Outcome};

/// Arguments of `vramfit doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {}

/// Runs `vramfit doctor`.
pub fn run(_args: DoctorArgs) -> Result<Outcome, Failure> {
    Err(Failure::new("vramfit doctor is not built yet"))
}
