//! `vramfit check`: does the run fit? The estimate's flags; exit 0 when it fits, 1 when it
//! does not, 2 on an error — for launch scripts and CI. One line on stdout says why.

use std::io::Write;

use vramfit_core::Bytes;

use super::estimate::{self, Report, SetupArgs};
use crate::{Failure, Outcome};

/// Arguments of `vramfit check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub setup: SetupArgs,

    /// Print nothing: the exit code says it (0 fits, 1 does not, 2 error).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `vramfit check`.
pub fn run(args: CheckArgs) -> Result<Outcome, Failure> {
    if args.setup.gpu.is_none() {
        return Err(Failure::with_hint(
            "check needs a GPU to check against",
            "pass --gpu NAME (vramfit estimate --list-gpus) or a capacity such as --gpu 24GiB",
        ));
    }
    let report = estimate::compute(&args.setup, false)?;
    let (Report::Full { verdict, .. } | Report::StatesOnly { verdict, .. }) = &report;
    let Some(v) = verdict else {
        return Err(Failure::with_hint("no verdict without a GPU", "pass --gpu"));
    };
    if !args.quiet {
        let mut out = std::io::stdout().lock();
        let usable = Bytes(v.cuda_visible_bytes.saturating_sub(v.margin_bytes));
        let used = Bytes(v.device_used_bytes);
        let distance = Bytes(u64::try_from(v.headroom_bytes.unsigned_abs()).unwrap_or(u64::MAX));
        if v.fits {
            writeln!(out, "fits: {used} of {usable} usable on {}, {distance} headroom", v.gpu)?;
        } else {
            writeln!(
                out,
                "does not fit: {used} of {usable} usable on {}, {distance} over (`vramfit plan` with the same flags lists what would fit)",
                v.gpu
            )?;
        }
        out.flush()?;
    }
    Ok(if v.fits { Outcome::Success } else { Outcome::Negative })
}
